"""The build under test is the one CI meant to test (compiled mypyc build or pure Python)."""

from __future__ import annotations

import os

import pytest

import spruce


def test_compiled_flag_is_a_bool() -> None:
    assert isinstance(spruce.__compiled__, bool)


@pytest.mark.parametrize("expect", [os.environ.get("SPRUCE_EXPECT_COMPILED")])
def test_compiled_flag_matches_expectation(expect: str | None) -> None:
    if expect is None:
        # Nothing expected by the runner: only the type is checked (above).
        assert spruce.__compiled__ in (True, False)
        return
    assert expect in ("0", "1"), f"SPRUCE_EXPECT_COMPILED must be '0' or '1', got {expect!r}"
    assert spruce.__compiled__ is (expect == "1")


def test_compiled_flag_agrees_with_loaded_modules() -> None:
    import spruce.tree  # loads the engine

    files = [
        getattr(m, "__file__", None) or ""
        for name, m in list(__import__("sys").modules.items())
        if name == "spruce" or name.startswith("spruce.")
    ]
    native = [f for f in files if f.endswith((".so", ".pyd"))]
    if spruce.__compiled__:
        assert native, f"__compiled__ is True but no spruce module is an extension: {files}"
    else:
        assert not native, f"__compiled__ is False but extension modules are loaded: {native}"
