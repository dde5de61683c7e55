"""Helpers shared by the layers: argument checks and default dtypes."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp


def default_float_dtype(dtype: Any) -> Any:
    """``dtype`` or, if None, JAX's default float (float32, float64 with ``jax_enable_x64``)."""
    return jnp.result_type(float) if dtype is None else dtype


def uniform(key: jax.Array, shape: tuple[int, ...], dtype: Any, lim: float) -> jax.Array:
    """``uniform(-lim, lim)`` of ``shape`` and ``dtype``.  For a complex dtype the real and the
    imaginary parts are drawn independently, each from ``uniform(-lim, lim)`` (with the two
    halves of ``key``; as Equinox), since ``jax.random.uniform`` draws real numbers only."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        part = jnp.zeros((), dtype).real.dtype
        rkey, ikey = jax.random.split(key, 2)
        real = jax.random.uniform(rkey, shape, part, minval=-lim, maxval=lim)
        imag = jax.random.uniform(ikey, shape, part, minval=-lim, maxval=lim)
        return jax.lax.complex(real, imag).astype(dtype)
    return jax.random.uniform(key, shape, dtype, minval=-lim, maxval=lim)


def check_key(key: Any, layer: str) -> jax.Array:
    """Raise TypeError unless ``key`` looks like a PRNG key (``jax.random.key`` / ``PRNGKey``)."""
    if key is None:
        raise TypeError(f"{layer} needs a PRNG key for its initialisation: pass key=jax.random.key(seed)")
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):
        raise TypeError(f"{layer}: key must be a PRNG key array, got {type(key).__name__}")
    return key  # type: ignore[no-any-return]  # checked duck type


def check_size(value: Any, name: str, layer: str, allow_scalar: bool = False) -> None:
    """Raise unless ``value`` is a non-negative int (or ``'scalar'`` when allowed)."""
    if allow_scalar and value == "scalar" and isinstance(value, str):
        return
    if isinstance(value, bool) or not isinstance(value, int):
        extra = " or 'scalar'" if allow_scalar else ""
        raise TypeError(f"{layer}: {name} must be an int{extra}, got {value!r}")
    if value < 0:
        raise ValueError(f"{layer}: {name} must be >= 0, got {value}")


def check_shape(x: Any, expected: tuple[int, ...], what: str) -> None:
    """Raise ValueError when ``x.shape`` differs from ``expected`` (shapes are static under jit)."""
    shape = tuple(getattr(x, "shape", ()))
    if shape != expected:
        raise ValueError(
            f"{what}: expected an input of shape {expected} (one example; use jax.vmap for a "
            f"batch), got shape {shape}"
        )


def compute_dtype(*dtypes: Any) -> Any:
    """The dtype the operands of a layer are computed in: JAX's standard promotion of their
    dtypes (``jnp.promote_types``), at least floating.

    The layers cast every operand to it explicitly, so that a layer with float32 parameters
    accepts a bfloat16 input (and returns float32) also under
    ``jax_numpy_dtype_promotion='strict'``, which only forbids implicit promotion."""
    with jax.numpy_dtype_promotion("standard"):
        out = jnp.promote_types(dtypes[0], dtypes[0])
        for d in dtypes[1:]:
            out = jnp.promote_types(out, d)
        if not jnp.issubdtype(out, jnp.inexact):
            out = jnp.promote_types(out, jnp.result_type(float))
    return out


def as_tuple(value: Any, n: int, name: str, layer: str, minimum: int = 0) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints as an ``n``-tuple (PyTorch's ``_ntuple``); each
    ``>= minimum`` (ValueError), ints only (TypeError)."""
    if isinstance(value, int) and not isinstance(value, bool):
        out: tuple[Any, ...] = (value,) * n
    else:
        try:
            out = tuple(value)
        except TypeError:
            raise TypeError(f"{layer}: {name} must be an int or a tuple of {n} ints, got {value!r}") from None
        if len(out) != n:
            raise ValueError(f"{layer}: {name} must be an int or a tuple of {n} ints, got {value!r}")
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{layer}: {name} must be an int or a tuple of {n} ints, got {value!r}")
        if v < minimum:
            raise ValueError(f"{layer}: {name} must be >= {minimum}, got {value!r}")
    return out


def check_rank(x: Any, rank: int, what: str, layout: str) -> None:
    """Raise ValueError unless ``x`` has ``rank`` axes (``layout`` names them, e.g. ``(C, H, W)``)."""
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != rank:
        raise ValueError(
            f"{what}: expected one example of shape {layout} (channels first; use jax.vmap for a "
            f"batch), got shape {shape}"
        )


def replace_fields(module: Any, **changes: Any) -> Any:
    """A copy of ``module`` with some fields (static ones included) set to new values.

    Like rebuilding a Module from its leaves (unflatten), it runs no ``__init__``, converter or
    ``__check_init__``: the copy has exactly the old fields and the given changes."""
    new = object.__new__(type(module))
    new.__dict__.update(module.__dict__)
    new.__dict__.update(changes)
    return new


def map_modules(fn: Any, tree: Any) -> Any:
    """Apply ``fn`` to every Module in ``tree``, innermost first: each Module's non-static
    fields are mapped, then ``fn`` gets the rebuilt Module and returns its replacement.  Leaves
    and non-Module nodes are kept as they are (rebuilt by ``spruce.tree.map``)."""
    from .. import tree as _tree
    from .._module import Module

    def visit(x: Any) -> Any:
        if not isinstance(x, Module):
            return x
        dynamic = [f.name for f in dataclasses.fields(x) if not f.metadata.get("static", False)]
        d = x.__dict__
        return fn(replace_fields(x, **{n: map_modules(fn, d[n]) for n in dynamic}))

    return _tree.map(visit, tree, is_leaf=lambda x: isinstance(x, Module))
