"""Print values the way the English tutorial's notebook showed them, so the outputs can be compared.

That tutorial (see examples/README.md) is a Jupyter page: each output cell is the notebook's
pretty display of the value.  ``notebook_repr`` lays out dicts, lists and plain tuples the same
way — one line if the value fits in 79 columns, otherwise one item per line with each nesting
level indented by one more space — and prints everything else (arrays, namedtuples, Modules)
with its own ``repr``, the continuation lines indented to the current level.  That is enough to
reproduce every output block of the tutorial character for character.

Shared by the example scripts (``python examples/X.py`` puts ``examples/`` on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

WIDTH = 79  # the notebook's line width


def notebook_repr(obj: Any) -> str:
    """The notebook's display of ``obj`` (without a trailing newline)."""
    return _layout(obj, column=0, indent=0, trail=0)


def _is_container(obj: Any) -> bool:
    # namedtuples print with their own repr (as in the notebook); plain tuples are laid out.
    return type(obj) in (dict, list, tuple)


def _items(obj: Any) -> tuple[str, str, list[tuple[str, Any]]]:
    if type(obj) is dict:
        return "{", "}", [(repr(k) + ": ", v) for k, v in obj.items()]
    if type(obj) is list:
        return "[", "]", [("", v) for v in obj]
    close = ",)" if len(obj) == 1 else ")"
    return "(", close, [("", v) for v in obj]


def _flat(obj: Any) -> str:
    """The one-line form (it may still hold newlines if an element's repr does)."""
    if not _is_container(obj):
        return repr(obj)
    open_, close, items = _items(obj)
    return open_ + ", ".join(prefix + _flat(v) for prefix, v in items) + close


def _layout(obj: Any, column: int, indent: int, trail: int) -> str:
    """Lay ``obj`` out starting at ``column``; ``indent`` is the current nesting level and
    ``trail`` the number of characters that must follow it on the same line."""
    flat = _flat(obj)
    if not _is_container(obj):
        return flat.replace("\n", "\n" + " " * indent)
    if "\n" not in flat and column + len(flat) + trail <= WIDTH:
        return flat
    open_, close, items = _items(obj)
    inner = indent + 1
    parts = []
    col = column + len(open_)
    for i, (prefix, value) in enumerate(items):
        last = i == len(items) - 1
        text = prefix + _layout(value, col + len(prefix), inner, trail + len(close) if last else 1)
        parts.append(text)
        col = inner
    return open_ + (",\n" + " " * inner).join(parts) + close
