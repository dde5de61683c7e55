"""Where checkpoints live: a local path (os calls, nothing else needed) or a URL handled by
fsspec (``memory://``, ``s3://bucket/prefix``, ``gs://...``; ``file://`` URLs are local paths).

fsspec is an optional dependency (``pip install spruce[cloud]``), imported only when a URL is
used.  Object stores have no atomic rename, so what is written here is written whole: a file in
one put (``put_file`` of a finished local temporary file, or ``pipe_file`` of bytes; a large
upload is a multipart upload that appears only when complete, and is aborted on failure).

Reading goes through ``RemoteFile``, a read-only file over one object whose reads are byte
ranges: small reads (headers) fetch one block of ``_READAHEAD`` bytes and are served from it,
large reads fetch exactly what is asked; ``ranges`` fetches several spans in one call
(``cat_ranges``, concurrent on asynchronous stores).  The storage options of a read are those
of the public call in progress (``reading``), so that the readers of each format keep taking a
path.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import re
import zlib
from typing import Any, Callable, Final, Iterator, Mapping

_URL: Final = re.compile(r"\A([A-Za-z][A-Za-z0-9+.\-]+)://")
_READAHEAD: Final = 64 << 10
_OPTIONS: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("spruce_storage_options", default=None)


def is_url(path: str) -> bool:
    """True if ``path`` starts with ``scheme://`` (a scheme of two or more characters, so a
    Windows drive letter is not one)."""
    return _URL.match(path) is not None


def scheme(path: str) -> str:
    m = _URL.match(path)
    return m.group(1).lower() if m else ""


def join(path: str, name: str) -> str:
    """``name`` inside the folder (or prefix) ``path``."""
    if is_url(path):
        return path.rstrip("/") + "/" + name
    return os.path.join(path, name)


def _fsspec() -> Any:
    from .._extras import require

    require("spruce.io's URLs (object stores, memory://)", "cloud", "fsspec")  # (or an ImportError naming the extra)
    import fsspec

    return fsspec


def resolve(path: str, options: Mapping[str, Any] | None = None) -> tuple[Any, str] | None:
    """The fsspec filesystem and its path for a URL, or None for a local path (a ``file://``
    URL included: see ``local``).

    Raises:
      ValueError: a scheme fsspec does not know (naming it).
      ImportError: fsspec is not installed, or the scheme's backend (s3fs, gcsfs) is not.
    """
    if not is_url(path):
        return None
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"storage_options must be a mapping (keyword arguments for fsspec), not {type(options).__name__}")
    fsspec = _fsspec()
    name = scheme(path)
    try:
        fs, inner = fsspec.core.url_to_fs(path, **dict(options or {}))
    except ValueError as e:
        if "protocol" in str(e).lower() and "known" in str(e).lower():
            raise ValueError(
                f"spruce.io: {path[:200]!r}: fsspec knows no storage for the URL scheme {name!r} "
                "(memory://, file://, s3://, gs://, ... with their backend installed)"
            ) from None
        raise
    except ImportError as e:
        raise ImportError(f"spruce.io: {path[:200]!r}: the {name}:// scheme needs a package fsspec lacks: {e}") from None
    if _is_local(fs):
        return None
    return fs, inner


def _is_local(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def local(path: str) -> str:
    """A ``file://`` URL as the local path it names (read and written with os calls, atomic
    renames and memory maps included); other paths unchanged."""
    if scheme(path) != "file":
        return path
    fs, inner = _fsspec().core.url_to_fs(path)
    return str(inner) if _is_local(fs) else path


@contextlib.contextmanager
def reading(options: Mapping[str, Any] | None) -> Iterator[None]:
    """The storage options that URLs opened for reading inside use."""
    token = _OPTIONS.set(options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current(path: str) -> tuple[Any, str]:
    """``resolve`` with the options of the call in progress (the path must be a URL)."""
    got = resolve(path, _OPTIONS.get())
    assert got is not None
    return got


# -- reading -----------------------------------------------------------------------------------------


class RemoteFile:
    """A read-only, seekable binary file over one object of an fsspec filesystem, read by byte
    ranges (see the module docstring).  ``ident`` identifies the object's version (size and
    ETag or modification time), as ``_files.identity`` does for a local file."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, self.path = current(url)
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(self.path)
        try:
            info = self.fs.info(self.path)
        except FileNotFoundError:  # (backends raise it without an errno)
            raise FileNotFoundError(errno.ENOENT, "No such object", url) from None
        if info.get("type") == "directory":
            raise IsADirectoryError(21, "Is a directory (a prefix) but not a sharded checkpoint (no index.json)", url)
        self.size = int(info.get("size") or 0)
        tag = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or info.get("created")
        self.ident = (0, 0, self.size, zlib.crc32(repr(tag).encode()))
        self.pos = 0
        self.buf = b""
        self.buf_at = 0
        self.fetched = 0  # bytes received, for tests and measurements

    def fetch(self, start: int, stop: int) -> bytes:
        stop = min(stop, self.size)
        if stop <= start:
            return b""
        data = bytes(self.fs.cat_file(self.path, start=start, end=stop))
        self.fetched += len(data)
        return data

    def ranges(self, spans: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(start, stop)`` span, fetched together."""
        if not spans:
            return []
        if len(spans) == 1:
            return [self.fetch(*spans[0])]
        out = self.fs.cat_ranges([self.path] * len(spans), [a for a, _ in spans], [b for _, b in spans], on_error="raise")
        data = [bytes(x) for x in out]
        self.fetched += sum(len(x) for x in data)
        return data

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        n = max(0, min(n, self.size - self.pos))
        lo = self.pos - self.buf_at
        if 0 <= lo and lo + n <= len(self.buf):
            out = self.buf[lo : lo + n]
        elif n < _READAHEAD:
            self.buf_at, self.buf = self.pos, self.fetch(self.pos, self.pos + _READAHEAD)
            out = self.buf[:n]
        else:
            out = self.fetch(self.pos, self.pos + n)
        self.pos += len(out)
        return out

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.buf = b""

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exists(path: str, options: Mapping[str, Any] | None = None) -> bool:
    """True if the file (object) ``path`` exists."""
    got = resolve(path, options if options is not None else _OPTIONS.get())
    if got is None:
        return os.path.exists(local(path))
    fs, inner = got
    with contextlib.suppress(Exception):
        fs.invalidate_cache(inner)
    return bool(fs.exists(inner))


# -- writing -----------------------------------------------------------------------------------------


def put(url: str, fill: Callable[[str], None], options: Mapping[str, Any] | None) -> None:
    """Write the object ``url`` whole: ``fill(tmp)`` writes a local temporary file, which is
    uploaded in one ``put_file`` (the object appears only once complete) and removed.

    Raises:
      OSError: the upload or the temporary file failed, naming ``url``; nothing is left at
        ``url`` (an object that was there before stays as it was).
    """
    got = resolve(url, options)
    assert got is not None
    fs, inner = got
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".spruce-", suffix=".tmp")
    os.close(fd)
    try:
        fill(tmp)
        fs.put_file(tmp, inner)
    except OSError as e:
        raise _naming(e, url) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_bytes(url: str, data: bytes, options: Mapping[str, Any] | None) -> None:
    """Write the small object ``url`` in one put (``pipe_file``)."""
    got = resolve(url, options)
    assert got is not None
    fs, inner = got
    try:
        fs.pipe_file(inner, data)
    except OSError as e:
        raise _naming(e, url) from None


def listdir(url: str, options: Mapping[str, Any] | None) -> list[str]:
    """The names directly under the prefix ``url`` (fresh: the listing cache is dropped), or
    [] if there are none."""
    got = resolve(url, options)
    assert got is not None
    fs, inner = got
    with contextlib.suppress(Exception):
        fs.invalidate_cache(inner)
    try:
        entries = fs.ls(inner, detail=False)
    except FileNotFoundError:
        return []
    base = inner.rstrip("/") + "/"
    return [str(e)[len(base) :] if str(e).startswith(base) else str(e).rsplit("/", 1)[-1] for e in entries]


def remove(url: str, options: Mapping[str, Any] | None) -> None:
    """Delete the object ``url`` (best effort: a missing object is not an error)."""
    got = resolve(url, options)
    assert got is not None
    fs, inner = got
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(inner)


def _naming(e: OSError, url: str) -> OSError:
    if e.errno is not None:
        return OSError(e.errno, e.strerror or os.strerror(e.errno), url)
    return OSError(f"{url}: {e}")


class RemoteStore:
    """The storage operations a folder of checkpoints needs (list, test, remove, write and read
    small files) on an fsspec filesystem, for URLs; every listing and test asks the store
    (caches dropped first), so a long-lived reader sees other processes' writes.  An object
    store has no atomic rename (``atomic_rename`` is False): what must appear whole is written
    whole under its final name, and a commit marker written last says it is complete."""

    atomic_rename = False

    def __init__(self, url: str, options: Mapping[str, Any] | None) -> None:
        got = resolve(url, options)
        assert got is not None
        self.fs: Any = got[0]
        self.options = options

    def _inner(self, path: str) -> str:
        got = resolve(path, self.options)
        assert got is not None
        with contextlib.suppress(Exception):
            got[0].invalidate_cache(got[1])
        return str(got[1])

    def join(self, folder: str, name: str) -> str:
        return join(folder, name)

    def list(self, folder: str) -> list[str]:
        return listdir(folder, self.options)

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(self._inner(path)))

    def is_file(self, path: str) -> bool:
        return bool(self.fs.isfile(self._inner(path)))

    def is_dir(self, path: str) -> bool:
        return bool(self.fs.isdir(self._inner(path)))

    def makedirs(self, path: str) -> None:
        """Nothing: a prefix exists once an object is written under it."""

    def rename(self, src: str, dst: str) -> None:
        """Not available: an object store has no atomic rename (callers write in place)."""
        raise OSError(errno.ENOTSUP, "an object store has no atomic rename", src)

    def hold(self, folder: str) -> tuple[Any, bool]:
        """No lock on an object store: never known to be a folder's only user."""
        return None, False

    def share(self, handle: Any) -> None:
        pass

    def release(self, handle: Any) -> None:
        pass

    def remove_tree(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._inner(path), recursive=True)

    def remove_file(self, path: str) -> None:
        remove(path, self.options)

    def write_small(self, path: str, data: bytes) -> None:
        write_bytes(path, data, self.options)

    def read_small(self, path: str, limit: int = (1 << 20) + 1) -> bytes:
        """The first ``limit`` bytes of the object ``path``.

        Raises:
          FileNotFoundError: no such object (naming ``path``).
        """
        inner = self._inner(path)
        try:
            return bytes(self.fs.cat_file(inner, start=0, end=limit))
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "No such object", path) from None
