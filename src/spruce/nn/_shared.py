"""Shared: tied weights."""

from __future__ import annotations

from typing import Any, Callable

from .. import tree as _tree
from .._module import Module, field
from .._module._surgery import tree_at


class Shared(Module):
    """Several places of a pytree holding the same arrays (tied weights), stored once.

    Args:
      pytree: the tree (e.g. a tuple of layers, ``(embedding, head)``).
      where: ``pytree -> node or tuple of nodes``: the places that are tied copies (as in
        ``spruce.tree_at``); static.
      get: ``pytree -> node or tuple of nodes``: the sources they copy, of the same structure
        and leaf shapes as ``where``'s result (ValueError otherwise); static.

    Field ``pytree`` holds the tree with the ``where`` places replaced by None, so each tied
    array is a leaf once: a gradient of ``shared()`` sums the contributions of every place into
    the source, and an optimizer updates one array.  Calling ``shared()`` returns the tree with
    the sources put back at the ``where`` places.  Follows ``equinox.nn.Shared``.

    >>> import jax, jax.numpy as jnp
    >>> from spruce.nn import Embedding, Linear
    >>> emb, head = Embedding(10, 4, key=jax.random.key(0)), Linear(4, 10, use_bias=False, key=jax.random.key(1))
    >>> shared = Shared((emb, head), lambda t: t[1].weight, lambda t: t[0].weight)
    >>> emb2, head2 = shared()
    >>> head2.weight is emb2.weight, len(jax.tree_util.tree_leaves(shared))
    (True, 1)
    """

    pytree: Any
    where: Callable[[Any], Any] = field(static=True)
    get: Callable[[Any], Any] = field(static=True)

    def __init__(self, pytree: Any, where: Callable[[Any], Any], get: Callable[[Any], Any]) -> None:
        if not callable(where) or not callable(get):
            raise TypeError("Shared(pytree, where, get): where and get must be callables pytree -> node(s)")
        source, target = get(pytree), where(pytree)
        s_leaves, s_def = _tree.flatten(source)
        t_leaves, t_def = _tree.flatten(target)
        if s_def != t_def or [getattr(a, "shape", None) for a in s_leaves] != [getattr(a, "shape", None) for a in t_leaves]:
            raise ValueError(
                f"Shared: where(pytree) and get(pytree) must have the same structure and leaf "
                f"shapes, got {t_def} with shapes {[getattr(a, 'shape', None) for a in t_leaves]} and "
                f"{s_def} with shapes {[getattr(a, 'shape', None) for a in s_leaves]}"
            )
        self.pytree = tree_at(where, pytree, replace_fn=lambda _: None)
        self.where = where
        self.get = get

    def __call__(self) -> Any:
        return tree_at(self.where, self.pytree, self.get(self.pytree))
