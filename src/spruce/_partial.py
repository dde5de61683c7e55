"""``Partial`` and ``static``: small pytree helpers that are ordinary Python (not compiled)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ._tree._registry import register_pytree_node


class Partial(functools.partial):  # type: ignore[type-arg]  # functools.partial is generic in typeshed only
    """A ``functools.partial`` that is a pytree, as jax.tree_util.Partial.

    The wrapped function is node data (so it must be hashable and is not traced by JAX
    transforms); the positional and keyword arguments are children.  Use it to pass a function
    with bound array arguments through ``jax.jit`` or ``spruce.tree.map``.

    As in JAX, a ``functools.partial`` (or Partial) passed as ``func`` is kept whole, as node
    data: its own bound arguments are not merged into this one's children.

    >>> import spruce.tree as st
    >>> p = Partial(divmod, 7)
    >>> st.leaves(p), p(2)
    ([7], (3, 1))
    >>> st.leaves(Partial(Partial(divmod, 7), 2))
    [2]
    """

    def __new__(cls, func: Any, /, *args: Any, **keywords: Any) -> "Partial":
        if isinstance(func, functools.partial):
            # functools.partial would flatten a nested partial into one argument list.
            func = _WholePartial(func)
        return super().__new__(cls, func, *args, **keywords)


class _WholePartial:
    """A partial hidden from functools.partial's flattening; called, it calls the partial."""

    __slots__ = ("partial",)

    def __init__(self, partial: functools.partial[Any]) -> None:
        self.partial = partial

    def __call__(self, *args: Any, **keywords: Any) -> Any:
        return self.partial(*args, **keywords)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _WholePartial) and self.partial is other.partial

    def __hash__(self) -> int:
        return id(self.partial)

    def __repr__(self) -> str:
        return repr(self.partial)


def _flatten_partial(p: Partial) -> tuple[tuple[Any, Any], Any]:
    return (p.args, p.keywords), p.func


def _unflatten_partial(func: Any, children: Any) -> Partial:
    args, keywords = children
    return Partial(func, *args, **keywords)


register_pytree_node(Partial, _flatten_partial, _unflatten_partial)


def static(**kwargs: Any) -> Any:
    """A ``dataclasses.field`` marked static (node data, not a child), as jax.tree.static.

    Takes the arguments of ``dataclasses.field`` and adds ``metadata={'static': True}``, which
    ``register_dataclass`` (with fields inferred) and spruce Modules read.

    >>> import dataclasses
    >>> f = static(default='add')
    >>> f.metadata['static'], f.default
    (True, 'add')
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)
