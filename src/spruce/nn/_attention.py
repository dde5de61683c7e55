"""MultiheadAttention."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import check_key, check_size
from ._linear import Linear
from ._misc import Dropout


class MultiheadAttention(Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017) on one example.

    Args:
      num_heads: number of heads ``H``.
      query_size: feature size of the query sequence.
      key_size, value_size: feature sizes of the key / value sequences (default query_size).
      output_size: output feature size (default query_size).
      qk_size: per-head size of queries and keys (default ``query_size // num_heads``).
      vo_size: per-head size of values (default ``query_size // num_heads``).
      use_query_bias, use_key_bias, use_value_bias, use_output_bias: biases of the four
        projections (default False).
      dropout_p: dropout probability on the attention weights (default 0).
      inference: default inference flag of that dropout.
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only, required), split into four keys for the four projections.

    Fields: ``query_proj`` Linear(query_size, H*qk_size), ``key_proj`` Linear(key_size,
    H*qk_size), ``value_proj`` Linear(value_size, H*vo_size), ``output_proj`` Linear(H*vo_size,
    output_size) — each initialised as Linear documents — and ``dropout``; sizes are static.

    Call: ``mha(query, key_, value, mask=None, *, key=None, inference=None)`` with ``query`` of
    shape ``(Lq, query_size)``, ``key_`` ``(Lk, key_size)``, ``value`` ``(Lk, value_size)``
    (a sequence axis, no batch axis); ``mask`` a boolean array of shape ``(Lq, Lk)`` or
    ``(H, Lq, Lk)``, True where attention is allowed.  Returns ``(Lq, output_size)``.  Logits
    are scaled by ``1/sqrt(qk_size)``; the softmax runs in at least float32.  ``key`` is for
    the dropout only.  Raises ValueError for inconsistent shapes.
    """

    query_proj: Linear
    key_proj: Linear
    value_proj: Linear
    output_proj: Linear
    dropout: Dropout
    num_heads: int = field(static=True)
    query_size: int = field(static=True)
    key_size: int = field(static=True)
    value_size: int = field(static=True)
    output_size: int = field(static=True)
    qk_size: int = field(static=True)
    vo_size: int = field(static=True)

    def __init__(
        self,
        num_heads: int,
        query_size: int,
        key_size: int | None = None,
        value_size: int | None = None,
        output_size: int | None = None,
        qk_size: int | None = None,
        vo_size: int | None = None,
        use_query_bias: bool = False,
        use_key_bias: bool = False,
        use_value_bias: bool = False,
        use_output_bias: bool = False,
        dropout_p: float = 0.0,
        inference: bool = False,
        dtype: Any = None,
        *,
        key: jax.Array,
    ) -> None:
        check_size(num_heads, "num_heads", "MultiheadAttention")
        if num_heads == 0:
            raise ValueError("MultiheadAttention: num_heads must be >= 1")
        check_size(query_size, "query_size", "MultiheadAttention")
        key = check_key(key, "MultiheadAttention")
        key_size = query_size if key_size is None else key_size
        value_size = query_size if value_size is None else value_size
        output_size = query_size if output_size is None else output_size
        qk_size = query_size // num_heads if qk_size is None else qk_size
        vo_size = query_size // num_heads if vo_size is None else vo_size
        for name, v in (("key_size", key_size), ("value_size", value_size), ("output_size", output_size),
                        ("qk_size", qk_size), ("vo_size", vo_size)):
            check_size(v, name, "MultiheadAttention")
        qkey, kkey, vkey, okey = jax.random.split(key, 4)
        self.query_proj = Linear(query_size, num_heads * qk_size, use_query_bias, dtype, key=qkey)
        self.key_proj = Linear(key_size, num_heads * qk_size, use_key_bias, dtype, key=kkey)
        self.value_proj = Linear(value_size, num_heads * vo_size, use_value_bias, dtype, key=vkey)
        self.output_proj = Linear(num_heads * vo_size, output_size, use_output_bias, dtype, key=okey)
        self.dropout = Dropout(dropout_p, inference=inference)
        self.num_heads = num_heads
        self.query_size = query_size
        self.key_size = key_size
        self.value_size = value_size
        self.output_size = output_size
        self.qk_size = qk_size
        self.vo_size = vo_size

    def __call__(
        self,
        query: jax.Array,
        key_: jax.Array,
        value: jax.Array,
        mask: jax.Array | None = None,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> jax.Array:
        for name, x, size in (("query", query, self.query_size), ("key_", key_, self.key_size),
                              ("value", value, self.value_size)):
            if jnp.ndim(x) != 2 or jnp.shape(x)[1] != size:
                raise ValueError(
                    f"MultiheadAttention: {name} must have shape (seq_len, {size}) (one example; "
                    f"use jax.vmap for a batch), got {jnp.shape(x)}"
                )
        lq, lk = query.shape[0], key_.shape[0]
        if value.shape[0] != lk:
            raise ValueError(f"MultiheadAttention: key_ and value must have the same length, got {lk} and {value.shape[0]}")
        h = self.num_heads
        q = jax.vmap(self.query_proj)(query).reshape(lq, h, self.qk_size)
        k = jax.vmap(self.key_proj)(key_).reshape(lk, h, self.qk_size)
        v = jax.vmap(self.value_proj)(value).reshape(lk, h, self.vo_size)
        logits = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(max(self.qk_size, 1))
        logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
        if mask is not None:
            mask = jnp.asarray(mask)
            if mask.dtype != jnp.bool_ or mask.shape not in ((lq, lk), (h, lq, lk)):
                raise ValueError(
                    f"MultiheadAttention: mask must be a boolean array of shape {(lq, lk)} or "
                    f"{(h, lq, lk)}, got {mask.dtype}{list(mask.shape)}"
                )
            lowest = jnp.finfo(logits.dtype).min  # type: ignore[no-untyped-call]  # untyped in jax 0.10
            logits = jnp.where(mask, logits, lowest)
        weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
        weights = self.dropout(weights, key=key, inference=inference)
        out = jnp.einsum("hqk,khd->qhd", weights, v).reshape(lq, h * self.vo_size)
        return jax.vmap(self.output_proj)(out)
