"""The English tutorial's hand-written two-layer network, with its parameters in a dict.

The tutorial's section "Example: Neural network parameters" (see examples/README.md), run
with spruce.tree in place of jax.tree_util (JAX still does the arrays, ``vmap``, ``jit`` and
``grad``):

1. ``params``: a dict of dicts of arrays, drawn from ``PRNGKey(0)``;
2. ``simple_nn(xs, params)``: the forward pass on one example, batched with ``jax.vmap``;
3. ``jax.jit(jax.grad(loss))``: the gradient is a dict shaped like ``params``;
4. one SGD step ``tree.map(lambda x, g: x - 0.1 * g, params, g)``;
5. the L2 regulariser ``tree.reduce(..., tree.map(lambda x: x ** 2, params), 0.0)``;
6. ``jax.jit(jax.value_and_grad(loss))`` of the regularised loss.

With ``jax_threefry_partitionable=False`` (the setting the tutorial was produced with)
the parameters, the forward pass, the squared parameters and the L2 sum print exactly the
tutorial's text.  **Where this script differs from the tutorial:** the targets ``ys``.  The
tutorial's loss and gradients were computed with a ``ys`` held in its notebook that the page
does not show (the code it shows gives other numbers), so the loss and gradient values printed
here are this script's own.  ``pred`` has shape (10, 1) and ``ys`` (10,), so ``pred - ys``
broadcasts to (10, 10) — as in the tutorial, which this script follows — and the loss sees
``ys`` only through its mean and mean square; the last section prints ours next to the ones
the tutorial's numbers imply.  The SGD step is also applied to the tutorial's printed
gradient, which gives the tutorial's printed ``new_params`` exactly.

Run: ``PYTHONPATH=src python examples/nn_dict_params.py`` (about 2 s).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as random
import numpy as np
from _notebook import notebook_repr

import spruce.tree as tree

Params = dict[str, dict[str, jax.Array]]


def init_params(key: jax.Array) -> tuple[Params, jax.Array]:
    """The tutorial's parameters: W1 (2, 3), b1 (2,), W2 (1, 2), b2 (1,), standard normal.

    Returns the parameters and ``keys[0]``, which the tutorial goes on to split for the data."""
    keys = random.split(key, 4)
    params = {
        "layer1": {
            "W": random.normal(keys[0], (2, 3)),
            "b": random.normal(keys[1], (2,)),
        },
        "layer2": {
            "W": random.normal(keys[2], (1, 2)),
            "b": random.normal(keys[3], (1,)),
        },
    }
    return params, keys[0]


def make_data(key0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The tutorial's inputs ``xs`` (10, 3) and this script's targets ``ys`` (10,), from the code
    the tutorial shows (its own ``ys`` is not reproducible, see the module docstring)."""
    key, subkey = random.split(key0)
    xs = random.normal(subkey, (10, 3))
    key, subkey = random.split(key)
    ys = random.normal(subkey, (10,))
    return xs, ys


@partial(jax.vmap, in_axes=(0, None))
def simple_nn(x: jax.Array, params: Params) -> jax.Array:
    """One example ``x`` (3,) -> (1,); vmapped: ``xs`` (N, 3) -> (N, 1), params not batched."""
    W1 = params["layer1"]["W"]
    b1 = params["layer1"]["b"]
    W2 = params["layer2"]["W"]
    b2 = params["layer2"]["b"]
    return W2 @ jnp.tanh(W1 @ x + b1) + b2


def loss(params: Params, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """Mean squared error (with the tutorial's (10, 1) - (10,) broadcast)."""
    pred = simple_nn(xs, params)
    return jnp.mean((pred - ys) ** 2)


def l2_norm(params: Any) -> jax.Array:
    """Sum of the squares of every parameter: a tree.map, then a tree.reduce."""
    total: jax.Array = tree.reduce(
        lambda x, y: jnp.sum(x) + jnp.sum(y),
        tree.map(lambda x: x**2, params),
        0.0,
    )
    return total


def loss_l2(params: Params, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """The tutorial's regularised loss: squared error + 0.1 * L2."""
    pred = simple_nn(xs, params)
    squared_error = jnp.mean((pred - ys) ** 2)
    return squared_error + 0.1 * l2_norm(params)


def sgd_step(params: Any, grads: Any, lr: float = 0.1) -> Any:
    """``p - lr * g`` leaf by leaf: any pytree of parameters, same structure as the grads."""
    return tree.map(lambda x, g: x - lr * g, params, grads)


# The tutorial's printed gradient (its ``g = grad_loss(params, xs, ys)``), re-typed as float32.
# float32 values printed by JAX round-trip exactly, so these are the tutorial's very numbers.
_f32 = partial(np.array, dtype=np.float32)
SEED_GRAD: Params = {
    "layer1": {
        "W": _f32([[-0.11328071, -0.06153299, 0.23609458], [0.04657721, -0.01834877, 0.02984624]]),
        "b": _f32([0.2492916, -0.12900007]),
    },
    "layer2": {"W": _f32([[-0.47350553, -1.016762]]), "b": _f32([1.0130714])},
}
SEED_LOSS = 1.0290194  # the tutorial's loss(params, xs, ys)


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    jax.config.update("jax_threefry_partitionable", False)

    params, key0 = init_params(random.PRNGKey(0))
    xs, ys = make_data(key0)

    section("params")
    print(notebook_repr(params))
    section("tree.structure(params)")
    print(tree.structure(params))

    section("xs  [the tutorial's inputs; its page does not print them]")
    print(notebook_repr(xs))
    section("simple_nn(xs, params)")
    pred = simple_nn(xs, params)
    print(notebook_repr(pred))

    section("ys  [this script's targets, from the code the tutorial shows; not the tutorial's ys]")
    print(notebook_repr(ys))
    section("loss(params, xs, ys)  [this script's ys; the tutorial printed 1.0290194]")
    print(notebook_repr(loss(params, xs, ys)))

    grad_loss = jax.jit(jax.grad(loss))
    g = grad_loss(params, xs, ys)
    section("g = jax.jit(jax.grad(loss))(params, xs, ys)  [this script's ys]")
    print(notebook_repr(g))
    print("same structure as params:", tree.structure(g) == tree.structure(params))

    section("new_params = tree.map(lambda x, g: x - 0.1 * g, params, g)  [this script's g]")
    new_params = sgd_step(params, g)
    print(notebook_repr(new_params))
    loss_jit = jax.jit(loss)
    print(f"loss before {float(loss_jit(params, xs, ys)):.7f}, after {float(loss_jit(new_params, xs, ys)):.7f}")

    section("the same SGD step with the tutorial's printed gradient")
    print(notebook_repr(sgd_step(params, tree.map(jnp.asarray, SEED_GRAD))))

    section("params_2 = tree.map(lambda x: x ** 2, params)")
    params_2 = tree.map(lambda x: x**2, params)
    print(notebook_repr(params_2))

    section("tree.reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), params_2, 0.0)")
    print(notebook_repr(tree.reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), params_2, 0.0)))

    loss_and_grad = jax.jit(jax.value_and_grad(loss_l2))
    v, g_l2 = loss_and_grad(params, xs, ys)
    section("v, g = jax.jit(jax.value_and_grad(loss_l2))(params, xs, ys)  [this script's ys]")
    print(notebook_repr(v))
    print(notebook_repr(g_l2))

    # d/dp of 0.1 * sum(p**2) is 0.2 * p: the regularised gradient is g + 0.2 * params.
    @jax.jit
    def check(v: jax.Array, g_l2: Params, g: Params, params: Params) -> tuple[jax.Array, jax.Array]:
        extra = tree.map(lambda a, b, p: jnp.max(jnp.abs(a - b - 0.2 * p)), g_l2, g, params)
        return jnp.abs(v - loss(params, xs, ys) - 0.1 * l2_norm(params)), tree.reduce(jnp.maximum, extra)

    v_err, g_err = check(v, g_l2, g, params)
    print(f"v == loss + 0.1 * L2: {float(v_err) < 1e-6}")
    print(f"max |g_l2 - g - 0.2 * params| = {float(g_err):.1e}")

    section("where the data differs from the tutorial")
    # pred (10, 1) - ys (10,) is (10, 10): the loss is mean(p**2) - 2 mean(p) mean(y) + mean(y**2),
    # and d loss / d layer2.b = 2 (mean(p) - mean(y)).  The tutorial's printed loss and layer2.b
    # gradient therefore fix the mean and the mean square of its ys.
    p = np.asarray(pred, np.float64)[:, 0]
    seed_mean = p.mean() - float(SEED_GRAD["layer2"]["b"][0]) / 2
    seed_mean_sq = SEED_LOSS - (p**2).mean() + 2 * p.mean() * seed_mean
    y = np.asarray(ys, np.float64)
    print(f"pred.shape {pred.shape}, ys.shape {ys.shape}, (pred - ys).shape {(pred - ys).shape}")
    print(f"this script's ys: mean {y.mean():+.6f}, mean square {(y**2).mean():.6f}")
    print(f"the tutorial's ys: mean {seed_mean:+.6f}, mean square {seed_mean_sq:.6f} (implied by its loss and gradient)")


if __name__ == "__main__":
    main()
