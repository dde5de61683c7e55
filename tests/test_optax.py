"""optax accepts spruce Modules unchanged: adam through optax.apply_updates, jax.jit
and jax.value_and_grad on a Module, and the filtered pattern (filter_value_and_grad, optax state
initialised on ``spruce.filter(model, spruce.is_inexact_array)``) for a Module with non-array
fields.  Every adam step is checked against a hand-written NumPy adam on the leaves.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import spruce
import spruce.nn as nn
import spruce.tree as st
from spruce.jax import filter_jit, filter_value_and_grad

KEY = jax.random.PRNGKey(0)
LR, B1, B2, EPS = 1e-2, 0.9, 0.999, 1e-8


class NumpyAdam:
    """Reference adam (Kingma & Ba, algorithm 1) on a list of float64 NumPy arrays."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.t = 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def updates(self, grads: list[np.ndarray]) -> list[np.ndarray]:
        self.t += 1
        out = []
        for i, g in enumerate(grads):
            self.m[i] = B1 * self.m[i] + (1 - B1) * g
            self.v[i] = B2 * self.v[i] + (1 - B2) * g * g
            m_hat = self.m[i] / (1 - B1**self.t)
            v_hat = self.v[i] / (1 - B2**self.t)
            out.append(-LR * m_hat / (np.sqrt(v_hat) + EPS))
        return out


def _data() -> tuple[jax.Array, jax.Array]:
    x = jnp.linspace(-2.0, 2.0, 32).reshape(32, 1)
    return x, jnp.sin(2.0 * x)


def _mse(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def _f64(tree: Any) -> list[np.ndarray]:
    return [np.asarray(v, np.float64) for v in st.leaves(tree)]


@pytest.mark.slow
def test_adam_on_an_mlp_with_jit_and_value_and_grad() -> None:
    model = nn.MLP(1, 1, 16, 2, activation=jax.nn.tanh, key=KEY)
    x, y = _data()
    opt = optax.adam(LR, b1=B1, b2=B2, eps=EPS)
    state = opt.init(model)
    # optax's state holds Modules: the moments are model-shaped
    adam_state = state[0]
    assert type(adam_state.mu) is nn.MLP and type(adam_state.nu) is nn.MLP
    assert adam_state.mu.activation is jax.nn.tanh
    assert st.structure(adam_state.mu) == st.structure(model)

    @jax.jit
    def step(model: nn.MLP, state: Any) -> tuple[nn.MLP, Any, jax.Array, nn.MLP, nn.MLP]:
        loss, grads = jax.value_and_grad(_mse)(model, x, y)
        updates, state = opt.update(grads, state, model)
        return optax.apply_updates(model, updates), state, loss, grads, updates

    ref = NumpyAdam(_f64(model))
    expected = _f64(model)
    losses = []
    for i in range(200):
        new, state, loss, grads, updates = step(model, state)
        losses.append(float(loss))
        if i < 3:
            # the update is module-shaped and equals a hand-computed adam step on the leaves
            assert type(grads) is nn.MLP and type(updates) is nn.MLP and type(new) is nn.MLP
            assert new.activation is jax.nn.tanh and new.layers[0].in_features == 1
            ref_updates = ref.updates(_f64(grads))
            for u, r in zip(_f64(updates), ref_updates):
                np.testing.assert_allclose(u, r, rtol=1e-4, atol=1e-7)
            expected = [p + u for p, u in zip(expected, ref_updates)]
            for p, e in zip(_f64(new), expected):
                np.testing.assert_allclose(p, e, rtol=1e-5, atol=1e-6)
        model = new
    assert int(state[0].count) == 200
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    assert all(np.isfinite(losses))


class Scaled(spruce.Module):
    """A model with non-array fields that are leaves (not static): a function and an int."""

    lin: nn.Linear
    act: Callable[[jax.Array], jax.Array]
    repeats: int
    name: str = spruce.field(static=True, default="scaled")

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.lin(x)
        for _ in range(self.repeats):
            h = self.act(h)
        return h


@pytest.mark.slow
def test_adam_with_filter_value_and_grad_on_a_module_with_non_array_fields() -> None:
    model = Scaled(nn.Linear(1, 1, key=KEY), jnp.tanh, 2)
    x, _ = _data()
    y = jnp.tanh(jnp.tanh(1.5 * x + 0.2))  # in the model's family: the loss can reach ~0
    params = spruce.filter(model, spruce.is_inexact_array)
    assert params.act is None and params.repeats is None and params.name == "scaled"
    opt = optax.adam(LR, b1=B1, b2=B2, eps=EPS)
    state = opt.init(params)
    assert type(state[0].mu) is Scaled and state[0].mu.act is None

    grad_fn = filter_value_and_grad(_mse)
    ref = NumpyAdam(_f64(params))
    expected = _f64(params)
    loss0 = None
    for _ in range(3):
        loss, grads = grad_fn(model, x, y)
        loss0 = float(loss) if loss0 is None else loss0
        assert type(grads) is Scaled and grads.act is None and grads.repeats is None
        updates, state = opt.update(grads, state, spruce.filter(model, spruce.is_inexact_array))
        params = optax.apply_updates(spruce.filter(model, spruce.is_inexact_array), updates)
        model = spruce.combine(params, spruce.filter(model, spruce.is_inexact_array, inverse=True))
        assert type(model) is Scaled and model.act is jnp.tanh and model.repeats == 2
        ref_updates = ref.updates(_f64(grads))
        for u, r in zip(_f64(updates), ref_updates):
            np.testing.assert_allclose(u, r, rtol=1e-4, atol=1e-7)
        expected = [p + u for p, u in zip(expected, ref_updates)]
        for p, e in zip(_f64(params), expected):
            np.testing.assert_allclose(p, e, rtol=1e-5, atol=1e-6)
    # and the same training step under filter_jit, many steps: the loss falls
    @filter_jit
    def step(model: Scaled, state: Any) -> tuple[Scaled, Any, jax.Array]:
        params, static = spruce.partition(model, spruce.is_inexact_array)
        loss, grads = grad_fn(model, x, y)
        updates, state = opt.update(grads, state, params)
        return spruce.combine(optax.apply_updates(params, updates), static), state, loss

    for _ in range(300):
        model, state, loss = step(model, state)
    assert type(model) is Scaled and model.act is jnp.tanh
    assert float(loss) < 0.01 * (loss0 or 0.0), (loss0, float(loss))
    assert int(state[0].count) == 303


def test_apply_updates_rejects_a_model_with_non_array_leaves() -> None:
    # the reason for the filtered pattern: optax adds updates to every leaf of params
    model = Scaled(nn.Linear(1, 1, key=KEY), jnp.tanh, 2)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, spruce.filter(model, spruce.is_inexact_array))
    with pytest.raises(TypeError):
        optax.apply_updates(model, zeros)
