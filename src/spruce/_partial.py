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
    data: its own bound arguments are not merged into this one's children, and ``.func`` is
    that partial itself (JAX's ``.func`` is a wrapper that compares equal to it; spruce's is
    the same object).

    >>> import spruce.tree as st
    >>> p = Partial(divmod, 7)
    >>> st.leaves(p), p(2)
    ([7], (3, 1))
    >>> inner = Partial(divmod, 7)
    >>> outer = Partial(inner, 2)
    >>> st.leaves(outer), outer.func is inner, outer()
    ([2], True, (3, 1))
    """

    def __new__(cls, func: Any, /, *args: Any, **keywords: Any) -> "Partial":
        if isinstance(func, functools.partial):
            # functools.partial would flatten a nested partial into one argument list.
            func = _WholePartial(func)
        return super().__new__(cls, func, *args, **keywords)

    @property
    def func(self) -> Any:  # overrides functools.partial.func, a read-only slot
        """The wrapped function (a partial passed to the constructor is returned as it was)."""
        f = super().func
        return f.partial if type(f) is _WholePartial else f


class _WholePartial:
    """A partial hidden from functools.partial's flattening; called, it calls the partial.

    Only ``Partial.func`` (which unwraps it) and ``repr`` show it; it compares and hashes as the
    partial it holds, so node data compares the same either way.
    """

    __slots__ = ("partial",)

    def __init__(self, partial: functools.partial[Any]) -> None:
        self.partial = partial

    def __call__(self, *args: Any, **keywords: Any) -> Any:
        return self.partial(*args, **keywords)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _WholePartial):
            other = other.partial
        return bool(self.partial == other)

    def __hash__(self) -> int:
        return hash(self.partial)

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

    Takes the arguments of ``dataclasses.field`` and adds ``'static': True`` to ``metadata``,
    which ``register_dataclass`` (with fields inferred) and spruce Modules read.  As in JAX, the
    caller's own ``metadata`` wins: ``static(metadata={'static': False})`` is not static.

    >>> import dataclasses
    >>> f = static(default='add')
    >>> f.metadata['static'], f.default
    (True, 'add')
    """
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)
