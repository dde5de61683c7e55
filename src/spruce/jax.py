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
from typing import Any, Callable, Hashable

import jax

from . import tree as _tree
from ._filters import combine, partition
from ._module import _jax_hook
from ._module._arrays import is_array, is_inexact_array

_jax_hook.flush()

__all__ = ["filter_grad", "filter_jit", "filter_value_and_grad", "filter_vmap"]


class _Dynamic:
    """Marks a traced position in the static part of a split."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<dynamic>"


_DYN: Any = _Dynamic()
_flatten = _tree.flatten

# Leaf types decided without calling is_array (the per-call fast path of filter_jit).
_ARRAY_TYPES: set[type] = set()
_STATIC_TYPES: set[type] = {int, float, bool, complex, str, bytes, type(None), type, _Dynamic}


def _is_dynamic(x: Any) -> bool:
    t = type(x)
    if t in _ARRAY_TYPES:
        return True
    if t in _STATIC_TYPES:
        return False
    if is_array(x):
        _ARRAY_TYPES.add(t)  # is_array depends on the type only, so the answer can be cached
        return True
    return False


def _split(leaves: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
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


def _unhashable_static(static: tuple[Any, ...], what: str) -> TypeError:
    bad = []
    for s in static:
        try:
            hash(s)
        except TypeError:
            bad.append(type(s).__name__)
    return TypeError(
        f"{what}: non-array leaves of the arguments are static (part of the compilation cache "
        f"key) and must be hashable; got unhashable leaves of type(s) {sorted(set(bad))}. "
        "Convert them to arrays or hashable values, or mark them static in a Module field."
    )


class _Jitted:
    """The callable returned by ``filter_jit``."""

    def __init__(self, fun: Callable[..., Any], jit_kwargs: dict[str, Any]) -> None:
        self._fun = fun
        self._jit_kwargs = jit_kwargs
        self._cache: dict[Hashable, tuple[Any, list[Any]]] = {}
        functools.update_wrapper(self, fun)

    def _entry(self, treedef: Any, static: tuple[Any, ...]) -> tuple[Any, list[Any]]:
        fun = self._fun
        cell: list[Any] = [None, None]

        def traced(dyn: list[Any]) -> list[Any]:
            args, kwargs = treedef.unflatten(_merge(dyn, static))
            out = fun(*args, **kwargs)
            out_leaves, out_def = _tree.flatten(out)
            out_dyn, out_static = _split(out_leaves)
            cell[0] = out_def
            cell[1] = None if len(out_dyn) == len(out_leaves) else out_static
            return out_dyn

        return jax.jit(traced, **self._jit_kwargs), cell

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = _flatten((args, kwargs))
        # The split, inlined (this is the per-call path): array leaves are traced, the others
        # are part of the cache key.
        dyn: list[Any] = []
        static: list[Any] = []
        arrays = _ARRAY_TYPES
        for x in leaves:
            if type(x) in arrays or _is_dynamic(x):
                dyn.append(x)
                static.append(_DYN)
            else:
                static.append(x)
        key = (treedef, tuple(static))
        try:
            entry = self._cache.get(key)
        except TypeError:
            raise _unhashable_static(key[1], "filter_jit") from None
        if entry is None:
            entry = self._entry(treedef, key[1])
            self._cache[key] = entry
        jitted, cell = entry
        out_dyn = jitted(dyn)  # dispatched asynchronously: nothing here waits for the result
        out_def, out_static = cell
        if out_static is None:  # every output leaf is an array
            return out_def.unflatten(out_dyn)
        return out_def.unflatten(_merge(out_dyn, out_static))

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    def __repr__(self) -> str:
        return f"<filter_jit {getattr(self._fun, '__qualname__', self._fun)!r}>"


def filter_jit(fun: Callable[..., Any] | None = None, **jit_kwargs: Any) -> Any:
    """Compile ``fun`` with ``jax.jit``, tracing only the array leaves of its arguments.

    Args:
      fun: any function of pytrees (positional and keyword arguments).  Usable as
        ``@filter_jit`` or ``@filter_jit(donate_argnums=...)``-style with extra keyword
        arguments passed to ``jax.jit`` (they refer to the single list of traced leaves).
      jit_kwargs: forwarded to ``jax.jit``.

    Returns:
      A callable with ``fun``'s signature.  Array leaves (JAX and NumPy arrays) of the inputs
      are traced; every other leaf (Python numbers, strings, functions, ...) and the tree
      structures are static: a new combination of them compiles anew (the split is cached per
      structure and static values, which must therefore be hashable — TypeError otherwise).
      Outputs: array leaves come back as JAX arrays, other leaves as the Python objects the
      trace produced (the static part of the output is recorded at trace time and must not
      depend on input shapes).

    The call never waits for the computation: like ``jax.jit``, it returns as soon as the work
    is dispatched (JAX's asynchronous dispatch); block with ``jax.block_until_ready``.

    Follows equinox.filter_jit (which, unlike this one, blocks on every call).
    """
    if fun is None:
        return lambda f: filter_jit(f, **jit_kwargs)
    if not callable(fun):
        raise TypeError(f"filter_jit: expected a function, got {type(fun).__name__}")
    return _Jitted(fun, jit_kwargs)


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

