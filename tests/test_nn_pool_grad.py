"""Gradients of max and average pooling under ``jax.jit``: equal to the eager gradient and to
central finite differences.  (``lax.reduce_window`` with an identity that is a traced value
has no derivative rule; pooling must pass its identity as a constant.)  The comparison with
PyTorch's gradients is in test_nn_torch.py."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.nn as nn
from spruce.jax import filter_jit, filter_value_and_grad

# (name, arguments, one example's shape)
CASES = [
    ("MaxPool1d", dict(kernel_size=3, stride=2, padding=1), (2, 9)),
    ("MaxPool2d", dict(kernel_size=2), (3, 8, 8)),  # as in `spruce demo train`
    ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True), (2, 7, 9)),
    ("MaxPool3d", dict(kernel_size=2, stride=1, padding=1), (1, 3, 4, 3)),
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False), (2, 9)),
    ("AvgPool2d", dict(kernel_size=2), (3, 8, 8)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 7, 9)),
    ("AvgPool3d", dict(kernel_size=2, divisor_override=3), (1, 4, 4, 2)),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def example(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Distinct values at least 0.1 apart (a shuffled ramp), so that no window's maximum
    changes within a finite-difference step."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).astype(np.float32) * 0.1 - n * 0.05).reshape(shape)


def loss_of(layer: Any, shape: tuple[int, ...]) -> Callable[[jax.Array], jax.Array]:
    """A scalar that weighs every output value differently: ``sum(w * layer(x))``."""
    out = jax.eval_shape(layer, jax.ShapeDtypeStruct(shape, jnp.float32)).shape
    w = jnp.asarray(np.random.default_rng(1).uniform(0.5, 1.5, out).astype(np.float32))
    return lambda x: jnp.sum(w * layer(x))


@pytest.mark.parametrize(("name", "kw", "shape"), CASES, ids=IDS)
def test_grad_under_jit_equals_eager_grad_and_finite_differences(name: str, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    layer = getattr(nn, name)(**kw)
    loss = loss_of(layer, shape)
    x = jnp.asarray(example(shape))
    eager = np.asarray(jax.grad(loss)(x))
    for grad in (jax.jit(jax.grad(loss)), jax.grad(jax.jit(loss))):
        np.testing.assert_allclose(np.asarray(grad(x)), eager, rtol=1e-6, atol=1e-6)
    # central differences, one input element at a time (the loss is piecewise linear in x)
    eps, x0, f = 1e-2, example(shape), jax.jit(loss)
    numeric = np.zeros(shape, np.float32)
    for i in np.ndindex(*shape):
        hi, lo = x0.copy(), x0.copy()
        hi[i] += eps
        lo[i] -= eps
        numeric[i] = (float(f(hi)) - float(f(lo))) / (2 * eps)
    np.testing.assert_allclose(eager, numeric, rtol=1e-3, atol=1e-3)
    assert np.count_nonzero(eager) > 0


def test_a_model_with_pooling_trains_under_filter_jit() -> None:
    """``filter_value_and_grad`` inside ``filter_jit`` through conv, max pool and average pool
    (what a training step does): the gradients equal the eager ones."""
    key1, key2 = jax.random.split(jax.random.key(0))
    model = nn.Sequential([nn.Conv2d(1, 4, 3, padding=1, key=key1), nn.MaxPool2d(2), nn.Lambda(jax.nn.relu),
                           nn.AvgPool2d(2), nn.Lambda(jnp.ravel), nn.Linear(4 * 2 * 2, 3, key=key2)])
    x = jnp.asarray(example((1, 8, 8)))

    def loss(model: Any, x: jax.Array) -> jax.Array:
        return jnp.sum(jnp.sin(model(x)))

    value, grads = filter_jit(filter_value_and_grad(loss))(model, x)
    eager_value, eager_grads = filter_value_and_grad(loss)(model, x)
    np.testing.assert_allclose(value, eager_value, rtol=1e-5, atol=1e-6)
    got, expected = spruce.tree.leaves(grads), spruce.tree.leaves(eager_grads)
    assert len(got) == len(expected) == 4
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert np.count_nonzero(a) > 0
