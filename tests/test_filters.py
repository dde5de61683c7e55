"""Filters (is_array..., filter, partition, combine), tree_at, tree_equal and summary."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.nn as nn
import spruce.tree as st

KEY = jax.random.PRNGKey(0)


class Pair(spruce.Module):
    a: Any
    b: Any
    name: str = spruce.field(static=True, default="pair")


# ------------------------------------------------------------------ predicates


@pytest.mark.parametrize(
    "x, array, like, inexact",
    [
        (jnp.ones(2), True, True, True),
        (jnp.ones(2, jnp.int32), True, True, False),
        (np.ones(2), True, True, True),
        (np.float32(1), True, True, True),
        (jnp.ones(2, jnp.bfloat16), True, True, True),
        (jnp.ones(2, jnp.complex64), True, True, True),
        (1.0, False, True, False),
        (True, False, True, False),
        ("s", False, False, False),
        (None, False, False, False),
        (jnp.float32, False, False, False),
    ],
    ids=lambda v: type(v).__name__,
)
def test_array_predicates(x: Any, array: bool, like: bool, inexact: bool) -> None:
    assert spruce.is_array(x) is array
    assert spruce.is_array_like(x) is like
    assert spruce.is_inexact_array(x) is inexact


def test_is_array_sees_tracers() -> None:
    seen = []
    jax.jit(lambda x: seen.append((spruce.is_array(x), spruce.is_inexact_array(x))) or x)(jnp.ones(2))
    assert seen == [(True, True)]


# ------------------------------------------------------------------ filter / partition / combine


def test_filter_with_callable_bool_and_prefix_spec() -> None:
    tree = {"w": jnp.ones(2), "n": 3, "s": "x"}
    assert spruce.filter(tree, spruce.is_array) == {"w": tree["w"], "n": None, "s": None}
    assert spruce.filter(tree, spruce.is_array, inverse=True) == {"w": None, "n": 3, "s": "x"}
    assert spruce.filter(tree, True) is not tree and spruce.filter(tree, False) == {"w": None, "n": None, "s": None}
    spec = {"w": False, "n": True, "s": lambda v: v == "x"}
    assert spruce.filter(tree, spec, replace=0) == {"w": 0, "n": 3, "s": "x"}


def test_partition_and_combine_roundtrip_a_module() -> None:
    mlp = nn.MLP(2, 1, 3, 1, key=KEY)
    params, static = spruce.partition(mlp, spruce.is_inexact_array)
    assert all(spruce.is_inexact_array(x) for x in st.leaves(params))
    assert st.leaves(static) == []
    back = spruce.combine(params, static)
    assert type(back) is nn.MLP and spruce.tree_equal(back, mlp)
    mixed = Pair(jnp.ones(2), "label")
    p, s = spruce.partition(mixed, spruce.is_array)
    assert p.b is None and s.a is None and s.b == "label"
    assert spruce.combine(p, s).b == "label"

    # the usual pattern: differentiate only the arrays of a module holding non-arrays
    def loss(p: Any, s: Any) -> Any:
        m = spruce.combine(p, s)
        return jnp.sum(m.a**2)

    g = jax.grad(loss)(p, s)
    np.testing.assert_array_equal(g.a, 2 * np.ones(2))


def test_filter_errors() -> None:
    with pytest.raises(ValueError):
        spruce.filter({"a": 1}, {"b": True})
    with pytest.raises(TypeError, match="must be bools or callables"):
        spruce.filter([1], [3])
    with pytest.raises(TypeError, match="must return a bool"):
        spruce.filter([1], lambda x: 1)
    with pytest.raises(TypeError, match="at least one tree"):
        spruce.combine()
    with pytest.raises(ValueError, match="tree 1 does not have the structure of tree 0"):
        spruce.combine([1, None], [None, 2, 3])


# ------------------------------------------------------------------ tree_at


def test_tree_at_replaces_a_leaf_in_a_module_copy() -> None:
    lin = nn.Linear(3, 2, key=KEY)
    new = spruce.tree_at(lambda m: m.weight, lin, jnp.zeros((2, 3)))
    assert type(new) is nn.Linear and new.bias is lin.bias and new.in_features == 3
    np.testing.assert_array_equal(new.weight, np.zeros((2, 3)))
    assert not np.all(np.asarray(lin.weight) == 0)  # the original is untouched


def test_tree_at_replaces_a_subtree_with_a_different_structure() -> None:
    k1, k2 = jax.random.split(KEY)
    seq = nn.Sequential([nn.Linear(3, 4, key=k1), nn.Linear(4, 2, key=k2)])
    new = spruce.tree_at(lambda s: s.layers[1], seq, nn.MLP(4, 2, 8, 1, key=k2))
    assert type(new.layers[1]) is nn.MLP and new.layers[0] is seq.layers[0]
    assert new(jnp.ones(3)).shape == (2,)
    assert [st.keystr(p) for p, _ in st.leaves_with_path(new)][2] == ".layers[1].layers[0].weight"


def test_tree_at_selects_by_position_not_value() -> None:
    tree = [None, None, (), (), 1, 1]
    assert spruce.tree_at(lambda t: t[1], tree, "x") == [None, "x", (), (), 1, 1]
    assert spruce.tree_at(lambda t: t[3], tree, "y") == [None, None, (), "y", 1, 1]
    assert spruce.tree_at(lambda t: (t[0], t[5]), tree, ("a", "b")) == ["a", None, (), (), 1, "b"]
    shared = jnp.ones(2)
    out = spruce.tree_at(lambda t: t["b"], {"a": shared, "b": shared}, replace_fn=lambda x: x * 3)
    assert out["a"] is shared and float(out["b"][0]) == 3.0


def test_tree_at_replace_fn_and_namedtuple_and_none_field() -> None:
    P = namedtuple("P", ["x", "y"])
    assert spruce.tree_at(lambda p: p.y, P(1, 2), replace_fn=lambda v: v + 10) == P(1, 12)
    lin = nn.Linear(2, 2, use_bias=False, key=KEY)
    with_bias = spruce.tree_at(lambda m: m.bias, lin, jnp.ones(2))
    assert with_bias.bias is not None and st.structure(with_bias).num_leaves == 2


def test_tree_at_errors() -> None:
    lin = nn.Linear(2, 2, key=KEY)
    with pytest.raises(ValueError, match="exactly one of replace"):
        spruce.tree_at(lambda m: m.weight, lin)
    with pytest.raises(ValueError, match="exactly one of replace"):
        spruce.tree_at(lambda m: m.weight, lin, 1, replace_fn=lambda x: x)
    with pytest.raises(ValueError, match="not a node or leaf of the tree"):
        spruce.tree_at(lambda m: m.in_features, lin, 5)  # static field
    with pytest.raises(ValueError, match="not a node or leaf of the tree"):
        spruce.tree_at(lambda m: (m.weight, 5), lin, (1, 2))
    with pytest.raises(TypeError) as info:
        spruce.tree_at(lambda m: m.weight + 1, lin, 5)  # computing, not selecting
    assert "placeholders" in "".join(getattr(info.value, "__notes__", []))
    with pytest.raises(ValueError, match="same place twice"):
        spruce.tree_at(lambda m: (m.weight, m.weight), lin, (1, 2))
    with pytest.raises(ValueError, match="selected 2 places but replace has 1 values"):
        spruce.tree_at(lambda m: (m.weight, m.bias), lin, (1,))
    with pytest.raises(ValueError, match="inside another selected place"):
        spruce.tree_at(lambda t: (t[0], t[0][0]), [[1]], (1, 2))
    with pytest.raises(TypeError, match="where must be a function"):
        spruce.tree_at(3, lin, 1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ tree_equal


def test_tree_equal() -> None:
    a = {"w": jnp.array([1.0, 2.0]), "n": 1}
    assert spruce.tree_equal(a, {"w": jnp.array([1.0, 2.0]), "n": 1})
    assert not spruce.tree_equal(a, {"w": jnp.array([1.0, 2.5]), "n": 1})
    assert spruce.tree_equal(a, {"w": jnp.array([1.0, 2.0 + 1e-6]), "n": 1}, rtol=1e-5)
    assert not spruce.tree_equal(a, {"w": jnp.array([1.0, 2.0], jnp.float16), "n": 1})
    assert not spruce.tree_equal(a, {"w": jnp.array([1.0, 2.0]), "n": 1.0}, typematch=True)
    assert spruce.tree_equal([jnp.array([1.0, jnp.nan])], [jnp.array([1.0, jnp.nan])])
    assert not spruce.tree_equal(Pair(1, 2), Pair(1, 2, name="other"))


def test_assert_tree_equal_names_the_path_and_index() -> None:
    k1, k2 = jax.random.split(KEY)
    m = nn.Sequential([nn.Linear(2, 2, key=k1), nn.Linear(2, 2, key=k2)])
    other = spruce.tree_at(lambda s: s.layers[1].weight, m, replace_fn=lambda w: w.at[1, 0].set(9.0))
    with pytest.raises(AssertionError, match=r"leaf \.layers\[1\]\.weight of tree 1 differs from tree 0: values differ at index \(1, 0\)"):
        spruce.assert_tree_equal(m, other)
    with pytest.raises(AssertionError, match="different structure"):
        spruce.assert_tree_equal([1], [1, 2])
    spruce.assert_tree_equal(m, m)


def test_tree_equal_rejects_tracers() -> None:
    with pytest.raises(TypeError, match="need concrete values but got a JAX tracer"):
        jax.jit(lambda x: spruce.tree_equal(x, x))(jnp.ones(2))


# ------------------------------------------------------------------ summary


def test_summary_counts_the_korean_seeds_block() -> None:
    d = 8
    block = {
        "attention": {k: jnp.zeros((d, d)) for k in ("W_q", "W_k", "W_v", "W_o")},
        "mlp": {"W1": jnp.zeros((d, 4 * d)), "W2": jnp.zeros((4 * d, d))},
        "ln1": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
        "ln2": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
    }
    s = spruce.summary(block)
    n_params = sum(x.size for x in st.leaves(block))
    assert s.params == n_params == 4 * 64 + 2 * 256 + 4 * 8
    assert s.bytes == 4 * n_params and s.arrays == 10
    rows = {r.path: r for r in s.rows}
    assert rows["['attention']"].params == 256 and rows["['mlp']"].params == 512
    assert rows["['attention']['W_q']"].bytes == 256
    assert str(s).splitlines()[0].split() == ["subtree", "params", "bytes"]
    assert "(root)  dict" in str(s)


def test_summary_of_a_module_with_depth_limit() -> None:
    mlp = nn.MLP(3, 1, 4, 1, key=KEY)
    s = spruce.summary(mlp, max_depth=1)
    assert [r.path for r in s.rows] == ["", ".layers"]
    assert s.params == 3 * 4 + 4 + 4 + 1
    with pytest.raises(ValueError):
        spruce.summary(mlp, max_depth=-1)
