"""The ``spruce demo train`` command: a small CNN trained on scikit-learn's 8x8 handwritten
digits, data-parallel over 8 host devices, checkpointed asynchronously by a
``spruce.io.CheckpointManager``; ``--kill-at STEP`` crashes it in the middle of a save and
``--resume`` continues it (docs/guides/training.md).

Everything random is a function of the step: the batch of step ``s`` is drawn by
``numpy.random.default_rng((seed, s))`` and the dropout keys come from
``jax.random.fold_in(key, s)``, so a run resumed from a checkpoint takes the same path as one
that was never interrupted, and ends with the same parameters bit for bit.

The 8 devices are CPU devices made by ``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
which must be set before JAX creates its backend: ``run`` sets it when JAX has not started
yet, and otherwise (JAX already running with fewer devices) runs the demo in a child process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import Any, Sequence

import numpy as np

__all__ = ["check_directory", "curve_svg", "run"]

DEVICES = 8
BATCH = 128  # examples per step, 16 per device
HELD_OUT = 360  # of the 1,797 images; the other 1,437 are for training
SEED = 0
LEARNING_RATE = 3e-3
HISTORY = "history.json"
CURVE = "curve.svg"
_FLAG = f"--xla_force_host_platform_device_count={DEVICES}"
_CHILD = "SPRUCE_DEMO_TRAIN_CHILD"  # set in the child process of the fallback (never nested)


def run(
    console: Any,
    *,
    directory: str,
    steps: int = 300,
    save_every: int = 50,
    kill_at: int | None = None,
    resume: bool = False,
    argv: Sequence[str] = (),
) -> int:
    """Train (or resume) the digits CNN, saving checkpoints into ``directory``.

    Args:
      console: a ``rich.console.Console`` for the progress bar and the report.
      directory: the checkpoints' folder (created if missing); ``history.json`` (the loss and
        accuracy of every step) and ``curve.svg`` (their curves) are written beside the steps.
      steps: the number of training steps (>= 1).
      save_every: a checkpoint every this many steps (>= 1), and one at the last step.
      kill_at: after starting the save of this step (one is started there whatever
        ``save_every`` says), the process sends itself SIGKILL while the step is being written.
      resume: continue from the latest committed step in ``directory``, which must hold one.
        Without it, ``directory`` must hold no committed step.
      argv: the command's arguments, for the child process when JAX already runs with fewer
        than 8 devices.

    Returns:
      The exit code: 0.  (``kill_at`` never returns.)

    Raises:
      ValueError: bad ``steps``, ``save_every`` or ``kill_at``; ``directory`` is a regular
        file; it holds committed steps and ``resume`` is False, or none and ``resume`` is
        True, or its latest step is past ``steps``.  All checked before JAX starts.
      ImportError: scikit-learn, optax or JAX is missing (``pip install 'spruce[demo]'``).
    """
    if steps < 1 or save_every < 1:
        raise ValueError(f"spruce demo train: --steps and --save-every must be >= 1, got {steps} and {save_every}")
    if kill_at is not None and not 1 <= kill_at <= steps:
        raise ValueError(f"spruce demo train: --kill-at must be a step from 1 to {steps}, got {kill_at}")
    check_directory(directory, steps=steps, resume=resume, kill_at=kill_at)
    if "jax" not in sys.modules and _FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
    import jax

    if jax.device_count() < DEVICES:
        if os.environ.get(_CHILD):
            raise RuntimeError(f"spruce demo train: JAX has {jax.device_count()} devices despite XLA_FLAGS={_FLAG}")
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip(), **{_CHILD: "1"})
        return subprocess.run([sys.executable, "-m", "spruce", "demo", "train", *argv], env=env).returncode
    return _Trainer(console, directory, steps, save_every).train(kill_at=kill_at, resume=resume)


def check_directory(directory: str, *, steps: int, resume: bool, kill_at: int | None = None) -> list[int]:
    """Check that ``directory`` suits a run of ``steps`` steps (killed at ``kill_at``), with
    or without ``resume``, and return its committed steps (ascending; ``[]`` when the folder
    does not exist yet, which is then not created).

    Raises:
      ValueError: ``directory`` is a regular file; it holds committed steps and ``resume`` is
        False; it holds none and ``resume`` is True; its latest step is past ``steps``, or not
        before ``kill_at`` (the run would never get there).

    >>> import os, tempfile
    >>> folder = os.path.join(tempfile.mkdtemp(), 'run')
    >>> check_directory(folder, steps=10, resume=False), os.path.exists(folder)
    ([], False)
    >>> check_directory(folder, steps=10, resume=True)
    Traceback (most recent call last):
    ...
    ValueError: spruce demo train: --resume, but ... holds no committed step to resume from: run without --resume ...
    """
    from spruce.io import CheckpointManager

    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"spruce demo train: --dir {directory} is a regular file, not a folder for the checkpoints")
    committed: list[int] = []
    if os.path.isdir(directory):
        with CheckpointManager(directory) as mgr:  # (also removes what a killed save left)
            committed = mgr.steps()
    if committed and not resume:
        raise ValueError(f"spruce demo train: {directory} already holds committed steps {committed}: "
                         f"pass --resume to continue, or another --dir")
    if resume and not committed:
        raise ValueError(f"spruce demo train: --resume, but {directory} holds no committed step to resume "
                         f"from: run without --resume to start training")
    if committed and committed[-1] > steps:
        raise ValueError(f"spruce demo train: the latest step in {directory} is {committed[-1]}, "
                         f"past --steps {steps}")
    if committed and kill_at is not None and kill_at <= committed[-1]:
        raise ValueError(f"spruce demo train: --kill-at {kill_at}, but the run resumes after step {committed[-1]}")
    return committed


def load_digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits (no download), scaled to [0, 1], as float32
    ``(n, 1, 8, 8)`` images and int32 labels, split once and for all into 1,437 training
    and 360 held-out examples: ``(x_train, y_train, x_held_out, y_held_out)``."""
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(SEED).permutation(len(labels))
    train, held = order[HELD_OUT:], order[:HELD_OUT]
    return images[train], labels[train], images[held], labels[held]


def batch_indices(step: int, n: int) -> np.ndarray:
    """The training examples of step ``step`` (1-based): ``BATCH`` distinct indices below
    ``n``, a function of the step alone."""
    return np.random.default_rng((SEED, step)).choice(n, BATCH, replace=False)


class _Trainer:
    """One run: the data, the mesh, the compiled step and evaluation, the manager."""

    def __init__(self, console: Any, directory: str, steps: int, save_every: int) -> None:
        import jax
        import optax  # type: ignore[import-untyped]
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        import spruce.sharding as sharding
        from spruce.jax import filter_jit

        self.console, self.directory, self.steps, self.save_every = console, directory, steps, save_every
        self.x_train, self.y_train, x_held, y_held = load_digits_split()
        self.mesh = sharding.mesh({"data": DEVICES})
        self.rules = sharding.Rules([("**", None)])  # parameters and optimizer state replicated
        self.batch_sharding = NamedSharding(self.mesh, P("data"))  # type: ignore[no-untyped-call]
        replicated = NamedSharding(self.mesh, P())  # type: ignore[no-untyped-call]
        self.optimizer = optax.adam(LEARNING_RATE)
        self.key = jax.random.key(SEED)
        self.x_held = jax.device_put(x_held, self.batch_sharding)  # 360 = 8 x 45
        self.y_held = jax.device_put(y_held, self.batch_sharding)
        self.step_fn = filter_jit(
            self._step,
            in_shardings=(replicated, replicated, self.batch_sharding, self.batch_sharding, replicated),
            out_shardings=replicated,
        )
        self.eval_fn = filter_jit(self._accuracy, in_shardings=(replicated, self.batch_sharding, self.batch_sharding),
                                  out_shardings=replicated)

    def initial(self) -> dict[str, Any]:
        """The state at step 0, placed on the mesh: ``{'model', 'opt_state'}``, made by one
        compiled function (made eagerly, each random draw of the initialisation would be a
        compilation of its own: ten times slower)."""
        import spruce.sharding as sharding
        from spruce.jax import filter_jit

        return sharding.shard(filter_jit(self._initial)(self.key), self.mesh, self.rules)  # type: ignore[no-any-return]

    def _initial(self, key: Any) -> dict[str, Any]:
        import spruce
        from spruce.cli._digits_cnn import DigitsCNN

        model = DigitsCNN(key=key)
        return {"model": model, "opt_state": self.optimizer.init(spruce.filter(model, spruce.is_inexact_array))}

    def _step(self, model: Any, opt_state: Any, x: Any, y: Any, step: Any) -> Any:
        import jax
        import jax.numpy as jnp
        import optax

        import spruce
        import spruce.nn as nn

        params, rest = spruce.partition(model, spruce.is_inexact_array)
        keys = jax.random.split(jax.random.fold_in(self.key, step), x.shape[0])

        def loss_fn(params: Any) -> Any:
            m = spruce.combine(params, rest)
            forward = jax.vmap(m, axis_name="batch", in_axes=(0, None, 0), out_axes=(0, None))
            logits, state = forward(x, nn.State(m), keys)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), (logits, state)

        (loss, (logits, state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        # (the running statistics get zero gradients, so zero updates; update_state sets them)
        model = nn.update_state(spruce.combine(optax.apply_updates(params, updates), rest), state)
        accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
        return model, opt_state, loss, accuracy

    @staticmethod
    def _accuracy(model: Any, x: Any, y: Any) -> Any:
        import jax
        import jax.numpy as jnp

        import spruce.nn as nn

        logits = jax.vmap(nn.inference_mode(model))(x)
        return jnp.mean(jnp.argmax(logits, axis=-1) == y)

    def train(self, *, kill_at: int | None, resume: bool) -> int:
        import jax
        import numpy as np
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        import spruce.sharding as sharding
        from spruce.io import CheckpointManager

        out, start = self.console, time.perf_counter()
        out.print(f"[bold]spruce demo train[/bold]: a small CNN on scikit-learn's 8x8 digits "
                  f"({len(self.y_train)} training, {len(self.y_held)} held-out images), data-parallel "
                  f"over {DEVICES} host devices, checkpoints in {self.directory}")
        mgr = CheckpointManager(self.directory, keep_last=3, keep_best=1, metric="val_accuracy", mode="max")
        history: dict[str, Any] = {"step": [], "loss": [], "accuracy": [], "val_step": [], "val_accuracy": []}
        state = self.initial()
        first = 1
        latest = mgr.latest_step() if resume else None  # (run() checked the directory)
        if latest is not None:
            state = mgr.restore(like=state, shardings=sharding.shardings(state, self.mesh, self.rules))
            history = _read_history(os.path.join(self.directory, HISTORY), latest)
            first = latest + 1
            out.print(f"resumed from step {latest} (committed steps {mgr.steps()}, "
                      f"held-out accuracy there {mgr.metrics(latest).get('val_accuracy', float('nan')):.1%})")
        model, opt_state = state["model"], state["opt_state"]
        blocked: list[float] = []
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("loss {task.fields[loss]:.4f}  batch accuracy {task.fields[acc]:.1%}  "
                              "held-out {task.fields[val]}"), TimeElapsedColumn())
        with Progress(*columns, console=out) as progress:
            task = progress.add_task("training", total=self.steps, completed=first - 1, loss=float("nan"),
                                     acc=float("nan"), val="-")
            for step in range(first, self.steps + 1):
                idx = batch_indices(step, len(self.y_train))
                x = jax.device_put(self.x_train[idx], self.batch_sharding)
                y = jax.device_put(self.y_train[idx], self.batch_sharding)
                model, opt_state, loss, acc = self.step_fn(model, opt_state, x, y, np.int32(step))
                history["step"].append(step)
                history["loss"].append(float(loss))
                history["accuracy"].append(float(acc))
                progress.update(task, advance=1, loss=history["loss"][-1], acc=history["accuracy"][-1])
                if step % self.save_every and step != self.steps and step != kill_at:
                    continue
                val = float(self.eval_fn(model, self.x_held, self.y_held))
                history["val_step"].append(step)
                history["val_accuracy"].append(val)
                t = time.perf_counter()
                pending = mgr.save(step, {"model": model, "opt_state": opt_state},
                                   metrics={"val_accuracy": val, "loss": history["loss"][-1]})
                blocked.append(time.perf_counter() - t)
                if step == kill_at:
                    flight = "in flight" if pending is not None and not pending.done() else "already committed"
                    progress.stop()
                    out.print(f"step {step}: killing this process with SIGKILL while step {step} is being "
                              f"written ({flight})")
                    sys.stdout.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
                _write_history(os.path.join(self.directory, HISTORY), history)
                progress.update(task, val=f"{val:.1%}")
                progress.console.print(f"step {step:>5}: loss {history['loss'][-1]:.4f}, held-out accuracy "
                                       f"{val:.1%}, saving step_{step} (the loop blocked {blocked[-1] * 1e3:.1f} ms)")
        mgr.wait()
        final = float(self.eval_fn(model, self.x_held, self.y_held))
        svg = os.path.join(self.directory, CURVE)
        with open(svg, "w", encoding="utf-8") as f:
            f.write(curve_svg(history))
        mgr.close()
        out.print(f"\n[bold]held-out accuracy[/bold] {final:.1%} after {self.steps} steps; committed steps "
                  f"{mgr.steps()} (the newest 3 and the best, step {mgr.best_step()}, by held-out accuracy)")
        if blocked:
            out.print(f"saves started: {len(blocked)}, the loop blocked {1e3 * float(np.median(blocked)):.1f} ms per "
                      f"save (median) while they were written in the background")
        out.print(f"wrote {svg}\ndone in {time.perf_counter() - start:.1f} s")
        return 0


def _write_history(path: str, history: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(history, f)
    os.replace(tmp, path)


def _read_history(path: str, last: int) -> dict[str, Any]:
    """The history up to step ``last`` (a run killed after its last committed step logged
    more), or an empty one if the file is missing."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except FileNotFoundError:
        saved = {}
    out: dict[str, Any] = {}
    for steps, values in (("step", ("loss", "accuracy")), ("val_step", ("val_accuracy",))):
        keep = [i for i, s in enumerate(saved.get(steps, [])) if s <= last]
        out[steps] = [saved[steps][i] for i in keep]
        for name in values:
            out[name] = [saved[name][i] for i in keep]
    return out


def curve_svg(history: dict[str, Any], width: int = 720, height: int = 360) -> str:
    """An SVG drawing of a training run: the training loss per step (left axis, with a
    moving average over 20 steps) and the held-out accuracy at each checkpoint (right axis,
    0-100%).

    Args:
      history: ``{'step': [...], 'loss': [...], 'accuracy': [...], 'val_step': [...],
        'val_accuracy': [...]}`` (lists of numbers; ``accuracy`` is the batch accuracy).
      width, height: the picture's size in pixels.

    Returns:
      The SVG document as text (each curve a ``<polyline>`` with a ``data-series`` attribute).

    >>> svg = curve_svg({'step': [1, 2], 'loss': [2.3, 1.9], 'accuracy': [0.1, 0.3],
    ...                  'val_step': [2], 'val_accuracy': [0.4]})
    >>> svg.startswith('<svg') and svg.count('<polyline') == 3
    True
    """
    left, right, top, bottom = 56, 64, 34, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    steps = list(history["step"]) or [0]
    last = max(max(steps), 1)
    losses = [v for v in history["loss"] if math.isfinite(v)]
    top_loss = max(losses) * 1.05 if losses else 1.0

    def sx(step: float) -> float:
        return float(left + plot_w * step / last)

    def sy_loss(v: float) -> float:
        return top + plot_h * (1 - v / top_loss)

    def sy_acc(v: float) -> float:
        return top + plot_h * (1 - v)

    def line(series: str, xs: Sequence[float], ys: Sequence[float], color: str, w: float, opacity: float = 1) -> str:
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
        return (f'<polyline data-series="{series}" points="{pts}" fill="none" stroke="{color}" '
                f'stroke-width="{w}" stroke-opacity="{opacity}"/>')

    loss = list(history["loss"])
    smooth = [float(np.mean(loss[max(0, i - 19):i + 1])) for i in range(len(loss))]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="13" font-weight="bold">spruce demo train: training loss and '
        f'held-out accuracy</text>',
    ]
    for i in range(6):  # grid lines and both axes' labels
        frac = i / 5
        y = top + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#1f77b4">{top_loss * frac:.2f}</text>')
        parts.append(f'<text x="{left + plot_w + 6}" y="{y + 4:.1f}" fill="#d62728">{frac:.0%}</text>')
    for i in range(6):
        s = round(last * i / 5)
        parts.append(f'<text x="{sx(s):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{s}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">step</text>')
    xs = [sx(s) for s in history["step"]]
    parts.append(line("loss", xs, [sy_loss(v) for v in loss], "#1f77b4", 1, 0.3))
    parts.append(line("loss-average", xs, [sy_loss(v) for v in smooth], "#1f77b4", 2))
    parts.append(line("held-out-accuracy", [sx(s) for s in history["val_step"]],
                      [sy_acc(v) for v in history["val_accuracy"]], "#d62728", 2))
    for s, v in zip(history["val_step"], history["val_accuracy"]):
        parts.append(f'<circle cx="{sx(s):.1f}" cy="{sy_acc(v):.1f}" r="3" fill="#d62728"><title>step {s}: '
                     f'{v:.1%}</title></circle>')
    parts.append(f'<text x="{left + 8}" y="{top + 14}" fill="#1f77b4">training loss (left; bold: mean of 20 steps)</text>')
    parts.append(f'<text x="{left + 8}" y="{top + 28}" fill="#d62728">held-out accuracy at each checkpoint (right)</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)
