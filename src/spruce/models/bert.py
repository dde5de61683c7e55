"""A BERT encoder (Devlin et al., 2019) built from ``spruce.nn`` layers (imports JAX).

The architecture is the one of the original BERT and of Hugging Face's ``BertModel`` (the
reference for its numerics): token + absolute-position + token-type embeddings followed by a
LayerNorm; then ``num_hidden_layers`` post-LayerNorm encoder layers, each multi-head
self-attention with a residual connection and LayerNorm, then a two-layer feed-forward block
(activation ``hidden_act``, "gelu" being the exact erf form) with a residual connection and
LayerNorm; and an optional pooler, ``tanh(Linear(hidden[0]))``.  Dropout is left out: this is
an inference model.

Like every spruce layer, the model acts on **one sequence** (no batch axis); batch it with
``jax.vmap``.  Checkpoints in Hugging Face's naming load through ``spruce.io.load`` with
``rename=checkpoint_key`` (see ``spruce.models.minilm.load``).

Module layout (dotted key paths, as ``spruce.io`` names tensors)::

    embeddings.word_embeddings.weight         (vocab_size, hidden)
    embeddings.position_embeddings.weight     (max_position_embeddings, hidden)
    embeddings.token_type_embeddings.weight   (type_vocab_size, hidden)
    embeddings.layer_norm.weight / .bias      (hidden,)
    embeddings.position_ids                   (1, max_position_embeddings) int64 buffer
    layers.<i>.attention.{query,key,value,output}_proj.weight / .bias
    layers.<i>.attention_norm.weight / .bias
    layers.<i>.intermediate.weight / .bias    (intermediate, hidden) / (intermediate,)
    layers.<i>.output.weight / .bias          (hidden, intermediate) / (hidden,)
    layers.<i>.output_norm.weight / .bias
    pooler.weight / .bias                     (hidden, hidden) / (hidden,)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from .. import nn, tree
from .._module import Module, field
from .._module._surgery import tree_at
from ..nn._attention import attend

__all__ = [
    "ACTIVATIONS",
    "BertConfig",
    "BertEmbeddings",
    "BertLayer",
    "BertModel",
    "BertSelfAttention",
    "checkpoint_key",
]


def _gelu_erf(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


#: The ``hidden_act`` names of Hugging Face configs that BertLayer understands, and their
#: functions: "gelu" is the exact (erf) GELU; "gelu_new" / "gelu_pytorch_tanh" the tanh
#: approximation.
ACTIVATIONS: Mapping[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": _gelu_erf,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The hyper-parameters of a BERT encoder, named as in Hugging Face's ``config.json``.

    Defaults are BERT-base's.  Only the fields below are read; ``position_embedding_type``
    must be "absolute" when present.

    >>> c = BertConfig.from_dict({"hidden_size": 384, "num_hidden_layers": 6,
    ...                           "num_attention_heads": 12, "intermediate_size": 1536,
    ...                           "model_type": "bert", "use_cache": True})
    >>> c.hidden_size, c.num_hidden_layers, c.head_size, c.layer_norm_eps
    (384, 6, 32, 1e-12)
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name in ("hidden_act", "layer_norm_eps"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"BertConfig: {f.name} must be a non-negative int, got {v!r}")
        if self.num_attention_heads == 0 or self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig: hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig: unsupported hidden_act {self.hidden_act!r}; expected one of {sorted(ACTIVATIONS)}"
            )
        if not isinstance(self.layer_norm_eps, (int, float)) or not self.layer_norm_eps > 0:
            raise ValueError(f"BertConfig: layer_norm_eps must be a positive number, got {self.layer_norm_eps!r}")

    @property
    def head_size(self) -> int:
        """Per-head size of queries, keys and values: ``hidden_size // num_attention_heads``."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BertConfig:
        """Build from a ``config.json`` mapping; unknown keys are ignored.

        Raises ValueError for a ``position_embedding_type`` other than "absolute", an unknown
        ``hidden_act`` or an out-of-range size.
        """
        pet = d.get("position_embedding_type", "absolute")
        if pet != "absolute":
            raise ValueError(f"BertConfig: only position_embedding_type='absolute' is supported, got {pet!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> BertConfig:
        """Read a Hugging Face ``config.json`` (OSError if unreadable, ValueError if invalid)."""
        with open(path, encoding="utf-8") as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"BertConfig: {os.fspath(path)} is not valid JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError(f"BertConfig: {os.fspath(path)} must hold a JSON object")
        return cls.from_dict(d)


def _tokens(layer: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
    """Apply a one-vector layer to every row of ``x`` (a sequence of shape ``(L, ...)``)."""
    return jax.vmap(layer)(x)


class BertEmbeddings(Module):
    """Word + absolute-position + token-type embeddings, then LayerNorm.

    Args:
      config: a BertConfig.
      key: PRNG key (keyword-only) for the three tables (``normal(0, 1)`` as nn.Embedding).

    Fields: ``word_embeddings``, ``position_embeddings``, ``token_type_embeddings``
    (nn.Embedding), ``layer_norm`` (nn.LayerNorm, eps ``layer_norm_eps``) and
    ``position_ids``, the checkpoint's int64 buffer ``arange(max_position_embeddings)`` of
    shape ``(1, max_position_embeddings)`` (a NumPy array; kept as a leaf so that checkpoints
    round-trip whole).

    Call: ``emb(input_ids, token_type_ids=None, position_ids=None)`` with integer arrays of
    shape ``(L,)``, ``L <= max_position_embeddings`` (ValueError otherwise); token types default
    to 0, positions to ``0, 1, ..., L - 1`` (pass them to restart the positions, e.g. for
    several sequences packed into one; each must be below ``max_position_embeddings``, as in
    Hugging Face's ``BertEmbeddings``).  Returns ``(L, hidden_size)`` float32.
    """

    word_embeddings: nn.Embedding
    position_embeddings: nn.Embedding
    token_type_embeddings: nn.Embedding
    layer_norm: nn.LayerNorm
    position_ids: Any

    def __init__(self, config: BertConfig, *, key: jax.Array) -> None:
        kw, kp, kt = jax.random.split(key, 3)
        h = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, h, key=kw)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h, key=kp)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h, key=kt)
        self.layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.position_ids = np.arange(config.max_position_embeddings, dtype=np.int64)[None, :]

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array | None = None,
                 position_ids: jax.Array | None = None) -> jax.Array:
        length = jnp.shape(input_ids)[0]
        if jnp.ndim(input_ids) != 1 or length > self.position_embeddings.num_embeddings:
            raise ValueError(
                "BertEmbeddings: input_ids must have shape (L,) with L <= "
                f"{self.position_embeddings.num_embeddings} (one sequence; use jax.vmap for a "
                f"batch), got {jnp.shape(input_ids)}"
            )
        if token_type_ids is None:
            token_type_ids = jnp.zeros((length,), jnp.int32)
        if position_ids is None:
            positions = jnp.asarray(self.position_ids)[0, :length]
        elif jnp.shape(position_ids) != (length,):
            raise ValueError(
                f"BertEmbeddings: position_ids must have the shape of input_ids, {(length,)}, got {jnp.shape(position_ids)}"
            )
        else:
            positions = jnp.asarray(position_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return _tokens(self.layer_norm, x)


class BertSelfAttention(Module):
    """BERT's multi-head self-attention with its output projection (Hugging Face's
    ``attention.self`` and ``attention.output.dense``; the LayerNorm after it is BertLayer's).

    ``out = output_proj(concat_h(softmax(q_h k_h^T / sqrt(head_size)) v_h))`` with
    ``q = query_proj(x)``, ``k = key_proj(x)``, ``v = value_proj(x)`` split into heads, the
    softmax in float32 (``spruce.nn.MultiheadAttention``'s computation).  BERT keeps its own
    module rather than ``nn.MultiheadAttention``, whose input projections are PyTorch's single
    ``in_proj_weight`` of shape ``(3 * hidden, hidden)``: Hugging Face checkpoints hold the
    query, key and value projections as separate tensors, and four separate Linears load them
    one to one by name (``checkpoint_key``), so that every tensor is checked and may be sharded
    by its own rule (split by heads) when loaded, with no concatenation.

    Args:
      hidden_size: model size ``E`` (the input and output feature size).
      num_heads: number of heads (ValueError unless it is >= 1 and divides ``hidden_size``).
      key: PRNG key (keyword-only) for the four projections (initialised as nn.Linear documents).

    Fields: ``query_proj``, ``key_proj``, ``value_proj``, ``output_proj``, each an
    nn.Linear(E, E) with bias; static ``num_heads``.

    Call: ``attn(x, mask=None)`` with ``x`` of shape ``(L, E)`` (one sequence) and ``mask`` a
    boolean ``(L, L)`` array, True where query ``i`` may attend to key ``j`` (give every query
    at least one key: a query with none gets output ``output_proj.bias``).  Returns ``(L, E)``.
    Raises ValueError for a wrong input or mask shape.
    """

    query_proj: nn.Linear
    key_proj: nn.Linear
    value_proj: nn.Linear
    output_proj: nn.Linear
    num_heads: int = field(static=True)

    def __init__(self, hidden_size: int, num_heads: int, *, key: jax.Array) -> None:
        if num_heads < 1 or hidden_size % num_heads:
            raise ValueError(f"BertSelfAttention: hidden_size ({hidden_size}) must be a multiple of num_heads ({num_heads}) >= 1")
        kq, kk, kv, ko = jax.random.split(key, 4)
        self.query_proj = nn.Linear(hidden_size, hidden_size, key=kq)
        self.key_proj = nn.Linear(hidden_size, hidden_size, key=kk)
        self.value_proj = nn.Linear(hidden_size, hidden_size, key=kv)
        self.output_proj = nn.Linear(hidden_size, hidden_size, key=ko)
        self.num_heads = num_heads

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        hidden = self.query_proj.weight.shape[1]
        if jnp.ndim(x) != 2 or jnp.shape(x)[1] != hidden:
            raise ValueError(
                f"BertSelfAttention: x must have shape (L, {hidden}) (one sequence; use jax.vmap for a batch), "
                f"got {jnp.shape(x)}"
            )
        length = x.shape[0]
        if mask is not None and jnp.shape(mask) != (length, length):
            raise ValueError(f"BertSelfAttention: mask must have shape {(length, length)}, got {jnp.shape(mask)}")
        h = self.num_heads
        q, k, v = (_tokens(p, x).reshape(length, h, -1) for p in (self.query_proj, self.key_proj, self.value_proj))
        blocked = None if mask is None else ~jnp.asarray(mask, bool)[None]
        out, _ = attend(q, k, v, blocked=blocked)
        return _tokens(self.output_proj, out.reshape(length, -1))


class BertLayer(Module):
    """One post-LayerNorm encoder layer: self-attention, then the feed-forward block.

    ``a = attention_norm(x + attention(x, x, x, mask))``, then
    ``y = output_norm(a + output(act(intermediate(a))))`` with ``act = ACTIVATIONS[activation]``.

    Args:
      config: a BertConfig.
      key: PRNG key (keyword-only) for the projections (initialised as nn.Linear documents).

    Fields: ``attention`` (BertSelfAttention),
    ``attention_norm``, ``intermediate`` (Linear hidden -> intermediate), ``output`` (Linear
    intermediate -> hidden), ``output_norm``; ``activation`` (static, a name in ACTIVATIONS).

    Call: ``layer(x, mask=None)`` with ``x`` of shape ``(L, hidden_size)`` and ``mask`` either
    a boolean ``(L,)`` array, True for real tokens (keys where it is False get no attention),
    or a boolean ``(L, L)`` array, True where query ``i`` may attend to key ``j`` (e.g.
    block-diagonal for packed sequences; give every query at least one key).  Returns
    ``(L, hidden_size)``.
    """

    attention: BertSelfAttention
    attention_norm: nn.LayerNorm
    intermediate: nn.Linear
    output: nn.Linear
    output_norm: nn.LayerNorm
    activation: str = field(static=True)

    def __init__(self, config: BertConfig, *, key: jax.Array) -> None:
        ka, ki, ko = jax.random.split(key, 3)
        h = config.hidden_size
        self.attention = BertSelfAttention(h, config.num_attention_heads, key=ka)
        self.attention_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(h, config.intermediate_size, key=ki)
        self.output = nn.Linear(config.intermediate_size, h, key=ko)
        self.output_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.activation = config.hidden_act

    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        length = x.shape[0]
        if mask is None:
            pair_mask = None
        elif jnp.ndim(mask) == 2:
            pair_mask = jnp.asarray(mask, bool)
        else:
            pair_mask = jnp.broadcast_to(jnp.asarray(mask, bool)[None, :], (length, length))
        a = _tokens(self.attention_norm, x + self.attention(x, pair_mask))
        act = ACTIVATIONS[self.activation]
        h = act(_tokens(self.intermediate, a))
        return _tokens(self.output_norm, a + _tokens(self.output, h))


class BertModel(Module):
    """A BERT encoder: embeddings, ``num_hidden_layers`` BertLayers and an optional pooler.

    Args:
      config: a BertConfig (the sizes are then static fields of the submodules; the config is
        not stored).
      add_pooler: include the pooler ``Linear(hidden, hidden)`` (default True, as checkpoints
        of ``BertModel`` carry it).
      key: PRNG key (keyword-only), split between the embeddings, the layers and the pooler.
        Random weights are only useful as a skeleton to load a checkpoint into, or for tests.

    Call: ``model(input_ids, attention_mask=None, token_type_ids=None, position_ids=None)`` on
    one sequence: ``input_ids`` integer ``(L,)``, ``attention_mask`` ``(L,)`` (nonzero / True
    for real tokens, zero for padding; default all real) or ``(L, L)`` (query ``i`` may attend
    to key ``j``, as ``BertLayer``'s mask), ``token_type_ids`` integer ``(L,)`` (default
    zeros), ``position_ids`` integer ``(L,)`` (default ``0, ..., L - 1``).  Returns the last
    hidden state, float32 ``(L, hidden_size)``, as ``BertModel(...).last_hidden_state`` of
    Hugging Face transformers.  ``model.pool(hidden)``
    gives the pooled ``(hidden_size,)`` vector.

    Shapes of a small random model's outputs (``jax.eval_shape`` traces without computing;
    ``jax.jit`` the call to run it fast):

    >>> import jax, jax.numpy as jnp
    >>> cfg = BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=2,
    ...                  num_attention_heads=2, intermediate_size=16, max_position_embeddings=6)
    >>> def run(ids, mask):
    ...     model = BertModel(cfg, key=jax.random.key(0))
    ...     hidden = model(ids, mask)
    ...     batch = jax.vmap(model)(jnp.stack([ids, ids, ids]), jnp.stack([mask, mask, mask]))
    ...     return hidden, model.pool(hidden), batch
    >>> hidden, pooled, batch = jax.eval_shape(run, jnp.array([1, 5, 2, 0]), jnp.array([1, 1, 1, 0]))
    >>> hidden.shape, hidden.dtype, pooled.shape, batch.shape
    ((4, 8), dtype('float32'), (8,), (3, 4, 8))
    """

    embeddings: BertEmbeddings
    layers: tuple[BertLayer, ...]
    pooler: nn.Linear | None

    def __init__(self, config: BertConfig, add_pooler: bool = True, *, key: jax.Array) -> None:
        keys = jax.random.split(key, config.num_hidden_layers + 2)
        self.embeddings = BertEmbeddings(config, key=keys[0])
        self.layers = tuple(BertLayer(config, key=k) for k in keys[1:-1])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size, key=keys[-1]) if add_pooler else None

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        token_type_ids: jax.Array | None = None,
        position_ids: jax.Array | None = None,
    ) -> jax.Array:
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        mask = None if attention_mask is None else jnp.asarray(attention_mask) != 0
        for layer in self.layers:
            x = layer(x, mask)
        return x

    @classmethod
    def skeleton(cls, config: BertConfig, add_pooler: bool = True) -> BertModel:
        """A BertModel with every leaf a NumPy zero array of the right shape and dtype.

        The ``like=`` structure to load a checkpoint into: no random initialisation runs (the
        shapes come from ``jax.eval_shape``), and ``np.zeros`` memory is not touched until
        written, so this is cheap even for large models.  ``embeddings.position_ids`` holds
        its real int64 values.

        >>> m = BertModel.skeleton(BertConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1))
        >>> m.embeddings.word_embeddings.weight.shape, m.embeddings.position_ids.dtype
        ((30522, 8), dtype('int64'))
        """
        shapes = jax.eval_shape(lambda: cls(config, add_pooler, key=jax.random.key(0)))
        model = tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
        position_ids = np.arange(config.max_position_embeddings, dtype=np.int64)[None, :]
        out: BertModel = tree_at(lambda m: m.embeddings.position_ids, model, position_ids)
        return out

    def pool(self, hidden: jax.Array) -> jax.Array:
        """``tanh(pooler(hidden[0]))``, shape ``(hidden_size,)`` (the [CLS] token's vector).
        Raises ValueError when the model has no pooler."""
        if self.pooler is None:
            raise ValueError("BertModel.pool: this model was built with add_pooler=False")
        return jnp.tanh(self.pooler(hidden[0]))


# Hugging Face BERT tensor names -> this module's dotted key paths.  Each rule is
# (pattern, replacement); the first full match wins.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"embeddings\.(word|position|token_type)_embeddings\.weight", r"embeddings.\1_embeddings.weight"),
        (r"embeddings\.LayerNorm\.(weight|bias)", r"embeddings.layer_norm.\1"),
        (r"embeddings\.position_ids", r"embeddings.position_ids"),
        (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)", r"layers.\1.attention.\2_proj.\3"),
        (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)", r"layers.\1.attention.output_proj.\2"),
        (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)", r"layers.\1.attention_norm.\2"),
        (r"encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)", r"layers.\1.intermediate.\2"),
        (r"encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)", r"layers.\1.output.\2"),
        (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)", r"layers.\1.output_norm.\2"),
        (r"pooler\.dense\.(weight|bias)", r"pooler.\1"),
    )
)


def checkpoint_key(name: str) -> str | None:
    """Map a Hugging Face BERT tensor name to the dotted key path of the leaf in BertModel.

    The ``rename`` argument of ``spruce.io.load`` for BERT checkpoints.  A leading ``bert.``
    (checkpoints of task models) is removed, and TF-era ``gamma`` / ``beta`` LayerNorm names
    are read as ``weight`` / ``bias``.  Returns None (drop the tensor) for the pre-training
    heads (names starting with ``cls.``), which BertModel does not have.  A name that matches
    no rule is returned unchanged, so that a strict load reports it as unexpected by its own
    name.

    >>> checkpoint_key("encoder.layer.3.attention.self.query.weight")
    'layers.3.attention.query_proj.weight'
    >>> checkpoint_key("bert.embeddings.LayerNorm.gamma")
    'embeddings.layer_norm.weight'
    >>> checkpoint_key("cls.predictions.bias") is None
    True
    """
    if name.startswith("cls."):
        return None
    if name.startswith("bert."):
        name = name[len("bert."):]
    if "LayerNorm." in name:
        name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
        name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
    for pattern, replacement in _RULES:
        if pattern.fullmatch(name):
            return pattern.sub(replacement, name)
    return name
