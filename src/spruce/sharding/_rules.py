"""Rules (dotted-name globs -> PartitionSpec, ``Rules.fsdp``) and ``mesh``."""

from __future__ import annotations

import re
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Sequence, Union

import numpy as np

from .._place import ShardingError, axes_of, indivisible


def mesh(
    axes: Mapping[str, int],
    *,
    devices: Sequence[Any] | None = None,
    axis_types: Literal["auto", "explicit"] = "auto",
) -> Any:
    """A ``jax.sharding.Mesh`` with the named axes, in order: ``mesh({'data': 2, 'model': 4})``.

    Follows ``jax.make_mesh``, except that the axes are one mapping and that they are
    ``AxisType.Auto`` by default: with Auto axes, XLA chooses the layout of intermediate
    values (a gather from a sharded embedding table just works), which is what rules written
    for parameters expect.  ``axis_types="explicit"`` gives JAX's explicit sharding mode, where
    every value's sharding is part of its type and an operation whose output sharding is
    ambiguous raises ``ShardingTypeError`` (see JAX's "Explicit sharding" guide).

    Args:
      axes: axis name -> size, in mesh order; the sizes must multiply to the number of devices
        used.
      devices: the devices to lay out (default all of ``jax.devices()``, in the order
        ``jax.make_mesh`` chooses); with devices given, they are laid out in the order given.
      axis_types: ``"auto"`` or ``"explicit"``, for every axis.

    Raises:
      ValueError: the sizes do not multiply to the number of devices, a size is not a positive
        int, or an unknown ``axis_types``.

    >>> m = mesh({'data': 1})
    >>> dict(m.shape)
    {'data': 1}
    """
    import jax
    from jax.sharding import AxisType, Mesh

    if axis_types not in ("auto", "explicit"):
        raise ValueError(f"mesh: axis_types must be 'auto' or 'explicit', got {axis_types!r}")
    names = tuple(axes)
    sizes = tuple(axes.values())
    for n, s in axes.items():
        if type(n) is not str:
            raise ValueError(f"mesh: axis names must be str, got {n!r}")
        if type(s) is not int or s < 1:
            raise ValueError(f"mesh: the size of axis {n!r} must be a positive int, got {s!r}")
    kind = AxisType.Auto if axis_types == "auto" else AxisType.Explicit
    types = (kind,) * len(names)
    total = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
    pool = list(jax.devices() if devices is None else devices)
    if total != len(pool):
        raise ValueError(
            f"mesh: the axes {dict(axes)} need {total} devices, but there are {len(pool)}"
            + ("" if devices is not None else " (jax.devices())")
        )
    if devices is None:
        return jax.make_mesh(sizes, names, axis_types=types)
    arr = np.empty(len(pool), dtype=object)
    arr[:] = pool
    return Mesh(arr.reshape(sizes), names, axis_types=types)


# -- patterns ----------------------------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex for a glob over dotted names, matched against ``'.' + name`` (so that every
    component, the first included, is preceded by a dot)."""
    if pattern.startswith("re:"):
        try:
            return re.compile(r"\.(?:" + pattern[3:] + r")\Z", re.DOTALL)
        except re.error as e:
            raise ValueError(f"Rules: bad regular expression {pattern!r}: {e}") from None
    out = []
    for comp in pattern.split("."):
        if comp == "**":
            out.append(r"(?:\.[^.]*)*")
            continue
        if "**" in comp:
            raise ValueError(f"Rules: '**' must be a whole component of the pattern, got {pattern!r}")
        piece = "".join("[^.]*" if ch == "*" else "[^.]" if ch == "?" else re.escape(ch) for ch in comp)
        out.append(r"\." + piece)
    return re.compile("".join(out) + r"\Z", re.DOTALL)



def _pspec(*entries: Any) -> Any:
    """``jax.sharding.PartitionSpec(*entries)`` (its constructor is untyped in jax's stubs)."""
    from jax.sharding import PartitionSpec

    ctor: Any = PartitionSpec
    return ctor(*entries)


class _Fsdp(NamedTuple):
    axis: Union[str, tuple[str, ...]]
    min_size: int

    def __str__(self) -> str:
        return f"fsdp({self.axis!r}, min_size={self.min_size})"


def _check_spec(spec: Any, where: str) -> Any:
    from jax.sharding import PartitionSpec

    if spec is None:
        return _pspec()
    if isinstance(spec, _Fsdp):
        return spec
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"Rules: {where}: the spec must be a jax.sharding.PartitionSpec or None, got {spec!r}")
    seen: dict[str, int] = {}
    for dim, entry in enumerate(spec):
        for axis in axes_of(entry):
            if axis in seen:
                raise ShardingError(
                    f"Rules: {where}: the spec {spec} uses mesh axis {axis!r} twice (dimensions "
                    f"{seen[axis]} and {dim}); one mesh axis can split only one dimension"
                )
            seen[axis] = dim
    return spec


class Rules:
    """An ordered list of ``(pattern, PartitionSpec)``: which array leaf is split how.

    A leaf's dotted name (``spruce.io.flatten_names``) is matched against the patterns in
    order and the first match gives its spec: a glob (``*`` within one component, ``?`` one
    character, ``**`` any number of whole components, zero included) or, with a ``re:``
    prefix, a regular expression matching the whole name.  A spec of None means replicated
    (``PartitionSpec()``).  Specs shorter than an array's rank leave the remaining dimensions
    unsplit, as in JAX.

    Args:
      rules: ``(pattern, spec)`` pairs, or a mapping pattern -> spec (in its order).
      strict: if True (default), an array leaf that no rule matches is an error naming its
        path; if False it is replicated.  (flax's logical rules replicate silently; this
        does not unless asked.)  Likewise a rule placed before a catch-all (``"**"``) that
        matches no array leaf of the tree (a typo in a pattern would otherwise send its arrays
        to the catch-all unnoticed) is an error naming the pattern; a ``UserWarning`` if False.
      on_indivisible: ``"error"`` (default): a dimension that the product of its mesh axes'
        sizes does not divide is a ShardingError naming the key path, shape, dimension, mesh
        axis and size; ``"replicate"``: that dimension is left unsplit (the others keep their
        split).

    Raises:
      ShardingError: a spec uses one mesh axis twice (a conflict is never resolved silently).
      ValueError: a malformed pattern or ``on_indivisible``.
      TypeError: a spec that is not a PartitionSpec or None; ``strict`` that is not a bool.

    Rules are immutable and hashable; ``specs`` caches its result per (tree structure,
    rules, mesh), checked against the leaves' shapes.

    >>> from jax.sharding import PartitionSpec as P
    >>> r = Rules([('**.*_proj.weight', P('model', None)), ('**', None)])
    >>> r.match('layers.0.attention.query_proj.weight')
    (0, P('model', None))
    >>> r.match('embeddings.layer_norm.bias')
    (1, P())
    """

    __slots__ = ("_compiled", "_hash", "on_indivisible", "rules", "strict")

    rules: tuple[tuple[str, Any], ...]
    strict: bool
    on_indivisible: str
    _compiled: tuple[re.Pattern[str], ...]
    _hash: int

    def __init__(
        self,
        rules: Iterable[tuple[str, Any]] | Mapping[str, Any],
        *,
        strict: bool = True,
        on_indivisible: Literal["error", "replicate"] = "error",
    ) -> None:
        if on_indivisible not in ("error", "replicate"):
            raise ValueError(f"Rules: on_indivisible must be 'error' or 'replicate', got {on_indivisible!r}")
        if not isinstance(strict, (bool, np.bool_)):
            raise TypeError(f"Rules: strict must be True or False, got {strict!r}")
        items = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
        checked = []
        compiled = []
        for i, item in enumerate(items):
            if not (isinstance(item, tuple) and len(item) == 2 and type(item[0]) is str):
                raise TypeError(f"Rules: rule {i} must be a (pattern, spec) pair with a str pattern, got {item!r}")
            pattern, spec = item
            checked.append((pattern, _check_spec(spec, f"rule {i} ({pattern!r})")))
            compiled.append(_glob_regex(pattern))
        object.__setattr__(self, "rules", tuple(checked))
        object.__setattr__(self, "strict", bool(strict))
        object.__setattr__(self, "on_indivisible", on_indivisible)
        object.__setattr__(self, "_compiled", tuple(compiled))
        object.__setattr__(self, "_hash", hash((self.rules, self.strict, self.on_indivisible)))

    @classmethod
    def fsdp(
        cls, axis: str | tuple[str, ...], *, min_size: int = 1024, on_indivisible: Literal["error", "replicate"] = "replicate"
    ) -> Rules:
        """Fully sharded data parallel: every array of at least ``min_size`` elements is split
        along one dimension over mesh axis ``axis``; smaller arrays, and arrays with no
        dimension that the axis size divides, are replicated.

        The dimension chosen is the largest one that the axis size divides (the first of equal
        ones), so the total bytes over all devices stay close to one copy of the model
        (MiniLM's position embeddings ``(512, 384)`` split along 512, its word embeddings
        ``(30522, 384)`` along 384).

        Args:
          axis: the mesh axis name, or a tuple of names to split over all of them (on a
            ``(data=2, model=4)`` mesh, ``('data', 'model')`` keeps about one copy of the model
            in total; ``'model'`` alone keeps two, one per data replica).
          min_size: arrays with fewer elements are replicated (default 1024).
        """
        if type(min_size) is not int or min_size < 0:
            raise ValueError(f"Rules.fsdp: min_size must be an int >= 0, got {min_size!r}")
        if not (type(axis) is str or (type(axis) is tuple and axis and all(type(a) is str for a in axis))):
            raise TypeError(f"Rules.fsdp: axis must be a mesh axis name or a tuple of names, got {axis!r}")
        if type(axis) is tuple and len(set(axis)) != len(axis):
            raise ShardingError(f"Rules.fsdp: the axes {axis} name one mesh axis twice")
        return cls([("**", _Fsdp(axis, min_size))], strict=True, on_indivisible=on_indivisible)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Rules are immutable")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rules):
            return NotImplemented
        return (self.rules, self.strict, self.on_indivisible) == (other.rules, other.strict, other.on_indivisible)

    def __repr__(self) -> str:
        body = ", ".join(f"({p!r}, {s})" for p, s in self.rules)
        return f"Rules([{body}], strict={self.strict}, on_indivisible={self.on_indivisible!r})"

    def match(self, name: str) -> tuple[int, Any] | None:
        """``(index, spec)`` of the first rule whose pattern matches the dotted ``name``, or
        None.  (The spec of an fsdp rule is its description; ``specs`` resolves it.)"""
        target = "." + name
        for i, rx in enumerate(self._compiled):
            if rx.match(target):
                return i, self.rules[i][1]
        return None


# -- resolving specs ---------------------------------------------------------------------------------


def _fsdp_spec(f: _Fsdp, shape: tuple[int, ...], mesh_shape: Mapping[str, int] | None, name: str) -> Any:

    if mesh_shape is None:
        raise ShardingError(f"{name}: Rules.fsdp needs the mesh to choose a dimension: pass mesh=")
    n = 1
    for axis in axes_of(f.axis):
        if axis not in mesh_shape:
            raise ShardingError(f"{name}: Rules.fsdp names mesh axis {axis!r}, which the mesh {dict(mesh_shape)} does not have")
        n *= mesh_shape[axis]
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size < f.min_size:
        return _pspec()
    best = -1
    for d, length in enumerate(shape):
        if length % n == 0 and length >= n and (best < 0 or length > shape[best]):
            best = d
    if best < 0:
        return _pspec()
    return _pspec(*([None] * best + [f.axis]))



def _resolve(name: str, shape: tuple[int, ...], spec: Any, rules: Rules, mesh_shape: Mapping[str, int] | None) -> Any:
    """Check ``spec`` against the array's shape and the mesh; apply ``on_indivisible``."""
    if len(spec) > len(shape):
        raise ShardingError(
            f"{name}: the spec {spec} has {len(spec)} entries but the array has shape {shape} "
            f"({len(shape)} dimensions)"
        )
    if mesh_shape is None:
        return spec
    try:
        bad = indivisible(shape, spec, mesh_shape)
    except ShardingError as e:
        raise ShardingError(f"{name}: {e}") from None
    if not bad:
        return spec
    if rules.on_indivisible == "error":
        raise ShardingError(
            f"{name}: {bad[0][1]}; change the rule, or pass on_indivisible='replicate' to leave such "
            "dimensions unsplit"
        )
    entries = list(spec)
    for dim, _ in bad:
        entries[dim] = None
    return _pspec(*entries)
