"""The compiled entry of ``filter_jit``: one ``jax.jit`` of the user's function per static
key, how its outputs are rebuilt (bare array, arrays only, mixed with static leaves), and the
direct path that skips the split when every argument is an array.
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from .. import tree as _tree
from .._place import leaf_shardings
from .._tree._text import qualified_name
from ._aot import Lowered, _quiet
from ._jit_errors import _call_error, _in_shardings, _name
from ._split import (
    _ARRAY_TYPES,
    _DIRECT_TYPES,
    _DYN,
    _KWARGS,
    _WALKERS,
    _is_dynamic,
    _merge,
    _split,
    _Token,
    _unhashable_static,
    _walk,
    _walk_call,
    _walk_dict,
)

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
        return self.rebuild(raw), self.fast()

    def rebuild(self, raw: Any) -> Any:
        """The user's output from what the ``jax.jit`` function returned (after a trace)."""
        if self.mode == _BARE:
            return raw
        if self.mode == _ARRAYS:
            return self.out_def.unflatten(raw)
        return self.out_def.unflatten(_merge(raw, self.out_static))

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


def _compile(
    inner: Callable[..., Any], donate: str, jit_kwargs: dict[str, Any], kept: int, allow_direct: bool
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The compiled state of ``inner`` under the given options: ``(call, lower)``.

    ``call(*args, **kwargs)`` runs ``inner`` compiled (a cache of entries keyed by the structure
    and static leaves of the arguments); ``lower(*args, **kwargs)`` returns a ``Lowered`` (of
    ``_aot``) of a fresh entry, whose compiled form takes ``args[kept:]`` and ``kwargs``.
    ``kept`` is 1 when ``args[0]`` is a leading argument that is not the user's (a Module as the
    function, or the instance of a bound method); ``allow_direct`` enables the direct mode
    (arguments all arrays or None passed to a ``jax.jit`` of ``inner`` itself).
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
    donating = donate != "none"

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
            if donating:
                # An array donated to an earlier call is refused here, before dispatch: XLA would
                # refuse it too, but first log its own error line to stderr.  (Only functions
                # that donate pay for the check: reusing their inputs is where the mistake is.)
                for x in dyn:
                    if isinstance(x, jax.Array) and x.is_deleted():
                        raise RuntimeError("an array argument has been deleted")  # named below
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
            except Exception:  # explaining failed: the original error stands
                better = None
            if better is None:
                raise
            raise better from err

    if donate != "none":
        plain = call

        def call(*args: Any, **kwargs: Any) -> Any:
            with _quiet(True):
                return plain(*args, **kwargs)

    def lower(*args: Any, **kwargs: Any) -> Lowered:
        key, dyn = _walk_call(args, kwargs)
        entry = _new_entry(inner, args, kwargs, dyn, jit_kwargs, donate, kept)
        with _quiet(donate != "none"):
            entry.prepare(dyn)
            lowered = entry.jitted.lower(*dyn)
        return Lowered(lowered, entry, key, args[:kept], donate != "none")

    return call, lower
