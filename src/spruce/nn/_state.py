"""Layer state that is not a parameter: running statistics (``State``, ``make_with_state``,
``update_state``; the design is in ``State``'s docstring) and the inference switch
(``inference_mode``, and ``Flag``, the value of a layer's ``inference`` field).

A stateful layer declares ``state_fields`` (a tuple of the names of its state fields: a class
attribute, or a property when it depends on the layer) and a static ``state_index`` field (None
when it keeps no state).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np

from .. import tree as _tree
from .._module import Module, field
from ._common import map_modules, replace_fields


class Flag(Module):
    """A bool held in a pytree as a node without children: the ``inference`` field of Dropout
    and BatchNorm.

    Static for JAX — the value is the node's data (a static field), so ``jax.jit`` does not
    trace it (a new value compiles again), ``jax.grad`` and ``jax.vmap`` see no leaf —, yet a
    node of the tree, so ``equinox.tree_at`` can replace it: ``equinox.nn.inference_mode``
    switches spruce layers (it stores a plain bool there; see ``inference_mode``).  Behaves as
    its bool: ``bool(flag)``, ``flag == True``, ``hash``, and prints as ``True`` / ``False``;
    ``flag is True`` is false.  A Module, so ``spruce.io`` saves and rebuilds it and
    ``filter_jit`` reads it as fast as any Module; each unflatten makes a new one, so no two
    places of a tree share one (``equinox.tree_at`` finds the nodes it replaces by identity).
    """

    value: bool = field(static=True)
    _spruce_repr_leaf = True  # (pformat prints it with __repr__: see spruce/_module/_pretty.py)

    def __bool__(self) -> bool:
        return self.value

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Flag):
            return self.value == other.value
        if isinstance(other, (bool, np.bool_)):
            return self.value == bool(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


def as_flag(value: Any) -> Flag:
    """The converter of an ``inference`` field: a Flag holding ``bool(value)`` (TypeError for a
    value that is not a bool, a NumPy bool or a Flag)."""
    if isinstance(value, Flag):
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"inference must be a bool, got {value!r:.80}")
    return Flag(bool(value))


def inference_flag(value: Any, layer: str) -> bool:
    """The bool a layer's ``inference`` field (or call argument) holds: a Flag, a bool, or a
    concrete 0-d array.  A traced value raises TypeError: a plain bool in the field (put there
    by ``equinox.nn.inference_mode``) is a leaf, which ``jax.jit`` traces when the model is an
    argument."""
    if isinstance(value, Flag):
        return value.value
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{layer}: its inference flag is a traced value, so the layer cannot choose between "
            "training and inference.  A plain bool in the field (equinox.nn.inference_mode puts "
            "one there) is a pytree leaf, which jax.jit traces when the model is an argument: "
            "switch the model with spruce.nn.inference_mode (which keeps the flag static), or "
            "use spruce.jax.filter_jit / equinox.filter_jit, which keep bool leaves static"
        )
    return bool(value)


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
    ``(running_mean, running_var, num_batches_tracked)``);
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
    [(3,), (3,), ()]
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


def _switchable(x: Any) -> bool:
    """A node ``inference_mode`` handles itself: a spruce Module (its fields are visited), or
    another pytree node with an ``inference`` attribute (an Equinox Module, a dataclass)."""
    if isinstance(x, Module):
        return True
    return not isinstance(x, (tuple, list, dict, Flag)) and _tree.is_tree_node(type(x)) and hasattr(x, "inference")


def _switch_tree(tree: Any, path: tuple[Any, ...], value: bool) -> Any:
    def visit(p: tuple[Any, ...], x: Any) -> Any:
        return _switch_node(x, path + p, value) if _switchable(x) else x

    return _tree.map_with_path(visit, tree, is_leaf=_switchable)


def _switch_node(x: Any, path: tuple[Any, ...], value: bool) -> Any:
    keyed, treedef = _tree.flatten_one_level_with_path(x)
    children = [_switch_tree(c, path + (k,), value) for k, c in keyed]
    if isinstance(x, Module):  # rebuilt as unflatten does (no __init__), then its own flag set
        out = treedef.unflatten(children)
        if any(f.name == "inference" for f in dataclasses.fields(x)):
            convert = type(x)._spruce_fields.converters.get("inference")
            out = replace_fields(out, inference=value if convert is None else convert(value))
        return out
    # Another library's node (an Equinox Module): its `inference` child is replaced.
    where = [i for i, (k, _) in enumerate(keyed) if isinstance(k, _tree.GetAttrKey) and k.name == "inference"]
    if not where:
        at = _tree.keystr(path) or "the root"
        raise TypeError(
            f"inference_mode: the {type(x).__qualname__} at {at} has an `inference` attribute "
            f"that is not one of its pytree children (a static field, or a property), so it "
            f"cannot be switched; make it an ordinary field, or switch it yourself"
        )
    children[where[0]] = value
    return treedef.unflatten(children)


def inference_mode(tree: Any, value: bool = True) -> Any:
    """A copy of ``tree`` in which every Module with an ``inference`` field (Dropout, BatchNorm,
    any user Module declaring one) and every other pytree node with an ``inference`` attribute
    (an ``equinox.nn.Dropout`` or ``BatchNorm``, any Equinox Module) has ``inference=value``;
    everything else is kept.

    Follows ``equinox.nn.inference_mode``, and either function switches a model mixing both
    libraries' layers.  spruce's layers hold the flag as a ``Flag``, a bool that is a pytree
    node without leaves: static for JAX (``jax.jit``, also with the model as an argument,
    compiles once per mode; ``jax.grad`` sees no leaf), yet a node that Equinox's function can
    replace.  Equinox's function stores a plain bool there, a leaf, as in Equinox's own layers:
    such a model runs eagerly, under ``spruce.jax.filter_jit`` / ``equinox.filter_jit`` (bool
    leaves are static) and closed over by ``jax.jit``; passed to ``jax.jit`` as an argument,
    its traced flag makes the layer raise TypeError, and switching it again with this function
    makes the flag static.  A spruce Module's ``inference`` value goes through the field's
    converter.

    Raises TypeError if ``value`` is not a bool, or naming the key path of a node (not a spruce
    Module) whose ``inference`` attribute is not one of its pytree children (a static field).

    >>> from spruce.nn import Dropout, Sequential
    >>> model = Sequential([Dropout(0.5), Dropout(0.1)])
    >>> [d.inference for d in inference_mode(model)]
    [True, True]
    """
    if not isinstance(value, bool):
        raise TypeError(f"inference_mode(tree, value): value must be a bool, got {value!r}")
    return _switch_tree(tree, (), value)
