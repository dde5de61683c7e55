"""``filter_shard`` and the one helper that lines a tree of shardings up with the leaves of a
pytree (imports JAX; ``filter_shard`` is re-exported by ``spruce.jax``).

``leaf_shardings`` is shared by ``filter_shard``, ``filter_jit(in_shardings=, out_shardings=)``
and ``spruce.io.load(..., shardings=)``: a ``Sharding``, a ``Device`` or None — or a tree of
them that is a prefix of the pytree — becomes one entry per leaf, and a bad tree is an error
naming the key path.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax.sharding import PartitionSpec, Sharding, SingleDeviceSharding

from . import tree as _tree
from ._module._arrays import is_array


class _Box:
    """One sharding (or None) held as a leaf, so that None is not an empty node."""

    __slots__ = ("sharding",)

    def __init__(self, sharding: Any) -> None:
        self.sharding = sharding


def _is_entry(s: Any) -> bool:
    return s is None or isinstance(s, (Sharding, jax.Device))


def _is_box(b: Any) -> bool:
    return isinstance(b, _Box)


def leaf_shardings(shardings: Any, tree: Any, what: str, name: str = "") -> list[Any]:
    """One ``jax.sharding.Sharding`` or None per leaf of ``tree`` (``spruce.tree.leaves``
    order), from ``shardings``: a Sharding, a ``jax.Device`` (a ``SingleDeviceSharding``), None,
    or a tree of those whose structure is a prefix of ``tree``'s (each entry covers the subtree
    at its key path; None: not constrained).

    ``what`` begins error messages (``"filter_shard"``); ``name`` is prepended to key paths in
    them (``"args"`` gives ``args[0]['w']``).

    Raises:
      TypeError: an entry of ``shardings`` that is not a Sharding, Device or None (a bare
        ``PartitionSpec`` among them: it needs a mesh), naming its key path.
      ValueError: ``shardings`` is not a prefix of ``tree``, naming the key path of the first
        difference.
    """

    def box(path: Any, s: Any) -> _Box:
        if not _is_entry(s):
            hint = ""
            if isinstance(s, PartitionSpec):
                hint = " (a PartitionSpec needs a mesh: jax.sharding.NamedSharding(mesh, spec))"
            raise TypeError(
                f"{what}: the sharding at key path {name}{_tree.keystr(path) if path else ('' if name else '<root>')} "
                f"must be a jax.sharding.Sharding, a jax.Device or None, got {type(s).__name__}{hint}"
            )
        if isinstance(s, jax.Device):
            s = SingleDeviceSharding(s)
        return _Box(s)

    if _is_entry(shardings):
        return [box((), shardings).sharding] * len(_tree.leaves(tree))
    boxed = _tree.map_with_path(box, shardings, is_leaf=_is_entry)
    try:
        full = _tree.broadcast(boxed, tree, is_leaf=_is_box)
    except ValueError as e:
        text = str(e).replace("broadcast: full_tree does not match the structure ", "")
        if name:
            text = text.replace("key path <root>", f"key path {name}").replace("key path [", f"key path {name}[")
        raise ValueError(
            f"{what}: the shardings must be a Sharding or a tree of them whose structure is a prefix "
            f"of the structure of {name or 'the tree'}; {text} (expected: the shardings; got: "
            f"{name or 'the tree'})"
        ) from None
    return [b.sharding for b in _tree.leaves(full, is_leaf=_is_box)]


_constrain: Any = jax.lax.with_sharding_constraint  # (both untyped in jax's stubs)
_abstract: Any = jax.ShapeDtypeStruct


def filter_shard(x: Any, device_or_shardings: Any) -> Any:
    """Place the array leaves of ``x``: ``jax.device_put`` outside a trace, and
    ``jax.lax.with_sharding_constraint`` on traced leaves (inside ``jax.jit`` /
    ``filter_jit``).  Non-array leaves (Python numbers, strings, functions, static Module
    fields) pass through unchanged.

    Args:
      x: any pytree.
      device_or_shardings: a ``jax.Device``, a ``jax.sharding.Sharding``, or a tree of them (or
        None: that subtree is left where it is) whose structure is a prefix of ``x``'s; e.g.
        ``spruce.sharding.shardings(x, mesh, rules)``, whose None entries for non-array leaves
        fit.  An entry that covers a subtree applies to every array leaf in it.

    Returns:
      A tree of the same structure: array leaves as ``jax.Array``s on their shardings (NumPy
      arrays are copied to the devices, each receiving only its slice), or constrained tracers;
      a ``jax.ShapeDtypeStruct`` leaf gets the sharding as its own (an abstract placement).

    Raises:
      TypeError: an entry that is not a Sharding, Device or None (naming its key path).
      ValueError: the shardings are not a prefix of ``x`` (naming the key path); a sharding that
        does not fit its array (naming the key path; JAX's error is chained).

    Follows ``equinox.filter_shard``, except that None entries leave a subtree alone, and that
    outside a trace it calls ``jax.device_put`` (equinox uses ``with_sharding_constraint``
    everywhere).

    >>> import jax, numpy as np
    >>> out = filter_shard({'w': np.ones(2), 'act': 'relu'}, jax.devices()[0])
    >>> type(out['w']).__name__, out['act'], out['w'].sharding.device_set == {jax.devices()[0]}
    ('ArrayImpl', 'relu', True)
    """
    leaves, treedef = _tree.flatten(x)
    placements = leaf_shardings(device_or_shardings, x, "filter_shard")

    def where(i: int) -> str:
        path = _tree.leaves_with_path(x)[i][0]
        return f"key path {_tree.keystr(path)}" if path else "the root"

    return treedef.unflatten(place(leaves, placements, "filter_shard", where))


def place(leaves: list[Any], placements: list[Any], what: str, where: Callable[[int], str]) -> list[Any]:
    """Each array leaf on its sharding (None: left as it is): ``jax.device_put``, or
    ``with_sharding_constraint`` for a tracer; a ``jax.ShapeDtypeStruct`` gets the sharding as
    its own, after the check ``device_put`` makes (the sharding divides the shape).  Other
    leaves pass through.  ``where(i)`` names leaf ``i`` in errors.

    Raises:
      ValueError: a sharding does not fit its array or ``ShapeDtypeStruct`` ("{what}: the leaf
        at {where(i)} (shape, dtype) does not fit its sharding ...", then, for a
        ``NamedSharding``, the dimension, its length, each mesh axis and its size; JAX's error
        is chained).
    """
    out = []
    for i, (leaf, s) in enumerate(zip(leaves, placements)):
        abstract = isinstance(leaf, jax.ShapeDtypeStruct)
        if s is None or not (abstract or is_array(leaf)):
            out.append(leaf)
            continue
        try:
            if abstract:
                placed = _abstract(leaf.shape, leaf.dtype, sharding=s, weak_type=leaf.weak_type)  # (checks the rank)
                s.shard_shape(tuple(leaf.shape))  # the split, as device_put checks it
                out.append(placed)
            elif isinstance(leaf, jax.core.Tracer):
                out.append(_constrain(leaf, s))
            else:
                out.append(jax.device_put(leaf, s))
        except (ValueError, TypeError) as err:
            shape = tuple(leaf.shape)
            raise ValueError(
                f"{what}: the leaf at {where(i)} (shape {shape}, {leaf.dtype}) does not fit its sharding "
                f"{s}{_why(shape, s)}: {type(err).__name__}: {err}"
            ) from err
    return out


def _why(shape: tuple[int, ...], sharding: Any) -> str:
    """``'; dimension 0 of shape (6, 4) has length 6, which mesh axis ...'`` for a
    ``NamedSharding`` whose mesh axes do not divide ``shape`` (the text of
    ``spruce.sharding``'s own error), else ``''``."""
    from .sharding import ShardingError, _indivisible

    spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
    if spec is None or mesh is None:
        return ""
    try:
        bad = _indivisible(shape, spec, dict(mesh.shape))
    except ShardingError:
        return ""
    return f"; {bad[0][1]}" if bad else ""
