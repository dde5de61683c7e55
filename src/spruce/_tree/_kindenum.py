"""PyTreeKind, the enum of node kinds optree's PyTreeSpec.kind gives (never compiled: an enum).

The values are optree's (CUSTOM is 0, LEAF 1, ...), not the engine's own kind numbers
(``_kinds``), which order the built-in kinds first; ``of_kind`` maps one to the other.
"""

from __future__ import annotations

import enum


class PyTreeKind(enum.IntEnum):
    """The kind of a PyTreeDef's root node (``PyTreeDef.kind``), with optree's names and values.

    >>> from spruce.tree import structure
    >>> structure({'a': 1}).kind
    <PyTreeKind.DICT: 5>
    """

    CUSTOM = 0
    LEAF = 1
    NONE = 2
    TUPLE = 3
    LIST = 4
    DICT = 5
    NAMEDTUPLE = 6
    ORDEREDDICT = 7
    DEFAULTDICT = 8
    DEQUE = 9
    STRUCTSEQUENCE = 10
    FROZENDICT = 11  # optree's, for Python 3.15's frozendict; spruce makes no node of this kind


def of_kind(kind: int) -> PyTreeKind:
    """The PyTreeKind of an engine kind (``_kinds``: LEAF 0 ... CUSTOM 10)."""
    return PyTreeKind((kind + 1) % 11)
