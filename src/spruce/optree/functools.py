"""optree's ``optree.functools``: ``partial``, a ``functools.partial`` that is a pytree node, and
``reduce`` (``spruce.optree.tree_reduce`` under its short name, as optree has it here).

``spruce.tree.Partial`` is JAX's form of the same idea (its children are unnamed, its repr the
standard one); ``partial`` here is optree's, built on it: the bound positional arguments (a
tuple) and keyword arguments (a dict) are its two children, with entries ``'args'`` and
``'keywords'`` and ``GetAttrEntry`` accessors, and the wrapped function is node data.  It is
registered in the global namespace, so every walk sees it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

from .._partial import Partial
from ._accessors import GetAttrEntry, PyTreeEntry
from ._ops import tree_reduce as reduce
from ._registry import GLOBAL_NAMESPACE, register_pytree_node

__all__ = ["partial", "reduce"]

if hasattr(functools, "Placeholder"):  # Python 3.14+: re-exported, as optree does
    Placeholder = functools.Placeholder
    __all__ += ["Placeholder"]


class partial(Partial):
    """optree's ``optree.functools.partial``: ``partial(func, *args, **keywords)`` behaves as
    ``functools.partial`` and is a pytree whose leaves are those of ``args`` and ``keywords``
    (``func`` is node data: it must be hashable to hash the structure).  A
    ``functools.partial`` given as ``func`` stays whole (its own arguments are not merged into
    this one's children; ``.func`` is that partial).  Positional placeholders
    (``functools.Placeholder``, Python 3.14+) are leaves kept as they are.

    >>> import operator, spruce.tree as st
    >>> add_one = partial(operator.add, 1)
    >>> add_one
    spruce.optree.functools.partial(<built-in function add>, 1)
    >>> st.map(lambda x: x * 10, add_one)(5), st.structure(add_one).entries()
    (15, ['args', 'keywords'])
    """

    __slots__ = ()

    TREE_PATH_ENTRY_TYPE: ClassVar[type[PyTreeEntry]] = GetAttrEntry

    def __repr__(self) -> str:
        """``module.partial(func, args..., key=value...)``."""
        parts = [repr(self.func), *map(repr, self.args), *(f"{k}={v!r}" for k, v in self.keywords.items())]
        return f"{type(self).__module__}.{type(self).__qualname__}({', '.join(parts)})"

    def __tree_flatten__(self) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], Callable[..., Any], tuple[str, str]]:
        """``((args, keywords), func, ('args', 'keywords'))``: children, node data, entries."""
        return (self.args, self.keywords), self.func, ("args", "keywords")

    @classmethod
    def __tree_unflatten__(cls, metadata: Callable[..., Any], children: tuple[tuple[Any, ...], dict[str, Any]]) -> partial:
        """A partial of ``metadata`` (the function) with the children ``(args, keywords)``."""
        args, keywords = children
        return cls(metadata, *args, **keywords)


register_pytree_node(
    partial,
    partial.__tree_flatten__,
    partial.__tree_unflatten__,
    path_entry_type=GetAttrEntry,
    namespace=GLOBAL_NAMESPACE,
)
