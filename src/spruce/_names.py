"""Dotted tensor names: key paths to ``encoder.layers.0.weight`` and flat dicts back to trees.

The naming rule (also in docs/io.md):

- each key-path entry gives one component: ``DictKey`` its key (a ``str`` as is, any other
  key by its ``repr``: ``1``, ``(1, 2)``, ``True``), ``SequenceKey`` / ``FlattenedIndexKey``
  the decimal index, ``GetAttrKey`` the attribute name; other entry types their ``str``;
- inside a component, ``%`` is written ``%25`` and each character of the separator is
  percent-encoded (``.`` is ``%2E``), so a key holding the separator round-trips;
- components are joined with the separator (``.`` by default).  The root leaf's name is ``''``.

Two different leaves of one tree that get the same name (the dict keys ``1`` and ``'1'``) are
an error naming both key paths.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from . import tree as _tree

_CANONICAL_INDEX = re.compile(r"0|[1-9][0-9]*")


def _check_sep(sep: str) -> None:
    if not isinstance(sep, str) or not sep:
        raise ValueError(f"the name separator must be a non-empty str, got {sep!r}")
    if "%" in sep:
        raise ValueError("the name separator cannot contain '%', the escape character")


def _percent(c: str) -> str:
    return "".join(f"%{b:02X}" for b in c.encode("utf-8"))


class _Escaper:
    """Escapes and unescapes name components for one separator."""

    __slots__ = ("sep", "table", "pattern", "back")

    def __init__(self, sep: str) -> None:
        _check_sep(sep)
        self.sep = sep
        self.table = {"%": "%25"}
        for c in sep:
            self.table[c] = _percent(c)
        self.back = {v: k for k, v in self.table.items()}
        codes = sorted(self.back, key=len, reverse=True)
        self.pattern = re.compile("|".join(re.escape(c) for c in codes))

    def escape(self, text: str) -> str:
        if "%" not in text and (self.sep not in text if len(self.sep) == 1 else not any(c in text for c in self.sep)):
            return text
        return "".join(self.table.get(c, c) for c in text)

    def unescape(self, text: str) -> str:
        if "%" not in text:
            return text
        return self.pattern.sub(lambda m: self.back[m.group(0)], text)


_ESCAPERS: dict[str, _Escaper] = {}


def escaper(sep: str) -> _Escaper:
    """The (cached) escaper for ``sep``."""
    e = _ESCAPERS.get(sep) if isinstance(sep, str) else None
    if e is None:
        e = _Escaper(sep)
        if len(_ESCAPERS) < 64:
            _ESCAPERS[sep] = e
    return e


def component(entry: Any, esc: _Escaper) -> str:
    """The name component of one key-path entry (see the module docstring)."""
    if isinstance(entry, _tree.SequenceKey):
        return str(entry.idx)
    if isinstance(entry, _tree.DictKey):
        key = entry.key
        return esc.escape(key if type(key) is str else repr(key))
    if isinstance(entry, _tree.GetAttrKey):
        return esc.escape(entry.name)
    if isinstance(entry, _tree.FlattenedIndexKey):
        return str(entry.key)
    return esc.escape(str(entry))


def path_name(path: Iterable[Any], sep: str = ".") -> str:
    """The dotted name of a key path (a tuple of key entries, as ``flatten_with_path`` gives).

    >>> from spruce.tree import DictKey, SequenceKey, GetAttrKey
    >>> path_name((DictKey('encoder'), SequenceKey(0), GetAttrKey('weight')))
    'encoder.0.weight'
    >>> path_name((DictKey('a.b'), DictKey(1)))
    'a%2Eb.1'
    """
    esc = escaper(sep)
    return sep.join([component(e, esc) for e in path])


def path_text(path: Iterable[Any]) -> str:
    """A key path as ``keystr`` prints it (``['a'][0].w``), or ``<root>`` for the empty path."""
    s = _tree.keystr(tuple(path))
    return s if s else "<root>"


def flatten_names(tree: Any, *, sep: str = ".") -> dict[str, Any]:
    """The leaves of ``tree`` by dotted name: ``{'encoder.layers.0.weight': leaf, ...}``.

    This is the naming of PyTorch's ``state_dict`` and of safetensors checkpoints, made from
    spruce key paths (the rule is in ``spruce.io``'s documentation and docs/io.md): dict keys,
    sequence indices and attribute names joined by ``sep``, with ``%`` and the separator
    percent-escaped inside a component.  None holes have no entry; leaves of any type are
    returned as they are, in flatten order.

    Args:
      tree: any pytree (a spruce Module included).
      sep: the separator, a non-empty str without ``%``.

    Returns:
      A dict from name to leaf.

    Raises:
      ValueError: two leaves get the same name (e.g. dict keys ``1`` and ``'1'``); the message
        names both key paths.  A bad ``sep``.

    >>> import numpy as np
    >>> flatten_names({'layers': [{'w': 1}, {'w': 2}], 'a.b': None, 'c.d': 3})
    {'c%2Ed': 3, 'layers.0.w': 1, 'layers.1.w': 2}
    >>> flatten_names({'x': (1, 2)}, sep='/')
    {'x/0': 1, 'x/1': 2}
    """
    return {name: leaf for name, _, leaf in named_leaves(tree, sep)}


def shared_prefix(path: tuple[Any, ...], prev: tuple[Any, ...]) -> int:
    """How many leading key-path entries ``path`` shares with ``prev``, by identity: the engine
    hands out one entry object per node, so neighbouring leaves share their ancestors'."""
    k = 0
    n = min(len(path), len(prev))
    while k < n and path[k] is prev[k]:
        k += 1
    return k


def named_leaves(tree: Any, sep: str = ".") -> list[tuple[str, tuple[Any, ...], Any]]:
    """``(name, key path, leaf)`` for every leaf of ``tree`` in flatten order, named as by
    ``flatten_names`` (which this is, with the key paths kept).

    Raises:
      ValueError: as ``flatten_names``.
    """
    esc = escaper(sep)
    out: list[tuple[str, tuple[Any, ...], Any]] = []
    where: dict[str, Any] = {}
    # Neighbouring leaves share the entries of their common ancestors (the engine hands out one
    # entry object per node), so a leaf's components are those of the longest prefix it shares
    # with the previous leaf, plus its own: parts[j] is the component of prev[j].  (Joined per
    # leaf, not grown prefix by prefix, which would cost the square of a deep path's length.)
    prev: tuple[Any, ...] = ()
    parts: list[str] = []
    for path, leaf in _tree.leaves_with_path(tree):
        k = shared_prefix(path, prev)
        del parts[k:]
        for j in range(k, len(path)):
            parts.append(component(path[j], esc))
        name = sep.join(parts)
        prev = path
        if name in where:
            raise ValueError(
                f"flatten_names: the leaves at key paths {path_text(where[name])} and "
                f"{path_text(path)} both get the name {name!r}; rename one of the keys"
            )
        out.append((name, path, leaf))
        where[name] = path
    return out


class _Branch(dict[str, Any]):
    """An inner node made by unflatten_names (told apart from dict leaves by its type)."""


def unflatten_names(flat: Mapping[str, Any], *, sep: str = ".") -> Any:
    """Nest a flat ``{dotted name: leaf}`` mapping (a PyTorch / Hugging Face state dict).

    Names are split at ``sep`` and unescaped (``%2E`` gives back ``.``, ``%25`` gives ``%``;
    other ``%`` sequences are kept as they are).  Every inner node becomes a dict in the order
    its names first appear, except that a node whose keys are exactly ``'0'``, ``'1'``, ...,
    ``'n-1'`` (decimal, no leading zeros, in any order) becomes a list in index order.  Leaves
    are kept as they are.  The inverse of ``flatten_names`` for trees of dicts (with str keys)
    and lists; the structure of any other tree is kept by ``spruce.io.save``'s metadata instead.

    Args:
      flat: a mapping from str names to leaves.
      sep: the separator, a non-empty str without ``%``.

    Returns:
      Nested dicts and lists; ``{}`` for an empty mapping.

    Raises:
      ValueError: a name is both a leaf and the prefix of another name (``'a'`` and ``'a.b'``),
        two names are equal after unescaping, a name is not a str, or ``sep`` is bad.

    >>> unflatten_names({'encoder.layer.0.w': 1, 'encoder.layer.1.w': 2, 'pooler.b': 3})
    {'encoder': {'layer': [{'w': 1}, {'w': 2}]}, 'pooler': {'b': 3}}
    >>> unflatten_names({'a.0': 1, 'a.2': 2, 'b.01': 3, 'c%2Ed': 4})
    {'a': {'0': 1, '2': 2}, 'b': {'01': 3}, 'c.d': 4}
    """
    esc = escaper(sep)
    root = _Branch()
    # Inner nodes in creation order with their (parent, key): parents come before children.
    branches: list[tuple[_Branch, _Branch | None, str]] = [(root, None, "")]
    for name, value in flat.items():
        if not isinstance(name, str):
            raise ValueError(f"unflatten_names: names must be str, got {name!r}")
        parts = name.split(sep)
        node = root
        for i in range(len(parts) - 1):
            key = esc.unescape(parts[i])
            child = node.get(key, _MISSING)
            if child is _MISSING:
                child = _Branch()
                node[key] = child
                branches.append((child, node, key))
            elif type(child) is not _Branch:
                raise ValueError(
                    f"unflatten_names: {name!r} needs {sep.join(parts[: i + 1])!r} to be a "
                    f"subtree, but that name is a leaf"
                )
            node = child
        key = esc.unescape(parts[-1])
        old = node.get(key, _MISSING)
        if old is not _MISSING:
            if type(old) is _Branch:
                raise ValueError(
                    f"unflatten_names: {name!r} is a leaf, but other names continue it "
                    f"({name + sep}...)"
                )
            raise ValueError(f"unflatten_names: two names give the key path of {name!r}")
        node[key] = value
    result: dict[int, Any] = {}
    for branch, parent, _key in reversed(branches):
        converted = _convert(branch, result)
        if parent is None:
            return converted
        result[id(branch)] = converted
    raise AssertionError("unreachable")  # the root is always the first branch


_MISSING: Any = object()


def _convert(branch: _Branch, done: dict[int, Any]) -> Any:
    items = [(k, done.pop(id(v)) if type(v) is _Branch else v) for k, v in branch.items()]
    n = len(items)
    if n and all(_CANONICAL_INDEX.fullmatch(k) for k, _ in items):
        slots: list[Any] = [_MISSING] * n
        for k, v in items:
            i = int(k)
            if i >= n:
                break
            slots[i] = v
        else:
            return slots  # n distinct canonical indices all below n: exactly 0..n-1
    return dict(items)
