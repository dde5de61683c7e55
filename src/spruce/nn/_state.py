"""Layer state that is not a parameter: running statistics (``State``, ``make_with_state``,
``update_state``; the design is in ``State``'s docstring) and the inference switch
(``inference_mode``).

A stateful layer declares ``state_fields`` (a tuple of the names of its state fields: a class
attribute, or a property when it depends on the layer) and a static ``state_index`` field (None
when it keeps no state).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from .._module import Module
from ._common import map_modules, replace_fields


def _is_stateful(m: Any) -> bool:
    return isinstance(getattr(m, "state_fields", None), tuple) and getattr(m, "state_index", None) is not None


def _keep_dtype(old: Any, new: Any) -> Any:
    """``new`` as written back into a layer: with ``old``'s dtype (and as NumPy if ``old`` is)
    when they differ and ``new`` is concrete.  A NumPy int64 counter (PyTorch's dtype) comes
    back from a step under jax.jit as int32 unless jax_enable_x64; this keeps it int64, so the
    layer still loads and saves the same checkpoints."""
    old_dtype, new_dtype = getattr(old, "dtype", None), getattr(new, "dtype", None)
    if old_dtype is None or new_dtype is None or old_dtype == new_dtype:
        return new
    try:
        value = np.asarray(new)
    except TypeError:  # a tracer (update_state under jax.jit): keep it
        return new
    return value.astype(old_dtype) if isinstance(old, np.ndarray) else new.astype(old_dtype)


class State(Module):
    """The running state of every stateful layer of a model (BatchNorm's running statistics),
    as a pytree to thread through a pure training step.

    ``State(model)`` collects the current values from ``model`` (``State()`` is empty; a layer
    absent from a state starts from the values it holds).  Field: ``values``, a dict from a
    layer's ``state_index`` to the tuple of its ``state_fields`` values (for BatchNorm
    ``(running_mean, running_var)``, and ``num_batches_tracked`` third with ``momentum=None``);
    it is the only child, so ``jax.jit``, ``jax.vmap``
    (``in_axes=None`` / ``out_axes=None``: the statistics are the same for every example) and
    ``spruce.io.save`` take a State like any pytree.

    Methods: ``state.get(layer)`` -> the tuple, or None; ``state.set(layer, value)`` -> a new
    State (states are immutable).  Both also take the layer's ``state_index`` itself in place
    of the layer (``state.get(bn.state_index)``, Equinox's spelling).

    Design: Equinox keeps running statistics only in its State, so every call, inference
    included, threads one.  spruce keeps them in the layer as well, as ordinary leaves under
    PyTorch's names: a PyTorch ``state_dict`` loads by name, ``spruce.io.save(model)`` saves
    them with the weights, and an inference-mode model is called like any other layer (inside
    a ``Sequential`` too).  Only training, which must return new statistics from a pure
    function, threads a State (``y, state = bn(x, state)``, as Equinox), keyed by each layer's
    ``state_index`` (a random hex string made when the layer is built, kept by every copy and by
    ``spruce.io``); ``update_state(model, state)`` writes the result back into the layers.
    The running statistics take no part in a training step's output, so their gradients are
    zero; exclude them from weight decay as PyTorch excludes buffers.

    >>> import jax, jax.numpy as jnp
    >>> from spruce.nn import BatchNorm
    >>> bn = BatchNorm(2, axis_name='batch')
    >>> state = State(bn)
    >>> x = jnp.array([[1.0, 2.0], [3.0, 6.0]])          # a batch of 2 examples, 2 channels
    >>> y, state = jax.vmap(bn, axis_name='batch', in_axes=(0, None), out_axes=(0, None))(x, state)
    >>> state.get(bn)[0]                                   # 0.9 * 0 + 0.1 * batch mean
    Array([0.2, 0.4], dtype=float32)
    >>> update_state(bn, state).running_mean
    Array([0.2, 0.4], dtype=float32)
    """

    values: dict[str, tuple[Any, ...]]

    def __init__(self, model: Any = None) -> None:
        values: dict[str, tuple[Any, ...]] = {}

        def collect(m: Any) -> Any:
            if _is_stateful(m):
                values[m.state_index] = tuple(getattr(m, f) for f in m.state_fields)
            return m

        if model is not None:
            map_modules(collect, model)
        self.values = values

    def get(self, layer: Any) -> tuple[Any, ...] | None:
        """The state of ``layer`` (a tuple of its ``state_fields`` values), or None; ``layer``
        may also be its ``state_index``."""
        return self.values.get(layer if isinstance(layer, str) else layer.state_index)

    def set(self, layer: Any, value: tuple[Any, ...]) -> State:
        """A new State in which ``layer``'s entry (``layer`` or its ``state_index``) is ``value``."""
        values = dict(self.values)
        values[layer if isinstance(layer, str) else layer.state_index] = tuple(value)
        return replace_fields(self, values=values)  # type: ignore[no-any-return]


def make_with_state(cls: Callable[..., Any]) -> Callable[..., tuple[Any, State]]:
    """``make_with_state(Model)(*args, **kwargs)`` -> ``(model, State(model))``: build a model
    and the state of its stateful layers in one call (Equinox's spelling).

    >>> from spruce.nn import BatchNorm
    >>> bn, state = make_with_state(BatchNorm)(3, axis_name='batch')
    >>> [a.shape for a in state.get(bn)]
    [(3,), (3,)]
    """

    def make(*args: Any, **kwargs: Any) -> tuple[Any, State]:
        model = cls(*args, **kwargs)
        return model, State(model)

    return make


def update_state(model: Any, state: State) -> Any:
    """A copy of ``model`` whose stateful layers hold the values in ``state`` (layers without an
    entry are kept).  Call it after training, before evaluating or saving the model.  A value
    whose dtype differs from the one the layer holds is cast back to it (BatchNorm's int64
    ``num_batches_tracked`` comes back from a jitted step as int32 unless jax_enable_x64).

    Raises TypeError if ``state`` is not a State.
    """
    if not isinstance(state, State):
        raise TypeError(f"update_state(model, state): state must be a spruce.nn.State, got {type(state).__name__}")

    def put(m: Any) -> Any:
        if _is_stateful(m):
            value = state.values.get(m.state_index)
            if value is not None:
                return replace_fields(m, **{f: _keep_dtype(getattr(m, f), v) for f, v in zip(m.state_fields, value)})
        return m

    return map_modules(put, model)


def inference_mode(tree: Any, value: bool = True) -> Any:
    """A copy of ``tree`` in which every Module with an ``inference`` field (Dropout, BatchNorm,
    and any user Module declaring one) has ``inference=value``; everything else is kept.

    Follows ``equinox.nn.inference_mode``.  ``inference`` is a static field, so the switched
    model compiles once per mode under ``jax.jit``.  Raises TypeError if ``value`` is not a bool.

    >>> from spruce.nn import Dropout, Sequential
    >>> model = Sequential([Dropout(0.5), Dropout(0.1)])
    >>> [d.inference for d in inference_mode(model)]
    [True, True]
    """
    if not isinstance(value, bool):
        raise TypeError(f"inference_mode(tree, value): value must be a bool, got {value!r}")

    def switch(m: Any) -> Any:
        if any(f.name == "inference" for f in dataclasses.fields(m)):
            return replace_fields(m, inference=value)
        return m

    return map_modules(switch, tree)
