"""Sharded checkpoints: a directory of plain .safetensors pieces and one JSON index.

Writing (``save_sharded``): every process writes one piece file holding the distinct shards
its devices own (a shard held by several devices is owned by the one with the lowest device
id, so it is written exactly once), streamed shard by shard: at most one shard is copied to
the host at a time.  Then the processes meet at a barrier, process 0 writes the index
atomically (the commit point), removes the pieces of older checkpoints, and all meet again.
The layout of every array is known to every process from its sharding
(``devices_indices_map``), so the index needs no communication but the two barriers and the
broadcast of a random generation name (JAX's ``multihost_utils``).

Reading: ``parse_dir`` validates the index and every piece's header before any data is
touched; ``Reader`` assembles arrays (``array``) or the region one device needs (``region``,
used by ``jax.make_array_from_callback``) from memory-mapped pieces.  Format: docs/io.md.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import secrets
from typing import Any, Callable, Final, Mapping, NamedTuple

import numpy as np

from .._arrays import jax_if_imported
from . import _safetensors, _storage
from ._async import DEFAULT_BUFFERS, HostBuffers, PendingSave, barrier, start_transfers
from ._dtypes import CODE_OF_NAME, SAFETENSORS_CODES, SAFETENSORS_NAMES, dtype_of
from ._errors import CheckpointError
from ._files import (
    Entry,
    MappedFile,
    Parsed,
    atomic_write,
    fsync_dir,
    open_regular,
    shape_size,
    with_path,
)
from ._structure import TREEDEF_KEY, encode_tree

INDEX: Final = "index.json"
FORMAT: Final = "spruce.sharded"
VERSION: Final = 1
MAX_INDEX: Final = 1 << 30  # bytes
PIECE: Final = re.compile(r"\A([0-9a-f]{16})-(\d{5})-of-(\d{5})\.safetensors\Z")
_PIECE_FILE: Final = re.compile(r"\A[^/\\\x00]+\.safetensors\Z")
# A block held by several processes is cut into row blocks, one per holder, from this size on.
SPLIT_BYTES: Final = 8 << 20


class Slice(NamedTuple):
    """One stored block of a tensor: the piece file, its key there, the block's start and stop
    in the global array, and (once parsed) the piece's entry."""

    file: str
    key: str
    start: tuple[int, ...]
    stop: tuple[int, ...]
    entry: Entry | None = None


class Index(NamedTuple):
    """A validated sharded checkpoint: ``parsed`` describes the merged tensors (as a single
    file's header would), ``slices`` where each one's blocks are, ``pieces`` the parsed piece
    headers by file name."""

    parsed: Parsed
    slices: dict[str, list[Slice]]
    pieces: dict[str, Parsed]


def is_sharded(path: str) -> bool:
    """True if ``path`` is a directory (a prefix, for a URL) holding an index file."""
    if _storage.is_url(path):
        return _storage.exists(_storage.join(path, INDEX))
    return os.path.isdir(path) and os.path.exists(os.path.join(path, INDEX))


# -- writing -----------------------------------------------------------------------------------------


def _process() -> tuple[int, int]:
    jax = jax_if_imported()
    if jax is None:
        return 0, 1
    return int(jax.process_index()), int(jax.process_count())


def _key(name: str, start: tuple[int, ...], stop: tuple[int, ...], shape: tuple[int, ...]) -> str:
    if start == (0,) * len(shape) and stop == shape:
        return name
    return name + "[" + ",".join(f"{a}:{b}" for a, b in zip(start, stop)) + "]"


class _Block(NamedTuple):
    name: str
    key: str
    start: tuple[int, ...]
    stop: tuple[int, ...]
    process: int
    data: Any  # a callable giving the block as a NumPy array, on the writing process; else None


def _plan(arrays: Mapping[str, Any], me: int, count: int = 1) -> list[_Block]:
    """Every distinct block of every array, its writer, and (for this process) its data.

    A block that several processes hold (a replicated array, or any host value: a NumPy array
    or, with several processes, an array held by this process's devices only, which every
    process is expected to hold the same) is written once, by one of them: the one that has
    been given the fewest bytes so far, so that the writing of replicated data is shared out.
    Such a block of at least ``SPLIT_BYTES`` is cut into row blocks, one per holder.  Every
    process computes the same plan (the same arrays in the same order, the same shardings).
    Within the writing process, the holder of lowest device id gives the data."""
    jarr = getattr(jax_if_imported(), "Array", None)
    blocks: list[_Block] = []
    given = [0] * count  # bytes assigned to each process so far
    for name, x in arrays.items():
        shape = tuple(int(d) for d in x.shape)
        itemsize = np.dtype(x.dtype).itemsize
        # each distinct box -> {process: the lowest device (None: a host value) holding it there}
        boxes: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[int, Any]] = {}
        local: dict[Any, Any] = {}
        if jarr is None or not isinstance(x, jarr) or (count > 1 and x.is_fully_addressable):
            boxes[((0,) * len(shape), shape)] = dict.fromkeys(range(count))
        else:
            for dev, idx in x.sharding.devices_indices_map(shape).items():
                bounds = [sl.indices(n)[:2] for sl, n in zip(idx, shape)]
                holders = boxes.setdefault((tuple(b[0] for b in bounds), tuple(b[1] for b in bounds)), {})
                q = int(dev.process_index)
                if q not in holders or dev.id < holders[q].id:
                    holders[q] = dev
            local = {sh.device: sh for sh in x.addressable_shards}
        for (start, stop), holders in sorted(boxes.items()):
            procs = sorted(holders, key=lambda q: (given[q], q))
            rows = stop[0] - start[0] if shape else 0
            nbytes = shape_size(tuple(b - a for a, b in zip(start, stop))) * itemsize
            parts = min(len(procs), rows) if nbytes >= SPLIT_BYTES else 1
            for i in range(max(parts, 1)):
                q = procs[i]
                lo, hi = list(start), list(stop)
                if parts > 1:
                    lo[0], hi[0] = start[0] + rows * i // parts, start[0] + rows * (i + 1) // parts
                part = tuple(b - a for a, b in zip(lo, hi))
                given[q] += shape_size(part) * itemsize
                data = None
                if q == me:
                    data = _data(x, holders[q], local, tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, start)), part)
                key = _key(name, tuple(lo), tuple(hi), shape)
                blocks.append(_Block(name, key, tuple(lo), tuple(hi), q, data))
    return blocks


def _data(x: Any, dev: Any, local: Mapping[Any, Any], rel: tuple[slice, ...], part: tuple[int, ...]) -> Any:
    """A callable giving the block ``rel`` (relative to the box) of ``x``'s shard on ``dev``
    (of ``x`` itself for a host value) as a host array, copied when it is called: one block at
    a time."""
    if dev is None:
        return lambda: np.asarray(x)[rel]
    shard = local[dev]
    whole = all(sl.stop - sl.start == n for sl, n in zip(rel, shard.data.shape))
    if whole:
        return lambda: np.asarray(shard.data)
    if getattr(dev, "platform", "") == "cpu":
        return lambda: np.asarray(shard.data)[rel]  # (a host buffer: a view of it, nothing copied)
    return lambda: np.asarray(shard.data[rel])  # sliced on the device: only the rows copied


def _write_piece(path: str, blocks: list[_Block], arrays: Mapping[str, Any]) -> None:
    """Stream ``blocks`` into a safetensors file at ``path`` (fsynced); if anything fails, the
    partial file is removed."""
    header: dict[str, Any] = {}
    pos = 0
    for b in blocks:
        dt = np.dtype(arrays[b.name].dtype)
        shape = [e - s for s, e in zip(b.start, b.stop)]
        n = shape_size(tuple(shape)) * dt.itemsize
        header[b.key] = {"dtype": CODE_OF_NAME[dt.name], "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    try:
        with open(path, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            for b in blocks:
                arr = np.asarray(b.data())
                if arr.dtype.byteorder == ">":
                    arr = arr.astype(arr.dtype.newbyteorder("<"))
                arr = np.ascontiguousarray(arr)
                f.write(arr.reshape(-1).view(np.uint8).data)
                del arr
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(path)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove_old_pieces(p: str, keep: set[str], options: Mapping[str, Any] | None = None) -> None:
    try:
        names = _storage.listdir(p, options) if _storage.is_url(p) else os.listdir(p)
    except OSError:
        return
    _discard(p, [old for old in names if PIECE.match(old) and old not in keep], options)


def _discard(folder: str, names: list[str], options: Mapping[str, Any] | None) -> None:
    """Remove the pieces ``names`` (best effort)."""
    for name in names:
        if _storage.is_url(folder):
            try:
                _storage.remove(_storage.join(folder, name), options)
            except OSError:
                pass
        else:
            _unlink(os.path.join(folder, name))


def _put_piece(
    folder: str, file: str, blocks: list[_Block], arrays: Mapping[str, Any], options: Mapping[str, Any] | None
) -> None:
    """Write this process's piece ``file`` in ``folder``: streamed to the file (a local folder;
    removed if anything fails) or to a local temporary file uploaded in one put (a URL)."""
    if _storage.is_url(folder):
        _storage.put(_storage.join(folder, file), lambda tmp: _write_piece(tmp, blocks, arrays), options)
    else:
        _write_piece(os.path.join(folder, file), blocks, arrays)


def _write_index(folder: str, text: bytes, options: Mapping[str, Any] | None) -> None:
    """The commit point: the index replaced atomically in a local folder, one put of a small
    object on a store (written last, after every piece)."""
    if _storage.is_url(folder):
        _storage.write_bytes(_storage.join(folder, INDEX), text, options)
        return

    def write_index(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(text)

    atomic_write(os.path.join(folder, INDEX), write_index)


class ShardedJob(NamedTuple):
    """A sharded save prepared at call time (``prepare``): the metadata, the arrays (their
    shapes and dtypes name the index's tensors), every block with its writer, the piece file
    of each writing process, this process's rank and the process count, and the host buffers
    holding this process's blocks (asynchronous saves only)."""

    meta: dict[str, str]
    arrays: Mapping[str, Any]
    blocks: list[_Block]
    files: dict[int, str]
    me: int
    processes: int
    gen: str
    buffers: list[Any]


def prepare(tree: Any, metadata: Mapping[str, str] | None, skip_code: bool, host: HostBuffers | None = None) -> ShardedJob:
    """Everything of a sharded save that happens in the caller: checks, the structure, the
    plan of blocks, the generation name (broadcast from process 0) and, with ``host``, the
    copy of this process's blocks into host buffers (so that the arrays may change at once).

    Raises:
      ValueError: bad metadata; a leaf that cannot be stored or copied to the host.
    """
    meta: dict[str, str] = {}
    for k, v in (metadata or {}).items():
        if type(k) is not str or type(v) is not str:
            raise ValueError(f"save_sharded: metadata must map str to str, got {k!r}: {type(v).__name__}")
        if k.startswith("spruce."):
            raise ValueError(f"save_sharded: metadata keys starting with 'spruce.' are reserved, got {k!r}")
        meta[k] = v
    enc = encode_tree(tree, SAFETENSORS_NAMES, ".safetensors", keep_jax=True, skip_code=skip_code)
    meta[TREEDEF_KEY] = json.dumps(enc.doc, allow_nan=False, separators=(",", ":"))
    me, count = _process()
    gen = secrets.token_hex(8)
    if count > 1:
        from jax.experimental import multihost_utils

        words = np.frombuffer(bytes.fromhex(gen), dtype=np.uint32)
        gen = np.asarray(multihost_utils.broadcast_one_to_all(words)).astype(np.uint32).tobytes().hex()
    jarr = getattr(jax_if_imported(), "Array", None)
    for name, x in enc.arrays.items():
        if jarr is not None and isinstance(x, jarr) and x.is_deleted():
            raise ValueError(f"save_sharded: the array {name!r} cannot be copied to the host: it has been deleted (donated?)")
    blocks = _plan(enc.arrays, me, count)
    taken: list[Any] = []
    if host is not None:
        start_transfers(list(enc.arrays.values()))
        copied = []
        for b in blocks:
            if b.data is not None:
                try:
                    data = host.copy(b.data(), taken)
                except Exception as e:
                    host.release(taken)
                    raise ValueError(f"save_sharded: the array {b.name!r} cannot be copied to the host: {e}") from e
                b = b._replace(data=lambda data=data: data)
            copied.append(b)
        blocks = copied
        host.trim()
    writers = sorted({b.process for b in blocks})
    files = {w: f"{gen}-{w:05d}-of-{count:05d}.safetensors" for w in writers}
    arrays: Mapping[str, Any] = enc.arrays
    if host is not None:  # (the job keeps no reference to the caller's arrays: their memory may go)
        arrays = {name: _Shape(tuple(int(d) for d in x.shape), np.dtype(x.dtype)) for name, x in arrays.items()}
    return ShardedJob(meta, arrays, blocks, files, me, count, gen, taken)


class _Shape(NamedTuple):
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def _meet(job: ShardedJob, what: str, background: bool) -> None:
    if job.processes == 1:
        return
    name = f"spruce.io.save_sharded:{job.gen}:{what}"
    if background:
        barrier(name)
    else:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def write(
    p: str, job: ShardedJob, background: bool = False, commit: Callable[[], None] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write a prepared sharded save into directory ``p``: this process's piece, a barrier,
    then (process 0) the index, ``commit()`` and the removal of older pieces, and a barrier.
    A failure leaves nothing of this save in ``p`` (its pieces are removed, and ``p`` itself
    if this call created it and it is empty).  ``background``: the barriers use the
    distributed runtime's key-value store (``barrier``), safe off the main thread.

    Raises:
      OSError: an I/O failure, naming ``p``.
    """
    remote = _storage.is_url(p)
    created = not remote and not os.path.exists(p)
    me, files = job.me, job.files
    mine = [files[me]] if me in files else []
    try:
        try:
            if not remote:  # (an object store has no folders to make)
                if os.path.exists(p) and not os.path.isdir(p):
                    raise NotADirectoryError(20, os.strerror(20), p)
                os.makedirs(p, exist_ok=True)
            if me in files:
                _put_piece(p, files[me], [b for b in job.blocks if b.process == me], job.arrays, storage_options)
            if not remote:
                fsync_dir(p)
        except OSError as e:
            raise with_path(e, p) from None
        _meet(job, "written", background)
        if me == 0:
            mine = list(files.values())  # (every piece is complete once all met)
            tensors: dict[str, Any] = {}
            for name, x in job.arrays.items():
                tensors[name] = {"dtype": CODE_OF_NAME[np.dtype(x.dtype).name], "shape": [int(d) for d in x.shape], "slices": []}
            for b in job.blocks:
                tensors[b.name]["slices"].append([files[b.process], b.key, [[s, e] for s, e in zip(b.start, b.stop)]])
            doc = {"format": FORMAT, "version": VERSION, "metadata": job.meta, "tensors": tensors}
            text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
            try:
                _write_index(p, text, storage_options)
            except OSError as e:
                raise with_path(e, p) from None
            if remote:  # (not moved: pieces of an interrupted earlier save go before the commit)
                _remove_old_pieces(p, set(files.values()), storage_options)
            if commit is not None:
                commit()  # (which may move p: a fresh folder, with no older pieces)
            mine = []  # committed: nothing of it is removed any more
            if commit is None and not remote:
                _remove_old_pieces(p, set(files.values()), storage_options)
    except BaseException:
        _discard(p, mine, storage_options)
        if created:
            try:
                os.rmdir(p)
            except OSError:
                pass
        raise
    _meet(job, "committed", background)


def save_sharded(
    directory: Any, tree: Any, *, metadata: Mapping[str, str] | None = None, skip_code: bool = False,
    blocking: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> PendingSave | None:
    """Write a pytree as a sharded checkpoint: a directory of .safetensors pieces and an index.

    Each process writes only the shards its devices hold, and each distinct shard exactly once
    (not once per replica): a block held by several processes (a replicated array) goes to the
    one given the fewest bytes so far, cut into row blocks, one per process, from 8 MiB on, so
    that the processes share the writing of replicated data.  NumPy arrays and other host
    leaves — and, with several processes, jax.Arrays that live on one process's devices only —
    are shared out the same way (every process is expected to hold the same value).  Shards are
    copied to the host one at a time and streamed to the piece file, so no process gathers an
    array and the extra memory stays near one shard (with ``blocking=False``: the host copy of
    this process's shards, taken at call time, and nothing more).  The pieces are plain
    safetensors files
    (``safetensors.numpy.load_file`` reads them); ``index.json`` records each tensor's global
    shape and dtype, which block is in which file, your ``metadata`` and the tree's structure
    (as ``save`` stores it).  Format: docs/io.md.

    Atomic as a whole: the pieces get a new random generation name, and the checkpoint
    changes only when ``index.json`` is replaced (write to a temporary file, fsync, rename).  A
    process killed before that leaves the previous checkpoint at ``directory`` as it was
    (loadable), plus stray pieces that the next save removes; a save that fails with an
    error removes its own pieces (and ``directory`` if it created it).  After the new index is
    in place, the pieces of older checkpoints are deleted.

    Under ``jax.distributed`` every process must call it, with the same tree structure;
    ``directory`` must be on a file system all processes share.  Process 0 draws the
    generation name and broadcasts it; each process writes its piece; all meet at a barrier
    (``multihost_utils.sync_global_devices``; with ``blocking=False``, the distributed
    runtime's key-value store, which is safe in a background thread); process 0 then writes
    the index and removes old pieces, and all meet again, so that the checkpoint is complete
    on every process when the call (or ``wait()``) returns.

    Args:
      directory: the checkpoint directory (created if missing; parents must exist), or a URL
        (``s3://bucket/prefix``: fsspec, docs/io.md), where each piece is one upload and the
        index, uploaded last, commits the checkpoint.
      tree: the pytree; ``jax.Array`` leaves are written shard by shard (typed PRNG keys:
        their key data, shard by shard), other leaves as ``save`` writes them.
      metadata: extra str -> str entries (keys must not start with ``spruce.``).
      skip_code: as for ``save``: leave out functions and other code instead of refusing them.
      blocking: True (default): return when the checkpoint is complete.  False: return a
        ``PendingSave`` as soon as this process's shards are copied to host memory, and write
        in a background thread (see ``save``).
      storage_options: for a URL, keyword arguments for its fsspec filesystem.

    Returns:
      None, or with ``blocking=False`` a ``PendingSave``.

    Raises:
      ValueError: a leaf that cannot be stored or copied to the host (naming its key path or
        name), bad metadata; raised by the call even with ``blocking=False``.
      OSError: an I/O failure, naming ``directory`` (with ``blocking=False``: from
        ``PendingSave.wait()``, except a ``directory`` that is a file, found at call time).

    >>> import os, tempfile, numpy as np
    >>> d = os.path.join(tempfile.mkdtemp(), 'ckpt')
    >>> save_sharded(d, {'w': np.arange(4.0), 'step': 3})
    >>> sorted(os.listdir(d))[-1]
    'index.json'
    """
    p = _storage.local(os.fsdecode(directory))
    remote = _storage.resolve(p, storage_options) is not None  # (a bad URL fails before any work)
    if blocking:
        write(p, prepare(tree, metadata, skip_code), storage_options=storage_options)
        return None
    if not remote and os.path.exists(p) and not os.path.isdir(p):
        raise NotADirectoryError(20, os.strerror(20), p)
    job = prepare(tree, metadata, skip_code, DEFAULT_BUFFERS)

    def work() -> None:
        try:
            write(p, job, background=True, storage_options=storage_options)
        finally:
            DEFAULT_BUFFERS.release(job.buffers)

    return PendingSave(p, work)


# -- reading -----------------------------------------------------------------------------------------


def _bad(msg: str, path: str) -> CheckpointError:
    return CheckpointError(f"corrupted index: {msg}", path)


def parse_dir(path: str) -> Index:
    """Read and validate a sharded checkpoint's index and the headers of all its pieces.

    Raises:
      CheckpointError: the index is malformed; a piece file is missing or corrupted; a block
        is not in its piece, or its dtype or shape there differs from the index; blocks lie
        outside the tensor, overlap, or do not cover it.  The message names the tensor and
        the piece file.
      OSError: the index cannot be read.
    """
    index_path = _storage.join(path, INDEX)
    with open_regular(index_path) as f:
        raw = f.read(MAX_INDEX + 1)
    if len(raw) > MAX_INDEX:
        raise _bad(f"{INDEX} is larger than {MAX_INDEX} bytes", path)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad(f"{INDEX} is not JSON: {e}", path) from None
    if type(doc) is not dict or doc.get("format") != FORMAT or type(doc.get("version")) is not int:
        raise _bad(f"{INDEX} is not a {FORMAT} index", path)
    if doc["version"] > VERSION:
        raise CheckpointError(
            f"the index was written in {FORMAT} version {doc['version']}; this spruce reads version "
            f"{VERSION} and older: upgrade spruce",
            path,
        )
    meta = doc.get("metadata")
    if type(meta) is not dict or not all(type(k) is str and type(v) is str for k, v in meta.items()):
        raise _bad("metadata is not a str -> str object", path)
    table = doc.get("tensors")
    if type(table) is not dict:
        raise _bad("no tensors object", path)
    pieces: dict[str, Parsed] = {}
    tensors: dict[str, Entry] = {}
    slices: dict[str, list[Slice]] = {}
    for name, info in table.items():
        tensors[name], slices[name] = _tensor(path, name, info, pieces)
    parsed = Parsed(path, "sharded", tensors, dict(meta), 0, ())
    return Index(parsed, slices, pieces)


def _piece(path: str, file: str, name: str, pieces: dict[str, Parsed]) -> Parsed:
    got = pieces.get(file)
    if got is not None:
        return got
    where = f"tensor {name[:200]!r}: piece file {file[:200]!r}"
    if type(file) is not str or not _PIECE_FILE.match(file) or file.startswith(".") or file == INDEX:
        raise _bad(f"{where} is not a plain .safetensors file name in the directory", path)
    full = _storage.join(path, file)
    try:
        got = _safetensors.parse(full)
    except FileNotFoundError:
        raise CheckpointError(f"{where} is missing", path) from None
    except CheckpointError as e:
        raise CheckpointError(f"{where} is unreadable: {e}", path) from None
    except OSError as e:
        raise CheckpointError(f"{where} cannot be read: {e}", path) from None
    pieces[file] = got
    return got


def _tensor(path: str, name: str, info: Any, pieces: dict[str, Parsed]) -> tuple[Entry, list[Slice]]:
    where = f"tensor {name[:200]!r}"
    if type(info) is not dict:
        raise _bad(f"{where} is not an object", path)
    code = info.get("dtype")
    if type(code) is not str or code not in SAFETENSORS_CODES:
        raise _bad(f"{where} has an unknown dtype {str(code)[:40]!r}", path)
    shape = info.get("shape")
    if type(shape) is not list or len(shape) > 64 or not all(type(d) is int and d >= 0 for d in shape):
        raise _bad(f"{where} has a malformed shape {str(shape)[:80]}", path)
    shape_t = tuple(shape)
    try:
        dtype = dtype_of(SAFETENSORS_CODES[code])
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}", path) from None
    raw = info.get("slices")
    if type(raw) is not list or not raw:
        raise _bad(f"{where} has no slices", path)
    out: list[Slice] = []
    volume = 0
    for item in raw:
        if not (
            type(item) is list and len(item) == 3
            and type(item[0]) is str and type(item[1]) is str and type(item[2]) is list
        ):
            raise _bad(f"{where} has a malformed slice {str(item)[:120]}", path)
        file, key, bounds = item
        if len(bounds) != len(shape_t) or not all(
            type(b) is list and len(b) == 2 and all(type(v) is int for v in b) for b in bounds
        ):
            raise _bad(f"{where}: the slice {str(bounds)[:120]} in {file[:200]!r} does not fit shape {list(shape_t)}", path)
        start = tuple(b[0] for b in bounds)
        stop = tuple(b[1] for b in bounds)
        if not all(0 <= a <= b <= n for a, b, n in zip(start, stop, shape_t)):
            raise _bad(f"{where}: the slice {_text(start, stop)} in {file[:200]!r} lies outside its shape {list(shape_t)}", path)
        piece = _piece(path, file, name, pieces)
        entry = piece.tensors.get(key)
        if entry is None:
            raise CheckpointError(f"{where}: the piece file {file[:200]!r} has no block {key[:200]!r}", path)
        block = tuple(b - a for a, b in zip(start, stop))
        if entry.dtype != dtype or entry.shape != block:
            raise CheckpointError(
                f"{where}: the index says the slice {_text(start, stop)} (shape {list(block)}, "
                f"{SAFETENSORS_CODES[code]}) is the block {key[:200]!r} of {file[:200]!r}, which is "
                f"{entry.dtype.name}{list(entry.shape)}",
                path,
            )
        volume += shape_size(block)
        out.append(Slice(file, key, start, stop, entry))
    overlap = _overlap(out, len(shape_t))
    if overlap is not None:
        one, two = overlap
        raise CheckpointError(
            f"{where}: the slices {_text(one.start, one.stop)} in {one.file[:200]!r} and "
            f"{_text(two.start, two.stop)} in {two.file[:200]!r} overlap",
            path,
        )
    if volume != shape_size(shape_t):
        raise CheckpointError(
            f"{where}: its slices cover {volume} of its {shape_size(shape_t)} elements (shape "
            f"{list(shape_t)}; pieces {sorted({s.file for s in out})}): the checkpoint is incomplete",
            path,
        )
    return Entry(dtype, shape_t, shape_size(shape_t) * dtype.itemsize, -1), out


def _overlap(slices: list[Slice], ndim: int) -> tuple[Slice, Slice] | None:
    """Two slices (in index order) that share an element, or None.

    A sweep along the dimension with the most distinct block starts: the slices sorted by
    their start there, each compared (in every dimension) only with the earlier ones whose
    range in that dimension is still open.  For a tensor split along one dimension that is
    O(n log n) instead of comparing all pairs; for a grid, each block meets one row of blocks.
    Empty blocks hold no element and cannot overlap anything.
    """
    order = [i for i, s in enumerate(slices) if all(a < b for a, b in zip(s.start, s.stop))]
    if len(order) < 2:
        return None
    d = max(range(ndim), key=lambda k: len({slices[i].start[k] for i in order})) if ndim else 0
    if ndim:
        order.sort(key=lambda i: slices[i].start[d])
    active: list[tuple[int, int]] = []  # a heap of (stop in dimension d, index)
    for i in order:
        s = slices[i]
        if ndim:
            while active and active[0][0] <= s.start[d]:
                heapq.heappop(active)
        for _, j in active:
            o = slices[j]
            if all(max(a, c) < min(b, e) for a, b, c, e in zip(s.start, s.stop, o.start, o.stop)):
                return (o, s) if j < i else (s, o)
        heapq.heappush(active, (s.stop[d] if ndim else 1, i))
    return None


def _text(start: tuple[int, ...], stop: tuple[int, ...]) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in zip(start, stop)) + "]"


def layout(index: Index) -> dict[str, str]:
    """How each tensor is split, for ``spruce inspect``: ``'whole'`` (one block) or the grid of
    blocks per dimension and the block shapes, e.g. ``'4x1 blocks of (4, 6) in 1 file'``."""
    out: dict[str, str] = {}
    for name, slices in index.slices.items():
        if len(slices) == 1:
            out[name] = "whole"
            continue
        grid = "x".join(str(len({s.start[d] for s in slices})) for d in range(len(slices[0].start)))
        shapes = sorted({tuple(b - a for a, b in zip(s.start, s.stop)) for s in slices})
        shown = ", ".join(str(sh) for sh in shapes[:3]) + (", ..." if len(shapes) > 3 else "")
        files = len({s.file for s in slices})
        out[name] = f"{grid} blocks of {shown} in {files} file{'s' if files > 1 else ''}"
    return out


class Reader:
    """Arrays of a sharded checkpoint, assembled from its pieces (``MappedFile``s: read whole or
    memory-mapped, or with ``copy`` read array by array)."""

    def __init__(self, index: Index, copy: bool = False) -> None:
        self.index = index
        self.parsed = index.parsed
        self.copy = copy
        self.maps: dict[str, MappedFile] = {}

    def _map(self, s: Slice) -> MappedFile:
        m = self.maps.get(s.file)
        if m is None:
            m = self.maps[s.file] = MappedFile(self.index.pieces[s.file], self.copy)
        return m

    def _view(self, s: Slice) -> np.ndarray[Any, Any]:
        assert s.entry is not None
        return self._map(s).array(s.entry)

    def array(self, name: str) -> np.ndarray[Any, Any]:
        e = self.parsed.tensors.get(name)
        if e is None:
            raise CheckpointError(
                f"the stored structure names a tensor {name[:200]!r} that the index does not have", self.parsed.path
            )
        return self.region(name, tuple(slice(0, n) for n in e.shape))

    def region(self, name: str, index: Any, detach: bool = False) -> np.ndarray[Any, Any]:
        """The block ``index`` (a tuple of slices, as ``make_array_from_callback`` passes) of
        tensor ``name``: a view of the mapping when one stored block is exactly it, else a
        new array filled from the stored blocks it overlaps (only those pages are read).
        ``detach``: always a new array, and the pages of the stored blocks read for it are
        released from the process (``MappedFile.release``), so that placing a checkpoint on
        devices does not also keep the file's pages resident."""
        e = self.parsed.tensors[name]
        if index is None:
            index = ()
        bounds = [s.indices(n)[:2] for s, n in zip(tuple(index) + (slice(None),) * (len(e.shape) - len(tuple(index))), e.shape)]
        start = tuple(b[0] for b in bounds)
        stop = tuple(b[1] for b in bounds)
        for s in self.index.slices[name]:
            if s.start == start and s.stop == stop:
                v = self._view(s)
                if self.copy or not detach:  # (with copy, already a new array)
                    return v
                v = v.copy()
                self._release(s)
                return v
        out = np.empty(tuple(b - a for a, b in zip(start, stop)), e.dtype)
        for s in self.index.slices[name]:
            lo = [max(a, c) for a, c in zip(start, s.start)]
            hi = [min(b, d) for b, d in zip(stop, s.stop)]
            if any(a >= b for a, b in zip(lo, hi)):
                continue
            dst = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, start))
            src = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, s.start))
            m = self._map(s)
            if m.remote:  # only the overlapping bytes fetched
                assert s.entry is not None
                out[dst] = m.block(s.entry, src)
                continue
            out[dst] = self._view(s)[src]
            if detach:
                self._release(s)
        return out

    def _release(self, s: Slice) -> None:
        assert s.entry is not None
        self.maps[s.file].release(s.entry)

    def close(self) -> None:
        self.maps.clear()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
