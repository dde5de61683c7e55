"""A Llama-architecture decoder language model as a spruce Module, with a key-value cache that
is a pytree (imports JAX).

The architecture is the one of Meta's Llama as Hugging Face transformers' ``LlamaModel`` /
``LlamaForCausalLM`` implements it, and as llama.cpp's GGUF files describe it: token
embedding; ``num_hidden_layers`` pre-norm blocks, each RMSNorm -> grouped-query self-attention
with rotary position embeddings (half-rotation layout) -> residual, RMSNorm -> SwiGLU MLP
(``down(silu(gate(x)) * up(x))``) -> residual; a final RMSNorm; the output projection (tied to
the embedding when the checkpoint has none).  No biases.

Public API: ``LlamaConfig`` (sizes, read from a GGUF file's metadata or a Hugging Face
``config.json``), ``LlamaModel`` (the Module), ``KVCache`` (the cache, a Module of fixed-size
arrays passed in and returned by every call), and ``from_gguf_tensors`` (a LlamaModel from the
tensors ``spruce.io.load`` reads from a GGUF file).  Text generation is in
``spruce.models.smollm``.

The blocks are **stacked**: ``model.blocks`` is one ``LlamaBlock`` whose arrays have a leading
axis of length ``num_hidden_layers``, and the call runs them with ``jax.lax.scan`` (one block
is compiled, not thirty).  ``model.blocks.attention.q_proj.weight`` has shape ``(layers,
heads * head_dim, hidden)``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import nn
from .._module import Module, field

__all__ = ["KVCache", "LlamaAttention", "LlamaBlock", "LlamaConfig", "LlamaModel", "from_gguf_tensors"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a Llama model (the fields of Hugging Face's ``LlamaConfig`` that matter).

    Fields: ``vocab_size``, ``hidden_size``, ``intermediate_size`` (the SwiGLU width),
    ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (grouped-query
    attention: each key/value head serves ``num_attention_heads // num_key_value_heads`` query
    heads), ``rope_theta``, ``rms_norm_eps``, ``max_position_embeddings``,
    ``tie_word_embeddings`` (the output projection is the embedding matrix).  ``head_dim`` is
    ``hidden_size // num_attention_heads``.

    Raises ValueError for a size that is not a positive int, heads that do not divide the
    hidden size, or query heads not a multiple of the key/value heads.

    >>> cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
    ...                   num_attention_heads=4, num_key_value_heads=2)
    >>> cfg.head_dim
    2
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"LlamaConfig: {name} must be an int > 0, got {value!r}")
        if self.hidden_size % self.num_attention_heads or (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(
                f"LlamaConfig: hidden_size {self.hidden_size} must be num_attention_heads "
                f"{self.num_attention_heads} times an even head size"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"LlamaConfig: num_attention_heads {self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"LlamaConfig: {name} must be a number > 0, got {value!r}")

    @property
    def head_dim(self) -> int:
        """``hidden_size // num_attention_heads``."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LlamaConfig:
        """From a Hugging Face ``config.json`` dictionary (extra keys ignored;
        ``num_key_value_heads`` defaults to ``num_attention_heads``).  Raises ValueError for a
        missing key or an invalid value.

        >>> LlamaConfig.from_dict({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        ...     "num_hidden_layers": 1, "num_attention_heads": 2}).num_key_value_heads
        2
        """
        try:
            kwargs: dict[str, Any] = {
                name: d[name] for name in ("vocab_size", "hidden_size", "intermediate_size",
                                           "num_hidden_layers", "num_attention_heads")
            }
        except KeyError as e:
            raise ValueError(f"LlamaConfig.from_dict: missing key {e.args[0]!r}") from None
        kwargs["num_key_value_heads"] = d.get("num_key_value_heads") or d["num_attention_heads"]
        for name in ("rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings"):
            if name in d:
                kwargs[name] = d[name]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> LlamaConfig:
        """From a Hugging Face ``config.json`` file (see ``from_dict``)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any], *, tied: bool = True) -> LlamaConfig:
        """From a GGUF file's typed metadata (``spruce.io.read_gguf_metadata``) of architecture
        ``llama``: ``llama.block_count``, ``llama.embedding_length``,
        ``llama.feed_forward_length``, ``llama.attention.head_count`` / ``head_count_kv``,
        ``llama.rope.freq_base``, ``llama.attention.layer_norm_rms_epsilon``,
        ``llama.context_length``; the vocabulary size is ``llama.vocab_size`` or the length of
        ``tokenizer.ggml.tokens``.  ``tied``: whether the file has no ``output.weight`` (GGUF
        records tying by leaving it out).  Raises ValueError naming a missing key or another
        architecture.
        """
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise ValueError(f"LlamaConfig.from_gguf_metadata: architecture {arch!r}, expected 'llama'")

        def get(key: str, default: Any = None) -> Any:
            if f"llama.{key}" in meta:
                return meta[f"llama.{key}"]
            if default is None:
                raise ValueError(f"LlamaConfig.from_gguf_metadata: missing key 'llama.{key}'")
            return default

        vocab = meta.get("llama.vocab_size")
        if vocab is None:
            vocab = len(meta.get("tokenizer.ggml.tokens") or ()) or None
        if vocab is None:
            raise ValueError("LlamaConfig.from_gguf_metadata: no 'llama.vocab_size' nor 'tokenizer.ggml.tokens'")
        heads = get("attention.head_count")
        return cls(
            vocab_size=vocab,
            hidden_size=get("embedding_length"),
            intermediate_size=get("feed_forward_length"),
            num_hidden_layers=get("block_count"),
            num_attention_heads=heads,
            num_key_value_heads=get("attention.head_count_kv", heads),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            max_position_embeddings=get("context_length", 2048),
            tie_word_embeddings=tied,
        )


class KVCache(Module):
    """The key-value cache of a LlamaModel: fixed-size arrays, a pytree passed to every call
    and returned updated (so ``jax.jit``, ``jax.lax.scan`` / ``while_loop``, ``donate_argnums``
    and sharding treat it as any tree).

    Fields: ``keys`` and ``values`` of shape ``(layers, length, kv_heads, head_dim)`` (keys
    after the rotary embedding), and ``length``, an int32 scalar array: how many positions are
    filled (the position of the next token).  Entries at or after ``length`` are ignored.

    ``KVCache.empty(config, length, dtype=jnp.float32)`` makes an empty one.

    >>> cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
    ...                   num_attention_heads=4, num_key_value_heads=2)
    >>> cache = KVCache.empty(cfg, 16)
    >>> cache.keys.shape, int(cache.length), cache.capacity
    ((2, 16, 2, 2), 0, 16)
    """

    keys: jax.Array
    values: jax.Array
    length: jax.Array

    @classmethod
    def empty(cls, config: LlamaConfig, length: int, dtype: Any = jnp.float32) -> KVCache:
        """A cache of ``length`` positions, zeros, ``length`` field 0.  Raises ValueError for a
        length that is not an int > 0."""
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise ValueError(f"KVCache.empty: length must be an int > 0, got {length!r}")
        shape = (config.num_hidden_layers, length, config.num_key_value_heads, config.head_dim)
        return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((), jnp.int32))

    @property
    def capacity(self) -> int:
        """The number of positions the cache holds (static)."""
        return int(self.keys.shape[1])


def _rows(layer: nn.Linear, x: jax.Array) -> jax.Array:
    """A bias-free Linear applied to every row of ``x`` ``(L, in)`` -> ``(L, out)``."""
    return x @ layer.weight.T


def _norm_rows(norm: nn.RMSNorm, x: jax.Array) -> jax.Array:
    return jax.vmap(norm)(x)


class LlamaAttention(Module):
    """Grouped-query self-attention with rotary embeddings, reading and writing one layer of
    the cache.

    Fields: ``q_proj`` ``(heads * head_dim, hidden)``, ``k_proj`` / ``v_proj`` ``(kv_heads *
    head_dim, hidden)``, ``o_proj`` ``(hidden, heads * head_dim)`` (bias-free Linears, Hugging
    Face's names and layouts), ``rope`` (``nn.RotaryPositionalEmbedding(head_dim, theta)``);
    ``num_heads`` and ``num_kv_heads`` static.

    Call: ``attn(x, keys, values, start)`` with ``x`` ``(L, hidden)`` the tokens at positions
    ``start, ..., start + L - 1``; ``keys`` / ``values`` ``(length, kv_heads, head_dim)`` one
    layer of the cache.  The new keys and values are written at ``start``; query ``i`` attends
    to cache positions ``<= start + i`` (causal).  Returns ``(out (L, hidden), keys, values)``.
    Softmax in float32.
    """

    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear
    rope: nn.RotaryPositionalEmbedding
    num_heads: int = field(static=True)
    num_kv_heads: int = field(static=True)

    def __init__(self, config: LlamaConfig, *, key: jax.Array) -> None:
        kq, kk, kv, ko = jax.random.split(key, 4)
        d, h, kvh, hd = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.q_proj = nn.Linear(d, h * hd, use_bias=False, key=kq)
        self.k_proj = nn.Linear(d, kvh * hd, use_bias=False, key=kk)
        self.v_proj = nn.Linear(d, kvh * hd, use_bias=False, key=kv)
        self.o_proj = nn.Linear(h * hd, d, use_bias=False, key=ko)
        self.rope = nn.RotaryPositionalEmbedding(hd, float(config.rope_theta))
        self.num_heads = h
        self.num_kv_heads = kvh

    def __call__(self, x: jax.Array, keys: jax.Array, values: jax.Array,
                 start: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        n = x.shape[0]
        hd = self.rope.embedding_size
        groups = self.num_heads // self.num_kv_heads
        positions = start + jnp.arange(n, dtype=jnp.int32)

        def rope(v: jax.Array) -> jax.Array:  # (L, heads, head_dim): the rotation of every head
            out: jax.Array = jax.vmap(lambda h: self.rope(h, positions), in_axes=1, out_axes=1)(v)
            return out

        q = rope(_rows(self.q_proj, x).reshape(n, self.num_heads, hd))
        k = rope(_rows(self.k_proj, x).reshape(n, self.num_kv_heads, hd))
        v = _rows(self.v_proj, x).reshape(n, self.num_kv_heads, hd)
        zero = jnp.zeros((), jnp.int32)
        keys = jax.lax.dynamic_update_slice(keys, k.astype(keys.dtype), (start, zero, zero))
        values = jax.lax.dynamic_update_slice(values, v.astype(values.dtype), (start, zero, zero))
        q = q.reshape(n, self.num_kv_heads, groups, hd)
        scores = jnp.einsum("lkgd,mkd->kglm", q, keys).astype(jnp.float32) / math.sqrt(hd)
        allowed = jnp.arange(keys.shape[0])[None, :] <= positions[:, None]  # (L, length)
        scores = jnp.where(allowed, scores, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
        out = jnp.einsum("kglm,mkd->lkgd", weights, values).reshape(n, self.num_heads * hd)
        return _rows(self.o_proj, out.astype(x.dtype)), keys, values


class LlamaBlock(Module):
    """One decoder block: ``x + attention(attention_norm(x))``, then ``h + down(silu(gate(n)) *
    up(n))`` with ``n = mlp_norm(h)``.

    Fields: ``attention_norm``, ``mlp_norm`` (``nn.RMSNorm(hidden, eps)``), ``attention``
    (LlamaAttention), ``gate_proj`` / ``up_proj`` ``(intermediate, hidden)``, ``down_proj``
    ``(hidden, intermediate)`` (bias-free Linears).  Call: ``block(x, keys, values, start)`` as
    LlamaAttention's, returns ``(x, keys, values)``.
    """

    attention_norm: nn.RMSNorm
    attention: LlamaAttention
    mlp_norm: nn.RMSNorm
    gate_proj: nn.Linear
    up_proj: nn.Linear
    down_proj: nn.Linear

    def __init__(self, config: LlamaConfig, *, key: jax.Array) -> None:
        ka, kg, ku, kd = jax.random.split(key, 4)
        d, f = config.hidden_size, config.intermediate_size
        self.attention_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.attention = LlamaAttention(config, key=ka)
        self.mlp_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.gate_proj = nn.Linear(d, f, use_bias=False, key=kg)
        self.up_proj = nn.Linear(d, f, use_bias=False, key=ku)
        self.down_proj = nn.Linear(f, d, use_bias=False, key=kd)

    def __call__(self, x: jax.Array, keys: jax.Array, values: jax.Array,
                 start: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        a, keys, values = self.attention(_norm_rows(self.attention_norm, x), keys, values, start)
        h = x + a
        n = _norm_rows(self.mlp_norm, h)
        return h + _rows(self.down_proj, jax.nn.silu(_rows(self.gate_proj, n)) * _rows(self.up_proj, n)), keys, values


class LlamaModel(Module):
    """A Llama decoder language model (``LlamaForCausalLM``'s computation) on one sequence.

    Args:
      config: a LlamaConfig (the sizes become static fields of the submodules; the config is
        kept as the static field ``config``).
      key: PRNG key (keyword-only).  Random weights are only useful as a skeleton or for tests;
        ``from_gguf_tensors`` and ``spruce.models.smollm.load`` give trained ones.

    Fields: ``embed`` (``nn.Embedding(vocab, hidden)``), ``blocks`` (one LlamaBlock whose arrays
    are stacked over the layers: leading axis ``num_hidden_layers``), ``norm`` (the final
    RMSNorm), ``lm_head`` (``nn.Linear(hidden, vocab)`` without bias, or None when tied to
    ``embed.weight``).

    Call: ``model(token_ids, cache, num_valid=None)`` with ``token_ids`` integer ``(L,)`` at
    positions ``cache.length, ..., cache.length + L - 1``.  Returns ``(logits, cache)``:
    float32 ``(L, vocab)`` logits (those of transformers' ``LlamaForCausalLM`` for the same
    tokens), and the cache with these tokens' keys and values written and ``length``
    advanced by ``num_valid`` (an int or int32 scalar; default ``L``): pass a prompt padded to
    a fixed length and its real length, and the padding's entries are overwritten later.  The
    caller keeps ``cache.length + L <= cache.capacity`` (``jax.lax.dynamic_update_slice``
    would otherwise clamp the write); ``spruce.models.smollm`` checks it.

    >>> import jax, jax.numpy as jnp
    >>> cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
    ...                   num_attention_heads=4, num_key_value_heads=2)
    >>> model = LlamaModel(cfg, key=jax.random.key(0))
    >>> model.blocks.attention.q_proj.weight.shape
    (2, 8, 8)
    >>> logits, cache = jax.jit(lambda m, ids, c: m(ids, c))(model, jnp.array([1, 2, 3]), KVCache.empty(cfg, 8))
    >>> logits.shape, int(cache.length)
    ((3, 10), 3)
    >>> step, _ = model(jnp.array([4]), cache)      # one more token, from the cache
    >>> full, _ = model(jnp.array([1, 2, 3, 4]), KVCache.empty(cfg, 8))
    >>> bool(jnp.allclose(step[0], full[3], atol=1e-5))
    True
    """

    embed: nn.Embedding
    blocks: LlamaBlock
    norm: nn.RMSNorm
    lm_head: nn.Linear | None
    config: LlamaConfig = field(static=True)

    def __init__(self, config: LlamaConfig, *, key: jax.Array) -> None:
        ke, kb, kh = jax.random.split(key, 3)
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size, key=ke)
        keys = jax.random.split(kb, config.num_hidden_layers)
        self.blocks = jax.vmap(lambda k: LlamaBlock(config, key=k))(keys)
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, use_bias=False, key=kh)

    def __call__(self, token_ids: jax.Array, cache: KVCache,
                 num_valid: Any = None) -> tuple[jax.Array, KVCache]:
        hidden, cache = self.hidden(token_ids, cache, num_valid)
        return self.head(hidden), cache

    def hidden(self, token_ids: jax.Array, cache: KVCache,
               num_valid: Any = None) -> tuple[jax.Array, KVCache]:
        """The call without the output projection: the final normalised hidden states ``(L,
        hidden)`` and the updated cache (``head`` of one row is what generation needs)."""
        token_ids = jnp.asarray(token_ids)
        if token_ids.ndim != 1 or not jnp.issubdtype(token_ids.dtype, jnp.integer):
            raise ValueError(
                f"LlamaModel: token_ids must be an integer array (L,), got {token_ids.dtype}{list(token_ids.shape)}")
        start = cache.length
        x = self.embed.weight[token_ids]

        def layer(h: jax.Array, xs: tuple[LlamaBlock, jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
            block, keys, values = xs
            h, keys, values = block(h, keys, values, start)
            return h, (keys, values)

        x, (keys, values) = jax.lax.scan(layer, x, (self.blocks, cache.keys, cache.values))
        advance = token_ids.shape[0] if num_valid is None else num_valid
        length = (start + jnp.asarray(advance, jnp.int32)).astype(jnp.int32)
        return _norm_rows(self.norm, x), KVCache(keys, values, length)

    def head(self, hidden: jax.Array) -> jax.Array:
        """The output projection of hidden states ``(..., hidden)``: float32 logits ``(...,
        vocab)`` (the embedding matrix when tied)."""
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return (hidden @ weight.T).astype(jnp.float32)


def _unpermute(w: np.ndarray[Any, Any], heads: int) -> np.ndarray[Any, Any]:
    """Undo llama.cpp's reordering of ``attn_q`` / ``attn_k`` rows: its converter stores each
    head's rows with the two rotary halves interleaved (pairs ``(i, i + d/2)`` adjacent), for
    its interleaved rotary kernel; this returns them in Hugging Face's half-rotation order."""
    out, rest = w.shape[0], w.shape[1:]
    return w.reshape(heads, out // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def from_gguf_tensors(config: LlamaConfig, tensors: Mapping[str, Any]) -> LlamaModel:
    """A LlamaModel from the tensors of a llama.cpp GGUF file, as ``spruce.io.load(path)``
    returns them (dotted names nested: ``token_embd.weight``, ``blk.<i>.attn_q.weight``, ...,
    ``output_norm.weight``, optional ``output.weight``), dequantized.

    GGUF records shapes in the reverse of NumPy's order, which ``spruce.io`` already undoes
    (``blk.0.attn_q.weight`` is ``(out, in)`` as a torch Linear's weight).  ``attn_q`` and
    ``attn_k`` rows are in llama.cpp's interleaved order and are put back in Hugging Face's
    (half-rotation) order.  The per-layer arrays are stacked with NumPy (the leaves are NumPy
    arrays, as ``spruce.io.load`` gives).

    Raises ValueError naming a missing tensor or a tensor whose shape does not match the config.
    """
    def get(*path: str | int) -> np.ndarray[Any, Any]:
        node: Any = tensors
        for part in path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"from_gguf_tensors: missing tensor {'.'.join(map(str, path))!r}") from None
        return np.asarray(node)

    h, kvh = config.num_attention_heads, config.num_key_value_heads
    names = {
        ("attention_norm", "weight"): ("attn_norm", None),
        ("attention", "q_proj", "weight"): ("attn_q", h),
        ("attention", "k_proj", "weight"): ("attn_k", kvh),
        ("attention", "v_proj", "weight"): ("attn_v", None),
        ("attention", "o_proj", "weight"): ("attn_output", None),
        ("mlp_norm", "weight"): ("ffn_norm", None),
        ("gate_proj", "weight"): ("ffn_gate", None),
        ("up_proj", "weight"): ("ffn_up", None),
        ("down_proj", "weight"): ("ffn_down", None),
    }
    skeleton = jax.eval_shape(lambda: LlamaModel(config, key=jax.random.key(0)))
    stacked: dict[tuple[str, ...], np.ndarray[Any, Any]] = {}
    for path, (gguf_name, heads) in names.items():
        layers = []
        for i in range(config.num_hidden_layers):
            w = get("blk", i, gguf_name, "weight")
            layers.append(_unpermute(w, heads) if heads else w)
        stacked[path] = np.stack(layers).astype(np.float32, copy=False)
    head = None
    if not config.tie_word_embeddings:
        head = get("output", "weight")
    leaves: dict[tuple[str, ...], np.ndarray[Any, Any]] = {
        ("embed", "weight"): get("token_embd", "weight"),
        ("norm", "weight"): get("output_norm", "weight"),
    }
    leaves.update({("blocks", *k): v for k, v in stacked.items()})
    if head is not None:
        leaves[("lm_head", "weight")] = head

    def fill(path: Any, like: Any) -> Any:
        names = tuple(str(getattr(k, "name", getattr(k, "key", k))) for k in path)
        value = leaves.get(names)
        if value is None:
            raise ValueError(f"from_gguf_tensors: no tensor for {'.'.join(names)}")
        if value.shape != like.shape:
            raise ValueError(f"from_gguf_tensors: {'.'.join(names)} has shape {value.shape}, the config says {like.shape}")
        return value.astype(like.dtype, copy=False)

    model: LlamaModel = jax.tree_util.tree_map_with_path(fill, skeleton)
    return model

