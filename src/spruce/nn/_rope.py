"""RotaryPositionalEmbedding."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import compute_dtype


class RotaryPositionalEmbedding(Module):
    """Rotary positional embedding (RoPE; Su et al., 2021) of one sequence ``(seq_len, d)``.

    Convention — the **half-rotation layout** of GPT-NeoX and of Hugging Face transformers'
    LLaMA (``apply_rotary_pos_emb`` with ``rotate_half``): feature ``i`` is rotated together
    with feature ``i + d/2`` (not with ``i + 1``, the interleaved layout of the RoFormer paper
    and Meta's original LLaMA code, which differs by a permutation of the features).  With
    ``inv_freq[j] = theta ** (-2j / d)`` for ``j < d/2``, ``angle[p, j] = position[p] *
    inv_freq[j]``, and ``cos`` / ``sin`` of the angles repeated twice along the features::

        out = x * cos + concatenate([-x[:, d/2:], x[:, :d/2]]) * sin

    Args:
      embedding_size: ``d``, even (ValueError otherwise); static.
      theta: the base of the frequencies (default 10000.0); static.

    Call: ``rope(x, positions=None, *, key=None)`` with ``x`` of shape ``(seq_len,
    embedding_size)`` (one head; ``jax.vmap`` over heads and batch) and ``positions`` an
    integer array ``(seq_len,)`` (default ``arange(seq_len)``, e.g. an offset for a key-value
    cache).  Angles, sines and cosines are computed in at least float32; the result has x's
    (floating) dtype.  No parameters.

    >>> import jax.numpy as jnp
    >>> rope = RotaryPositionalEmbedding(4)
    >>> rope(jnp.ones((3, 4))).shape
    (3, 4)
    >>> [round(v, 4) for v in rope(jnp.array([[1.0, 0.0, 0.0, 0.0]] * 2))[1].tolist()]
    [0.5403, 0.0, 0.8415, 0.0]
    """

    embedding_size: int = field(static=True)
    theta: float = field(static=True, default=10000.0)

    def __check_init__(self) -> None:
        d = self.embedding_size
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0 or d % 2:
            raise ValueError(f"RotaryPositionalEmbedding: embedding_size must be an even int > 0, got {d!r}")
        if isinstance(self.theta, bool) or not isinstance(self.theta, (int, float)) or self.theta <= 0:
            raise ValueError(f"RotaryPositionalEmbedding: theta must be a number > 0, got {self.theta!r}")

    def __call__(self, x: jax.Array, positions: Any = None, *, key: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        d = self.embedding_size
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(
                f"RotaryPositionalEmbedding: expected x of shape (seq_len, {d}) (one head of one "
                f"example; use jax.vmap for heads and batch), got {x.shape}"
            )
        ctype = compute_dtype(x.dtype, jnp.float32)
        if positions is None:
            pos = jnp.arange(x.shape[0], dtype=ctype)
        else:
            positions = jnp.asarray(positions)
            if positions.shape != (x.shape[0],) or not jnp.issubdtype(positions.dtype, jnp.integer):
                raise ValueError(
                    f"RotaryPositionalEmbedding: positions must be an integer array of shape ({x.shape[0]},), "
                    f"got {positions.dtype}{list(positions.shape)}"
                )
            pos = positions.astype(ctype)
        inv_freq = 1.0 / (jnp.asarray(self.theta, ctype) ** (jnp.arange(0, d, 2, dtype=ctype) / d))
        angles = pos[:, None] * inv_freq[None, :]
        angles = jnp.concatenate([angles, angles], axis=-1)
        xf = x.astype(ctype)
        rotated = jnp.concatenate([-xf[:, d // 2 :], xf[:, : d // 2]], axis=-1)
        out = xf * jnp.cos(angles) + rotated * jnp.sin(angles)
        return out.astype(compute_dtype(x.dtype))
