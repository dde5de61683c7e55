"""The .npz format: a zip archive of .npy arrays (NumPy's ``savez``), read without pickle.

Reading: the zip directory is read by ``zipfile``; each member's local header and .npy header
are parsed and checked here (magic, header size, a literal dict parsed with
``ast.literal_eval`` as NumPy does, no object dtypes, a data size that matches shape x dtype and
stays inside the file).  Stored (uncompressed) members — what ``numpy.savez`` and spruce write
— are memory-mapped; compressed members (``savez_compressed``) are decompressed when loaded,
after checking that the declared size is one deflate can produce from the compressed bytes.

Writing: like ``numpy.savez`` (uncompressed, zip64), with each array's data aligned to 64 bytes
in the file; the str -> str metadata is the member ``__metadata__.npy`` (a uint8 array of its
JSON).  ml_dtypes arrays (bfloat16, float8) are stored as unsigned integers of the same width,
their dtype names kept in the metadata entry ``spruce.npz_dtypes``.
"""

from __future__ import annotations

import ast
import json
import struct
import zipfile
import zlib
from typing import IO, Any, Final

import numpy as np

from ._dtypes import NPZ_NAMES, dtype_of, needs_ml_dtypes
from ._errors import CheckpointError
from ._files import Entry, Parsed, identity, open_regular, shape_size

METADATA_MEMBER: Final = "__metadata__.npy"
DTYPES_KEY: Final = "spruce.npz_dtypes"
MAX_NPY_HEADER: Final = 65536
MAX_METADATA: Final = 100_000_000
# deflate cannot expand data by more than about 1032:1.
_DEFLATE_RATIO: Final = 1032
_ZIP_ERRORS: Final = (
    zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, struct.error, ValueError, NotImplementedError
)


def _pread(f: IO[bytes], offset: int, n: int) -> bytes:
    f.seek(offset)
    return f.read(n)


def _npy_header(head: bytes, name: str, path: str) -> tuple[np.dtype[Any], tuple[int, ...], bool, int]:
    """``(dtype, shape, fortran_order, header length)`` of the .npy data starting with ``head``."""
    where = f"member {name[:200]!r}"
    if head[:6] != b"\x93NUMPY" or len(head) < 10:
        raise CheckpointError(f"{where} is not a .npy array", path)
    major = head[6]
    if major == 1:
        (hl,) = struct.unpack("<H", head[8:10])
        start = 10
    elif major in (2, 3) and len(head) >= 12:
        (hl,) = struct.unpack("<I", head[8:12])
        start = 12
    else:
        raise CheckpointError(f"{where} has an unknown .npy version {major}", path)
    if hl > MAX_NPY_HEADER or start + hl > len(head):
        raise CheckpointError(f"{where} has a .npy header of {hl} bytes, larger than the member or than {MAX_NPY_HEADER}", path)
    try:
        text = head[start : start + hl].decode("latin1" if major < 3 else "utf-8")
        d = ast.literal_eval(text)
    except (UnicodeDecodeError, ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise CheckpointError(f"{where} has a corrupted .npy header: {e}", path) from None
    if type(d) is not dict or set(d) != {"descr", "fortran_order", "shape"}:
        raise CheckpointError(f"{where} has a corrupted .npy header", path)
    shape = d["shape"]
    if (
        type(shape) is not tuple
        or len(shape) > 64
        or not all(type(x) is int and x >= 0 for x in shape)
        or type(d["fortran_order"]) is not bool
    ):
        raise CheckpointError(f"{where} has a corrupted .npy header (shape {str(shape)[:80]})", path)
    try:
        dtype = np.lib.format.descr_to_dtype(d["descr"])
    except Exception as e:  # NumPy does not document what a malformed descr raises
        raise CheckpointError(f"{where} has an unreadable dtype {str(d['descr'])[:80]}: {e}", path) from None
    if dtype.hasobject:
        raise CheckpointError(
            f"{where} holds Python objects (pickled data); spruce.io never unpickles", path
        )
    return dtype, shape, d["fortran_order"], start + hl


def _read_metadata(f: IO[bytes], zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, path: str) -> dict[str, str]:
    entry = _member(f, zf, info, size, path)
    if entry.dtype != np.uint8 or len(entry.shape) != 1 or entry.nbytes > MAX_METADATA:
        raise CheckpointError(f"corrupted {METADATA_MEMBER}: not a uint8 vector of at most 100 MB", path)
    raw = read_member(zf, entry, path) if entry.offset < 0 else _pread(f, entry.offset, entry.nbytes)
    try:
        meta = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"corrupted {METADATA_MEMBER}: {e}", path) from None
    if type(meta) is not dict or not all(type(k) is str and type(v) is str for k, v in meta.items()):
        raise CheckpointError(f"corrupted {METADATA_MEMBER}: not a str -> str object", path)
    return meta


def _member(f: IO[bytes], zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int, path: str) -> Entry:
    name = info.filename
    where = f"member {name[:200]!r}"
    if info.flag_bits & 0x1:
        raise CheckpointError(f"{where} is encrypted", path)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(f"{where} uses an unsupported compression method {info.compress_type}", path)
    local = _pread(f, info.header_offset, 30) if 0 <= info.header_offset <= size - 30 else b""
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise CheckpointError(f"truncated or corrupted: the local header of {where} is missing", path)
    n, m = struct.unpack("<HH", local[26:30])
    data = info.header_offset + 30 + n + m
    if data + info.compress_size > size:
        raise CheckpointError(
            f"truncated, or {where} lies: its {info.compress_size} bytes at offset {data} run past "
            f"the end of the {size}-byte file",
            path,
        )
    if info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != info.compress_size:
            raise CheckpointError(f"corrupted: {where} is stored with two different sizes", path)
        head = _pread(f, data, min(info.file_size, MAX_NPY_HEADER + 12))
    else:
        if info.file_size > info.compress_size * _DEFLATE_RATIO + 65536:
            raise CheckpointError(
                f"{where} declares {info.file_size} bytes uncompressed from "
                f"{info.compress_size} compressed bytes, more than deflate can produce",
                path,
            )
        try:
            with zf.open(info) as s:
                head = s.read(min(info.file_size, MAX_NPY_HEADER + 12))
        except _ZIP_ERRORS as e:
            raise CheckpointError(f"corrupted {where}: {e}", path) from None
    dtype, shape, fortran, hlen = _npy_header(head, name, path)
    nbytes = shape_size(shape) * dtype.itemsize
    if nbytes != info.file_size - hlen:
        raise CheckpointError(
            f"{where} says shape {list(shape)} of {dtype} ({nbytes} bytes) but holds "
            f"{info.file_size - hlen} bytes of data",
            path,
        )
    if info.compress_type == zipfile.ZIP_STORED:
        return Entry(dtype, shape, nbytes, data + hlen, fortran)
    return Entry(dtype, shape, nbytes, -1, fortran, info, hlen)


def parse(path: str) -> Parsed:
    """Read and validate the directory and every .npy header of an .npz file (no array data,
    except for compressed members, whose first bytes are decompressed to read their header).

    Raises:
      CheckpointError: not a zip archive, truncated, a member that is not a plain .npy array,
        or headers that lie.
      OSError: the file cannot be opened.
    """
    with open_regular(path) as f:
        ident = identity(f)
        size = ident[2]
        try:
            zf = zipfile.ZipFile(f)
        except _ZIP_ERRORS as e:
            raise CheckpointError(f"not an .npz file (a zip archive of .npy arrays), or truncated: {e}", path) from None
        with zf:
            infos = zf.infolist()
            seen = set()
            for info in infos:
                if info.filename in seen:
                    raise CheckpointError(f"corrupted: the member {info.filename[:200]!r} appears twice", path)
                seen.add(info.filename)
            meta: dict[str, str] = {}
            views: dict[str, str] = {}
            for info in infos:
                if info.filename == METADATA_MEMBER:
                    meta = _read_metadata(f, zf, info, size, path)
                    views = _views(meta, path)
            tensors: dict[str, Entry] = {}
            for info in infos:
                if info.filename == METADATA_MEMBER:
                    continue
                if not info.filename.endswith(".npy"):
                    raise CheckpointError(f"the member {info.filename[:200]!r} is not a .npy array", path)
                name = info.filename[: -len(".npy")]
                entry = _member(f, zf, info, size, path)
                if name in views:
                    view = dtype_of(views[name])
                    if entry.dtype.kind != "u" or entry.dtype.itemsize != view.itemsize:
                        raise CheckpointError(
                            f"corrupted {DTYPES_KEY}: {name!r} is not stored as {view.itemsize}-byte integers", path
                        )
                    entry = entry._replace(view=view)
                tensors[name] = entry
    return Parsed(path, "npz", tensors, meta, size, ident)


def _views(meta: dict[str, str], path: str) -> dict[str, str]:
    raw = meta.get(DTYPES_KEY)
    if raw is None:
        return {}
    try:
        views = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"corrupted {DTYPES_KEY}: {e}", path) from None
    if type(views) is not dict or not all(type(v) is str and v in NPZ_NAMES for v in views.values()):
        raise CheckpointError(f"corrupted {DTYPES_KEY}", path)
    return views


def read_member(zf: zipfile.ZipFile, e: Entry, path: str) -> np.ndarray[Any, Any]:
    """Decompress one compressed member into a new array (sizes were checked by parse)."""
    name = e.member.filename
    arr = np.empty(shape_size(e.shape), e.dtype)
    buf = arr.view(np.uint8).data
    try:
        with zf.open(e.member) as stream:
            s: Any = stream
            if len(s.read(e.skip)) != e.skip:
                raise CheckpointError(f"member {name!r} is truncated", path)
            got = 0
            while got < e.nbytes:
                k = s.readinto(buf[got:])
                if not k:
                    raise CheckpointError(f"member {name!r} is truncated: {got} of {e.nbytes} bytes", path)
                got += k
            if s.read(1):
                raise CheckpointError(f"member {name!r} holds more data than its header says", path)
    except _ZIP_ERRORS as err:
        raise CheckpointError(f"corrupted member {name!r}: {err}", path) from None
    arr = arr.reshape(e.shape, order="F" if e.fortran else "C")
    return arr.view(e.view) if e.view is not None else arr


def write(tmp: str, arrays: dict[str, np.ndarray[Any, Any]], metadata: dict[str, str], path: str) -> None:
    """Write ``arrays`` (contiguous, little-endian, supported dtypes) and ``metadata`` to the
    file ``tmp`` as an uncompressed .npz (``path``, the final name, is for messages)."""
    meta = dict(metadata)
    views = {name: str(arr.dtype.name) for name, arr in arrays.items() if needs_ml_dtypes(arr.dtype.name)}
    if views:
        meta[DTYPES_KEY] = json.dumps(views)
    with open(tmp, "wb") as raw:
        with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            _write_member(zf, raw, METADATA_MEMBER, np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8))
            for name, arr in arrays.items():
                if name in views:
                    arr = arr.view(np.dtype(f"<u{arr.dtype.itemsize}"))
                _write_member(zf, raw, name + ".npy", arr)
        raw.flush()


def _write_member(zf: zipfile.ZipFile, raw: IO[bytes], name: str, arr: np.ndarray[Any, Any]) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    # Pad the local header's extra field so that the .npy data (whose own header NumPy pads to
    # 64 bytes) starts 64-byte aligned in the file: 30 fixed bytes, the name, 4 bytes of our
    # extra field's header, 20 bytes of zip64 extra field.
    base = raw.tell() + 30 + len(name.encode("utf-8")) + 4 + 20
    pad = (-base) % 64
    info.extra = struct.pack("<HH", 0xD935, pad) + bytes(pad)
    with zf.open(info, "w", force_zip64=True) as w:
        np.lib.format.write_array(w, arr, allow_pickle=False)
