"""The seed's "Equinox - How to actually do this in practice" section, run with spruce.

shared/seeds/002_*.txt builds a two-layer network as an ``equinox.Module``; here it is a
``spruce.Module`` with ``spruce.nn.Linear`` layers.  With ``jax_threefry_partitionable=False``
(the setting the seed was produced with) the parameters and the forward pass print the seed's
numbers.  The loss value differs from the seed's: its ``ys`` came from a notebook state that
the text does not show (the L2 term, 1.4990535, matches).

Run: ``PYTHONPATH=src python examples/seed_equinox.py``.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import jax.random as random

import spruce
import spruce.nn as nn
import spruce.tree as tree
import spruce.tree_util as tree_util


class SimpleNN(spruce.Module):
    layers: list[nn.Linear]

    def __init__(self, n_inputs: int, n_hidden: int, n_outputs: int, key: jax.Array) -> None:
        key1, key2 = random.split(key)
        self.layers = [
            nn.Linear(n_inputs, n_hidden, key=key1),
            nn.Linear(n_hidden, n_outputs, key=key2),
        ]

    # vmap over the batch; in_axes=(None, 0): the model itself is not batched.
    @partial(jax.vmap, in_axes=(None, 0))
    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    jax.config.update("jax_threefry_partitionable", False)

    # The seed's data (its "Example: Neural network parameters" section).
    key = random.PRNGKey(0)
    keys = random.split(key, 4)
    key, subkey = random.split(keys[0])
    xs = random.normal(subkey, (10, 3))
    key, subkey = random.split(key)
    ys = random.normal(subkey, (10,))

    model = SimpleNN(3, 2, 1, random.PRNGKey(314))

    section("model")
    print(model)
    section("forward pass model(xs)")
    print(model(xs))
    section("tree_util.tree_structure(model)")
    print(tree_util.tree_structure(model))
    section("jax.tree_util.tree_structure(model) (the same)")
    print(jax.tree_util.tree_structure(model))
    section("model.layers[0].weight")
    print(model.layers[0].weight)
    section("tree_util.tree_leaves(model)")
    for path, leaf in tree.leaves_with_path(model):
        print(tree.keystr(path), leaf.tolist())
    section("tree.flatten_one_level(model)")
    children, treedef = tree.flatten_one_level(model)
    print(spruce.pformat(children))
    print(treedef)
    section("L2 norm of the parameters")
    print(tree_util.tree_reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), tree_util.tree_map(lambda x: x**2, model), 0.0))

    @jax.jit
    @jax.value_and_grad
    def loss(model: SimpleNN, xs: jax.Array, ys: jax.Array) -> jax.Array:
        pred = model(xs)
        squared_error = jnp.mean((pred - ys) ** 2)
        l2_norm = tree_util.tree_reduce(
            lambda x, y: jnp.sum(x) + jnp.sum(y),
            tree_util.tree_map(lambda x: x**2, model),
            0.0,
        )
        return squared_error + 0.1 * l2_norm

    section("loss and gradient: jit(value_and_grad(loss))(model, xs, ys)")
    v, g = loss(model, xs, ys)
    print(v)
    print(g)
    for leaf in tree_util.tree_leaves(g):
        print(leaf.tolist())

    section("an SGD step: tree.map(lambda p, g: p - 0.1 * g, model, g)")
    for step in range(5):
        model = tree.map(lambda p, d: p - 0.1 * d, model, g)
        v, g = loss(model, xs, ys)
        print(f"step {step + 1}: loss {float(v):.6f}")

    section("spruce.summary(model)")
    print(spruce.summary(model))


if __name__ == "__main__":
    main()
