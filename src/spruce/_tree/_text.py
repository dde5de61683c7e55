"""Names and clipped text for messages (the engine's one truncation helper)."""

from __future__ import annotations

from typing import Any, Final

MAX_REPR: Final = 120


def qualified_name(t: type) -> str:
    """``module.qualname`` of a type (``builtins.`` left out)."""
    module = getattr(t, "__module__", None)
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", "?")
    if module is None or module == "builtins":
        return str(name)
    return f"{module}.{name}"


def clip(s: str, limit: int) -> str:
    """``s`` cut to at most ``limit`` characters, ending in ``...`` when cut."""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def short_repr(x: Any, limit: int = MAX_REPR) -> str:
    try:
        s = repr(x)
    except Exception as e:  # a broken __repr__ must not hide the real error
        s = f"<{type(x).__name__} object (repr failed: {type(e).__name__})>"
    return clip(s, limit)
