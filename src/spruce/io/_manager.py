"""CheckpointManager: numbered steps in one directory, saved asynchronously and committed
atomically, with retention (the newest few and the best few by a metric).

Layout of ``directory`` (docs/io.md):

- ``step_<n>/``: a committed step's folder, holding ``checkpoint.safetensors`` (a tree saved
  by ``save``) or a sharded checkpoint (``index.json`` and pieces, by ``save_sharded``);
- ``step_<n>.commit``: its commit marker, a small JSON file (format, step, layout, metrics);
  a step is committed exactly when its marker exists;
- ``.step_<n>.<16 hex>.tmp/``: a step being written (renamed to ``step_<n>`` when complete).

Every touch of the storage goes through ``_Local``'s few methods, so that another storage
(object stores through fsspec) can take its place.
"""

from __future__ import annotations

import errno
import json
import numbers
import operator
import os
import re
import secrets
import shutil
from typing import Any, Final, Literal, Mapping

import numpy as np

from .._arrays import jax_if_imported
from ..tree import leaves as _leaves
from . import _api, _sharded, _storage
from ._async import HostBuffers, PendingSave
from ._errors import CheckpointError
from ._files import atomic_write, fsync_dir, open_regular

FILE: Final = "checkpoint.safetensors"
MARKER_FORMAT: Final = "spruce.checkpoint"
MARKER_VERSION: Final = 1
_STEP: Final = re.compile(r"\Astep_(0|[1-9][0-9]*)\Z")
_MARKER: Final = re.compile(r"\Astep_(0|[1-9][0-9]*)\.commit\Z")
_TMP: Final = re.compile(r"\A\.step_(0|[1-9][0-9]*)\.[0-9a-f]{16}\.tmp\Z")
_MAX_MARKER: Final = 1 << 20  # bytes


class _Local:
    """The storage operations the manager needs, on a local (POSIX) file system (a URL's are
    ``_storage.RemoteStore``'s, the same methods)."""

    atomic_rename = True  # (a step is written under a temporary name and renamed)

    def join(self, folder: str, name: str) -> str:
        return os.path.join(folder, name)

    def list(self, folder: str) -> list[str]:
        return os.listdir(folder)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_file(self, path: str) -> bool:
        return os.path.exists(path) and not os.path.isdir(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) and not os.path.islink(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        """Rename a finished folder into place (its contents flushed to disk first) and flush
        the parent's entry."""
        fsync_dir(src)
        os.rename(src, dst)
        fsync_dir(os.path.dirname(dst))

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def remove_file(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        fsync_dir(os.path.dirname(path))

    def write_small(self, path: str, data: bytes) -> None:
        """Write a small file atomically (temporary file, fsync, rename, fsync folder)."""

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                f.write(data)

        atomic_write(path, write)

    def read_small(self, path: str) -> bytes:
        with open_regular(path) as f:
            return f.read(_MAX_MARKER + 1)

    def hold(self, folder: str) -> tuple[Any, bool]:
        """Register this manager as one of the folder's users for its lifetime: a shared
        ``flock`` on the folder, held until ``release``.  Returns the handle and whether this
        manager was the folder's only user when it started (it then held the lock
        exclusively), the condition for deleting leftovers: another live manager (a writer in
        another process) may be writing a step that is not committed yet."""
        try:
            import fcntl
        except ImportError:  # (no flock: never sure to be alone, so leftovers stay)
            return None, False
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except OSError:
            alone = False
        return fd, alone

    def share(self, handle: Any) -> None:
        """Turn the exclusive hold of ``hold`` into a shared one (after the clean-up)."""
        if handle is not None:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_SH)

    def release(self, handle: Any) -> None:
        if handle is not None:
            os.close(handle)


def _step_value(step: Any, function: str) -> int:
    if isinstance(step, bool) or not isinstance(step, (numbers.Integral, np.integer)):
        raise TypeError(f"CheckpointManager.{function}: step must be an int, got {type(step).__name__}")
    value = operator.index(step)
    if value < 0:
        raise ValueError(f"CheckpointManager.{function}: step must be >= 0, got {value}")
    return value


def _metrics_value(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metrics`` checked: str keys; bool, int, float or str values (NumPy and JAX scalars of
    those kinds become Python ones)."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"CheckpointManager.save: metrics must be a dict, got {type(metrics).__name__}")
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if type(k) is not str:
            raise TypeError(f"CheckpointManager.save: metrics keys must be str, got {k!r}")
        if type(v) in (bool, int, float, str):
            out[k] = v
            continue
        if hasattr(v, "shape") and hasattr(v, "dtype") and tuple(v.shape) == () and np.dtype(v.dtype).kind in "biuf":
            out[k] = np.asarray(v).item()
            continue
        raise TypeError(
            f"CheckpointManager.save: the metric {k!r} is a {type(v).__name__}; metrics are bool, int, "
            "float or str (or a 0-d NumPy / JAX number)"
        )
    return out


def _is_number(v: Any) -> bool:
    return type(v) in (int, float) and v == v  # (NaN is never the best)


def _sharded_layout(tree: Any) -> bool:
    """A step is a sharded checkpoint when several processes save it, or when an array of it
    lies on more than one device (each distinct shard written once, nothing gathered)."""
    jax = jax_if_imported()
    if jax is None:
        return False
    if int(jax.process_count()) > 1:
        return True
    for x in _leaves(tree):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            return True
    return False


class CheckpointManager:
    """Numbered checkpoints of a training run in one directory: saved asynchronously, committed
    atomically, the newest ``keep_last`` and the best ``keep_best`` (by a metric) kept.

    Follows the shape of ``orbax.checkpoint.CheckpointManager`` (steps, retention by recency
    and by a metric, asynchronous saves), with spruce's file format: a step is a
    ``checkpoint.safetensors`` file (``spruce.io.save``), or, when several processes save it
    or one of its arrays lies on several devices, a sharded checkpoint
    (``spruce.io.save_sharded``: every process writes its own shards, each distinct shard
    once).  ``spruce.io.load`` reads a step folder's checkpoint as it reads any other.

    Commit protocol (on a local file system): a step is written into a temporary folder
    ``.step_<n>.<random>.tmp``, flushed to disk, renamed to ``step_<n>``, and then its commit
    marker ``step_<n>.commit`` (JSON: the step, its layout and metrics) is written atomically.
    A step is committed exactly when its marker exists: ``steps`` lists only those, so a save
    that fails or a process killed at any point never shows a partial step, and every earlier
    step stays as it was.  Deleting a step removes its marker first.  With several processes,
    every process writes its pieces, all meet at a barrier, and process 0 writes the index,
    renames, writes the marker and deletes old steps.

    When it starts, a manager that is the directory's only user (no other live manager holds
    it: each holds a shared ``flock`` on the directory) deletes the leftovers of interrupted
    saves: temporary ``.step_*.tmp`` folders and ``step_<n>`` folders without a marker —
    nothing else.  Restoring in one process while another saves is safe: the reader sees
    committed steps only.

    On an object store (a URL: ``s3://bucket/run``, ``gs://...``, ``memory://...``, through
    fsspec), which has no atomic rename, a step is written under its final name ``step_<n>/``
    (a file in one upload, or pieces then index) and committed by its marker, written last.
    There is no lock either: a manager that starts deletes only the uncommitted steps older
    than the newest committed one (a newer one may be another process's save in progress),
    and a save of step ``n`` first removes what an interrupted save of ``n`` left.

    Args:
      directory: a local folder (created if missing, with its parents), or a URL handled by
        fsspec (``pip install spruce[cloud]``; docs/io.md).  A path that is a regular file is
        an error.
      keep_last: how many of the newest committed steps to keep (an int >= 1), or None to
        keep every step.
      keep_best: how many of the best committed steps to keep besides (by ``metric``).
      metric: the name, in the metrics given to ``save``, that ``best_step`` and
        ``keep_best`` rank by; a step whose metrics lack it (or hold a NaN, a bool or a str
        there) is never the best.
      mode: ``'min'`` (a smaller value is better) or ``'max'``.  On a tie the newer step wins.
      blocking: False (default): ``save`` returns once the tree is in host memory and writes
        in a background thread.  True: ``save`` returns when the step is committed.
      storage_options: for a URL, keyword arguments for its fsspec filesystem (for s3fs:
        ``endpoint_url``, ``key``, ``secret``, ...); kept in ``storage_options``.

    Raises:
      ValueError: a bad ``keep_last``, ``keep_best``, ``mode``; ``keep_best > 0`` without
        ``metric``; a URL whose scheme fsspec does not know.
      NotADirectoryError: ``directory`` is a regular file.
      OSError: the directory cannot be created or read.

    >>> import os, tempfile, numpy as np
    >>> from spruce.io import CheckpointManager
    >>> folder = os.path.join(tempfile.mkdtemp(), 'run')
    >>> with CheckpointManager(folder, keep_last=2, keep_best=1, metric='loss') as mgr:
    ...     for step, loss in [(10, 0.5), (20, 0.9), (30, 0.7), (40, 0.8)]:
    ...         _ = mgr.save(step, {'w': np.full(2, step, np.float32)}, metrics={'loss': loss})
    ...     mgr.wait()
    ...     mgr.steps(), mgr.latest_step(), mgr.best_step(), mgr.metrics(30)
    ([10, 30, 40], 40, 10, {'loss': 0.7})
    >>> CheckpointManager(folder).restore()
    {'w': array([40., 40.], dtype=float32)}
    >>> sorted(os.listdir(folder))
    ['step_10', 'step_10.commit', 'step_30', 'step_30.commit', 'step_40', 'step_40.commit']
    """

    def __init__(
        self,
        directory: Any,
        *,
        keep_last: int | None = 3,
        keep_best: int = 0,
        metric: str | None = None,
        mode: Literal["min", "max"] = "min",
        blocking: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
            raise ValueError(f"CheckpointManager: keep_last must be an int >= 1 or None (keep all), got {keep_last!r}")
        if isinstance(keep_best, bool) or not isinstance(keep_best, int) or keep_best < 0:
            raise ValueError(f"CheckpointManager: keep_best must be an int >= 0, got {keep_best!r}")
        if mode not in ("min", "max"):
            raise ValueError(f"CheckpointManager: mode must be 'min' or 'max', got {mode!r}")
        if metric is not None and type(metric) is not str:
            raise TypeError(f"CheckpointManager: metric must be a str or None, got {type(metric).__name__}")
        if keep_best > 0 and metric is None:
            raise ValueError(f"CheckpointManager: keep_best={keep_best} ranks steps by a metric: pass metric=")
        d = _storage.local(os.fsdecode(directory))
        self.directory = d
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.metric = metric
        self.mode = mode
        self.blocking = bool(blocking)
        self.storage_options = dict(storage_options or {})
        self._storage: _Local | _storage.RemoteStore = (
            _Local() if not _storage.is_url(d) else _storage.RemoteStore(d, self.storage_options or None)
        )
        self._buffers = HostBuffers()
        self._pending: PendingSave | None = None
        self._pending_step: int | None = None
        self._closed = False
        if self._storage.is_file(d):
            raise NotADirectoryError(errno.ENOTDIR, "a regular file, not a directory for checkpoints", d)
        self._storage.makedirs(d)
        self._hold, alone = self._storage.hold(d)
        try:
            if self._process() == 0 and (alone or not self._storage.atomic_rename):
                self._remove_leftovers(alone)
            self._storage.share(self._hold)
        except BaseException:
            self._storage.release(self._hold)
            raise

    # -- reading -----------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """The committed steps, ascending: those whose commit marker exists (read from the
        directory on every call, so a long-lived reader sees other processes' commits)."""
        names = set(self._storage.list(self.directory))
        out = []
        for name in names:
            m = _MARKER.match(name)
            if m is not None and f"step_{m.group(1)}" in names:
                out.append(int(m.group(1)))
        return sorted(out)

    def latest_step(self) -> int | None:
        """The newest committed step, or None when there is none."""
        steps = self.steps()
        return steps[-1] if steps else None

    def best_step(self) -> int | None:
        """The committed step whose ``metric`` is the smallest (``mode='min'``) or largest
        (``'max'``); on a tie the newer step.  Steps without the metric are never the best;
        None when no step has it.

        Raises:
          ValueError: the manager has no ``metric``.
        """
        if self.metric is None:
            raise ValueError("CheckpointManager.best_step: the manager has no metric (CheckpointManager(..., metric=...))")
        ranked = self._ranked(self.steps())
        return ranked[0] if ranked else None

    def metrics(self, step: int) -> dict[str, Any]:
        """The metrics saved with ``step`` (numbers, strings and bools as they were given).

        Raises:
          FileNotFoundError: ``step`` is not committed (the message lists the steps there are).
          CheckpointError: its commit marker is corrupted.
        """
        step = _step_value(step, "metrics")
        return dict(self._marker(step, "metrics")["metrics"])

    def restore(
        self, step: int | None = None, *, like: Any = None, shardings: Any = None, strict: bool = True, dtype: Any = None
    ) -> Any:
        """Load a committed step: the latest when ``step`` is None.

        First waits for this manager's own save in flight, if any.  ``like``, ``shardings``,
        ``strict`` and ``dtype`` mean what they mean for ``spruce.io.load``: without ``like``
        the tree is rebuilt as it was saved (NumPy arrays, typed PRNG keys as typed keys);
        with ``like``, each leaf follows ``like``'s (a jax.Array leaf gives a jax.Array).  A
        latest step deleted by another process's retention while it was being read is
        replaced by the newer latest.

        Raises:
          FileNotFoundError: no committed step, or ``step`` is not committed (naming it and
            the committed steps).
          CheckpointError, MismatchError, OSError: as ``spruce.io.load`` (a truncated or
            corrupted file of a committed step names the file).
          Exception: the error of this manager's save in flight, if it failed.
        """
        self.wait()
        if step is not None:
            step = _step_value(step, "restore")
            return self._load(step, self._marker(step, "restore"), like, shardings, strict, dtype)
        for attempt in range(3):
            steps = self.steps()
            if not steps:
                raise FileNotFoundError(errno.ENOENT, "CheckpointManager.restore: no committed step to restore", self.directory)
            latest = steps[-1]
            try:
                return self._load(latest, self._marker(latest, "restore"), like, shardings, strict, dtype)
            except (OSError, CheckpointError):
                if attempt == 2 or latest in self.steps():
                    raise  # (the step is still there: a real error, not a race with retention)
        raise AssertionError("unreachable")

    # -- writing -----------------------------------------------------------------------------------

    def save(self, step: int, tree: Any, *, metrics: Mapping[str, Any] | None = None) -> PendingSave | None:
        """Save ``tree`` as step ``step``, with ``metrics`` (a dict of bools, ints, floats,
        strs) stored in its commit marker.

        Asynchronous unless the manager was made with ``blocking=True``: the call returns a
        ``PendingSave`` once the tree's arrays are copied to host memory (the caller may
        donate, delete or overwrite them at once); the step is written in a background thread,
        committed, and then the steps retention drops are deleted.  At most one save is in
        flight: a save first waits for the previous one (raising its error if it failed).
        The host buffers of one save are reused by the next.

        Returns:
          The ``PendingSave``, or None when the manager is blocking.

        Raises:
          ValueError: ``step`` is the step in flight, not greater than the latest committed
            step (or one that exists), or negative; a leaf that cannot be saved; the manager
            is closed.
          TypeError: ``step`` is not an int; bad ``metrics``.
          Exception: the previous save's error, if it failed (this save is then not started).
          OSError: (blocking) an I/O failure; nothing of the step is left behind.
        """
        if self._closed:
            raise ValueError("CheckpointManager.save: the manager is closed")
        step = _step_value(step, "save")
        values = _metrics_value(metrics)
        pending = self._pending
        if pending is not None and not pending.done() and step == self._pending_step:
            raise ValueError(f"CheckpointManager.save: step {step} is being saved already (in flight)")
        self._check_newer(step)
        self.wait()
        self._check_newer(step)
        sharded = _sharded_layout(tree)
        host = None if self.blocking else self._buffers
        if sharded:
            job = _sharded.prepare(tree, None, False, host)
            tmp = self._folder(step, job.gen)

            def commit() -> None:  # (process 0, before the last barrier: all see retention done)
                self._commit(step, tmp, "sharded", values)
                self._retain()

            buffers = job.buffers

            def write() -> None:
                try:
                    _sharded.write(tmp, job, background=not self.blocking, commit=commit, storage_options=self._options)
                except BaseException:
                    if self._process() == 0:
                        self._storage.remove_tree(tmp)
                    raise
        else:
            fjob = _api.prepare_file(FILE, tree, None, False, host)
            tmp = self._folder(step, secrets.token_hex(8))
            buffers = fjob.buffers

            def write() -> None:
                try:
                    self._storage.makedirs(tmp)
                    if not self._storage.atomic_rename:  # (one process: nothing else writes there)
                        self._storage.remove_tree(tmp)  # a leftover of an interrupted save of this step
                    _api.write_file(self._storage.join(tmp, FILE), fjob, self._options)
                    self._commit(step, tmp, "file", values)
                except BaseException:
                    self._storage.remove_tree(tmp)
                    raise
                self._retain()

        def work() -> None:
            try:
                write()
            finally:
                self._buffers.release(buffers)

        if self.blocking:
            work()
            return None
        self._pending = PendingSave(self._path(f"step_{step}"), work, "spruce.io.CheckpointManager save")
        self._pending_step = step
        return self._pending

    def wait(self) -> None:
        """Block until this manager's save in flight, if any, is committed.

        Raises:
          Exception: that save's error, if it failed (once: the manager then forgets it).
        """
        pending = self._pending
        if pending is None:
            return
        try:
            pending.wait()
        finally:
            self._pending = None
            self._pending_step = None

    def close(self) -> None:
        """Wait for the save in flight (raising its error), then free the host buffers and
        the directory's lock.  Calling it again does nothing."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            self._buffers.trim()
            self._storage.release(self._hold)

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"CheckpointManager({self.directory!r}, keep_last={self.keep_last}, keep_best={self.keep_best}, "
            f"metric={self.metric!r}, mode={self.mode!r}, blocking={self.blocking})"
        )

    # -- internals ---------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return self._storage.join(self.directory, name)

    @property
    def _options(self) -> Mapping[str, Any] | None:
        return self.storage_options or None

    def _folder(self, step: int, gen: str) -> str:
        """Where step ``step`` is written: a temporary folder renamed when complete, or, on an
        object store (no rename), its final folder, which its marker commits."""
        if self._storage.atomic_rename:
            return self._path(f".step_{step}.{gen}.tmp")
        return self._path(f"step_{step}")

    @staticmethod
    def _process() -> int:
        jax = jax_if_imported()
        return 0 if jax is None else int(jax.process_index())

    def _check_newer(self, step: int) -> None:
        steps = self.steps()
        latest = max(steps, default=None)
        if self._pending is not None and self._pending_step is not None:
            latest = self._pending_step if latest is None else max(latest, self._pending_step)
        if latest is not None and step <= latest:
            what = "exists already" if step in steps else f"is not greater than the latest step {latest}"
            raise ValueError(f"CheckpointManager.save: step {step} {what}; steps are saved in increasing order")

    def _missing(self, step: int, function: str) -> FileNotFoundError:
        steps = self.steps()
        shown = ", ".join(map(str, steps[-20:])) if steps else "none"
        more = f" (the last 20 of {len(steps)})" if len(steps) > 20 else ""
        return FileNotFoundError(
            errno.ENOENT, f"CheckpointManager.{function}: no committed step {step}; committed steps: [{shown}]{more}",
            self.directory,
        )

    def _marker(self, step: int, function: str) -> dict[str, Any]:
        path = self._path(f"step_{step}.commit")
        try:
            raw = self._storage.read_small(path)
        except FileNotFoundError:
            raise self._missing(step, function) from None
        if not self._storage.exists(self._path(f"step_{step}")):
            raise self._missing(step, function)
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise CheckpointError(f"corrupted commit marker: {e}", path) from None
        if (
            type(doc) is not dict or doc.get("format") != MARKER_FORMAT or doc.get("step") != step
            or doc.get("layout") not in ("file", "sharded") or type(doc.get("metrics")) is not dict
        ):
            raise CheckpointError(f"corrupted commit marker: not a {MARKER_FORMAT} marker of step {step}", path)
        return doc

    def _load(self, step: int, marker: dict[str, Any], like: Any, shardings: Any, strict: bool, dtype: Any) -> Any:
        folder = self._path(f"step_{step}")
        path = folder if marker["layout"] == "sharded" else self._storage.join(folder, FILE)
        return _api.load(path, like, strict=strict, shardings=shardings, dtype=dtype, storage_options=self._options)

    def _commit(self, step: int, tmp: str, layout: str, metrics: dict[str, Any]) -> None:
        """Rename the finished ``tmp`` folder to ``step_<n>`` and write its marker (process 0)."""
        final = self._path(f"step_{step}")
        marker = self._path(f"step_{step}.commit")
        if tmp != final:
            if self._storage.exists(final) and not self._storage.exists(marker):
                self._storage.remove_tree(final)  # a leftover of an interrupted save of this step
            self._storage.rename(tmp, final)
        doc = {"format": MARKER_FORMAT, "version": MARKER_VERSION, "step": step, "layout": layout, "metrics": metrics}
        try:
            self._storage.write_small(marker, json.dumps(doc).encode("utf-8"))
        except BaseException:
            self._storage.remove_tree(final)
            raise

    def _ranked(self, steps: list[int]) -> list[int]:
        """Steps having a number for ``metric``, best first (newer first on a tie)."""
        scored = []
        for s in steps:
            try:
                v = self._marker(s, "best_step")["metrics"].get(self.metric)
            except (OSError, CheckpointError):
                continue  # (deleted meanwhile, or unreadable: never the best)
            if _is_number(v):
                scored.append((v if self.mode == "min" else -v, -s))
        return [-s for _, s in sorted(scored)]

    def _retain(self) -> None:
        """Delete the committed steps that are neither among the newest ``keep_last`` nor the
        best ``keep_best`` (marker first, then the folder)."""
        if self.keep_last is None:
            return
        steps = self.steps()
        keep = set(steps[-self.keep_last :])
        if self.keep_best:
            keep.update(self._ranked(steps)[: self.keep_best])
        for s in steps:
            if s not in keep:
                self._storage.remove_file(self._path(f"step_{s}.commit"))
                self._storage.remove_tree(self._path(f"step_{s}"))

    def _remove_leftovers(self, alone: bool = True) -> None:
        """Delete temporary step folders and step folders without a commit marker.  When this
        manager may not be the directory's only user (an object store, which has no locks),
        only the uncommitted steps older than the newest committed one: a newer one may be a
        step another process is writing (steps only grow)."""
        names = set(self._storage.list(self.directory))
        latest = max((int(m.group(1)) for m in map(_MARKER.match, names) if m is not None), default=-1)
        for name in names:
            m = _STEP.match(name)
            if not alone and (m is None or int(m.group(1)) >= latest):
                continue
            if _TMP.match(name) or (m is not None and f"{name}.commit" not in names):
                path = self._path(name)
                if self._storage.is_dir(path):
                    self._storage.remove_tree(path)
