"""The split of a pytree's leaves into traced arrays and static values, shared by
``filter_jit`` and ``filter_vmap``: ``_is_dynamic``, ``_split`` / ``_merge`` of a leaf list, and
filter_jit's per-call walk that makes the cache key and the list of traced leaves in one pass
(one walker per node type, made once and cached).
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Any, Callable

from .. import tree as _tree
from .._arrays import is_array
from .._module._module import _ModuleAux, _ModuleMeta
from .._tree._registry import is_namedtuple_type


class _Token:
    """A marker in filter_jit's cache keys and splits (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_DYN: Any = _Token("dynamic")  # an array leaf: traced (its place in a key or a split)
_OTHER: Any = _Token("other node")  # followed by the PyTreeDef of a subtree spruce flattened
_KWARGS: Any = _Token("keyword arguments")  # the keyword arguments (a dict) follow

# Leaf types decided without calling is_array.  _ARRAY_TYPES grows as array types are met
# (is_array depends on the type only).  _STATIC_TYPES are leaf types that nobody registers as
# pytree nodes; other non-array types are asked spruce.tree.is_tree_node on every visit (a
# class may be registered as a node after filter_jit first saw an instance as a leaf).
_ARRAY_TYPES: set[type] = set()
_STATIC_TYPES: frozenset[type] = frozenset(
    {
        int,
        float,
        bool,
        complex,
        str,
        bytes,
        type,
        _Token,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        functools.partial,
    }
)


_NON_ARRAY_TYPES: set[type] = set()  # types is_array said no to (it answers by type)
# Argument types that filter_jit's direct mode passes to jax.jit as they are: arrays and None.
_DIRECT_TYPES: set[type] = {type(None)}


def _is_dynamic(x: Any) -> bool:
    t = type(x)
    if t in _ARRAY_TYPES:
        return True
    if t in _STATIC_TYPES or t in _NON_ARRAY_TYPES:
        return False
    if is_array(x):
        _ARRAY_TYPES.add(t)
        _DIRECT_TYPES.add(t)
        return True
    _NON_ARRAY_TYPES.add(t)
    return False


def _split(leaves: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
    """``(array leaves, all leaves with _DYN in place of each array)``."""
    dyn: list[Any] = []
    static: list[Any] = []
    for x in leaves:
        if _is_dynamic(x):
            dyn.append(x)
            static.append(_DYN)
        else:
            static.append(x)
    return dyn, tuple(static)


def _merge(dyn: Any, static: tuple[Any, ...]) -> list[Any]:
    it = iter(dyn)
    return [next(it) if s is _DYN else s for s in static]


# ------------------------------------------------------------------ filter_jit's per-call walk
#
# One pass over the arguments produces (a) ``key``, a flat list of tokens that determines the
# structure and every static leaf, and (b) ``dyn``, the array leaves in spruce.tree.flatten
# order.  A key is the encoding of each positional argument, then, if there are keyword
# arguments, _KWARGS and the encoding of their dict.  The encoding is prefix-free, so equal
# keys mean equal structure and equal static leaves:
#
#   array leaf       _DYN
#   static leaf      type(x), x          (the type keeps 1, 1.0 and True apart)
#   None             None
#   tuple / list     tuple|list, len, children...
#   dict             dict, tuple of its keys in insertion order, children in sorted key order...
#   Module           cls, static field values (none, one value, or a tuple of several: the
#                    class fixes which), children in field order...
#   namedtuple       cls, children...
#   any other node   _OTHER, spruce PyTreeDef of the subtree, its leaves (as above)...
#
# Node walkers are plain functions found by the exact type in _WALKERS; Module walkers read the
# instance ``__dict__`` directly (what the Module's registered flatten does, without building
# its node data), which is what makes a call cheaper than jax.jit's own flatten of a Module.

_Walker = Callable[[Any, list[Any], list[Any]], None]
_WALKERS: dict[type, _Walker] = {}


def _walk(x: Any, key: list[Any], dyn: list[Any]) -> None:
    t = type(x)
    if t in _ARRAY_TYPES:
        key.append(_DYN)
        dyn.append(x)
        return
    w = _WALKERS.get(t)
    if w is None:
        w = _walker_for(x)
    w(x, key, dyn)


def _walk_leaf(x: Any, key: list[Any], dyn: list[Any]) -> None:
    if _is_dynamic(x):
        key.append(_DYN)
        dyn.append(x)
    else:
        key.append(type(x))
        key.append(x)


def _walk_static(x: Any, key: list[Any], dyn: list[Any]) -> None:
    key.append(type(x))
    key.append(x)


def _walk_none(x: Any, key: list[Any], dyn: list[Any]) -> None:
    key.append(None)


def _walk_sequence(x: Any, key: list[Any], dyn: list[Any]) -> None:
    key.append(type(x))
    key.append(len(x))
    arrays = _ARRAY_TYPES
    walkers = _WALKERS
    for c in x:
        t = type(c)
        if t in arrays:
            key.append(_DYN)
            dyn.append(c)
        else:
            w = walkers.get(t)
            if w is None:
                _walk(c, key, dyn)
            else:
                w(c, key, dyn)


def _walk_dict(x: Any, key: list[Any], dyn: list[Any]) -> None:
    try:
        order = sorted(x)
    except TypeError:  # keys that do not compare: spruce's own ordering, through _walk_other
        _walk_other(x, key, dyn)
        return
    key.append(dict)
    key.append(tuple(x))
    for k in order:
        _walk(x[k], key, dyn)


def _walk_other(x: Any, key: list[Any], dyn: list[Any]) -> None:
    leaves, treedef = _tree.flatten(x)
    key.append(_OTHER)
    key.append(treedef)
    for c in leaves:
        _walk_leaf(c, key, dyn)


def _module_walker(cls: type, dynamic: tuple[str, ...], static: tuple[str, ...]) -> _Walker:
    get_static = operator.itemgetter(*static) if static else None
    arrays = _ARRAY_TYPES
    walkers = _WALKERS

    def walk_module(x: Any, key: list[Any], dyn: list[Any]) -> None:
        d = x.__dict__
        key.append(cls)
        if get_static is not None:
            key.append(get_static(d))
        for name in dynamic:
            c = d[name]
            t = type(c)
            if t in arrays:
                key.append(_DYN)
                dyn.append(c)
            else:
                w = walkers.get(t)
                if w is None:
                    _walk(c, key, dyn)
                else:
                    w(c, key, dyn)

    return walk_module


def _namedtuple_walker(cls: type) -> _Walker:
    def walk_namedtuple(x: Any, key: list[Any], dyn: list[Any]) -> None:
        key.append(cls)
        for c in x:
            _walk(c, key, dyn)

    return walk_namedtuple


def _walker_for(x: Any) -> _Walker:
    """The walker of ``type(x)``; node walkers are cached in _WALKERS, leaf ones are not (a
    type may be registered as a node later)."""
    t = type(x)
    if _is_dynamic(x) or not _tree.is_tree_node(t):
        return _walk_leaf
    w: _Walker = _walk_other
    children, one_level = _tree.flatten_one_level(x)
    node = one_level.node_data()
    if isinstance(t, _ModuleMeta) and type(node[1]) is _ModuleAux:
        aux = node[1]
        d = x.__dict__
        fields = [d[n] for n in aux.dynamic]
        if len(fields) == len(children) and all(a is b for a, b in zip(fields, children)):
            w = _module_walker(t, aux.dynamic, aux.static)
    elif is_namedtuple_type(t) and node == (t, None):
        if len(children) == len(x) and all(a is b for a, b in zip(children, x)):
            w = _namedtuple_walker(t)
    _WALKERS[t] = w
    return w


_WALKERS[tuple] = _walk_sequence
_WALKERS[list] = _walk_sequence
_WALKERS[dict] = _walk_dict
_WALKERS[type(None)] = _walk_none
for _t in _STATIC_TYPES:
    _WALKERS[_t] = _walk_static


def _walk_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """``(key, dyn)`` of a call's arguments (the walk ``filter_jit``'s call inlines)."""
    key: list[Any] = []
    dyn: list[Any] = []
    for a in args:
        _walk(a, key, dyn)
    if kwargs:
        key.append(_KWARGS)
        _walk_dict(kwargs, key, dyn)
    return key, dyn


def _unhashable_static(key: tuple[Any, ...], what: str) -> TypeError:
    bad = []
    for s in key:
        try:
            hash(s)
        except TypeError:
            bad.append(type(s).__name__)
    return TypeError(
        f"{what}: non-array leaves of the arguments are static (part of the compilation cache "
        f"key) and must be hashable; got unhashable leaves of type(s) {sorted(set(bad))}. "
        "Convert them to arrays or hashable values, or mark them static in a Module field."
    )


# How a compiled entry returns its output (recorded when the function is traced).


def _call_first(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``f(*args, **kwargs)``: what filter_jit traces for a Module called as a function (the
    Module is ``args[0]``, so its arrays are traced as arguments)."""
    return f(*args, **kwargs)
