"""The English tutorial's "Equinox - How to actually do this in practice" section, run with spruce.

The tutorial (see examples/README.md) builds a two-layer network as an ``equinox.Module``; here it is a
``spruce.Module`` with ``spruce.nn.Linear`` layers, and the pytree functions come from
``spruce.tree_util`` (jax.tree_util's names) instead of ``jax.tree_util``.

With ``jax_threefry_partitionable=False`` (the setting the tutorial was produced with) the model's
repr, the forward pass, its PyTreeDef, the parameters, ``flatten_one_level`` and the L2 sum
print exactly the tutorial's text.  Two notes:

- **Where this script differs from the tutorial: the targets** ``ys``.  The tutorial's came from
  notebook state that the page does not show (see ``nn_dict_params.py``), so the loss and
  gradient values here are this script's own (the tutorial printed 0.69529444 for the loss).
- The L2 sum is printed from ``jax.jit``: 1.4990535, as in the tutorial.  The same expression run
  op by op (eager) in jax 0.10.2 rounds the last float32 digit differently (1.4990536); both
  are within one unit in the last place of the exact sum 1.49905354.

Run: ``PYTHONPATH=src python examples/seed_equinox.py`` (about 3 s).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as random
from _notebook import notebook_repr

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

    # vmap over the batch; in_axes=(None, 0): the model itself (self) is not batched.
    @partial(jax.vmap, in_axes=(None, 0))
    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)


def make_data() -> tuple[jax.Array, jax.Array]:
    """The tutorial's ``xs`` (10, 3) and, from the code the tutorial shows, ``ys`` (10,)."""
    key = random.PRNGKey(0)
    keys = random.split(key, 4)
    key, subkey = random.split(keys[0])
    xs = random.normal(subkey, (10, 3))
    key, subkey = random.split(key)
    ys = random.normal(subkey, (10,))
    return xs, ys


def l2_norm(model: Any) -> jax.Array:
    """Sum of squares of every parameter of the model."""
    total: jax.Array = tree_util.tree_reduce(
        lambda x, y: jnp.sum(x) + jnp.sum(y),
        tree_util.tree_map(lambda x: x**2, model),
        0.0,
    )
    return total


@jax.jit
@jax.value_and_grad
def loss(model: SimpleNN, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """Squared error + 0.1 * L2; returns ``(value, gradient)``, the gradient a SimpleNN."""
    pred = model(xs)
    squared_error = jnp.mean((pred - ys) ** 2)
    return squared_error + 0.1 * l2_norm(model)


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    jax.config.update("jax_threefry_partitionable", False)

    xs, ys = make_data()
    model = SimpleNN(3, 2, 1, random.PRNGKey(314))

    section("model")
    print(model)
    section("model(xs)")
    print(notebook_repr(model(xs)))
    section("tree_util.tree_structure(model)")
    print(tree_util.tree_structure(model))
    section("jax.tree_util.tree_structure(model) (the same)")
    print(jax.tree_util.tree_structure(model))
    section("model.layers[0].weight")
    print(notebook_repr(model.layers[0].weight))
    section("tree_util.tree_leaves(model)")
    print(notebook_repr(tree_util.tree_leaves(model)))
    section("tree.leaves_with_path(model)")
    for path, leaf in tree.leaves_with_path(model):
        print(f"{tree.keystr(path):18s} {spruce.pformat(leaf)}")
    section("tree.flatten_one_level(model)")
    print(notebook_repr(tree.flatten_one_level(model)))
    section("jax.jit(l2_norm)(model)")
    print(notebook_repr(jax.jit(l2_norm)(model)))

    section("v, g = loss(model, xs, ys)  [jit(value_and_grad); this script's ys]")
    v, g = loss(model, xs, ys)
    print(notebook_repr(v))
    print(g)
    section("tree_util.tree_leaves(g)  [this script's ys]")
    print(notebook_repr(tree_util.tree_leaves(g)))

    section("SGD: model = tree.map(lambda p, g: p - 0.1 * g, model, g)")
    for step in range(5):
        model = tree.map(lambda p, d: p - 0.1 * d, model, g)
        v, g = loss(model, xs, ys)
        print(f"step {step + 1}: loss {float(v):.6f}")

    section("spruce.summary(model)")
    print(spruce.summary(model))


if __name__ == "__main__":
    main()
