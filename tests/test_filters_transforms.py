"""spruce.jax: filter_jit / filter_grad / filter_value_and_grad / filter_vmap."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.nn as nn
from spruce.jax import filter_grad, filter_jit, filter_value_and_grad, filter_vmap

KEY = jax.random.PRNGKey(0)


class Scaled(spruce.Module):
    w: jax.Array
    act: Callable[[jax.Array], jax.Array]  # a function as a leaf (not static): filter_jit copes
    label: str

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(self.w * x)


def test_filter_jit_traces_arrays_and_keeps_the_rest_static() -> None:
    traces: list[Any] = []

    @filter_jit
    def f(m: Scaled, x: Any, n: int) -> Any:
        traces.append(n)
        return m(x) * n, m.label, m

    m = Scaled(jnp.ones(3), jnp.tanh, "a")
    y, label, m2 = f(m, jnp.full(3, 0.5), 2)
    np.testing.assert_allclose(y, 2 * np.tanh(0.5), rtol=1e-6)
    assert label == "a" and type(m2) is Scaled and m2.act is jnp.tanh and m2.label == "a"
    f(m, jnp.full(3, 0.7), 2)
    assert traces == [2]  # same structure and static values: cached, no retrace
    f(m, jnp.full(3, 0.7), 3)
    f(spruce.tree_at(lambda s: s.label, m, "b"), jnp.full(3, 0.7), 3)
    assert traces == [2, 3, 3]
    # NumPy arrays are traced too
    np.testing.assert_allclose(f(m, np.full(3, 0.5, np.float32), 2)[0], y, rtol=1e-6)


def test_filter_jit_does_not_block() -> None:
    x = jnp.eye(256) * 0.5

    @filter_jit
    def slow(x: jax.Array, steps: int) -> jax.Array:
        return jax.lax.fori_loop(0, steps, lambda i, a: jnp.tanh(a @ a + 1.0), x)

    slow(x, 400).block_until_ready()  # compile
    out = slow(x, 400)
    assert not out.is_ready(), "filter_jit waited for the computation (async dispatch lost)"
    out.block_until_ready()
    assert out.is_ready()


def test_filter_jit_as_method_and_with_kwargs() -> None:
    class Model(spruce.Module):
        lin: nn.Linear

        @filter_jit
        def __call__(self, x: jax.Array, *, scale: float = 1.0) -> jax.Array:
            return self.lin(x) * scale

    m = Model(nn.Linear(2, 2, key=KEY))
    np.testing.assert_allclose(m(jnp.ones(2), scale=2.0), 2 * m.lin(jnp.ones(2)), rtol=1e-6)


def test_filter_jit_unhashable_static_error() -> None:
    class Opaque:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"must be hashable.*Opaque"):
        filter_jit(lambda o: 1)(Opaque())
    with pytest.raises(TypeError, match="expected a function"):
        filter_jit(3)  # type: ignore[arg-type]


def test_filter_grad_differentiates_inexact_arrays_only() -> None:
    class Mixed(spruce.Module):
        w: jax.Array
        steps: jax.Array  # integer array: not differentiated
        act: Callable[[jax.Array], jax.Array]

    m = Mixed(jnp.array([1.0, 2.0]), jnp.array(3), jnp.sin)

    def loss(m: Mixed, x: jax.Array) -> jax.Array:
        return jnp.sum(m.act(m.w * x)) * m.steps

    g = filter_grad(loss)(m, 2.0)
    assert type(g) is Mixed and g.steps is None and g.act is None
    np.testing.assert_allclose(g.w, 3 * 2.0 * np.cos(np.array([2.0, 4.0])), rtol=1e-6)
    v, g2 = filter_value_and_grad(loss)(m, 2.0)
    np.testing.assert_allclose(v, 3 * (np.sin(2.0) + np.sin(4.0)), rtol=1e-6)
    spruce.assert_tree_equal(g, g2)
    (v, aux), _ = filter_value_and_grad(lambda m: (jnp.sum(m.w), "aux"), has_aux=True)(m)
    assert aux == "aux" and float(v) == 3.0


def test_filter_vmap() -> None:
    mlp = nn.MLP(3, 2, 4, 1, key=KEY)
    xs = jnp.arange(15.0).reshape(5, 3)
    out = filter_vmap(lambda m, x: m(x), in_axes=(None, 0))(mlp, xs)
    np.testing.assert_allclose(out, jax.vmap(mlp)(xs), rtol=1e-6)
    # a batch of modules: the function-valued static leaves are simply not mapped
    k1, k2 = jax.random.split(KEY)
    stacked = spruce.tree.map(lambda a, b: jnp.stack([a, b]), nn.MLP(3, 2, 4, 1, key=k1), nn.MLP(3, 2, 4, 1, key=k2))
    assert filter_vmap(lambda m, x: m(x), in_axes=(0, None))(stacked, xs[0]).shape == (2, 2)
    with pytest.raises(ValueError, match="in_axes has 1 entries for 2 arguments"):
        filter_vmap(lambda m, x: m(x), in_axes=(0,))(mlp, xs)
