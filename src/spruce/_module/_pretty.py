"""``spruce.pformat``: the pretty printer behind ``repr(module)``.

A small Wadler-style layout: every container is a group that is printed on one line when it
fits in ``width`` columns (counting the text that must follow it on the same line), and
otherwise with one item per line, indented by ``indent``.  Arrays print as ``f32[2,3]``.

Nothing here recurses on the tree: building the document, measuring it and laying it out each
use an explicit stack, so a tree of any depth prints without RecursionError (as every
``spruce.tree`` function handles it).  Depth is cut at ``max_depth``, or at
``DEFAULT_DEPTH_LIMIT`` when none is given, so the text stays bounded: a broken-up container
indents each level further, so the text of an uncut deep chain grows with the square of its
depth.  The one-line form of a group is only built when it is at most ``width`` long (a longer
one can never be printed on one line), so a group's text is never copied into each enclosing
level: the work is linear in the size of the tree, times at most ``width``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from .._arrays import array_summary, has_shape_and_dtype, is_array
from .._tree._registry import is_namedtuple_type

# Containers nested deeper than this print as ``[...]`` when ``max_depth`` is None.  Deep enough
# for any real model (a module tree is rarely 20 levels deep); shallow enough that the broken-up
# text of a deep chain (one line per level, indented 2 columns per level) stays small.
DEFAULT_DEPTH_LIMIT = 100


class _Text:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Group:
    """``open item, item, ... close``; ``items`` are ``(prefix, doc)`` pairs.

    ``length`` is the length of the one-line form; ``text`` is that form, set only when it is
    at most the layout width (or the group is empty), since only then can it be printed.
    """

    __slots__ = ("open", "items", "close", "one_tuple", "length", "text")

    def __init__(self, open: str, close: str, one_tuple: bool = False) -> None:
        self.open = open
        self.items: list[tuple[str, _Doc]] = []
        self.close = close
        self.one_tuple = one_tuple  # a 1-tuple keeps its trailing comma
        self.length = 0
        self.text: str | None = None

    def finish(self, width: int) -> None:
        """Measure the one-line form (all items are complete) and build it if it may be used."""
        n = len(self.open) + len(self.close) + 2 * max(len(self.items) - 1, 0) + self.one_tuple
        for prefix, d in self.items:
            n += len(prefix) + (len(d.text) if isinstance(d, _Text) else d.length)
        self.length = n
        if n <= width or not self.items:
            # Every item is shorter than the group, so each has its one-line text.
            inner = ", ".join(prefix + (d.text or "") for prefix, d in self.items)
            self.text = self.open + inner + ("," if self.one_tuple else "") + self.close


_Doc = _Text | _Group

# Children of a container: (prefix, value) pairs; a value that is this object prints as it is.
_UNINITIALISED = _Text("<uninitialised>")
_Children = Iterator[tuple[str, Any]]
# Leaves printed with ``repr`` without further checks (exact types: not arrays, containers or
# functions).
_PLAIN = frozenset({int, float, complex, str, bool, type(None)})


def _one_line(d: _Doc, column: int, trailing: int, width: int) -> str | None:
    """``d`` on one line if it fits between ``column`` and ``width`` with ``trailing`` after it."""
    if isinstance(d, _Text):
        return d.text
    if d.text is not None and (not d.items or column + d.length + trailing <= width):
        return d.text
    return None


def _render(doc: _Doc, width: int, step: int) -> str:
    """Lay ``doc`` out: each group on one line if it fits, else one item per line."""
    out: list[str] = []
    # Tasks, last first: text to emit, or (group, indent) to break over lines (a group that
    # fits on its line was already emitted as text by its parent).
    stack: list[str | tuple[_Group, int]] = []
    text = _one_line(doc, 0, 0, width)
    if text is not None:
        return text
    assert isinstance(doc, _Group)
    stack.append((doc, 0))
    while stack:
        task = stack.pop()
        if isinstance(task, str):
            out.append(task)
            continue
        d, indent = task
        inner = indent + step
        pad = "\n" + " " * inner
        out.append(d.open)
        n = len(d.items)
        tasks: list[str | tuple[_Group, int]] = []
        for i, (prefix, item) in enumerate(d.items):
            comma = "," if (i < n - 1 or d.one_tuple) else ""
            text = _one_line(item, inner + len(prefix), len(comma), width)
            if text is not None:
                tasks.append(pad + prefix + text + comma)
                continue
            assert isinstance(item, _Group)
            tasks.append(pad + prefix)
            tasks.append((item, inner))
            if comma:
                tasks.append(comma)
        tasks.append("\n" + " " * indent + d.close)
        stack.extend(reversed(tasks))
    return "".join(out)


def _function_text(x: Any) -> str | None:
    name = getattr(x, "__name__", None)
    if name is None:
        wrapped = getattr(x, "__wrapped__", None)
        name = getattr(wrapped, "__name__", None)
    if name is None or not callable(x) or isinstance(x, type):
        return None
    return f"<function {name}>"


def _is_container(x: Any) -> bool:
    # A dataclass whose class sets ``_spruce_repr_leaf = True`` prints with its own ``repr``
    # (spruce.nn's inference flag, a dataclass so that spruce.io rebuilds it, prints as a bool).
    return (
        type(x) in (list, tuple, dict)
        or dataclasses.is_dataclass(x) and not isinstance(x, type) and not getattr(type(x), "_spruce_repr_leaf", False)
        or is_namedtuple_type(type(x))
    )


class _Builder:
    """Turns a tree into a document, depth first with an explicit stack."""

    def __init__(self, short_arrays: bool, limit: int, width: int) -> None:
        self.short_arrays = short_arrays
        self.limit = limit  # containers at this depth or deeper are cut to ``[...]``
        self.width = width
        self.active: set[int] = set()  # ids of the containers being built: meeting one is a cycle

    def build(self, root: Any, depth: int = 0) -> _Doc:
        doc, children = self.open(root, depth)
        if children is None:
            return doc
        assert isinstance(doc, _Group)
        self.active.add(id(root))
        stack: list[tuple[_Group, _Children, int, int]] = [(doc, children, depth, id(root))]
        while stack:
            group, children, d, key = stack[-1]
            for prefix, value in children:
                if type(value) in _PLAIN:
                    group.items.append((prefix, _Text(repr(value))))
                    continue
                child, grandchildren = self.open(value, d + 1)
                group.items.append((prefix, child))
                if grandchildren is not None:
                    # Descend; ``children`` resumes after this item when the child is done.
                    assert isinstance(child, _Group)
                    self.active.add(id(value))
                    stack.append((child, grandchildren, d + 1, id(value)))
                    break
            else:
                stack.pop()
                self.active.discard(key)
                group.finish(self.width)
        return doc

    def open(self, x: Any, depth: int) -> tuple[_Doc, _Children | None]:
        """A leaf's finished document, or a container's empty group and its children."""
        if x is _UNINITIALISED:
            return x, None
        if is_array(x) or (
            has_shape_and_dtype(x) and type(x).__name__ != "dtype"
        ):
            if self.short_arrays or not is_array(x):
                try:
                    return _Text(array_summary(x)), None
                except Exception:
                    pass
            return _Text(repr(x)), None
        if _is_container(x):
            if id(x) in self.active:
                return _Text("<cycle>"), None
            return self.container(x, depth)
        text = repr(x)
        if text.startswith("<") and callable(x) and not isinstance(x, type):
            # Functions, builtins and jax's wrapped functions (custom_jvp, jit): drop the address.
            short = _function_text(x)
            if short is not None:
                return _Text(short), None
        return _Text(text), None

    def container(self, x: Any, depth: int) -> tuple[_Doc, _Children | None]:
        deep = depth >= self.limit
        t = type(x)
        if isinstance(x, list):
            if deep and x:
                return _Text("[...]"), None
            return _Group("[", "]"), (("", v) for v in x)
        if is_namedtuple_type(type(x)):
            if deep:
                return _Text(f"{t.__name__}(...)"), None
            return _Group(f"{t.__name__}(", ")"), ((f"{k}=", v) for k, v in zip(x._fields, x))
        if isinstance(x, tuple):
            if deep and x:
                return _Text("(...)"), None
            return _Group("(", ")", one_tuple=len(x) == 1), (("", v) for v in x)
        if isinstance(x, dict):
            if deep and x:
                return _Text("{...}"), None
            return _Group("{", "}"), ((f"{self.key_text(k, depth)}: ", v) for k, v in x.items())
        if deep:
            return _Text(f"{t.__name__}(...)"), None
        return _Group(f"{t.__name__}(", ")"), self.fields(x)

    def key_text(self, k: Any, depth: int) -> str:
        """A dict key as ``repr`` prints it.  Tuple keys, which may nest deeply, go through a
        builder on one line, cut at the depth ``max(limit, DEFAULT_DEPTH_LIMIT)`` counted from
        the root (``max_depth`` alone never shortened keys)."""
        if not isinstance(k, tuple):
            return repr(k)
        one_line = sys.maxsize  # a width every group fits in
        doc = _Builder(False, max(self.limit, DEFAULT_DEPTH_LIMIT), one_line).build(k, depth + 1)
        return _render(doc, one_line, 0)

    @staticmethod
    def fields(x: Any) -> _Children:
        for f in dataclasses.fields(x):
            if not f.repr:
                continue
            try:
                value = getattr(x, f.name)
            except AttributeError:
                value = _UNINITIALISED
            yield f"{f.name}=", value


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
      width: the line width to fit in (80, as the module reprs in the tutorial of
        examples/README.md).
      indent: spaces per nesting level when a container is broken over lines.
      short_arrays: print arrays as ``f32[2,3]`` (dtype short name and shape; NumPy arrays add
        ``(numpy)``); False prints their values with ``repr``.
      max_depth: containers nested deeper than this print as ``Linear(...)`` / ``[...]``
        (the root is depth 0).  None (the default) cuts at 100 levels, which keeps the text
        of any tree bounded; a larger ``max_depth`` is honoured, but the text of a chain
        broken over lines grows with the square of its depth.

    Returns:
      The text, without a trailing newline.  A container that fits in the remaining width is
      printed on one line; otherwise one item per line, closed at its own indentation — the
      layout of ``equinox.tree_pformat`` and the ``repr(model)`` printed by the
      tutorial that ``examples/seed_equinox.py`` reproduces.  A container met
      again inside itself prints as ``<cycle>`` (where Python's ``repr`` prints ``[...]``).
      Any depth is safe: nothing recurses on the tree, unlike ``repr`` of a list.

    >>> pformat({'a': (1,), 'b': [2.5, 'x']})
    "{'a': (1,), 'b': [2.5, 'x']}"
    >>> print(pformat([list(range(12)), list(range(12))], width=42))
    [
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    ]
    >>> deep = []
    >>> for _ in range(100_000):
    ...     deep = [deep]
    >>> pformat(deep, max_depth=3)
    '[[[[...]]]]'
    >>> cyclic = [1]
    >>> cyclic.append(cyclic)
    >>> pformat(cyclic)
    '[1, <cycle>]'
    """
    if width < 1 or indent < 0:
        raise ValueError(f"pformat: width must be >= 1 and indent >= 0, got width={width}, indent={indent}")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"pformat: max_depth must be None or >= 0, got {max_depth}")
    limit = DEFAULT_DEPTH_LIMIT if max_depth is None else max_depth
    doc = _Builder(short_arrays, limit, width).build(obj)
    return _render(doc, width, indent)
