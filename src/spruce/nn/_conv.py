"""Conv1d/2d/3d and ConvTranspose1d/2d/3d (PyTorch's arguments, names and weight layouts)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from .._module import Module, field
from ._common import as_tuple, check_key, check_rank, check_size, compute_dtype, default_float_dtype, uniform

Pairs = tuple[tuple[int, int], ...]

# PyTorch's padding_mode -> jnp.pad's mode.
_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
_SPATIAL = ("(C, L)", "(C, H, W)", "(C, D, H, W)")


def _padding(padding: Any, n: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
             stride: tuple[int, ...], layer: str, allow_strings: bool = True) -> Pairs:
    """PyTorch's ``padding`` (int, n-tuple, ``'same'``, ``'valid'``) or per-side pairs
    ``((lo, hi), ...)`` as n ``(lo, hi)`` pairs."""
    if isinstance(padding, str):
        if not allow_strings or padding not in ("same", "valid"):
            allowed = "'same', 'valid', " if allow_strings else ""
            raise ValueError(
                f"{layer}: padding must be {allowed}an int, a tuple of {n} ints or of {n} (low, high) pairs, got {padding!r}"
            )
        if padding == "valid":
            return ((0, 0),) * n
        if any(s != 1 for s in stride):
            raise ValueError(f"{layer}: padding='same' needs stride 1 (as in PyTorch), got stride={stride}")
        pairs = []
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)
            pairs.append((total // 2, total - total // 2))  # the extra element on the high side, as PyTorch
        return tuple(pairs)
    if isinstance(padding, int) and not isinstance(padding, bool):
        items: Sequence[Any] = (padding,) * n
    else:
        try:
            items = tuple(padding)
        except TypeError:
            items = ()
        if len(items) != n:
            raise ValueError(f"{layer}: padding must be an int, a tuple of {n} ints or of {n} (low, high) pairs, got {padding!r}")
    out = []
    for item in items:
        pair = (
            (item, item) if isinstance(item, int) and not isinstance(item, bool)
            else tuple(item) if isinstance(item, (tuple, list))
            else None
        )
        if pair is None or len(pair) != 2 or any(isinstance(p, bool) or not isinstance(p, int) for p in pair):
            raise TypeError(f"{layer}: padding must be an int, a tuple of {n} ints or of {n} (low, high) pairs, got {padding!r}")
        if pair[0] < 0 or pair[1] < 0:
            raise ValueError(f"{layer}: padding must be >= 0, got {padding!r}")
        out.append((int(pair[0]), int(pair[1])))
    return tuple(out)


def _init(
    key: jax.Array, wshape: tuple[int, ...], out_channels: int, use_bias: bool, dtype: Any
) -> tuple[jax.Array, jax.Array | None]:
    """PyTorch's default: ``kaiming_uniform_(a=sqrt(5))`` for the weight, i.e. bound
    ``1/sqrt(fan_in)``, and the same bound for the bias; ``fan_in = wshape[1] * prod(kernel)``."""
    fan_in = wshape[1] * math.prod(wshape[2:])
    lim = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    wkey, bkey = jax.random.split(key, 2)
    weight = uniform(wkey, wshape, dtype, lim)  # complex: real and imaginary parts each uniform
    bias = uniform(bkey, (out_channels,), dtype, lim) if use_bias else None
    return weight, bias


def _check_channels(in_channels: int, out_channels: int, groups: int, layer: str) -> None:
    check_size(in_channels, "in_channels", layer)
    check_size(out_channels, "out_channels", layer)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{layer}: groups must be an int >= 1, got {groups!r}")
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{layer}: in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
            f"divisible by groups ({groups})"
        )


def _prepare(layer: Any, x: Any, name: str) -> tuple[jax.Array, Any]:
    """Check the input ``(C, *spatial)`` and cast it and the weight's dtype to the compute dtype."""
    n = layer._ndim
    x = jnp.asarray(x)
    check_rank(x, n + 1, name, _SPATIAL[n - 1])
    if x.shape[0] != layer.in_channels:
        raise ValueError(f"{name}: expected {layer.in_channels} input channels (axis 0), got shape {x.shape}")
    dtype = compute_dtype(x.dtype, layer.weight.dtype)
    return x.astype(dtype), dtype


def _check_out_size(layer: Any, size: tuple[int, ...], out: tuple[int, ...]) -> None:
    """Raise ValueError naming the layer when an output spatial size ``out`` (computed with
    PyTorch's formula from the input spatial ``size``) is not positive."""
    if all(o > 0 for o in out):
        return
    span = tuple(d * (k - 1) + 1 for k, d in zip(layer.kernel_size, layer.dilation))
    raise ValueError(
        f"{type(layer).__name__}: the input size {size} gives the output size {out}, which must be "
        f"positive: the effective kernel size {span} (kernel_size {layer.kernel_size}, dilation "
        f"{layer.dilation}) with padding {layer.padding} (low, high) and stride {layer.stride} "
        f"needs a larger input"
    )


def _add_bias(y: jax.Array, bias: jax.Array | None, dtype: Any) -> jax.Array:
    if bias is None:
        return y
    return y + bias.astype(dtype).reshape((-1,) + (1,) * (y.ndim - 1))


class _Conv(Module):
    """Shared implementation of Conv1d/2d/3d; the docstring is Conv2d's."""

    weight: jax.Array
    bias: jax.Array | None
    in_channels: int = field(static=True)
    out_channels: int = field(static=True)
    kernel_size: tuple[int, ...] = field(static=True)
    stride: tuple[int, ...] = field(static=True)
    padding: Pairs = field(static=True)
    dilation: tuple[int, ...] = field(static=True)
    groups: int = field(static=True)
    use_bias: bool = field(static=True)
    padding_mode: str = field(static=True)

    _ndim = 0  # number of spatial axes (a class attribute, not a field)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: str | int | Sequence[int] | Sequence[tuple[int, int]] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        padding_mode: str = "zeros",
        dtype: Any = None,
        *,
        key: jax.Array,
    ) -> None:
        name, n = type(self).__name__, self._ndim
        _check_channels(in_channels, out_channels, groups, name)
        key = check_key(key, name)
        self.kernel_size = as_tuple(kernel_size, n, "kernel_size", name, minimum=1)
        self.stride = as_tuple(stride, n, "stride", name, minimum=1)
        self.dilation = as_tuple(dilation, n, "dilation", name, minimum=1)
        self.padding = _padding(padding, n, self.kernel_size, self.dilation, self.stride, name)
        if padding_mode != "zeros" and padding_mode not in _PAD_MODES:
            raise ValueError(f"{name}: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got {padding_mode!r}")
        wshape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight, self.bias = _init(key, wshape, out_channels, use_bias, default_float_dtype(dtype))
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.groups = groups
        self.use_bias = bool(use_bias)
        self.padding_mode = padding_mode

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x, dtype = _prepare(self, x, type(self).__name__)
        _check_out_size(self, x.shape[1:], tuple(
            (size + lo + hi - d * (kk - 1) - 1) // s + 1
            for size, kk, s, d, (lo, hi) in zip(x.shape[1:], self.kernel_size, self.stride, self.dilation, self.padding)
        ))
        pads: Pairs = self.padding
        if self.padding_mode != "zeros":
            x = jnp.pad(x, ((0, 0),) + pads, mode=_PAD_MODES[self.padding_mode])
            pads = ((0, 0),) * self._ndim
        y = lax.conv_general_dilated(
            x[None], self.weight.astype(dtype), window_strides=self.stride, padding=pads,
            rhs_dilation=self.dilation, feature_group_count=self.groups,
        )[0]
        return _add_bias(y, self.bias, dtype)


_CONV_DOC = """A {n}-d convolution (cross-correlation) of one example, as ``torch.nn.Conv{n}d``.

    Args:
      in_channels, out_channels: channel counts (both divisible by ``groups``, ValueError
        otherwise).
      kernel_size, stride, dilation: an int or a tuple of {n} ints (>= 1).
      padding: an int or a tuple of {n} ints (zeros on both sides of each spatial axis), a tuple
        of {n} ``(low, high)`` pairs, ``'valid'`` (none) or ``'same'`` (output as long as the
        input; needs stride 1; an odd total puts the extra element on the high side, as PyTorch).
      groups: blocked connections from input to output channels (``groups == in_channels`` is a
        depthwise convolution).
      use_bias: whether to add ``bias``.
      padding_mode: ``'zeros'``, ``'reflect'``, ``'replicate'`` or ``'circular'`` (PyTorch's
        names; the non-zero modes pad the input with ``jnp.pad``'s reflect / edge / wrap).
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only, required); ``wkey, bkey = jax.random.split(key)``.

    Fields: ``weight`` of shape ``(out_channels, in_channels // groups, *kernel_size)`` and
    ``bias`` ``(out_channels,)`` or None — PyTorch's names and layout, so a state dict loads by
    name; the arguments are static fields (``padding`` stored as ``(low, high)`` pairs).

    Initialisation: PyTorch's, ``uniform(-b, b)`` with ``b = 1/sqrt(fan_in)`` and ``fan_in =
    in_channels // groups * prod(kernel_size)`` for the weight (``kaiming_uniform_(a=sqrt(5))``)
    and the bias.

    Call: ``conv(x, *, key=None)`` with ``x`` of shape ``{layout}`` (channels first, one example;
    batch with ``jax.vmap``), returns ``(out_channels, *out_spatial)`` with ``out = (in + low +
    high - dilation * (kernel - 1) - 1) // stride + 1`` per axis, computed with
    ``jax.lax.conv_general_dilated`` in the promoted dtype of x and the parameters (cast
    explicitly, so it also runs under ``jax_numpy_dtype_promotion='strict'``).  ``key`` is
    ignored.  Raises ValueError for a wrong rank or channel count, or an input too small for
    the (dilated) kernel, i.e. an output size below 1 (as PyTorch).
    """

_CONV_EXAMPLE = {
    1: """
    >>> import jax, jax.numpy as jnp
    >>> conv = Conv1d(2, 4, kernel_size=3, padding='same', key=jax.random.key(0))
    >>> conv.weight.shape, conv(jnp.ones((2, 10))).shape
    ((4, 2, 3), (4, 10))
    """,
    2: """
    >>> import jax, jax.numpy as jnp
    >>> conv = Conv2d(3, 8, kernel_size=(3, 1), stride=(2, 1), key=jax.random.key(0))
    >>> conv.weight.shape, conv(jnp.ones((3, 9, 4))).shape
    ((8, 3, 3, 1), (8, 4, 4))
    """,
    3: """
    >>> import jax, jax.numpy as jnp
    >>> conv = Conv3d(1, 2, kernel_size=2, key=jax.random.key(0))
    >>> conv(jnp.ones((1, 3, 3, 3))).shape
    (2, 2, 2, 2)
    """,
}


class Conv1d(_Conv, init=False):
    _ndim = 1


class Conv2d(_Conv, init=False):
    _ndim = 2


class Conv3d(_Conv, init=False):
    _ndim = 3


_cls: Any
for _cls in (Conv1d, Conv2d, Conv3d):
    _n = _cls._ndim
    _cls.__doc__ = _CONV_DOC.format(n=_n, layout=_SPATIAL[_n - 1]) + _CONV_EXAMPLE[_n]


class _ConvTranspose(Module):
    """Shared implementation of ConvTranspose1d/2d/3d; the docstring is generated below."""

    weight: jax.Array
    bias: jax.Array | None
    in_channels: int = field(static=True)
    out_channels: int = field(static=True)
    kernel_size: tuple[int, ...] = field(static=True)
    stride: tuple[int, ...] = field(static=True)
    padding: Pairs = field(static=True)
    output_padding: tuple[int, ...] = field(static=True)
    dilation: tuple[int, ...] = field(static=True)
    groups: int = field(static=True)
    use_bias: bool = field(static=True)
    padding_mode: str = field(static=True)

    _ndim = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | Sequence[tuple[int, int]] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        use_bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        dtype: Any = None,
        *,
        key: jax.Array,
    ) -> None:
        name, n = type(self).__name__, self._ndim
        _check_channels(in_channels, out_channels, groups, name)
        key = check_key(key, name)
        self.kernel_size = as_tuple(kernel_size, n, "kernel_size", name, minimum=1)
        self.stride = as_tuple(stride, n, "stride", name, minimum=1)
        self.dilation = as_tuple(dilation, n, "dilation", name, minimum=1)
        self.padding = _padding(padding, n, self.kernel_size, self.dilation, self.stride, name, allow_strings=False)
        self.output_padding = as_tuple(output_padding, n, "output_padding", name)
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if op >= max(s, d):
                raise ValueError(
                    f"{name}: output_padding must be smaller than stride or dilation (as in "
                    f"PyTorch), got output_padding={self.output_padding}, stride={self.stride}, "
                    f"dilation={self.dilation}"
                )
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported (as in PyTorch), got {padding_mode!r}")
        wshape = (in_channels, out_channels // groups) + self.kernel_size
        self.weight, self.bias = _init(key, wshape, out_channels, use_bias, default_float_dtype(dtype))
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.groups = groups
        self.use_bias = bool(use_bias)
        self.padding_mode = padding_mode

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x, dtype = _prepare(self, x, type(self).__name__)
        _check_out_size(self, x.shape[1:], tuple(
            (size - 1) * s - lo - hi + d * (kk - 1) + op + 1
            for size, kk, s, d, (lo, hi), op in zip(
                x.shape[1:], self.kernel_size, self.stride, self.dilation, self.padding, self.output_padding)
        ))
        n, g = self._ndim, self.groups
        # The gradient of a convolution: dilate the input by the stride, pad by
        # dilation * (kernel - 1) minus the padding, and correlate with the spatially flipped
        # kernel whose in / out axes are swapped within each group.
        w = self.weight.astype(dtype)
        k = self.kernel_size
        w = w.reshape((g, self.in_channels // g, self.out_channels // g) + k)
        w = jnp.swapaxes(w, 1, 2).reshape((self.out_channels, self.in_channels // g) + k)
        w = jnp.flip(w, axis=tuple(range(2, 2 + n)))
        pads = tuple(
            (d * (kk - 1) - lo, d * (kk - 1) - hi + op)
            for kk, d, (lo, hi), op in zip(k, self.dilation, self.padding, self.output_padding)
        )
        y = lax.conv_general_dilated(
            x[None], w, window_strides=(1,) * n, padding=pads, lhs_dilation=self.stride,
            rhs_dilation=self.dilation, feature_group_count=g,
        )[0]
        return _add_bias(y, self.bias, dtype)


_CONVT_DOC = """A {n}-d transposed convolution of one example, as ``torch.nn.ConvTranspose{n}d``
    (the gradient of Conv{n}d with respect to its input; sometimes called a deconvolution).

    Args:
      in_channels, out_channels: channel counts (both divisible by ``groups``).
      kernel_size, stride, dilation: an int or a tuple of {n} ints (>= 1).
      padding: an int, a tuple of {n} ints, or {n} ``(low, high)`` pairs: ``dilation *
        (kernel_size - 1) - padding`` zeros are added to each side of the (stride-dilated)
        input, i.e. ``padding`` crops the output as in PyTorch.
      output_padding: an int or a tuple of {n} ints added to the high side of the output (to
        pick one of the input sizes a strided Conv maps to the same size); each must be
        smaller than the stride or the dilation of its axis (ValueError, as PyTorch).
      groups, use_bias: as Conv{n}d.  padding_mode: only ``'zeros'`` (as PyTorch).
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only, required); ``wkey, bkey = jax.random.split(key)``.

    Fields: ``weight`` of shape ``(in_channels, out_channels // groups, *kernel_size)`` —
    PyTorch's transposed layout — and ``bias`` ``(out_channels,)`` or None; the arguments are
    static fields.  Initialisation: PyTorch's, ``uniform(-b, b)`` with ``b = 1/sqrt(fan_in)``
    and ``fan_in = out_channels // groups * prod(kernel_size)`` (PyTorch reads fan-in from the
    weight's axis 1, which for a transposed convolution is the output channels).

    Call: ``convt(x, *, key=None)`` with ``x`` of shape ``{layout}`` returns ``(out_channels,
    *out_spatial)`` with ``out = (in - 1) * stride - low - high + dilation * (kernel - 1) +
    output_padding + 1`` per axis, computed by ``jax.lax.conv_general_dilated`` with
    ``lhs_dilation=stride``, in the promoted dtype of x and the parameters.  ``key`` is ignored.
    Raises ValueError for a wrong rank or channel count, or an output size below 1 (padding
    that crops more than the output has, as PyTorch).
"""

_CONVT_EXAMPLE = {
    1: """
    >>> import jax, jax.numpy as jnp
    >>> up = ConvTranspose1d(4, 2, kernel_size=4, stride=2, padding=1, key=jax.random.key(0))
    >>> up.weight.shape, up(jnp.ones((4, 5))).shape
    ((4, 2, 4), (2, 10))
    """,
    2: """
    >>> import jax, jax.numpy as jnp
    >>> up = ConvTranspose2d(3, 6, 3, stride=2, output_padding=1, groups=3, key=jax.random.key(0))
    >>> up.weight.shape, up(jnp.ones((3, 4, 4))).shape
    ((3, 2, 3, 3), (6, 10, 10))
    """,
    3: """
    >>> import jax, jax.numpy as jnp
    >>> ConvTranspose3d(1, 1, 2, stride=2, key=jax.random.key(0))(jnp.ones((1, 2, 2, 2))).shape
    (1, 4, 4, 4)
    """,
}


class ConvTranspose1d(_ConvTranspose, init=False):
    _ndim = 1


class ConvTranspose2d(_ConvTranspose, init=False):
    _ndim = 2


class ConvTranspose3d(_ConvTranspose, init=False):
    _ndim = 3


for _cls in (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d):
    _n = _cls._ndim
    _cls.__doc__ = _CONVT_DOC.format(n=_n, layout=_SPATIAL[_n - 1]) + _CONVT_EXAMPLE[_n]

del _cls, _n
