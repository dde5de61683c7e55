"""Custom derivatives for functions of any pytree: ``filter_custom_jvp`` and
``filter_custom_vjp`` (imports JAX; re-exported by ``spruce.jax``).

Both split the arguments with ``spruce.partition``: array leaves go to ``jax.custom_jvp`` /
``jax.custom_vjp`` as primals, everything else travels as ``_Static`` node data.  Zero tangents
and cotangents are JAX's symbolic zeros inside and None in the user's rules.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp

from .. import tree as _tree
from .._arrays import is_array, is_inexact_array
from .._module._filters import combine, partition
from ._transforms import _is_none, _Static

__all__ = ["filter_custom_jvp", "filter_custom_vjp"]

_SymbolicZero = jax.custom_derivatives.SymbolicZero


def _zero_to_none(t: Any) -> Any:
    return None if isinstance(t, _SymbolicZero) else t


def _none_to_zero(t: Any, x: Any) -> Any:
    if t is not None or x is None:
        return t
    return _SymbolicZero(jax.typeof(x).to_tangent_aval())


def _tangent_or_none(t: Any, x: Any) -> Any:
    if isinstance(t, _SymbolicZero) or not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return None
    return t


def _zeros_for_none(t: Any, x: Any) -> Any:
    """A zero array for a None (co)tangent of a floating-point array ``x`` (the older rule
    signatures, ``defjvp`` / ``defvjp``, always received arrays there)."""
    if t is None and is_inexact_array(x):
        return jnp.zeros_like(x)
    return t


def _refuse_tangents(arrays: Any, fn_name: str) -> Any:
    """``arrays`` (the array leaves of a ``filter_custom_vjp`` function's other arguments,
    ``(args, kwargs)``) unchanged, behind a ``jax.custom_jvp`` whose rule raises a RuntimeError
    naming the first leaf that carries a tangent: differentiating through them, forward or
    reverse, is an error rather than a silent zero."""
    leaves_with_path = _tree.leaves_with_path(arrays)
    if not leaves_with_path:
        return arrays
    treedef = _tree.structure(arrays)

    @jax.custom_jvp
    def guarded(*xs: Any) -> tuple[Any, ...]:
        return xs

    def rule(primals: Any, tangents: Any) -> Any:
        for (path, _), t in zip(leaves_with_path, tangents):
            if not isinstance(t, _SymbolicZero):
                where = f"args[{path[1].idx + 1}]" if path[0].idx == 0 else f"kwargs[{path[1].key!r}]"
                raise RuntimeError(
                    f"filter_custom_vjp({fn_name}): a tangent reached the array at "
                    f"{where}{_tree.keystr(path[2:])}, which is not differentiated: only the first "
                    "argument of a filter_custom_vjp function is. Pass what must be differentiated "
                    "inside the first argument (a tuple is fine), or apply jax.lax.stop_gradient "
                    "to this one."
                )
        return primals, tangents

    guarded.defjvp(rule, symbolic_zeros=True)
    return treedef.unflatten(list(guarded(*[x for _, x in leaves_with_path])))


class filter_custom_jvp:
    """``jax.custom_jvp`` for a function of any pytrees, without ``nondiff_argnums``.

    Decorate the function, then its rule with ``.def_jvp``::

        @filter_custom_jvp
        def f(x, y, *, fn): ...

        @f.def_jvp
        def f_jvp(primals, tangents, *, fn):
            x, y = primals
            tx, ty = tangents   # None: a zero tangent (not differentiated, or not a float array)
            return f(x, y, fn=fn), out_tangent

    The array leaves of the positional arguments are the primals; every other leaf (and every
    keyword argument) is passed through undifferentiated.  A tangent is None for each
    non-array leaf and each array whose tangent is zero.  The rule returns
    ``(out, tangent_out)``, ``tangent_out`` with None for zero tangents; the output must be
    JAX arrays.

    ``.defjvp(rule)`` is the older form (deprecated: it warns with a DeprecationWarning): the
    same rule, but every floating-point array primal gets an array tangent (zeros where
    ``.def_jvp`` gives None).

    Raises:
      ValueError: (when differentiated) a keyword argument's array carries a tangent.

    Follows ``equinox.filter_custom_jvp`` (whose ``defjvp`` warns with a UserWarning).

    >>> import jax, jax.numpy as jnp
    >>> @filter_custom_jvp
    ... def clipped(x, *, bound):
    ...     return jnp.clip(x, -bound, bound)
    >>> @clipped.def_jvp
    ... def clipped_jvp(primals, tangents, *, bound):
    ...     (x,), (tx,) = primals, tangents
    ...     return clipped(x, bound=bound), tx   # straight-through gradient
    >>> jax.grad(lambda x: clipped(x, bound=1.0))(3.0).item()
    1.0
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

        def wrapped(static: Any, dynamic: Any) -> Any:
            args, kwargs = combine(dynamic, static.value)
            return fn(*args, **kwargs)

        self._custom = jax.custom_jvp(wrapped, nondiff_argnums=(0,))
        functools.update_wrapper(self, fn, updated=())

    def def_jvp(self, fn_jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Set the rule ``fn_jvp(primals, tangents, **kwargs) -> (out, tangent_out)``."""

        def rule(static: Any, primals: Any, tangents: Any) -> Any:
            (dynamic,) = primals
            (t_dynamic,) = tangents
            t_args, t_kwargs = _tree.map(_tangent_or_none, t_dynamic, dynamic)
            if _tree.leaves(t_kwargs):
                raise ValueError("filter_custom_jvp: keyword arguments are never differentiated")
            args, kwargs = combine(dynamic, static.value)
            out, t_out = fn_jvp(args, t_args, **kwargs)
            t_out = _tree.map(_none_to_zero, t_out, out, is_leaf=_is_none)
            return out, t_out

        self._custom.defjvp(rule, symbolic_zeros=True)
        return fn_jvp

    def defjvp(self, fn_jvp: Callable[..., Any]) -> Callable[..., Any]:
        """Deprecated form of ``def_jvp``: ``fn_jvp`` gets an array tangent (zeros for a zero
        tangent) for every floating-point array primal, None for the other leaves."""
        warnings.warn(
            "filter_custom_jvp.defjvp is deprecated: use .def_jvp, whose rule gets None for every "
            "zero tangent (also of floating-point arrays) instead of an array of zeros",
            DeprecationWarning,
            stacklevel=2,
        )

        def materialised(args: Any, t_args: Any, **kwargs: Any) -> Any:
            return fn_jvp(args, _tree.map(_zeros_for_none, t_args, args, is_leaf=_is_none), **kwargs)

        self.def_jvp(materialised)
        return fn_jvp

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dynamic, static = partition((args, kwargs), is_array)
        return self._custom(_Static(static), dynamic)


class filter_custom_vjp:
    """``jax.custom_vjp`` for a function of any pytrees, differentiated with respect to its
    first argument only.

    ::

        @filter_custom_vjp
        def f(vjp_arg, *args, **kwargs): ...          # any pytrees in and out

        @f.def_fwd
        def f_fwd(perturbed, vjp_arg, *args, **kwargs):
            return out, residuals                      # residuals: any pytree

        @f.def_bwd
        def f_bwd(residuals, grad_out, perturbed, vjp_arg, *args, **kwargs):
            return grad_vjp_arg                        # like vjp_arg; None for zero

    ``perturbed`` has the structure of ``vjp_arg``: True at each floating-point array leaf
    being differentiated, False elsewhere (a Python float is not an array: it is never
    differentiated).  ``grad_out`` has None at output leaves that are not
    differentiated.  The array leaves of ``args`` / ``kwargs`` are not differentiated:
    differentiating through them raises a RuntimeError.

    ``.defvjp(fn_fwd, fn_bwd)`` is the older form (deprecated: it warns with a
    DeprecationWarning): ``fn_fwd(vjp_arg, *args, **kwargs) -> (out, residuals)`` and
    ``fn_bwd(residuals, grad_out, vjp_arg, *args, **kwargs)``, without ``perturbed``, and with
    an array (zeros for a zero cotangent) at every floating-point array leaf of ``grad_out``.

    Raises:
      RuntimeError: called before both ``def_fwd`` and ``def_bwd`` (or ``defvjp``); a backward
        rule returning a gradient whose structure is not that of ``vjp_arg``'s floating-point
        arrays; (when differentiated) a tangent reaching an array of ``args`` / ``kwargs``
        (the message names its key path, ``args[1]``: the function's second argument).

    Follows ``equinox.filter_custom_vjp`` (whose ``defvjp`` warns with a UserWarning).

    >>> import jax, jax.numpy as jnp
    >>> @filter_custom_vjp
    ... def scale(x, factor):
    ...     return x * factor
    >>> @scale.def_fwd
    ... def scale_fwd(perturbed, x, factor):
    ...     return x * factor, None
    >>> @scale.def_bwd
    ... def scale_bwd(residuals, g, perturbed, x, factor):
    ...     return 10.0 * g   # a custom gradient
    >>> jax.grad(lambda x: scale(x, 2.0))(jnp.array(1.0)).item()
    10.0
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.fn_fwd: Callable[..., Any] | None = None
        self.fn_bwd: Callable[..., Any] | None = None
        self._custom: Any = None
        functools.update_wrapper(self, fn, updated=())

    def def_fwd(self, fn_fwd: Callable[..., Any]) -> Callable[..., Any]:
        """Set the forward rule ``fn_fwd(perturbed, vjp_arg, *args, **kwargs) -> (out, residuals)``."""
        self.fn_fwd = fn_fwd
        self._define()
        return fn_fwd

    def def_bwd(self, fn_bwd: Callable[..., Any]) -> Callable[..., Any]:
        """Set the backward rule ``fn_bwd(residuals, grad_out, perturbed, vjp_arg, *args, **kwargs)``."""
        self.fn_bwd = fn_bwd
        self._define()
        return fn_bwd

    def defvjp(self, fn_fwd: Callable[..., Any], fn_bwd: Callable[..., Any]) -> None:
        """Deprecated form of ``def_fwd`` + ``def_bwd``: rules without ``perturbed``, the
        backward one given zeros (not None) for floating-point outputs' zero cotangents."""
        warnings.warn(
            "filter_custom_vjp.defvjp is deprecated: use .def_fwd and .def_bwd, whose rules also "
            "get `perturbed` (which leaves of the first argument are differentiated) and None for "
            "every zero cotangent instead of an array of zeros",
            DeprecationWarning,
            stacklevel=2,
        )

        def fwd(perturbed: Any, vjp_arg: Any, *args: Any, **kwargs: Any) -> Any:
            out, residuals = fn_fwd(vjp_arg, *args, **kwargs)
            return out, (out, residuals)

        def bwd(residuals: Any, grad_out: Any, perturbed: Any, vjp_arg: Any, *args: Any, **kwargs: Any) -> Any:
            out, residuals = residuals
            grad_out = _tree.map(_zeros_for_none, grad_out, out, is_leaf=_is_none)
            return fn_bwd(residuals, grad_out, vjp_arg, *args, **kwargs)

        self.def_fwd(fwd)
        self.def_bwd(bwd)

    def _define(self) -> None:
        if self.fn_fwd is None or self.fn_bwd is None:
            return
        fn, fn_fwd, fn_bwd = self.fn, self.fn_fwd, self.fn_bwd

        def split_out(out: Any) -> Any:
            arrays, other = partition(out, is_array)
            diff, nondiff = partition(arrays, is_inexact_array)
            return diff, nondiff, _Static(other)

        def primal(static: Any, diff: Any, nondiff: Any, arrays: Any) -> Any:
            s_vjp, s_args = static.value
            args, kwargs = combine(s_args, arrays)
            return split_out(fn(combine(s_vjp, diff, nondiff), *args, **kwargs))

        def fwd(static: Any, diff: Any, nondiff: Any, arrays: Any) -> Any:
            s_vjp, s_args = static.value
            perturbed_diff = _tree.map(lambda p: p.perturbed, diff)
            diff = _tree.map(lambda p: p.value, diff)
            nondiff = _tree.map(lambda p: p.value, nondiff)
            arrays = _tree.map(lambda p: p.value, arrays)
            perturbed = combine(
                _tree.map(lambda _: False, s_vjp), _tree.map(lambda _: False, nondiff), perturbed_diff
            )
            args, kwargs = combine(s_args, arrays)
            vjp_arg = combine(s_vjp, diff, nondiff)
            out, residuals = fn_fwd(perturbed, vjp_arg, *args, **kwargs)
            res_arrays, res_other = partition(residuals, is_array)
            return split_out(out), (res_arrays, _Static(res_other), diff, nondiff, arrays, _Static(perturbed))

        def bwd(static: Any, res: Any, grad_out: Any) -> Any:
            s_vjp, s_args = static.value
            res_arrays, res_other, diff, nondiff, arrays, perturbed = res
            residuals = combine(res_arrays, res_other.value)
            args, kwargs = combine(s_args, arrays)
            g = _tree.map(_zero_to_none, grad_out[0])
            grad = fn_bwd(residuals, g, perturbed.value, combine(s_vjp, diff, nondiff), *args, **kwargs)
            if _tree.structure(grad, is_leaf=_is_none) != _tree.structure(diff, is_leaf=_is_none):
                raise RuntimeError(
                    "filter_custom_vjp: the backward rule must return a gradient with the structure "
                    "of the first argument's floating-point arrays (spruce.filter(vjp_arg, "
                    "spruce.is_inexact_array)), with None for zero gradients"
                )
            grad = _tree.map(_none_to_zero, grad, diff, is_leaf=_is_none)
            return grad, None, None

        custom = jax.custom_vjp(primal, nondiff_argnums=(0,))
        custom.defvjp(fwd, bwd, symbolic_zeros=True)
        self._custom = custom

    def __call__(self, vjp_arg: Any, /, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self.fn, "__name__", "the function")
        if self._custom is None:
            raise RuntimeError(f"filter_custom_vjp: def_fwd and def_bwd must both be called before {name} is")
        arrays, s_vjp = partition(vjp_arg, is_array)
        diff, nondiff = partition(arrays, is_inexact_array)
        a_arrays, s_args = partition((args, kwargs), is_array)
        a_arrays = _refuse_tangents(a_arrays, name)
        nondiff = jax.lax.stop_gradient(nondiff)
        out_diff, out_nondiff, out_other = self._custom(_Static((s_vjp, s_args)), diff, nondiff, a_arrays)
        return combine(out_diff, out_nondiff, out_other.value)
