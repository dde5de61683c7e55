"""Text generation with a LlamaModel under ``jax.jit``: one compiled prefill per prompt-length
bucket, one compiled decode step, a fixed-size KVCache (imports JAX).

Used by ``spruce.models.smollm``.  The prompt is padded to its bucket (a power of two, at
least ``MIN_BUCKET``, at most the cache's capacity), so prompts of different lengths in the
same bucket share one compiled prefill; every decode step has the same shapes, so it compiles
once per model shape, cache capacity and sampling mode (greedy, or sampled).  The model is an
argument of the compiled functions (not a constant baked into them), the cache is donated to
each step (updated in place), and the next step is dispatched before the current token is read
back, so that the host's work overlaps the device's.

Token choice follows the common conventions (those of Hugging Face transformers' logits
processors): greedy is the argmax; sampling divides the logits by ``temperature``, keeps the
``top_k`` largest, then the smallest set of the most likely whose probability reaches
``top_p`` (the most likely token always kept), and draws with ``jax.random.categorical``
from the key ``jax.random.fold_in(jax.random.key(seed), step)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .llama import KVCache, LlamaModel

__all__ = ["MIN_BUCKET", "TextStream", "TokenStream", "bucket", "check_sampling", "logits", "start", "trace_counts"]

#: The smallest prompt bucket (prompts are padded to a power of two at least this long).
MIN_BUCKET = 16

#: How many times each compiled function has been traced (``prefill``, ``decode``,
#: ``logits``): a test of "no recompilation" reads it.
trace_counts: dict[str, int] = {"prefill": 0, "decode": 0, "logits": 0}


def bucket(n: int, capacity: int) -> int:
    """The padded length of an ``n``-token prompt: the smallest power of two ``>= max(n,
    MIN_BUCKET)``, capped at ``capacity``.

    >>> bucket(5, 512), bucket(17, 512), bucket(300, 512), bucket(300, 400)
    (16, 32, 512, 400)
    """
    return min(capacity, max(MIN_BUCKET, 1 << max(0, n - 1).bit_length()))


def _pick(logits: jax.Array, key: jax.Array, temperature: jax.Array, top_k: jax.Array,
          top_p: jax.Array, sample: bool) -> jax.Array:
    """The next token (int32 scalar) from one row of logits ``(vocab,)``."""
    if not sample:
        return jnp.argmax(logits).astype(jnp.int32)
    z = logits.astype(jnp.float32) / temperature
    order = jnp.argsort(-z)
    ranked = z[order]
    keep = jnp.arange(z.shape[0]) < top_k
    probs = jax.nn.softmax(jnp.where(keep, ranked, -jnp.inf))
    keep = keep & ((jnp.cumsum(probs) - probs) < top_p)
    choice = jax.random.categorical(key, jnp.where(keep, ranked, -jnp.inf))
    return order[choice].astype(jnp.int32)


def _prefill(model: LlamaModel, ids: jax.Array, cache: KVCache, n: jax.Array, key: jax.Array,
             temperature: jax.Array, top_k: jax.Array, top_p: jax.Array,
             sample: bool) -> tuple[jax.Array, KVCache]:
    trace_counts["prefill"] += 1
    hidden, cache = model.hidden(ids, cache, n)
    last = model.head(jax.lax.dynamic_index_in_dim(hidden, n - 1, keepdims=False))
    return _pick(last, jax.random.fold_in(key, 0), temperature, top_k, top_p, sample), cache


def _decode(model: LlamaModel, token: jax.Array, cache: KVCache, step: jax.Array, key: jax.Array,
            temperature: jax.Array, top_k: jax.Array, top_p: jax.Array,
            sample: bool) -> tuple[jax.Array, KVCache]:
    trace_counts["decode"] += 1
    logits, cache = model(token[None], cache)
    return _pick(logits[0], jax.random.fold_in(key, step), temperature, top_k, top_p, sample), cache


def _logits(model: LlamaModel, ids: jax.Array, cache: KVCache, n: jax.Array) -> jax.Array:
    trace_counts["logits"] += 1
    return model(ids, cache, n)[0]


_prefill_jit = jax.jit(_prefill, static_argnames=("sample",), donate_argnums=(2,))
_decode_jit = jax.jit(_decode, static_argnames=("sample",), donate_argnums=(2,))
_logits_jit = jax.jit(_logits)


def _padded(ids: Sequence[int], length: int, pad: int) -> np.ndarray[Any, Any]:
    out = np.full(length, pad, np.int32)
    out[: len(ids)] = ids
    return out


def logits(model: LlamaModel, token_ids: Sequence[int], *, pad_id: int = 0) -> np.ndarray[Any, Any]:
    """Float32 logits ``(len(token_ids), vocab)`` of one sequence from position 0, computed by
    one compiled function per length bucket (the ids padded with ``pad_id``; padding comes
    after the real tokens, so it changes nothing, causal attention never looking ahead)."""
    n = len(token_ids)
    size = bucket(n, max(n, MIN_BUCKET))
    cache = KVCache.empty(model.config, size, model.embed.weight.dtype)
    out = _logits_jit(model, _padded(token_ids, size, pad_id), cache, np.int32(n))
    return np.asarray(out[:n])


class TokenStream:
    """An iterator of generated token ids (Python ints), computed as it is consumed, with the
    time taken: ``prefill_seconds`` (the prompt, up to the first new token available on the
    host: includes compilation on a first call), ``decode_seconds`` (the rest),
    ``prompt_tokens`` and ``new_tokens`` (so far).  The token that ended generation (an
    end-of-sequence id) is yielded too.  Built by ``start``."""

    def __init__(self, tokens: Iterator[int], prompt_tokens: int) -> None:
        self._tokens = tokens
        self.prompt_tokens = prompt_tokens
        self.new_tokens = 0
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0

    def __iter__(self) -> TokenStream:
        return self

    def __next__(self) -> int:
        t0 = time.perf_counter()
        token = next(self._tokens)
        elapsed = time.perf_counter() - t0
        if self.new_tokens == 0:
            self.prefill_seconds += elapsed
        else:
            self.decode_seconds += elapsed
        self.new_tokens += 1
        return token


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, seed: int) -> None:
    """Raise ValueError for a temperature that is not a finite number >= 0, a ``top_k`` that is
    not an int >= 1 (or None), a ``top_p`` not in ``(0, 1]`` (or None), or a seed that is not
    an int."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")


def start(model: LlamaModel, token_ids: Sequence[int], max_new_tokens: int, *, capacity: int,
          eos_ids: Sequence[int], pad_id: int, temperature: float = 0.0, top_k: int | None = None,
          top_p: float | None = None, seed: int = 0) -> TokenStream:
    """A TokenStream of at most ``max_new_tokens`` tokens continuing ``token_ids`` (which must
    hold 1 to ``capacity - max_new_tokens + 1`` ids, each in the vocabulary: ValueError
    otherwise, and for the sampling arguments as ``check_sampling``).  Stops after a token of
    ``eos_ids``.  ``temperature == 0`` is greedy (``top_k``, ``top_p``, ``seed`` unused)."""
    check_sampling(temperature, top_k, top_p, seed)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    ids = [int(t) for t in token_ids]
    vocab = model.config.vocab_size
    if not ids:
        raise ValueError("the prompt is empty: generation needs at least one token")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids must be in [0, {vocab}), got {bad[:5]}")
    if len(ids) + max(max_new_tokens - 1, 0) > capacity:
        raise ValueError(
            f"the prompt has {len(ids)} tokens and {max_new_tokens} new tokens are asked for: more "
            f"than the cache's {capacity} positions (pass a larger cache_length, or a shorter prompt)"
        )
    sample = temperature > 0
    args = (
        jax.random.key(seed),
        np.float32(temperature if sample else 1.0),
        np.int32(vocab if top_k is None else min(top_k, vocab)),
        np.float32(1.0 if top_p is None else top_p),
    )
    eos = frozenset(int(e) for e in eos_ids)

    def tokens() -> Iterator[int]:
        if max_new_tokens == 0:
            return
        size = bucket(len(ids), capacity)
        cache = KVCache.empty(model.config, capacity, model.embed.weight.dtype)
        token, cache = _prefill_jit(model, _padded(ids, size, pad_id), cache, np.int32(len(ids)), *args,
                                    sample=sample)
        for step in range(1, max_new_tokens + 1):
            if step < max_new_tokens:  # dispatched before reading the current token back
                following, cache = _decode_jit(model, token, cache, np.int32(step), *args, sample=sample)
            value = int(token)
            yield value
            if value in eos or step == max_new_tokens:
                return
            token = following

    return TokenStream(tokens(), len(ids))


class TextStream:
    """An iterator of text pieces (str) decoded from a TokenStream as it is consumed: each
    piece is ``decode(ids)`` of the tokens so far (those in ``skip`` left out) minus what was
    already yielded, and a piece ending in an incomplete UTF-8 sequence (decoded as U+FFFD)
    waits for the next token, so that the pieces concatenate to the decoded text of all the
    tokens.  ``tokens`` is the TokenStream, whose counts and times (``prompt_tokens``,
    ``new_tokens``, ``prefill_seconds``, ``decode_seconds``) give the generation's speed.

    >>> text = TextStream(TokenStream(iter([72, 105, 0]), prompt_tokens=1),
    ...                   lambda ids: bytes(ids).decode(errors="replace"), frozenset({0}))
    >>> list(text), text.tokens.new_tokens
    (['H', 'i'], 3)
    """

    def __init__(self, tokens: TokenStream, decode: Callable[[list[int]], str], skip: frozenset[int]) -> None:
        self.tokens = tokens
        self._pieces = _pieces(tokens, decode, skip)

    def __iter__(self) -> TextStream:
        return self

    def __next__(self) -> str:
        return next(self._pieces)


def _pieces(stream: Iterator[int], decode: Callable[[list[int]], str], skip: frozenset[int]) -> Iterator[str]:
    kept: list[int] = []
    emitted = ""
    for token in stream:
        if token in skip:
            continue
        kept.append(token)
        text = decode(kept)
        if text.endswith("\ufffd"):
            continue
        piece, emitted = text[len(emitted):], text
        if piece:
            yield piece
    text = decode(kept)
    if len(text) > len(emitted):
        yield text[len(emitted):]
