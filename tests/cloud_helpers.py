"""What the object-store tests share: fsspec filesystems that log what is read and written
(registered under their own URL schemes, so that spruce reaches them as it reaches any store),
and moto's S3 server on a loopback port.

- ``countmem://``: fsspec's in-memory filesystem, logging every byte range read
  (``READS``: ``(path, start, end, bytes received)``) and every object written (``WRITES``,
  in order).
- ``counts3://``: s3fs against the moto server, logging the ranges read the same way.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any, Iterator

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

READS: list[tuple[str, Any, Any, int]] = []
WRITES: list[str] = []


class CountingMemoryFileSystem(MemoryFileSystem):  # type: ignore[misc]
    protocol = "countmem"

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(str(path).removeprefix("countmem://")))

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        data = super().cat_file(path, start=start, end=end, **kwargs)
        READS.append((self._strip_protocol(path), start, end, len(data)))
        return bytes(data)

    def put_file(self, lpath: str, rpath: str, *args: Any, **kwargs: Any) -> None:
        super().put_file(lpath, rpath, *args, **kwargs)
        WRITES.append(self._strip_protocol(rpath))

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        super().pipe_file(path, value, *args, **kwargs)
        WRITES.append(self._strip_protocol(path))


fsspec.register_implementation("countmem", CountingMemoryFileSystem, clobber=True)


def fetched(prefix: str = "") -> int:
    """Bytes read (since the logs were last cleared) from objects whose path starts with
    ``prefix``."""
    return sum(n for p, _, _, n in READS if p.startswith(prefix))


def clear() -> None:
    READS.clear()
    WRITES.clear()


def register_counting_s3() -> None:
    """``counts3://``: s3fs, logging each range read into READS."""
    from s3fs import S3FileSystem

    class CountingS3FileSystem(S3FileSystem):  # type: ignore[misc]
        protocol = ("counts3",)

        async def _cat_file(self, path: str, version_id: Any = None, start: Any = None, end: Any = None, **kw: Any) -> bytes:
            data = await super()._cat_file(path, version_id=version_id, start=start, end=end, **kw)
            READS.append((path, start, end, len(data)))
            return bytes(data)

    fsspec.register_implementation("counts3", CountingS3FileSystem, clobber=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, Any]]:
    """moto's S3 server on a free loopback port with ``bucket`` made; yields the
    ``storage_options`` that reach it (dummy credentials)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # (one line per request otherwise)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        options = {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "eu-west-1"},
        }
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir(bucket)
        yield options
    finally:
        server.stop()
