"""``specs``, ``shardings`` and ``shard``: a tree resolved by ``Rules`` (with the resolved-tree cache)."""

from __future__ import annotations

import operator
import threading
import warnings
from collections import OrderedDict
from typing import AbstractSet, Any, Callable, NamedTuple

import numpy as np

from .. import tree as _tree
from .._arrays import has_shape_and_dtype
from .._names import component, escaper, named_leaves, shared_prefix
from .._place import ShardingError, parts_of, place
from ._rules import Rules, _Fsdp, _fsdp_spec, _pspec, _resolve

_CACHE_SIZE = 64  # resolved trees in specs' cache, in all
_CACHE_WAYS = 4  # of them with one key (rules, mesh, numbers of nodes and leaves)


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


_CATCH_ALL = frozenset(["**", "re:.*", "re:.+", "re:(.*)"])


def _check_shadowed(rules: Rules, used: AbstractSet[int]) -> None:
    """A rule before a catch-all (``"**"``) that matched no array leaf: its arrays, if the
    pattern was meant for some, went to the catch-all silently.  ShardingError under strict
    rules, else a ``UserWarning``; both name the patterns."""
    catch_all = next((j for j, (p, _) in enumerate(rules.rules) if p in _CATCH_ALL), None)
    if catch_all is None:
        return
    dead = [p for j, (p, _) in enumerate(rules.rules[:catch_all]) if j not in used]
    if not dead:
        return
    which = ", ".join(repr(p) for p in dead)
    text = (
        f"the rule{'s' if len(dead) > 1 else ''} {which} matched no array leaf of the tree, and the "
        f"catch-all {rules.rules[catch_all][0]!r} after {'them' if len(dead) > 1 else 'it'} placed every "
        "array instead; check the pattern against the tree's dotted names (spruce.io.flatten_names, "
        "spruce inspect), or remove the rule"
    )
    if rules.strict:
        raise ShardingError(text + " (or pass strict=False to be warned instead)")
    warnings.warn(text, UserWarning, stacklevel=3)


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
    for need, get in ((1, _NDIM), (2, _SHAPE), (3, has_shape_and_dtype)):
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
        if not has_shape_and_dtype(x):
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
                if mesh_shape is not None and any(parts_of(entry, mesh_shape) > 1 for entry in spec):
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
    its key paths read on a cached call (``spruce.tree.leaves_with_path``, which adds to its
    cost).  Other key-path names (attribute names, positions) are taken to follow from the
    structure: a node registered with ``register_pytree_with_keys`` whose keys come from
    instance data that is not in its aux data gets the names of the cached call (put what the
    keys depend on in the aux data).  Otherwise a cached call walks the tree twice: one
    ``spruce.tree.flatten`` to read its structure and leaves, and one unflatten to build the
    result, which is a new tree each time (the caller may change it); between them it compares
    the structure with the cached one and reads the checked shapes: a little more than one
    flatten + unflatten of the tree, and less than a ``jax.tree.map`` over it.  The first call,
    which names every leaf and matches it against the rules, costs several times that
    (measured by ``benchmarks/bench_sharded.py``: docs/performance.md, "sharding.specs").  The
    result is built from the tree's own structure (its dict key order, its static values and key
    objects), cached or not.  A tree whose structure cannot be compared (an unhashable static
    field) is resolved again on every call.

    Raises:
      ShardingError: as described on ``Rules`` and ``ShardingError``.
    """
    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    _check_shadowed(rules, res.used)
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
    _check_shadowed(rules, res.used)
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


    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    _check_shadowed(rules, res.used)
    placements = [None if spec is None else NamedSharding(mesh, spec) for spec in res.specs]
    return treedef.unflatten(place(leaves, placements, "shard", lambda i: f"key path {res.names[i]!r}"))


