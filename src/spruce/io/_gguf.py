"""GGUF files (llama.cpp's format for language models) read without llama.cpp or ``gguf``.

A GGUF file (versions 2 and 3, little-endian) is, in order::

    b"GGUF", version u32, tensor count u64, key/value count u64
    key/value pairs: key (string), value type u32, value
    tensor infos: name (string), n_dims u32, n_dims dims u64 (innermost first), type u32,
                  offset u64 (from the start of the data section)
    padding to the alignment (``general.alignment``, 32 by default)
    the data section: each tensor's bytes at its offset, each offset a multiple of the alignment

A string is a u64 byte length and UTF-8 bytes; a value is one of 13 types (u8, i8, u16, i16,
u32, i32, f32, bool, string, array, u64, i64, f64), an array being an element type u32, a
count u64 and the elements (arrays of arrays are allowed).

The file is untrusted input: every count, length, dimension and offset is checked against the
bytes that remain before it is used (a string or an array cannot claim more bytes than the
file has, so nothing is allocated beyond the file's size), the header is read at most
``MAX_HEADER`` bytes, arrays nest at most ``MAX_NESTING`` deep and hold at most ``MAX_VALUES``
elements in all, tensors have at most
``MAX_DIMS`` dimensions, and tensors must lie inside the data section, aligned, without
overlapping.  Anything else is one CheckpointError naming the file, the key or tensor, and what
is wrong.

Shapes: GGUF lists dimensions innermost first (ggml's ``ne``); spruce gives NumPy's order
(outermost first), so a GGUF ``[576, 49152]`` embedding is a (49152, 576) array.  Tensor
types are ggml's (``_gguf_quants.KINDS``): F32, F64 and the integer types load as they are
stored (views of the file); F16, BF16 and the quantized types are converted to float32 when
read (``_gguf_quants.dequantize``); the other quantized types (the IQ and TQ families,
MXFP4, NVFP4, Q1_0) are listed by ``read_info`` but refused by ``load``, naming the tensor and
the type.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Final, NamedTuple

import numpy as np

from ._errors import CheckpointError
from ._files import Entry, MappedFile, Parsed, identity, open_regular, shape_size, with_path
from ._gguf_quants import CONVERTED, KINDS, Kind, dequantize

FORMAT: Final = "gguf"
MAGIC: Final = b"GGUF"
VERSIONS: Final = (2, 3)
MAX_HEADER: Final = 1 << 30  # the header holds a vocabulary, a few MB; its tensors are elsewhere
MAX_NESTING: Final = 8  # arrays of arrays of ...
# Array elements in all the metadata: each becomes a Python object (tens of bytes), so a file
# of small elements would otherwise take memory many times its size.
MAX_VALUES: Final = 1 << 24
MAX_DIMS: Final = 4  # ggml's GGML_MAX_DIMS
MAX_DIM: Final = (1 << 63) - 1  # ggml's dimensions are int64
MAX_ELEMENTS: Final = 1 << 56  # any tensor's size in bytes, even of 8-byte values, is an int64 (NumPy needs it)
DEFAULT_ALIGNMENT: Final = 32
_TREEDEF_KEY: Final = "spruce.treedef"

# value type id -> (name, struct format, size) for the fixed-size types
_SCALARS: Final[dict[int, tuple[str, str, int]]] = {
    0: ("uint8", "<B", 1), 1: ("int8", "<b", 1), 2: ("uint16", "<H", 2), 3: ("int16", "<h", 2),
    4: ("uint32", "<I", 4), 5: ("int32", "<i", 4), 6: ("float32", "<f", 4), 7: ("bool", "<B", 1),
    10: ("uint64", "<Q", 8), 11: ("int64", "<q", 8), 12: ("float64", "<d", 8),
}
_STRING: Final = 8
_ARRAY: Final = 9
# the fewest bytes a value of each type takes (an array's elements: to bound its count)
_MIN_SIZE: Final[dict[int, int]] = {**{t: s for t, (_, _, s) in _SCALARS.items()}, _STRING: 8, _ARRAY: 12}
_NUMPY: Final[dict[int, str]] = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4",
                                 10: "<u8", 11: "<i8", 12: "<f8"}


class Stored(NamedTuple):
    """How a GGUF tensor is stored: its type, the absolute offset and size of its bytes."""

    kind: Kind
    offset: int
    nbytes: int


class Header(NamedTuple):
    """A parsed GGUF header: version, typed metadata, tensors (file order), and where the data
    section starts."""

    version: int
    metadata: dict[str, Any]
    tensors: dict[str, tuple[tuple[int, ...], Stored]]
    data_start: int
    alignment: int


class _Cursor:
    """Reads the header from the start of the file: every read is checked against the bytes
    that remain in the file (and in ``MAX_HEADER``) before anything is read or allocated."""

    def __init__(self, f: Any, size: int, path: str) -> None:
        self.f = f
        self.size = size
        self.path = path
        self.buf = bytearray()
        self.pos = 0
        self.limit = min(size, MAX_HEADER)
        self.values = 0  # array elements so far: each becomes a Python object

    def fail(self, msg: str) -> CheckpointError:
        return CheckpointError(f"corrupted GGUF file: {msg}", self.path)

    def remaining(self) -> int:
        return self.limit - self.pos

    def need(self, n: int, what: str) -> None:
        if n > self.remaining():
            if self.limit < self.size:
                raise self.fail(f"{what} needs {n} bytes at offset {self.pos}: the header would exceed {MAX_HEADER} bytes")
            raise CheckpointError(
                f"truncated GGUF file: {what} needs {n} bytes at offset {self.pos}, but the {self.size}-byte "
                f"file has {self.size - self.pos} left",
                self.path,
            )
        short = self.pos + n - len(self.buf)
        if short > 0:
            chunk = self.f.read(max(short, min(1 << 20, self.limit - len(self.buf))))
            self.buf += chunk
            if len(chunk) < short:
                raise CheckpointError(
                    "the file was truncated while being read; load it again", self.path
                )

    def unpack(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        v: int = self.unpack("<I", 4, what)
        return v

    def u64(self, what: str) -> int:
        v: int = self.unpack("<Q", 8, what)
        return v

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        if n > self.remaining():
            raise self.fail(f"{what} claims {n} bytes at offset {self.pos}, but {self.size - self.pos} remain in the file")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def strings(self, n: int, what: str) -> list[str]:
        """``n`` strings in a row (a vocabulary: tens of thousands), each checked as ``string``
        checks one, in one loop over the buffer."""
        out: list[str] = []
        unpack = struct.unpack_from
        for i in range(n):
            if self.pos + 8 > len(self.buf) or self.remaining() < 8:
                out.append(self.string(f"{what}[{i}]"))
                continue
            (k,) = unpack("<Q", self.buf, self.pos)
            end = self.pos + 8 + k
            if end > len(self.buf):  # past what was read so far (or past the file): the checked way
                out.append(self.string(f"{what}[{i}]"))
                continue
            try:
                out.append(self.buf[self.pos + 8 : end].decode("utf-8"))
            except UnicodeDecodeError as e:
                raise self.fail(f"{what}[{i}] is not valid UTF-8 ({e.reason} at byte {e.start})") from None
            self.pos = end
        return out

    def array(self, n: int, dtype: str, what: str) -> np.ndarray[Any, Any]:
        size = n * np.dtype(dtype).itemsize
        self.need(size, what)
        out = np.frombuffer(self.buf, dtype, n, self.pos).copy()
        self.pos += size
        return out

    def align(self, alignment: int) -> int:
        return -(-self.pos // alignment) * alignment


def _value(c: _Cursor, vtype: int, what: str, depth: int) -> Any:
    if vtype in _SCALARS:
        name, fmt, size = _SCALARS[vtype]
        v = c.unpack(fmt, size, what)
        if vtype == 7:
            if v > 1:
                raise c.fail(f"{what} is a bool stored as {v} (not 0 or 1)")
            return bool(v)
        return v
    if vtype == _STRING:
        return c.string(what)
    if vtype == _ARRAY:
        if depth >= MAX_NESTING:
            raise c.fail(f"{what} nests arrays more than {MAX_NESTING} deep")
        etype = c.u32(f"the element type of {what}")
        if etype not in _MIN_SIZE:
            raise c.fail(f"{what} is an array of unknown value type {etype}")
        n = c.u64(f"the length of {what}")
        if n * _MIN_SIZE[etype] > c.remaining():
            raise c.fail(
                f"{what} claims {n} elements of at least {_MIN_SIZE[etype]} bytes at offset {c.pos}, but "
                f"{c.size - c.pos} bytes remain in the file"
            )
        c.values += n
        if c.values > MAX_VALUES:
            raise c.fail(f"{what} takes the metadata past {MAX_VALUES} values (a vocabulary has a few hundred thousand)")
        if etype in _NUMPY:
            values: list[Any] = c.array(n, _NUMPY[etype], what).tolist()
            return values
        if etype == _STRING:
            return c.strings(n, what)
        return [_value(c, etype, f"{what}[{i}]", depth + 1) for i in range(n)]
    raise c.fail(f"{what} has unknown value type {vtype}")


def _short(name: str) -> str:
    return repr(name if len(name) <= 200 else name[:200] + "...")


def parse_header(f: Any, size: int, path: str) -> Header:
    """Read and validate the header of the GGUF file ``f`` (``size`` bytes) from its start.

    Raises:
      CheckpointError: not a GGUF file, an unsupported version, a truncated, lying or absurd
        header (see the module docstring).
    """
    c = _Cursor(f, size, path)
    if size < 4:
        raise CheckpointError("not a GGUF file: shorter than its magic number", path)
    c.need(4, "the magic number")
    if bytes(c.buf[:4]) != MAGIC:
        raise CheckpointError("not a GGUF file (no GGUF magic number)", path)
    c.pos = 4
    version = c.u32("the version")
    if version not in VERSIONS:
        if int.from_bytes(version.to_bytes(4, "little"), "big") in VERSIONS:
            raise CheckpointError("a big-endian GGUF file: only little-endian GGUF files are supported", path)
        if version == 1:
            raise CheckpointError("GGUF version 1 (from 2023, before 64-bit counts) is not supported", path)
        raise CheckpointError(f"unknown GGUF version {version} (versions 2 and 3 are read)", path)
    n_tensors = c.u64("the tensor count")
    n_kv = c.u64("the metadata count")
    # each pair takes at least 13 bytes (key length, value type, a 1-byte value); each tensor
    # info at least 24 (name length, n_dims, type, offset)
    if n_kv * 13 + n_tensors * 24 > c.remaining():
        raise c.fail(
            f"the header claims {n_kv} metadata pairs and {n_tensors} tensors, more than the "
            f"{size}-byte file can hold"
        )
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = c.string(f"metadata key {i}")
        if key in metadata:
            raise c.fail(f"the metadata key {_short(key)} appears twice")
        vtype = c.u32(f"the value type of metadata {_short(key)}")
        metadata[key] = _value(c, vtype, f"metadata {_short(key)}", 0)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 30:
        raise c.fail(f"general.alignment is {str(alignment)[:40]}, not a power of two")
    infos: list[tuple[str, tuple[int, ...], Kind, int]] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = c.string(f"the name of tensor {i}")
        if name in seen:
            raise c.fail(f"two tensors are named {_short(name)}")
        seen.add(name)
        n_dims = c.u32(f"the number of dimensions of tensor {_short(name)}")
        if n_dims > MAX_DIMS:
            raise c.fail(f"tensor {_short(name)} has {n_dims} dimensions (at most {MAX_DIMS})")
        ne = [c.u64(f"a dimension of tensor {_short(name)}") for _ in range(n_dims)]
        if any(d > MAX_DIM for d in ne):
            raise c.fail(f"tensor {_short(name)} has a dimension of {max(ne)} (more than 2**63 - 1)")
        if shape_size(tuple(d for d in ne if d)) > MAX_ELEMENTS:  # (zero dims aside: NumPy needs it too)
            raise c.fail(f"tensor {_short(name)} has dimensions {ne} whose product overflows (more than 2**56 values)")
        type_id = c.u32(f"the type of tensor {_short(name)}")
        kind = KINDS.get(type_id)
        if kind is None:
            raise c.fail(f"tensor {_short(name)} has unknown type {type_id} (a ggml type this spruce does not know)")
        offset = c.u64(f"the offset of tensor {_short(name)}")
        infos.append((name, tuple(reversed(ne)), kind, offset))
    data_start = c.align(alignment)
    tensors: dict[str, tuple[tuple[int, ...], Stored]] = {}
    spans: list[tuple[int, int, str]] = []
    data_size = size - data_start
    for name, shape, kind, offset in infos:
        inner = shape[-1] if shape else 1
        if inner % kind.elements:
            raise c.fail(
                f"tensor {_short(name)} of type {kind.name} has rows of {inner} values, not a multiple of its "
                f"{kind.elements}-value blocks"
            )
        nbytes = shape_size(shape) // kind.elements * kind.nbytes
        if offset % alignment:
            raise c.fail(f"tensor {_short(name)} is at offset {offset}, not a multiple of the alignment {alignment}")
        if offset + nbytes > data_size:
            raise c.fail(
                f"tensor {_short(name)} ({kind.name}, shape {list(shape)}) takes {nbytes} bytes at data offset "
                f"{offset}, past the end of the {max(data_size, 0)}-byte data section"
            )
        if nbytes:
            spans.append((offset, nbytes, name))
        tensors[name] = (shape, Stored(kind, data_start + offset, nbytes))
    spans.sort()
    for (o1, n1, a), (o2, n2, b) in zip(spans, spans[1:]):
        if o2 < o1 + n1:
            raise c.fail(f"tensors {_short(a)} and {_short(b)} overlap (bytes {o2} to {min(o1 + n1, o2 + n2)} of the data)")
    return Header(version, metadata, tensors, data_start, alignment)


def _text(value: Any) -> str:
    """A metadata value as the str of ``Parsed.metadata``: strings as they are, other values
    as JSON (numbers, true/false, lists)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def read(path: str) -> tuple[Header, tuple[int, ...]]:
    """The validated header of a GGUF file and the identity of the file read."""
    with open_regular(path) as f:
        ident = identity(f)
        return parse_header(f, ident[2], path), ident


def parse(path: str) -> Parsed:
    """Read and validate a GGUF file's header (no tensor data).

    Returns:
      A ``Parsed`` of format ``'gguf'``: the tensors by name (NumPy shapes; F32, F64 and
      integer tensors as plain entries, views of the file; the others with offset -1 and a
      ``Stored`` member, converted by ``array``), the metadata as str -> str (``_text``).

    Raises:
      CheckpointError: not a GGUF file, or a header that is truncated, lies or is absurd.
      OSError: the file cannot be opened or read.
    """
    header, ident = read(path)
    entries: dict[str, Entry] = {}
    for name, (shape, st) in header.tensors.items():
        if st.kind.plain is not None and st.kind.name != "F16":
            entries[name] = Entry(np.dtype(st.kind.plain), shape, st.nbytes, st.offset, member=st)
        else:
            entries[name] = Entry(np.dtype(np.float32), shape, st.nbytes, -1, member=st)
    meta = {k: _text(v) for k, v in header.metadata.items() if k != _TREEDEF_KEY}
    return Parsed(path, FORMAT, entries, meta, ident[2], ident)


def is_gguf(e: Entry) -> bool:
    """Whether ``e`` is a GGUF tensor that ``array`` converts (not a plain view of the file)."""
    return isinstance(e.member, Stored) and e.offset < 0


def stored_type(e: Entry) -> str | None:
    """The GGUF type name of a GGUF tensor (``'Q4_1'``, ``'F16'``), or None for another file's."""
    return e.member.kind.name if isinstance(e.member, Stored) else None


def raw_entry(st: Stored) -> Entry:
    """The bytes of a stored tensor, as an Entry of uint8 that ``MappedFile.array`` reads."""
    return Entry(np.dtype(np.uint8), (st.nbytes,), st.nbytes, st.offset)


def array(mapped: Any, e: Entry, name: str, path: str) -> np.ndarray[Any, Any]:
    """The float32 values of a converted GGUF tensor, a new array of shape ``e.shape``, from
    its bytes read through ``mapped`` (a ``MappedFile``).

    Raises:
      CheckpointError: a tensor type spruce cannot dequantize, naming the tensor and the type.
    """
    st: Stored = e.member
    if st.kind.name not in CONVERTED:
        raise CheckpointError(
            f"tensor {_short(name)} is stored as GGUF type {st.kind.name}, which spruce cannot dequantize "
            f"(it reads F32, F16, BF16, F64, the integer types, {', '.join(sorted(CONVERTED - {'F16', 'BF16'}))})",
            path,
        )
    if st.nbytes == 0:
        return np.zeros(e.shape, np.float32)
    raw = mapped.array(raw_entry(st))
    out = dequantize(st.kind, raw).reshape(e.shape)
    if not mapped.copy:
        mapped.release(raw_entry(st))
    return out


def read_gguf_metadata(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> dict[str, Any]:
    """The metadata of a GGUF file with its types, without reading tensor data.

    GGUF metadata values are typed, unlike the str -> str metadata of the other formats
    (``read_metadata`` gives a GGUF file's values as text: strings as they are, the others as
    JSON): here integers are ``int`` (every GGUF integer width), floats ``float`` (a float32
    value widened exactly: 1e-5 stored as float32 is 9.999999747378752e-06), bools ``bool``,
    strings ``str``, arrays ``list`` (of those, nested for arrays of arrays).  Keys keep the
    file's order: ``general.architecture``, the model's hyperparameters
    (``llama.block_count``, ``llama.attention.head_count``, ...), the tokenizer
    (``tokenizer.ggml.tokens``, ``tokenizer.ggml.merges``, ...), ``tokenizer.chat_template``.

    Args:
      path: a GGUF file (version 2 or 3, little-endian); a str, bytes or os.PathLike.

    Returns:
      ``{key: value}``.

    Raises:
      CheckpointError: not a GGUF file, or a truncated, lying or absurd header (every count,
        length and offset is checked against the file size before it is used).
      OSError: the file cannot be opened or read; the error names the file.

    >>> import os, tempfile, struct
    >>> def s(t): return struct.pack('<Q', len(t)) + t
    >>> body = (b'GGUF' + struct.pack('<IQQ', 3, 0, 2) + s(b'general.architecture') + struct.pack('<I', 8)
    ...         + s(b'llama') + s(b'llama.block_count') + struct.pack('<II', 4, 30))
    >>> path = os.path.join(tempfile.mkdtemp(), 'm.gguf')
    >>> with open(path, 'wb') as f:
    ...     _ = f.write(body)
    >>> read_gguf_metadata(path)
    {'general.architecture': 'llama', 'llama.block_count': 30}
    """
    p = os.fsdecode(path)
    try:
        return read(p)[0].metadata
    except OSError as e:
        raise with_path(e, p) from None


class GGUFBlocks(NamedTuple):
    """One tensor of a GGUF file as stored (``read_gguf_blocks``).

    Attributes:
      type: the GGUF (ggml) type name: ``'F32'``, ``'F16'``, ``'Q4_1'``, ``'Q8_0'``, ...
      shape: the shape of its values, NumPy's order (what ``load`` gives).
      blocks: its bytes, a uint8 array of shape ``(*shape[:-1], shape[-1] // E, B)`` for a type
        of ``E`` values in ``B``-byte blocks (Q4_1: 32 values in 20 bytes; F32: 1 in 4): one row
        of blocks per row of values.
    """

    type: str
    shape: tuple[int, ...]
    blocks: np.ndarray[Any, Any]


_BY_NAME: Final = {k.name: k for k in KINDS.values()}


def read_gguf_blocks(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], names: Any = None, *, mmap: bool = True
) -> dict[str, GGUFBlocks]:
    """The tensors of a GGUF file as stored, quantized blocks not dequantized.

    What ``load`` dequantizes, left as bytes: for running on the quantized weights, or for
    types ``load`` refuses.  ``dequantize_gguf(b.type, b.blocks)`` gives what ``load`` gives.

    Args:
      path: a GGUF file; a str, bytes or os.PathLike.
      names: the tensors to read (an iterable of names), or None for all.
      mmap: True: the arrays are views of the file read whole (at most 64 MiB) or of a
        copy-on-write memory map, as ``load``'s are; False: each read into memory of its own.

    Returns:
      ``{name: GGUFBlocks(type, shape, blocks)}`` in file order (the order of ``names`` if given).

    Raises:
      CheckpointError: not a GGUF file, a header that is truncated, lies or is absurd, or a
        name the file does not have.
      OSError: the file cannot be opened or read; the error names the file.

    >>> import os, tempfile, struct, numpy as np
    >>> def s(t): return struct.pack('<Q', len(t)) + t
    >>> head = b'GGUF' + struct.pack('<IQQ', 3, 1, 0) + s(b'w') + struct.pack('<IQQIQ', 2, 32, 2, 8, 0)
    >>> block = np.float16(0.5).tobytes() + np.arange(32, dtype=np.int8).tobytes()  # Q8_0: d, 32 int8
    >>> path = os.path.join(tempfile.mkdtemp(), 'q.gguf')
    >>> with open(path, 'wb') as f:
    ...     _ = f.write(head + bytes(-len(head) % 32) + block * 2)
    >>> b = read_gguf_blocks(path)['w']
    >>> b.type, b.shape, b.blocks.shape
    ('Q8_0', (2, 32), (2, 1, 34))
    >>> dequantize_gguf(b.type, b.blocks)[1, :4]
    array([0. , 0.5, 1. , 1.5], dtype=float32)
    """
    p = os.fsdecode(path)
    try:
        parsed = parse(p)
        wanted = list(parsed.tensors) if names is None else [str(n) for n in names]
        missing = [n for n in wanted if n not in parsed.tensors]
        if missing:
            raise CheckpointError(f"no tensor named {_short(missing[0])} in this GGUF file", p)
        mapped = MappedFile(parsed, copy=not mmap)
        out: dict[str, GGUFBlocks] = {}
        for name in wanted:
            e = parsed.tensors[name]
            st: Stored = e.member
            raw = mapped.array(raw_entry(st))
            rows = e.shape[:-1] if e.shape else ()
            per_row = (e.shape[-1] if e.shape else 1) // st.kind.elements
            out[name] = GGUFBlocks(st.kind.name, e.shape, raw.reshape(*rows, per_row, st.kind.nbytes))
        return out
    except OSError as err:
        raise with_path(err, p) from None


def dequantize_gguf(gguf_type: str, blocks: Any) -> np.ndarray[Any, Any]:
    """The float32 values of GGUF blocks (``read_gguf_blocks``), as ``load`` computes them.

    Args:
      gguf_type: the GGUF type name (``'Q4_1'``, ...): F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
        Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, or the plain F32, F64 (converted to float32 too).
      blocks: uint8 array-like of shape ``(..., n, B)``: ``n`` blocks of ``B`` bytes per row.

    Returns:
      A new float32 array of shape ``(..., n * E)`` (``E`` values per block).

    Raises:
      ValueError: an unknown type or one spruce cannot dequantize; blocks that are not uint8
        or whose last dimension is not the type's block size.
    """
    kind = _BY_NAME.get(gguf_type)
    if kind is None or (kind.name not in CONVERTED and kind.name not in ("F32", "F64")):
        raise ValueError(f"dequantize_gguf: cannot dequantize GGUF type {gguf_type!r}")
    arr = np.asarray(blocks)
    if arr.dtype != np.uint8 or arr.ndim < 2 or arr.shape[-1] != kind.nbytes:
        raise ValueError(
            f"dequantize_gguf: {gguf_type} blocks must be uint8 of shape (..., n, {kind.nbytes}), not "
            f"{arr.dtype}{list(arr.shape)}"
        )
    shape = (*arr.shape[:-2], arr.shape[-2] * kind.elements)
    flat = np.ascontiguousarray(arr).reshape(-1)
    if kind.plain is not None and kind.name != "F16":
        return flat.view(kind.plain).astype(np.float32).reshape(shape)
    return dequantize(kind, flat).reshape(shape)
