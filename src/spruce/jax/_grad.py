"""``filter_grad`` / ``filter_value_and_grad``: ``jax.grad`` with respect to the floating-point
arrays of a pytree (imports JAX; re-exported by ``spruce.jax``)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from .._arrays import is_inexact_array
from .._module._filters import combine, partition


def _grad_wrapper(fun: Callable[..., Any], has_aux: bool, value: bool) -> Callable[..., Any]:
    name = "filter_value_and_grad" if value else "filter_grad"

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # (no named parameter of its own, so any keyword of ``fun`` passes through)
        if not args:
            raise TypeError(
                f"{name}: the function is differentiated with respect to its first positional "
                "argument; none was given"
            )
        diff, nondiff = partition(args[0], is_inexact_array)
        args = args[1:]

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


def filter_grad(fun: Callable[..., Any] | None = None, *, has_aux: bool = False) -> Any:
    """``jax.grad`` with respect to the floating-point array leaves of the first argument.

    Usable as ``filter_grad(f)``, ``filter_grad(f, has_aux=True)``, ``@filter_grad`` or
    ``@filter_grad(has_aux=True)``: without ``fun`` it returns a decorator, as Equinox's.
    Any other keyword raises TypeError; a ``fun`` that is not callable raises TypeError.

    ``filter_grad(f)(x, *args, **kwargs)`` differentiates ``f`` (which must return a real
    scalar, or ``(scalar, aux)`` with ``has_aux=True``) with respect to the inexact arrays of
    ``x`` (``spruce.is_inexact_array``); the gradient is a pytree like ``x`` with ``None`` at
    every other leaf (integer arrays, Python numbers, functions...).  Other arguments
    (positional or keyword, with any name) are passed through unchanged and not
    differentiated.  Raises TypeError if there is no positional argument.  Follows
    equinox.filter_grad.

    >>> import jax.numpy as jnp
    >>> @filter_grad(has_aux=True)
    ... def loss(x):
    ...     return jnp.sum(x**2), "aux"
    >>> g, aux = loss(jnp.array([1.0, 2.0]))
    >>> g.tolist(), aux
    ([2.0, 4.0], 'aux')
    """
    return _decorate(fun, has_aux, value=False)


def filter_value_and_grad(fun: Callable[..., Any] | None = None, *, has_aux: bool = False) -> Any:
    """As ``filter_grad``, returning ``(value, grad)`` (``((value, aux), grad)`` with
    ``has_aux=True``), as ``jax.value_and_grad``; usable as a decorator factory in the same
    ways (``@filter_value_and_grad(has_aux=True)``).  Follows equinox.filter_value_and_grad."""
    return _decorate(fun, has_aux, value=True)


def _decorate(fun: Callable[..., Any] | None, has_aux: bool, value: bool) -> Any:
    if fun is None:
        return functools.partial(_decorate, has_aux=has_aux, value=value)
    if not callable(fun):
        name = "filter_value_and_grad" if value else "filter_grad"
        raise TypeError(f"{name}: expected a function, got {type(fun).__name__}")
    return _grad_wrapper(fun, has_aux, value)
