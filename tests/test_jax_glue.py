"""Where spruce meets JAX: behaviour a JAX user relies on, checked against JAX itself.

Each test runs the same input through ``jax.tree_util`` (the oracle) and spruce where both have
the function, so a change in either shows here.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.tree_util as jtu
import pytest

import spruce.tree as st
import spruce.tree_util as stu


def _add3(a: Any, b: Any, c: Any = 0) -> Any:
    return a + b + c


# ------------------------------------------------------------------- Partial of a partial


@pytest.mark.parametrize("inner_kind", ["functools", "jax", "spruce"])
def test_partial_of_a_partial_keeps_it_as_func(inner_kind: str) -> None:
    make = {"functools": functools.partial, "jax": jtu.Partial, "spruce": stu.Partial}[inner_kind]
    inner = make(_add3, 1)
    ours, theirs = stu.Partial(inner, 2), jtu.Partial(inner, 2)
    # JAX's .func is a wrapper that compares and hashes as the partial; spruce's is the partial.
    assert theirs.func == inner and ours.func == inner and inner == ours.func
    assert ours.func is inner
    assert hash(ours.func) == hash(theirs.func) == hash(inner)
    assert ours.args == theirs.args == (2,)
    assert ours(3) == theirs(3) == 6
    assert st.leaves(ours) == jtu.tree_leaves(theirs) == [2]
    # node data compares through the wrapper: equal for the same inner partial only
    assert st.structure(ours) == st.structure(stu.Partial(inner, 5))
    assert st.structure(ours) != st.structure(stu.Partial(make(_add3, 1), 2))
    rebuilt = st.map(lambda v: v * 10, ours)
    assert type(rebuilt) is stu.Partial and rebuilt.func is inner and rebuilt(3) == 24


def test_partial_func_of_a_plain_function_is_unchanged() -> None:
    p = stu.Partial(_add3, 1, c=4)
    assert p.func is _add3 and p.args == (1,) and p.keywords == {"c": 4}
    assert p(2) == 7 and st.leaves(p) == jtu.tree_leaves(jtu.Partial(_add3, 1, c=4)) == [1, 4]


# ------------------------------------------------------------------------- static fields


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"default": 3},
        {"metadata": {"doc": "d"}},
        {"metadata": {"static": False}},
        {"metadata": {"static": False, "doc": "d"}, "default": 1},
        {"metadata": None},
    ],
    ids=["plain", "default", "other-metadata", "static-false", "static-false-and-more", "none"],
)
def test_static_metadata_as_jax(kwargs: dict[str, Any]) -> None:
    ours = st.static(**dict(kwargs))
    theirs = jax.tree.static(**dict(kwargs))
    assert dict(ours.metadata) == dict(theirs.metadata)
    assert ours.default == theirs.default


def test_static_false_metadata_makes_a_data_field() -> None:
    @dataclasses.dataclass
    class Box:
        a: Any
        b: Any = st.static(default=0, metadata={"static": False})
        c: Any = st.static(default="c")

    st.register_dataclass(Box)
    try:
        assert st.leaves(Box(1, 2)) == [1, 2]
        assert st.structure(Box(1, 2)).node_data()[1] == ("c",)
    finally:
        st.unregister(Box)


# -------------------------------------------- errors a JAX user's except clause must catch


@pytest.mark.parametrize("result", [5, (1, 2, 3), "ab"], ids=["int", "triple", "str"])
def test_flatten_returning_a_non_pair_is_caught_as_jax_would(result: Any) -> None:
    class PairlessJ:  # a fresh class per case: JAX has no unregister
        pass

    class PairlessS:
        pass

    jtu.register_pytree_node(PairlessJ, lambda _: result, lambda aux, children: PairlessJ())
    st.register_pytree_node(PairlessS, lambda _: result, lambda aux, children: PairlessS())
    try:
        with pytest.raises(Exception) as jax_err:
            jtu.tree_flatten(PairlessJ())
        assert jax_err.type is ValueError
        with pytest.raises(ValueError, match="PairlessS must return a pair") as ours:
            st.flatten(PairlessS())
        assert isinstance(ours.value, TypeError)  # spruce's own class for it, as before
    finally:
        st.unregister(PairlessS)


def _transpose_cases() -> list[Any]:
    return [
        ([0, 0], (0, 0), [(1, 2), (3,)]),
        ([0, 0], (0, 0), [1, 2, 3]),
        ([0, 0], (0, 0), [(1, 2), (3, 4), (5, 6)]),
    ]


@pytest.mark.parametrize("outer,inner,tree", _transpose_cases(), ids=["short-inner", "flat", "long-outer"])
def test_transpose_mismatch_is_caught_as_jax_would(outer: Any, inner: Any, tree: Any) -> None:
    with pytest.raises(Exception) as jax_err:
        jtu.tree_transpose(jtu.tree_structure(outer), jtu.tree_structure(inner), tree)
    assert jax_err.type is TypeError
    with pytest.raises(TypeError, match="transpose: .* does not match the structure at key path") as ours:
        stu.tree_transpose(stu.tree_structure(outer), stu.tree_structure(inner), tree)
    assert isinstance(ours.value, ValueError)  # spruce's class for a mismatch, as before


@pytest.mark.parametrize(
    "fields", [(None, None), (["a"], None), (None, ["a"])], ids=["inferred", "data-only", "meta-only"]
)
def test_register_dataclass_bad_fields_is_caught_as_jax_would(fields: tuple[Any, Any]) -> None:
    class Plain:
        pass

    with pytest.raises(Exception) as jax_err:
        jtu.register_dataclass(Plain, *fields)
    with pytest.raises(jax_err.type, match="register_dataclass") as ours:
        st.register_dataclass(Plain, *fields)
    assert isinstance(ours.value, ValueError)
    assert not st.is_tree_node(Plain)
