"""What both file formats share: the parsed header, the memory-mapped reader, atomic writes."""

from __future__ import annotations

import mmap
import os
import secrets
import stat
from typing import IO, Any, Callable, NamedTuple

import numpy as np

from ._errors import CheckpointError


class Entry(NamedTuple):
    """One tensor of a file, as its header describes it (validated against the file size).

    ``offset`` is the absolute file offset of the data, or -1 for a compressed npz member
    (read through ``member``).  ``view`` is the dtype the stored bytes are reinterpreted as
    (npz files store ml_dtypes arrays as unsigned integers), or None.
    """

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    nbytes: int
    offset: int
    fortran: bool = False
    member: Any = None
    skip: int = 0
    view: np.dtype[Any] | None = None

    @property
    def final_dtype(self) -> np.dtype[Any]:
        return self.view if self.view is not None else self.dtype


class Parsed(NamedTuple):
    """A checkpoint's header: format name, tensors by name (file order), str->str metadata,
    and the identity of the file that was parsed (see ``identity``)."""

    path: str
    format: str
    tensors: dict[str, Entry]
    metadata: dict[str, str]
    size: int
    ident: tuple[int, ...]


def identity(fd: int) -> tuple[int, ...]:
    """Device, inode, size and modification time of an open file: if they change between
    parsing the header and mapping the data, the file was replaced or rewritten."""
    s = os.fstat(fd)
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns)


def open_same(parsed: Parsed) -> IO[bytes]:
    """Open the parsed file again, checking that it is still the same file.

    Raises:
      CheckpointError: the file was replaced or changed since its header was read.
    """
    f = open(parsed.path, "rb")
    if identity(f.fileno()) != parsed.ident:
        f.close()
        raise CheckpointError("the file changed while being read (replaced or rewritten); load it again", parsed.path)
    return f


def shape_size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class MappedFile:
    """The whole file mapped copy-on-write: arrays are views into it, read on first touch,
    writable without changing the file.  The mapping lives as long as any array using it."""

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.mm: mmap.mmap | None = None
        with open_same(parsed) as f:
            if parsed.size:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)

    def array(self, e: Entry) -> np.ndarray[Any, Any]:
        if self.mm is None or e.nbytes == 0:
            arr = np.zeros(e.shape, e.dtype, order="F" if e.fortran else "C")
        else:
            arr = np.ndarray(e.shape, e.dtype, buffer=self.mm, offset=e.offset, order="F" if e.fortran else "C")
        return arr.view(e.view) if e.view is not None else arr


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Write a file atomically: ``write(tmp)`` fills a new temporary file in the same folder,
    which is flushed to disk (fsync) and renamed over ``path`` (os.replace), and the folder is
    fsynced.  Readers see the old file or the new one, never a mix; if anything fails (or the
    process is interrupted) before the rename, the temporary file is removed and ``path`` is
    untouched.  A process killed with SIGKILL may leave ``.<name>.<random>.tmp`` behind.
    An existing file's permission bits are kept.
    """
    path = os.fspath(path)
    folder, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{base}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    os.close(fd)
    try:
        try:
            mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = None
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
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
