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

    >>> import spruce.tree as st
    >>> p = Partial(divmod, 7)
    >>> st.leaves(p), p(2)
    ([7], (3, 1))
    """


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
