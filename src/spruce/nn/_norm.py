"""LayerNorm, RMSNorm and GroupNorm."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .._module import Module, field
from ._common import check_shape, check_size, compute_dtype, default_float_dtype


def _as_shape(shape: Any, layer: str) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(shape)
    except TypeError:
        raise TypeError(f"{layer}: shape must be an int or a tuple of ints, got {shape!r}") from None
    for d in out:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise TypeError(f"{layer}: shape must be an int or a tuple of non-negative ints, got {shape!r}")
    return out


def _compute_dtype(x: jax.Array) -> Any:
    # Statistics in at least float32 (bf16/f16 inputs lose too much precision otherwise),
    # chosen without JAX's promotion rules, so that it works under
    # jax_numpy_dtype_promotion='strict' (where bfloat16 and float32 do not promote).
    dt = jnp.dtype(x.dtype)
    if jnp.issubdtype(dt, jnp.complexfloating) or (jnp.issubdtype(dt, jnp.floating) and dt.itemsize >= 4):
        return dt
    return jnp.dtype(jnp.float32)


class LayerNorm(Module):
    """Layer normalisation over the whole example: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Args:
      shape: the input shape (int or tuple); mean and variance are taken over all its axes.
      eps: added to the variance (default 1e-5).
      use_weight, use_bias: learnable elementwise scale (init ones) / offset (init zeros) of
        shape ``shape``; None when disabled.
      dtype: parameter dtype (default float32).  No key: the initialisation is deterministic.

    Call: ``ln(x, *, key=None)`` with ``x.shape == shape`` (ValueError otherwise); statistics
    are computed in at least float32 and the result has the promoted dtype of x and the
    parameters.  Follows ``torch.nn.LayerNorm`` / ``equinox.nn.LayerNorm`` (biased variance).
    """

    weight: jax.Array | None
    bias: jax.Array | None
    shape: tuple[int, ...] = field(static=True)
    eps: float = field(static=True)

    def __init__(
        self,
        shape: int | tuple[int, ...],
        eps: float = 1e-5,
        use_weight: bool = True,
        use_bias: bool = True,
        dtype: Any = None,
    ) -> None:
        self.shape = _as_shape(shape, "LayerNorm")
        self.eps = float(eps)
        dtype = default_float_dtype(dtype)
        self.weight = jnp.ones(self.shape, dtype) if use_weight else None
        self.bias = jnp.zeros(self.shape, dtype) if use_bias else None

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        check_shape(x, self.shape, "LayerNorm")
        xf = x.astype(_compute_dtype(x))
        mean = jnp.mean(xf)
        centred = xf - mean
        var = jnp.mean(centred * centred)
        out = centred * jax.lax.rsqrt(var + self.eps)
        return _scale_shift(out, x, self.weight, self.bias)


def _scale_shift(out: jax.Array, x: jax.Array, weight: jax.Array | None, bias: jax.Array | None) -> jax.Array:
    """``out * weight + bias`` (each optional), cast to the promoted dtype of x and the params.

    Every operand is cast explicitly (and no promotion is asked for when x and the params share
    a dtype), so it runs under ``jax_numpy_dtype_promotion='strict'``."""
    params = [p for p in (weight, bias) if p is not None]
    final = x.dtype if all(p.dtype == x.dtype for p in params) else jnp.result_type(x, *params)
    wider = [p for p in params if jnp.dtype(p.dtype).itemsize > out.dtype.itemsize]
    ctype = jnp.result_type(out, *wider) if wider else out.dtype
    out = out.astype(ctype)
    if weight is not None:
        out = out * weight.astype(ctype)
    if bias is not None:
        out = out + bias.astype(ctype)
    return out.astype(final)


class RMSNorm(Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x**2) + eps) * weight (+ bias)``.

    Args:
      shape: the input shape (int or tuple); the mean is over all its axes.
      eps: added to the mean square (default 1e-6).
      use_weight: learnable scale, init ones (default True).
      use_bias: learnable offset, init zeros (default False).
      dtype: parameter dtype (default float32).  No key needed.

    Call: ``norm(x, *, key=None)`` with ``x.shape == shape``; statistics in at least float32.
    Follows Zhang & Sennrich (2019), as used in T5 / LLaMA.
    """

    weight: jax.Array | None
    bias: jax.Array | None
    shape: tuple[int, ...] = field(static=True)
    eps: float = field(static=True)

    def __init__(
        self,
        shape: int | tuple[int, ...],
        eps: float = 1e-6,
        use_weight: bool = True,
        use_bias: bool = False,
        dtype: Any = None,
    ) -> None:
        self.shape = _as_shape(shape, "RMSNorm")
        self.eps = float(eps)
        dtype = default_float_dtype(dtype)
        self.weight = jnp.ones(self.shape, dtype) if use_weight else None
        self.bias = jnp.zeros(self.shape, dtype) if use_bias else None

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        check_shape(x, self.shape, "RMSNorm")
        xf = x.astype(_compute_dtype(x))
        out = xf * jax.lax.rsqrt(jnp.mean(xf * xf) + self.eps)
        return _scale_shift(out, x, self.weight, self.bias)


class GroupNorm(Module):
    """Group normalisation (Wu & He, 2018) of one example ``(C, *spatial)``, as
    ``torch.nn.GroupNorm``: the channels are split into ``num_groups`` consecutive groups, each
    normalised by its own mean and biased variance over its channels and all spatial axes, then
    scaled and shifted per channel.

    Args:
      num_groups: number of groups (must divide ``num_channels``; ValueError otherwise).
      num_channels: ``C``, axis 0 of an example.
      eps: added to the variance (default 1e-5).
      affine: learnable per-channel ``weight`` (init ones) and ``bias`` (init zeros) of shape
        ``(C,)``; None when False.
      dtype: parameter dtype (default float32).  No key: the initialisation is deterministic.

    Call: ``gn(x, *, key=None)`` with ``x`` of shape ``(C, ...)``; statistics in at least
    float32; the result has the promoted dtype of x and the parameters (cast explicitly, so it
    runs under ``jax_numpy_dtype_promotion='strict'``).  Raises ValueError for a wrong channel
    count.  Same statistics in training and inference (no running state).

    >>> import jax.numpy as jnp
    >>> y = GroupNorm(1, 2)(jnp.array([[0.0, 2.0], [4.0, 6.0]]))
    >>> [[round(v, 3) for v in row] for row in y.tolist()]
    [[-1.342, -0.447], [0.447, 1.342]]
    """

    weight: jax.Array | None
    bias: jax.Array | None
    num_groups: int = field(static=True)
    num_channels: int = field(static=True)
    eps: float = field(static=True)

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, dtype: Any = None) -> None:
        check_size(num_groups, "num_groups", "GroupNorm")
        check_size(num_channels, "num_channels", "GroupNorm")
        if num_groups == 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        dtype = default_float_dtype(dtype)
        self.weight = jnp.ones((num_channels,), dtype) if affine else None
        self.bias = jnp.zeros((num_channels,), dtype) if affine else None
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = float(eps)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        if x.ndim < 1 or x.shape[0] != self.num_channels:
            raise ValueError(
                f"GroupNorm: expected one example of shape ({self.num_channels}, ...) (channels "
                f"first; use jax.vmap for a batch), got shape {x.shape}"
            )
        params = [p for p in (self.weight, self.bias) if p is not None]
        ctype = compute_dtype(x.dtype, jnp.float32, *(p.dtype for p in params))
        xg = x.astype(ctype).reshape((self.num_groups, -1))
        mean = jnp.mean(xg, axis=1, keepdims=True)
        centred = xg - mean
        var = jnp.mean(centred * centred, axis=1, keepdims=True)
        y = (centred * lax.rsqrt(var + self.eps)).reshape(x.shape)
        shape = (-1,) + (1,) * (x.ndim - 1)
        if self.weight is not None:
            y = y * self.weight.astype(ctype).reshape(shape)
        if self.bias is not None:
            y = y + self.bias.astype(ctype).reshape(shape)
        return y.astype(compute_dtype(x.dtype, *(p.dtype for p in params)))
