"""Embedding and Dropout."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import check_key, check_size, default_float_dtype


class Embedding(Module):
    """A lookup table: ``emb(i) == weight[i]``.

    Args:
      num_embeddings: number of rows (vocabulary size).
      embedding_size: size of each row.
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only), required unless ``weight`` is given.
      weight: an explicit table of shape ``(num_embeddings, embedding_size)`` (then the sizes
        may be None and are read from it).

    Initialisation: ``weight ~ normal(0, 1)`` (as torch.nn.Embedding / equinox.nn.Embedding).

    Call: ``emb(i, *, key=None)`` with ``i`` an integer scalar (one example) or any integer
    array of indices, returning shape ``i.shape + (embedding_size,)``.  Raises TypeError for a
    non-integer index.  Out-of-range indices are clamped by JAX (no error under jit).
    """

    weight: jax.Array
    num_embeddings: int = field(static=True)
    embedding_size: int = field(static=True)

    def __init__(
        self,
        num_embeddings: int | None = None,
        embedding_size: int | None = None,
        dtype: Any = None,
        *,
        key: jax.Array | None = None,
        weight: jax.Array | None = None,
    ) -> None:
        if weight is None:
            check_size(num_embeddings, "num_embeddings", "Embedding")
            check_size(embedding_size, "embedding_size", "Embedding")
            assert num_embeddings is not None and embedding_size is not None
            key = check_key(key, "Embedding")
            weight = jax.random.normal(key, (num_embeddings, embedding_size), default_float_dtype(dtype))
        else:
            weight = jnp.asarray(weight)
            if weight.ndim != 2:
                raise ValueError(f"Embedding: weight must have shape (num_embeddings, embedding_size), got {weight.shape}")
            for name, given, actual in (
                ("num_embeddings", num_embeddings, weight.shape[0]),
                ("embedding_size", embedding_size, weight.shape[1]),
            ):
                if given is not None and given != actual:
                    raise ValueError(f"Embedding: {name}={given} but weight has shape {weight.shape}")
        self.weight = weight
        self.num_embeddings = int(weight.shape[0])
        self.embedding_size = int(weight.shape[1])

    def __call__(self, x: Any, *, key: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(f"Embedding: indices must be integers, got dtype {x.dtype}")
        return self.weight[x]


class Dropout(Module):
    """Randomly zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Args:
      p: drop probability in [0, 1] (ValueError otherwise); static.
      inference: if True the layer is the identity (evaluation mode); static, so switching it
        recompiles — or pass ``inference=`` to the call.

    Call: ``drop(x, *, key=None, inference=None)``.  ``inference`` (when not None) overrides the
    field.  When active (not inference and p > 0) a PRNG ``key`` is required (ValueError
    otherwise — randomness is never implicit); the mask is
    ``jax.random.bernoulli(key, 1 - p, x.shape)``.  Output has the shape and dtype of x.
    """

    p: float = field(static=True, default=0.5)
    inference: bool = field(static=True, default=False)

    def __check_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0.0 <= self.p <= 1.0:
            raise ValueError(f"Dropout: p must be a number in [0, 1], got {self.p!r}")

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None, inference: bool | None = None) -> jax.Array:
        off = self.inference if inference is None else inference
        if off or self.p == 0:
            return x
        if key is None:
            raise ValueError(
                "Dropout needs a PRNG key when active: call it with key=..., or pass "
                "inference=True (or build it with Dropout(p, inference=True)) for evaluation"
            )
        x = jnp.asarray(x)
        if self.p == 1:
            return jnp.zeros_like(x)
        q = 1.0 - self.p
        mask = jax.random.bernoulli(key, q, x.shape)
        return jnp.where(mask, x / jnp.asarray(q, x.dtype), jnp.zeros((), x.dtype))
