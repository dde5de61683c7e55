"""Differential truth for the JAX bridge: random trees mixing the built-in kinds, classes
registered only with spruce and classes registered only with JAX (Equinox Modules included),
through spruce.tree and jax.tree_util: the same leaves, key paths (keystr), structure strings,
counts, and rebuilt trees.

The deliberate differences of spruce from JAX are tested on their own elsewhere (the corpus and
``test_differential.py``: dict rebuild order, deques, struct sequences, mixed-type dict keys),
and so the strategies here hold none of those kinds.  The bridge adds two, each tested below:
a class unregistered from spruce is a leaf in spruce and an error in JAX; and a class registered
with spruce's ``register_dataclass`` is rebuilt without ``__init__`` on both sides (JAX rebuilds
it through spruce), while a class registered with JAX's is rebuilt through ``__init__`` on
both sides.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from typing import Any

import equinox as eqx
import hypothesis.strategies as hs
import jax.tree_util as jtu
import pytest
from hypothesis import given

import spruce
import spruce.tree as st
import spruce.tree_util as stu
from helpers import assert_leaves_equal

BNT = namedtuple("BNT", ["left", "right"])

# ------------------------------------------------------------------------ spruce-side classes


class SMod(spruce.Module):
    a: Any
    b: Any
    tag: str = spruce.field(static=True, default="s")


@st.register_dataclass
@dataclasses.dataclass
class SData:
    p: Any
    q: Any
    meta: str = st.static(default="m")


class SKeyed:
    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v


st.register_pytree_with_keys(
    SKeyed, lambda x: ([(st.DictKey("u"), x.u), (st.SequenceKey(1), x.v)], 3), lambda aux, ch: SKeyed(*ch)
)


class SPlain:
    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v


st.register_pytree_node(SPlain, lambda x: ((x.u, x.v), None), lambda aux, ch: SPlain(*ch))

# --------------------------------------------------------------------------- JAX-side classes


@jtu.register_dataclass
@dataclasses.dataclass
class JData:
    x: Any
    y: Any
    op: str = dataclasses.field(default="add", metadata={"static": True})


class JKeyed:
    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v


jtu.register_pytree_with_keys(
    JKeyed, lambda x: (((jtu.GetAttrKey("u"), x.u), (jtu.DictKey(0), x.v)), "k"), lambda aux, ch: JKeyed(*ch)
)


class JPlain:
    def __init__(self, u: Any, v: Any) -> None:
        self.u, self.v = u, v


jtu.register_pytree_node(JPlain, lambda x: ((x.u, x.v), 5), lambda aux, ch: JPlain(*ch))


class EMod(eqx.Module):
    w: Any
    v: Any
    size: int = eqx.field(static=True, default=1)


# ------------------------------------------------------------------------------- strategies

LEAVES = hs.one_of(hs.integers(-10, 10), hs.text(alphabet="xyz", max_size=2), hs.floats(allow_nan=False, width=32))
BASE = hs.one_of(LEAVES, hs.none(), hs.just(()), hs.just([]), hs.just({}))
KEYS = hs.text(alphabet="abcz", min_size=1, max_size=2)


def _kinds(inner: Any) -> Any:
    pair = hs.tuples(inner, inner)
    return hs.one_of(
        hs.lists(inner, max_size=3),
        hs.lists(inner, max_size=3).map(tuple),
        hs.dictionaries(KEYS, inner, max_size=3),
        hs.dictionaries(KEYS, inner, max_size=3).map(OrderedDict),
        pair.map(lambda t: BNT(*t)),
        # registered with spruce only
        hs.tuples(inner, inner, hs.sampled_from(["s", "t"])).map(lambda t: SMod(*t)),
        pair.map(lambda t: SData(*t)),
        pair.map(lambda t: SKeyed(*t)),
        pair.map(lambda t: SPlain(*t)),
        inner.map(lambda c: stu.Partial(divmod, c)),
        # registered with JAX only
        hs.tuples(inner, inner, hs.sampled_from(["add", "mul"])).map(lambda t: JData(*t)),
        pair.map(lambda t: JKeyed(*t)),
        pair.map(lambda t: JPlain(*t)),
        pair.map(lambda t: EMod(*t)),
        inner.map(lambda c: jtu.Partial(divmod, c)),
    )


TREES = hs.recursive(BASE, _kinds, max_leaves=20)


def _keystrs(pairs: list[Any]) -> list[str]:
    return [jtu.keystr(tuple(p)) for p, _ in pairs]


@given(TREES)
def test_leaves_paths_structure_agree(tree: Any) -> None:
    leaves, treedef = st.flatten(tree)
    jleaves, jtreedef = jtu.tree_flatten(tree)
    assert_leaves_equal(leaves, jleaves)
    assert repr(treedef) == repr(jtreedef)
    assert (treedef.num_leaves, treedef.num_nodes) == (jtreedef.num_leaves, jtreedef.num_nodes)
    pairs = st.leaves_with_path(tree)
    jpairs = jtu.tree_leaves_with_path(tree)
    assert [st.keystr(p) for p, _ in pairs] == _keystrs(jpairs)
    assert [p for p, _ in pairs] == [p for p, _ in jpairs]  # entry by entry, across libraries
    assert_leaves_equal([x for _, x in pairs], [x for _, x in jpairs])


@given(TREES)
def test_rebuilt_trees_agree(tree: Any) -> None:
    counter = iter(range(10_000))
    ours = st.map(lambda x: next(counter), tree)
    counter = iter(range(10_000))
    theirs = jtu.tree_map(lambda x: next(counter), tree)
    assert repr(st.structure(ours)) == repr(jtu.tree_structure(theirs))
    assert st.leaves(ours) == jtu.tree_leaves(theirs)
    # each library rebuilds from the other's leaves into the same structure
    leaves = jtu.tree_leaves(theirs)
    assert repr(jtu.tree_structure(st.structure(tree).unflatten(leaves))) == repr(jtu.tree_structure(tree))
    assert repr(st.structure(jtu.tree_structure(tree).unflatten(leaves))) == repr(st.structure(tree))


# -------------------------------------------------------------- the bridge's deliberate differences


def test_unregistered_class_is_a_leaf_in_spruce_and_an_error_in_jax() -> None:
    class Dropped:
        def __init__(self, a: Any) -> None:
            self.a = a

    st.register_pytree_node(Dropped, lambda x: ((x.a,), None), lambda aux, ch: Dropped(*ch))
    st.unregister(Dropped)
    d = Dropped(1)
    assert st.leaves([d]) == [d]
    with pytest.raises(TypeError, match=r"spruce\.tree\.unregister"):
        jtu.tree_leaves([d])


def test_dataclass_rebuild_follows_the_registering_library() -> None:
    calls: list[str] = []

    @dataclasses.dataclass
    class ViaSpruce:
        a: Any

        def __post_init__(self) -> None:
            calls.append("spruce-registered")

    @dataclasses.dataclass
    class ViaJax:
        a: Any

        def __post_init__(self) -> None:
            calls.append("jax-registered")

    st.register_dataclass(ViaSpruce)
    jtu.register_dataclass(ViaJax)
    tree = [ViaSpruce(1), ViaJax(2)]
    calls.clear()
    st.map(lambda x: x, tree)
    assert calls == ["jax-registered"]
    calls.clear()
    jtu.tree_map(lambda x: x, tree)
    assert calls == ["jax-registered"]
