"""README.md as a reader uses it: its code runs, its commands exist, its links resolve.

- every ```python block runs in a fresh interpreter with spruce importable (the build under
  test), and when a ```text block follows it (nothing but blank lines between), that block is
  what it prints (floats with the suite's tolerance);
- every command of a ```sh block is checked as far as it can be without running the long jobs:
  ``make TARGET`` is a target of the Makefile (``make -n TARGET`` succeeds), ``spruce ARGS``
  parses (``python -m spruce ARGS --help`` exits 0, and names every ``--flag`` of ARGS);
- every relative link points to a file of the repository, every ``#anchor`` to a heading;
- the README stays under 150 lines: the rest is on the site (docs/).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from helpers import assert_text_close, run_python

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# `spruce` commands the README shows before they exist on this branch: each is checked to fail
# to parse (so that this entry is removed once the command lands) instead of to parse.
NOT_YET: frozenset[tuple[str, ...]] = frozenset({
    ("demo", "chat"),  # spruce demo chat (SmolLM2-135M-Instruct): being finished on its own branch
})


class Block(NamedTuple):
    lang: str
    text: str
    line: int  # of the opening fence, 1-based


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text; a fence left open is an error."""
    out: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, f"README.md:{i + 1}: a code block that is never closed"
        out.append(Block(opening.group(1), "\n".join(lines[i + 1 : end]) + "\n", i + 1))
        i = end + 1
    return out


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def python_cases() -> list[tuple[Block, Block | None]]:
    """Each ```python block with the ```text block that shows its output, if one follows."""
    text = _readme()
    found = blocks(text)
    lines = text.split("\n")
    cases = []
    for k, block in enumerate(found):
        if block.lang != "python":
            continue
        output = None
        if k + 1 < len(found) and found[k + 1].lang == "text":
            end_of_code = block.line + block.text.count("\n")  # the line of the closing fence (0-based + 1)
            between = lines[end_of_code + 1 : found[k + 1].line - 1]
            if all(not line.strip() for line in between):
                output = found[k + 1]
        cases.append((block, output))
    return cases


def test_readme_is_short_and_has_what_it_promises() -> None:
    text = _readme()
    assert len(text.splitlines()) < 150
    langs = [b.lang for b in blocks(text)]
    assert langs.count("python") >= 1 and langs.count("sh") >= 2 and "text" in langs
    assert all(lang in {"python", "sh", "text"} for lang in langs), langs  # each language is checked below


@pytest.mark.parametrize("case", python_cases(), ids=lambda c: f"line{c[0].line}")
def test_python_block_runs_and_prints_what_is_shown(case: tuple[Block, Block | None]) -> None:
    code, output = case
    done = run_python(code.text, timeout=300)
    assert done.returncode == 0, f"README.md:{code.line}: the block failed\n{done.stderr[-3000:]}"
    if output is not None:
        assert_text_close(done.stdout, output.text)


def test_some_python_block_shows_its_output() -> None:
    assert any(output is not None for _, output in python_cases())


def sh_commands() -> list[tuple[int, list[str]]]:
    """(line of the block, words) of every command of the ```sh blocks, comments dropped."""
    out = []
    for block in blocks(_readme()):
        if block.lang == "sh":
            for line in block.text.splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    out.append((block.line, words))
    return out


def _make_env() -> dict[str, str]:
    # a make that runs this suite passes its flags (jobserver, -k) down: not to this dry run
    return {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}


def _spruce_help(args: list[str]) -> tuple[int, str, str]:
    """``python -m spruce ARGS --help`` with the build under test: (exit code, stdout, stderr)."""
    done = run_python(
        f"import runpy, sys\nsys.argv = ['spruce', *{args!r}, '--help']\nrunpy.run_module('spruce', run_name='__main__')\n"
    )
    return done.returncode, done.stdout, done.stderr


def _subcommand(args: list[str]) -> tuple[str, ...]:
    positional = [a for a in args if not a.startswith("-")]
    return tuple(positional[:2])


@pytest.mark.parametrize("command", sh_commands(), ids=lambda c: " ".join(c[1])[:60])
def test_sh_command_exists(command: tuple[int, list[str]]) -> None:
    line, words = command
    program, args = words[0], words[1:]
    if program == "make":
        assert args, f"README.md:{line}: `make` without a target"
        for target in args:
            done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True,
                                  timeout=120, env=_make_env())
            assert done.returncode == 0, f"README.md:{line}: make -n {target}: {done.stderr[-1000:]}"
            assert done.stdout.strip(), f"make -n {target} printed nothing"
    elif program == "spruce":
        code, out, err = _spruce_help(args)
        if _subcommand(args) in NOT_YET:
            assert code != 0, f"`spruce {' '.join(args)}` parses now: remove {_subcommand(args)} from NOT_YET"
            return
        assert code == 0, f"README.md:{line}: spruce {' '.join(args)} --help: exit {code}\n{err[-1000:]}"
        assert out.startswith("usage: spruce")
        for word in args:
            if word.startswith("--"):  # the whole option, not a prefix argparse would accept
                option = rf"(?<![\w-]){re.escape(word)}(?![\w-])"
                assert re.search(option, out), f"README.md:{line}: {word} is not an option of spruce {' '.join(args)}"
    else:
        pytest.fail(f"README.md:{line}: no check for `{program}` commands: add one to this test")


def test_not_yet_commands_are_in_the_readme() -> None:
    shown = {_subcommand(words[1:]) for _, words in sh_commands() if words[0] == "spruce"}
    assert NOT_YET <= shown


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_resolve() -> None:
    text = _readme()
    prose = re.sub(r"^```\w*\n.*?^```\n", "", text, flags=re.S | re.M)
    anchors = {_slug(m) for m in re.findall(r"^#+ (.+)$", prose, flags=re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(relative) >= 20
    for link in relative:
        path, _, anchor = link.partition("#")
        if not path:
            assert anchor in anchors, f"README.md: no heading for #{anchor} (headings: {sorted(anchors)})"
            continue
        assert not path.startswith("/"), f"README.md: {link} is absolute"
        target = (ROOT / path).resolve()
        assert target.is_relative_to(ROOT) and target.exists(), f"README.md: {link} points to nothing"
