"""A spruce PyTreeDef and a jax.tree_util.PyTreeDef: conversions both ways, and == between the
two refusing to give an order-dependent answer."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import jax
import pytest

import spruce
import spruce.tree as st


class Point(NamedTuple):
    x: Any
    y: Any


class Pair(spruce.Module):
    a: Any
    b: Any
    name: str = spruce.field(static=True, default="p")


class JaxOnly:
    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v


jax.tree_util.register_pytree_node(JaxOnly, lambda n: ((n.u, n.v), None), lambda _, ch: JaxOnly(*ch))

TREES = {
    "leaf": 1,
    "none": None,
    "dict": {"b": 1, "a": (2, [3, None])},
    "namedtuple": Point(1, (2, 3)),
    "ordereddict": collections.OrderedDict([("z", 1), ("a", 2)]),
    "module": Pair(1.0, [2.0, 3.0]),
    "jax_only": JaxOnly(1, {"k": 2}),
    "empty": ((), [], {}),
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_from_jax_is_spruce_structure(name: str) -> None:
    tree = TREES[name]
    got = st.from_jax(jax.tree_util.tree_structure(tree))
    assert got == st.structure(tree)
    assert repr(got) == repr(st.structure(tree))


@pytest.mark.parametrize("name", sorted(TREES))
def test_to_jax_is_jax_structure(name: str) -> None:
    tree = TREES[name]
    assert st.structure(tree).to_jax() == jax.tree_util.tree_structure(tree)


@pytest.mark.parametrize("name", sorted(TREES))
def test_round_trip(name: str) -> None:
    td = st.structure(TREES[name])
    assert st.from_jax(td.to_jax()) == td


def test_none_is_leaf_to_jax_keeps_none_positions() -> None:
    tree = {"a": None, "b": 1}
    got = st.structure(tree, none_is_leaf=True).to_jax()
    assert got == jax.tree_util.tree_structure(tree, is_leaf=lambda x: x is None)
    assert got.num_leaves == 2


def test_comparing_with_a_jax_treedef_raises() -> None:
    tree = {"a": 1, "b": (2, 3)}
    with pytest.raises(TypeError, match=r"from_jax\(jax_treedef\) == treedef"):
        st.structure(tree) == jax.tree_util.tree_structure(tree)  # noqa: B015
    with pytest.raises(TypeError, match="to_jax"):
        st.structure(tree) != jax.tree_util.tree_structure(tree)  # noqa: B015
    assert (st.structure(tree) == "not a treedef") is False


def test_from_jax_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match=r"from_jax expects a jax\.tree_util\.PyTreeDef, got"):
        st.from_jax({"a": 1})
    td = st.structure([1])
    assert st.from_jax(td) is td


def test_to_jax_refuses_node_types_jax_does_not_have() -> None:
    """A deque and a struct sequence are nodes in spruce and leaves in JAX: converting would
    give a structure with other leaves, so it raises instead."""
    import time

    for tree in (collections.deque([1, 2]), time.gmtime(0), {"a": [collections.deque([1])]}):
        with pytest.raises(ValueError, match=r"to_jax: JAX sees another structure in the same tree \(\d+ leaves where"):
            st.structure(tree).to_jax()
