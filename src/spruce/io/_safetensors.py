"""The safetensors format: header parsing and validation (our own), writing (the safetensors
package).

A safetensors file is an 8-byte little-endian header length ``N``, ``N`` bytes of UTF-8 JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``),
then the data; offsets are relative to the end of the header.  The header is checked here
before anything else touches the file: a declared length larger than the file or than the
format's 100 MB limit, bad JSON, unknown dtypes, sizes that do not match shape x dtype, and
offsets that overlap, leave gaps or run past the end are all errors (the rules of the
safetensors library), found without reading or allocating the declared sizes.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Final

import numpy as np

from ._dtypes import SAFETENSORS_CODES, dtype_of
from ._errors import CheckpointError
from ._files import Entry, Parsed, identity, open_regular, shape_size

MAX_HEADER: Final = 100_000_000  # the safetensors library's own limit
# How the safetensors package reports an I/O error: "... I/O error: No space left on device
# (os error 28) ..." (Rust's io::Error), "IoError(Os { code: 28, ... })" in older versions.
_OS_ERROR: Final = re.compile(r"\(os error (\d+)\)|\bOs \{ code: (\d+)")
_IO_ERROR: Final = re.compile(r"I/O error|IoError")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"the name {k!r} appears twice")
        d[k] = v
    return d


def parse(path: str) -> Parsed:
    """Read and validate the header of a safetensors file (reads only the header).

    Raises:
      CheckpointError: not a safetensors file, or a header that is malformed or lies.
      OSError: the file cannot be opened.
    """
    with open_regular(path) as f:
        ident = identity(f)
        size = ident[2]
        if size < 8:
            raise CheckpointError(
                f"not a safetensors file: {size} bytes, less than the 8-byte header length", path
            )
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER or 8 + n > size:
            limit = "the format's limit of 100 MB" if n > MAX_HEADER else f"the {size - 8} bytes that follow"
            raise CheckpointError(
                f"not a safetensors file, or truncated: the header length field says {n} bytes, "
                f"more than {limit}",
                path,
            )
        raw = f.read(n)
    if len(raw) != n:
        raise CheckpointError("the file was truncated while being read", path)
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"not a safetensors file, or a corrupted header: {e}", path) from None
    if type(header) is not dict:
        raise CheckpointError("corrupted header: not a JSON object", path)
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if type(meta) is not dict or not all(type(k) is str and type(v) is str for k, v in meta.items()):
        raise CheckpointError("corrupted header: __metadata__ is not a str -> str object", path)
    start = 8 + n
    data_len = size - start
    tensors: dict[str, Entry] = {}
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        where = f"corrupted header: tensor {name[:200]!r}"
        if type(info) is not dict or set(info) - {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(f"{where} is not a {{dtype, shape, data_offsets}} object", path)
        code = info.get("dtype")
        if code not in SAFETENSORS_CODES:
            raise CheckpointError(f"{where} has an unknown or unsupported dtype {str(code)[:40]!r}", path)
        shape = info.get("shape")
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape) or len(shape) > 64:
            raise CheckpointError(f"{where} has a malformed shape {str(shape)[:80]}", path)
        offsets = info.get("data_offsets")
        if (
            type(offsets) is not list
            or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise CheckpointError(f"{where} has malformed data_offsets {str(offsets)[:80]}", path)
        try:
            dtype = dtype_of(SAFETENSORS_CODES[code])
        except ValueError as e:
            raise CheckpointError(f"{where}: {e}", path) from None
        nbytes = shape_size(tuple(shape)) * dtype.itemsize
        begin, end = offsets
        if end - begin != nbytes:
            raise CheckpointError(
                f"{where} says shape {shape} of {code} ({nbytes} bytes) but its data_offsets "
                f"span {end - begin} bytes",
                path,
            )
        if end > data_len:
            raise CheckpointError(
                f"truncated, or {where} lies: its data ends at byte {end} of a data section of "
                f"{data_len} bytes",
                path,
            )
        tensors[name] = Entry(dtype, tuple(shape), nbytes, start + begin)
        spans.append((begin, end, name))
    spans.sort()
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            what = "overlaps another tensor" if begin < pos else f"leaves a gap of {begin - pos} bytes"
            raise CheckpointError(f"corrupted header: the data of tensor {name[:200]!r} {what}", path)
        pos = end
    if pos != data_len:
        raise CheckpointError(
            f"corrupted: the tensors cover {pos} bytes but the data section has {data_len}", path
        )
    return Parsed(path, "safetensors", tensors, meta, size, ident)


def write(tmp: str, arrays: dict[str, np.ndarray[Any, Any]], metadata: dict[str, str], path: str) -> None:
    """Write ``arrays`` (contiguous, little-endian, supported dtypes) and ``metadata`` to the
    file ``tmp`` with the safetensors package (``path``, the final name, is for messages).

    Raises:
      OSError: an I/O error (a full disk, ...), which the package reports as a
        SafetensorError: turned back into the OSError, naming ``path``.
      CheckpointError: the safetensors package refused for another reason (its message is
        kept).
    """
    import safetensors

    specs = {
        name: safetensors.TensorSpec(
            dtype=arr.dtype.name, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes
        )
        for name, arr in arrays.items()
    }
    try:
        safetensors.serialize_file(specs, tmp, metadata=metadata)
    except safetensors.SafetensorError as e:
        message = str(e)
        m = _OS_ERROR.search(message)
        if m is not None:
            code = int(m.group(1) or m.group(2))
            raise OSError(code, os.strerror(code), path) from None
        if _IO_ERROR.search(message):
            raise OSError(f"{path}: {message}") from None
        raise CheckpointError(f"the safetensors package could not write the file: {message}", path) from None
