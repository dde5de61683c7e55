"""spruce.models: BERT as spruce Modules, and all-MiniLM-L6-v2 against PyTorch's embeddings.

The reference file ``tests/data/minilm_reference.npz`` is written by
``scripts/make_minilm_reference.py`` with torch + sentence-transformers (not needed here).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.io
from spruce.models import bert, minilm
from spruce.models.bert import BertConfig, BertModel

REFERENCE = pathlib.Path(__file__).parent / "data" / "minilm_reference.npz"
N_PARAMS = 22_713_728
N_TENSORS = 104


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], np.ndarray]:
    with np.load(REFERENCE) as data:
        return [str(s) for s in data["sentences"]], data["embeddings"]


# --- all-MiniLM-L6-v2 -----------------------------------------------------------------------


def test_reference_embeddings(reference: tuple[list[str], np.ndarray]) -> None:
    sentences, expected = reference
    assert "" in sentences and len(sentences) >= 6
    got = minilm.encode(sentences)
    assert got.shape == (len(sentences), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    for i, s in enumerate(sentences):
        diff = float(np.abs(got[i] - expected[i]).max())
        cosine = float(got[i] @ expected[i] / (np.linalg.norm(got[i]) * np.linalg.norm(expected[i])))
        assert diff <= 1e-4, (i, s[:40], diff)
        assert cosine >= 0.9999, (i, s[:40], cosine)


def test_reference_covers_truncation(reference: tuple[list[str], np.ndarray]) -> None:
    # One sentence between tokenizer.json's own 128-token truncation and max_seq_length (256),
    # one beyond 256: both limits are exercised by test_reference_embeddings.
    with np.load(REFERENCE) as data:
        counts = data["num_tokens"].tolist()
    assert any(128 < n <= 256 for n in counts) and any(n > 256 for n in counts)


def test_batching_and_order_do_not_change_results(reference: tuple[list[str], np.ndarray]) -> None:
    sentences, expected = reference
    # batch_size=2: several chunks in one length bucket (4 sentences of <= 16 tokens).
    got = minilm.encode(list(reversed(sentences)), batch_size=2)[::-1]
    np.testing.assert_allclose(got, expected, atol=1e-4)
    one = minilm.encode([sentences[1]])
    np.testing.assert_allclose(one[0], got[1], atol=1e-5)


def test_empty_inputs() -> None:
    empties: list[Any] = [[], (), iter([])]
    for empty in empties:
        out = minilm.encode(empty)
        assert out.shape == (0, 384) and out.dtype == np.float32
    e = minilm.encode([""])
    assert e.shape == (1, 384) and abs(float(np.linalg.norm(e)) - 1.0) < 1e-5


def test_bad_inputs() -> None:
    with pytest.raises(TypeError, match="single string"):
        minilm.encode("a sentence")
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a str, got int"):
        minilm.encode(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="batch_size"):
        minilm.encode(["ok"], batch_size=0)


def test_lone_surrogate_is_refused_before_the_model_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # A lone surrogate cannot be encoded as UTF-8; the tokenizer would raise an opaque
    # "TextEncodeInput must be Union[...]" TypeError.  The check runs before the model loads.
    def no_model() -> None:
        raise AssertionError("the model was loaded for input that should have been refused")

    monkeypatch.setattr(minilm, "_get_text", no_model)
    monkeypatch.setattr(minilm, "_get_weights", no_model)
    with pytest.raises(ValueError, match=r"sentences\[0\] is not valid Unicode text: lone surrogate '\\ud800' at position 0"):
        minilm.encode(["\ud800"])
    with pytest.raises(ValueError, match=r"sentences\[1\] .* lone surrogate '\\udcff' at position 3"):
        minilm.encode(["fine", "abc\udcff"])
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a str"):  # checked in order
        minilm.encode(["ok", None, "\ud800"])  # type: ignore[list-item]
    assert minilm.encode([]).shape == (0, 384)


def _random_sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = "the cat sat on a mat while stocks fell sharply and someone played guitar on stage".split()
    return [" ".join(rng.choice(words, int(rng.integers(3, 61)))) for _ in range(n)]


@pytest.mark.slow
def test_one_compilation_for_any_mix_of_lengths() -> None:
    # Sentences are packed into rows of 128 tokens: one compiled shape per row count, whatever
    # their lengths.
    texts = ["hi", "a sentence of about ten tokens, give or take one", "x " * 60]
    minilm.encode(["warm up"])  # one row
    traces, compiled = minilm._traces, dict(minilm._compiled)
    for text in texts:
        minilm.encode([text])
    minilm.encode(texts)  # 3 + 12 + 62 tokens: still one row
    assert (minilm._traces, minilm._compiled) == (traces, compiled)
    many = minilm.encode(_random_sentences(48, 0))  # about 13 rows: calls of 4 rows
    assert minilm._traces == traces + 1 and len(minilm._compiled) == len(compiled) + 1
    minilm.encode(_random_sentences(100, 1))  # about 27 rows: the same shape
    assert minilm._traces == traces + 1
    # packing does not change the results: each sentence alone gives the same embedding
    some = _random_sentences(48, 0)[:3]
    np.testing.assert_allclose(minilm.encode(some), many[:3], rtol=0, atol=1e-5)


def test_packing() -> None:
    rng = np.random.default_rng(0)
    for seed in range(20):
        lengths = [int(n) for n in rng.integers(2, 129 if seed % 2 else 40, int(rng.integers(1, 300)))]
        rows = minilm._pack(lengths, 128)
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))  # each sentence once
        for row in rows:
            assert sum(lengths[i] for i in row) <= 128 and len(row) <= 64
        # best-fit decreasing wastes little: at most one row more than the tokens need, plus
        # the rows that long sentences leave unfillable (no two above 64 tokens share a row)
        long = sum(n > 64 for n in lengths)
        assert len(rows) <= max(long, -(-sum(lengths) // 128)) + 1 + long // 2, (seed, len(rows))
    assert minilm._pack([2] * 100, 128) == [list(range(64)), list(range(64, 100))]  # 64 sentences at most


@pytest.mark.slow
def test_compilation_cache_is_opt_in(tmp_path: pathlib.Path) -> None:
    # A fresh interpreter: JAX's configuration is process-wide.  encode leaves it alone by
    # default; enable_compilation_cache turns the cache on, and then what encode compiles
    # is written there.
    code = f"""
import os, pathlib, jax
from spruce.models import minilm
minilm.encode(["a first sentence"])
assert jax.config.jax_compilation_cache_dir is None, jax.config.jax_compilation_cache_dir
os.environ[minilm.CACHE_ENV] = "off"
assert minilm.enable_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
folder = pathlib.Path({str(tmp_path / "cache")!r})
assert minilm.enable_compilation_cache(folder) == folder and folder.is_dir()
assert jax.config.jax_compilation_cache_dir == str(folder)
assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
minilm.encode(["two", "sentences"] * 40, batch_size=64)   # 2 rows, a new shape: compiled, and cached
assert any(folder.iterdir()), "nothing was written to the cache"
assert minilm.enable_compilation_cache(pathlib.Path(folder, "other")) == folder  # already on: kept
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != minilm.CACHE_ENV}
    env["PYTHONPATH"] = str(pathlib.Path(spruce.__file__).parents[1])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_load_parameter_count() -> None:
    model = minilm.load()
    assert isinstance(model, BertModel)
    assert minilm.load() is model  # cached per process
    leaves = spruce.tree.leaves(model)
    assert len(leaves) == N_TENSORS
    assert sum(int(x.size) for x in leaves) == N_PARAMS  # embeddings.position_ids (512) included
    assert spruce.summary(model).params == N_PARAMS
    pos = model.embeddings.position_ids
    assert pos.shape == (1, 512) and pos.dtype == np.int64
    assert len(model.layers) == 6 and model.layers[0].attention.num_heads == 12


def test_checkpoint_names_map_onto_the_module() -> None:
    names = list(spruce.io.read_header(minilm.model_path() / "model.safetensors"))
    assert len(names) == N_TENSORS
    config = BertConfig.from_json(minilm.model_path() / "config.json")
    keys = set(spruce.io.flatten_names(BertModel.skeleton(config)))
    mapped = [bert.checkpoint_key(n) for n in names]
    assert None not in mapped
    assert sorted(map(str, mapped)) == sorted(keys)  # a bijection onto the Module's leaves


def test_load_goes_through_spruce_io(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors.numpy import load_file, save_file

    src = minilm.model_path()
    (tmp_path / "config.json").write_bytes((src / "config.json").read_bytes())
    tensors = load_file(str(src / "model.safetensors"))
    tensors["encoder.layer.2.output.dense.bais"] = tensors.pop("encoder.layer.2.output.dense.bias")
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(spruce.io.MismatchError) as info:
        minilm.load(tmp_path)
    assert info.value.missing == ["layers.2.output.bias"]
    assert info.value.unexpected == ["encoder.layer.2.output.dense.bais"]
    assert "layers.2.output.bias" in str(info.value)

    calls = []
    real_load = spruce.io.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(spruce.io, "load", spy)
    monkeypatch.setattr(minilm, "_models", {})
    model = minilm.load()
    assert len(calls) == 1 and isinstance(calls[0]["like"], BertModel)
    assert calls[0]["rename"] is bert.checkpoint_key
    assert spruce.summary(model).params == N_PARAMS


def test_import_spruce_does_not_import_models_or_jax() -> None:
    code = "import sys, spruce; assert 'jax' not in sys.modules and 'spruce.models' not in sys.modules"
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(spruce.__file__).parents[1]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# --- the generic BERT encoder ----------------------------------------------------------------

TINY = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=16, max_position_embeddings=12)


def _random_tiny_model(seed: int) -> BertModel:
    # The skeleton filled by NumPy: BertModel(TINY, key=...) would compile one random op per
    # parameter shape, slow on a loaded CI machine.
    rng = np.random.default_rng(seed)
    model: BertModel = spruce.tree.map(
        lambda x: rng.normal(0.0, 0.5, x.shape).astype(x.dtype) if x.dtype == np.float32 else x,
        BertModel.skeleton(TINY),
    )
    return model


@pytest.mark.slow
def test_padding_does_not_change_real_tokens() -> None:
    model = _random_tiny_model(1)
    ids = jnp.array([1, 7, 3, 2])

    @jax.jit  # one compilation for both calls
    def run(model: BertModel) -> tuple[jax.Array, jax.Array]:
        plain = model(ids)
        padded = model(jnp.array([1, 7, 3, 2, 0, 0, 0]), jnp.array([1, 1, 1, 1, 0, 0, 0]))
        return plain, padded

    plain, padded = run(model)
    np.testing.assert_allclose(padded[:4], plain, atol=1e-5)
    assert float(jnp.abs(padded[4:] - padded[:3]).max()) > 1e-3  # the model is not trivial


@pytest.mark.slow
def test_packed_sequences_equal_separate_ones() -> None:
    # Two sequences in one: positions restarting at the second, a block-diagonal mask.
    model = _random_tiny_model(2)
    a, b = jnp.array([1, 7, 3, 2]), jnp.array([1, 9, 2])
    ids = jnp.array([1, 7, 3, 2, 1, 9, 2, 0])
    positions = jnp.array([0, 1, 2, 3, 0, 1, 2, 0])
    segments = jnp.array([1, 1, 1, 1, 2, 2, 2, 0])
    mask = segments[:, None] == segments[None, :]

    @jax.jit
    def run(model: BertModel) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        return model(a), model(b), model(ids, mask, position_ids=positions), model(ids)

    alone_a, alone_b, packed, plain = run(model)
    np.testing.assert_allclose(packed[:4], alone_a, atol=1e-5)
    np.testing.assert_allclose(packed[4:7], alone_b, atol=1e-5)
    assert float(jnp.abs(plain[4:7] - alone_b).max()) > 1e-3  # without them, b is not alone
    with pytest.raises(ValueError, match=r"position_ids must have the shape of input_ids, \(8,\), got \(7,\)"):
        jax.eval_shape(model, ids, None, None, positions[:7])


def test_bert_self_attention_equals_multihead_attention_with_stacked_projections() -> None:
    # BertSelfAttention keeps the checkpoint's separate projections; nn.MultiheadAttention with
    # them stacked into PyTorch's in_proj_weight computes the same (with torch's mask sense).
    import spruce.nn as nn

    layer = _random_tiny_model(3).layers[0].attention
    x = np.random.default_rng(4).normal(size=(5, 8)).astype(np.float32)
    allowed = np.tri(5, dtype=bool) | np.eye(5, k=1, dtype=bool)

    def stacked(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in (layer.query_proj, layer.key_proj, layer.value_proj)])

    mha = spruce.tree_at(
        lambda m: (m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias),
        nn.MultiheadAttention(8, 2, key=jax.random.key(0)),
        (stacked("weight"), stacked("bias"), layer.output_proj.weight, layer.output_proj.bias),
    )
    np.testing.assert_allclose(layer(x, allowed), mha(x, x, x, attn_mask=~allowed)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer(x), mha(x, x, x)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"x must have shape \(L, 8\) \(one sequence; use jax.vmap for a batch\), got \(5, 4\)"):
        layer(x[:, :4])
    with pytest.raises(ValueError, match=r"mask must have shape \(5, 5\), got \(4, 4\)"):
        layer(x, allowed[:4, :4])
    with pytest.raises(ValueError, match=r"hidden_size \(10\) must be a multiple of num_heads \(3\)"):
        bert.BertSelfAttention(10, 3, key=jax.random.key(0))


def test_bert_config_errors() -> None:
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        BertConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="mish")
    with pytest.raises(ValueError, match="absolute"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="L <= 12"):
        jax.eval_shape(BertModel.skeleton(TINY), jnp.zeros(13, int))


def test_compilation_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv(minilm.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert minilm.compilation_cache_dir() == tmp_path / "spruce" / "jax"
    monkeypatch.setenv(minilm.CACHE_ENV, str(tmp_path / "mine"))
    assert minilm.compilation_cache_dir() == tmp_path / "mine"
    for off in ("", "0", "off", "OFF"):
        monkeypatch.setenv(minilm.CACHE_ENV, off)
        assert minilm.compilation_cache_dir() is None


