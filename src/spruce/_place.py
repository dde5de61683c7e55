"""Placement vocabulary shared by the JAX layer, ``spruce.io`` and ``spruce.sharding`` (imports
JAX).

- ``ShardingError``: a tree that cannot be laid out as asked (public as
  ``spruce.sharding.ShardingError``).
- ``axes_of``, ``parts_of``, ``indivisible``: how a ``PartitionSpec`` entry splits a dimension
  over the mesh axes, and which dimensions it does not divide (with the text that says so).
- ``leaf_shardings``: a Sharding, a Device, None, or a prefix tree of them, lined up with the
  leaves of a pytree (used by ``filter_shard``, ``filter_jit(in_shardings=)`` and
  ``spruce.io.load(..., shardings=)``).
- ``place``: each array leaf on its sharding (``jax.device_put``, or a sharding constraint on a
  tracer; a ``ShapeDtypeStruct`` gets the sharding as its own).

Everything that places arrays imports it from here, downward; nothing here imports a layer above
the engine's public functions.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
from jax.sharding import PartitionSpec, Sharding, SingleDeviceSharding

from . import tree as _tree
from ._arrays import is_array


class ShardingError(ValueError):
    """A tree cannot be laid out by the given rules on the given mesh.

    Raised for an array leaf that no rule matches (strict rules), a spec with more entries
    than the array has dimensions, a mesh axis the mesh does not have, one mesh axis used twice
    in one spec, and a dimension that the mesh axes do not divide (``on_indivisible="error"``).
    The message names the key path and, where it applies, the shape, the dimension, the mesh
    axis and its size.
    """



def axes_of(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, tuple):
        return tuple(entry)
    return (entry,)


def indivisible(shape: tuple[int, ...], spec: Any, mesh_shape: Mapping[str, int]) -> list[tuple[int, str]]:
    """The dimensions of ``shape`` that their mesh axes in ``spec`` do not divide, each with the
    text that says so (the dimension, its length, each mesh axis and its size).

    Raises:
      ShardingError: ``spec`` names a mesh axis that ``mesh_shape`` does not have.
    """
    out = []
    for dim, entry in enumerate(spec):
        axes = axes_of(entry)
        if not axes or dim >= len(shape):
            continue
        for axis in axes:
            if axis not in mesh_shape:
                raise ShardingError(
                    f"the spec {spec} names mesh axis {axis!r}, which the mesh {dict(mesh_shape)} does not have"
                )
        if shape[dim] % parts_of(entry, mesh_shape):
            split = " x ".join(f"{a!r} of size {mesh_shape[a]}" for a in axes)
            out.append(
                (dim, f"dimension {dim} of shape {shape} has length {shape[dim]}, "
                      f"which mesh axis {split} does not divide (spec {spec})")
            )
    return out


def parts_of(entry: Any, mesh_shape: Mapping[str, int]) -> int:
    """Into how many parts one entry of a spec splits its dimension (the mesh axes' sizes
    multiplied; 1 for None)."""
    n = 1
    for axis in axes_of(entry):
        n *= mesh_shape[axis]
    return n



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
    spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
    if spec is None or mesh is None:
        return ""
    try:
        bad = indivisible(shape, spec, dict(mesh.shape))
    except ShardingError:
        return ""
    return f"; {bad[0][1]}" if bad else ""
