"""The English tutorial's two-layer network again, with its parameters in named tuples.

The tutorial's section "Named tuples" (see examples/README.md): the same parameters as
``nn_dict_params.py`` (same keys, same draws) held in ``NNParameters(layer1, layer2)`` of
``LayerParameters(W, b)``.  Named tuples are pytree nodes, so spruce.tree maps and reduces over
them, JAX's ``vmap`` / ``jit`` / ``value_and_grad`` accept them, and the gradient comes back as
an ``NNParameters``.

With ``jax_threefry_partitionable=False`` the parameters, ``params.layer1``,
``params.layer1.W``, the structure and the squared parameters print exactly the tutorial's text.
**Where this script differs from the tutorial:** the targets ``ys`` (the tutorial's came from notebook
state it does not show; see ``nn_dict_params.py``), so the loss and gradient are this script's
own — the tutorial printed ``Array(2.3701239, dtype=float32)`` for the loss.

Run: ``PYTHONPATH=src python examples/nn_namedtuple_params.py`` (about 2 s).
"""

from __future__ import annotations

from collections import namedtuple
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as random
from _notebook import notebook_repr

import spruce.tree as tree

NNParameters = namedtuple("NNParameters", ["layer1", "layer2"])
LayerParameters = namedtuple("LayerParameters", ["W", "b"])


def init_params(key: jax.Array) -> tuple[Any, jax.Array]:
    """The tutorial's parameters as named tuples; also returns ``keys[0]`` (for the data)."""
    keys = random.split(key, 4)
    params = NNParameters(
        LayerParameters(
            W=random.normal(keys[0], (2, 3)),
            b=random.normal(keys[1], (2,)),
        ),
        LayerParameters(
            W=random.normal(keys[2], (1, 2)),
            b=random.normal(keys[3], (1,)),
        ),
    )
    return params, keys[0]


def make_data(key0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``xs`` (10, 3) as in the tutorial, ``ys`` (10,) from the code the tutorial shows."""
    key, subkey = random.split(key0)
    xs = random.normal(subkey, (10, 3))
    key, subkey = random.split(key)
    ys = random.normal(subkey, (10,))
    return xs, ys


@partial(jax.vmap, in_axes=(0, None))
def simple_nn(x: jax.Array, params: Any) -> jax.Array:
    """One example (3,) -> (1,), batched over the first axis of ``xs``."""
    W1: jax.Array = params.layer1.W
    b1: jax.Array = params.layer1.b
    W2: jax.Array = params.layer2.W
    b2: jax.Array = params.layer2.b
    return W2 @ jnp.tanh(W1 @ x + b1) + b2


@jax.jit
@jax.value_and_grad
def loss(params: Any, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """Squared error + 0.1 * L2 of the parameters; returns ``(value, gradient)``."""
    pred = simple_nn(xs, params)
    squared_error = jnp.mean((pred - ys) ** 2)
    l2_norm: jax.Array = tree.reduce(
        lambda x, y: jnp.sum(x) + jnp.sum(y),
        tree.map(lambda x: x**2, params),
        0.0,
    )
    return squared_error + 0.1 * l2_norm


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    jax.config.update("jax_threefry_partitionable", False)

    params, key0 = init_params(random.PRNGKey(0))
    xs, ys = make_data(key0)

    section("params")
    print(notebook_repr(params))
    section("params.layer1")
    print(notebook_repr(params.layer1))
    section("params.layer1.W")
    print(notebook_repr(params.layer1.W))
    section("tree.structure(params)")
    print(tree.structure(params))
    section("tree.leaves_with_path(params)")
    for path, leaf in tree.leaves_with_path(params):
        print(f"{tree.keystr(path):10s} {leaf.dtype}{list(leaf.shape)}")
    section("tree.map(lambda x: x ** 2, params)")
    print(notebook_repr(tree.map(lambda x: x**2, params)))

    section("simple_nn(xs, params)")
    print(notebook_repr(simple_nn(xs, params)))

    section("loss(params, xs, ys)  [jit(value_and_grad); this script's ys]")
    v, g = loss(params, xs, ys)
    print(notebook_repr((v, g)))
    print("the gradient is an NNParameters of LayerParameters:",
          type(g).__name__, type(g.layer1).__name__, tree.structure(g) == tree.structure(params))

    section("SGD: 20 steps of tree.map(lambda p, g: p - 0.1 * g, params, g)")
    first = float(v)
    for _ in range(20):
        params = tree.map(lambda p, d: p - 0.1 * d, params, g)
        v, g = loss(params, xs, ys)
    print(f"loss {first:.6f} -> {float(v):.6f}")


if __name__ == "__main__":
    main()
