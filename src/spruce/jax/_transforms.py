"""Filtered JAX transforms beyond jit/grad/vmap: shapes, jaxprs, remat, forward/reverse
products, Jacobians and host callbacks, for functions of any pytree (custom derivatives are in
``_custom``, closure conversion in ``_closure``).

The common pattern: the arguments are split with ``spruce.partition`` into the array leaves
(traced by JAX) and everything else (closed over, never seen by JAX); non-array parts of the
output travel back through JAX as ``_Static``, a pytree node with no children whose node data
is the value.  Semantics follow Equinox's functions of the same names; differences are noted
in each docstring.  Imports JAX (re-exported by ``spruce.jax``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax

from .. import tree as _tree
from .._arrays import is_array, is_inexact_array
from .._module._filters import combine, partition

__all__ = [
    "filter_checkpoint",
    "filter_eval_shape",
    "filter_hessian",
    "filter_jacfwd",
    "filter_jacrev",
    "filter_jvp",
    "filter_make_jaxpr",
    "filter_pure_callback",
    "filter_vjp",
]


class _Static:
    """A pytree node without children whose node data is ``value``: carries non-array
    outputs through a JAX transform untouched."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


jax.tree_util.register_pytree_node(_Static, lambda s: ((), s.value), lambda value, _: _Static(value))


def _is_none(x: Any) -> bool:
    return x is None


def _is_struct(x: Any) -> bool:
    return is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def _wraps(fun: Any, wrapper: Callable[..., Any]) -> Callable[..., Any]:
    try:
        functools.update_wrapper(wrapper, fun, updated=())
    except AttributeError:  # (a callable object without __name__ & co.)
        pass
    return wrapper


def _split_out(out: Any) -> tuple[Any, _Static]:
    arrays, other = partition(out, is_array)
    return arrays, _Static(other)


# -- shapes and jaxprs ---------------------------------------------------------------------------


def filter_eval_shape(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The output of ``fun(*args, **kwargs)`` with every array leaf as a
    ``jax.ShapeDtypeStruct``, computed without running anything (``jax.eval_shape``).

    Args may be any pytrees: array leaves and ``jax.ShapeDtypeStruct`` placeholders are traced,
    every other leaf (Python numbers, functions, strings) is passed as it is; ``fun`` itself
    may be a Module (its arrays are traced too).  Non-array leaves of the output are returned
    as they are.  Follows ``equinox.filter_eval_shape``.

    >>> import jax.numpy as jnp, spruce.nn as nn, jax
    >>> lin = filter_eval_shape(nn.Linear, 3, 2, key=jax.random.key(0))
    >>> lin.weight
    ShapeDtypeStruct(shape=(2, 3), dtype=float32)
    """
    dynamic, static = partition((fun, args, kwargs), _is_struct)

    def run(dyn: Any) -> Any:
        f, a, kw = combine(dyn, static)
        return _split_out(f(*a, **kw))

    out, out_static = jax.eval_shape(run, dynamic)
    return combine(out, out_static.value)


def filter_make_jaxpr(fun: Callable[..., Any]) -> Callable[..., tuple[Any, Any, Any]]:
    """``jax.make_jaxpr`` for a function of any pytrees.

    Returns:
      A function of the same arguments returning ``(closed_jaxpr, out_dynamic, out_static)``:
      the ``jax.core.ClosedJaxpr`` whose inputs are the array leaves (and
      ``jax.ShapeDtypeStruct`` placeholders) of ``(args, kwargs)`` in ``spruce.tree`` order,
      the output's array leaves as ``jax.ShapeDtypeStruct`` (None elsewhere), and the output's
      other leaves (None at the arrays).  ``combine(out_dynamic, out_static)`` is the shape of
      the output.  Follows ``equinox.filter_make_jaxpr``.
    """

    def make(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any]:
        dynamic, static = partition((args, kwargs), _is_struct)
        leaves, treedef = _tree.flatten(dynamic)

        def run(*flat: Any) -> Any:
            a, kw = combine(treedef.unflatten(list(flat)), static)
            return _split_out(fun(*a, **kw))

        jaxpr, (out, out_static) = jax.make_jaxpr(run, return_shape=True)(*leaves)
        return jaxpr, out, out_static.value

    return _wraps(fun, make)


# -- rematerialisation ---------------------------------------------------------------------------


def filter_checkpoint(
    fun: Callable[..., Any] | None = None, *, prevent_cse: bool = True, policy: Callable[..., bool] | None = None
) -> Any:
    """``jax.checkpoint`` (rematerialisation) for a function of any pytrees: under reverse-mode
    differentiation its intermediate values are recomputed in the backward pass instead of
    stored.

    Args:
      fun: called as ``fun(*args, **kwargs)``; may return any pytree.  Usable as
        ``@filter_checkpoint`` or ``@filter_checkpoint(policy=...)``.
      prevent_cse, policy: as ``jax.checkpoint`` (``policy`` one of
        ``jax.checkpoint_policies``).

    Returns:
      A function with ``fun``'s arguments and output.  Follows ``equinox.filter_checkpoint``.
    """
    if fun is None:
        return functools.partial(filter_checkpoint, prevent_cse=prevent_cse, policy=policy)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        dynamic, static = partition((fun, args, kwargs), is_array)

        @functools.partial(jax.checkpoint, prevent_cse=prevent_cse, policy=policy)
        def run(dyn: Any) -> Any:
            f, a, kw = combine(dyn, static)
            return _split_out(f(*a, **kw))

        out, out_static = run(dynamic)
        return combine(out, out_static.value)

    return _wraps(fun, wrapper)


# -- forward and reverse products ----------------------------------------------------------------


def _symbolic_zero_flags(probe: Any, xs: list[Any]) -> tuple[list[Any], list[bool]]:
    """``(xs, flags)``: ``xs`` unchanged, and ``flags[i]`` set (while the innermost JVP trace
    processes this call) to whether ``xs[i]`` has a tangent that is not a symbolic zero in that
    trace.

    ``probe`` is an input of the innermost ``jax.jvp`` with a tangent, so that trace always
    handles the call and calls the rule; with ``symbolic_zeros=True`` JAX gives the rule a
    ``SymbolicZero`` for every input that does not depend on that trace's inputs, including a
    value carrying only an outer trace's tangent (public API of ``jax.custom_jvp``).
    """
    flags = [False] * len(xs)

    @jax.custom_jvp
    def mark(_: Any, *values: Any) -> tuple[Any, ...]:
        return values

    def rule(primals: Any, tangents: Any) -> Any:
        for i, t in enumerate(tangents[1:]):
            flags[i] = not isinstance(t, jax.custom_derivatives.SymbolicZero)
        return primals[1:], tangents[1:]

    mark.defjvp(rule, symbolic_zeros=True)
    return list(mark(probe, *xs)), flags


def filter_jvp(fun: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], **kwargs: Any) -> tuple[Any, Any]:
    """``jax.jvp`` for a function of any pytrees: ``(fun(*primals, **kwargs), J @ tangents)``.

    Args:
      fun: called as ``fun(*primals, **kwargs)``; may return any pytree.
      primals: the positional arguments, a sequence of pytrees.
      tangents: the same structure as ``primals``, with None for a zero tangent (and for every
        leaf that is not a floating-point or complex array or a Python float / complex); the
        other leaves are the tangents, arrays (or Python floats) of the primal's shape and dtype.
      kwargs: passed to ``fun``, not differentiated.

    Returns:
      ``(primals_out, tangents_out)``: ``tangents_out`` has the structure of ``primals_out``,
      with None at every leaf whose tangent is a symbolic zero: a leaf that is not an array, an
      integer array, or an array that does not depend on an input with a tangent (a constant,
      or a value closed over from an enclosing ``filter_jvp``); an array elsewhere.

    Raises:
      ValueError: ``primals`` and ``tangents`` differ in structure.
      TypeError: a tangent does not fit its primal (dtype, or a tangent for a leaf that is not
        differentiable), from ``jax.jvp``.

    Follows ``equinox.filter_jvp``, except that an integer output that depends on the inputs
    gets None (Equinox may give a float0 array).

    >>> import jax.numpy as jnp
    >>> out, t = filter_jvp(lambda x, n: (x * n, jnp.ones(2), n), (jnp.ones(2), 3), (jnp.ones(2), None))
    >>> t[0].tolist(), t[1], t[2]
    ([3.0, 3.0], None, None)
    """
    p_def = _tree.structure(tuple(primals), is_leaf=_is_none)
    t_def = _tree.structure(tuple(tangents), is_leaf=_is_none)
    if p_def != t_def:
        raise ValueError(f"filter_jvp: primals and tangents must have the same structure, got {p_def} and {t_def}")
    spec = _tree.map(lambda t: t is not None, tuple(tangents), is_leaf=_is_none)
    diff, nondiff = partition(tuple(primals), spec, is_leaf=_is_none)
    flat, treedef = _tree.flatten(diff)
    flat_t = _tree.leaves(tuple(tangents))
    if not flat:  # no tangent: nothing is differentiated
        out = fun(*primals, **kwargs)
        return out, _tree.map(lambda _: None, out)
    flags: list[bool] = []

    def run(*xs: Any) -> Any:
        args = combine(treedef.unflatten(list(xs)), nondiff)
        out = fun(*args, **kwargs)
        out_leaves, out_def = _tree.flatten(out)
        at = [i for i, x in enumerate(out_leaves) if is_array(x)]
        marked, seen = _symbolic_zero_flags(xs[0], [out_leaves[i] for i in at])
        flags[:] = [False] * len(out_leaves)
        for i, s in zip(at, seen):
            flags[i] = s
        arrays: list[Any] = [None] * len(out_leaves)
        static = list(out_leaves)
        for i, x in zip(at, marked):
            arrays[i], static[i] = x, None
        return arrays, _Static((out_def, static))

    (arrays, out_static), (t_arrays, _) = jax.jvp(run, tuple(flat), tuple(flat_t))
    out_def, static = out_static.value
    out = out_def.unflatten([s if a is None else a for a, s in zip(arrays, static)])
    t_out = out_def.unflatten([t if f and is_inexact_array(a) else None for a, t, f in zip(arrays, t_arrays, flags)])
    return out, t_out


def filter_vjp(fun: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """``jax.vjp`` for a function of any pytrees.

    Returns:
      ``(primals_out, vjp_fn)``, or ``(primals_out, vjp_fn, aux)`` with ``has_aux=True``
      (``fun`` then returns ``(output, aux)``).  ``vjp_fn(cotangent)`` takes a cotangent with
      the structure of ``primals_out`` — arrays at its floating-point array leaves, None
      elsewhere — and returns a tuple with one cotangent per primal: arrays at the
      floating-point array leaves, None elsewhere.  Follows ``equinox.filter_vjp``.
    """
    diff, nondiff = partition(primals, is_inexact_array)

    def run(*d: Any) -> Any:
        out = fun(*combine(d, nondiff))
        aux = None
        if has_aux:
            out, aux = out
        out_diff, out_rest = partition(out, is_inexact_array)
        rest_arrays, rest_static = _split_out((out_rest, aux))
        return out_diff, (rest_arrays, rest_static)

    out_diff, vjp_fn, (rest, rest_static) = jax.vjp(run, *diff, has_aux=True)
    out_rest, aux = combine(rest, rest_static.value)
    out = combine(out_diff, out_rest)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _jacobian(fun: Callable[..., Any], has_aux: bool, rev: bool) -> Callable[..., Any]:
    transform = jax.jacrev if rev else jax.jacfwd

    def jac(x: Any, *args: Any, **kwargs: Any) -> Any:
        diff, nondiff = partition(x, is_inexact_array)

        def run(d: Any) -> Any:
            out = fun(combine(d, nondiff), *args, **kwargs)
            return out if has_aux else (out, None)

        out, aux = transform(run, has_aux=True)(diff)
        return (out, aux) if has_aux else out

    return _wraps(fun, jac)


def filter_jacfwd(fun: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """The Jacobian of ``fun`` with respect to the floating-point arrays of its first
    argument, by forward-mode differentiation (``jax.jacfwd``).

    The returned function takes ``fun``'s arguments (any pytrees; the others are not
    differentiated) and returns the Jacobian: for each output leaf, a pytree like the first
    argument with ``output.shape + leaf.shape`` arrays at its floating-point array leaves and
    None elsewhere; with ``has_aux=True``, ``(jacobian, aux)``.  The output (and aux) must be
    JAX arrays.  Follows ``equinox.filter_jacfwd``.
    """
    return _jacobian(fun, has_aux, rev=False)


def filter_jacrev(fun: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """As ``filter_jacfwd``, by reverse-mode differentiation (``jax.jacrev``).  Follows
    ``equinox.filter_jacrev``."""
    return _jacobian(fun, has_aux, rev=True)


def filter_hessian(fun: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """The Hessian of a scalar ``fun`` with respect to the floating-point arrays of its first
    argument: ``filter_jacfwd(filter_jacrev(fun))`` (as ``jax.hessian``); with
    ``has_aux=True``, ``(hessian, aux)``.  Follows ``equinox.filter_hessian``."""
    return filter_jacfwd(filter_jacrev(fun, has_aux=has_aux), has_aux=has_aux)


# -- host callbacks ------------------------------------------------------------------------------


def filter_pure_callback(
    callback: Callable[..., Any], *args: Any, result_shape_dtypes: Any, vmap_method: str | None = None, **kwargs: Any
) -> Any:
    """``jax.pure_callback`` for a callback of any pytrees: run Python on the host from
    inside jitted code.

    Args:
      callback: called as ``callback(*args, **kwargs)`` with host arrays at the array leaves
        (what ``jax.pure_callback`` passes);
        must be pure (JAX may skip or repeat it) and return arrays of ``result_shape_dtypes``
        at its array leaves (other leaves are ignored).
      args, kwargs: any pytrees; array leaves are passed to the host, others as they are.
      result_shape_dtypes: the output's structure, with ``jax.ShapeDtypeStruct`` (or arrays)
        at the leaves the callback computes; other leaves are returned as given.
      vmap_method: as ``jax.pure_callback``.

    Follows ``equinox.filter_pure_callback``.
    """
    dynamic, static = partition((args, kwargs), is_array)
    shapes, out_static = partition(result_shape_dtypes, _is_struct)
    shapes = _tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), shapes)  # type: ignore[no-untyped-call]

    def host(dyn: Any) -> Any:
        a, kw = combine(dyn, static)
        out = callback(*a, **kw)
        got, _ = partition(out, _is_struct)
        return got

    out = jax.pure_callback(host, shapes, dynamic, vmap_method=vmap_method)
    return combine(out, out_static)
