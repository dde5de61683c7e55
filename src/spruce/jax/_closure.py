"""``filter_closure_convert``: a function's closed-over JAX arrays made into pytree leaves
(imports JAX; re-exported by ``spruce.jax``)."""

from __future__ import annotations

import types
from typing import Any, Callable

import jax

from .. import tree as _tree
from .._module._filters import combine
from ._transforms import _is_struct, filter_eval_shape, filter_make_jaxpr

__all__ = ["filter_closure_convert"]


class _Signature:
    """What a closure-converted function was made for and returns (compared by identity: the
    node data of its pytree node).

    ``in_def``: the PyTreeDef of ``(args, kwargs)``; ``in_leaves``: its leaves, a
    ``jax.ShapeDtypeStruct`` (weak type dropped) in place of each array.  ``jaxpr`` is None for a
    function traced lazily (nothing closed over); otherwise ``out_def`` (a jax.tree_util
    PyTreeDef of the output's arrays, in the jaxpr's output order) and ``out_static`` (the
    output with None at each array)."""

    __slots__ = ("fn", "in_def", "in_leaves", "jaxpr", "out_def", "out_static", "out_struct")

    def __init__(self, fn: Callable[..., Any], in_def: Any, in_leaves: list[Any]) -> None:
        self.fn = fn
        self.in_def = in_def
        self.in_leaves = in_leaves
        self.jaxpr: Any = None
        self.out_def: Any = None
        self.out_static: Any = None
        self.out_struct: Any = None


class _ClosureConverted:
    """The callable returned by ``filter_closure_convert``: a pytree node whose children are
    the closed-over constants (``consts``)."""

    __slots__ = ("consts", "_sig")

    def __init__(self, consts: list[Any], sig: _Signature) -> None:
        self.consts = consts
        self._sig = sig

    @property
    def jaxpr(self) -> Any:
        """The ``jax.extend.core.Jaxpr`` of the function (None when nothing was closed over:
        the function itself is called)."""
        return self._sig.jaxpr

    @property
    def in_struct(self) -> Any:
        """``(args, kwargs)`` as given, with a ``jax.ShapeDtypeStruct`` at each array."""
        return self._sig.in_def.unflatten(self._sig.in_leaves)

    @property
    def out_struct(self) -> Any:
        """The output, with a ``jax.ShapeDtypeStruct`` at each array."""
        sig = self._sig
        if sig.out_struct is None:
            args, kwargs = self.in_struct
            sig.out_struct = filter_eval_shape(sig.fn, *args, **kwargs)
        return sig.out_struct

    def __repr__(self) -> str:
        name = getattr(self._sig.fn, "__qualname__", type(self._sig.fn).__name__)
        return f"filter_closure_convert({name}, consts={len(self.consts)})"

    def _dynamic(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The array leaves of ``(args, kwargs)``, after checking that they fit the arguments
        the function was converted for."""
        sig = self._sig
        leaves_with_path: list[tuple[Any, Any]] = _tree.leaves_with_path((args, kwargs))
        treedef = _tree.structure((args, kwargs))
        if treedef != sig.in_def:
            raise ValueError(
                f"filter_closure_convert: called with arguments of structure {treedef}, but converted "
                f"for arguments of structure {sig.in_def}"
            )
        dyn = []
        for (path, x), want in zip(leaves_with_path, sig.in_leaves):
            where = ("args" if path[0].idx == 0 else "kwargs") + _tree.keystr(path[1:])
            if isinstance(want, jax.ShapeDtypeStruct):
                if not _is_struct(x) or x.shape != want.shape or x.dtype != want.dtype:
                    got = f"{x.dtype}{list(x.shape)}" if _is_struct(x) else repr(x)
                    raise ValueError(
                        f"filter_closure_convert: {where} is {got}, but the function was converted for "
                        f"an array {want.dtype}{list(want.shape)} there"
                    )
                dyn.append(x)
            elif _is_struct(x) or type(x) is not type(want) or not _same(x, want):
                raise ValueError(
                    f"filter_closure_convert: {where} is {x!r}, but the function was converted for "
                    f"{want!r} there (non-array arguments are fixed by the conversion)"
                )
        return dyn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sig = self._sig
        dyn = self._dynamic(args, kwargs)
        if sig.jaxpr is None:
            return sig.fn(*args, **kwargs)
        flat = jax.core.eval_jaxpr(sig.jaxpr, self.consts, *dyn)
        return combine(jax.tree_util.tree_unflatten(sig.out_def, flat), sig.out_static)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # a value whose == raises or is not a bool: not the same
        return False


_tree.register_pytree_with_keys(
    _ClosureConverted,
    lambda c: (((_tree.GetAttrKey("consts"), c.consts),), c._sig),
    lambda sig, children: _ClosureConverted(next(iter(children)), sig),
    lambda c: ((c.consts,), c._sig),
)


def filter_closure_convert(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``jax.closure_convert`` for a function of any pytrees: the JAX arrays that ``fn``
    closes over (tracers of an enclosing transform included) become leaves of the returned
    function, so they can cross a boundary that only sees arguments (``filter_custom_jvp``,
    ``filter_custom_vjp``, ``jax.custom_vjp``...).

    Args:
      fn: the function, called as ``fn(*args, **kwargs)``; may return any pytree.
      args, kwargs: example arguments: ``fn`` is traced (not run) with their array leaves (and
        ``jax.ShapeDtypeStruct`` placeholders) as inputs; every other leaf, Python numbers
        included, is fixed.

    Returns:
      A callable pytree node taking the same arguments: arrays of the same shapes and dtypes
      (weak types ignored) where the examples had them, equal values elsewhere.  Its children
      are ``consts``, the list of every JAX array the traced function closes over (all dtypes,
      not only floating point), in the ``jaxpr``'s order; ``in_struct`` and ``out_struct``
      describe its arguments and output with ``jax.ShapeDtypeStruct`` at the arrays.  A plain
      function that closes over nothing is not traced: it is called as it is (``consts`` is
      empty).

    Raises:
      ValueError: (when called) arguments of another structure, an array of another shape or
        dtype, or a non-array leaf not equal to the example's; the message names the key path.

    Follows ``equinox.filter_closure_convert``.

    >>> import jax, jax.numpy as jnp
    >>> def outer(x):
    ...     z = 2.0 * x
    ...     g = filter_closure_convert(lambda a, n: z * a ** n, jnp.ones(2), 3)
    ...     return g.consts[0] is z, g(jnp.full(2, 2.0), 3)
    >>> same, out = outer(jnp.array(1.5))
    >>> same, out.tolist()
    (True, [24.0, 24.0])
    """
    leaves, in_def = _tree.flatten((args, kwargs))
    in_leaves = [jax.ShapeDtypeStruct(x.shape, x.dtype) if _is_struct(x) else x for x in leaves]  # type: ignore[no-untyped-call]
    sig = _Signature(fn, in_def, in_leaves)
    if isinstance(fn, types.FunctionType) and fn.__closure__ is None:
        return _ClosureConverted([], sig)
    closed, out_dynamic, out_static = filter_make_jaxpr(fn)(*args, **kwargs)
    sig.jaxpr = closed.jaxpr
    sig.out_def = jax.tree_util.tree_structure(out_dynamic)
    sig.out_static = out_static
    sig.out_struct = combine(out_dynamic, out_static)
    return _ClosureConverted(list(closed.consts), sig)
