"""save, load, read_info, read_header, read_metadata."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import zipfile
from typing import (
    Any,
    Callable,
    Iterator,
    Literal,
    Mapping,
    NamedTuple,
    Union,
    overload,
)

import numpy as np

from .._names import unflatten_names
from . import _gguf, _npz, _safetensors, _sharded, _storage, _torch
from ._async import DEFAULT_BUFFERS, HostBuffers, PendingSave, start_transfers
from ._dtypes import NPZ_NAMES, SAFETENSORS_NAMES, describe
from ._errors import CheckpointError, MismatchError
from ._files import (
    Entry,
    MappedFile,
    Parsed,
    atomic_write,
    open_regular,
    open_same,
    shape_size,
    with_path,
)
from ._like import (
    _MAX_LISTED,
    Rename,
    _Cast,
    _entries,
    _listing,
    _load_like,
    _plain,
    _renamed,
)
from ._structure import (
    FORMAT_VERSION,
    TREEDEF_KEY,
    Decoder,
    LeafSpec,
    encode_tree,
    leaf_table,
)

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


class TensorInfo(NamedTuple):
    """One tensor of a checkpoint, from its header (no data read).

    Attributes:
      dtype: NumPy's name for the dtype (``'float32'``, ``'int64'``, ``'bfloat16'``); for a GGUF
        file, the stored GGUF type (``'F32'``, ``'F16'``, ``'Q4_1'``, ``'Q8_0'``: ``load`` gives
        F16, BF16 and the quantized types as float32).
      shape: the shape, a tuple of ints (NumPy's order, also for GGUF files).
      size: the number of elements (the product of ``shape``; 1 for shape ``()``).
      nbytes: the size of the data in bytes (as stored in the file).
    """

    dtype: str
    shape: tuple[int, ...]
    size: int
    nbytes: int


class CheckpointInfo(NamedTuple):
    """What ``read_info`` returns: a checkpoint's header, no data read.

    Attributes:
      format: ``'safetensors'``, ``'npz'``, ``'pytorch'``, ``'gguf'`` or ``'sharded'`` (from the
        suffix, or sniffed from the first bytes for another suffix: the rule ``load`` uses).
      tensors: ``{name: TensorInfo}`` as ``read_header`` gives it.
      metadata: the str -> str metadata as ``read_metadata`` gives it.
    """

    format: str
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


class LoadResult(NamedTuple):
    """What ``load(..., strict=False)`` returns.

    Attributes:
      tree: the loaded tree (leaves the file lacks keep their value from ``like``).
      missing: dotted names of the leaves of ``like`` that the file does not have.
      unexpected: names of the file's entries (as stored, before ``rename``) that were not
        loaded into any leaf.
    """

    tree: Any
    missing: list[str]
    unexpected: list[str]


# -- formats -------------------------------------------------------------------------------------


def _save_format(path: str) -> str:
    low = path.lower()
    if low.endswith(".safetensors"):
        return "safetensors"
    if low.endswith(".npz"):
        return "npz"
    raise ValueError(
        f"save: cannot tell the format of {path!r}: the file name must end in .safetensors or .npz"
    )


def _fspath(path: Any, function: str) -> str:
    """``path`` as a str (bytes paths are decoded as ``open()`` does, with os.fsdecode); a
    ``file://`` URL as its local path."""
    try:
        return _storage.local(os.fsdecode(path))
    except TypeError:
        raise TypeError(
            f"{function}: path must be a str, bytes or os.PathLike object, not {type(path).__name__}"
        ) from None


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """OSErrors raised inside name ``path`` (a failed read names no file by itself)."""
    try:
        yield
    except OSError as e:
        raise with_path(e, path) from None


def _parse(p: str) -> Parsed:
    if not _storage.is_url(p) and os.path.isdir(p):  # (a sharded checkpoint was looked for first)
        raise IsADirectoryError(errno.EISDIR, f"Is a directory but not a sharded checkpoint (no {_sharded.INDEX})", p)
    low = p.lower()
    if low.endswith(".npz"):
        return _npz.parse(p)
    if low.endswith(".safetensors"):
        return _safetensors.parse(p)
    with open_regular(p) as f:
        magic = f.read(4)
    if magic == _gguf.MAGIC or low.endswith(".gguf"):
        return _gguf.parse(p)
    if magic in (b"PK\x03\x04", b"PK\x05\x06"):
        return _torch.parse(p) if _torch.is_torch_zip(p) else _npz.parse(p)
    if magic[:1] == b"\x80" or low.endswith((".pt", ".pth")):  # a pickle: legacy torch.save
        return _torch.parse(p)
    try:
        return _safetensors.parse(p)
    except CheckpointError as e:  # neither the suffix nor the content says what this file is
        detail = str(e)[len(p) + 2 :] if str(e).startswith(p + ": ") else str(e)
        raise CheckpointError(
            "not a checkpoint spruce recognises (.safetensors, .npz, a PyTorch .pt/.pth/.bin file, a .gguf file, or a "
            f"sharded checkpoint directory); read as safetensors: {detail}",
            p,
        ) from None


def _parse_any(p: str) -> Parsed:
    """The header of a checkpoint file, or the merged header of a sharded directory."""
    if _sharded.is_sharded(p):
        return _sharded.parse_dir(p).parsed
    return _parse(p)


def _open(p: str, copy: bool) -> Any:
    """A reader (with ``.parsed``, ``.array(name)``, ``.region(name, index)``) for a file or a
    sharded directory."""
    if _sharded.is_sharded(p):
        return _sharded.Reader(_sharded.parse_dir(p), copy)
    return _Reader(_parse(p), copy)


class _Reader:
    """Arrays of one parsed file: views of the file read whole or mapped (``MappedFile``), new
    arrays read from it (``copy``), or decompressed npz members."""

    def __init__(self, parsed: Parsed, copy: bool = False) -> None:
        self.parsed = parsed
        self.copy = copy
        self.mapped = MappedFile(parsed, copy)
        self.file: Any = None
        self.zip: zipfile.ZipFile | None = None

    def array(self, name: str) -> np.ndarray[Any, Any]:
        e = self.parsed.tensors.get(name)
        if e is None:
            raise CheckpointError(
                f"the stored structure names a tensor {name[:200]!r} that the file does not have", self.parsed.path
            )
        if e.offset >= 0:
            return self.mapped.array(e)
        if _gguf.is_gguf(e):
            return _gguf.array(self.mapped, e, name, self.parsed.path)
        if self.zip is None:
            self.file = open_same(self.parsed)
            self.zip = zipfile.ZipFile(self.file)
        return _npz.read_member(self.zip, e, self.parsed.path)

    def region(self, name: str, index: Any, detach: bool = False) -> np.ndarray[Any, Any]:
        """The block ``index`` (a tuple of slices) of tensor ``name``; with ``detach``, a new
        array, and the tensor's pages are released from the process (``MappedFile.release``)."""
        e = self.parsed.tensors.get(name)
        if self.mapped.remote and index is not None and e is not None and e.offset >= 0:
            return self.mapped.block(e, index)  # only the block's bytes fetched
        arr = self.array(name)
        block = arr if index is None else arr[tuple(index)]
        if not detach:
            return block
        out = np.array(block)
        assert e is not None
        if e.offset >= 0 and not self.copy:
            self.mapped.release(e)
        return out

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()
            self.file.close()

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _info(e: Entry) -> TensorInfo:
    size = shape_size(e.shape)
    return TensorInfo(_gguf.stored_type(e) or describe(e.final_dtype), e.shape, size, e.nbytes)


def _doc(parsed: Parsed) -> dict[str, Any] | None:
    if parsed.structure is not None:
        return parsed.structure
    raw = parsed.metadata.get(TREEDEF_KEY)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"corrupted {TREEDEF_KEY} metadata: {e}", parsed.path) from None
    if type(doc) is not dict or "tree" not in doc or type(doc.get("version")) is not int:
        raise CheckpointError(f"corrupted {TREEDEF_KEY} metadata: no version and tree", parsed.path)
    if doc["version"] > FORMAT_VERSION:
        raise CheckpointError(
            f"the structure was written in spruce.io format version {doc['version']}; this "
            f"spruce reads version {FORMAT_VERSION} and older: upgrade spruce",
            parsed.path,
        )
    return doc


# -- public functions ------------------------------------------------------------------------------


def read_header(path: PathLike, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, TensorInfo]:
    """The tensors of a checkpoint — name, dtype, shape, size, bytes — without reading data.

    Reads only the header of a .safetensors file (8 bytes + its JSON header), and only the zip
    directory and .npy headers of an .npz file, so it takes milliseconds on any file size.
    The header is fully validated first (see ``load`` for what is checked).

    Args:
      path: a .safetensors or .npz file (another suffix: the format is sniffed); a str, bytes
        or os.PathLike; or a URL (``s3://...``, ``memory://...``: fsspec, docs/io.md), of
        which only the header's bytes are fetched.
      storage_options: for a URL, keyword arguments for its fsspec filesystem.

    Returns:
      ``{name: TensorInfo(dtype, shape, size, nbytes)}``, in the order of the saved tree for a
      file written by ``save`` (dicts in insertion order, Module fields in declaration
      order), in file order otherwise.  Non-array leaves
      that spruce stored in the metadata are not listed (see ``read_metadata``).

    Raises:
      CheckpointError: not a checkpoint, corrupted, truncated, or a header that lies; not a
        regular file (a FIFO, a device: refused before opening, so nothing waits).
      OSError: the file cannot be opened or read (FileNotFoundError; IsADirectoryError for a
        directory that is not a sharded checkpoint, having no ``index.json``; ...); the error
        names the file.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'w.safetensors')
    >>> save(path, {'w': np.zeros((2, 3), np.float32), 'step': 10})
    >>> read_header(path)
    {'w': TensorInfo(dtype='float32', shape=(2, 3), size=6, nbytes=24)}
    """
    return _read_info(path, "read_header", storage_options).tensors


def read_metadata(path: PathLike, *, storage_options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The str -> str metadata of a checkpoint (safetensors' ``__metadata__``; the
    ``__metadata__.npy`` member of an .npz), without reading tensor data.

    spruce's own entries start with ``spruce.``: ``spruce.treedef`` holds the tree structure as
    JSON (schema in docs/io.md).  Files written by other tools may have none, or their own
    (Hugging Face writes ``{'format': 'pt'}``).  A GGUF file's typed values are given as text:
    strings as they are, the others as JSON (``'30'``, ``'false'``, ``'["a", "b"]'``; the
    values themselves: ``read_gguf_metadata``).

    Raises:
      CheckpointError, OSError: as ``read_header``.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'm.npz')
    >>> save(path, [np.ones(2)], metadata={'epoch': '3'})
    >>> meta = read_metadata(path)
    >>> meta['epoch'], sorted(meta)
    ('3', ['epoch', 'spruce.treedef'])
    """
    return _read_info(path, "read_metadata", storage_options).metadata


def read_info(path: PathLike, *, storage_options: Mapping[str, Any] | None = None) -> CheckpointInfo:
    """A checkpoint's format, tensors and metadata from one read of its header (what
    ``read_header`` and ``read_metadata`` give, without parsing the file twice).

    Raises:
      CheckpointError, OSError: as ``read_header``.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'w.npz')
    >>> save(path, {'w': np.zeros(3, np.int8)}, metadata={'step': '5'})
    >>> info = read_info(path)
    >>> info.format, info.tensors, info.metadata['step']
    ('npz', {'w': TensorInfo(dtype='int8', shape=(3,), size=3, nbytes=3)}, '5')
    """
    return _read_info(path, "read_info", storage_options)


def _read_info(path: PathLike, function: str, storage_options: Mapping[str, Any] | None) -> CheckpointInfo:
    p = _fspath(path, function)
    _storage.resolve(p, storage_options)  # (a bad URL is named as given)
    with _storage.reading(storage_options), _naming(p):
        parsed = _parse_any(p)
    names = list(parsed.tensors)
    try:
        doc = _doc(parsed)
        if doc is not None:
            order = [s.name for s in leaf_table(doc["tree"], parsed.path) if s.tensor and s.name in parsed.tensors]
            names = list(dict.fromkeys(order + names))
    except CheckpointError:
        pass  # a corrupted structure does not stop listing the tensors (load reports it)
    tensors = {name: _info(parsed.tensors[name]) for name in names}
    return CheckpointInfo(parsed.format, tensors, dict(parsed.metadata))


def load_flat(path: PathLike) -> dict[str, Any]:
    """A checkpoint's entries by their names in the file, not nested: ``{name: leaf}`` with
    NumPy arrays as ``load`` reads them (views of the file read whole or mapped) and the
    Python values spruce stored in the metadata, the stored structure's leaves first.  (What
    ``spruce.view.diff`` and the ``spruce diff`` command compare: the file's own names, which
    nesting and renaming again would change for names holding ``%`` or naming a subtree too.)

    Raises:
      CheckpointError, OSError: as ``load``.
    """
    p = _fspath(path, "load")
    with _naming(p), _open(p, False) as reader:
        parsed = reader.parsed
        return {name: _plain(reader.array, spec) for name, spec in _entries(parsed, _doc(parsed)).items()}


@overload
def save(
    path: PathLike, tree: Any, *, metadata: Mapping[str, str] | None = None, skip_code: bool = False,
    blocking: Literal[True] = True, storage_options: Mapping[str, Any] | None = None,
) -> None: ...
@overload
def save(
    path: PathLike, tree: Any, *, metadata: Mapping[str, str] | None = None, skip_code: bool = False,
    blocking: Literal[False], storage_options: Mapping[str, Any] | None = None,
) -> PendingSave: ...
@overload
def save(
    path: PathLike, tree: Any, *, metadata: Mapping[str, str] | None = None, skip_code: bool = False,
    blocking: bool, storage_options: Mapping[str, Any] | None = None,
) -> PendingSave | None: ...


def save(
    path: PathLike, tree: Any, *, metadata: Mapping[str, str] | None = None, skip_code: bool = False,
    blocking: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> PendingSave | None:
    """Write a pytree to a .safetensors or .npz checkpoint, atomically.

    Every array leaf becomes one tensor named by its key path in dotted form
    (``encoder.layers.0.weight``; see ``flatten_names``), the naming of PyTorch state dicts
    and Hugging Face checkpoints.  The structure — containers, tuples vs lists, None holes,
    dict key order, namedtuples, Modules and their static fields — is stored as JSON in the
    metadata entry ``spruce.treedef``, so that ``load(path)`` rebuilds the tree.  Format and
    schema: docs/io.md.

    Leaves:

    - ``numpy.ndarray`` and ``jax.Array`` (copied to the host with ``np.asarray``): a tensor.
      Dtypes: bool, (u)int8-64, float16/32/64, bfloat16, float8 (e4m3fn, e4m3fnuz, e5m2,
      e5m2fnuz, e8m0fnu), complex64; .npz also complex128.
    - Typed PRNG keys (``jax.random.key(0)``, ``jax.random.split(key, 4)``, any
      implementation JAX knows by name: ``'threefry2x32'``, ``'rbg'``, ``'unsafe_rbg'``): their
      key data (``jax.random.key_data``, a uint32 tensor of shape ``keys.shape + (2,)`` or
      ``+ (4,)``) and the implementation's name, loaded back as typed keys
      (``jax.random.wrap_key_data``).
    - NumPy scalars (``np.float32(1)``, bfloat16 included): a 0-d tensor, loaded back as a
      NumPy scalar of the same dtype; 0-d arrays load back as 0-d arrays.
    - Python ``bool``, ``int`` (any size), ``float``, ``str``: stored exactly in the metadata
      (not as tensors), loaded back with their type.
    - code — functions and other callables (an activation such as ``jax.nn.relu`` in an
      ``equinox.nn.MLP``, a class, a method) and objects that are neither arrays nor builtin
      data: refused, or with ``skip_code=True`` left out, the structure recording where and
      what each was; ``load(path, like=...)`` takes them from ``like``.
    - anything else (``jax.ShapeDtypeStruct`` placeholders, complex numbers, bytes, arrays of
      a dtype the format lacks) is refused with a ValueError naming its key path, so that a
      file that saved always loads.

    The file is written to a temporary file in the same folder, flushed to disk (fsync) and
    renamed over ``path``: a crash or a kill at any point leaves either the old file or the
    new one.  An existing file keeps its permission bits; a new one gets those ``open()``
    gives (0o666 minus the umask).

    With ``blocking=False`` the call returns a ``PendingSave`` as soon as every array is
    copied to host memory (jax.Arrays: all device-to-host copies started at once), and the
    file is written from that copy in a background thread: the caller may donate, delete or
    overwrite its arrays at once.  Errors visible at call time (a leaf that cannot be
    stored, a bad suffix, ``path`` a directory or in a missing folder) are raised by the
    call; errors while writing (a full disk) by ``PendingSave.wait()``.  Extra host memory:
    the host copy of the arrays, whose buffers are kept after the save and reused by the next
    asynchronous one (arrays of the same byte sizes; buffers it does not reuse are freed), plus
    the writer's fixed buffer: the file is written straight from the copy.  With
    ``blocking=True`` jax.Arrays are read where they are (on the CPU, no copy at all).

    Args:
      path: the file (a str, bytes or os.PathLike); its suffix, ``.safetensors`` or ``.npz``,
        chooses the format.  A URL (``s3://bucket/model.safetensors``: fsspec, docs/io.md)
        is written in one upload of the finished file, which appears only when complete.
      tree: the pytree to save (a spruce Module included).
      metadata: extra str -> str entries for the file's metadata (keys must not start with
        ``spruce.``).
      skip_code: if True, leaves that are code (see above) are not stored: the file keeps
        their dotted names and what they were (``'the function relu (custom_jvp)'``), ``load``
        with ``like=`` takes them from ``like``, and ``load`` without ``like`` raises
        CheckpointError listing them.  False (default): such a leaf is a ValueError.  Data the
        format cannot hold is refused either way.
      blocking: True (default): return when the file is in place.  False: return a
        ``PendingSave`` once the data is in host memory, and write in the background.
      storage_options: for a URL, keyword arguments for its fsspec filesystem.

    Raises:
      ValueError: an unknown suffix; a leaf that cannot be stored (its key path is named); two
        leaves with the same name; a dict key that is not plain data; bad metadata.
      OSError: any I/O failure, in both formats, naming ``path``: the folder does not exist or
        cannot be written, ``path`` is a directory (IsADirectoryError), the disk is full
        (errno ENOSPC).  The old file, if any, is left as it was.

    Returns:
      None, or with ``blocking=False`` a ``PendingSave``.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'params.safetensors')
    >>> save(path, {'layers': [{'w': np.ones((2, 2), np.float32)}], 'lr': 0.1})
    >>> load(path)
    {'layers': [{'w': array([[1., 1.],
           [1., 1.]], dtype=float32)}], 'lr': 0.1}
    >>> save(path, {'w': np.ones(2), 'act': np.tanh}, skip_code=True)
    >>> load(path, like={'w': np.zeros(2), 'act': np.tanh})
    {'w': array([1., 1.]), 'act': <ufunc 'tanh'>}
    """
    p = _fspath(path, "save")
    remote = _storage.resolve(p, storage_options) is not None  # (a bad URL fails before any work)
    if blocking:
        write_file(p, prepare_file(p, tree, metadata, skip_code), storage_options)
        return None
    if not remote:
        target = os.path.realpath(p)
        if os.path.isdir(target):
            raise IsADirectoryError(errno.EISDIR, "Is a directory, not a regular file", p)
        folder = os.path.dirname(os.path.abspath(target))
        if not os.path.isdir(folder):
            raise FileNotFoundError(errno.ENOENT, f"the folder {folder!r} does not exist", p)
    job = prepare_file(p, tree, metadata, skip_code, DEFAULT_BUFFERS)

    def work() -> None:
        try:
            write_file(p, job, storage_options)
        finally:
            DEFAULT_BUFFERS.release(job.buffers)

    return PendingSave(p, work)


class FileJob(NamedTuple):
    """A single-file save prepared at call time: the format, the arrays (with ``host``: copies
    in host buffers, listed in ``buffers``) and the metadata."""

    fmt: str
    arrays: dict[str, Any]
    meta: dict[str, str]
    buffers: list[Any]


def prepare_file(
    p: str, tree: Any, metadata: Mapping[str, str] | None, skip_code: bool, host: HostBuffers | None = None
) -> FileJob:
    """What ``save`` does in the caller: checks, the structure, and with ``host`` the copy of
    every array into host buffers.  ``p`` (its suffix) chooses the format.

    Raises:
      ValueError: as ``save``; an array that cannot be copied to the host (naming it).
    """
    fmt = _save_format(p)
    meta: dict[str, str] = {}
    if metadata is not None:
        for k, v in metadata.items():
            if type(k) is not str or type(v) is not str:
                raise ValueError(f"save: metadata must map str to str, got {k!r}: {type(v).__name__}")
            if k.startswith("spruce."):
                raise ValueError(f"save: metadata keys starting with 'spruce.' are reserved, got {k!r}")
            meta[k] = v
    allowed = SAFETENSORS_NAMES if fmt == "safetensors" else NPZ_NAMES
    enc = encode_tree(tree, allowed, "." + fmt, keep_jax=host is not None, skip_code=skip_code)
    meta[TREEDEF_KEY] = json.dumps(enc.doc, allow_nan=False, separators=(",", ":"))
    arrays: dict[str, Any] = enc.arrays
    taken: list[Any] = []
    if host is not None:
        start_transfers(list(arrays.values()))
        copies = {}
        for name, x in arrays.items():
            try:
                copies[name] = host.copy(x, taken)
            except Exception as e:  # a deleted jax.Array, one not on this process, ...
                host.release(taken)
                raise ValueError(f"save: the array {name!r} cannot be copied to the host: {e}") from e
        host.trim()
        arrays = copies
    return FileJob(fmt, arrays, meta, taken)


def write_file(p: str, job: FileJob, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a prepared save to ``p`` atomically (``atomic_write``); to a URL, in one upload of
    the finished file (no rename on object stores)."""
    writer = _safetensors.write if job.fmt == "safetensors" else _npz.write
    if _storage.is_url(p):
        _storage.put(p, lambda tmp: writer(tmp, job.arrays, job.meta, p), storage_options)
    else:
        atomic_write(p, lambda tmp: writer(tmp, job.arrays, job.meta, p))


@overload
def load(
    path: PathLike, like: Any = None, *, strict: Literal[True] = True, rename: Rename | None = None, shardings: Any = None,
    dtype: Any = None, mmap: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> Any: ...
@overload
def load(
    path: PathLike, like: Any = None, *, strict: Literal[False], rename: Rename | None = None, shardings: Any = None,
    dtype: Any = None, mmap: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> LoadResult: ...
@overload
def load(
    path: PathLike, like: Any = None, *, strict: bool, rename: Rename | None = None, shardings: Any = None,
    dtype: Any = None, mmap: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> Any: ...


def load(
    path: PathLike, like: Any = None, *, strict: bool = True, rename: Rename | None = None, shardings: Any = None,
    dtype: Any = None, mmap: bool = True, storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Read a checkpoint written by ``save`` or ``save_sharded`` — or by another tool — into a
    pytree.

    ``path`` is a file or a sharded checkpoint directory (``save_sharded``); a sharded
    directory loads exactly as the single file holding the same tree would.

    Without ``like``, the structure comes from the file: a file written by spruce is rebuilt
    as it was saved (containers, key order, None holes, namedtuples, Modules with their static
    fields); arrays are NumPy arrays, typed PRNG keys are typed keys (jax.Arrays).  A
    PyTorch checkpoint (a ``torch.save`` file: ``.pt``, ``.pth``, ``.bin``) gives its
    pickled structure with NumPy arrays for the tensors, read
    without torch by an unpickler that refuses any global a state dict does not need (the rule
    of ``torch.load(weights_only=True)``; see docs/io.md).  A GGUF file (llama.cpp's format:
    ``.gguf``, or the GGUF magic number) gives its tensors nested by their dotted names, in
    NumPy's shape order, F16, BF16 and the quantized types (Q4_0 ... Q8_0, the K-quants)
    dequantized to float32 as ggml does (other GGUF types: CheckpointError naming the tensor;
    typed metadata: ``read_gguf_metadata``).  A file without spruce metadata (a
    Hugging Face safetensors file, a ``numpy.savez`` archive) is nested by ``unflatten_names``: dicts,
    with lists where the name components are 0, 1, ..., n-1; so is a dict of a PyTorch file whose
    keys are dotted names (a ``state_dict``: ``'0.weight'`` gives ``{'0': {'weight': ...}}``), so
    that ``save`` writes PyTorch's names back (a dict whose keys cannot nest, ``'a'`` beside
    ``'a.b'``, stays as it is).  Classes are looked up by
    module and name, only in modules already imported (or in packages already imported), and
    built field by field without calling them.  A class that cannot be found here does not
    stop the load: a namedtuple is rebuilt as a namedtuple class of the stored name and
    fields, a dataclass node (a Module) as a ``StoredNode`` stand-in (docs/io.md).  A node
    that cannot be rebuilt (its class has changed, its static fields were not plain data, or
    ``save(..., skip_code=True)`` left code out: all such leaves are listed) raises
    CheckpointError saying to pass ``like=``.

    With ``like`` (any pytree of the wanted structure: a freshly built Module, or its
    placeholders from ``spruce.jax.filter_eval_shape(Model, ...)``, which computes nothing and,
    unlike ``jax.eval_shape``, accepts models holding functions such as an
    ``equinox.nn.MLP``'s activation), each leaf of ``like`` is filled from the file entry
    with its dotted name (after ``rename``), and must match it: arrays by shape and dtype
    (cast only as ``dtype=`` says), typed PRNG keys by shape and implementation, Python
    scalars by type.  A leaf of ``like`` that no checkpoint holds — a function or another
    object that is neither an array nor a Python bool / int / float / str — is taken from
    ``like`` when the file has no entry for it (it was filtered out before saving, e.g. with
    ``equinox.filter(model, equinox.is_array)``, or left out by ``skip_code=True``).  The
    result's leaves follow ``like``'s: a ``jax.Array`` leaf gives a jax.Array on the same
    sharding, a NumPy array a NumPy array, a NumPy scalar a NumPy scalar, a Python scalar a
    Python scalar (also from a 0-d tensor of the same kind); a ``jax.ShapeDtypeStruct`` gives a
    NumPy array (a jax.Array if it has a sharding); keys are always jax.Arrays.

    A model loaded with NumPy leaves runs as it is, eagerly and under every JAX transform (the
    ``spruce.nn`` layers compute with ``jax.numpy``, which takes NumPy arrays and tracers
    alike).  Under ``jax.jit``, pass it as an argument, put on the device once::

        model = jax.device_put(model)                 # NumPy leaves -> jax.Arrays, once
        y = jax.jit(lambda m, x: m(x))(model, x)      # or spruce.jax.filter_jit

    A jitted function that closes over the model instead (``jax.jit(model)``,
    ``jax.jit(lambda x: model(x))``) bakes every array of the model into the compiled program
    as a constant (NumPy or JAX arrays alike): compilation is slower, the program holds a copy
    of the weights, and every new closure compiles again.  NumPy leaves passed as arguments
    without ``device_put`` are copied to the device on every call.

    Arrays from a .safetensors, PyTorch or uncompressed .npz file are views of the file's
    bytes, writable without changing the file: a file of at most 64 MiB is read into memory
    whole, a larger one is memory-mapped copy-on-write (nothing is read until used).  Before any
    data is touched the header is validated: a truncated file, a header whose length, offsets
    or sizes lie, a size larger than the file, unknown dtypes and pickled (object) arrays
    raise CheckpointError without allocating the declared sizes; nothing is ever unpickled.

    A mapped file (more than 64 MiB, with ``mmap=True``) must not be truncated in place while
    its arrays live: touching an array whose pages another process cut off (a writer that
    rewrites the file in place, as ``torch.save`` or ``numpy.savez`` do; ``save`` replaces the
    file instead, which is safe) kills the process with SIGBUS, as with any memory-mapped file.
    Files of at most 64 MiB and ``mmap=False`` are immune: a file cut short while ``load``
    reads it raises CheckpointError.  (The threshold is a measured trade: copying a 100 MiB
    file cost 25-60 ms and 100 MiB of process memory, mapping it 0.5 ms, and touching all of
    it through the map 5-15 ms, with the pages in the kernel's shared, reclaimable cache.)

    Args:
      path: a .safetensors, .npz, PyTorch (``torch.save``) or GGUF file (the format is sniffed
        from the content unless the suffix is .safetensors or .npz); a str, bytes or os.PathLike.
      like: optional pytree giving the structure and the expected leaves.
      strict: if True, every leaf of ``like`` must be in the file and every tensor of the file
        must be used (for a file with spruce metadata, without ``like``: used by the stored
        structure).  If False, leaves the file lacks keep ``like``'s value, unused entries are
        skipped, and a ``LoadResult(tree, missing, unexpected)`` is returned instead of the tree.
      rename: maps a name in the file to the dotted name of a leaf of ``like``: a mapping
        (names it lacks are kept) or a function (returning None drops the entry).  E.g. a
        Hugging Face BERT tensor ``encoder.layer.0.attention.self.query.weight`` to
        ``layers.0.attention.query_proj.weight``.  Without ``like``, the renamed flat entries
        are nested by ``unflatten_names`` (the stored structure is not used: typed PRNG keys
        are their uint32 key data, leaves that ``save`` left out are absent).
      shardings: a ``jax.sharding.Sharding``, or a tree of them (None: not placed) matching
        ``like`` or a prefix of it (without ``like``: the stored tree): each array leaf
        becomes a ``jax.Array`` built with ``jax.make_array_from_callback``, each device
        reading only the bytes of its own slice from the memory map of a file over 64 MiB (a
        sharded directory's pieces are read only where they overlap that slice).  Any mesh
        works, whatever the layout at save time.  Each block is copied out of the map and the pages it came from
        are released, so placing a checkpoint holds the placed arrays, not also the file's
        pages.  A ``jax.Device`` entry means a ``SingleDeviceSharding``.  Without it, a
        ``jax.Array`` leaf of ``like`` gives its own sharding, and other leaves load as NumPy
        arrays.
      dtype: None (default): dtypes must match exactly.  A floating-point dtype
        (``jnp.float32``, ``'bfloat16'``): every floating-point tensor is cast to it (integer
        and bool tensors are not; another dtype is a TypeError).  ``'like'``: each tensor is
        cast to the dtype of the ``like`` leaf it loads into when both are floating-point, or
        both integers (PyTorch's ``load_state_dict`` copies into the parameter's dtype the same
        way) — an integer tensor only if every value fits the target (int64 position ids
        into an int32 leaf), else a MismatchError naming the key path, the values and the
        target's range; bool tensors and keys are never cast.  Casting copies the array
        (and reads a cast integer tensor whole, to check its range).
      mmap: True (default): arrays are views of the file read whole (at most 64 MiB) or of a
        copy-on-write memory map (larger files).  False: every array is read from the file
        into memory of its own before ``load`` returns, at any size, so that nothing refers to
        the file afterwards (rewriting or truncating it cannot disturb the arrays).  From a
        URL, arrays are always read into memory of their own.
      storage_options: for a URL (``path`` may be ``s3://...``, ``gs://...``,
        ``memory://...``: fsspec, docs/io.md), keyword arguments for its fsspec filesystem.
        Only byte ranges are fetched: the header, then the tensors loaded (with
        ``shardings``, each device's block alone).

    Returns:
      The tree; with ``strict=False``, a ``LoadResult``.

    Raises:
      CheckpointError: the file is not a checkpoint (or not a regular file), is corrupted or
        truncated, its header lies, or its stored structure cannot be rebuilt without ``like``.
      MismatchError: with ``like``, a shape / dtype / kind differs (always; the message
        names the leaves ``dtype='like'`` would load), an integer tensor does not fit the dtype
        ``dtype='like'`` casts it to, or (strict) names are missing or unexpected; the message
        lists the dotted names (the file's as ``rename`` gave them).
      ValueError: ``rename`` maps two entries to one name; ``shardings`` is not a prefix of
        the tree (naming the key path); ``dtype='like'`` without ``like`` or ``shardings``.
      TypeError: an entry of ``shardings`` that is not a Sharding, a Device or None (naming
        its key path); ``dtype`` that is not a floating-point dtype.
      spruce.sharding.ShardingError: (a ValueError) a sharding does not fit its tensor (a
        spec longer than the rank, a dimension the mesh axes do not divide), naming the key
        path, the shape and the spec.
      OSError: the file cannot be opened, mapped or read; the error names the file.  A
        directory without an ``index.json`` (not a sharded checkpoint) is an
        IsADirectoryError saying so.

    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), 'ckpt.npz')
    >>> save(path, {'w': np.arange(3.0), 'b': (np.float32(0.5), None)})
    >>> load(path)
    {'w': array([0., 1., 2.]), 'b': (np.float32(0.5), None)}
    >>> like = {'w': np.zeros(3), 'extra': np.zeros(1)}
    >>> res = load(path, like, strict=False)
    >>> res.tree['w'], res.missing, res.unexpected
    (array([0., 1., 2.]), ['extra'], ['b.0'])
    """
    p = _fspath(path, "load")
    cast = _Cast(dtype)
    if cast.like and like is None and shardings is None:
        raise ValueError("load: dtype='like' casts to the dtypes of like's leaves: pass like=")
    _storage.resolve(p, storage_options)  # (a bad URL is named as given)
    with _storage.reading(storage_options), _naming(p):
        return _load(p, like, strict, rename, shardings, cast, mmap)


def _load(p: str, like: Any, strict: bool, rename: Rename | None, shardings: Any, cast: _Cast, mmap: bool) -> Any:
    with _open(p, not mmap) as reader:
        parsed = reader.parsed
        doc = _doc(parsed)
        if like is None and shardings is not None:
            # the stored tree with zero-byte placeholder leaves (of the loaded dtype) as like=
            def placeholder(name: str) -> np.ndarray[Any, Any]:
                e = parsed.tensors[name]
                return np.broadcast_to(np.zeros((), cast.result(e.final_dtype)), e.shape)

            like = _load_plain(parsed, doc, placeholder, strict, rename)[0]
        if like is not None:
            tree, missing, unexpected = _load_like(parsed, doc, reader, like, strict, rename, shardings, cast)
        else:
            tree, missing, unexpected = _load_plain(parsed, doc, lambda n: cast.apply(reader.array(n)), strict, rename)
    return tree if strict else LoadResult(tree, missing, unexpected)


def _load_plain(
    parsed: Parsed, doc: dict[str, Any] | None, array: Callable[[str], Any], strict: bool, rename: Rename | None
) -> tuple[Any, list[str], list[str]]:
    """Load without ``like``: the stored structure, or the names nested."""
    if rename is None and doc is not None:
        _refuse_skipped(parsed, [s for s in leaf_table(doc["tree"], parsed.path) if s.skipped])
        dec = Decoder(parsed.path, array)
        tree = dec.decode(doc["tree"])
        unexpected = [n for n in parsed.tensors if n not in dec.used]
        if strict and unexpected:
            raise MismatchError(
                f"load: {parsed.path}: the file has tensors that its stored structure does "
                f"not use: {_listing(unexpected)} (strict=False loads without them)",
                unexpected=unexpected,
            )
        return tree, [], unexpected
    entries = _renamed(_entries(parsed, doc), rename)
    # (the names of the file's data: leaves that save left out hold none)
    flat = {target: _plain(array, spec) for target, (_, spec) in entries.items() if not spec.skipped}
    try:
        return unflatten_names(flat), [], []
    except ValueError as e:  # names that cannot nest ('a' beside 'a.b'): the file's, or rename's
        raise CheckpointError(
            f"the tensor names cannot be nested: {e}; load(path, rename=...) can give them names that nest", parsed.path
        ) from None


def _refuse_skipped(parsed: Parsed, skipped: list[LeafSpec]) -> None:
    """Raise if the stored structure has leaves that ``save(skip_code=True)`` left out."""
    if not skipped:
        return
    shown = ", ".join(f"{s.name!r} ({s.value[:100]})" for s in skipped[:_MAX_LISTED])
    more = f" and {len(skipped) - _MAX_LISTED} more" if len(skipped) > _MAX_LISTED else ""
    raise CheckpointError(
        f"the stored structure cannot be rebuilt without like=: save left out {len(skipped)} "
        f"{'leaves that are' if len(skipped) > 1 else 'leaf that is'} code, "
        f"not data (skip_code=True): {shown}{more}. Load it into a tree of the same structure "
        "with spruce.io.load(path, like=...), which takes them from like; "
        "spruce.jax.filter_eval_shape(Model, ...) builds one without computing anything",
        parsed.path,
    )
