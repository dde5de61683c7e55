"""spruce.io: pytrees to and from checkpoints (.safetensors and .npz), atomically and lazily.

``save(path, tree)`` writes every array leaf as a tensor named by its key path in dotted form
(``encoder.layers.0.attention.query.weight`` — the naming of PyTorch state dicts and Hugging
Face checkpoints) and the tree's structure as JSON in the file's metadata; ``load(path)``
rebuilds the tree, ``load(path, like=tree)`` fills a given structure (a Module included) and
checks every shape and dtype.  Files from other tools load too: a flat ``{name: tensor}`` file
nests by its dotted names (``unflatten_names``); PyTorch files and GGUF files (llama.cpp's,
dequantized to float32) are read without torch or llama.cpp.

- ``save(path, tree, *, metadata=None, skip_code=False, blocking=True)``
- ``save_sharded(directory, tree, *, metadata=None, skip_code=False, blocking=True)``: each process writes only its devices'
  distinct shards, as plain .safetensors pieces plus one JSON index; atomic as a whole
- ``PendingSave``: what both return with ``blocking=False``, once the arrays are in host
  memory (the file is written in a background thread): ``wait(timeout=None)``, ``done()``
- ``CheckpointManager(directory, *, keep_last=3, keep_best=0, metric=None, mode='min',
  blocking=False)``: numbered steps saved asynchronously and committed atomically (a commit
  marker written last), the newest and the best kept; ``save(step, tree, metrics=)``,
  ``steps()``, ``latest_step()``, ``best_step()``, ``metrics(step)``, ``restore(step=None, ...)``
- ``load(path, like=None, *, strict=True, rename=None, shardings=None, dtype=None, mmap=True)``
  -> tree, or ``LoadResult`` when ``strict=False``; a file or a sharded directory, placed
  straight onto any mesh with ``shardings=``
- ``read_header(path)`` -> ``{name: TensorInfo(dtype, shape, size, nbytes)}``, no data read
- ``read_metadata(path)`` -> the file's str -> str metadata
- ``read_info(path)`` -> ``CheckpointInfo(format, tensors, metadata)``, both from one read
- ``read_gguf_metadata(path)`` -> a GGUF file's metadata with its types (ints, floats, strings, lists);
  ``read_gguf_blocks(path, names=None)`` -> its tensors as stored (quantized blocks), which
  ``dequantize_gguf(type, blocks)`` turns into float32 as ``load`` does
- ``flatten_names(tree, *, sep='.')`` / ``unflatten_names(flat, *, sep='.')``;
  ``path_name(key_path, sep='.')``, the dotted name of one key path
- ``StoredNode``: what a Module / dataclass node loads as (without ``like``) when its class
  cannot be found where the file is read
- ``CheckpointError`` (unreadable / corrupted / unrebuildable file) and ``MismatchError``
  (the file does not fit ``like``), both ValueErrors.

Every path may also be a URL handled by fsspec (``s3://bucket/prefix``, ``gs://...``,
``memory://...``; ``pip install spruce[cloud]``), with ``storage_options=`` for the store: a
file is uploaded whole in one put, a sharded checkpoint commits when its index is uploaded
after every piece, and reads fetch only the byte ranges they need (docs/io.md).

Guarantees: writes are atomic (temporary file, fsync, rename); loading never unpickles and
validates every header before touching data (a lying or truncated file raises
CheckpointError without allocating what it declares); arrays of files over 64 MiB are
memory-mapped, so opening a 10 GB checkpoint reads only what is used (smaller files are read
whole, which a writer truncating the file cannot disturb; see ``load``).  The file format — names, metadata schema, the
rules for non-array leaves — is documented in docs/io.md.

>>> import os, tempfile, numpy as np
>>> import spruce.io
>>> path = os.path.join(tempfile.mkdtemp(), 'model.safetensors')
>>> params = {'encoder': [{'w': np.eye(2, dtype=np.float32)}], 'step': 7}
>>> spruce.io.save(path, params)
>>> list(spruce.io.read_header(path))
['encoder.0.w']
>>> spruce.io.load(path)['step']
7
"""

from .._extras import require as _require

_require("spruce.io", "io")  # before the imports below: a missing package names the extra to install

from .._names import flatten_names as flatten_names
from .._names import path_name as path_name
from .._names import unflatten_names as unflatten_names
from ._api import CheckpointInfo as CheckpointInfo
from ._api import LoadResult as LoadResult
from ._api import TensorInfo as TensorInfo
from ._api import load as load
from ._api import read_header as read_header
from ._api import read_info as read_info
from ._api import read_metadata as read_metadata
from ._api import save as save
from ._async import PendingSave as PendingSave
from ._errors import CheckpointError as CheckpointError
from ._errors import MismatchError as MismatchError
from ._gguf import GGUFBlocks as GGUFBlocks
from ._gguf import dequantize_gguf as dequantize_gguf
from ._gguf import read_gguf_blocks as read_gguf_blocks
from ._gguf import read_gguf_metadata as read_gguf_metadata
from ._manager import CheckpointManager as CheckpointManager
from ._sharded import save_sharded as save_sharded
from ._structure import StoredNode as StoredNode

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointManager",
    "GGUFBlocks",
    "LoadResult",
    "MismatchError",
    "PendingSave",
    "StoredNode",
    "TensorInfo",
    "dequantize_gguf",
    "flatten_names",
    "load",
    "path_name",
    "read_gguf_blocks",
    "read_gguf_metadata",
    "read_header",
    "read_info",
    "read_metadata",
    "save",
    "save_sharded",
    "unflatten_names",
]
