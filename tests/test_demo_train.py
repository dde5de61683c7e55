"""``spruce demo train``: real runs in subprocesses (checkpoints, retention, metrics, history,
curve), a run killed mid-save and resumed that ends bit for bit where an uninterrupted one
does, and one-line errors for bad arguments."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any, Callable

import numpy as np
import pytest

import spruce
import spruce.tree as st
from helpers import SRC_DIR
from spruce.cli import main
from spruce.io import CheckpointManager

pytest.importorskip("sklearn", reason="the digits of `spruce demo train` come with scikit-learn")
pytest.importorskip("optax", reason="`spruce demo train` trains with optax")

STEPS, SAVE_EVERY, KILL_AT = 24, 4, 14
SAVED = list(range(SAVE_EVERY, STEPS + 1, SAVE_EVERY))  # the steps a full run saves
# Measured held-out accuracy of this run: 17.2% after 4 steps, 14.2% after 8, 22.8% after 12,
# 46.9% after 16, 62.5% after 20, 77.5% after 24 (chance: 10%).  The bound leaves room for other
# processors' float rounding but fails a model that does not learn.
MIN_ACCURACY = 0.6


def env(cache: pathlib.Path | None = None) -> dict[str, str]:
    """The environment of a ``python -m spruce`` child: the same spruce build as this process,
    plain output, no XLA flags of ours (the demo sets its own); with ``cache``, JAX's
    persistent compilation cache in that folder (a run then loads the programs an earlier
    run compiled: the same executables, a few seconds less each)."""
    e = dict(os.environ, COLUMNS="120", NO_COLOR="1")
    if cache is not None:
        e.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    if os.path.dirname(os.path.dirname(os.path.abspath(spruce.__file__))) == SRC_DIR:
        e["PYTHONPATH"] = SRC_DIR + os.pathsep + e.get("PYTHONPATH", "")
    for name in ("XLA_FLAGS", "FORCE_COLOR", "PYTHONFAULTHANDLER"):
        e.pop(name, None)
    return e


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "spruce", "demo", "train", *args]


def train(*args: str, cache: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), capture_output=True, text=True, env=env(cache), timeout=600)


def run_args(directory: pathlib.Path, *more: str) -> list[str]:
    return ["--dir", str(directory), "--steps", str(STEPS), "--save-every", str(SAVE_EVERY), *more]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any) -> dict[str, Any]:
    """Three runs of the demo: ``full`` (24 steps, uninterrupted), ``killed`` (the same, killed
    while saving step 14) and ``resumed`` (``--resume`` in the killed run's folder).  The full
    and the killed run go side by side."""
    root = tmp_path_factory.mktemp("demo-train")
    full_dir, kill_dir, cache = root / "full", root / "killed", root / "jax-cache"
    full = subprocess.Popen(command(*run_args(full_dir)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(cache))
    try:
        killed = train(*run_args(kill_dir, "--kill-at", str(KILL_AT)), cache=cache)
        after_kill = sorted(os.listdir(kill_dir))  # before a manager opens it (that cleans up)
        resumed = train(*run_args(kill_dir, "--resume"), cache=cache)
        out, err = full.communicate(timeout=600)
    finally:
        if full.poll() is None:
            full.kill()
            full.wait()
    return {"full_dir": full_dir, "kill_dir": kill_dir, "full": (full.returncode, out, err),
            "killed": killed, "after_kill": after_kill, "resumed": resumed}


def history(directory: pathlib.Path) -> dict[str, Any]:
    with open(directory / "history.json", encoding="utf-8") as f:
        h: dict[str, Any] = json.load(f)
    return h


@pytest.mark.slow
def test_full_run_checkpoints_retention_metrics_history_curve(runs: dict[str, Any]) -> None:
    code, out, err = runs["full"]
    assert code == 0, err
    assert "Traceback" not in err
    h = history(runs["full_dir"])
    assert h["step"] == list(range(1, STEPS + 1)) and h["val_step"] == SAVED
    assert len(h["loss"]) == len(h["accuracy"]) == STEPS and len(h["val_accuracy"]) == len(SAVED)
    assert all(np.isfinite(h["loss"]))
    assert np.mean(h["loss"][-4:]) < 0.5 * np.mean(h["loss"][:4])  # it learns
    assert h["val_accuracy"][-1] > MIN_ACCURACY

    with CheckpointManager(runs["full_dir"], keep_last=3, keep_best=1, metric="val_accuracy", mode="max") as mgr:
        # retention: the newest 3 saved steps and the best by held-out accuracy (ties: the newer)
        best = max(zip(h["val_accuracy"], h["val_step"]))[1]
        assert mgr.steps() == sorted(set(SAVED[-3:]) | {best})
        assert mgr.best_step() == best
        for step in mgr.steps():
            i, j = h["val_step"].index(step), h["step"].index(step)
            assert mgr.metrics(step) == {"val_accuracy": h["val_accuracy"][i], "loss": h["loss"][j]}
        saved = mgr.restore(STEPS)
    assert sorted(saved) == ["model", "opt_state"]
    model = saved["model"]
    assert type(model).__name__ == "DigitsCNN"  # rebuilt without like=: a module-level class
    assert model.conv1.weight.shape == (16, 1, 3, 3) and model.head.weight.shape == (10, 128)
    for path, leaf in st.leaves_with_path(model):
        if st.keystr(path).endswith("num_batches_tracked"):  # one BatchNorm update per step
            assert leaf.dtype == np.int32 and leaf == STEPS
        else:
            assert leaf.dtype == np.float32 and np.all(np.isfinite(leaf)), st.keystr(path)
    assert f"held-out accuracy {h['val_accuracy'][-1]:.1%} after {STEPS} steps" in out

    root = ET.parse(runs["full_dir"] / "curve.svg").getroot()
    svg = "{http://www.w3.org/2000/svg}"
    assert root.tag == svg + "svg"
    lines = {p.get("data-series"): p.get("points", "").split() for p in root.iter(svg + "polyline")}
    assert sorted(lines) == ["held-out-accuracy", "loss", "loss-average"]
    assert len(lines["loss"]) == len(lines["loss-average"]) == STEPS
    assert len(lines["held-out-accuracy"]) == len(SAVED)
    assert len(list(root.iter(svg + "circle"))) == len(SAVED)


@pytest.mark.slow
def test_killed_mid_save_then_resumed_ends_bit_for_bit_as_uninterrupted(runs: dict[str, Any]) -> None:
    killed = runs["killed"]
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert f"step {KILL_AT}: killing this process with SIGKILL while step {KILL_AT} is being written (in flight)" \
        in killed.stdout
    # the step being written is at most a half-written temporary folder (none if the kill came
    # before the writer thread made it); every step folder there has its commit marker.  The
    # kill usually lands while step KILL_AT is written (then 4, 8, 12 remain); on a fast machine
    # the writer thread can commit it first (then it is there too, and retention may have
    # removed the oldest step): both are committed states, and the run resumes from the latest
    after_kill = runs["after_kill"]
    left = [n for n in after_kill if not (n.startswith(f".step_{KILL_AT}.") and n.endswith(".tmp"))]
    assert len(after_kill) - len(left) <= 1
    steps_left = sorted(int(n[len("step_"):]) for n in left if n.startswith("step_") and not n.endswith(".commit"))
    assert left == sorted(["history.json"] + [f"step_{s}" for s in steps_left] + [f"step_{s}.commit" for s in steps_left])
    last_committed = steps_left[-1]
    assert last_committed in (KILL_AT // SAVE_EVERY * SAVE_EVERY, KILL_AT)
    written = [s for s in SAVED if s < KILL_AT] + ([KILL_AT] if last_committed == KILL_AT else [])
    assert set(written[-3:]) <= set(steps_left) <= set(written)

    resumed = runs["resumed"]
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {last_committed}" in resumed.stdout
    assert not any(name.endswith(".tmp") for name in os.listdir(runs["kill_dir"]))
    with CheckpointManager(runs["full_dir"]) as a, CheckpointManager(runs["kill_dir"]) as b:
        assert KILL_AT not in b.steps() and b.steps() == a.steps()
        for step in a.steps():
            assert b.metrics(step) == a.metrics(step)
        one, other = a.restore(STEPS), b.restore(STEPS)
    # (their structures differ only in the random id each BatchNorm draws to find its State)
    one_leaves, other_leaves = st.leaves_with_path(one), st.leaves_with_path(other)
    assert [st.keystr(p) for p, _ in one_leaves] == [st.keystr(p) for p, _ in other_leaves]
    assert len(one_leaves) == 45  # the model's 16 leaves, Adam's count and 2 x 14 moments
    for (path, x), (_, y) in zip(one_leaves, other_leaves):  # bit for bit
        assert x.dtype == y.dtype and np.array_equal(x, y), st.keystr(path)
    assert history(runs["kill_dir"]) == history(runs["full_dir"])  # the same losses, step by step


def one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spruce: error: spruce demo train: "), result.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.fixture
def cli(capsys: Any, monkeypatch: Any) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``spruce demo train ARGS`` in this process (``spruce.cli.main``), for arguments refused
    before JAX starts: its exit status and output, as a CompletedProcess."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        code = main(["demo", "train", *args])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["spruce", "demo", "train", *args], code, out, err)

    return call


def test_resume_without_a_committed_step(tmp_path: pathlib.Path, cli: Any) -> None:
    folder = tmp_path / "run"
    one_error_line(cli("--dir", str(folder), "--steps", "5", "--resume"),
                   f"--resume, but {folder} holds no committed step", "run without --resume")
    assert not folder.exists()  # not created
    folder.mkdir()
    (folder / ".step_3.0123456789abcdef.tmp").mkdir()  # what a killed first save leaves
    one_error_line(cli("--dir", str(folder), "--steps", "5", "--resume"), "holds no committed step")


def test_kill_at_beyond_steps(tmp_path: pathlib.Path, cli: Any) -> None:
    folder = tmp_path / "run"
    one_error_line(cli("--dir", str(folder), "--steps", "5", "--kill-at", "6"),
                   "--kill-at must be a step from 1 to 5, got 6")
    one_error_line(cli("--dir", str(folder), "--steps", "5", "--kill-at", "0"), "got 0")
    assert not folder.exists()


def test_dir_is_a_regular_file(tmp_path: pathlib.Path) -> None:
    """(End to end, through ``python -m spruce``: the exit status and stderr of the process.)"""
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    one_error_line(train("--dir", str(file), "--steps", "5"), f"--dir {file} is a regular file")
    assert file.read_text() == "keep me"


def test_bad_step_counts(tmp_path: pathlib.Path, cli: Any) -> None:
    one_error_line(cli("--dir", str(tmp_path), "--steps", "0"), "--steps and --save-every must be >= 1")
    one_error_line(cli("--dir", str(tmp_path), "--save-every", "-1"), "got 300 and -1")


@pytest.mark.slow
def test_a_finished_run_is_neither_restarted_nor_resumed_past_its_end(runs: dict[str, Any], cli: Any) -> None:
    folder = runs["full_dir"]
    with CheckpointManager(folder) as mgr:
        steps = mgr.steps()
    one_error_line(cli("--dir", str(folder), "--steps", str(STEPS)), f"already holds committed steps {steps}",
                   "pass --resume")
    one_error_line(cli("--dir", str(folder), "--steps", "10", "--resume"),
                   f"the latest step in {folder} is {STEPS}, past --steps 10")
    one_error_line(cli("--dir", str(folder), "--steps", "30", "--resume", "--kill-at", "20"),
                   f"--kill-at 20, but the run resumes after step {STEPS}")
    with CheckpointManager(folder) as mgr:
        assert mgr.steps() == steps
