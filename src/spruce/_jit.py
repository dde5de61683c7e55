"""``filter_jit``: ``jax.jit`` for functions of any pytree (imports JAX; re-exported by
``spruce.jax``).

The array leaves of the arguments are traced; everything else (structure, Python numbers,
strings, functions) is static and keys a cache of compiled entries.  The helpers that split a
leaf list into arrays and the rest (``_is_dynamic``, ``_split``, ``_merge``) are shared with
``_vmap.py``.
"""

from __future__ import annotations

import collections
import functools
import operator
import re
import threading
import types
import warnings
import weakref
from typing import Any, Callable

import jax

from . import tree as _tree
from ._module._arrays import is_array
from ._module._module import _ModuleAux, _ModuleMeta
from ._shard import leaf_shardings
from ._tree._text import qualified_name


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
    elif issubclass(t, tuple) and hasattr(t, "_fields") and node == (t, None):
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
_BARE = 0  # the output is one array: jax.jit's own result is returned as it is
_ARRAYS = 1  # every output leaf is an array: unflatten the list jax.jit returns
_MIXED = 2  # some output leaves are static: merge them back, then unflatten


class _Restructure(Exception):
    """Raised inside a retrace whose output description differs from the recorded one."""


class _Entry:
    """One compiled specialisation of a filter_jit function (one structure and set of static
    leaves of the arguments): its ``jax.jit`` function of the array-leaf list, and what its
    trace recorded about the output.

    ``fast()`` is the callable stored in the cache: for an output that is one array, the
    ``jax.jit`` function itself (so a call adds nothing after the lookup); otherwise a closure
    that rebuilds the output.  jax.jit retraces by itself for new shapes / dtypes; a retrace
    that records a different output description raises ``_Restructure`` (aborting it), and the
    caller then switches this entry to one sub-entry per tuple of array types (``by_avals``).
    """

    __slots__ = (
        "fun", "treedef", "static", "jit_kwargs", "nested", "mode", "out_def", "out_static", "jitted", "out_shardings",
        "name",
    )

    def __init__(
        self,
        fun: Callable[..., Any],
        treedef: Any,
        static: tuple[Any, ...],
        jit_kwargs: dict[str, Any],
        nested: bool,
        out_shardings: Any = None,
        name: str = "",
    ) -> None:
        self.fun = fun
        self.name = name or _name(fun)  # for messages
        self.treedef = treedef
        self.static = static
        self.jit_kwargs = jit_kwargs
        self.nested = nested
        self.mode = -1
        self.out_def: Any = None
        self.out_static: tuple[Any, ...] = ()
        # With out_shardings (filter_jit's, a tree over the user's output), ``prepare`` traces
        # once to learn the output's structure and then makes the jax.jit that places it.
        self.out_shardings = out_shardings
        self.jitted: Any = jax.jit(self._traced, **jit_kwargs)

    def prepare(self, dyn: list[Any]) -> None:
        """With out_shardings: trace for ``dyn`` (recording the output description), then
        replace ``jitted`` by a ``jax.jit`` whose ``out_shardings`` are those of the output's
        array leaves.  (The first trace is not compiled; the second one is.)"""
        if self.out_shardings is None or self.mode != -1:
            return
        self.jitted.trace(*dyn)
        if self.mode == _BARE:
            leaves: list[Any] = [_DYN]
            tree: Any = _DYN
        else:
            leaves = [_DYN] * self.out_def.num_leaves if self.mode == _ARRAYS else list(self.out_static)
            tree = self.out_def.unflatten(leaves)
        what = f"filter_jit({self.name}): out_shardings"
        try:
            per_leaf = leaf_shardings(self.out_shardings, tree, what, "output")
        except ValueError as e:
            if self.mode == _BARE:
                raise ValueError(
                    f"{what}: the function returns a single array, so out_shardings must be one "
                    f"Sharding (or None), not a {type(self.out_shardings).__name__}"
                ) from None
            raise ValueError(str(e).replace(f"a leaf of type {qualified_name(_Token)}", "an array")) from None
        placed = [s for s, x in zip(per_leaf, leaves) if x is _DYN]
        out = placed[0] if self.mode == _BARE else placed
        self.jitted = jax.jit(self._traced, **self.jit_kwargs, out_shardings=out)

    def _traced(self, *dyn: Any) -> Any:
        args, kwargs = self.treedef.unflatten(_merge(dyn, self.static))
        out = self.fun(*args, **kwargs)
        if _is_dynamic(out):
            self._record(_BARE, None, ())
            return out
        out_leaves, out_def = _tree.flatten(out)
        out_dyn, out_static = _split(out_leaves)
        if len(out_dyn) == len(out_leaves):
            self._record(_ARRAYS, out_def, ())
        else:
            self._record(_MIXED, out_def, out_static)
        return out_dyn

    def _record(self, mode: int, out_def: Any, out_static: tuple[Any, ...]) -> None:
        if self.mode != -1 and (mode, out_def, out_static) != (self.mode, self.out_def, self.out_static):
            if self.nested:
                name = getattr(self.fun, "__qualname__", type(self.fun).__name__)
                raise ValueError(
                    f"filter_jit({name}): two traces for the same arguments returned different "
                    f"non-array outputs ({out_def} vs {self.out_def}); the non-array part of the "
                    "output must be a function of the non-array inputs and of the array shapes"
                )
            raise _Restructure()
        self.mode, self.out_def, self.out_static = mode, out_def, out_static

    def first_call(self, dyn: list[Any]) -> tuple[Any, Callable[..., Any]]:
        """Trace and run; ``(output, fast callable for the cache)``."""
        self.prepare(dyn)
        raw = self.jitted(*dyn)
        fast = self.fast()
        if self.mode == _BARE:
            return raw, fast
        if self.mode == _ARRAYS:
            return self.out_def.unflatten(raw), fast
        return self.out_def.unflatten(_merge(raw, self.out_static)), fast

    def fast(self) -> Callable[..., Any]:
        """The cache's callable: called with the array leaves as positional arguments."""
        jitted = self.jitted
        if self.mode == _BARE:
            return jitted  # type: ignore[no-any-return]  # jax.jit's C++ callable
        unflatten = self.out_def.unflatten
        if self.mode == _ARRAYS:

            def call_arrays(*dyn: Any) -> Any:
                return unflatten(jitted(*dyn))

            return call_arrays
        out_static = self.out_static

        def call_mixed(*dyn: Any) -> Any:
            return unflatten(_merge(jitted(*dyn), out_static))

        return call_mixed

    def by_avals(self) -> Callable[..., Any]:
        """A cache callable that compiles one sub-entry per tuple of array types."""
        table: dict[tuple[Any, ...], Callable[..., Any]] = {}

        def call_by_avals(*dyn: Any) -> Any:
            k = tuple([jax.typeof(x) for x in dyn])
            fast = table.get(k)
            if fast is None:
                sub = _Entry(self.fun, self.treedef, self.static, self.jit_kwargs, True, self.out_shardings, self.name)
                out, table[k] = sub.first_call(list(dyn))
                return out
            return fast(*dyn)

        return call_by_avals


def _new_entry(
    fun: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dyn: list[Any],
    jit_kwargs: dict[str, Any],
    donate: str,
    kept: int,
) -> _Entry:
    """The cache entry for arguments whose walk gave ``dyn`` (a cache miss).

    ``donate`` is filter_jit's argument; with "all-except-first", the array leaves of the first
    ``kept + 1`` positional arguments are not donated (``kept`` is 1 when ``args[0]`` is the
    function itself, a Module).
    """
    in_shardings = jit_kwargs.get("in_shardings")
    leaves, treedef = _tree.flatten((args, kwargs))
    dyn_check, static = _split(leaves)
    if len(dyn_check) != len(dyn) or any(a is not b for a, b in zip(dyn_check, dyn)):
        raise RuntimeError(  # only reachable if a pytree registration changed under filter_jit
            "filter_jit: the array leaves found by its cached walk differ from those of "
            "spruce.tree.flatten; was a Module class or namedtuple type registered or "
            "unregistered after filter_jit first saw one of its instances?"
        )
    if donate != "none":
        first = 0  # array leaves (in dyn order) that are not donated
        if donate == "all-except-first":
            for a in args[: kept + 1]:
                first += len(_split(_tree.leaves(a))[0])
        jit_kwargs = {**jit_kwargs, "donate_argnums": tuple(range(first, len(dyn)))}
    out_shardings = jit_kwargs.get("out_shardings")
    if "in_shardings" in jit_kwargs or "out_shardings" in jit_kwargs:
        jit_kwargs = {k: v for k, v in jit_kwargs.items() if k not in ("in_shardings", "out_shardings")}
        if in_shardings is not None:
            jit_kwargs["in_shardings"] = _in_shardings(fun, in_shardings, args, kwargs, kept, len(dyn))
    return _Entry(fun, treedef, static, jit_kwargs, False, out_shardings, _name(fun, args, kept))


def _name(fun: Any, args: tuple[Any, ...] = (), kept: int = 0) -> str:
    """The function's name for messages: the Module's class when filter_jit wraps a Module
    (``args[0]``, called through ``_call_first``)."""
    if fun is _call_first and kept and args:
        return str(type(args[0]).__qualname__)
    return str(getattr(fun, "__qualname__", None) or type(fun).__name__)


def _in_shardings(fun: Any, shardings: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kept: int, n: int) -> tuple[Any, ...]:
    """jax.jit's in_shardings for filter_jit's array-leaf list: the entries of filter_jit's
    ``in_shardings`` (a prefix of the positional arguments) at the array leaves of
    ``args[kept:]``; None (unconstrained) for a leading Module's leaves and keyword arguments."""
    user = args[kept:]
    lead = len(_split(_tree.leaves(args[:kept]))[0]) if kept else 0
    per_leaf = leaf_shardings(shardings, user, f"filter_jit({_name(fun, args, kept)}): in_shardings", "args")
    out: list[Any] = [None] * lead
    out += [s for s, x in zip(per_leaf, _tree.leaves(user)) if _is_dynamic(x)]
    out += [None] * (n - len(out))
    return tuple(out)


def _shown(path: tuple[Any, ...], kept: int) -> str:
    """A key path into ``(args, kwargs)`` as the user sees it: ``args[0]['w']``, ``keyword
    argument g[0]``, or a place in the function's own Module (``kept``: 1 if ``args[0]`` is
    that Module)."""
    where, rest = path[0].idx, path[1:]
    if where == 1:
        return "keyword argument " + _tree.keystr(rest[:1], simple=True) + _tree.keystr(rest[1:])
    if kept and rest[0].idx < kept:
        return f"the array at {_tree.keystr(rest[1:]) or '<root>'} of the function's own Module"
    return f"argument args[{rest[0].idx - kept}]{_tree.keystr(rest[1:])}"


_FULL_SHAPE = re.compile(r"full shape: (\([^)]*\))")
_BARE_OUTPUT = "One of pjit outputs with pytree key path result is"
_DYN_PATH = re.compile(r"\s*with pytree key path dyn\[(\d+)\]")
_ARG_SHARDING = re.compile(r"arg sharding: (.*) for arg type: (\S+)", re.DOTALL)


def _call_error(err: Exception, args: tuple[Any, ...], kwargs: dict[str, Any], kept: int) -> Exception | None:
    """A clearer error for a call that failed with ``err``, naming the argument's key path, or
    None to re-raise ``err`` as it is.  Cases: an array argument was deleted (donated to an
    earlier call); JAX's errors about an argument and its ``in_shardings`` entry, which name a
    position in filter_jit's list of array leaves (``dyn[2]``) or no argument at all."""
    dyn = [(p, x) for p, x in _tree.leaves_with_path((args, kwargs)) if _is_dynamic(x)]
    for path, x in dyn:
        try:
            gone = isinstance(x, jax.Array) and x.is_deleted()
        except Exception:  # noqa: BLE001 - not a concrete array (a tracer): not deleted
            gone = False
        if gone:
            return RuntimeError(
                f"filter_jit: {_shown(path, kept)} (a {x.dtype}{list(x.shape)} array) has been deleted: it "
                "was donated to an earlier call (donate='all' or 'all-except-first' gives its buffer "
                "to that call's output) or deleted explicitly. Pass that call's output instead (e.g. "
                "`params = step(params, batch)`), copy the array before the call, or do not donate "
                "it (donate='all-except-first' keeps the first argument, donate='none' keeps all)"
            )
    if "previously donated in the same call" in str(err):  # one buffer passed twice, donated
        seen: dict[int, Any] = {}
        for path, x in dyn:
            if id(x) in seen:
                return ValueError(
                    f"filter_jit: {_shown(seen[id(x)], kept)} and {_shown(path, kept)} are the same array, "
                    "and its buffer is donated: it cannot be given to the call twice. Pass a copy "
                    "as one of them, or do not donate it (donate='none', or 'all-except-first' "
                    "when it is in the first argument)"
                )
            seen[id(x)] = path
    if not isinstance(err, ValueError):
        return None
    text = str(err)
    if "should evenly divide the shape" in text:  # jax's IndivisibleError names no argument
        m = _FULL_SHAPE.search(text)
        if m is not None:
            hits = [p for p, x in dyn if str(tuple(getattr(x, "shape", ()))) == m.group(1)]
            if hits:
                shown = ", ".join(_shown(p, kept) for p in hits[:4]) + (", ..." if len(hits) > 4 else "")
                return ValueError(
                    f"filter_jit: the in_shardings entry for {'' if len(hits) == 1 else 'one of '}{shown} "
                    f"(shape {m.group(1)}) does not divide it: {text}"
                )
            return ValueError(f"filter_jit: an output of shape {m.group(1)} does not fit its out_shardings entry: {text}")
    if text.startswith(_BARE_OUTPUT):
        return ValueError("filter_jit: the output (one array) is" + text[len(_BARE_OUTPUT):])
    m = _DYN_PATH.search(text)
    if m is not None and int(m.group(1)) < len(dyn):
        shown = _shown(dyn[int(m.group(1))][0], kept)
        return ValueError(f"filter_jit: {shown}: " + text[: m.start()] + text[m.end():])
    m = _ARG_SHARDING.search(text)
    if m is not None:
        for path, x in dyn:
            if str(getattr(x, "sharding", None)) == m.group(1).strip() and str(jax.typeof(x)) == m.group(2):
                return ValueError(
                    f"filter_jit: {_shown(path, kept)} is committed to a sharding other than its "
                    f"in_shardings entry (move it with jax.device_put, or give it None): {text}"
                )
    return None


class _NotDirect(Exception):
    """Raised inside a direct-mode trace whose output is not arrays only."""


def _direct_jit(fun: Callable[..., Any]) -> Any:
    """``jax.jit`` of ``fun`` itself, for calls whose arguments are all arrays or None.

    Such arguments have no static leaves, so JAX's C++ path can take them as they are.  The
    output must then need no rebuilding by spruce: arrays in (nested) tuples, lists and None,
    which JAX rebuilds exactly as spruce would; anything else raises _NotDirect at trace time
    and the caller stops using this mode.
    """

    def direct(*args: Any) -> Any:
        out = fun(*args)
        if not _arrays_only(out):
            raise _NotDirect()
        return out

    return jax.jit(direct)


def _arrays_only(x: Any) -> bool:
    if x is None or _is_dynamic(x):
        return True
    if type(x) is tuple or type(x) is list:
        return all(_arrays_only(v) for v in x)
    return False


def _call_first(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    return f(*args, **kwargs)


def _compile(
    inner: Callable[..., Any], donate: str, jit_kwargs: dict[str, Any], kept: int, allow_direct: bool
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The compiled state of ``inner`` under the given options: ``(call, lower)``.

    ``call(*args, **kwargs)`` runs ``inner`` compiled (a cache of entries keyed by the structure
    and static leaves of the arguments); ``lower(*args, **kwargs)`` returns jax.jit's Lowered of
    a fresh entry.  ``kept`` is 1 when ``args[0]`` is a leading argument that is not the user's
    (a Module as the function, or the instance of a bound method); ``allow_direct`` enables the
    direct mode (arguments all arrays or None passed to a ``jax.jit`` of ``inner`` itself).
    """
    cache: dict[tuple[Any, ...], Callable[..., Any]] = {}
    entries: dict[tuple[Any, ...], _Entry] = {}
    arrays = _ARRAY_TYPES
    walkers = _WALKERS
    walk = _walk

    # Calls whose positional arguments are all arrays or None (and no keyword arguments) go
    # straight to a jax.jit of inner: nothing to split, nothing to key.  Not with jit options or
    # donation, nor with a leading Module argument.
    direct: Any = _direct_jit(inner) if (allow_direct and not jit_kwargs and donate == "none") else None
    direct_types = _DIRECT_TYPES

    # (key list, cache callable) of the last call: a repeated structure skips hashing the key.
    # One tuple, replaced whole, so concurrent calls never pair a key with another's callable.
    last: list[tuple[Any, Any]] = [(None, None)]

    def slow(k: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], dyn: list[Any]) -> Any:
        last[0] = (None, None)
        entry = entries.get(k)
        if entry is None:  # a new structure or new static leaves: compile
            entry = _new_entry(inner, args, kwargs, dyn, jit_kwargs, donate, kept)
            out, fast = entry.first_call(dyn)
            entries[k] = entry
            cache[k] = fast
            return out
        # a retrace for new shapes changed the output description: compile per array types
        fast = entry.by_avals()
        cache[k] = fast
        return fast(*dyn)

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal direct
        try:
            if direct is not None and not kwargs:
                for a in args:
                    if type(a) not in direct_types and not _is_dynamic(a):  # (learns array types)
                        break
                else:
                    try:
                        return direct(*args)  # dispatched asynchronously, like every call below
                    except _NotDirect:  # the output needs spruce: use the general path from now on
                        direct = None
            # _walk over each argument, with the top level inlined.
            key: list[Any] = []
            dyn: list[Any] = []
            for a in args:
                t = type(a)
                if t in arrays:
                    key.append(_DYN)
                    dyn.append(a)
                elif a is None:
                    key.append(None)
                else:
                    w = walkers.get(t)
                    if w is None:
                        walk(a, key, dyn)
                    else:
                        w(a, key, dyn)
            if kwargs:
                key.append(_KWARGS)
                _walk_dict(kwargs, key, dyn)
            last_key, fast = last[0]
            try:
                same = key == last_key
            except Exception:  # a static leaf whose == raises: compare through the cache instead
                same = False
            if not same:
                k = tuple(key)
                try:
                    fast = cache.get(k)
                except TypeError:
                    raise _unhashable_static(k, "filter_jit") from None
                if fast is None:
                    return slow(k, args, kwargs, dyn)
                last[0] = (key, fast)
            try:
                return fast(*dyn)  # dispatched asynchronously: nothing here waits for the result
            except _Restructure:
                return slow(tuple(key), args, kwargs, dyn)
        except (ValueError, RuntimeError) as err:  # (free unless raised)
            try:
                better = _call_error(err, args, kwargs, kept)
            except Exception:  # noqa: BLE001 - explaining failed: the original error stands
                better = None
            if better is None:
                raise
            raise better from err

    if donate != "none":
        plain = call

        def call(*args: Any, **kwargs: Any) -> Any:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_DONATION_WARNING)
                return plain(*args, **kwargs)

    def lower(*args: Any, **kwargs: Any) -> Any:
        dyn = _split(_tree.leaves((args, kwargs)))[0]
        entry = _new_entry(inner, args, kwargs, dyn, jit_kwargs, donate, kept)
        entry.prepare(dyn)
        return entry.jitted.lower(*dyn)

    return call, lower


# The compiled states shared by filter_jit wrappers of the same function and options, most
# recently used last.  Key: (kind, id of the function, id of a bound method's instance or 0,
# donate, jit options); value: (the function, the instance's weak reference or None, (call,
# lower)).  A hit also checks identity, since an id can be reused once its object is gone.
_SHARED_MAX = 256
_SHARED: collections.OrderedDict[tuple[Any, ...], tuple[Any, Any, tuple[Callable[..., Any], Callable[..., Any]]]] = (
    collections.OrderedDict()
)
_SHARED_LOCK = threading.RLock()  # (reentrant: a weak reference's callback may run inside it)


def _forget(key: tuple[Any, ...], ref: Any) -> None:
    """Callback of a bound method's instance's weak reference: drop its compiled state."""
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is not None and held[1] is ref:
            del _SHARED[key]


def _shared(
    kind: str,
    func: Callable[..., Any],
    instance: Any,
    donate: str,
    jit_kwargs: dict[str, Any],
    build: Callable[[Any], tuple[Callable[..., Any], Callable[..., Any]]],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The (call, lower) pair for ``func`` (and a bound method's ``instance``, held weakly if it
    can be), built by ``build(ref)`` on a miss; ``ref()`` returns the instance.  Options that
    are not hashable are not shared."""
    try:
        key: tuple[Any, ...] = (kind, id(func), 0 if instance is None else id(instance), donate)
        key += tuple(sorted(jit_kwargs.items()))
        hash(key)
    except TypeError:
        return build(lambda: instance)
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is not None and held[0] is func and (held[1] is None or held[1]() is instance):
            _SHARED.move_to_end(key)
            return held[2]
        ref: Any = None
        if instance is not None:
            try:
                ref = weakref.ref(instance, functools.partial(_forget, key))
            except TypeError:  # not weakly referenceable: held by the (bounded) cache
                ref = lambda: instance
        compiled = build(ref)
        _SHARED[key] = (func, ref, compiled)
        if len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
        return compiled


def _method_of(func: Callable[..., Any], ref: Any) -> Callable[..., Any]:
    """``func`` bound to the instance that ``ref()`` returns (alive whenever a wrapper runs)."""

    def method(*args: Any, **kwargs: Any) -> Any:
        return func(ref(), *args, **kwargs)

    return method


# jax.jit options whose meaning depends on argument positions or on the output's structure:
# jax.jit would see filter_jit's list of array leaves, not the user's arguments.
_POSITIONAL_JIT_OPTIONS = {
    "static_argnums": "every non-array leaf is already static; pass a Python value or mark a Module field static",
    "static_argnames": "every non-array leaf is already static; pass a Python value or mark a Module field static",
    "donate_argnums": 'use donate="all" or donate="all-except-first"',
    "donate_argnames": 'use donate="all" or donate="all-except-first"',
}
_DONATE = ("none", "all", "all-except-first")
_DONATION_WARNING = "Some donated buffers were not usable"


def filter_jit(
    fun: Callable[..., Any] | None = None,
    *,
    donate: str = "none",
    in_shardings: Any = None,
    out_shardings: Any = None,
    **jit_kwargs: Any,
) -> Any:
    """Compile ``fun`` with ``jax.jit``, tracing only the array leaves of its arguments.

    Args:
      fun: any function of pytrees (positional and keyword arguments).  Usable as
        ``@filter_jit`` or ``@filter_jit(**jit_kwargs)``.  If ``fun`` is itself a pytree node
        (a Module with ``__call__``), or a bound method whose instance is one (``model.apply``
        of a Module), the array leaves of that Module are traced too rather than baked into the
        compiled code as constants.
      donate: which input buffers XLA may reuse for the outputs (``jax.jit``'s donation, by
        argument as Equinox's ``filter_jit``): ``"none"`` (default), ``"all"`` (every array
        leaf of the arguments, and of ``fun``'s own Module as above), or
        ``"all-except-first"`` (all but those of the first positional argument, and never
        ``fun``'s own).  A donated array is deleted by the call (``x.is_deleted()``); reading it
        afterwards raises.  JAX's warning about donated buffers it could not reuse is not shown.
        Passing a donated array to a later call raises a RuntimeError naming its key path
        (``args[0]['w']``) and how to avoid it.
      in_shardings: where the array leaves of the positional arguments must be, as in
        ``jax.jit``: a ``jax.sharding.Sharding`` (or ``jax.Device``) for all of them, or a
        tuple with one entry per positional argument, each a Sharding, None (unconstrained) or
        a tree of them that is a prefix of that argument (``spruce.sharding.shardings(params,
        mesh, rules)`` fits).  Only array leaves get a sharding; entries over static leaves are
        ignored; keyword arguments (and ``fun``'s own Module) are unconstrained.  As in
        ``jax.jit``, NumPy arrays and uncommitted JAX arrays are moved there, and a JAX array
        committed to another sharding is an error.
      out_shardings: where the array leaves of the output are placed: a Sharding, or a tree of
        them (None: the compiler chooses) that is a prefix of the output.  The output's
        structure is learned by tracing once before compiling.
      jit_kwargs: other ``jax.jit`` options (e.g. ``keep_unused``, ``inline``,
        ``compiler_options``), forwarded as they are.  The options that count positions
        (``static_argnums``, ``static_argnames``, ``donate_argnums``, ``donate_argnames``)
        are refused: jax.jit would apply them to filter_jit's list of array leaves, not to
        the arguments.

    Returns:
      A function with ``fun``'s signature (usable as a method: it binds like any function).
      Array leaves (JAX and NumPy arrays, NumPy scalars) of the inputs are traced; every other
      leaf (Python numbers, strings, functions, ...) and the tree structures are static: a new
      combination of them compiles anew.  Outputs: array leaves come back as JAX arrays, other
      leaves as the Python objects the trace produced.

      Its ``lower(*args, **kwargs)`` traces for those arguments without running and returns
      ``jax.jit``'s ``jax.stages.Lowered`` (``.as_text()``, ``.compile()``, ``.cost_analysis()``)
      of the function of the array leaves, as Equinox's ``filter_jit(f).lower``.  Its compiled
      form is called with those array leaves as positional arguments, in ``spruce.tree.flatten``
      order of ``(args, kwargs)`` (preceded by those of ``fun``'s own Module, as above), and
      returns the output's array leaves: the array itself for an output that is one array,
      otherwise their list.  Static arguments are fixed by the ``lower`` call.

    Raises:
      TypeError: ``fun`` is not callable; a static leaf of the arguments is not hashable; one
        of the refused ``jax.jit`` options above is given (the message says what to use).
      ValueError: ``donate`` is not one of the three strings; two traces for the same arguments
        (same shapes and dtypes) returned different non-array outputs; ``in_shardings`` or
        ``out_shardings`` is not a prefix of the arguments / the output (at the call, naming the
        key path, ``args[1]['w']`` or ``output[0]``).
      RuntimeError: an array argument has been deleted (donated to an earlier call).

    Wrapping the same function again (or a bound method of the same instance, or a bound method
    of any Module instance with the same method, or any Module as the function) with the same
    options reuses the compiled code of the earlier wrapper: the functions are kept in a bounded
    cache (the 256 most recently wrapped, with a bound method's instance held by a weak
    reference when it can be) shared by all threads.  Options that are not hashable (e.g. a
    ``compiler_options`` dict) give a wrapper of its own.

    The call never waits for the computation: like ``jax.jit`` it returns as soon as the work is
    dispatched (JAX's asynchronous dispatch); block with ``jax.block_until_ready``.

    Cost per call: one walk of the arguments in Python that reads Module fields directly (no
    PyTreeDef is built), one comparison with the last call's key (or one dict lookup keyed by
    the structure and static leaves), and one call of the jitted function with the array leaves
    as positional arguments (JAX's C++ fast path); an output that is a single array is returned
    as jax.jit returns it, other outputs are rebuilt with one spruce unflatten.  A call whose
    arguments are all arrays or None goes to a ``jax.jit`` of ``fun`` itself (while its outputs
    are arrays in tuples, lists and None); ``fun`` may therefore be traced more than once.
    Static leaves are compared by type and ``==`` (so ``1``, ``1.0`` and ``True`` compile
    separately).  The walk assumes that the pytree registration of a Module class or a
    namedtuple type does not change once filter_jit has seen one of its instances
    (RuntimeError at the next compilation if it does).

    Follows equinox.filter_jit, except that it never blocks on the result (equinox's does, on
    every call), static leaves are keyed with their type, and it takes ``in_shardings`` /
    ``out_shardings`` as trees over the arguments and output (equinox has ``filter_shard``
    only; spruce has that too, in ``spruce.jax``).

    >>> import jax.numpy as jnp
    >>> f = filter_jit(lambda x, n: x * n)
    >>> f(jnp.ones(2), 3).tolist()
    [3.0, 3.0]
    >>> f.lower(jnp.ones(2), 3).compile()(jnp.ones(2)).tolist()
    [3.0, 3.0]
    >>> one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    >>> g = filter_jit(lambda p, n: p['w'] * n, in_shardings=({'w': one}, None), out_shardings=one)
    >>> y = g({'w': jnp.ones(2)}, 3)
    >>> y.tolist(), y.sharding == one
    ([3.0, 3.0], True)
    """
    for name in jit_kwargs:
        if name in _POSITIONAL_JIT_OPTIONS:
            raise TypeError(
                f"filter_jit does not take {name}=: jax.jit would apply it to the list of array "
                f"leaves that filter_jit compiles, not to your arguments; {_POSITIONAL_JIT_OPTIONS[name]}"
            )
    if donate not in _DONATE:
        raise ValueError(f"filter_jit: donate must be one of {', '.join(map(repr, _DONATE))}, got {donate!r}")
    if fun is None:
        return lambda f: filter_jit(f, donate=donate, in_shardings=in_shardings, out_shardings=out_shardings, **jit_kwargs)
    if in_shardings is not None:
        # (one entry per positional argument: a list is taken as jax.jit takes it, as a tuple)
        jit_kwargs["in_shardings"] = tuple(in_shardings) if type(in_shardings) is list else in_shardings
    if out_shardings is not None:
        jit_kwargs["out_shardings"] = out_shardings
    if not callable(fun):
        raise TypeError(f"filter_jit: expected a function, got {type(fun).__name__}")

    lead: Any  # a Module passed as the leading argument: fun itself, or a bound method's instance
    if _tree.is_tree_node(type(fun)):
        lead = fun
        call, lower = _shared(
            "module", _call_first, None, donate, jit_kwargs, lambda _: _compile(_call_first, donate, jit_kwargs, 1, False)
        )
    elif isinstance(fun, types.MethodType) and _tree.is_tree_node(type(fun.__self__)):
        lead = fun.__self__
        func = fun.__func__
        call, lower = _shared(
            "method", func, None, donate, jit_kwargs, lambda _: _compile(func, donate, jit_kwargs, 1, False)
        )
    elif isinstance(fun, types.MethodType):  # the instance is static: compiled per instance
        func = fun.__func__
        call, lower = _shared(
            "method",
            func,
            fun.__self__,
            donate,
            jit_kwargs,
            lambda ref: _compile(_method_of(func, ref), donate, jit_kwargs, 0, True),
        )
        lead = None
    else:

        def build(_: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
            call, lower = _compile(fun, donate, jit_kwargs, 0, True)
            functools.update_wrapper(call, fun)
            call.lower = lower  # type: ignore[attr-defined]
            return call, lower

        return _shared("function", fun, None, donate, jit_kwargs, build)[0]

    if lead is None:

        def jitted(*args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        def jitted_lower(*args: Any, **kwargs: Any) -> Any:
            return lower(*args, **kwargs)

    else:

        def jitted(*args: Any, **kwargs: Any) -> Any:
            return call(lead, *args, **kwargs)

        def jitted_lower(*args: Any, **kwargs: Any) -> Any:
            return lower(lead, *args, **kwargs)

    functools.update_wrapper(jitted, fun, updated=())  # (not a Module's fields)
    jitted.lower = jitted_lower  # type: ignore[attr-defined]
    return jitted
