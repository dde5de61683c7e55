"""MultiheadAttention (PyTorch's arguments and parameter names), and the scaled dot-product
attention over heads that it shares with ``spruce.models.bert``."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import check_key, check_size, compute_dtype, default_float_dtype, replace_fields, uniform
from ._linear import Linear
from ._misc import Dropout


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    blocked: jax.Array | None = None,
    additive: jax.Array | None = None,
    dropout: Dropout | None = None,
    key: jax.Array | None = None,
    inference: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention of every head (Vaswani et al., 2017) on one example.

    ``q`` ``(L, H, D)``, ``k`` ``(S, H, D)``, ``v`` ``(S, H, Dv)`` -> ``(out, weights)``:
    ``weights = softmax(q k^T / sqrt(D) + additive)`` over the keys, of shape ``(H, L, S)``,
    with the pairs where ``blocked`` is True left out (their weight is 0; a query whose keys are
    all blocked gets weights 0, hence output 0, as torch's ``scaled_dot_product_attention``);
    then ``dropout`` (a Dropout layer, with ``key`` / ``inference``) on the weights, and
    ``out[l, h] = sum_s weights[h, l, s] v[s, h]`` of shape ``(L, H, Dv)``.  ``blocked`` is a
    boolean and ``additive`` a float array, each of shape ``(1, L, S)`` or ``(H, L, S)``.  The
    logits and the softmax are computed in at least float32; the weights are cast to
    ``v.dtype``.  Shapes are not checked here: the callers check their inputs.
    """
    logits = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(max(q.shape[-1], 1))
    logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
    if additive is not None:
        logits = logits + additive.astype(logits.dtype)
    if blocked is not None:
        lowest = jnp.finfo(logits.dtype).min  # type: ignore[no-untyped-call]  # untyped in jax 0.10
        logits = jnp.where(blocked, lowest, logits)
    weights = jax.nn.softmax(logits, axis=-1)
    if blocked is not None:
        weights = jnp.where(blocked, jnp.zeros((), weights.dtype), weights)
    weights = weights.astype(v.dtype)
    if dropout is not None:
        weights = dropout(weights, key=key, inference=inference)
    return jnp.einsum("hqk,khd->qhd", weights, v), weights


def _xavier_uniform(key: jax.Array, shape: tuple[int, int], dtype: Any) -> jax.Array:
    """``uniform(-b, b)`` with ``b = sqrt(6 / (fan_in + fan_out))`` for a ``(fan_out, fan_in)``
    matrix (Glorot & Bengio, 2010; torch.nn.init.xavier_uniform_)."""
    return uniform(key, shape, dtype, math.sqrt(6.0 / max(shape[0] + shape[1], 1)))


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al., 2017) on one example, as ``torch.nn.MultiheadAttention``.

    Follows torch.nn.MultiheadAttention: its constructor arguments, parameter names, layouts,
    initialisation and call, so that a PyTorch ``state_dict`` loads by name
    (``spruce.io.load(path, like=mha)``), except for the differences listed at the end.

    Args:
      embed_dim: model size ``E``: the feature size of the query and of the output.
      num_heads: number of heads ``H``; ``E`` is split across them, each of size
        ``head_dim = E // H``.  ValueError unless ``E >= 1``, ``H >= 1`` and ``H`` divides ``E``.
      dropout: dropout probability on the attention weights (default 0.0; ValueError outside
        [0, 1]), applied unless in inference (see ``inference``).
      bias: biases on the input and output projections (default True).
      add_bias_kv: append a learned key ``bias_k`` and value ``bias_v`` to the (projected) key
        and value sequences (default False).
      add_zero_attn: append a key and a value of zeros (after ``bias_k`` / ``bias_v``), per
        head (default False).
      kdim, vdim: feature sizes of the key and value sequences (default ``E``).
      dtype: parameter dtype (keyword-only; default: JAX's default float, float32).
      inference: default inference flag of the dropout (keyword-only; default False);
        ``spruce.nn.inference_mode`` switches it.
      key: PRNG key (keyword-only, required) for the initialisation.

    Fields (PyTorch's names): when ``kdim == vdim == E``, ``in_proj_weight`` ``(3E, E)``, the
    query, key and value projections stacked in that order (``q_proj_weight``,
    ``k_proj_weight``, ``v_proj_weight`` are None); otherwise ``q_proj_weight`` ``(E, E)``,
    ``k_proj_weight`` ``(E, kdim)``, ``v_proj_weight`` ``(E, vdim)`` (``in_proj_weight`` is
    None).  ``in_proj_bias`` ``(3E,)`` (None without ``bias``); ``bias_k``, ``bias_v``
    ``(1, 1, E)`` (None without ``add_bias_kv``); ``out_proj`` a Linear(E, E) (``out_proj.weight``,
    ``out_proj.bias``); ``dropout`` the Dropout layer (no parameters; torch keeps the float
    there).  Static: ``embed_dim``, ``num_heads``, ``head_dim``, ``kdim``, ``vdim``,
    ``add_zero_attn``.  None fields hold no leaf, so the dotted key paths are exactly the keys
    of torch's ``state_dict`` for the same arguments.

    Initialisation (PyTorch's): the input projection weights ~ xavier uniform (``in_proj_weight``
    as one ``(3E, E)`` matrix, else each of the three), ``in_proj_bias`` and ``out_proj.bias``
    zeros, ``out_proj.weight`` as Linear documents, ``bias_k`` / ``bias_v`` ~ xavier normal
    (``normal(0, 1/sqrt(E))``).  Keys: ``kin, kout, kbk, kbv = jax.random.split(key, 4)``, with
    ``kin`` split in three for separate projection weights.

    Call: ``mha(query, key_, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False, *, key=None, inference=None)``, torch's forward
    on an unbatched input:

    - ``query`` ``(L, E)``, ``key_`` ``(S, kdim)``, ``value`` ``(S, vdim)``: one example, a
      sequence axis and no batch axis.  A batch goes through ``jax.vmap``: ``jax.vmap(mha)``
      on ``(N, L, E)`` inputs is torch's ``batch_first=True``; ``jax.vmap(mha, in_axes=1,
      out_axes=(1, 0))`` on ``(L, N, E)`` inputs is its default ``batch_first=False``.  The key
      sequence is the second positional argument, ``key_``, because ``key=`` is the PRNG key
      of the dropout (keyword-only, as in every spruce layer); torch's ``mha(q, key=k,
      value=v)`` raises TypeError saying so (``key_`` and ``value`` are required).
    - ``key_padding_mask`` ``(S,)``: boolean, True for the keys to ignore (padding), or float,
      added to the logits of those keys.
    - ``attn_mask`` ``(L, S)``, or ``(H, L, S)`` for one mask per head: boolean, True where
      query ``l`` may **not** attend to key ``s`` (torch's convention, the opposite of
      ``jax.nn.dot_product_attention``'s), or float, added to the logits.
    - ``is_causal``: query ``l`` attends only to keys ``s <= l``.  Unlike torch (for which it
      is only a hint that ``attn_mask`` is causal, and an ``attn_mask`` is required), the
      causal mask is built here and combined with ``attn_mask`` when one is given.
    - ``need_weights``, ``average_attn_weights``: return the attention weights (after the
      dropout, as torch), averaged over the heads ``(L, S)`` or per head ``(H, L, S)``.
    - ``key``, ``inference``: the PRNG key of the dropout (required when it is active) and a
      per-call override of its inference flag.

    Returns ``(attn_output, attn_weights)`` as torch: ``attn_output`` of shape ``(L, E)``, and
    ``attn_weights`` as above, or None when ``need_weights`` is False.  Logits are scaled by
    ``1/sqrt(head_dim)``, the softmax runs in at least float32, and the result has the
    promoted dtype of the inputs and the parameters.  With ``add_bias_kv`` / ``add_zero_attn``
    the masks get one allowed column per appended key (``S + 1`` or ``S + 2`` keys in the
    weights), as torch pads them.

    Differences from torch: no batch axis (see above) and so no ``batch_first``, ``device``
    arguments; ``dtype`` is keyword-only (torch's ninth positional argument is
    ``batch_first``), and ``inference`` is spruce's evaluation switch (torch's ``.eval()``); a
    query for which every key is blocked by the boolean masks gets weights 0 and attention
    output 0 (its result is ``out_proj.bias``), as torch's ``need_weights=False`` path, where
    torch's ``need_weights=True`` path returns NaN; ``is_causal`` as above.

    Raises:
      TypeError: for a non-int size, a missing PRNG key, a call without ``key_`` and ``value``,
        or a mask that is neither boolean nor floating.
      ValueError: for sizes out of range or that do not divide, and, in the call, for inputs
        or masks of the wrong shape.

    >>> import jax, jax.numpy as jnp, spruce.io
    >>> mha = MultiheadAttention(8, 2, key=jax.random.key(0))
    >>> sorted(spruce.io.flatten_names(mha))
    ['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight']
    >>> out, weights = mha(jnp.ones((3, 8)), jnp.ones((5, 8)), jnp.ones((5, 8)))
    >>> out.shape, weights.shape
    ((3, 8), (3, 5))
    >>> MultiheadAttention(10, 3, key=jax.random.key(0))
    Traceback (most recent call last):
    ...
    ValueError: MultiheadAttention: embed_dim (10) must be divisible by num_heads (3)
    """

    in_proj_weight: jax.Array | None
    q_proj_weight: jax.Array | None
    k_proj_weight: jax.Array | None
    v_proj_weight: jax.Array | None
    in_proj_bias: jax.Array | None
    bias_k: jax.Array | None
    bias_v: jax.Array | None
    out_proj: Linear
    dropout: Dropout
    embed_dim: int = field(static=True)
    num_heads: int = field(static=True)
    head_dim: int = field(static=True)
    kdim: int = field(static=True)
    vdim: int = field(static=True)
    add_zero_attn: bool = field(static=True)

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        *,
        dtype: Any = None,
        inference: bool = False,
        key: jax.Array,
    ) -> None:
        name = "MultiheadAttention"
        for arg, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: {arg} must be an int, got {value!r}")
        if embed_dim < 1 or num_heads < 1:
            raise ValueError(f"{name}: embed_dim and num_heads must be >= 1, got embed_dim={embed_dim} and num_heads={num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"{name}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        check_size(kdim, "kdim", name)
        check_size(vdim, "vdim", name)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
        key = check_key(key, name)
        dtype = default_float_dtype(dtype)
        e = embed_dim
        kin, kout, kbk, kbv = jax.random.split(key, 4)
        self.in_proj_weight = self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        if kdim == e and vdim == e:
            self.in_proj_weight = _xavier_uniform(kin, (3 * e, e), dtype)
        else:
            kq, kk, kv = jax.random.split(kin, 3)
            self.q_proj_weight = _xavier_uniform(kq, (e, e), dtype)
            self.k_proj_weight = _xavier_uniform(kk, (e, kdim), dtype)
            self.v_proj_weight = _xavier_uniform(kv, (e, vdim), dtype)
        self.in_proj_bias = jnp.zeros((3 * e,), dtype) if bias else None
        if add_bias_kv:
            std = math.sqrt(2.0 / (2 * e))
            self.bias_k = std * jax.random.normal(kbk, (1, 1, e), dtype)
            self.bias_v = std * jax.random.normal(kbv, (1, 1, e), dtype)
        else:
            self.bias_k = self.bias_v = None
        out_proj = Linear(e, e, bool(bias), dtype, key=kout)
        self.out_proj = replace_fields(out_proj, bias=jnp.zeros((e,), dtype)) if bias else out_proj
        self.dropout = Dropout(float(dropout), inference=inference)
        self.embed_dim = e
        self.num_heads = num_heads
        self.head_dim = e // num_heads
        self.kdim = kdim
        self.vdim = vdim
        self.add_zero_attn = bool(add_zero_attn)

    def _check_mask(self, value: Any, name: str, shapes: tuple[tuple[int, ...], ...]) -> jax.Array:
        mask = jnp.asarray(value)
        if mask.dtype != jnp.bool_ and not jnp.issubdtype(mask.dtype, jnp.floating):
            raise TypeError(f"MultiheadAttention: {name} must be a boolean or floating array, got dtype {mask.dtype}")
        if mask.shape not in shapes:
            expected = " or ".join(str(s) for s in shapes)
            raise ValueError(f"MultiheadAttention: {name} must have shape {expected}, got {mask.shape}")
        return mask

    def __call__(
        self,
        query: jax.Array,
        key_: jax.Array | None = None,
        value: jax.Array | None = None,
        key_padding_mask: jax.Array | None = None,
        need_weights: bool = True,
        attn_mask: jax.Array | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        *,
        key: jax.Array | None = None,
        inference: bool | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        if key_ is None or value is None or (key is not None and jnp.issubdtype(getattr(key, "dtype", jnp.int32), jnp.floating)):
            raise TypeError(
                "MultiheadAttention: the key and value sequences are the second and third positional "
                "arguments, key_ and value: mha(query, key_, value); key= is the PRNG key of the dropout"
            )
        query, key_, value = jnp.asarray(query), jnp.asarray(key_), jnp.asarray(value)
        for name, x, size in (("query", query, self.embed_dim), ("key_", key_, self.kdim), ("value", value, self.vdim)):
            if x.ndim != 2 or x.shape[1] != size:
                raise ValueError(
                    f"MultiheadAttention: {name} must have shape (seq_len, {size}) (one example, "
                    f"torch's unbatched input; use jax.vmap for a batch), got {x.shape}"
                )
        lq, lk = query.shape[0], key_.shape[0]
        if value.shape[0] != lk:
            raise ValueError(f"MultiheadAttention: key_ and value must have the same length, got {lk} and {value.shape[0]}")
        h, e, d = self.num_heads, self.embed_dim, self.head_dim
        params = [p for p in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight,
                              self.in_proj_bias, self.bias_k, self.bias_v, self.out_proj.weight, self.out_proj.bias)
                  if p is not None]
        dtype = compute_dtype(query.dtype, key_.dtype, value.dtype, *(p.dtype for p in params))
        logits_dtype = jnp.promote_types(dtype, jnp.float32)
        blocked: list[jax.Array] = []
        additive: list[jax.Array] = []
        for mask, name, shapes in (
            (attn_mask, "attn_mask", ((lq, lk), (h, lq, lk))),
            (key_padding_mask, "key_padding_mask", ((lk,),)),
        ):
            if mask is not None:
                mask = self._check_mask(mask, name, shapes)
                mask = jnp.reshape(mask, (-1, lq, lk) if mask.ndim > 1 else (1, 1, lk))
                if mask.dtype == jnp.bool_:
                    blocked.append(mask)
                else:
                    additive.append(mask.astype(logits_dtype))
        if is_causal:
            blocked.append(~jnp.tri(lq, lk, dtype=jnp.bool_)[None])
        if self.in_proj_weight is not None:
            wq, wk, wv = jnp.split(self.in_proj_weight.astype(dtype), 3)
        else:
            assert self.q_proj_weight is not None and self.k_proj_weight is not None and self.v_proj_weight is not None
            wq, wk, wv = (w.astype(dtype) for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight))
        q = query.astype(dtype) @ wq.T
        k = key_.astype(dtype) @ wk.T
        v = value.astype(dtype) @ wv.T
        if self.in_proj_bias is not None:
            bq, bk, bv = jnp.split(self.in_proj_bias.astype(dtype), 3)
            q, k, v = q + bq, k + bk, v + bv
        q, k, v = q.reshape(lq, h, d), k.reshape(lk, h, d), v.reshape(lk, h, d)
        extra = []  # keys and values appended after the sequence, always allowed
        if self.bias_k is not None and self.bias_v is not None:
            extra.append((self.bias_k.astype(dtype).reshape(1, h, d), self.bias_v.astype(dtype).reshape(1, h, d)))
        if self.add_zero_attn:
            extra.append((jnp.zeros((1, h, d), dtype), jnp.zeros((1, h, d), dtype)))
        if extra:
            k = jnp.concatenate([k] + [ek for ek, _ in extra])
            v = jnp.concatenate([v] + [ev for _, ev in extra])
            pad = ((0, 0), (0, 0), (0, len(extra)))
            blocked = [jnp.pad(m, pad, constant_values=False) for m in blocked]
            additive = [jnp.pad(m, pad) for m in additive]
        out, weights = attend(
            q, k, v,
            blocked=_combine(blocked, jnp.logical_or),
            additive=_combine(additive, jnp.add),
            dropout=self.dropout, key=key, inference=inference,
        )
        out = out.reshape(lq, e) @ self.out_proj.weight.astype(dtype).T
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias.astype(dtype)
        if not need_weights:
            return out, None
        return out, (jnp.mean(weights, axis=0) if average_attn_weights else weights)


def _combine(masks: list[jax.Array], op: Any) -> jax.Array | None:
    """The masks (each ``(1 or H, L, S)``) joined by ``op``, or None for none."""
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = op(out, m)
    return out
