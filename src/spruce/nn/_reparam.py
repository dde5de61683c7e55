"""WeightNorm and SpectralNorm: wrappers that reparametrise one weight of a layer.

Both keep the wrapped layer whole in their ``layer`` field, its weight being the unnormalised
parameter, and call it with the normalised weight put in its place (``spruce.tree_at``).

Names.  PyTorch applies these in place: the wrapped module itself holds the new parameters,
beside its others (``weight_g`` / ``weight_v`` and ``weight_orig`` / ``weight_u`` /
``weight_v`` with ``torch.nn.utils.weight_norm`` / ``spectral_norm``;
``parametrizations.weight.original0`` / ``original1`` and ``parametrizations.weight.original`` /
``parametrizations.weight.0._u`` / ``._v`` with ``torch.nn.utils.parametrizations``).  A spruce
wrapper holds the layer one level down (``layer.weight``, ``layer.bias``), so no field naming
can give PyTorch's key paths; these classes follow Equinox's layout instead (``layer`` and
``g``; ``u`` and ``v`` for the power-iteration vectors, which Equinox keeps only in its State),
with PyTorch's shapes, and load a PyTorch state dict through ``spruce.io.load(...,
rename=...)`` (the mapping is in each class's docstring).
"""

from __future__ import annotations

import uuid
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .._arrays import is_inexact_array
from .._module import Module, field
from .._module._surgery import tree_at
from ._common import check_key
from ._conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from ._norm import _compute_dtype
from ._state import State, as_flag, inference_flag


def _weight(layer: Any, weight_name: Any, what: str) -> jax.Array:
    """The layer's parameter ``weight_name``: an inexact array (AttributeError / TypeError)."""
    if not isinstance(weight_name, str):
        raise TypeError(f"{what}: weight_name must be a str, got {weight_name!r}")
    try:
        weight = getattr(layer, weight_name)
    except AttributeError:
        raise AttributeError(
            f"{what}: the layer ({type(layer).__name__}) has no attribute {weight_name!r} to normalise"
        ) from None
    if not is_inexact_array(weight):
        raise TypeError(
            f"{what}: {type(layer).__name__}.{weight_name} must be a floating-point or complex "
            f"array, got {type(weight).__name__}"
        )
    return weight  # type: ignore[no-any-return]  # checked above


def _axis(axis: Any, ndim: int, name: str, what: str) -> int:
    """``axis`` (an int, negative counting from the end) as a non-negative axis of ``ndim``."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{what}: {name} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what}: {name}={axis} is out of range for a weight with {ndim} axes")
    return axis % ndim


def _call(layer: Any, x: Any, key: Any) -> Any:
    return layer(x) if key is None else layer(x, key=key)


class WeightNorm(Module):
    """Weight normalisation: the layer's weight ``w`` becomes ``g * v / ||v||``, a magnitude
    ``g`` and a direction ``v`` learnt separately (Salimans & Kingma, 2016).

    Args:
      layer: the layer to wrap (a Linear, a convolution, ...).
      weight_name: the name of the layer's parameter to reparametrise (default ``"weight"``);
        it must be a floating-point or complex array (AttributeError if the layer has no such
        attribute, TypeError if it is not such an array).
      axis: the norm is taken over every axis but this one (default 0, the output axis of a
        Linear or a convolution; negative counts from the end), or over the whole weight if
        None.  TypeError / ValueError for a non-int or out-of-range axis.

    Fields: ``layer``, whose ``weight_name`` parameter is ``v`` (initially the layer's weight);
    ``g``, the magnitude, initialised to ``||v||`` so that the wrapped layer first computes what
    the bare one did: shape ``v.shape`` with every axis but ``axis`` of size 1 (``(out, 1)`` for
    a Linear), or ``()`` with ``axis=None``; dtype the real dtype of ``v``.  Static:
    ``weight_name``, ``axis`` (stored non-negative).

    Call: ``wn(x, *, key=None)`` -> the layer's output with weight ``g * v / ||v||`` (norms in
    at least float32, the weight cast back to ``v``'s dtype); ``key`` is passed to the layer
    when given.  Gradients reach ``g`` and ``v`` (``layer.weight``), not ``w``.

    Follows ``torch.nn.utils.parametrizations.weight_norm`` (values and shape of ``g``) and
    ``equinox.nn.WeightNorm`` (fields and call), except: with ``axis=None``, ``g`` has shape
    ``()`` as PyTorch's, where Equinox keeps every axis with size 1; a negative ``axis`` counts
    from the end (PyTorch's ``dim=-1`` means the whole weight, spruce's ``axis=None``).
    Naming (see the module docstring): a PyTorch state dict of ``weight_norm(torch.nn.Linear)``
    loads with ``rename={"weight_g": "g", "weight_v": "layer.weight", "bias": "layer.bias"}``
    (``parametrizations.weight.original0`` / ``original1`` for the newer API).

    >>> import jax, jax.numpy as jnp
    >>> from spruce.nn import Linear
    >>> linear = Linear(3, 2, key=jax.random.key(0))
    >>> wn = WeightNorm(linear)
    >>> wn.g.shape
    (2, 1)
    >>> bool(jnp.allclose(wn(jnp.ones(3)), linear(jnp.ones(3)), atol=1e-6))
    True
    """

    layer: Any
    g: jax.Array
    weight_name: str = field(static=True)
    axis: int | None = field(static=True)

    def __init__(self, layer: Any, weight_name: str = "weight", axis: int | None = 0) -> None:
        v = _weight(layer, weight_name, "WeightNorm")
        self.layer = layer
        self.weight_name = weight_name
        self.axis = None if axis is None else _axis(axis, v.ndim, "axis", "WeightNorm")
        real = jnp.zeros((), v.dtype).real.dtype
        self.g = self._norm(v).astype(real)

    def _norm(self, v: jax.Array) -> jax.Array:
        """``||v||`` over every axis but ``axis`` (kept with size 1), or over all of ``v``."""
        a = jnp.asarray(v, _compute_dtype(v))
        if self.axis is None:
            return jnp.sqrt(jnp.sum(jnp.abs(a) ** 2))
        axes = tuple(i for i in range(a.ndim) if i != self.axis)
        return jnp.sqrt(jnp.sum(jnp.abs(a) ** 2, axis=axes, keepdims=True))

    def __call__(self, x: Any, *, key: jax.Array | None = None) -> Any:
        v = getattr(self.layer, self.weight_name)
        norm = self._norm(v)
        scale = self.g.astype(norm.dtype) / norm
        w = (jnp.asarray(v, _compute_dtype(v)) * scale.astype(_compute_dtype(v))).astype(v.dtype)
        layer = tree_at(lambda m: getattr(m, self.weight_name), self.layer, w)
        return _call(layer, x, key)


def _normalize(x: jax.Array, eps: float) -> jax.Array:
    """``x / max(||x||, eps)`` (torch.nn.functional.normalize of a vector)."""
    return x / jnp.maximum(jnp.sqrt(jnp.sum(jnp.abs(x) ** 2)), eps).astype(x.dtype)


def _power_iteration(w: jax.Array, u: jax.Array, v: jax.Array, eps: float, n: int) -> tuple[jax.Array, jax.Array]:
    """``n`` steps of ``u = normalize(W v)``, ``v = normalize(W^H u)`` (PyTorch's order)."""
    wh = jnp.conj(w).T
    for _ in range(n):
        u = _normalize(w @ v, eps)
        v = _normalize(wh @ u, eps)
    return u, v


class SpectralNorm(Module):
    """Spectral normalisation: the layer's weight ``W`` becomes ``W / sigma(W)``, ``sigma`` its
    largest singular value estimated by power iteration (Miyato et al., 2018).

    Args:
      layer: the layer to wrap (a Linear, a convolution, ...).
      weight_name: its parameter to normalise (default ``"weight"``): a floating-point or
        complex array of at least 2 axes (AttributeError / TypeError / ValueError otherwise).
      num_power_iterations: power-iteration steps per training call (default 1; >= 1).
      eps: lower bound of the norms the vectors are divided by (default 1e-12).
      inference: if True no power iteration runs and ``u``, ``v`` are used as they are; held
        as a ``Flag`` (static for JAX), switched by ``spruce.nn.inference_mode`` and
        ``equinox.nn.inference_mode``, or overridden per call.
      dim: keyword-only; the weight's output axis, moved first before the weight is flattened
        to a matrix ``(h, w)``.  Default: 1 for ConvTranspose1d/2d/3d (whose weight is
        ``(in, out, ...)``), else 0, as PyTorch.
      key: keyword-only PRNG key (required) for the initial vectors.

    Fields: ``layer`` (its ``weight_name`` parameter is the unnormalised ``W``); ``u`` of shape
    ``(h,)`` and ``v`` of shape ``(w,)``, the left and right singular vector estimates, dtype the
    weight's: drawn from a normal distribution and refined by 15 power-iteration steps, as
    PyTorch's parametrization and Equinox do; static ``weight_name``,
    ``num_power_iterations``, ``eps``, ``dim``, ``inference``, ``state_index`` (the key of the
    layer's entry in a ``spruce.nn.State``; ``uv_index`` is Equinox's name for it).

    Call: ``sn(x, state=None, *, key=None, inference=None)``.

    - Training: ``num_power_iterations`` steps from the state's vectors (or the layer's own if
      the state has none) on the weight with its gradient stopped, ``sigma = u^H W v``, and the
      layer is called with ``W / sigma``; returns ``(y, new_state)`` with the new vectors in
      ``new_state`` (a ``spruce.nn.State`` is required: ValueError without one).  Write them into
      the model with ``spruce.nn.update_state(model, state)``.
    - Inference: ``sigma`` from the layer's ``u`` and ``v``; returns ``y``, or ``(y, state)``
      unchanged when a state is passed.

    ``u`` and ``v`` are leaves, as PyTorch's buffers, but no gradient flows into them (they
    enter ``sigma`` through ``lax.stop_gradient``): leave them out of weight decay.  Why the
    state is both in the layer and in a State: see ``spruce.nn.State``.

    Follows ``torch.nn.utils.parametrizations.spectral_norm`` (order of the power-iteration
    steps, 15 initial steps, ``dim``, ``sigma``) and ``equinox.nn.SpectralNorm`` (arguments,
    State and inference handling), except that the vectors also live in the layer (as
    BatchNorm's running statistics).  Naming (see the module docstring): a PyTorch state dict of
    ``spectral_norm(torch.nn.Linear)`` loads with ``rename={"weight_orig": "layer.weight",
    "weight_u": "u", "weight_v": "v", "bias": "layer.bias"}``.

    >>> import jax, jax.numpy as jnp
    >>> from spruce.nn import Linear, State
    >>> sn = SpectralNorm(Linear(3, 2, key=jax.random.key(0)), key=jax.random.key(1))
    >>> sn.u.shape, sn.v.shape
    ((2,), (3,))
    >>> y, state = sn(jnp.ones(3), State(sn))
    >>> w = sn.layer.weight / jnp.vdot(sn.u, sn.layer.weight @ sn.v)
    >>> round(float(jnp.linalg.svd(w, compute_uv=False)[0]), 4)
    1.0
    """

    layer: Any
    u: jax.Array
    v: jax.Array
    weight_name: str = field(static=True)
    num_power_iterations: int = field(static=True)
    eps: float = field(static=True)
    dim: int = field(static=True)
    inference: bool = field(converter=as_flag)
    state_index: str = field(static=True, repr=False)

    # What a State holds for this layer (a class attribute, not a field).
    state_fields = ("u", "v")

    def __init__(
        self,
        layer: Any,
        weight_name: str = "weight",
        num_power_iterations: int = 1,
        eps: float = 1e-12,
        inference: bool = False,
        *,
        dim: int | None = None,
        key: jax.Array,
    ) -> None:
        what = "SpectralNorm"
        weight = _weight(layer, weight_name, what)
        if weight.ndim < 2:
            raise ValueError(
                f"{what}: {type(layer).__name__}.{weight_name} must have at least 2 axes, got shape {weight.shape}"
            )
        if (
            isinstance(num_power_iterations, bool)
            or not isinstance(num_power_iterations, int)
            or num_power_iterations < 1
        ):
            raise ValueError(f"{what}: num_power_iterations must be an int >= 1, got {num_power_iterations!r}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"{what}: eps must be a number > 0, got {eps!r}")
        key = check_key(key, what)
        if dim is None:
            dim = 1 if isinstance(layer, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
        self.layer = layer
        self.weight_name = weight_name
        self.num_power_iterations = num_power_iterations
        self.eps = float(eps)
        self.dim = _axis(dim, weight.ndim, "dim", what)
        self.inference = inference  # (a Flag: see Dropout's inference)
        self.state_index = uuid.uuid4().hex
        mat = self._matrix(weight)
        ukey, vkey = jax.random.split(key)
        u = jax.random.normal(ukey, (mat.shape[0],), weight.dtype).astype(mat.dtype)
        v = jax.random.normal(vkey, (mat.shape[1],), weight.dtype).astype(mat.dtype)
        u, v = _power_iteration(mat, _normalize(u, self.eps), _normalize(v, self.eps), self.eps, 15)
        self.u, self.v = u.astype(weight.dtype), v.astype(weight.dtype)

    @property
    def uv_index(self) -> str:
        """Equinox's name for ``state_index``: ``state.get(sn.uv_index)`` is ``state.get(sn)``,
        the ``(u, v)`` pair."""
        return self.state_index

    def _matrix(self, weight: jax.Array) -> jax.Array:
        """The weight as an ``(h, w)`` matrix, axis ``dim`` first, in at least float32."""
        moved = jnp.moveaxis(jnp.asarray(weight, _compute_dtype(weight)), self.dim, 0)
        return moved.reshape(moved.shape[0], -1)

    def _unmatrix(self, mat: jax.Array, weight: jax.Array) -> jax.Array:
        """``_matrix`` undone: ``mat`` with ``weight``'s shape and dtype."""
        shape = (weight.shape[self.dim],) + tuple(n for i, n in enumerate(weight.shape) if i != self.dim)
        return jnp.moveaxis(mat.reshape(shape), 0, self.dim).astype(weight.dtype)

    def __call__(
        self,
        x: Any,
        state: State | None = None,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> Any:
        weight = getattr(self.layer, self.weight_name)
        mat = self._matrix(weight)
        off = inference_flag(self.inference if inference is None else inference, "SpectralNorm")
        new_state = state
        if off:
            u, v = self.u, self.v
        else:
            if not isinstance(state, State):
                raise ValueError(
                    "SpectralNorm in training mode returns its updated power-iteration vectors: call "
                    "it as `y, state = sn(x, state)` with a spruce.nn.State (State(model) or "
                    "make_with_state), or use inference mode (inference=True, or "
                    "spruce.nn.inference_mode(model))"
                )
            u, v = state.get(self) or (self.u, self.v)
            u, v = _power_iteration(
                lax.stop_gradient(mat), u.astype(mat.dtype), v.astype(mat.dtype), self.eps, self.num_power_iterations
            )
            new_state = state.set(self, (u.astype(self.u.dtype), v.astype(self.v.dtype)))
        u, v = lax.stop_gradient(u.astype(mat.dtype)), lax.stop_gradient(v.astype(mat.dtype))
        sigma = jnp.vdot(u, mat @ v)
        w = self._unmatrix(mat / sigma, weight)
        layer = tree_at(lambda m: getattr(m, self.weight_name), self.layer, w)
        y = _call(layer, x, key)
        return y if state is None else (y, new_state)
