"""Asynchronous saves (``save(..., blocking=False)``, ``save_sharded(..., blocking=False)``,
``PendingSave``) and saves that fail: nothing is left at the destination."""

from __future__ import annotations

import errno
import os
import threading
from typing import Any, Callable

import numpy as np
import pytest

import spruce.io as sio
from spruce.io import _api, _async, _npz, _safetensors, _sharded


def _tree() -> dict[str, Any]:
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": [np.ones(3, np.int64), np.float32(2.5)], "step": 7}


def _equal(a: Any, b: Any) -> None:
    import spruce.tree as st

    assert st.structure(a) == st.structure(b)
    for x, y in zip(st.leaves(a), st.leaves(b)):
        assert type(x) is type(y)
        if isinstance(x, (np.ndarray, np.generic)):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


class _Gate:
    """A writer that waits until ``open()`` before calling the real one (to look at a save in
    flight), or raises ``error`` after writing some bytes."""

    def __init__(self, real: Callable[..., None], error: BaseException | None = None) -> None:
        self.real = real
        self.error = error
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, tmp: str, *args: Any) -> None:
        self.started.set()
        if self.error is not None:
            with open(tmp, "wb") as f:
                f.write(b"partial data")
            raise self.error
        assert self.gate.wait(30)
        self.real(tmp, *args)

    def open(self) -> None:
        self.gate.set()


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_save_not_blocking_round_trip_and_copy_at_call(tmp_path: Any, suffix: str) -> None:
    path = str(tmp_path / f"a{suffix}")
    tree = _tree()
    pending = sio.save(path, tree, blocking=False)
    assert isinstance(pending, sio.PendingSave) and pending.path == path
    expected = _tree()
    tree["w"][:] = -1  # the caller overwrites its arrays at once
    tree["b"][0][:] = 0
    assert pending.wait() is None
    assert pending.done() and repr(pending) == f"PendingSave({path!r}, done)"
    _equal(sio.load(path), expected)
    assert sio.save(path, expected) is None  # blocking (default) returns None


def test_save_not_blocking_jax_arrays_deleted_after_the_call(tmp_path: Any) -> None:
    import jax
    import jax.numpy as jnp

    path = str(tmp_path / "j.safetensors")
    w = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    key = jax.random.key(3)
    pending = sio.save(path, {"w": w, "key": key}, blocking=False)
    w.delete()  # (a donated buffer is deleted the same way)
    pending.wait()
    got = sio.load(path)
    np.testing.assert_array_equal(got["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert jax.dtypes.issubdtype(got["key"].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(got["key"]), jax.random.key_data(jax.random.key(3)))


def test_destination_appears_only_when_complete(tmp_path: Any, monkeypatch: Any) -> None:
    path = str(tmp_path / "late.safetensors")
    gate = _Gate(_safetensors.write)
    monkeypatch.setattr(_safetensors, "write", gate)
    pending = sio.save(path, _tree(), blocking=False)
    assert gate.started.wait(30)
    assert not os.path.exists(path) and not pending.done()
    assert repr(pending) == f"PendingSave({path!r}, writing)"
    with pytest.raises(TimeoutError, match=r"still being written after 0.05 s; it goes on"):
        pending.wait(timeout=0.05)
    gate.open()
    pending.wait(timeout=30)
    assert pending.done() and os.listdir(tmp_path) == ["late.safetensors"]
    _equal(sio.load(path), _tree())


@pytest.mark.parametrize("module", [_safetensors, _npz])
def test_failed_save_not_blocking_leaves_nothing_and_reraises_the_same_error(
    tmp_path: Any, monkeypatch: Any, module: Any
) -> None:
    suffix = ".safetensors" if module is _safetensors else ".npz"
    path = str(tmp_path / f"full{suffix}")
    monkeypatch.setattr(module, "write", _Gate(module.write, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    pending = sio.save(path, _tree(), blocking=False)
    with pytest.raises(OSError) as first:
        pending.wait()
    assert first.value.errno == errno.ENOSPC and first.value.filename == path
    with pytest.raises(OSError) as again:
        pending.wait(timeout=0)
    assert again.value is first.value
    assert pending.done() and repr(pending) == f"PendingSave({path!r}, failed)"
    assert os.listdir(tmp_path) == []


def test_failed_save_not_blocking_keeps_the_old_file(tmp_path: Any, monkeypatch: Any) -> None:
    path = str(tmp_path / "keep.safetensors")
    sio.save(path, {"v": np.zeros(2)})
    monkeypatch.setattr(_safetensors, "write", _Gate(_safetensors.write, OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError, match="No space left on device"):
        sio.save(path, _tree(), blocking=False).wait()
    assert os.listdir(tmp_path) == ["keep.safetensors"]
    np.testing.assert_array_equal(sio.load(path)["v"], np.zeros(2))


def test_errors_visible_at_call_time_are_raised_by_the_call(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match=r"^save: the leaf at key path \[.f.\] cannot be saved: the function"):
        sio.save(str(tmp_path / "a.safetensors"), {"f": lambda x: x}, blocking=False)
    with pytest.raises(ValueError, match=r"must end in \.safetensors or \.npz"):
        sio.save(str(tmp_path / "a.bin"), _tree(), blocking=False)
    with pytest.raises(IsADirectoryError):
        sio.save(str(tmp_path), _tree(), blocking=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sio.save(str(tmp_path / "no" / "a.npz"), _tree(), blocking=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        sio.save_sharded(str(tmp_path / "file"), _tree(), blocking=False)
    with pytest.raises(ValueError, match=r"key path \['f'\]"):
        sio.save_sharded(str(tmp_path / "d"), {"f": lambda x: x}, blocking=False)
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_a_deleted_jax_array_is_refused_at_call_time(tmp_path: Any) -> None:
    import jax.numpy as jnp

    w = jnp.ones(3)
    w.delete()
    with pytest.raises(ValueError, match=r"^save: the array 'w' cannot be copied to the host: .*deleted"):
        sio.save(str(tmp_path / "a.safetensors"), {"w": w}, blocking=False)
    with pytest.raises(ValueError, match=r"^save_sharded: the array 'w' cannot be copied to the host: .*deleted"):
        sio.save_sharded(str(tmp_path / "d"), {"w": w}, blocking=False)
    assert os.listdir(tmp_path) == []


def test_save_sharded_not_blocking(tmp_path: Any) -> None:
    import jax.numpy as jnp

    d = str(tmp_path / "ckpt")
    w = jnp.arange(8, dtype=jnp.float32)
    tree = {"w": w, "n": np.arange(3), "step": 4}
    pending = sio.save_sharded(d, tree, metadata={"who": "test"}, blocking=False)
    assert isinstance(pending, sio.PendingSave)
    w.delete()
    tree["n"][:] = 9
    pending.wait()
    got = sio.load(d)
    np.testing.assert_array_equal(got["w"], np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(got["n"], np.arange(3))
    assert got["step"] == 4 and sio.read_metadata(d)["who"] == "test"


def _nothing_but(folder: str, names: list[str]) -> None:
    assert sorted(os.listdir(folder)) == sorted(names)


def _fail_fsync(monkeypatch: Any) -> None:
    """Make the piece's fsync fail as a full disk does (after its data was written)."""

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_sharded.os, "fsync", fsync)


@pytest.mark.parametrize("blocking", [True, False])
def test_failed_save_sharded_leaves_no_stray_piece(tmp_path: Any, monkeypatch: Any, blocking: bool) -> None:
    new = str(tmp_path / "new")
    old = str(tmp_path / "old")
    sio.save_sharded(old, {"w": np.zeros(4)})
    before = sorted(os.listdir(old))
    _fail_fsync(monkeypatch)
    for d in (new, old):
        with pytest.raises(OSError) as e:
            pending = sio.save_sharded(d, _tree(), blocking=blocking)
            assert pending is not None
            pending.wait()
        assert e.value.errno == errno.ENOSPC and e.value.filename == d
    monkeypatch.undo()
    _nothing_but(str(tmp_path), ["old"])  # the new directory is gone
    _nothing_but(old, before)  # the old checkpoint is as it was
    np.testing.assert_array_equal(sio.load(old)["w"], np.zeros(4))


def test_failed_index_write_removes_the_pieces(tmp_path: Any, monkeypatch: Any) -> None:
    d = str(tmp_path / "ckpt")
    sio.save_sharded(d, {"w": np.zeros(4)})
    before = sorted(os.listdir(d))

    def atomic_write(path: str, write: Any) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), path)

    monkeypatch.setattr(_sharded, "atomic_write", atomic_write)
    with pytest.raises(OSError, match=os.strerror(errno.EDQUOT)):
        sio.save_sharded(d, _tree())
    _nothing_but(d, before)


def test_host_buffers_are_reused_between_saves(tmp_path: Any) -> None:
    pool = _async.HostBuffers()
    taken: list[Any] = []
    a = pool.copy(np.arange(4, dtype=np.float32), taken)
    b = pool.copy(np.arange(3, dtype=">i4"), taken)  # big-endian: copied little-endian
    assert a.flags.c_contiguous and b.dtype == np.dtype("<i4") and b.tolist() == [0, 1, 2]
    address = a.ctypes.data
    pool.release(taken)
    again: list[Any] = []
    c = pool.copy(np.ones(2, np.float64), again)  # 16 bytes: the first buffer again
    assert c.ctypes.data == address and c.tolist() == [1.0, 1.0]
    pool.trim()  # the 12-byte buffer this save did not take is dropped
    assert pool.take(12) is not taken[1]
    # a save's buffers go back to the pool used by save(blocking=False)
    path = str(tmp_path / "r.safetensors")
    sio.save(path, {"x": np.zeros(1000, np.float32)}, blocking=False).wait()
    assert _async.DEFAULT_BUFFERS.take(4000).nbytes == 4000


def test_the_distributed_barrier_is_where_it_is_expected() -> None:
    """``_async.barrier`` reaches into jax._src.distributed: fail loudly if JAX moves it."""
    from jax._src import distributed
    from jax._src.lib import _jax

    assert hasattr(distributed.global_state, "client")
    assert hasattr(_jax.DistributedRuntimeClient, "wait_at_barrier")


def test_file_job_helpers_are_what_save_uses(tmp_path: Any) -> None:
    job = _api.prepare_file("x.npz", {"a": np.arange(3)}, {"k": "v"}, False, _async.HostBuffers())
    assert job.fmt == "npz" and job.meta["k"] == "v" and len(job.buffers) == 1
    _api.write_file(str(tmp_path / "x.npz"), job)
    np.testing.assert_array_equal(sio.load(str(tmp_path / "x.npz"))["a"], np.arange(3))


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_an_asynchronous_file_is_byte_for_byte_the_blocking_one(tmp_path: Any, suffix: str) -> None:
    import jax.numpy as jnp
    import ml_dtypes

    tree = {
        "bf16": np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 3),
        "bool": np.array([True, False, True]),
        "big": np.arange(4, dtype=">i4"),  # big-endian: stored little-endian
        "strided": np.arange(20, dtype=np.int16).reshape(4, 5)[:, ::2],
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float16(1.5),
        "jax": jnp.arange(5, dtype=jnp.int8),
        "c64": np.array([1 + 2j], np.complex64),
    }
    a, b = str(tmp_path / f"a{suffix}"), str(tmp_path / f"b{suffix}")
    sio.save(a, tree)
    sio.save(b, tree, blocking=False).wait()
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


@pytest.mark.parametrize("sharded", [False, True])
def test_a_save_in_flight_keeps_no_reference_to_the_callers_arrays(tmp_path: Any, monkeypatch: Any, sharded: bool) -> None:
    import gc
    import weakref

    import jax.numpy as jnp

    module, name = (_sharded, "_write_piece") if sharded else (_safetensors, "write")
    gate = _Gate(getattr(module, name))
    monkeypatch.setattr(module, name, gate)
    w = jnp.arange(6, dtype=jnp.float32)
    ref = weakref.ref(w)
    path = str(tmp_path / ("d" if sharded else "a.safetensors"))
    pending = (sio.save_sharded if sharded else sio.save)(path, {"w": w}, blocking=False)
    assert pending is not None and gate.started.wait(30)
    del w
    gc.collect()
    assert ref() is None  # its device memory can go while the file is written
    gate.open()
    pending.wait()
    np.testing.assert_array_equal(sio.load(path)["w"], np.arange(6, dtype=np.float32))
