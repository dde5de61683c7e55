"""spruce.sharding: which parameter goes where, by the dotted key paths of the tree.

Every array leaf of a pytree has a dotted name (``layers.3.attention.query_proj.weight``, as
``spruce.io.flatten_names`` gives it and ``spruce inspect`` shows it).  ``Rules`` maps those
names to ``jax.sharding.PartitionSpec``s with globs; the rest is JAX's own machinery
(``Mesh``, ``NamedSharding``, ``jax.device_put``, ``jax.lax.with_sharding_constraint``): spruce
never talks between devices or hosts itself.

- ``mesh(axes, *, devices=None, axis_types="auto")`` -> ``jax.sharding.Mesh``
- ``Rules(rules, *, strict=True, on_indivisible="error")`` and ``Rules.fsdp(axis, *, min_size=)``
- ``specs(tree, rules, *, mesh=None)`` -> tree of PartitionSpec (None for non-array leaves)
- ``shardings(tree, mesh, rules)`` -> tree of NamedSharding (None for non-array leaves)
- ``explain(tree, mesh, rules)`` -> ``Explanation`` (a table; bytes per device; unused rules)
- ``shard(tree, mesh, rules)``: place the array leaves (``device_put``, or a sharding
  constraint under ``jax.jit``)
- ``ShardingError``: a ValueError naming the key path, shape, dimension, mesh axis and size.

Patterns are globs over the dotted name: ``*`` matches within one component (``*_proj``
matches ``query_proj``), ``?`` one character of a component, ``**`` any number of whole
components (zero included); a pattern starting with ``re:`` is a Python regular expression
that must match the whole name.  The first rule that matches wins.

>>> import numpy as np
>>> from jax.sharding import PartitionSpec as P
>>> params = {'embed': np.zeros((8, 4)), 'layers': [{'w': np.zeros((4, 4)), 'b': np.zeros(4)}]}
>>> rules = Rules([('embed', P('model', None)), ('layers.*.w', P(None, 'model')), ('**.b', P())])
>>> specs(params, rules)
{'embed': P('model', None), 'layers': [{'w': P(None, 'model'), 'b': P()}]}
"""

from __future__ import annotations

import operator
import re
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterable, Literal, Mapping, NamedTuple, Sequence, Union

import numpy as np

from . import tree as _tree
from ._summary import format_bytes
from .io._names import component, escaper, named_leaves, shared_prefix

__all__ = ["Explanation", "Rules", "ShardingError", "explain", "mesh", "shard", "shardings", "specs"]

_CACHE_SIZE = 64  # resolved trees in specs' cache, in all
_CACHE_WAYS = 4  # of them with one key (rules, mesh, numbers of nodes and leaves)


class ShardingError(ValueError):
    """A tree cannot be laid out by the given rules on the given mesh.

    Raised for an array leaf that no rule matches (strict rules), a spec with more entries
    than the array has dimensions, a mesh axis the mesh does not have, one mesh axis used twice
    in one spec, and a dimension that the mesh axes do not divide (``on_indivisible="error"``).
    The message names the key path and, where it applies, the shape, the dimension, the mesh
    axis and its size.
    """


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


def _axes_of(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, tuple):
        return tuple(entry)
    return (entry,)


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
        for axis in _axes_of(entry):
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
        does not unless asked.)
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
    def fsdp(cls, axis: str | tuple[str, ...], *, min_size: int = 1024, on_indivisible: Literal["error", "replicate"] = "replicate") -> Rules:
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


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type)


def _fsdp_spec(f: _Fsdp, shape: tuple[int, ...], mesh_shape: Mapping[str, int] | None, name: str) -> Any:
    from jax.sharding import PartitionSpec

    if mesh_shape is None:
        raise ShardingError(f"{name}: Rules.fsdp needs the mesh to choose a dimension: pass mesh=")
    n = 1
    for axis in _axes_of(f.axis):
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


def _indivisible(shape: tuple[int, ...], spec: Any, mesh_shape: Mapping[str, int]) -> list[tuple[int, str]]:
    """The dimensions of ``shape`` that their mesh axes in ``spec`` do not divide, each with the
    text that says so (the dimension, its length, each mesh axis and its size).

    Raises:
      ShardingError: ``spec`` names a mesh axis that ``mesh_shape`` does not have.
    """
    out = []
    for dim, entry in enumerate(spec):
        axes = _axes_of(entry)
        if not axes or dim >= len(shape):
            continue
        for axis in axes:
            if axis not in mesh_shape:
                raise ShardingError(
                    f"the spec {spec} names mesh axis {axis!r}, which the mesh {dict(mesh_shape)} does not have"
                )
        if shape[dim] % _split(entry, mesh_shape):
            split = " x ".join(f"{a!r} of size {mesh_shape[a]}" for a in axes)
            out.append(
                (dim, f"dimension {dim} of shape {shape} has length {shape[dim]}, which mesh axis {split} does not divide (spec {spec})")
            )
    return out


def _split(entry: Any, mesh_shape: Mapping[str, int]) -> int:
    """Into how many parts one entry of a spec splits its dimension (the mesh axes' sizes
    multiplied; 1 for None)."""
    n = 1
    for axis in _axes_of(entry):
        n *= mesh_shape[axis]
    return n


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
        bad = _indivisible(shape, spec, mesh_shape)
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


class _Check(NamedTuple):
    """One part of a cache hit's check: ``tuple(map(get, pick(leaves))) == expected``."""

    pick: Callable[[list[Any]], tuple[Any, ...]]
    get: Callable[[Any], Any]
    expected: tuple[Any, ...]


class _Resolved(NamedTuple):
    treedef: Any
    names: list[str]
    specs: list[Any]  # PartitionSpec or None per leaf
    rule_of: list[int]  # index of the matching rule per leaf, -1 for none (non-array or fallback)
    used: frozenset[int]
    types: list[type]  # the type of each leaf
    checks: tuple[_Check, ...]  # what else of the leaves the specs depend on
    # (leaf index, position in its key path, name component) of each key-path entry whose name
    # does not follow from the structure (dict keys 1 and True are equal but named apart), at
    # the first leaf under it
    name_probes: tuple[tuple[int, int, str], ...]


# (rules, mesh, number of nodes, number of leaves) -> up to _CACHE_WAYS _Resolved (trees of one
# size, e.g. an encoder and a decoder), most recently used last; _CACHE_SIZE in all.  A hit
# needs a structure equal to the cached one (compared, not hashed: hashing a fresh 20,000-node
# structure costs as much as flattening the tree, while == of two structures of one tree
# compares shared node data by identity), equal leaf types, and equal values of what the specs
# depend on (_Check): the shape of an array split over the mesh (divisibility; Rules.fsdp's
# choice), the rank of an array whose spec has entries (the rank check), nothing for a
# replicated array.  Dtypes never matter.
_cache: OrderedDict[Any, list[_Resolved]] = OrderedDict()
_cached = [0]  # the number of _Resolved in _cache
_cache_lock = threading.Lock()

# Leaf types that can never become arrays (no instance attributes): not checked on a hit.
_SCALARS = frozenset([int, float, complex, bool, str, bytes, type(None)])
_SHAPE = operator.attrgetter("shape")
_NDIM = operator.attrgetter("ndim")


def _picker(idx: list[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    if len(idx) == 1:
        i = idx[0]
        return lambda leaves: (leaves[i],)
    pick: Callable[[list[Any]], tuple[Any, ...]] = operator.itemgetter(*idx)
    return pick


def _kept(value: Any) -> Any:
    """What a cache entry keeps of a shape, rank or array test: the value itself when it is an
    immutable tuple, int or bool, else its shape as a tuple of ints."""
    if type(value) in (tuple, int, bool):
        return value
    return tuple(int(d) for d in value)


def _checks(leaves: list[Any], needs: list[int]) -> tuple[_Check, ...]:
    """The checks for a cache hit: ``needs[i]`` is 0 (nothing), 1 (the rank), 2 (the shape)
    or 3 (whether it is an array at all) for leaf ``i``."""
    groups: dict[int, list[int]] = {1: [], 2: [], 3: []}
    for i, need in enumerate(needs):
        if need == 1 and type(leaves[i]) is not np.ndarray:
            # ndim costs less than shape for NumPy arrays only (a jax.Array's and a
            # ShapeDtypeStruct's ndim are computed from their shape); and other array-likes
            # may have no ndim: compare their shapes instead, which is stricter
            need = 2
        if need:
            groups[need].append(i)
    out = []
    for need, get in ((1, _NDIM), (2, _SHAPE), (3, _is_array)):
        idx = groups[need]
        if idx:
            pick = _picker(idx)
            # a copy of what is read, never the leaf's own object: a shape that is not a tuple
            # (a list, an array) is kept as a tuple of ints, which it never equals on a later
            # call, so such a leaf is resolved again every time
            expected = tuple(_kept(v) for v in map(get, pick(leaves)))
            out.append(_Check(pick, get, expected))
    return tuple(out)


def _stable_name(entry: Any) -> bool:
    """Whether a key-path entry's name component follows from the tree's structure: equal
    structures give equal names (not so for the dict keys ``1`` and ``True``, which are equal
    but print differently)."""
    if isinstance(entry, _tree.DictKey):
        return type(entry.key) is str
    return isinstance(entry, (_tree.SequenceKey, _tree.GetAttrKey, _tree.FlattenedIndexKey))


def _hit(hit: _Resolved | None, leaves: list[Any], treedef: Any, tree: Any) -> bool:
    if hit is None:
        return False
    try:
        if hit.treedef != treedef:
            return False
    except TypeError:  # node data that cannot be compared (an unhashable static field)
        return False
    if list(map(type, leaves)) != hit.types:
        return False
    try:
        for c in hit.checks:
            if tuple(map(c.get, c.pick(leaves))) != c.expected:
                return False
    except Exception:  # an array leaf lost its shape; a shape that does not compare (an array)
        return False
    if hit.name_probes:
        paths = _tree.leaves_with_path(tree)  # (the engine's walk; names cost far more)
        esc = escaper(".")
        try:
            return all(component(paths[i][0][j], esc) == text for i, j, text in hit.name_probes)
        except IndexError:
            return False
    return True


def _name_probes(named: list[tuple[str, tuple[Any, ...], Any]]) -> tuple[tuple[int, int, str], ...]:
    """``_Resolved.name_probes`` of a tree's ``named_leaves``."""
    esc = escaper(".")
    out = []
    prev: tuple[Any, ...] = ()
    for i, (_, path, _) in enumerate(named):
        # the entries this leaf shares with the previous one were probed
        for j in range(shared_prefix(path, prev), len(path)):
            if not _stable_name(path[j]):
                out.append((i, j, component(path[j], esc)))
        prev = path
    return tuple(out)


def _shown(name: str) -> str:
    return f"key path {name!r}" if name else "the root leaf"


def _resolve_tree(leaves: list[Any], treedef: Any, tree: Any, rules: Rules, mesh_obj: Any) -> _Resolved:
    if not isinstance(rules, Rules):
        raise TypeError(f"rules must be a spruce.sharding.Rules, got {type(rules).__name__}")
    if mesh_obj is not None and not (hasattr(mesh_obj, "axis_names") and hasattr(mesh_obj, "shape")):
        raise TypeError(
            f"mesh must be a jax.sharding.Mesh (e.g. spruce.sharding.mesh({{'data': 2}})), got {type(mesh_obj).__name__}"
        )
    key: Any = (rules, mesh_obj, treedef.num_nodes, treedef.num_leaves)
    try:
        hash(key)
    except TypeError:
        key = None
    if key is not None:
        with _cache_lock:
            ways = _cache.get(key)
            if ways is not None:
                _cache.move_to_end(key)
                ways = list(ways)
        for hit in ways or ():
            if _hit(hit, leaves, treedef, tree):
                return hit
    mesh_shape = None if mesh_obj is None else dict(mesh_obj.shape)
    named = named_leaves(tree)
    names = [n for n, _, _ in named]
    specs_out: list[Any] = []
    rule_of: list[int] = []
    needs: list[int] = []
    used: set[int] = set()
    # (rule index, shape) -> (the spec resolved, what a cache hit checks: 1 the rank, 2 the
    # shape, -1 whether it is still an array); most leaves share both with another leaf
    resolved: dict[tuple[int, tuple[int, ...]], tuple[Any, int]] = {}
    for name, x in zip(names, leaves):
        if not _is_array(x):
            specs_out.append(None)
            rule_of.append(-1)
            needs.append(0 if type(x) in _SCALARS else 3)
            continue
        # an array whose type has no shape and dtype of its own may stop being one
        arrayness = 0 if hasattr(type(x), "shape") and hasattr(type(x), "dtype") else 3
        shape = tuple(map(int, x.shape))
        matched = rules.match(name)
        if matched is None:
            if rules.strict:
                raise ShardingError(
                    f"{_shown(name)} (shape {shape}): no rule matches it (strict rules); add a rule, "
                    "for example ('**', None) last to replicate everything else, or pass "
                    "strict=False"
                )
            specs_out.append(_pspec())
            rule_of.append(-1)
            needs.append(arrayness)
            continue
        i, spec = matched
        used.add(i)
        done = resolved.get((i, shape))
        if done is None:
            if isinstance(spec, _Fsdp):
                # the dimension chosen, and whether the array is large enough
                done = (_resolve(_shown(name), shape, _fsdp_spec(spec, shape, mesh_shape, _shown(name)), rules, mesh_shape), 2)
            else:
                out_spec = _resolve(_shown(name), shape, spec, rules, mesh_shape)
                if mesh_shape is not None and any(_split(entry, mesh_shape) > 1 for entry in spec):
                    done = (out_spec, 2)  # divisibility by the mesh axes' sizes
                else:
                    done = (out_spec, 1 if len(spec) else -1)  # the rank check
            resolved[i, shape] = done
        specs_out.append(done[0])
        needs.append(arrayness if done[1] < 0 else done[1])
        rule_of.append(i)
    types = list(map(type, leaves))
    out = _Resolved(treedef, names, specs_out, rule_of, frozenset(used), types, _checks(leaves, needs), _name_probes(named))
    if key is not None:
        try:
            hash(treedef)  # (a miss costs far more) structures that cannot be compared are not kept
        except TypeError:
            return out
        with _cache_lock:
            ways = _cache.setdefault(key, [])
            _cache.move_to_end(key)
            ways.append(out)
            _cached[0] += 1
            if len(ways) > _CACHE_WAYS:
                del ways[0]
                _cached[0] -= 1
            while _cached[0] > _CACHE_SIZE:
                _cached[0] -= len(_cache.popitem(last=False)[1])
    return out


def specs(tree: Any, rules: Rules, *, mesh: Any = None) -> Any:
    """The ``PartitionSpec`` of every array leaf of ``tree``, by ``rules``; None for the other
    leaves (Python scalars, strings).  Array leaves are anything with a ``shape`` and a
    ``dtype`` (NumPy and JAX arrays, ``jax.ShapeDtypeStruct``).

    Without ``mesh`` only the patterns and ranks are checked; with it, also the mesh axes and
    divisibility (``on_indivisible``), and ``Rules.fsdp`` can choose its dimensions (it needs
    the mesh).

    Results are cached per (structure, rules, mesh) in a bounded cache of 64 entries, and reused
    while the leaves' types, and what of their shapes the specs depend on, are those of the
    cached call: the shape of an array that a mesh axis of size > 1 splits (or that
    ``Rules.fsdp`` places), the rank of an array whose spec has entries, nothing else (an array
    reshaped in place is seen).  Dict keys that are equal but print differently (``1``,
    ``True``, ``1.0``) give different names, so a tree with dict keys that are not str also has
    its key paths read on a cached call (``spruce.tree.leaves_with_path``, roughly doubling its
    cost).  Other key-path names (attribute names, positions) are taken to follow from the
    structure: a node registered with ``register_pytree_with_keys`` whose keys come from
    instance data that is not in its aux data gets the names of the cached call (put what the
    keys depend on in the aux data).  Otherwise a cached call walks the tree twice: one
    ``spruce.tree.flatten`` to read its structure and leaves, and one unflatten to build the
    result, which is a new tree each time (the caller may change it); between them it compares
    the structure with the cached one and reads the checked shapes.  On 10,000 leaves that is
    1.2-1.35x the instructions of one flatten + unflatten of the tree (fewer than a
    ``jax.tree.map`` over it) and about 1.2-1.5x its time with the garbage collector on
    (``benchmarks/bench_sharded.py``; docs/benchmarks.md has the milliseconds).  The first call,
    which names every leaf and matches it against the rules, costs 8-15 times that. The result
    is built from the tree's own structure (its dict key order, its static values and key
    objects), cached or not.  A tree whose structure cannot be compared (an unhashable static
    field) is resolved again on every call.

    Raises:
      ShardingError: as described on ``Rules`` and ``ShardingError``.
    """
    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    return treedef.unflatten(list(res.specs))


def shardings(tree: Any, mesh: Any, rules: Rules) -> Any:
    """A ``jax.sharding.NamedSharding(mesh, spec)`` for every array leaf of ``tree`` (None for
    the other leaves): ``specs(tree, rules, mesh=mesh)`` on ``mesh``.  The result fits
    ``jax.device_put``, ``jax.jit(in_shardings=, out_shardings=)`` and
    ``spruce.io.load(..., shardings=)``.

    Raises:
      ShardingError: as ``specs``.
    """
    from jax.sharding import NamedSharding

    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    return treedef.unflatten([None if s is None else NamedSharding(mesh, s) for s in res.specs])


def shard(tree: Any, mesh: Any, rules: Rules) -> Any:
    """Place every array leaf of ``tree`` on ``mesh`` by ``rules``.

    Outside ``jax.jit`` each array leaf is ``jax.device_put`` onto its NamedSharding (NumPy
    arrays are copied to the devices, each device receiving only its slice); inside ``jit``
    (a traced leaf) it gets ``jax.lax.with_sharding_constraint``.  Other leaves (Python
    scalars, strings) and static fields of Modules pass through unchanged.

    Returns:
      A tree of the same structure.

    Raises:
      ShardingError: as ``specs``.
    """
    from jax.sharding import NamedSharding

    from ._shard import place

    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    placements = [None if spec is None else NamedSharding(mesh, spec) for spec in res.specs]
    return treedef.unflatten(place(leaves, placements, "shard", lambda i: f"key path {res.names[i]!r}"))


# -- explain -----------------------------------------------------------------------------------------


class Row(NamedTuple):
    """One array leaf in an ``Explanation``: dotted name, shape, dtype name, the pattern of the
    rule that placed it (``''`` if none did, non-strict), its spec, bytes each device holds,
    and on how many devices each element is held (replication)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    rule: str
    spec: Any
    bytes_per_device: int
    replication: int


class Explanation:
    """What ``explain`` returns.  ``str()`` is a table (one row per array leaf, then the
    totals); the attributes hold the data.

    Attributes:
      rows: a list of ``Row``.
      bytes_per_device: ``{device id: bytes}``, exactly the array bytes placement will hold on
        each device of the mesh (an array that placement does not copy counts once however
        many key paths hold it; see ``explain``).
      unmatched: the patterns of the rules that matched no leaf.
      total_bytes: the bytes of one copy of the tree's arrays (counted as above).
      mesh: the ``jax.sharding.Mesh``.

    ``spruce.view.sharding_html(explanation)`` draws it (device grids and memory bars).
    """

    def __init__(
        self, rows: list[Row], bytes_per_device: dict[int, int], unmatched: list[str], total_bytes: int, mesh: Any = None
    ) -> None:
        self.rows = rows
        self.bytes_per_device = bytes_per_device
        self.unmatched = unmatched
        self.total_bytes = total_bytes
        self.mesh = mesh

    def __repr__(self) -> str:
        return f"<Explanation: {len(self.rows)} arrays, {len(self.bytes_per_device)} devices>"

    def __str__(self) -> str:
        head = ("path", "shape", "dtype", "rule", "spec", "per device", "replicated")
        body = [
            (r.path or "<root>", str(r.shape), r.dtype, r.rule or "-", str(r.spec), format_bytes(r.bytes_per_device), f"{r.replication}x")
            for r in self.rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        right = {5, 6}

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        lines = [line(head), line(["-" * w for w in widths])]
        lines += [line(b) for b in body]
        per = sorted(self.bytes_per_device.items())
        total = sum(self.bytes_per_device.values())
        lines.append("")
        ratio = f" ({total / self.total_bytes:.2f}x one copy)" if self.total_bytes else ""
        lines.append(f"one copy: {format_bytes(self.total_bytes)}; all devices together: {format_bytes(total)}{ratio}")
        lines.append("per device: " + ", ".join(f"{d}: {format_bytes(b)}" for d, b in per))
        if self.unmatched:
            lines.append("rules that matched nothing: " + ", ".join(repr(p) for p in self.unmatched))
        return "\n".join(lines)


def _placed_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype an array of ``dtype`` has once on a device (int64 becomes int32 unless
    ``jax_enable_x64`` is set)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _already_placed(x: Any, sharding: Any, ndim: int) -> bool:
    """Whether ``x`` is a (concrete) ``jax.Array`` laid out as ``sharding`` says."""
    import jax

    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
        return False
    return bool(x.sharding.is_equivalent_to(sharding, ndim))


def explain(tree: Any, mesh: Any, rules: Rules) -> Explanation:
    """How ``rules`` lay ``tree`` out on ``mesh``: one row per array leaf (path, shape, dtype,
    rule, spec, bytes per device, replication), the bytes each device will hold, and the
    rules that matched nothing.  Nothing is placed or copied.  Dtypes are those the devices
    will hold (int64 and float64 become 32-bit unless ``jax_enable_x64`` is set).

    The bytes are those ``shard(tree, mesh, rules)`` leaves on the devices: a ``jax.Array``
    held at several key paths (tied weights) that is already laid out as its spec says is
    not copied by placement, so it counts once, in ``bytes_per_device`` and ``total_bytes``
    (as ``spruce.view`` counts it); it still has a row per key path.  A NumPy array at several
    key paths, or a ``jax.Array`` that placement moves, is copied per key path and counts at
    each.

    Raises:
      ShardingError: as ``specs``.

    >>> import numpy as np, jax
    >>> from jax.sharding import PartitionSpec as P
    >>> m = mesh({'model': 1})
    >>> e = explain({'w': np.zeros((4, 2), np.float32)}, m, Rules([('w', P('model')), ('b', None)]))
    >>> e.bytes_per_device[jax.devices()[0].id], e.unmatched
    (32, ['b'])
    """
    from jax.sharding import NamedSharding

    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    per: dict[int, int] = {int(d.id): 0 for d in mesh.devices.flat}
    rows: list[Row] = []
    total = 0
    kept: set[int] = set()  # ids of the jax.Arrays counted that placement keeps where they are
    for name, x, spec, i in zip(res.names, leaves, res.specs, res.rule_of):
        if spec is None:
            continue
        shape = tuple(int(d) for d in x.shape)
        itemsize = _placed_dtype(x.dtype).itemsize
        sharding = NamedSharding(mesh, spec)
        indices = sharding.devices_indices_map(shape)
        # A jax.Array already laid out as its spec says stays where it is (device_put does not
        # copy it): held at several key paths, it is one allocation and counts once.  Anything
        # else is copied per key path (a NumPy array, an array placed otherwise).
        again = False
        if _already_placed(x, sharding, len(shape)):
            again = id(x) in kept
            kept.add(id(x))
        distinct = set()
        dev: Any
        for dev, idx in indices.items():
            if not again:
                nb = itemsize * int(np.prod([len(range(*s.indices(n))) for s, n in zip(idx, shape)], dtype=np.int64))
                per[int(dev.id)] += nb
            distinct.add(tuple((s.start, s.stop) for s in idx))
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        total += 0 if again else size * itemsize
        shard_bytes = itemsize * (int(np.prod(sharding.shard_shape(shape), dtype=np.int64)) if shape else 1)
        rows.append(Row(name, shape, str(_placed_dtype(x.dtype)), rules.rules[i][0] if i >= 0 else "", spec, shard_bytes, len(indices) // max(1, len(distinct))))
    unmatched = [p for j, (p, _) in enumerate(rules.rules) if j not in res.used]
    return Explanation(rows, per, unmatched, total, mesh)
