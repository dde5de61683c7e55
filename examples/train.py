"""Train the English tutorial's two-layer network on a synthetic regression task, with a progress bar.

The network is the tutorial's ``SimpleNN`` (``seed_equinox.py``: Linear -> tanh -> Linear, the
forward pass vmapped over the batch), a ``spruce.Module``; here it is wider (16 hidden units
by default, against the tutorial's 2) so that it can fit the target.  The data are made up:

    xs ~ N(0, 1) of shape (256, 3)
    ys = sin(2 * x0) + x1 * x2 / 2 + 0.05 * N(0, 1)       shape (256, 1)

One training step — loss, gradient (a SimpleNN-shaped pytree), update — runs under
``jax.jit``.  The update is ``optax.adam`` (``--optimizer adam``, the default: optax works on
the Module directly, its state is a pytree too) or the tutorials' plain SGD step
``tree.map(lambda p, g: p - lr * g, model, grads)`` (``--optimizer sgd``).  A rich progress
bar shows the current loss; the loss is printed at a few checkpoints, then the first and final
losses and a held-out loss on 256 fresh points.  Everything is drawn from ``--seed`` (the
data by NumPy, the parameters by ``PRNGKey(seed)``), so the same seed prints the same numbers.
When stdout is not a terminal (a pipe, a test) the bar is drawn once, at the end, without
control codes.

Run: ``PYTHONPATH=src python examples/train.py [--steps 400] [--seed 0] [--optimizer adam]``
(about 3 s).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.random as random
import numpy as np
import optax
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from seed_equinox import SimpleNN

import spruce.tree as tree


def make_data(rng: np.random.Generator, n: int) -> tuple[jax.Array, jax.Array]:
    """``n`` points: inputs (n, 3), targets (n, 1) = sin(2 x0) + x1 x2 / 2 + noise, float32.

    Drawn with NumPy (no compilation needed); the model's parameters come from JAX keys."""
    xs = rng.standard_normal((n, 3))
    ys = np.sin(2.0 * xs[:, 0]) + 0.5 * xs[:, 1] * xs[:, 2] + 0.05 * rng.standard_normal(n)
    return jnp.asarray(xs, jnp.float32), jnp.asarray(ys[:, None], jnp.float32)


def mse(model: SimpleNN, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """Mean squared error; ``model(xs)`` and ``ys`` are both (n, 1)."""
    return jnp.mean((model(xs) - ys) ** 2)


Step = Callable[[SimpleNN, Any, jax.Array, jax.Array], tuple[SimpleNN, Any, jax.Array]]


def make_step(optimizer: str, lr: float) -> tuple[Step, Callable[[SimpleNN], Any]]:
    """A jitted ``step(model, opt_state, xs, ys) -> (model, opt_state, loss)`` and the
    function that makes the initial optimizer state."""
    if optimizer == "adam":
        opt = optax.adam(lr)

        @jax.jit
        def adam_step(model: SimpleNN, opt_state: Any, xs: jax.Array, ys: jax.Array) -> Any:
            loss, grads = jax.value_and_grad(mse)(model, xs, ys)
            updates, opt_state = opt.update(grads, opt_state, model)
            return optax.apply_updates(model, updates), opt_state, loss

        return adam_step, opt.init

    @jax.jit
    def sgd_step(model: SimpleNN, opt_state: Any, xs: jax.Array, ys: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(mse)(model, xs, ys)
        return tree.map(lambda p, g: p - lr * g, model, grads), opt_state, loss

    return sgd_step, lambda model: None


def train(
    steps: int, seed: int, optimizer: str, lr: float, hidden: int, console: Console
) -> tuple[SimpleNN, list[tuple[int, float]]]:
    """Fit a fresh SimpleNN(3, hidden, 1); returns it and the (step, loss) history."""
    xs, ys = make_data(np.random.default_rng([seed, 0]), 256)
    model = SimpleNN(3, hidden, 1, random.PRNGKey(seed))
    step, init = make_step(optimizer, lr)
    opt_state = init(model)

    checkpoints = {0, steps - 1} | {s for s in range(0, steps, max(1, steps // 8))}
    history: list[tuple[int, float]] = []
    columns = (
        TextColumn(f"{optimizer} lr={lr:g}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.6f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("train", total=steps, loss=float("nan"))
        for i in range(steps):
            # the loss returned is the one before this step's update
            model, opt_state, loss = step(model, opt_state, xs, ys)
            value = float(loss)
            history.append((i, value))
            progress.update(task, advance=1, loss=value)
            if i in checkpoints:
                progress.console.print(f"step {i:5d}  loss {value:.6f}")
    return model, history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--lr", type=float, default=None, help="default: 0.01 (adam), 0.1 (sgd)")
    parser.add_argument("--hidden", type=int, default=16)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    lr = args.lr if args.lr is not None else (0.01 if args.optimizer == "adam" else 0.1)

    console = Console()
    console.print(
        f"SimpleNN(3, {args.hidden}, 1), {args.optimizer}, lr {lr:g}, {args.steps} steps, seed {args.seed}"
    )
    model, history = train(args.steps, args.seed, args.optimizer, lr, args.hidden, console)
    first, final = history[0][1], history[-1][1]
    test_loss = float(jax.jit(mse)(model, *make_data(np.random.default_rng([args.seed, 1]), 256)))
    console.print(f"first loss {first:.6f}")
    console.print(f"final loss {final:.6f} ({100 * final / first:.1f}% of the first)")
    console.print(f"held-out loss {test_loss:.6f}")


if __name__ == "__main__":
    main()
