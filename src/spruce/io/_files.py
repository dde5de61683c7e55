"""What both file formats share: the parsed header, the memory-mapped reader, opening only
regular files, atomic writes, and OSErrors that name the file."""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import secrets
import stat
from typing import IO, Any, Callable, Final, NamedTuple, cast

import numpy as np

from . import _storage
from ._errors import CheckpointError
from ._storage import RemoteFile


class Entry(NamedTuple):
    """One tensor of a file, as its header describes it (validated against the file size).

    ``offset`` is the absolute file offset of the data, or -1 for a compressed npz member
    (read through ``member``).  ``view`` is the dtype the stored bytes are reinterpreted as
    (npz files store ml_dtypes arrays as unsigned integers), or None.  ``strides`` are byte
    strides for a tensor that is a non-contiguous view of its storage (PyTorch files), or None
    for C order; the reader checked that every element lies inside the file.
    """

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    nbytes: int
    offset: int
    fortran: bool = False
    member: Any = None
    skip: int = 0
    view: np.dtype[Any] | None = None
    strides: tuple[int, ...] | None = None

    @property
    def final_dtype(self) -> np.dtype[Any]:
        return self.view if self.view is not None else self.dtype


class Parsed(NamedTuple):
    """A checkpoint's header: format name, tensors by name (file order), str->str metadata,
    and the identity of the file that was parsed (see ``identity``).  ``structure`` is a
    ``spruce.treedef`` document a reader derived from the file itself (PyTorch pickles), used
    instead of one in the metadata."""

    path: str
    format: str
    tensors: dict[str, Entry]
    metadata: dict[str, str]
    size: int
    ident: tuple[int, ...]
    structure: dict[str, Any] | None = None


def identity(f: IO[bytes]) -> tuple[int, ...]:
    """Device, inode, size and modification time of an open file (an object's size and ETag):
    if they change between parsing the header and reading the data, the file was replaced or
    rewritten."""
    if isinstance(f, RemoteFile):
        return f.ident
    s = os.fstat(f.fileno())
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns)


def with_path(e: OSError, path: str) -> OSError:
    """``e`` naming ``path`` as its file (an OSError from a read or write often names no file,
    or a temporary one): the same errno, so the same subclass (FileNotFoundError, ...)."""
    if e.filename == path and e.filename2 is None:
        return e
    if e.errno is not None:
        return OSError(e.errno, e.strerror or os.strerror(e.errno), path)
    text = str(e)
    return e if text.startswith(f"{path}: ") else OSError(f"{path}: {text}")


_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(mode: int, path: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    kind = next((text for test, text in _KINDS if test(mode)), "a special file")
    raise CheckpointError(f"not a regular file but {kind}; checkpoints are read from regular files only", path)


def open_regular(path: str) -> IO[bytes]:
    """Open ``path`` for reading if it is a regular file; a URL opens its object
    (``_storage.RemoteFile``, read by byte ranges).

    The path is checked with ``os.stat`` before opening (opening a FIFO would wait for a
    writer; opening a device can have effects), and the opened file again with ``os.fstat``
    (opened non-blocking, so a FIFO swapped in between cannot hang).

    Raises:
      IsADirectoryError: a directory.
      CheckpointError: a FIFO, a device, a socket: not a regular file.
      OSError: the file cannot be opened (naming ``path``).
    """
    if _storage.is_url(path):
        return cast(IO[bytes], RemoteFile(path))  # (the methods of a binary file that readers use)
    _check_regular(os.stat(path).st_mode, path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        _check_regular(os.fstat(fd).st_mode, path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_same(parsed: Parsed) -> IO[bytes]:
    """Open the parsed file again, checking that it is still the same file.

    Raises:
      CheckpointError: the file was replaced or changed since its header was read.
    """
    f = open_regular(parsed.path)
    if identity(f) != parsed.ident:
        f.close()
        raise CheckpointError("the file changed while being read (replaced or rewritten); load it again", parsed.path)
    return f


def shape_size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _read_into(f: IO[bytes], offset: int, buf: memoryview, path: str) -> None:
    """Fill ``buf`` with the bytes of ``f`` from ``offset``.

    Raises:
      CheckpointError: the file ends before ``buf`` is full (it was truncated after its header
        was read).
    """
    f.seek(offset)
    got, n = 0, len(buf)
    while got < n:
        k = cast(io.BufferedReader, f).readinto(buf[got:])  # (RemoteFile has readinto too)
        if not k:
            raise CheckpointError(
                f"the file was truncated while being read ({offset + got} of the {offset + n} bytes "
                "needed are there); load it again",
                path,
            )
        got += k


# Files of at most this many bytes are read into memory whole instead of being mapped.  A
# mapped file that another process truncates in place kills the reader with SIGBUS when it
# touches a page that was cut off; a copy cannot be disturbed.  The cost of the copy, measured
# on a shared 2-core machine with the file in the page cache: 100 MiB read in 25-60 ms into
# 100 MiB of process memory, against 0.5 ms to map it (5-15 ms to touch every page) and page
# cache pages that the kernel can reclaim and processes share.  64 MiB bounds that cost at
# about 20-40 ms and 64 MiB per load.
COPY_BELOW: Final = 64 << 20


class MappedFile:
    """The bytes of a parsed file that arrays view: the whole file read into memory (at most
    ``COPY_BELOW`` bytes), or mapped copy-on-write (larger files); arrays are read on first
    touch from a mapping, writable without changing the file, and the buffer or mapping lives
    as long as any array using it.  With ``copy``, nothing is mapped or kept: each ``array``
    is read from the file into a new array of its own."""

    def __init__(self, parsed: Parsed, copy: bool = False) -> None:
        self.parsed = parsed
        # an object of a remote store is never mapped: each array is read by byte ranges
        self.remote = _storage.is_url(parsed.path)
        self.copy = copy or self.remote
        self.handle: IO[bytes] | None = None
        self.mm: mmap.mmap | np.ndarray[Any, Any] | None = None
        if self.copy or not parsed.size:
            return
        with open_same(parsed) as f:
            if parsed.size <= COPY_BELOW:
                # page-aligned as a mapping is, so data aligned in the file is aligned in memory
                raw = np.empty(parsed.size + mmap.PAGESIZE, np.uint8)
                start = -raw.ctypes.data % mmap.PAGESIZE
                self.mm = raw[start : start + parsed.size]
                _read_into(f, 0, self.mm.data, parsed.path)
            else:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)

    def array(self, e: Entry) -> np.ndarray[Any, Any]:
        if e.nbytes == 0 or not self.parsed.size:
            arr = np.zeros(e.shape, e.dtype, order="F" if e.fortran else "C")
        elif self.copy:
            return self._read(e)
        elif e.strides is not None:
            arr = np.ndarray(e.shape, e.dtype, buffer=self.mm, offset=e.offset, strides=e.strides)
        else:
            arr = np.ndarray(e.shape, e.dtype, buffer=self.mm, offset=e.offset, order="F" if e.fortran else "C")
        return arr.view(e.view) if e.view is not None else arr

    def _read(self, e: Entry) -> np.ndarray[Any, Any]:
        """``e`` read from the file into a new array that owns its memory."""
        with self._opened() as f:
            if e.strides is not None:  # the span from the first element to the last, then packed
                span = e.dtype.itemsize + sum((n - 1) * s for n, s in zip(e.shape, e.strides))
                raw = np.empty(span, np.uint8)
                _read_into(f, e.offset, raw.data, self.parsed.path)
                view = np.ndarray(e.shape, e.dtype, buffer=raw, strides=e.strides)
                out: np.ndarray[Any, Any] = np.array(view.view(e.view) if e.view is not None else view, order="C")
                return out
            out = np.empty(e.shape, e.final_dtype, order="F" if e.fortran else "C")
            _read_into(f, e.offset, out.ravel(order="K").view(np.uint8).data, self.parsed.path)
            return out

    def _opened(self) -> contextlib.AbstractContextManager[IO[bytes]]:
        """The file, opened again (a local file: checked to be the parsed one) or, for a remote
        object, the one handle kept for all reads (its readahead block is reused)."""
        if not self.remote:
            return open_same(self.parsed)
        if self.handle is None:
            self.handle = open_same(self.parsed)
        return contextlib.nullcontext(self.handle)

    def block(self, e: Entry, index: Any) -> np.ndarray[Any, Any]:
        """A new array holding the block ``index`` (a tuple of slices) of ``e``.  From a remote
        object, only the bytes of the block are fetched: one span per contiguous run of it (a
        block of whole rows is one span), in at most ``_MAX_SPANS`` requests."""
        if not self.remote or e.strides is not None or e.fortran or e.offset < 0 or e.nbytes == 0:
            return np.array(self.array(e)[tuple(index)])
        index = tuple(index) + (slice(None),) * (len(e.shape) - len(tuple(index)))
        bounds = [sl.indices(n) for sl, n in zip(index, e.shape)]
        if any(step != 1 for _, _, step in bounds):
            return np.array(self.array(e)[index])
        start = [a for a, _, _ in bounds]
        stop = [max(a, b) for a, b, _ in bounds]
        shape = tuple(b - a for a, b in zip(start, stop))
        out = np.empty(shape, e.dtype)
        if out.size == 0:
            return out.view(e.view) if e.view is not None else out
        if shape_size(shape[:-1]) > _MAX_RUNS:  # (columns of a tall matrix) the whole tensor, once
            return np.array(self.array(e)[index])
        spans = _runs(e.shape, e.dtype.itemsize, start, stop)
        dest = out.reshape(-1).view(np.uint8)
        groups = _group(spans, _MAX_SPANS)
        with self._opened() as f:
            assert isinstance(f, RemoteFile)
            data = f.ranges([(e.offset + g[0][0], e.offset + g[-1][1]) for g in groups])
        pos = 0
        for g, raw in zip(groups, data):
            if len(raw) != g[-1][1] - g[0][0]:
                raise CheckpointError(
                    f"the object was truncated while being read (a read of {g[-1][1] - g[0][0]} bytes at "
                    f"{e.offset + g[0][0]} got {len(raw)}); load it again",
                    self.parsed.path,
                )
            chunk = memoryview(raw)
            for a, b in g:
                dest[pos : pos + b - a] = np.frombuffer(chunk[a - g[0][0] : b - g[0][0]], np.uint8)
                pos += b - a
        return out.view(e.view) if e.view is not None else out

    def release(self, e: Entry) -> None:
        """Drop the pages of the mapping that hold only ``e``'s bytes from this process's
        memory (``madvise(MADV_DONTNEED)``), after they were copied elsewhere: otherwise every
        page read through the mapping stays resident (counted in the process's RSS) until the
        mapping closes.  The file is unchanged and the pages stay in the page cache; reading them
        again through the mapping faults them back in from the file.  Only for tensors that no
        array returned to the caller views (a written copy-on-write page would lose its
        changes); a no-op where the platform lacks MADV_DONTNEED."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if not isinstance(self.mm, mmap.mmap) or advice is None or e.strides is not None or e.offset < 0:
            return
        start = -(-e.offset // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the tensor only
        stop = (e.offset + e.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if stop > start:
            self.mm.madvise(advice, start, stop - start)


# A block read from a remote object is fetched in at most this many requests: runs of it beyond
# that are fetched in groups, each group's span whole (the gaps between its runs included).
_MAX_SPANS: Final = 64
_MAX_RUNS: Final = 1 << 16


def _runs(shape: tuple[int, ...], itemsize: int, start: list[int], stop: list[int]) -> list[tuple[int, int]]:
    """The contiguous byte runs ``(begin, end)``, in order, of the block ``start:stop`` of a
    C-order array of ``shape``: the block is whole from some dimension ``k`` on, so each run is
    one index of the dimensions before ``k`` and the span ``start[k]:stop[k]`` of ``k``."""
    n = len(shape)
    k = n
    while k > 0 and start[k - 1] == 0 and stop[k - 1] == shape[k - 1]:
        k -= 1
    strides = [itemsize] * n
    for d in range(n - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    if k == 0:
        return [(0, shape_size(shape) * itemsize)]
    length = (stop[k - 1] - start[k - 1]) * strides[k - 1]
    base = start[k - 1] * strides[k - 1]
    runs = [(base, base + length)]
    for d in range(k - 2, -1, -1):
        runs = [(a + i * strides[d], b + i * strides[d]) for i in range(start[d], stop[d]) for a, b in runs]
    return runs


def _group(spans: list[tuple[int, int]], most: int) -> list[list[tuple[int, int]]]:
    """``spans`` in at most ``most`` groups of consecutive spans, as evenly as they divide."""
    size = -(-len(spans) // most)
    return [spans[i : i + size] for i in range(0, len(spans), size)]


def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Write a file atomically: ``write(tmp)`` fills a new temporary file in the same folder,
    which is flushed to disk (fsync) and renamed over ``path`` (os.replace), and the folder is
    fsynced.  Readers see the old file or the new one, never a mix; if anything fails (or the
    process is interrupted) before the rename, the temporary file is removed and ``path`` is
    untouched.  A process killed with SIGKILL may leave ``.spruce-<random>.tmp`` behind.

    The temporary name has a fixed length (24 characters), so any legal file name can be
    saved.  An existing file's permission bits are kept; a new file gets the bits ``open()``
    would give it (0o666 minus the umask, or what the folder's default ACL says): they are
    read from the temporary file, which is created with mode 0o666 like ``open()`` creates
    files, so the process-wide umask is never changed.

    A symlink at ``path`` stays: the file it points to is written (atomically, beside that
    file).  Only a regular file is ever replaced: a named pipe, a device, a socket or a
    directory at ``path`` (or at a symlink's target) is refused before anything is written.

    Raises:
      IsADirectoryError: ``path`` is a directory.
      OSError: ``path`` exists but is not a regular file (a FIFO, a device, a socket); any I/O
        failure (a missing folder, no permission, a full disk), always naming ``path`` (never
        the temporary file).
    """
    target = os.path.realpath(path) if os.path.islink(path) else path
    folder = os.path.dirname(os.path.abspath(target))
    try:
        _check_replaceable(target, path)
        tmp = os.path.join(folder, f".spruce-{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        os.close(fd)
        try:
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except OSError:
                mode = stat.S_IMODE(os.stat(tmp).st_mode)  # 0o666 & ~umask, as open() gives
            write(tmp)  # (the safetensors package replaces tmp by a file of its own, mode 0o600)
            if stat.S_IMODE(os.stat(tmp).st_mode) != mode:
                os.chmod(tmp, mode)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        raise with_path(e, path) from None
    fsync_dir(folder)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with ``atomic_write``: whole or not at all, a
    symlink's target written, anything but a regular file refused (same errors)."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def _check_replaceable(target: str, path: str) -> None:
    """Raise unless ``target`` (``path`` or its symlink's target) is missing or a regular file."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory, not a regular file", path)
    kind = next((text for test, text in _KINDS if test(mode)), "a special file")
    raise OSError(f"{path}: not a regular file but {kind}; only regular files are written (nothing written)")


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries (new and renamed files) to disk; best effort (some file
    systems cannot open or fsync a directory)."""
    try:
        dfd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
