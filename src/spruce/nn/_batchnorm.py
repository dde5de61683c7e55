"""BatchNorm (PyTorch's parameters and buffers; batch statistics over a named vmap axis)."""

from __future__ import annotations

import numbers
import uuid
from typing import Any, Hashable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._module import Module, field
from ._common import check_size, compute_dtype, default_float_dtype
from ._state import State, as_flag, inference_flag


class BatchNorm(Module):
    """Batch normalisation of one example ``(C, *spatial)``, as ``torch.nn.BatchNorm1d/2d/3d``
    (one class for every rank): ``(x - mean) / sqrt(var + eps) * weight + bias`` per channel.

    Args:
      num_features: the number of channels ``C`` (axis 0 of an example).
      eps: added to the variance (default 1e-5).
      momentum: running statistics are updated as ``(1 - momentum) * running + momentum *
        batch`` (PyTorch's convention; default 0.1), a number in [0, 1]; or None for PyTorch's
        cumulative moving average: the running statistics are the plain average of the
        statistics of every batch seen, i.e. momentum ``1 / num_batches_tracked`` after the
        counter counts the current batch (the first batch replaces the initial values).
      affine: learnable ``weight`` (init ones) and ``bias`` (init zeros) of shape ``(C,)``;
        None when False.
      track_running_stats: keep ``running_mean`` (init zeros) and ``running_var`` (init ones)
        of shape ``(C,)`` and use them in inference; when False they are None and the batch
        statistics are used in both modes (as PyTorch).
      axis_name: the ``jax.vmap`` (or ``pmap`` / ``shard_map``) axis name(s) the batch
        statistics are reduced over in training; required for training.
      inference: if True (evaluation mode) the running statistics are used.  A ``Flag``, static
        for JAX, as Dropout's: switch it with ``spruce.nn.inference_mode`` (or Equinox's), or
        override it per call.
      dtype: parameter and statistics dtype (default float32).

    Fields: ``weight``, ``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked`` —
    PyTorch's names, so a PyTorch ``BatchNorm1d/2d/3d`` state dict loads by name, strictly —
    ``inference`` (a ``Flag``), and static ``num_features``, ``eps``, ``momentum``,
    ``axis_name``, ``state_index`` (the key of this layer's entry in a ``State``).

    ``num_batches_tracked``, the number of training batches seen, is kept whenever the running
    statistics are (None with ``track_running_stats=False``, as PyTorch), and counts every
    training step, whatever the momentum (only ``momentum=None`` reads it).  It is a 0-d
    **NumPy int64** array: PyTorch's dtype, which ``spruce.io.load`` checks without casting and
    which JAX arrays cannot hold unless ``jax_enable_x64`` is on (a jitted step returns it as
    int32; ``update_state`` casts it back), so load a PyTorch file into a model as built, not
    one put through ``jax.device_put``.  An integer leaf has no gradient, and ``jax.grad``
    refuses one among its inputs: differentiate a model holding a BatchNorm with
    ``spruce.jax.filter_grad`` / ``filter_value_and_grad`` (the floating leaves; None at the
    counter, as Equinox), or with ``jax.grad(loss, allow_int=True)`` (a ``float0`` zero
    gradient at the counter; drop it before an optimizer), or differentiate the floating part
    (``params, rest = spruce.partition(model, spruce.is_inexact_array)``).

    Call: ``bn(x, state=None, *, key=None, inference=None)`` with ``x`` of shape ``(C, ...)``.

    - Inference: normalises with the running statistics; returns ``y`` (or ``(y, state)``,
      the state unchanged, when a state is passed, so code that threads a state runs in both
      modes).
    - Training (must run under ``jax.vmap(..., axis_name=axis_name)``): the mean and the
      biased variance of each channel over the batch and the spatial axes (``lax.pmean``) give
      ``y``.  With running statistics, ``state`` is required (a ``spruce.nn.State``; the
      layer's entry, or the layer's own values if the state has none, are the old running
      statistics and counter) and ``(y, new_state)`` is returned, where the running variance is updated
      with the unbiased batch variance ``var * n / (n - 1)``, ``n`` the number of values per
      channel, as PyTorch.  Use ``in_axes=(0, None), out_axes=(0, None)`` for the state, and
      ``spruce.nn.update_state(model, state)`` to write the statistics into the model.

    Statistics are computed in at least float32; ``y`` has the promoted dtype of x and the
    parameters.  Raises ValueError for a wrong channel count, for training without
    ``axis_name`` or (with running statistics) without a state, and for ``n == 1``.  Why the
    statistics are both in the layer and in a State: see ``spruce.nn.State``.

    >>> import jax, jax.numpy as jnp
    >>> bn = BatchNorm(2, inference=True)        # fresh statistics: mean 0, variance 1
    >>> [round(v, 4) for v in bn(jnp.array([2.0, -4.0])).tolist()]
    [2.0, -4.0]
    """

    weight: jax.Array | None
    bias: jax.Array | None
    running_mean: jax.Array | None
    running_var: jax.Array | None
    num_batches_tracked: Any
    num_features: int = field(static=True)
    eps: float = field(static=True)
    momentum: float | None = field(static=True)
    axis_name: Hashable | tuple[Hashable, ...] | None = field(static=True)
    inference: bool = field(converter=as_flag)
    state_index: str | None = field(static=True, repr=False)

    #: What a ``State`` holds for this layer (not a field): the running statistics and the
    #: batch counter.
    state_fields = ("running_mean", "running_var", "num_batches_tracked")

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        axis_name: Hashable | tuple[Hashable, ...] | None = None,
        inference: bool = False,
        dtype: Any = None,
    ) -> None:
        check_size(num_features, "num_features", "BatchNorm")
        if momentum is not None and (
            isinstance(momentum, (bool, np.bool_)) or not isinstance(momentum, numbers.Real) or not 0.0 <= momentum <= 1.0
        ):
            raise ValueError(f"BatchNorm: momentum must be a number in [0, 1] or None, got {momentum!r}")
        if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, numbers.Real) or not eps >= 0:
            raise ValueError(f"BatchNorm: eps must be a number >= 0, got {eps!r}")
        dtype = default_float_dtype(dtype)
        self.weight = jnp.ones((num_features,), dtype) if affine else None
        self.bias = jnp.zeros((num_features,), dtype) if affine else None
        self.running_mean = jnp.zeros((num_features,), dtype) if track_running_stats else None
        self.running_var = jnp.ones((num_features,), dtype) if track_running_stats else None
        self.num_batches_tracked = np.zeros((), np.int64) if track_running_stats else None
        self.num_features = num_features
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.axis_name = axis_name
        self.inference = inference
        self.state_index = uuid.uuid4().hex if track_running_stats else None

    def __call__(
        self,
        x: jax.Array,
        state: State | None = None,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> Any:
        x = jnp.asarray(x)
        if x.ndim < 1 or x.shape[0] != self.num_features:
            raise ValueError(
                f"BatchNorm: expected one example of shape ({self.num_features}, ...) (channels "
                f"first; use jax.vmap for a batch), got shape {x.shape}"
            )
        off = inference_flag(self.inference if inference is None else inference, "BatchNorm")
        params = [p for p in (self.weight, self.bias) if p is not None]
        ctype = compute_dtype(x.dtype, jnp.float32, *(p.dtype for p in params))
        out_dtype = compute_dtype(x.dtype, *(p.dtype for p in params))
        xf = x.astype(ctype)
        spatial = tuple(range(1, x.ndim))
        new_state = state
        if off and self.running_mean is not None and self.running_var is not None:
            mean, var = self.running_mean.astype(ctype), self.running_var.astype(ctype)
        else:
            if self.axis_name is None:
                raise ValueError(
                    "BatchNorm in training mode normalises with batch statistics: build it with "
                    "axis_name='batch' and call it under jax.vmap(..., axis_name='batch'), or use "
                    "inference mode (inference=True, or spruce.nn.inference_mode(model))"
                )
            mean = lax.pmean(jnp.mean(xf, axis=spatial), self.axis_name)  # type: ignore[no-untyped-call]  # untyped in jax 0.10
            centred = xf - mean.reshape((-1,) + (1,) * len(spatial))
            var = lax.pmean(jnp.mean(centred * centred, axis=spatial), self.axis_name)  # type: ignore[no-untyped-call]  # untyped in jax 0.10
            if self.running_mean is not None and self.running_var is not None and not off:
                if not isinstance(state, State):
                    raise ValueError(
                        "BatchNorm in training mode returns its updated running statistics: call "
                        "it as `y, state = bn(x, state)` with a spruce.nn.State (State(model) or "
                        "make_with_state), or build it with track_running_stats=False"
                    )
                n = lax.psum(1, self.axis_name) * (x.size // x.shape[0])  # type: ignore[no-untyped-call]  # untyped in jax 0.10
                if isinstance(n, int) and n <= 1:
                    raise ValueError(
                        f"BatchNorm: expected more than 1 value per channel in training (a batch of "
                        f"one example of shape {x.shape})"
                    )
                old = state.get(self) or tuple(getattr(self, f) for f in self.state_fields)
                # Every step counts, as PyTorch.  (None: a layer saved before spruce kept the
                # counter with every momentum; it counts from 0.)
                count = jnp.asarray(0 if old[2] is None else old[2]) + 1
                # momentum=None: the cumulative moving average, as PyTorch's.
                m: Any = 1.0 / count.astype(ctype) if self.momentum is None else self.momentum
                unbiased = var * (n / max(n - 1, 1))
                rm = (1 - m) * jnp.asarray(old[0]).astype(ctype) + m * mean
                rv = (1 - m) * jnp.asarray(old[1]).astype(ctype) + m * unbiased
                new_state = state.set(self, (rm.astype(self.running_mean.dtype), rv.astype(self.running_var.dtype), count))
        shape = (-1,) + (1,) * len(spatial)
        y = (xf - mean.reshape(shape)) * lax.rsqrt(var + self.eps).reshape(shape)
        if self.weight is not None:
            y = y * self.weight.astype(ctype).reshape(shape)
        if self.bias is not None:
            y = y + self.bias.astype(ctype).reshape(shape)
        y = y.astype(out_dtype)
        return y if state is None else (y, new_state)
