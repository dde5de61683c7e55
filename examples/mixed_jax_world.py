"""One pytree world: a model mixing spruce, Equinox and a flax-struct-style dataclass, trained
with optax through ``spruce.jax.filter_jit`` and through plain ``jax.jit``.

The model is a ``spruce.Module`` holding

- ``embed``: a ``spruce.nn.Linear`` (3 -> 16), registered with spruce;
- ``hidden``: an ``equinox.nn.Linear`` (16 -> 16), registered with JAX by Equinox;
- ``head``: ``Head``, a dataclass registered with ``jax.tree_util.register_dataclass`` only (what
  flax's ``struct.dataclass`` does), with a static ``activation`` name.

Nobody registers anything twice: spruce's bridge makes every spruce registration known to
``jax.tree_util`` and every JAX registration a node in spruce.  So the same model goes through
``spruce.tree`` (key paths, ``spruce.summary``), optax (its state mirrors the model), ``jax.jit``
and ``jax.grad`` (JAX walks the spruce Module), and ``spruce.jax.filter_jit`` /
``filter_value_and_grad`` (spruce walks the Equinox Module and the dataclass).

The task: fit ``sin(2 x0) + x1 x2 / 2`` on 256 points with ``optax.adam``; the two training loops
start from the same parameters, take the same steps, and must end at the same parameters.

Run: ``PYTHONPATH=src python examples/mixed_jax_world.py [--steps 300]`` (a few seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import optax

import spruce
import spruce.jax as sj
import spruce.nn as snn
import spruce.tree as tree


@jtu.register_dataclass
@dataclasses.dataclass
class Head:
    """A flax.struct-style output layer: registered with JAX only."""

    kernel: jax.Array  # (out, in)
    bias: jax.Array  # (out,)
    activation: str = dataclasses.field(default="identity", metadata={"static": True})

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.kernel @ x + self.bias
        return jnp.tanh(y) if self.activation == "tanh" else y


class Model(spruce.Module):
    """spruce Linear -> tanh -> Equinox Linear -> tanh -> Head; one example of shape (3,)."""

    embed: snn.Linear
    hidden: eqx.nn.Linear
    head: Head

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jnp.tanh(self.embed(x))
        h = jnp.tanh(self.hidden(h))
        return self.head(h)


def make_model(key: jax.Array, width: int = 16) -> Model:
    k1, k2, k3 = jax.random.split(key, 3)
    kernel = jax.random.normal(k3, (1, width)) / jnp.sqrt(width)
    return Model(
        snn.Linear(3, width, key=k1),
        eqx.nn.Linear(width, width, key=k2),
        Head(kernel, jnp.zeros(1)),
    )


def make_data(seed: int, n: int = 256) -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 3))
    ys = np.sin(2.0 * xs[:, 0]) + 0.5 * xs[:, 1] * xs[:, 2]
    return jnp.asarray(xs, jnp.float32), jnp.asarray(ys[:, None], jnp.float32)


def loss(model: Model, xs: jax.Array, ys: jax.Array) -> jax.Array:
    return jnp.mean((jax.vmap(model)(xs) - ys) ** 2)


def train_with_jax_jit(model: Model, opt: Any, xs: jax.Array, ys: jax.Array, steps: int) -> tuple[Model, list[float]]:
    """Plain JAX: ``jax.jit`` of a step using ``jax.value_and_grad`` (every leaf is an array)."""

    @jax.jit
    def step(model: Model, state: Any) -> tuple[Model, Any, jax.Array]:
        value, grads = jax.value_and_grad(loss)(model, xs, ys)
        updates, state = opt.update(grads, state, model)
        return optax.apply_updates(model, updates), state, value

    state = opt.init(model)
    losses = []
    for _ in range(steps):
        model, state, value = step(model, state)
        losses.append(float(value))
    return model, losses


def train_with_filter_jit(model: Model, opt: Any, xs: jax.Array, ys: jax.Array, steps: int) -> tuple[Model, list[float]]:
    """spruce: ``filter_jit`` and ``filter_value_and_grad`` (non-array leaves would be static)."""

    @sj.filter_jit
    def step(model: Model, state: Any) -> tuple[Model, Any, jax.Array]:
        value, grads = sj.filter_value_and_grad(loss)(model, xs, ys)
        params = spruce.filter(model, spruce.is_inexact_array)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(model, updates), state, value

    state = opt.init(spruce.filter(model, spruce.is_inexact_array))
    losses = []
    for _ in range(steps):
        model, state, value = step(model, state)
        losses.append(float(value))
    return model, losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a model mixing spruce, Equinox and a JAX dataclass.")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model = make_model(jax.random.PRNGKey(args.seed))
    xs, ys = make_data(args.seed)
    print("same PyTreeDef in spruce and jax:", repr(tree.structure(model)) == repr(jtu.tree_structure(model)))
    paths = [tree.keystr(p) for p, _ in tree.leaves_with_path(model)]
    print("spruce paths:", " ".join(paths))
    print("jax paths:   ", " ".join(jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(model)))
    print(spruce.summary(model))

    opt = optax.adam(0.01)
    via_jax, jax_losses = train_with_jax_jit(model, opt, xs, ys, args.steps)
    via_spruce, spruce_losses = train_with_filter_jit(model, opt, xs, ys, args.steps)
    for name, losses in (("jax.jit", jax_losses), ("filter_jit", spruce_losses)):
        print(f"{name:<10} first loss {losses[0]:.6f}  final loss {losses[-1]:.6f}")
    gap = max(
        float(jnp.max(jnp.abs(a - b))) for a, b in zip(tree.leaves(via_jax), tree.leaves(via_spruce))
    )
    print(f"largest parameter difference between the two loops: {gap:.2e}")
    hidden_module = type(via_spruce.hidden).__module__.split(".")[0]
    print("types kept:", type(via_spruce.embed).__name__, hidden_module, type(via_spruce.head).__name__)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
