"""spruce.io.CheckpointManager: steps, retention, metrics, restore, the commit protocol, bad
input, failures that touch nothing committed, and (slow) real processes killed mid-save or
saving while another restores."""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import numpy as np
import pytest

import spruce.io as sio
import spruce.tree as st
from spruce.io import CheckpointManager, _api, _manager

HERE = os.path.dirname(os.path.abspath(__file__))


def _tree(step: int) -> dict[str, Any]:
    return {"w": np.full((4, 3), step, np.float32), "opt": (np.arange(3) * step, {"lr": 0.5}), "step": step}


def _same(a: Any, b: Any) -> None:
    """Equal structure and bit-for-bit equal leaves of the same types."""
    assert st.structure(a) == st.structure(b)
    for x, y in zip(st.leaves(a), st.leaves(b)):
        assert type(x) is type(y), (type(x), type(y))
        if hasattr(x, "dtype"):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
        else:
            assert x == y


class _Gate:
    """Replaces ``_api.write_file``: waits until opened (a save held in flight)."""

    def __init__(self) -> None:
        self.real = _api.write_file
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, p: str, job: Any, *rest: Any) -> None:
        self.started.set()
        assert self.gate.wait(30)
        self.real(p, job, *rest)


def test_save_steps_restore_and_files(tmp_path: Any) -> None:
    d = str(tmp_path / "run")
    with CheckpointManager(d) as mgr:
        assert os.path.isdir(d) and mgr.steps() == [] and mgr.latest_step() is None
        pending = mgr.save(1, _tree(1))
        assert isinstance(pending, sio.PendingSave)
        mgr.save(5, _tree(5), metrics={"loss": 0.25})
        mgr.wait()
        assert mgr.steps() == [1, 5] and mgr.latest_step() == 5
        _same(mgr.restore(), _tree(5))
        _same(mgr.restore(1), _tree(1))
        assert mgr.metrics(5) == {"loss": 0.25} and mgr.metrics(1) == {}
    assert sorted(os.listdir(d)) == ["step_1", "step_1.commit", "step_5", "step_5.commit"]
    assert os.listdir(os.path.join(d, "step_5")) == ["checkpoint.safetensors"]
    _same(sio.load(os.path.join(d, "step_5", "checkpoint.safetensors")), _tree(5))
    # a blocking manager returns None once the step is committed
    with CheckpointManager(d, blocking=True) as mgr:
        assert mgr.save(6, _tree(6)) is None and mgr.steps() == [1, 5, 6]


def test_restore_with_like_strict_and_dtype(tmp_path: Any) -> None:
    import jax.numpy as jnp

    with CheckpointManager(str(tmp_path)) as mgr:
        mgr.save(3, {"w": np.arange(4, dtype=np.float32), "extra": np.ones(2)})
        like = {"w": jnp.zeros(4, jnp.bfloat16)}
        res = mgr.restore(like=like, strict=False, dtype="like")
        assert isinstance(res, sio.LoadResult) and res.unexpected == ["extra"]
        assert res.tree["w"].dtype == jnp.bfloat16 and isinstance(res.tree["w"], type(like["w"]))
        with pytest.raises(sio.MismatchError):
            mgr.restore(3, like=like)


def test_retention_keeps_the_newest_and_the_best(tmp_path: Any) -> None:
    d = str(tmp_path)
    losses = {1: 0.9, 2: 0.1, 3: 0.5, 4: 0.1, 5: 0.7, 6: 0.8, 7: 0.6}
    with CheckpointManager(d, keep_last=2, keep_best=2, metric="loss") as mgr:
        for s, loss in losses.items():
            mgr.save(s, {"s": np.int32(s)}, metrics={"loss": loss})
        mgr.wait()
        # newest: 6, 7; best: 4 and 2 (a tie at 0.1: the newer first), then 3
        assert mgr.steps() == [2, 4, 6, 7] and mgr.best_step() == 4
    assert sorted(os.listdir(d)) == sorted(f"step_{s}{m}" for s in (2, 4, 6, 7) for m in ("", ".commit"))
    with CheckpointManager(str(tmp_path / "max"), keep_last=1, keep_best=1, metric="acc", mode="max") as mgr:
        mgr.save(1, {}, metrics={"acc": 0.5})
        mgr.save(2, {}, metrics={"acc": 0.9})
        mgr.save(3, {}, metrics={"acc": 0.7})
        mgr.save(4, {})  # without the metric: never the best
        mgr.save(5, {}, metrics={"acc": float("nan")})  # neither is a NaN
        mgr.save(6, {}, metrics={"acc": "high"})  # nor a str
        mgr.wait()
        assert mgr.steps() == [2, 6] and mgr.best_step() == 2
    with CheckpointManager(str(tmp_path / "all"), keep_last=None) as mgr:
        for s in range(5):
            mgr.save(s, {})
        mgr.wait()
        assert mgr.steps() == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError, match="has no metric"):
            mgr.best_step()


def test_best_step_none_without_any_metric_value(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path), metric="loss", blocking=True) as mgr:
        assert mgr.best_step() is None
        mgr.save(1, {}, metrics={"acc": 1.0})
        assert mgr.best_step() is None


def test_metrics_round_trip_as_saved(tmp_path: Any) -> None:
    import jax.numpy as jnp

    given = {"loss": 0.125, "n": 10**20, "ok": True, "name": "run-α", "nan": float("nan"), "inf": -math.inf}
    with CheckpointManager(str(tmp_path), blocking=True) as mgr:
        mgr.save(0, {}, metrics=given)
        got = mgr.metrics(0)
        assert list(got) == list(given) and all(type(got[k]) is type(given[k]) for k in given)
        assert got["loss"] == 0.125 and got["n"] == 10**20 and got["ok"] is True and got["name"] == "run-α"
        assert math.isnan(got["nan"]) and got["inf"] == -math.inf
        mgr.save(1, {}, metrics={"a": np.float32(0.5), "b": jnp.int32(3), "c": np.bool_(False)})
        assert mgr.metrics(1) == {"a": 0.5, "b": 3, "c": False}
        assert type(mgr.metrics(1)["b"]) is int and type(mgr.metrics(1)["c"]) is bool


@pytest.mark.parametrize(
    ("metrics", "error", "match"),
    [
        ([("a", 1)], TypeError, "metrics must be a dict, got list"),
        ({1: 0.5}, TypeError, "metrics keys must be str, got 1"),
        ({"a": [1]}, TypeError, "the metric 'a' is a list; metrics are bool, int, float or str"),
        ({"a": np.ones(2)}, TypeError, "the metric 'a' is a ndarray"),
        ({"a": None}, TypeError, "the metric 'a' is a NoneType"),
    ],
)
def test_bad_metrics(tmp_path: Any, metrics: Any, error: type, match: str) -> None:
    with CheckpointManager(str(tmp_path)) as mgr:
        with pytest.raises(error, match=match):
            mgr.save(1, {}, metrics=metrics)
        assert mgr.steps() == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keep_best": 1}, "keep_best=1 ranks steps by a metric: pass metric="),
        ({"keep_last": 0}, "keep_last must be an int >= 1 or None"),
        ({"keep_last": True}, "keep_last must be an int >= 1 or None"),
        ({"keep_best": -1, "metric": "x"}, "keep_best must be an int >= 0"),
        ({"mode": "best"}, "mode must be 'min' or 'max', got 'best'"),
        ({}, None),
    ],
)
def test_bad_arguments(tmp_path: Any, kwargs: dict[str, Any], match: str | None) -> None:
    if match is None:
        with pytest.raises(ValueError, match="URL scheme 'nosuchscheme'"):
            CheckpointManager("nosuchscheme://bucket/run")
        with pytest.raises(TypeError, match="metric must be a str or None, got int"):
            CheckpointManager(str(tmp_path), metric=1)  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match=match):
        CheckpointManager(str(tmp_path / "d"), **kwargs)
    assert os.listdir(tmp_path) == []


def test_directory_that_is_a_file_or_has_no_parent(tmp_path: Any) -> None:
    f = tmp_path / "file"
    f.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="a regular file, not a directory for checkpoints") as e:
        CheckpointManager(str(f))
    assert e.value.filename == str(f) and f.read_text() == "not a folder"
    mgr = CheckpointManager(str(tmp_path / "made" / "deep"), storage_options={"anon": True})
    assert os.path.isdir(tmp_path / "made" / "deep") and mgr.storage_options == {"anon": True}
    with pytest.raises(NotADirectoryError):
        CheckpointManager(str(f / "below"))  # (a file on the way)
    mgr.close()
    mgr.close()  # again: nothing
    with pytest.raises(ValueError, match="the manager is closed"):
        mgr.save(1, {})


def test_step_order_and_step_in_flight(tmp_path: Any, monkeypatch: Any) -> None:
    with CheckpointManager(str(tmp_path)) as mgr:
        mgr.save(10, {})
        mgr.wait()
        for bad, match in [(10, "step 10 exists already"), (9, "step 9 is not greater than the latest step 10")]:
            with pytest.raises(ValueError, match=match):
                mgr.save(bad, {})
        with pytest.raises(ValueError, match="step must be >= 0, got -1"):
            mgr.save(-1, {})
        with pytest.raises(TypeError, match="step must be an int, got bool"):
            mgr.save(True, {})
        with pytest.raises(TypeError, match="step must be an int, got float"):
            mgr.save(11.0, {})  # type: ignore[arg-type]
        gate = _Gate()
        monkeypatch.setattr(_api, "write_file", gate)
        pending = mgr.save(np.int64(12), {"a": np.ones(2)})
        assert pending is not None and gate.started.wait(30)
        with pytest.raises(ValueError, match=r"step 12 is being saved already \(in flight\)"):
            mgr.save(12, {})
        with pytest.raises(ValueError, match="step 11 is not greater than the latest step 12"):
            mgr.save(11, {})
        assert mgr.steps() == [10] and not pending.done()
        gate.gate.set()
        mgr.save(13, {})  # waits for 12 first
        assert pending.done()
        mgr.wait()
        assert mgr.steps() == [10, 12, 13]


def test_a_leaf_that_cannot_be_saved_is_refused_by_the_call(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path)) as mgr:
        with pytest.raises(ValueError, match=r"key path \['act'\] cannot be saved: the function"):
            mgr.save(1, {"w": np.ones(2), "act": lambda x: x})
        assert os.listdir(tmp_path) == []
        mgr.save(1, {"w": np.ones(2)})  # step 1 was not taken


def test_missing_step_names_the_step_and_the_steps_there_are(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path), keep_last=None, blocking=True) as mgr:
        with pytest.raises(FileNotFoundError, match="no committed step to restore"):
            mgr.restore()
        for s in (2, 4):
            mgr.save(s, {})
        with pytest.raises(FileNotFoundError, match=r"restore: no committed step 3; committed steps: \[2, 4\]") as e:
            mgr.restore(3)
        assert e.value.filename == str(tmp_path)
        with pytest.raises(FileNotFoundError, match=r"metrics: no committed step 5; committed steps: \[2, 4\]"):
            mgr.metrics(5)


def test_truncated_piece_of_a_committed_step(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path), blocking=True) as mgr:
        mgr.save(1, _tree(1))
        mgr.save(2, _tree(2))
        path = os.path.join(str(tmp_path), "step_2", "checkpoint.safetensors")
        os.truncate(path, os.path.getsize(path) - 8)
        with pytest.raises(sio.CheckpointError, match="truncated") as e:
            mgr.restore()
        assert path in str(e.value)
        assert mgr.steps() == [1, 2]
        _same(mgr.restore(1), _tree(1))  # nothing else was touched


def test_corrupted_marker(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path), blocking=True) as mgr:
        mgr.save(1, {})
        (tmp_path / "step_1.commit").write_text("{not json")
        with pytest.raises(sio.CheckpointError, match="corrupted commit marker"):
            mgr.restore(1)
        (tmp_path / "step_1.commit").write_text('{"format": "spruce.checkpoint", "step": 2}')
        with pytest.raises(sio.CheckpointError, match=r"not a spruce\.checkpoint marker of step 1"):
            mgr.metrics(1)


def test_a_failed_save_touches_nothing_committed(tmp_path: Any, monkeypatch: Any) -> None:
    d = str(tmp_path)
    mgr = CheckpointManager(d)
    mgr.save(1, _tree(1), metrics={"loss": 1.0})
    mgr.wait()
    before = {name: os.stat(os.path.join(d, name)).st_mtime_ns for name in os.listdir(d)}

    def write_file(p: str, job: Any, *rest: Any) -> None:
        with open(p, "wb") as f:
            f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), p)

    monkeypatch.setattr(_api, "write_file", write_file)
    pending = mgr.save(2, _tree(2))
    assert pending is not None
    with pytest.raises(OSError, match="No space left on device"):
        pending.wait()
    with pytest.raises(OSError, match="No space left on device"):
        mgr.save(3, _tree(3))  # the next save raises the failure first (once)
    assert {name: os.stat(os.path.join(d, name)).st_mtime_ns for name in os.listdir(d)} == before
    monkeypatch.undo()
    mgr.save(2, _tree(2))  # the failed step can be saved again
    mgr.close()
    assert CheckpointManager(d).steps() == [1, 2]


def test_a_failed_blocking_save_leaves_no_temporary_folder(tmp_path: Any, monkeypatch: Any) -> None:
    with CheckpointManager(str(tmp_path), blocking=True) as mgr:
        mgr.save(1, {})

        def write_small(path: str, data: bytes) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)

        monkeypatch.setattr(mgr._storage, "write_small", write_small)  # the marker cannot be written
        with pytest.raises(OSError, match="Input/output error"):
            mgr.save(2, {"a": np.ones(3)})
        assert sorted(os.listdir(tmp_path)) == ["step_1", "step_1.commit"] and mgr.steps() == [1]


def test_leftovers_are_removed_only_by_the_only_user(tmp_path: Any) -> None:
    d = str(tmp_path)
    with CheckpointManager(d, blocking=True) as mgr:
        mgr.save(1, {"a": np.ones(2)})
    mine = [".step_2.0123456789abcdef.tmp", "step_3"]  # an interrupted save: temporary, no marker
    others = ["notes", ".step_2.tmp", "step_03", "step_4.commit"]
    for name in mine + others[:3]:
        os.mkdir(os.path.join(d, name))
        (tmp_path / name / "x").write_text("x")
    (tmp_path / "step_4.commit").write_text("a marker without its folder")
    (tmp_path / "step_5").write_text("a file, not a step folder")
    holder = CheckpointManager(d)  # the directory's only user: removes the leftovers
    assert sorted(os.listdir(d)) == sorted(["step_1", "step_1.commit", "step_5", *others])
    for name in mine:
        os.mkdir(os.path.join(d, name))
    second = CheckpointManager(d)  # another manager is alive (a writer, perhaps): nothing removed
    assert all(os.path.exists(os.path.join(d, n)) for n in mine)
    assert second.steps() == [1] and holder.steps() == [1]
    holder.close()
    second.close()
    CheckpointManager(d).close()
    assert not any(os.path.exists(os.path.join(d, n)) for n in mine)


def test_steps_reads_the_storage_on_every_call(tmp_path: Any) -> None:
    reader = CheckpointManager(str(tmp_path))
    with CheckpointManager(str(tmp_path), blocking=True) as writer:
        writer.save(1, {})
        assert reader.steps() == [1]
        writer.save(2, {"x": np.int8(2)})
        assert reader.latest_step() == 2 and reader.restore() == {"x": np.int8(2)}
    reader.close()


def test_restore_of_the_latest_step_deleted_meanwhile_takes_the_new_latest(tmp_path: Any, monkeypatch: Any) -> None:
    d = str(tmp_path)
    writer = CheckpointManager(d, keep_last=1, blocking=True)
    writer.save(1, {"s": np.int8(1)})
    reader = CheckpointManager(d)
    real = reader._load

    def racing(step: int, *args: Any) -> Any:
        if step == 1:  # another process commits step 2, and its retention deletes step 1
            writer.save(2, {"s": np.int8(2)})
        return real(step, *args)

    monkeypatch.setattr(reader, "_load", racing)
    assert reader.restore() == {"s": np.int8(2)}
    with pytest.raises(FileNotFoundError, match=r"no committed step 1; committed steps: \[2\]"):
        reader.restore(1)
    writer.close()
    reader.close()


def test_leaving_the_context_waits_and_restore_waits_for_its_own_save(tmp_path: Any, monkeypatch: Any) -> None:
    gate = _Gate()
    monkeypatch.setattr(_api, "write_file", gate)
    mgr = CheckpointManager(str(tmp_path))
    pending = mgr.save(1, {"a": np.arange(3)})
    assert pending is not None and gate.started.wait(30)
    threading.Timer(0.2, gate.gate.set).start()
    np.testing.assert_array_equal(mgr.restore()["a"], np.arange(3))  # waited for step 1
    gate.gate.clear()
    with mgr:
        pending = mgr.save(2, {"a": np.arange(4)})
        threading.Timer(0.2, gate.gate.set).start()
    assert pending is not None and pending.done() and mgr.steps() == [1, 2]


def test_host_buffers_are_reused_between_steps(tmp_path: Any) -> None:
    with CheckpointManager(str(tmp_path)) as mgr:
        a = np.zeros(1000, np.float32)
        mgr.save(1, {"a": a})
        mgr.wait()
        free = mgr._buffers._free[4000][0]
        mgr.save(2, {"a": a + 1})
        assert mgr._buffers._free.get(4000, []) == []  # taken by step 2
        mgr.wait()
        assert mgr._buffers._free[4000][0] is free
        np.testing.assert_array_equal(mgr.restore()["a"], a + 1)


def test_prng_keys_and_optax_states_round_trip_exactly(tmp_path: Any) -> None:
    import jax
    import jax.numpy as jnp
    import optax

    params = {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 7, "b": jnp.ones(3, jnp.bfloat16)}
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    # a state with values of its own in every leaf (what some updates give), without compiling them
    state = jax.tree.map(lambda x: x + 3 if x.dtype == jnp.int32 else x + x.size / 7, opt.init(params))
    tree = {"params": params, "opt": state, "key": jax.random.key(42), "keys": jax.random.split(jax.random.key(1), 3)}
    with CheckpointManager(str(tmp_path)) as mgr:
        mgr.save(100, tree)
        got = mgr.restore()
        assert jax.tree.structure(got) == jax.tree.structure(tree)
        for k in ("key", "keys"):
            assert got[k].dtype == tree[k].dtype and got[k].shape == tree[k].shape
            np.testing.assert_array_equal(jax.random.key_data(got[k]), jax.random.key_data(tree[k]))
        for x, y in zip(jax.tree.leaves(got["opt"]), jax.tree.leaves(tree["opt"])):
            assert np.asarray(x).dtype == y.dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        # with like: jax.Arrays back, bit for bit
        back = mgr.restore(like=tree)
        assert jax.tree.structure(back) == jax.tree.structure(tree)
        assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(back))
        for x, y in zip(jax.tree.leaves(back["opt"]), jax.tree.leaves(state)):
            assert x.dtype == y.dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        assert jax.random.key_data(back["keys"]).tolist() == jax.random.key_data(tree["keys"]).tolist()


def test_single_device_jax_arrays_are_one_file(tmp_path: Any) -> None:
    import jax.numpy as jnp

    assert not _manager._sharded_layout({"a": jnp.ones(2), "b": np.ones(2)})
    with CheckpointManager(str(tmp_path), blocking=True) as mgr:
        mgr.save(1, {"a": jnp.ones(2)})
        assert os.listdir(tmp_path / "step_1") == ["checkpoint.safetensors"]


# -- real processes -------------------------------------------------------------------------------


def _env(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    src = os.path.join(os.path.dirname(HERE), "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# The child saves steps 1 and 2, then step 3 with a writer that stops at a known point (in
# the middle of writing the file into the temporary folder, or after the rename and before
# the marker), says so on stdout and waits to be killed.
_KILLED = textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    from spruce.io import CheckpointManager, _api
    folder, where = sys.argv[1], sys.argv[2]

    def tree(step):
        rng = np.random.default_rng(step)
        return {"w": rng.standard_normal((64, 64)).astype(np.float32), "n": np.arange(5) * step, "step": step}

    mgr = CheckpointManager(folder, keep_last=5)
    mgr.save(1, tree(1)); mgr.save(2, tree(2)); mgr.wait()
    real_write, real_small = _api.write_file, mgr._storage.write_small

    def stop():
        print("stopped", flush=True)
        threading.Event().wait()

    def write_file(p, job, *rest):
        if where == "file":
            with open(p + ".part", "wb") as f:
                f.write(b"half of a file")
            stop()
        real_write(p, job, *rest)

    def write_small(path, data):
        if where == "marker":
            stop()
        real_small(path, data)

    _api.write_file = write_file
    mgr._storage.write_small = write_small
    mgr.save(3, tree(3))
    mgr.wait()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["file", "marker"])
def test_sigkill_in_the_middle_of_a_step(tmp_path: Any, where: str) -> None:
    d = str(tmp_path / "run")
    with subprocess.Popen([sys.executable, "-c", _KILLED, d, where], env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "stopped\n", proc.stderr.read() if proc.stderr else ""
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    names = sorted(os.listdir(d))
    leftover = [n for n in names if n.startswith(".step_3.")] if where == "file" else ["step_3"]
    assert leftover and all(n in names for n in leftover) and "step_3.commit" not in names
    reader = CheckpointManager(d)  # the only user: removes the leftover
    assert reader.steps() == [1, 2] and reader.latest_step() == 2
    assert sorted(os.listdir(d)) == ["step_1", "step_1.commit", "step_2", "step_2.commit"]
    for s in (1, 2):
        rng = np.random.default_rng(s)
        expected = {"w": rng.standard_normal((64, 64)).astype(np.float32), "n": np.arange(5) * s, "step": s}
        _same(reader.restore(s), expected)
    _same(reader.restore(), reader.restore(2))
    with pytest.raises(FileNotFoundError, match=r"no committed step 3; committed steps: \[1, 2\]"):
        reader.restore(3)
    reader.save(3, {"again": np.ones(1)})  # the step can be saved now
    reader.close()


_SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from spruce.io import CheckpointManager
    folder, count = sys.argv[1], int(sys.argv[2])
    with CheckpointManager(folder, keep_last=2) as mgr:
        print("ready", flush=True)
        for step in range(1, count + 1):
            mgr.save(step, {"w": [np.full((128, 128), step, np.float32) for _ in range(4)], "step": step})
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_restore_while_another_process_saves(tmp_path: Any) -> None:
    d = str(tmp_path / "run")
    with CheckpointManager(d, blocking=True) as first:
        first.save(0, {"w": [np.zeros((128, 128), np.float32) for _ in range(4)], "step": 0})
    seen = set()
    with subprocess.Popen([sys.executable, "-c", _SAVER, d, "60"], env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            reader = CheckpointManager(d)  # while the writer lives: removes nothing of its
            while proc.poll() is None:
                tree = reader.restore()
                step = tree["step"]
                assert all(np.all(w == step) for w in tree["w"]), f"step {step} is not one complete save"
                seen.add(step)
            out, err = proc.communicate(60)
            assert proc.returncode == 0 and out.endswith("done\n"), err[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert reader.steps() == [59, 60] and reader.restore()["step"] == 60
    assert len(seen) >= 2  # the reader saw the steps change while the writer saved
    reader.close()


_SHARDED = textwrap.dedent(
    """
    import sys
    import jax, numpy as np
    from jax.sharding import PartitionSpec as P
    import spruce.io, spruce.sharding as sh
    folder = sys.argv[1]
    mesh = sh.mesh({"data": 2, "model": 4})
    tree = {"w": np.arange(64, dtype=np.float32).reshape(8, 8), "b": np.ones(8, np.float32), "key": jax.random.key(5)}
    placed = sh.shard(tree, mesh, sh.Rules([("w", P("data", "model")), ("**", None)]))
    with spruce.io.CheckpointManager(folder) as mgr:
        pending = mgr.save(7, placed, metrics={"loss": 0.5})
        placed["w"].delete()
        pending.wait()
        assert sorted(f for f in __import__("os").listdir(folder + "/step_7") if f == "index.json") == ["index.json"]
        back = mgr.restore(like={"w": jax.numpy.zeros((8, 8)), "b": np.zeros(8, np.float32), "key": jax.random.key(0)},
                           shardings={"w": jax.sharding.NamedSharding(mesh, P("model", None)), "b": None, "key": None})
        assert back["w"].sharding.spec == P("model", None)
        np.testing.assert_array_equal(np.asarray(back["w"]), tree["w"])
        np.testing.assert_array_equal(jax.random.key_data(mgr.restore()["key"]), jax.random.key_data(tree["key"]))
    print("ok", flush=True)
    """
)


@pytest.mark.slow
def test_a_sharded_tree_is_a_sharded_step(tmp_path: Any) -> None:
    d = str(tmp_path / "run")
    proc = subprocess.run([sys.executable, "-c", _SHARDED, d], env=_env(8), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr[-3000:]
    assert sorted(os.listdir(d)) == ["step_7", "step_7.commit"]
    assert sio.load(os.path.join(d, "step_7"))["b"].tolist() == [1.0] * 8


_TWO = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    import numpy as np
    from jax.sharding import PartitionSpec as P
    import spruce.io, spruce.sharding as sh
    mesh = sh.mesh({"data": 2, "model": 4})
    rules = sh.Rules([("w", P("data", "model")), ("**", None)])
    def tree(step):
        return {"w": np.arange(64, dtype=np.float32).reshape(8, 8) * step, "b": np.full(8, step, np.float32), "step": step}
    with spruce.io.CheckpointManager(folder, keep_last=1) as mgr:
        for step in (1, 2):
            placed = sh.shard(tree(step), mesh, rules)
            pending = mgr.save(step, placed, metrics={"loss": 1.0 / step})
            placed["w"].delete()
        mgr.wait()
        assert mgr.steps() == [2], mgr.steps()
        like = sh.shard(tree(0), mesh, rules)
        back = mgr.restore(like=like)
        assert back["step"] == 2 and back["w"].sharding == like["w"].sharding
        for shard in back["w"].addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), tree(2)["w"][shard.index])
    print("ok", pid, flush=True)
    """
)


@pytest.mark.slow  # two processes with JAX: 10-40 s on the shared machine
def test_two_processes_save_one_step_asynchronously(tmp_path: Any) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    d = str(tmp_path / "run")
    procs = [
        subprocess.Popen([sys.executable, "-c", _TWO, str(port), str(i), d], env=_env(4),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (code, out, err) in enumerate(outputs):
        assert code == 0 and out.endswith(f"ok {i}\n"), f"process {i}:\n{out}\n{err[-3000:]}"
    assert sorted(os.listdir(d)) == ["step_2", "step_2.commit"]
    files = sorted(os.listdir(os.path.join(d, "step_2")))
    assert files[-1] == "index.json" and [f.split("-", 1)[1] for f in files[:-1]] == [
        "00000-of-00002.safetensors", "00001-of-00002.safetensors"
    ]
    with CheckpointManager(d) as mgr:
        tree = mgr.restore()
        np.testing.assert_array_equal(tree["w"], np.arange(64, dtype=np.float32).reshape(8, 8) * 2)
        assert mgr.metrics(2) == {"loss": 0.5}
