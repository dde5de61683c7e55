"""spruce.jax: JAX transforms that accept any pytree (imports JAX).

``filter_jit``, ``filter_grad``, ``filter_value_and_grad`` and ``filter_vmap`` take functions
whose arguments are arbitrary pytrees — Modules holding functions, strings, Python numbers —
and treat the array leaves (``spruce.is_array``: JAX and NumPy arrays) as traced / batched /
differentiated values and everything else as static.  Semantics follow Equinox's functions of
the same names.

Importing this module also registers every ``spruce.Module`` class created so far with
``jax.tree_util`` (normally already done by the import hook described in
``spruce/_module/_jax_hook.py``).
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Any, Callable, Hashable

import jax

from . import tree as _tree
from ._filters import combine, partition
from ._module import _jax_hook
from ._module._arrays import is_array, is_inexact_array
from ._module._module import _ModuleAux, _ModuleMeta

_jax_hook.flush()

__all__ = ["filter_grad", "filter_jit", "filter_value_and_grad", "filter_vmap"]


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

    __slots__ = ("fun", "treedef", "static", "jit_kwargs", "nested", "mode", "out_def", "out_static", "jitted")

    def __init__(
        self, fun: Callable[..., Any], treedef: Any, static: tuple[Any, ...], jit_kwargs: dict[str, Any], nested: bool
    ) -> None:
        self.fun = fun
        self.treedef = treedef
        self.static = static
        self.jit_kwargs = jit_kwargs
        self.nested = nested
        self.mode = -1
        self.out_def: Any = None
        self.out_static: tuple[Any, ...] = ()
        self.jitted: Any = jax.jit(self._traced, **jit_kwargs)

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
                sub = _Entry(self.fun, self.treedef, self.static, self.jit_kwargs, nested=True)
                out, table[k] = sub.first_call(list(dyn))
                return out
            return fast(*dyn)

        return call_by_avals


def _new_entry(
    fun: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], dyn: list[Any], jit_kwargs: dict[str, Any]
) -> _Entry:
    """The cache entry for arguments whose walk gave ``dyn`` (a cache miss)."""
    leaves, treedef = _tree.flatten((args, kwargs))
    dyn_check, static = _split(leaves)
    if len(dyn_check) != len(dyn) or any(a is not b for a, b in zip(dyn_check, dyn)):
        raise RuntimeError(  # only reachable if a pytree registration changed under filter_jit
            "filter_jit: the array leaves found by its cached walk differ from those of "
            "spruce.tree.flatten; was a Module class or namedtuple type registered or "
            "unregistered after filter_jit first saw one of its instances?"
        )
    return _Entry(fun, treedef, static, jit_kwargs, nested=False)


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


def _call_first(f: Any, *args: Any, **kwargs: Any) -> Any:
    return f(*args, **kwargs)


def filter_jit(fun: Callable[..., Any] | None = None, **jit_kwargs: Any) -> Any:
    """Compile ``fun`` with ``jax.jit``, tracing only the array leaves of its arguments.

    Args:
      fun: any function of pytrees (positional and keyword arguments).  Usable as
        ``@filter_jit`` or ``@filter_jit(**jit_kwargs)``.  If ``fun`` is itself a pytree node
        (a Module with ``__call__``), its array leaves are traced too rather than baked into
        the compiled code as constants.
      jit_kwargs: forwarded to ``jax.jit``, which sees a function of the array leaves of the
        arguments as positional arguments, in ``spruce.tree.flatten((args, kwargs))`` order
        (so ``donate_argnums`` counts array leaves, not arguments).

    Returns:
      A function with ``fun``'s signature (usable as a method: it binds like any function).
      Array leaves (JAX and NumPy arrays, NumPy scalars) of the inputs are traced; every other
      leaf (Python numbers, strings, functions, ...) and the tree structures are static: a new
      combination of them compiles anew.  Outputs: array leaves come back as JAX arrays, other
      leaves as the Python objects the trace produced.

    Raises:
      TypeError: ``fun`` is not callable; a static leaf of the arguments is not hashable.
      ValueError: two traces for the same arguments (same shapes and dtypes) returned
        different non-array outputs.

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
    every call) and static leaves are keyed with their type.
    """
    if fun is None:
        return lambda f: filter_jit(f, **jit_kwargs)
    if not callable(fun):
        raise TypeError(f"filter_jit: expected a function, got {type(fun).__name__}")
    cache: dict[tuple[Any, ...], Callable[..., Any]] = {}
    entries: dict[tuple[Any, ...], _Entry] = {}
    arrays = _ARRAY_TYPES
    walkers = _WALKERS
    walk = _walk

    # A Module (or other pytree) as the function is walked as a leading argument.
    fun_is_tree = _tree.is_tree_node(type(fun))
    inner: Callable[..., Any] = _call_first if fun_is_tree else fun

    # Calls whose positional arguments are all arrays or None (and no keyword arguments) go
    # straight to a jax.jit of fun: nothing to split, nothing to key.  Not with jit_kwargs
    # (their argument numbers refer to array leaves), nor for a Module as the function.
    direct: Any = None if (jit_kwargs or fun_is_tree) else _direct_jit(fun)
    direct_types = _DIRECT_TYPES

    # (key list, cache callable) of the last call: a repeated structure skips hashing the key.
    # One tuple, replaced whole, so concurrent calls never pair a key with another's callable.
    last: list[tuple[Any, Any]] = [(None, None)]

    def slow(k: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], dyn: list[Any]) -> Any:
        last[0] = (None, None)
        entry = entries.get(k)
        if entry is None:  # a new structure or new static leaves: compile
            entry = _new_entry(inner, args, kwargs, dyn, jit_kwargs)
            out, fast = entry.first_call(dyn)
            entries[k] = entry
            cache[k] = fast
            return out
        # a retrace for new shapes changed the output description: compile per array types
        fast = entry.by_avals()
        cache[k] = fast
        return fast(*dyn)

    def jitted(*args: Any, **kwargs: Any) -> Any:
        nonlocal direct
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

    if fun_is_tree:

        def jitted_module(*args: Any, **kwargs: Any) -> Any:
            return jitted(fun, *args, **kwargs)

        functools.update_wrapper(jitted_module, fun, updated=())  # (not the Module's fields)
        return jitted_module
    functools.update_wrapper(jitted, fun)
    return jitted


def _grad_wrapper(fun: Callable[..., Any], has_aux: bool, value: bool) -> Callable[..., Any]:
    name = "filter_value_and_grad" if value else "filter_grad"

    @functools.wraps(fun)
    def wrapper(x: Any, *args: Any, **kwargs: Any) -> Any:
        diff, nondiff = partition(x, is_inexact_array)

        def f(d: Any) -> Any:
            return fun(combine(d, nondiff), *args, **kwargs)

        transform = jax.value_and_grad if value else jax.grad
        try:
            return transform(f, has_aux=has_aux)(diff)
        except TypeError as e:
            if "must be real" in str(e) or "scalar" in str(e):
                e.add_note(f"({name}: the function must return a real scalar array)")
            raise

    return wrapper


def filter_grad(fun: Callable[..., Any], *, has_aux: bool = False) -> Callable[..., Any]:
    """``jax.grad`` with respect to the floating-point array leaves of the first argument.

    ``filter_grad(f)(x, *args, **kwargs)`` differentiates ``f`` (which must return a real
    scalar, or ``(scalar, aux)`` with ``has_aux=True``) with respect to the inexact arrays of
    ``x`` (``spruce.is_inexact_array``); the gradient is a pytree like ``x`` with ``None`` at
    every other leaf (integer arrays, Python numbers, functions...).  Other arguments are
    passed through unchanged and not differentiated.  Follows equinox.filter_grad.
    """
    return _grad_wrapper(fun, has_aux, value=False)


def filter_value_and_grad(fun: Callable[..., Any], *, has_aux: bool = False) -> Callable[..., Any]:
    """As ``filter_grad``, returning ``(value, grad)`` (``((value, aux), grad)`` with
    ``has_aux=True``), as ``jax.value_and_grad``.  Follows equinox.filter_value_and_grad."""
    return _grad_wrapper(fun, has_aux, value=True)


def filter_vmap(
    fun: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0, axis_name: Hashable | None = None
) -> Callable[..., Any]:
    """``jax.vmap`` over the array leaves of the arguments; other leaves are not mapped.

    Args:
      fun: a function of positional pytree arguments.
      in_axes: an int or None for every array leaf of every argument, or a tuple with one entry
        per positional argument, each an int / None or a pytree prefix of that argument with
        int / None leaves.  Non-array leaves are never mapped, whatever the spec says.
      out_axes: int or None for every array leaf of the output (non-array outputs are returned
        as traced, unmapped).
      axis_name: as jax.vmap.

    Returns:
      The vectorised function.  Raises ValueError (from JAX) when mapped sizes disagree.
    Follows equinox.filter_vmap (restricted to positional arguments).
    """

    @functools.wraps(fun)
    def wrapper(*args: Any) -> Any:
        specs = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        if len(specs) != len(args):
            raise ValueError(f"filter_vmap: in_axes has {len(specs)} entries for {len(args)} arguments")
        leaf_axes: list[Any] = []
        all_leaves: list[Any] = []
        for arg, spec in zip(args, specs):
            spec_def = _tree.structure(spec, none_is_leaf=True)
            for s, sub in zip(_tree.leaves(spec, none_is_leaf=True), spec_def.flatten_up_to(arg)):
                for leaf in _tree.leaves(sub):
                    all_leaves.append(leaf)
                    leaf_axes.append(s if is_array(leaf) else None)
        _, treedef = _tree.flatten(args)
        dyn_idx = [i for i, a in enumerate(leaf_axes) if a is not None]
        static = list(all_leaves)
        cell: list[Any] = [None, None]

        def mapped(dyn: list[Any]) -> list[Any]:
            leaves = list(static)
            for i, v in zip(dyn_idx, dyn):
                leaves[i] = v
            out = fun(*treedef.unflatten(leaves))
            out_leaves, out_def = _tree.flatten(out)
            out_dyn, out_static = _split(out_leaves)
            cell[0], cell[1] = out_def, out_static
            return out_dyn

        dyn = [all_leaves[i] for i in dyn_idx]
        axes = [leaf_axes[i] for i in dyn_idx]
        out_dyn = jax.vmap(mapped, in_axes=(axes,), out_axes=out_axes, axis_name=axis_name)(dyn)
        return cell[0].unflatten(_merge(out_dyn, cell[1]))

    return wrapper



# The other filtered transforms (shapes, jaxprs, remat, jvp/vjp, Jacobians, custom derivatives,
# callbacks) live in spruce._transforms.
from ._transforms import filter_checkpoint as filter_checkpoint  # noqa: E402
from ._transforms import filter_custom_jvp as filter_custom_jvp  # noqa: E402
from ._transforms import filter_custom_vjp as filter_custom_vjp  # noqa: E402
from ._transforms import filter_eval_shape as filter_eval_shape  # noqa: E402
from ._transforms import filter_hessian as filter_hessian  # noqa: E402
from ._transforms import filter_jacfwd as filter_jacfwd  # noqa: E402
from ._transforms import filter_jacrev as filter_jacrev  # noqa: E402
from ._transforms import filter_jvp as filter_jvp  # noqa: E402
from ._transforms import filter_make_jaxpr as filter_make_jaxpr  # noqa: E402
from ._transforms import filter_pure_callback as filter_pure_callback  # noqa: E402
from ._transforms import filter_vjp as filter_vjp  # noqa: E402
from ._transforms import __all__ as _transforms_all  # noqa: E402

__all__ += _transforms_all
