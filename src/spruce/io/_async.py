"""Asynchronous saves: ``PendingSave`` (a save being written in a background thread), the host
copy an asynchronous save takes at call time (``HostBuffers``, reused between saves), and the
barrier a background writer of several processes meets at."""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from .._arrays import jax_if_imported


class PendingSave:
    """A save being written in a background thread, as ``save(..., blocking=False)``,
    ``save_sharded(..., blocking=False)`` and ``CheckpointManager.save`` return it.

    The call that returned it has already copied every array to host memory: the arrays may be
    donated, deleted or overwritten at once.  The destination appears, atomically, only when
    the save is complete; a save that fails leaves nothing there.  The thread is not a daemon:
    a program that ends while a save is being written waits for it at exit.

    Attributes:
      path: the destination (a file, a sharded checkpoint directory, or a manager's step
        folder), as a str.

    >>> import os, tempfile, numpy as np
    >>> import spruce.io
    >>> path = os.path.join(tempfile.mkdtemp(), 'params.safetensors')
    >>> w = np.ones(3, np.float32)
    >>> pending = spruce.io.save(path, {'w': w}, blocking=False)
    >>> w[:] = 0  # the save already holds its own copy
    >>> pending.wait()
    >>> pending.done()
    True
    >>> spruce.io.load(path)['w']
    array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, path: str, work: Callable[[], None], name: str = "spruce.io save") -> None:
        self.path = path
        self._error: BaseException | None = None
        self._done = threading.Event()

        def run() -> None:
            try:
                work()
            except BaseException as e:  # handed to wait(), which re-raises it in the caller
                self._error = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=run, name=f"{name}: {path}", daemon=False)
        self._thread.start()

    def done(self) -> bool:
        """True once the save has finished, whether it succeeded or failed (``wait`` tells
        which); never blocks."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the save is complete (committed at its destination).

        Args:
          timeout: seconds to wait at most; None (default) waits as long as it takes.

        Raises:
          TimeoutError: ``timeout`` ran out before the save finished; the save goes on (call
            ``wait`` again).
          Exception: the error that made the save fail (an OSError naming the destination for
            a full disk, ...): the same error object on every later call.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the save to {self.path!r} is still being written after {timeout} s; it goes on")
        if self._error is not None:
            raise self._error

    def __repr__(self) -> str:
        state = "writing" if not self.done() else ("failed" if self._error is not None else "done")
        return f"PendingSave({self.path!r}, {state})"


class HostBuffers:
    """Host memory for the copies asynchronous saves take, reused between saves.

    ``copy(x)`` copies an array (NumPy, or a jax.Array or one shard's data) into a buffer of
    its own; ``release`` gives a finished save's buffers back.  A later save takes a free
    buffer of the same byte size instead of allocating (and page-faulting) new memory: in
    steady state the copy is a plain memcpy into memory already mapped.  At the start of a
    save, free buffers it did not take are dropped, so the pool holds at most the buffers of
    the saves in flight plus those of the last finished one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[int, list[np.ndarray[Any, Any]]] = {}

    def take(self, nbytes: int) -> np.ndarray[Any, Any]:
        with self._lock:
            stack = self._free.get(nbytes)
            if stack:
                return stack.pop()
        return np.empty(nbytes, np.uint8)

    def trim(self) -> None:
        """Drop the free buffers (those the current save did not take)."""
        with self._lock:
            self._free.clear()

    def release(self, buffers: list[np.ndarray[Any, Any]]) -> None:
        with self._lock:
            for b in buffers:
                self._free.setdefault(b.nbytes, []).append(b)

    def copy(self, x: Any, taken: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        """A C-contiguous little-endian copy of ``x`` in a buffer of this pool (appended to
        ``taken``); ``x`` may then change or be deleted."""
        host = np.asarray(x)  # (a jax.Array on the CPU: a view of its buffer, no copy)
        dtype = host.dtype.newbyteorder("<") if host.dtype.byteorder == ">" else host.dtype
        raw = self.take(host.nbytes)
        taken.append(raw)
        out: np.ndarray[Any, Any] = raw.view(dtype).reshape(host.shape) if host.size else np.empty(host.shape, dtype)
        np.copyto(out, host, casting="no" if dtype == host.dtype else "equiv")
        return out


# The buffers of ``save(..., blocking=False)`` and ``save_sharded(..., blocking=False)``
# (a CheckpointManager has its own, freed by its close()).
DEFAULT_BUFFERS = HostBuffers()


def start_transfers(values: list[Any]) -> None:
    """Start the device-to-host copies of every jax.Array in ``values`` at once (they then run
    in parallel, and ``np.asarray`` of each only waits for its own); a no-op on the CPU, where
    the host copy reads the device buffer directly."""
    jarr = getattr(jax_if_imported(), "Array", None)
    if jarr is None:
        return
    for x in values:
        if isinstance(x, jarr):
            try:
                if all(d.platform == "cpu" for d in x.devices()):
                    continue
                x.copy_to_host_async()
            except Exception:  # (a deleted array: the copy that follows reports it)
                continue


def barrier(name: str, timeout_s: float = 3600.0) -> None:
    """All processes of a ``jax.distributed`` job meet here; safe in a background thread.

    Uses the distributed runtime's key-value store (``wait_at_barrier`` of the client that
    ``jax.distributed.initialize`` made), not a collective on the devices: a collective
    started from a background thread could interleave differently with each process's own
    computations and deadlock.  This reaches into ``jax._src.distributed`` (the client is not
    public); tests/test_io_async.py checks that it is still there.
    """
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("spruce.io: several processes but no jax.distributed client to meet at a barrier")
    client.wait_at_barrier(name, int(timeout_s * 1000))
