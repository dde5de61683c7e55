"""MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d (PyTorch's semantics)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._module import Module, field
from ._common import as_tuple, check_rank, compute_dtype

_SPATIAL = ("(C, L)", "(C, H, W)", "(C, D, H, W)")


def _lowest(dtype: Any) -> Any:
    """The identity of max: -inf for floats, the smallest value for ints and bools.  A NumPy
    scalar, not a JAX array: under ``jax.jit`` a JAX array made here is a traced value, and
    ``lax.reduce_window`` then falls back to its generic form, which JAX cannot differentiate
    (a constant identity gives the max / sum window primitives, which it can)."""
    dtype = np.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return np.array(-np.inf, dtype)[()]
    if dtype == np.bool_:
        return np.bool_(False)
    return np.array(jnp.iinfo(dtype).min, dtype)[()]  # type: ignore[no-untyped-call]  # untyped in jax 0.10


def _window_pads(size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                 dilation: tuple[int, ...], ceil_mode: bool, layer: str) -> tuple[tuple[int, int], ...]:
    """``(low, high)`` padding per spatial axis: ``padding`` on both sides, plus with
    ``ceil_mode`` the extra high padding that PyTorch's ceil-mode output size needs (a last
    window must start inside the input or its low padding)."""
    pads = []
    for n, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        span = d * (k - 1) + 1
        if n + 2 * p < span:
            raise ValueError(
                f"{layer}: the input size {size} (padded by {padding}) is smaller than the window {kernel} (dilation {dilation})"
            )
        if ceil_mode:
            out = -(-(n + 2 * p - span) // s) + 1
            if (out - 1) * s >= n + p:
                out -= 1
        else:
            out = (n + 2 * p - span) // s + 1
        pads.append((p, max(0, (out - 1) * s + span - (n + 2 * p)) + p))
    return tuple(pads)


class _Pool(Module):
    kernel_size: tuple[int, ...] = field(static=True)
    stride: tuple[int, ...] = field(static=True)
    padding: tuple[int, ...] = field(static=True)
    ceil_mode: bool = field(static=True)

    _ndim = 0

    def _setup(self, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool) -> None:
        name, n = type(self).__name__, self._ndim
        self.kernel_size = as_tuple(kernel_size, n, "kernel_size", name, minimum=1)
        self.stride = self.kernel_size if stride is None else as_tuple(stride, n, "stride", name, minimum=1)
        self.padding = as_tuple(padding, n, "padding", name)
        for p, k in zip(self.padding, self.kernel_size):
            if 2 * p > k:
                raise ValueError(
                    f"{name}: padding should be at most half the kernel size (as in PyTorch), "
                    f"got padding={self.padding}, kernel_size={self.kernel_size}"
                )
        self.ceil_mode = bool(ceil_mode)

    def _check(self, x: Any) -> jax.Array:
        x = jnp.asarray(x)
        assert isinstance(x, jax.Array)
        check_rank(x, self._ndim + 1, type(self).__name__, _SPATIAL[self._ndim - 1])
        return x


class _MaxPool(_Pool):
    dilation: tuple[int, ...] = field(static=True)

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
    ) -> None:
        self._setup(kernel_size, stride, padding, ceil_mode)
        self.dilation = as_tuple(dilation, self._ndim, "dilation", type(self).__name__, minimum=1)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x = self._check(x)
        pads = _window_pads(
            x.shape[1:], self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, type(self).__name__
        )
        if any(d != 1 for d in self.dilation):
            return _dilated_max(x, pads, self.kernel_size, self.stride, self.dilation)
        y: jax.Array = lax.reduce_window(
            x, _lowest(x.dtype), lax.max, (1,) + self.kernel_size, (1,) + self.stride, ((0, 0),) + pads
        )
        return y


def _dilated_max(x: jax.Array, pads: tuple[tuple[int, int], ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                 dilation: tuple[int, ...]) -> jax.Array:
    """Max pooling with dilated windows, which ``lax.reduce_window`` computes but JAX cannot
    differentiate: the windows' elements are gathered (static NumPy indices) and reduced with
    ``jnp.max``, one spatial axis at a time (a box's maximum is the maximum along one axis of
    the maxima along the others).  ``pads`` are ``_window_pads``'s, filled with the lowest
    value."""
    x = jnp.pad(x, ((0, 0),) + pads, constant_values=_lowest(x.dtype))
    for axis, (k, s, d) in enumerate(zip(kernel, stride, dilation), start=1):
        out = (x.shape[axis] - d * (k - 1) - 1) // s + 1
        windows = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d  # (out, k) indices
        x = jnp.max(jnp.take(x, windows, axis=axis), axis=axis + 1)
    return x


class _AvgPool(_Pool):
    count_include_pad: bool = field(static=True)
    divisor_override: int | None = field(static=True)

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        self._setup(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        if divisor_override is not None and (
            isinstance(divisor_override, bool) or not isinstance(divisor_override, int) or divisor_override <= 0
        ):
            raise ValueError(f"{type(self).__name__}: divisor_override must be None or an int > 0, got {divisor_override!r}")
        self.divisor_override = divisor_override

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x = self._check(x)
        x = x.astype(compute_dtype(x.dtype))
        n = self._ndim
        size = x.shape[1:]
        dil = (1,) * n
        pads = _window_pads(size, self.kernel_size, self.stride, self.padding, dil, self.ceil_mode, type(self).__name__)
        window, strides = (1,) + self.kernel_size, (1,) + self.stride
        total: jax.Array = lax.reduce_window(x, np.array(0, x.dtype)[()], lax.add, window, strides, ((0, 0),) + pads)
        if self.divisor_override is not None:
            return total / jnp.asarray(self.divisor_override, x.dtype)
        # The divisor of each window, as PyTorch counts it: the input elements, plus with
        # count_include_pad the explicit padding, never the extra ceil_mode padding.  Computed in
        # NumPy (shapes are static), so it is a constant under jit.
        inner = np.ones(size, np.float64)
        if self.count_include_pad:
            inner = np.pad(inner, [(p, p) for p in self.padding], constant_values=1.0)
            extra = [(lo - p, hi - p) for (lo, hi), p in zip(pads, self.padding)]
        else:
            extra = list(pads)
        counts = np.pad(inner, extra)
        for axis, (k, s) in enumerate(zip(self.kernel_size, self.stride)):
            c = np.cumsum(np.concatenate([np.zeros_like(np.take(counts, [0], axis)), counts], axis), axis)
            m = counts.shape[axis]
            starts = np.arange(0, m - k + 1, s)
            counts = np.take(c, starts + k, axis) - np.take(c, starts, axis)
        return total / jnp.asarray(counts[None], x.dtype)


_MAX_DOC = """Max pooling over {n} spatial axes of one example, as ``torch.nn.MaxPool{n}d``.

    Args:
      kernel_size: window size, an int or a tuple of {n} ints.
      stride: window step (default: ``kernel_size``).
      padding: implicit ``-inf`` padding on both sides of each axis (an int or {n} ints, at most
        half the kernel size: ValueError otherwise, as PyTorch).
      dilation: spacing between window elements (default 1).
      ceil_mode: round the output size up instead of down, with PyTorch's rule that the last
        window must start inside the input or its low padding.

    Call: ``pool(x, *, key=None)`` with ``x`` of shape ``{layout}`` returns ``(C, *out)`` with
    ``out = floor_or_ceil((in + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1``,
    in x's dtype (ints and bools too), computed with ``jax.lax.reduce_window`` (with a
    ``dilation`` > 1, by gathering each window's elements: JAX has no derivative for a dilated
    ``reduce_window`` max), differentiable under ``jax.jit``.  No parameters; ``key`` is ignored.

    >>> import jax.numpy as jnp
    >>> MaxPool{n}d(2)(jnp.arange({size}.0).reshape({shape})).shape
    {out}
"""

_AVG_DOC = """Average pooling over {n} spatial axes of one example, as ``torch.nn.AvgPool{n}d``.

    Args:
      kernel_size: window size, an int or a tuple of {n} ints.
      stride: window step (default: ``kernel_size``).
      padding: implicit zero padding on both sides of each axis (at most half the kernel size).
      ceil_mode: round the output size up, as MaxPool{n}d.
      count_include_pad: if True (PyTorch's default) the zero padding counts in the divisor of
        the windows it overlaps; the extra padding of ``ceil_mode`` never counts.
      divisor_override: if given, every window sum is divided by it instead.

    Call: ``pool(x, *, key=None)`` with ``x`` of shape ``{layout}`` returns ``(C, *out)``
    (sizes as MaxPool{n}d with dilation 1) in x's floating dtype (ints are promoted to float),
    computed with ``jax.lax.reduce_window``.  No parameters; ``key`` is ignored.

    >>> import jax.numpy as jnp
    >>> AvgPool{n}d(2)(jnp.arange({size}.0).reshape({shape})).shape
    {out}
"""

_EXAMPLES = {1: ("8", "(1, 8)", "(1, 4)"), 2: ("16", "(1, 4, 4)", "(1, 2, 2)"), 3: ("64", "(1, 4, 4, 4)", "(1, 2, 2, 2)")}


class MaxPool1d(_MaxPool, init=False):
    _ndim = 1


class MaxPool2d(_MaxPool, init=False):
    _ndim = 2


class MaxPool3d(_MaxPool, init=False):
    _ndim = 3


class AvgPool1d(_AvgPool, init=False):
    _ndim = 1


class AvgPool2d(_AvgPool, init=False):
    _ndim = 2


class AvgPool3d(_AvgPool, init=False):
    _ndim = 3


_cls: Any
for _doc, _classes in ((_MAX_DOC, (MaxPool1d, MaxPool2d, MaxPool3d)), (_AVG_DOC, (AvgPool1d, AvgPool2d, AvgPool3d))):
    for _cls in _classes:
        _n = _cls._ndim
        _size, _shape, _out = _EXAMPLES[_n]
        _cls.__doc__ = _doc.format(n=_n, layout=_SPATIAL[_n - 1], size=_size, shape=_shape, out=_out)


# ---------------------------------------------------------------------------- adaptive pooling


def _bins(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive-pooling bins: ``[floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out))``."""
    return [((i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)) for i in range(n_out)]


def _adaptive(
    x: jax.Array, output_size: tuple[int | None, ...], reduce: Callable[[jax.Array, int, int, int], jax.Array]
) -> jax.Array:
    # A box's mean (max) is the mean (max) along one axis of the means (maxima) along the
    # others, so each spatial axis is pooled in turn.
    for axis, n_out in enumerate(output_size, start=1):
        n_in = x.shape[axis]
        if n_out is None or n_out == n_in:
            continue
        x = reduce(x, axis, n_in, n_out)
    return x


def _avg_axis(x: jax.Array, axis: int, n_in: int, n_out: int) -> jax.Array:
    m = np.zeros((n_out, n_in), np.float64)
    for i, (lo, hi) in enumerate(_bins(n_in, n_out)):
        m[i, lo:hi] = 1.0 / (hi - lo)
    y = jnp.tensordot(x, jnp.asarray(m, x.dtype), axes=([axis], [1]), precision=lax.Precision.HIGHEST)
    return jnp.moveaxis(y, -1, axis)


def _max_axis(x: jax.Array, axis: int, n_in: int, n_out: int) -> jax.Array:
    mask = np.zeros((n_out, n_in), bool)
    for i, (lo, hi) in enumerate(_bins(n_in, n_out)):
        mask[i, lo:hi] = True
    xa = jnp.moveaxis(x, axis, -1)[..., None, :]
    y = jnp.max(jnp.where(jnp.asarray(mask), xa, _lowest(x.dtype)), axis=-1)
    return jnp.moveaxis(y, -1, axis)


class _Adaptive(Module):
    output_size: tuple[int | None, ...] = field(static=True)

    _ndim = 0
    _average = True  # average or max pooling (a class attribute, not a field)

    def __init__(self, output_size: int | None | Sequence[int | None]) -> None:
        name, n = type(self).__name__, self._ndim
        sizes: tuple[Any, ...]
        if output_size is None or (isinstance(output_size, int) and not isinstance(output_size, bool)):
            sizes = (output_size,) * n
        else:
            try:
                sizes = tuple(output_size)  # type: ignore[arg-type]  # a TypeError is caught
            except TypeError:
                sizes = ()
        if len(sizes) != n or any(s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1) for s in sizes):
            raise ValueError(f"{name}: output_size must be an int >= 1 or a tuple of {n} such ints or None, got {output_size!r}")
        self.output_size = sizes

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        check_rank(x, self._ndim + 1, type(self).__name__, _SPATIAL[self._ndim - 1])
        if any(d == 0 for d in x.shape[1:]):
            raise ValueError(f"{type(self).__name__}: spatial sizes must be > 0, got shape {x.shape}")
        if self._average:
            return _adaptive(x.astype(compute_dtype(x.dtype)), self.output_size, _avg_axis)
        return _adaptive(x, self.output_size, _max_axis)


class AdaptiveAvgPool1d(_Adaptive, init=False):
    _ndim, _average = 1, True


class AdaptiveAvgPool2d(_Adaptive, init=False):
    _ndim, _average = 2, True


class AdaptiveAvgPool3d(_Adaptive, init=False):
    _ndim, _average = 3, True


class AdaptiveMaxPool1d(_Adaptive, init=False):
    _ndim, _average = 1, False


class AdaptiveMaxPool2d(_Adaptive, init=False):
    _ndim, _average = 2, False


class AdaptiveMaxPool3d(_Adaptive, init=False):
    _ndim, _average = 3, False


_ADAPTIVE_DOC = """Adaptive {kind} pooling of one example to a fixed output size, as
    ``torch.nn.Adaptive{Kind}Pool{n}d``.

    Args:
      output_size: the output's spatial size, an int or a tuple of {n} ints (None keeps that
        axis's input size).

    Call: ``pool(x, *, key=None)`` with ``x`` of shape ``{layout}`` returns ``(C, *output_size)``;
    output element ``i`` of an axis of input size ``n`` pools PyTorch's bin
    ``[floor(i * n / out), ceil((i + 1) * n / out))`` (bins overlap when ``out`` does not divide
    ``n``).  {dtype}  No parameters; ``key`` is ignored.

    >>> import jax.numpy as jnp
    >>> Adaptive{Kind}Pool{n}d({arg})(jnp.arange({size}.0).reshape({shape})).shape
    {out}
"""

_ADAPTIVE_EXAMPLES = {
    1: ("3", "10", "(2, 5)", "(2, 3)"),
    2: ("(2, None)", "30", "(1, 5, 6)", "(1, 2, 6)"),
    3: ("1", "24", "(1, 2, 3, 4)", "(1, 1, 1, 1)"),
}

for _cls, _kind, _dtype in (
    (AdaptiveAvgPool1d, "average", "The result has x's floating dtype (ints promoted to float)."),
    (AdaptiveAvgPool2d, "average", "The result has x's floating dtype (ints promoted to float)."),
    (AdaptiveAvgPool3d, "average", "The result has x's floating dtype (ints promoted to float)."),
    (AdaptiveMaxPool1d, "max", "The result has x's dtype."),
    (AdaptiveMaxPool2d, "max", "The result has x's dtype."),
    (AdaptiveMaxPool3d, "max", "The result has x's dtype."),
):
    _n = _cls._ndim
    _arg, _size, _shape, _out = _ADAPTIVE_EXAMPLES[_n]
    _cls.__doc__ = _ADAPTIVE_DOC.format(
        kind=_kind, Kind="Avg" if _kind == "average" else "Max", n=_n, layout=_SPATIAL[_n - 1],
        dtype=_dtype, arg=_arg, size=_size, shape=_shape, out=_out,
    )

del _cls, _n, _kind, _dtype, _arg, _size, _shape, _out, _doc, _classes
