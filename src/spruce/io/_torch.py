"""PyTorch checkpoints (``torch.save`` files: ``.pt``, ``.pth``, ``.bin``) read without PyTorch.

Two layouts exist:

- the zip layout (torch 1.6 and later): a zip archive, stored without compression, whose
  members are ``<archive>/data.pkl`` (the pickled object, in which every tensor refers to a
  storage by a *persistent id* ``('storage', storage type, key, location, numel)``),
  ``<archive>/data/<key>`` (the raw bytes of each storage, little-endian unless
  ``<archive>/byteorder`` says ``big``) and a few small records (``version``, ...);
- the legacy layout (``_use_new_zipfile_serialization=False``): five pickles in a row — a
  magic number, the protocol version 1001, a system-info dict, the object (persistent ids
  ``('storage', type, key, location, numel, view)``), the list of storage keys — then each
  storage as an 8-byte little-endian element count followed by its bytes.

The pickles are read by ``_Restricted``, an unpickler whose ``find_class`` gives out only the
few globals a state dict needs (``_GLOBALS``: the tensor rebuild functions, the storage types,
the dtypes, ``collections.OrderedDict``, ``torch.Size``, ``torch.device``), each replaced by a
stand-in of our own that records what the file describes; any other global (``os.system``,
``builtins.eval``, a model class) raises CheckpointError naming it, before anything is called.
This is the rule of ``torch.load(weights_only=True)``, without torch.

Each tensor becomes an ``Entry`` whose offset and byte strides point into the storage's bytes
in the file, after checking that every element it can reach lies inside that storage: arrays
are then views of the file's bytes (``MappedFile``), and tensors sharing a storage share
memory.  The pickled structure (dicts, OrderedDicts, lists, tuples, Python scalars) becomes a
``spruce.treedef`` document whose tensor names are the PyTorch ones: the keys from the root
joined with ``.`` and not escaped (``encoder.layer.0.weight``, ``state.0.exp_avg``).  A dict
whose keys are dotted names (a state dict) is nested by them as ``unflatten_names`` nests a
file's names (``{'0': {'weight': ...}}``; kept flat if they cannot nest, ``'a'`` beside
``'a.b'``), so that the loaded tree saves under the same names.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import IO, Any, Final, NamedTuple

from .._names import unflatten_names
from ._dtypes import dtype_of
from ._errors import CheckpointError
from ._files import Entry, Parsed, identity, open_regular, shape_size
from ._structure import FORMAT_VERSION, MAX_DEPTH
from ._values import NotData, encode_value

FORMAT: Final = "pytorch"
MAX_PICKLE: Final = 1 << 30  # a state dict's pickle is small; its tensors are elsewhere
# How many nodes the structure of a file may expand to.  Without shared references every node
# costs at least one pickle opcode byte, so a file of n bytes has at most n nodes; shared
# references (tied tensors, a config dict used twice) legitimately repeat subtrees, which the
# factor 16 and the floor of 20,000 leave room for (the file size counts the tensor data too).
# A pickle DAG (x = [x, x] sixty times) would otherwise expand 2**60 nodes from a few hundred
# bytes; the absolute cap bounds the work (seconds) and memory for a file padded to any size.
MAX_NODES: Final = 10_000_000


def _node_budget(size: int) -> int:
    return min(MAX_NODES, 20_000 + 16 * size)


_LEGACY_MAGIC: Final = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL: Final = 1001
_ZIP_ERRORS: Final = (
    zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, struct.error, ValueError, NotImplementedError
)

# torch dtype names (as ``str(torch.float32)`` without ``torch.``) -> NumPy dtype names.
_DTYPES: Final[dict[str, str]] = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16",
    "short": "int16", "int8": "int8", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "bool": "bool", "complex64": "complex64", "cfloat": "complex64",
    "complex128": "complex128", "cdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2": "float8_e5m2", "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
}
# The legacy typed storage classes (``torch.FloatStorage``) -> NumPy dtype names.
_STORAGES: Final[dict[str, str]] = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
}


# -- stand-ins for the globals a state dict pickle names -----------------------------------------
#
# Every object find_class returns is an instance of a class below (slots, no __dict__) or the
# OrderedDict type.  ``__setstate__`` refuses, so a BUILD opcode cannot change a stand-in's
# behaviour; ``__reduce__`` refuses, so nothing here is ever pickled back.


class _StandIn:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __setstate__(self, state: Any) -> None:
        raise _Refused(f"the pickle tries to change the state of {self.name}")

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} cannot be pickled")

    def __repr__(self) -> str:
        return self.name


class _StorageType(_StandIn):
    """``torch.FloatStorage`` & co. and ``torch.storage.UntypedStorage`` (uint8 bytes)."""

    __slots__ = ("dtype",)

    def __init__(self, name: str, dtype: str) -> None:
        super().__init__(name)
        self.dtype = dtype


class _DType(_StandIn):
    """A torch dtype (``torch.float16``): becomes the NumPy dtype of the same name."""

    __slots__ = ("dtype",)

    def __init__(self, name: str, dtype: str) -> None:
        super().__init__(name)
        self.dtype = dtype


class _Storage(NamedTuple):
    """A storage a tensor points into: its key (the member ``data/<key>``), the dtype its
    persistent id declares, and its size in elements."""

    key: str
    dtype: str
    numel: int


class _Tensor(NamedTuple):
    """A tensor as the pickle describes it (elements, not bytes)."""

    storage: _Storage
    dtype: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _Refused(Exception):
    """A pickle asked for something a state dict does not need."""


def _int(x: Any, what: str) -> int:
    if type(x) is not int or x < 0:
        raise _Refused(f"{what} is {str(x)[:60]!r}, not an int >= 0")
    return x


def _ints(x: Any, what: str) -> tuple[int, ...]:
    if type(x) not in (tuple, list) or len(x) > 64:
        raise _Refused(f"{what} is {str(x)[:60]!r}, not a tuple of at most 64 ints")
    return tuple(_int(v, what) for v in x)


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None) -> _Tensor:
    if type(storage) is not _Storage:
        raise _Refused(f"a tensor is rebuilt from {type(storage).__name__}, not a storage")
    shape = _ints(size, "a tensor's size")
    strides = _ints(stride, "a tensor's stride")
    if len(shape) != len(strides):
        raise _Refused(f"a tensor's size {list(shape)} and stride {list(strides)} differ in length")
    return _Tensor(storage, dtype or storage.dtype, _int(offset, "a tensor's storage offset"), shape, strides)


class _RebuildTensor(_StandIn):
    """``torch._utils._rebuild_tensor_v2`` (``storage, storage_offset, size, stride,
    requires_grad, backward_hooks[, metadata]``) and ``_rebuild_tensor_v3`` (the same with a
    dtype before ``metadata``, for storages that are untyped bytes)."""

    __slots__ = ("v3",)

    def __init__(self, name: str, v3: bool) -> None:
        super().__init__(name)
        self.v3 = v3

    def __call__(self, *args: Any) -> _Tensor:
        n = 7 if self.v3 else 6
        if not n <= len(args) <= n + 1:
            raise _Refused(f"{self.name} is called with {len(args)} arguments")
        dtype = None
        if self.v3:
            if type(args[6]) is not _DType:
                raise _Refused(f"{self.name} is given {type(args[6]).__name__} as its dtype")
            dtype = args[6].dtype
        return _tensor(args[0], args[1], args[2], args[3], dtype)


class _RebuildParameter(_StandIn):
    """``torch._utils._rebuild_parameter(data, requires_grad, backward_hooks)`` and
    ``_rebuild_parameter_with_state(..., state)``: the parameter's tensor."""

    __slots__ = ()

    def __call__(self, *args: Any) -> _Tensor:
        if len(args) not in (3, 4) or type(args[0]) is not _Tensor:
            raise _Refused(f"{self.name} is not given a tensor")
        tensor: _Tensor = args[0]
        return tensor


class _Marker(_StandIn):
    """``torch.Tensor`` / ``torch.nn.parameter.Parameter`` as the class argument of
    ``_rebuild_from_type_v2``."""

    __slots__ = ()


class _RebuildFromType(_StandIn):
    """``torch._tensor._rebuild_from_type_v2(func, new_type, args, state)`` for a plain tensor
    or parameter without Python attributes: ``func(*args)``."""

    __slots__ = ()

    def __call__(self, func: Any, new_type: Any, args: Any, state: Any) -> _Tensor:
        if type(func) is not _RebuildTensor or type(new_type) is not _Marker or type(args) is not tuple:
            raise _Refused(f"{self.name} rebuilds something other than a plain tensor")
        if state:
            raise _Refused(f"{self.name} gives the tensor Python attributes")
        return func(*args)


class _Size(_StandIn):
    """``torch.Size(sizes)``: a tuple of ints."""

    __slots__ = ()

    def __call__(self, sizes: Any = ()) -> tuple[int, ...]:
        return _ints(sizes, "torch.Size")


class _Device(_StandIn):
    """``torch.device('cuda', 0)`` / ``torch.device('cpu')``: the device's name as a str."""

    __slots__ = ()

    def __call__(self, kind: Any, index: Any = None) -> str:
        if type(kind) is not str or len(kind) > 64 or not (index is None or type(index) is int):
            raise _Refused("torch.device is called with arguments that are not a device name")
        return kind if index is None else f"{kind}:{index}"


def _globals() -> dict[tuple[str, str], Any]:
    g: dict[tuple[str, str], Any] = {("collections", "OrderedDict"): OrderedDict}
    for v3 in (False, True):
        name = f"_rebuild_tensor_v{3 if v3 else 2}"
        g[("torch._utils", name)] = _RebuildTensor(f"torch._utils.{name}", v3)
    for name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
        g[("torch._utils", name)] = _RebuildParameter(f"torch._utils.{name}")
    g[("torch._tensor", "_rebuild_from_type_v2")] = _RebuildFromType("torch._tensor._rebuild_from_type_v2")
    g[("torch", "Tensor")] = _Marker("torch.Tensor")
    g[("torch._tensor", "Tensor")] = g[("torch", "Tensor")]
    g[("torch.nn.parameter", "Parameter")] = _Marker("torch.nn.parameter.Parameter")
    g[("torch", "Size")] = _Size("torch.Size")
    g[("torch", "device")] = _Device("torch.device")
    for cls, dtype in _STORAGES.items():
        g[("torch", cls)] = _StorageType(f"torch.{cls}", dtype)
    for module in ("torch", "torch.storage"):
        g[(module, "UntypedStorage")] = _StorageType(f"{module}.UntypedStorage", "uint8")
    for name, dtype in _DTYPES.items():
        g[("torch", name)] = _DType(f"torch.{name}", dtype)
    return g


_GLOBALS: Final = _globals()


class _Restricted(pickle.Unpickler):
    """An unpickler that resolves only ``_GLOBALS`` and reads storages by persistent id."""

    def __init__(self, file: IO[bytes], legacy: bool) -> None:
        super().__init__(file, encoding="utf-8")
        self.legacy = legacy
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        found = _GLOBALS.get((module, name))
        if found is None:
            raise _Refused(
                f"the pickle asks for the global {module}.{name}, which a state dict does not "
                "need; only tensors, storages, dtypes, OrderedDict, torch.Size, torch.device and "
                "plain containers, numbers and strings are read (as torch.load(weights_only=True) "
                "does), and nothing in the file is run"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        n = 6 if self.legacy else 5
        if type(pid) is not tuple or len(pid) != n or pid[0] not in ("storage", b"storage"):
            raise _Refused(f"unknown persistent id {str(pid)[:80]}")
        kind, key, numel = pid[1], pid[2], pid[4]
        if type(kind) is not _StorageType:
            raise _Refused(f"a storage of type {str(kind)[:60]!r}")
        if isinstance(key, bytes):
            key = key.decode("ascii", "replace")
        if type(key) is not str or not key or len(key) > 200 or "/" in key:
            raise _Refused(f"a storage key {str(key)[:60]!r}")
        if self.legacy and pid[5] is not None:
            raise _Refused("a storage view (legacy format), which is not supported")
        st = _Storage(key, kind.dtype, _int(numel, "a storage's size"))
        seen = self.storages.get(key)
        if seen is None:
            self.storages[key] = st
        elif seen.dtype != st.dtype or seen.numel != st.numel:
            raise _Refused(f"the storage {key!r} is declared twice with different types or sizes")
        return st


def _unpickle(data: IO[bytes], path: str, legacy: bool) -> tuple[Any, dict[str, _Storage]]:
    u = _Restricted(data, legacy)
    try:
        obj = u.load()
    except _Refused as e:
        raise CheckpointError(f"refused to load this PyTorch checkpoint: {e}", path) from None
    except CheckpointError:
        raise
    except RecursionError:
        raise CheckpointError("corrupted pickle: nested too deeply", path) from None
    except MemoryError:
        raise CheckpointError("corrupted pickle: it declares more memory than is available", path) from None
    except Exception as e:  # a malformed pickle raises many kinds; nothing of the file ran
        raise CheckpointError(f"corrupted or truncated pickle ({type(e).__name__}: {str(e)[:200]})", path) from None
    return obj, u.storages


# -- the pickled structure as a spruce.treedef document ------------------------------------------


class _Builder:
    """Walks the unpickled object into a structure document; collects the tensors by name."""

    def __init__(self, path: str, budget: int) -> None:
        self.path = path
        self.budget = budget  # nodes still allowed (see MAX_NODES)
        self.tensors: dict[str, _Tensor] = {}
        self.names: set[str] = set()
        self.active: set[int] = set()

    def fail(self, where: str, msg: str) -> CheckpointError:
        return CheckpointError(f"the entry {where or '<root>'!r} {msg}", self.path)

    def claim(self, where: str) -> str:
        if where in self.names:
            raise self.fail(where, "appears twice (two keys give this dotted name)")
        self.names.add(where)
        return where

    def node(self, x: Any, where: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(where, f"is nested more than {MAX_DEPTH} levels deep (or contains itself)")
        self.budget -= 1
        if self.budget < 0:
            raise CheckpointError(
                "the pickled structure expands to too many nodes through shared references "
                "(the same object referenced many times over)",
                self.path,
            )
        t = type(x)
        if x is None:
            return None
        if t is _Tensor:
            self.tensors[self.claim(where)] = x
            return {"tensor": where}
        if t is bool or t is int or t is float or t is str:
            return {"value": encode_value(x), "name": self.claim(where)}
        if t is _DType:
            return {"value": encode_value(dtype_of(x.dtype)), "name": self.claim(where)}
        if t in (dict, OrderedDict, list, tuple):
            if id(x) in self.active:
                raise self.fail(where, "contains itself")
            self.active.add(id(x))
            try:
                return self.container(x, t, where, depth)
            finally:
                self.active.discard(id(x))
        raise self.fail(where, f"is {_what(x)}, which spruce.io cannot represent")

    def container(self, x: Any, t: type, where: str, depth: int) -> Any:
        def sub(comp: str) -> str:
            return f"{where}.{comp}" if where else comp

        if t is list or t is tuple:
            return {t.__name__: [self.node(v, sub(str(i)), depth + 1) for i, v in enumerate(x)]}
        if all(type(k) is str for k in x) and any("." in k for k in x):
            # nested by the keys' components, unless they cannot nest: a key that is also the
            # prefix of another ('a' and 'a.b'), or more components than the depth allows
            if depth + 1 + max(k.count(".") for k in x) <= MAX_DEPTH:
                try:
                    shape = unflatten_names({k: _Slot(k) for k in x})
                except ValueError:
                    pass
                else:
                    return self.nested(shape, x, where, depth)
        items = []
        for k, v in x.items():
            try:
                ekey = encode_value(k)
                comp = k if type(k) is str else repr(k)
            except (NotData, ValueError) as e:
                raise self.fail(where, f"has a key that is not plain data: {e}") from None
            items.append([ekey, self.node(v, sub(comp), depth + 1)])
        return {"OrderedDict" if t is OrderedDict else "dict": items}

    def nested(self, shape: Any, x: Any, where: str, depth: int) -> Any:
        """The document of the dict ``x`` (at ``where``) whose keys are dotted names, nested as
        ``shape`` (``unflatten_names`` of its keys, with ``_Slot`` leaves; at most MAX_DEPTH
        deep, which the caller checked): dicts, and lists where the components are 0, 1, ...,
        n-1.  The entries' names stay PyTorch's, the keys joined to ``where``."""
        if type(shape) is _Slot:
            return self.node(x[shape.key], f"{where}.{shape.key}" if where else shape.key, depth)
        self.budget -= 1
        if type(shape) is list:
            return {"list": [self.nested(v, x, where, depth + 1) for v in shape]}
        return {"dict": [[encode_value(k), self.nested(v, x, where, depth + 1)] for k, v in shape.items()]}


class _Slot(NamedTuple):
    """A key of a dict with dotted keys, as a leaf of the shape ``unflatten_names`` gives it."""

    key: str


def _what(x: Any) -> str:
    if isinstance(x, _StandIn):
        return f"the object {x.name} itself"
    t = type(x)
    return f"a {t.__name__}" if t.__module__ == "builtins" else f"a {t.__module__}.{t.__qualname__}"


def _entries(tensors: dict[str, _Tensor], where: dict[str, tuple[int, int]], path: str) -> dict[str, Entry]:
    """Entries for the tensors; ``where`` gives each storage key's (file offset, byte size)."""
    out: dict[str, Entry] = {}
    for name, t in tensors.items():
        try:
            dtype = dtype_of(t.dtype)
        except ValueError as e:
            raise CheckpointError(f"the tensor {name!r}: {e}", path) from None
        item = dtype.itemsize
        if t.storage.dtype != t.dtype and (t.storage.dtype != "uint8" or t.storage.numel % item):
            raise CheckpointError(
                f"the tensor {name!r} is {t.dtype} but its storage {t.storage.key!r} holds {t.storage.dtype}", path
            )
        start, size = where[t.storage.key]
        store_bytes = t.storage.numel * dtype_of(t.storage.dtype).itemsize
        if store_bytes > size:
            raise CheckpointError(
                f"truncated or tampered: the storage {t.storage.key!r} should hold {store_bytes} "
                f"bytes but the file has {size}",
                path,
            )
        count = shape_size(t.shape)
        if count:
            last = t.offset + sum((n - 1) * s for n, s in zip(t.shape, t.stride))
            if (last + 1) * item > store_bytes:
                raise CheckpointError(
                    f"tampered: the tensor {name!r} (size {list(t.shape)}, stride "
                    f"{list(t.stride)}, offset {t.offset}) reaches past the end of its storage "
                    f"{t.storage.key!r} of {store_bytes // item} elements",
                    path,
                )
        contiguous = _contiguous(t.shape, t.stride)
        strides = None if contiguous else tuple(s * item for s in t.stride)
        out[name] = Entry(dtype, t.shape, count * item, start + t.offset * item, strides=strides)
    return out


def _contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _document(obj: Any, path: str, size: int) -> tuple[dict[str, Any], dict[str, _Tensor]]:
    b = _Builder(path, _node_budget(size))
    try:
        root = b.node(obj, "", 0)
    except NotData as e:  # (a value nested too deeply)
        raise CheckpointError(f"a value cannot be represented: {e}", path) from None
    return {"version": FORMAT_VERSION, "tree": root}, b.tensors


# -- the two file layouts ------------------------------------------------------------------------


def is_torch_zip(path: str) -> bool:
    """True if ``path`` is a zip archive holding a ``<name>/data.pkl`` member (reads only the
    zip directory); False for other zips and for files that are no zip at all."""
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            return any(_is_pickle_member(n) for n in zf.namelist())
    except _ZIP_ERRORS:
        return False


def _is_pickle_member(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and parts[1] == "data.pkl" and bool(parts[0])


def _member_data(f: IO[bytes], info: zipfile.ZipInfo, size: int, path: str) -> int:
    """The file offset of a stored member's data, checked to lie inside the file."""
    where = f"member {info.filename[:200]!r}"
    if info.flag_bits & 0x1:
        raise CheckpointError(f"{where} is encrypted", path)
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        raise CheckpointError(
            f"{where} is compressed; torch.save stores members uncompressed, and spruce reads "
            "them memory-mapped (re-save the file with torch.save)",
            path,
        )
    if not 0 <= info.header_offset <= size - 30:
        raise CheckpointError(f"truncated or corrupted: the local header of {where} is missing", path)
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise CheckpointError(f"truncated or corrupted: the local header of {where} is missing", path)
    n, m = struct.unpack("<HH", local[26:30])
    data: int = info.header_offset + 30 + n + m
    if data + info.file_size > size:
        raise CheckpointError(
            f"truncated, or {where} lies: its {info.file_size} bytes at offset {data} run past "
            f"the end of the {size}-byte file",
            path,
        )
    return data


def _parse_zip(f: IO[bytes], path: str, size: int) -> tuple[Any, dict[str, tuple[int, int]]]:
    try:
        zf = zipfile.ZipFile(f)
    except _ZIP_ERRORS as e:
        raise CheckpointError(f"not a PyTorch checkpoint (a zip archive), or truncated: {e}", path) from None
    with zf:
        infos = {}
        for info in zf.infolist():
            if info.filename in infos:
                raise CheckpointError(f"corrupted: the member {info.filename[:200]!r} appears twice", path)
            infos[info.filename] = info
        pkls = [n for n in infos if _is_pickle_member(n)]
        if len(pkls) != 1:
            raise CheckpointError(
                f"not a PyTorch checkpoint: the zip archive has {len(pkls)} '<name>/data.pkl' members, not one", path
            )
        prefix = pkls[0][: -len("data.pkl")]
        order = infos.get(prefix + "byteorder")
        if order is not None:
            start = _member_data(f, order, size, path)
            f.seek(start)
            mark = f.read(min(order.file_size, 16))
            if mark != b"little":
                raise CheckpointError(
                    f"the storages are stored {mark.decode('ascii', 'replace')!r}-endian; only "
                    "little-endian checkpoints are supported",
                    path,
                )
        pkl = infos[pkls[0]]
        start = _member_data(f, pkl, size, path)
        if pkl.file_size > MAX_PICKLE:
            raise CheckpointError(f"the pickle is {pkl.file_size} bytes, more than the {MAX_PICKLE} read", path)
        f.seek(start)
        raw = f.read(pkl.file_size)
        if len(raw) != pkl.file_size:
            raise CheckpointError("the file was truncated while being read", path)
        if zlib.crc32(raw) != pkl.CRC:
            raise CheckpointError(f"corrupted: the member {pkls[0]!r} does not match its checksum", path)
        obj, storages = _unpickle(io.BytesIO(raw), path, legacy=False)
        where: dict[str, tuple[int, int]] = {}
        for key in storages:
            member = infos.get(f"{prefix}data/{key}")
            if member is None:
                raise CheckpointError(f"truncated or tampered: the storage member {prefix}data/{key} is missing", path)
            where[key] = (_member_data(f, member, size, path), member.file_size)
    return obj, where


def _parse_legacy(f: IO[bytes], path: str, size: int) -> tuple[Any, dict[str, tuple[int, int]]]:
    def header(what: str) -> Any:
        obj, _ = _unpickle(f, path, legacy=True)
        return obj

    magic = header("magic number")
    if type(magic) is not int or magic != _LEGACY_MAGIC:
        raise CheckpointError("not a PyTorch checkpoint: a pickle without torch.save's magic number", path)
    proto = header("protocol version")
    if proto != _LEGACY_PROTOCOL:
        raise CheckpointError(f"a PyTorch checkpoint of unknown protocol version {str(proto)[:20]}", path)
    info = header("system information")
    if type(info) is not dict or info.get("little_endian") is not True:
        raise CheckpointError("only little-endian PyTorch checkpoints are supported", path)
    obj, storages = _unpickle(f, path, legacy=True)
    keys = header("storage keys")
    if type(keys) is not list or sorted(storages) != sorted(str(k) for k in keys) or len(set(keys)) != len(keys):
        raise CheckpointError("corrupted: the list of storages does not match the tensors", path)
    where: dict[str, tuple[int, int]] = {}
    pos = f.tell()
    for key in keys:
        st = storages[str(key)]
        item = dtype_of(st.dtype).itemsize
        f.seek(pos)
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"truncated: the storage {key!r} is missing", path)
        numel = int.from_bytes(raw, "little")
        nbytes = numel * item
        if pos + 8 + nbytes > size:
            raise CheckpointError(
                f"truncated: the storage {key!r} of {nbytes} bytes runs past the end of the {size}-byte file", path
            )
        where[str(key)] = (pos + 8, nbytes)
        pos += 8 + nbytes
    if pos != size:
        raise CheckpointError(f"corrupted: {size - pos} bytes follow the last storage", path)
    return obj, where


def parse(path: str) -> Parsed:
    """Read and validate a PyTorch checkpoint's pickle and storage layout (no tensor data).

    Returns:
      A ``Parsed`` of format ``'pytorch'``: the tensors by PyTorch name (views into the file,
      see the module docstring), no metadata, and ``structure``, the pickled object as a
      ``spruce.treedef`` document.

    Raises:
      CheckpointError: not a PyTorch checkpoint, a pickle that asks for a global outside the
        allowed set (naming it), truncated or tampered archives, big-endian data, tensors
        reaching outside their storage.
      OSError: the file cannot be opened or read.
    """
    with open_regular(path) as f:
        ident = identity(f)
        size = ident[2]
        head = f.read(4)
        f.seek(0)
        if head[:2] == b"PK":
            obj, where = _parse_zip(f, path, size)
        elif head[:1] == b"\x80":
            obj, where = _parse_legacy(f, path, size)
        else:
            raise CheckpointError("not a PyTorch checkpoint (neither a zip archive nor a pickle)", path)
    doc, tensors = _document(obj, path, size)
    entries = _entries(tensors, where, path)
    return Parsed(path, FORMAT, entries, {}, size, ident, doc)
