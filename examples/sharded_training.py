"""Train on a 2x4 device mesh with shardings by rules, save a sharded checkpoint mid-training,
resume on a different mesh.

The model is a small MLP (``spruce.Module`` of two ``spruce.nn.Linear`` layers, 8 -> 64 -> 1)
fitted with ``optax.adam`` to ``y = sin(x0) + x1 x2 / 2`` on made-up data.  Its parameters and
the optimizer state are laid out on a ``(data=2, model=4)`` mesh by one set of
``spruce.sharding.Rules`` written against the dotted key paths (``layers.0.weight``; the
optimizer's copies of them, ``0.mu.layers.0.weight``, match the same ``**`` patterns); the
batch is split over ``data``.

Halfway, ``spruce.io.save_sharded`` writes the parameters, the optimizer state and the step
(each device's distinct blocks once, no gather).  The run is then resumed from that
directory on a different mesh, ``(data=4, model=2)``: ``spruce.io.load(..., like=abstract,
shardings=...)`` places every array straight onto the new mesh, each device reading only its
own block.  The script checks that the restored parameters and optimizer state are
bit-identical to the saved ones, finishes training on the new mesh, and prints the losses of
both runs (they agree to float32 rounding: the two meshes add in different orders).

The 8 devices are CPU devices faked by ``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
which this script sets before JAX starts.  Run: ``PYTHONPATH=src python examples/sharded_training.py``
(a few seconds).
"""

from __future__ import annotations

import os

# Set before JAX is imported (the imports below come after it on purpose).
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import argparse
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import spruce
import spruce.io
import spruce.nn as nn
import spruce.sharding as sharding
import spruce.tree as tree


class MLP(spruce.Module):
    """Linear(8, hidden) -> tanh -> Linear(hidden, 1), on one example."""

    layers: tuple[nn.Linear, nn.Linear]

    def __init__(self, hidden: int, *, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.layers = (nn.Linear(8, hidden, key=k1), nn.Linear(hidden, 1, key=k2))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.layers[1](jnp.tanh(self.layers[0](x)))


# One vocabulary for parameters and optimizer state: the patterns start with ** so that
# optax's copies (0.mu.layers.0.weight, 0.nu....) match them too.
RULES = sharding.Rules(
    [
        ("**.layers.0.weight", P("model", None)),  # (hidden, 8): hidden units split over 'model'
        ("**.layers.0.bias", P("model")),
        ("**.layers.1.weight", P(None, "model")),  # (1, hidden)
        ("**", None),  # the rest (layers.1.bias, adam's step count) replicated
    ]
)


def make_data(n: int, seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((n, 8)).astype(np.float32)
    ys = (np.sin(xs[:, 0]) + 0.5 * xs[:, 1] * xs[:, 2])[:, None].astype(np.float32)
    return xs, ys


def make_step(optimizer: optax.GradientTransformation) -> Any:
    def loss_fn(model: MLP, xs: jax.Array, ys: jax.Array) -> jax.Array:
        return jnp.mean((jax.vmap(model)(xs) - ys) ** 2)

    @jax.jit
    def step(model: MLP, opt_state: Any, xs: jax.Array, ys: jax.Array) -> tuple[MLP, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(model, xs, ys)
        updates, opt_state = optimizer.update(grads, opt_state, model)
        return optax.apply_updates(model, updates), opt_state, loss

    return step


def train(
    state: dict[str, Any], mesh: Any, steps: range, xs: np.ndarray[Any, Any], ys: np.ndarray[Any, Any], step_fn: Any
) -> tuple[dict[str, Any], list[float]]:
    batch = NamedSharding(mesh, P("data"))
    xs_d, ys_d = jax.device_put(xs, batch), jax.device_put(ys, batch)
    model, opt_state = state["model"], state["opt_state"]
    losses = []
    for _ in steps:
        model, opt_state, loss = step_fn(model, opt_state, xs_d, ys_d)
        losses.append(float(loss))
    return {"model": model, "opt_state": opt_state, "step": steps.stop}, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    half = args.steps // 2

    optimizer = optax.adam(1e-2)
    step_fn = make_step(optimizer)
    xs, ys = make_data(256, args.seed)

    mesh_a = sharding.mesh({"data": 2, "model": 4})
    model = MLP(args.hidden, key=jax.random.key(args.seed))
    state = {"model": model, "opt_state": optimizer.init(model), "step": 0}
    print(sharding.explain(state, mesh_a, RULES))
    state = sharding.shard(state, mesh_a, RULES)

    state, first = train(state, mesh_a, range(0, half), xs, ys, step_fn)
    folder = os.path.join(tempfile.mkdtemp(), "checkpoint")
    spruce.io.save_sharded(folder, state)
    print(f"\nsaved step {state['step']} to {os.path.basename(folder)}/: "
          + ", ".join(sorted(os.listdir(folder))))
    uninterrupted, rest = train(state, mesh_a, range(half, args.steps), xs, ys, step_fn)

    # Resume on another mesh: the structure from jax.eval_shape (nothing allocated), the
    # placement from the same rules on the new mesh.
    mesh_b = sharding.mesh({"data": 4, "model": 2})
    abstract = jax.eval_shape(
        lambda: {
            "model": MLP(args.hidden, key=jax.random.key(0)),
            "opt_state": optimizer.init(MLP(args.hidden, key=jax.random.key(0))),
            "step": 0,
        }
    )
    abstract["step"] = 0
    restored = spruce.io.load(folder, like=abstract, shardings=sharding.shardings(abstract, mesh_b, RULES))
    same = tree.all(tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))), restored, state))
    w = restored["model"].layers[0].weight
    print(f"restored on mesh {dict(mesh_b.shape)}: layers.0.weight {w.sharding.spec}, "
          f"{w.addressable_shards[0].data.shape} per device; bit-identical: {same}")
    if not same or restored["step"] != half:
        raise SystemExit("the restored state differs from the saved one")
    resumed, rest_b = train(restored, mesh_b, range(half, args.steps), xs, ys, step_fn)

    print(f"\nloss at step 0: {first[0]:.5f}, at step {half}: {first[-1]:.5f}")
    print(f"final loss, uninterrupted on {dict(mesh_a.shape)}: {rest[-1]:.5f}")
    print(f"final loss, resumed on {dict(mesh_b.shape)}:      {rest_b[-1]:.5f}")
    gap = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(tree.leaves(uninterrupted["model"]), tree.leaves(resumed["model"])))
    print(f"largest parameter difference between the two runs: {gap:.2e}")


if __name__ == "__main__":
    main()
