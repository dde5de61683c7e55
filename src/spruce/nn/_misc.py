"""Embedding, Dropout and PReLU."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import check_key, check_size, compute_dtype, default_float_dtype
from ._state import as_flag, inference_flag


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
        # As a JAX array: a NumPy table (as spruce.io.load returns) indexed by a traced index
        # would ask the tracer for a NumPy value (TracerArrayConversionError).
        return jnp.asarray(self.weight)[x]


class Dropout(Module):
    """Randomly zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Args:
      p: drop probability in [0, 1] (ValueError otherwise); static.
      inference: if True the layer is the identity (evaluation mode).  Held as a ``Flag``, a
        bool that JAX treats as static (switching it recompiles; or pass ``inference=`` to the
        call) and that both ``spruce.nn.inference_mode`` and ``equinox.nn.inference_mode``
        switch.  TypeError if not a bool.

    Call: ``drop(x, *, key=None, inference=None)``.  ``inference`` (when not None) overrides the
    field.  When active (not inference and p > 0) a PRNG ``key`` is required (ValueError
    otherwise — randomness is never implicit); the mask is
    ``jax.random.bernoulli(key, 1 - p, x.shape)``.  Output has the shape and dtype of x.
    """

    p: float = field(static=True, default=0.5)
    inference: bool = field(default=False, converter=as_flag)

    def __check_init__(self) -> None:
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0.0 <= self.p <= 1.0:
            raise ValueError(f"Dropout: p must be a number in [0, 1], got {self.p!r}")

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None, inference: bool | None = None) -> jax.Array:
        off = inference_flag(self.inference if inference is None else inference, "Dropout")
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


class PReLU(Module):
    """The parametric ReLU ``max(0, x) + weight * min(0, x)`` (He et al., 2015), as
    ``torch.nn.PReLU``.

    Args:
      num_parameters: 1 (one slope shared by all elements) or the number of channels ``C``
        (one slope per channel, along axis 0 of an example: the channel axis of a
        channels-first example, PyTorch's axis 1 of a batch).
      init: the initial slope (default 0.25).
      dtype: parameter dtype (default float32).  No key: the initialisation is deterministic.

    Field: ``weight`` of shape ``(num_parameters,)`` (PyTorch's name and layout).

    Call: ``prelu(x, *, key=None)``: ``x`` of any shape when ``num_parameters == 1``, else
    ``(C, ...)`` (ValueError otherwise); the result has the promoted dtype of x and the weight.

    >>> import jax.numpy as jnp
    >>> PReLU()(jnp.array([-2.0, 3.0])).tolist()
    [-0.5, 3.0]
    """

    weight: jax.Array
    num_parameters: int = field(static=True)

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype: Any = None) -> None:
        check_size(num_parameters, "num_parameters", "PReLU")
        if num_parameters == 0:
            raise ValueError("PReLU: num_parameters must be >= 1")
        self.weight = jnp.full((num_parameters,), init, default_float_dtype(dtype))
        self.num_parameters = num_parameters

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        x = jnp.asarray(x)
        dtype = compute_dtype(x.dtype, self.weight.dtype)
        w = self.weight.astype(dtype)
        if self.num_parameters == 1:
            a = w[0]
        else:
            if x.ndim < 1 or x.shape[0] != self.num_parameters:
                raise ValueError(
                    f"PReLU: with num_parameters={self.num_parameters} the input must have shape "
                    f"({self.num_parameters}, ...) (channels first, one example), got {x.shape}"
                )
            a = w.reshape((-1,) + (1,) * (x.ndim - 1))
        x = x.astype(dtype)
        return jnp.where(x >= 0, x, a * x)
