"""Helpers shared by the layers: argument checks and default dtypes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def default_float_dtype(dtype: Any) -> Any:
    """``dtype`` or, if None, JAX's default float (float32, float64 with ``jax_enable_x64``)."""
    return jnp.result_type(float) if dtype is None else dtype


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
