"""``spruce.pformat``: the pretty printer behind ``repr(module)``.

A small Wadler-style layout: every container is a group that is printed on one line when it
fits in ``width`` columns (counting the text that must follow it on the same line), and
otherwise with one item per line, indented by ``indent``.  Arrays print as ``f32[2,3]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._arrays import array_summary, is_array


class _Text:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Group:
    """``open item, item, ... close``; ``items`` are ``(prefix, doc)`` pairs."""

    __slots__ = ("open", "items", "close", "one_tuple", "_flat")

    def __init__(self, open: str, items: list[tuple[str, Any]], close: str, one_tuple: bool = False) -> None:
        self.open = open
        self.items = items
        self.close = close
        self.one_tuple = one_tuple  # a 1-tuple keeps its trailing comma
        self._flat: str | None = None


_Doc = _Text | _Group


def _flat(doc: _Doc) -> str:
    if isinstance(doc, _Text):
        return doc.text
    if doc._flat is None:
        inner = ", ".join(prefix + _flat(d) for prefix, d in doc.items)
        if doc.one_tuple:
            inner += ","
        doc._flat = doc.open + inner + doc.close
    return doc._flat


def _render(doc: _Doc, indent: int, column: int, trailing: int, width: int, step: int) -> str:
    flat = _flat(doc)
    if isinstance(doc, _Text) or not doc.items or column + len(flat) + trailing <= width:
        return flat
    inner = indent + step
    pad = " " * inner
    parts = [doc.open]
    n = len(doc.items)
    for i, (prefix, d) in enumerate(doc.items):
        last = i == n - 1
        comma = "," if (not last or doc.one_tuple) else ""
        body = _render(d, inner, inner + len(prefix), len(comma), width, step)
        parts.append("\n" + pad + prefix + body + comma)
    parts.append("\n" + " " * indent + doc.close)
    return "".join(parts)


def _function_text(x: Any) -> str | None:
    name = getattr(x, "__name__", None)
    if name is None:
        wrapped = getattr(x, "__wrapped__", None)
        name = getattr(wrapped, "__name__", None)
    if name is None or not callable(x) or isinstance(x, type):
        return None
    return f"<function {name}>"


class _Builder:
    def __init__(self, short_arrays: bool, max_depth: int | None) -> None:
        self.short_arrays = short_arrays
        self.max_depth = max_depth
        self.active: set[int] = set()

    def doc(self, x: Any, depth: int) -> _Doc:
        if is_array(x) or (
            hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type) and type(x).__name__ != "dtype"
        ):
            if self.short_arrays or not is_array(x):
                try:
                    return _Text(array_summary(x))
                except Exception:
                    pass
            return _Text(repr(x))
        t = type(x)
        if t in (list, tuple, dict) or dataclasses.is_dataclass(x) and not isinstance(x, type) or _is_namedtuple(x):
            if id(x) in self.active:
                return _Text("<cycle>")
            self.active.add(id(x))
            try:
                return self.container(x, depth)
            finally:
                self.active.discard(id(x))
        text = repr(x)
        if text.startswith("<") and callable(x) and not isinstance(x, type):
            # Functions, builtins and jax's wrapped functions (custom_jvp, jit): drop the address.
            short = _function_text(x)
            if short is not None:
                return _Text(short)
        return _Text(text)

    def container(self, x: Any, depth: int) -> _Doc:
        deep = self.max_depth is not None and depth >= self.max_depth
        t = type(x)
        if isinstance(x, list):
            return _Text("[...]") if deep and x else _Group("[", [("", self.doc(v, depth + 1)) for v in x], "]")
        if _is_namedtuple(x):
            name = t.__name__
            if deep:
                return _Text(f"{name}(...)")
            return _Group(f"{name}(", [(f"{k}=", self.doc(v, depth + 1)) for k, v in zip(x._fields, x)], ")")
        if isinstance(x, tuple):
            if deep and x:
                return _Text("(...)")
            return _Group("(", [("", self.doc(v, depth + 1)) for v in x], ")", one_tuple=len(x) == 1)
        if isinstance(x, dict):
            if deep and x:
                return _Text("{...}")
            return _Group("{", [(f"{k!r}: ", self.doc(v, depth + 1)) for k, v in x.items()], "}")
        name = t.__name__
        if deep:
            return _Text(f"{name}(...)")
        items: list[tuple[str, Any]] = []
        for f in dataclasses.fields(x):
            if not f.repr:
                continue
            try:
                value = getattr(x, f.name)
            except AttributeError:
                items.append((f"{f.name}=", _Text("<uninitialised>")))
                continue
            items.append((f"{f.name}=", self.doc(value, depth + 1)))
        return _Group(f"{name}(", items, ")")


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def pformat(
    obj: Any,
    *,
    width: int = 80,
    indent: int = 2,
    short_arrays: bool = True,
    max_depth: int | None = None,
) -> str:
    """Format a pytree (Modules, dataclasses, lists, tuples, dicts, namedtuples, arrays) as text.

    Args:
      obj: anything; containers are laid out, other objects use their ``repr``.
      width: the line width to fit in (80, as the seed's module reprs).
      indent: spaces per nesting level when a container is broken over lines.
      short_arrays: print arrays as ``f32[2,3]`` (dtype short name and shape; NumPy arrays add
        ``(numpy)``); False prints their values with ``repr``.
      max_depth: containers nested deeper than this print as ``Linear(...)`` / ``[...]``
        (the root is depth 0); None for no limit.

    Returns:
      The text, without a trailing newline.  A container that fits in the remaining width is
      printed on one line; otherwise one item per line, closed at its own indentation — the
      layout of ``equinox.tree_pformat`` and the seed's ``repr(model)``.

    >>> pformat({'a': (1,), 'b': [2.5, 'x']})
    "{'a': (1,), 'b': [2.5, 'x']}"
    >>> print(pformat([list(range(12)), list(range(12))], width=42))
    [
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    ]
    """
    if width < 1 or indent < 0:
        raise ValueError(f"pformat: width must be >= 1 and indent >= 0, got width={width}, indent={indent}")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"pformat: max_depth must be None or >= 0, got {max_depth}")
    doc = _Builder(short_arrays, max_depth).doc(obj, 0)
    return _render(doc, 0, 0, 0, width, indent)
