"""Filters (is_array..., filter, partition, combine), tree_at, tree_equal and summary."""

from __future__ import annotations

from collections import OrderedDict, deque, namedtuple
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
    # a Sequential keys its layers by position
    assert [st.keystr(p) for p, _ in st.leaves_with_path(new)][2] == "[1].layers[0].weight"


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
        spruce.tree_at(lambda m: m.in_features + 0, lin, 5)  # a computed value
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


class _Branch:
    """A registered node whose flatten / unflatten calls are counted (tree_at cost tests)."""

    flattens = 0
    unflattens = 0

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values


def _branch_flatten(b: _Branch) -> tuple[tuple[Any, ...], None]:
    _Branch.flattens += 1
    return b.values, None


def _branch_unflatten(_: None, children: Any) -> _Branch:
    _Branch.unflattens += 1
    return _Branch(tuple(children))


st.register_pytree_node(_Branch, _branch_flatten, _branch_unflatten)


def test_tree_at_cost_is_proportional_to_the_path() -> None:
    # 100 branches of 100 leaves: 10,000 leaves.  Replacing one leaf takes apart the root list
    # and the one branch on the path, and rebuilds that branch and the root: no other branch is
    # flattened or rebuilt.
    tree = [_Branch(tuple(float(100 * i + j) for j in range(100))) for i in range(100)]
    _Branch.flattens = _Branch.unflattens = 0
    new = spruce.tree_at(lambda t: t[37].values[5], tree, -1.0)
    assert (_Branch.flattens, _Branch.unflattens) == (1, 2)  # expand once; stand-in + rebuild
    assert new[37].values[5] == -1.0 and new[37].values[4] == 3704.0 and tree[37].values[5] == 3705.0
    assert all(new[i] is tree[i] for i in range(100) if i != 37)  # shared, not copied
    _Branch.flattens = _Branch.unflattens = 0
    new = spruce.tree_at(lambda t: (t[2].values[0], t[99].values[99]), tree, replace_fn=lambda v: v + 0.5)
    assert (_Branch.flattens, _Branch.unflattens) == (2, 4)
    assert (new[2].values[0], new[99].values[99]) == (200.5, 9999.5)
    # a deep chain: only the nodes on the path are visited
    deep: Any = "leaf"
    for _ in range(50):
        deep = _Branch((deep, _Branch(tuple(range(10)))))
    _Branch.flattens = 0
    out = spruce.tree_at(lambda t: t.values[0].values[0].values[1].values[3], deep, "x")
    assert _Branch.flattens == 4 and out.values[0].values[0].values[1].values == (0, 1, 2, "x", 4, 5, 6, 7, 8, 9)
    assert out.values[1] is deep.values[1]


def test_tree_at_where_may_flatten_iterate_and_check_types() -> None:
    k1, k2 = jax.random.split(KEY)
    seq = nn.Sequential([nn.Linear(2, 3, key=k1), nn.Lambda(jnp.tanh), nn.Linear(3, 1, key=k2)])
    # spruce.tree.leaves / jax.tree_util.tree_leaves inside where see every leaf as a place
    zeros = spruce.tree_at(lambda s: st.leaves(s), seq, replace_fn=jnp.zeros_like)
    assert all(float(jnp.sum(jnp.abs(x))) == 0.0 for x in st.leaves(zeros))
    assert type(zeros.layers[1]) is nn.Lambda and zeros.layers[1].fn is jnp.tanh
    halves = spruce.tree_at(lambda s: jax.tree_util.tree_leaves(s), seq, replace_fn=lambda x: x / 2)
    np.testing.assert_allclose(halves.layers[2].weight, seq.layers[2].weight / 2)
    # iteration, len and isinstance (a place reports the class of the node it stands for)
    biases = spruce.tree_at(
        lambda s: [layer.bias for layer in s.layers if isinstance(layer, nn.Linear)], seq, replace_fn=lambda b: b + 1
    )
    np.testing.assert_allclose(biases.layers[0].bias, seq.layers[0].bias + 1)
    np.testing.assert_allclose(biases.layers[2].bias, seq.layers[2].bias + 1)
    last = spruce.tree_at(lambda s: s.layers[len(s.layers) - 1], seq, nn.Identity())
    assert type(last.layers[2]) is nn.Identity and last.layers[0] is seq.layers[0]
    # a method that returns the node itself names that node's place
    class Holder(spruce.Module):
        inner: Any

        def me(self) -> Any:
            return self

    h = Pair(Holder([1, 2]), 3)
    assert spruce.tree_at(lambda p: p.a.me(), h, "swapped").a == "swapped"


def test_tree_at_more_positions_dicts_root_and_is_leaf() -> None:
    # interned empty tuples and None at different places are different places
    tree = ((), (), [None, None])
    assert spruce.tree_at(lambda t: (t[1], t[2][0]), tree, ("a", "b")) == ((), "a", ["b", None])
    # dicts keep their insertion order; deque, OrderedDict and namedtuple nodes are rebuilt
    d = {"z": {"y": 1, "x": 2}, "a": deque([1, (2, 3)])}
    out = spruce.tree_at(lambda t: (t["z"]["x"], t["a"][1][0]), d, ("X", "two"))
    assert out == {"z": {"y": 1, "x": "X"}, "a": deque([1, ("two", 3)])}
    assert list(out) == ["z", "a"] and list(out["z"]) == ["y", "x"]
    od = OrderedDict(b=1, a=2)
    assert spruce.tree_at(lambda t: t["a"], od, 0) == OrderedDict(b=1, a=0)
    # the root itself, and a leaf root
    assert spruce.tree_at(lambda t: t, [1, 2], "root") == "root"
    assert spruce.tree_at(lambda t: t, 5, replace_fn=lambda v: v + 1) == 6
    assert spruce.tree_at(lambda t: t, None, 0) == 0
    # is_leaf: an accepted subtree is a place, but where cannot look into it
    pairs = [[1, 2], [3, [4, 5]]]
    two = lambda x: isinstance(x, list) and len(x) == 2 and all(type(v) is int for v in x)
    assert spruce.tree_at(lambda t: t[1][1], pairs, "p", is_leaf=two) == [[1, 2], [3, "p"]]
    with pytest.raises(TypeError) as info:
        spruce.tree_at(lambda t: t[0][0], pairs, "p", is_leaf=two)
    assert "placeholders" in "".join(getattr(info.value, "__notes__", []))
    with pytest.raises(AttributeError, match="leaf of type float"):
        spruce.tree_at(lambda t: t[0].real, [1.5], 0)
    # a replaced place may be a node of any structure, and a node may replace a leaf
    assert spruce.tree_at(lambda t: t[0], [1, 2], {"k": (1, 2)}) == [{"k": (1, 2)}, 2]


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
    with pytest.raises(
        AssertionError, match=r"leaf \[1\]\.weight of tree 1 differs from tree 0: values differ at index \(1, 0\)"
    ):
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


def test_summary_counts_a_model_built_with_eval_shape_like_the_real_one() -> None:
    # Counting a model's parameters without allocating it: the leaves are jax.ShapeDtypeStruct.
    make = lambda: nn.MLP(64, 10, 128, 3, key=jax.random.key(0))
    shapes, real = jax.eval_shape(make), make()
    assert type(shapes.layers[0].weight) is jax.ShapeDtypeStruct
    n = (64 * 128 + 128) + 2 * (128 * 128 + 128) + (128 * 10 + 10)
    assert n == 42_634
    for max_depth in (0, 2, None):
        s = spruce.summary(shapes, max_depth=max_depth)
        assert (s.params, s.bytes, s.arrays) == (42_634, 170_536, 8)
        assert s.rows == spruce.summary(real, max_depth=max_depth).rows
    rows = {r.path: r for r in spruce.summary(shapes, max_depth=None).rows}
    assert rows[".layers[0].weight"] == spruce.SummaryRow(".layers[0].weight", 3, "f32[128,64]", 1, 8192, 32_768)
    assert rows[".layers[3]"].params == 1290 and rows[".layers[3]"].bytes == 5160
    assert "f32[128,64]" in spruce.pformat(shapes)  # the same leaf names as pformat


def test_summary_counts_shape_and_dtype_leaves_of_every_kind() -> None:
    import ml_dtypes

    key = jax.random.key(1)
    tree = {
        "bf16": jax.ShapeDtypeStruct((3, 5), jnp.bfloat16),  # 15 elements, 2 bytes each
        "f8": np.zeros((2, 4), ml_dtypes.float8_e4m3fn),  # 8, 1
        "i4": np.zeros(6, ml_dtypes.int4),  # 6, 1 (numpy's itemsize)
        "i32": jnp.zeros((2, 2), jnp.int32),  # 4, 4
        "np_scalar": np.float64(1.0),  # 1, 8
        "empty": jax.ShapeDtypeStruct((0, 7), jnp.float32),  # 0, 0 (still an array leaf)
        "key": key,  # 1 element of 8 bytes (key<fry>)
        "key_shape": jax.eval_shape(lambda: key),  # the same, abstract
    }
    s = spruce.summary(tree)
    got = {r.path: (r.type_name, r.arrays, r.params, r.bytes) for r in s.rows[1:]}
    assert got == {
        "['bf16']": ("bf16[3,5]", 1, 15, 30),
        "['f8']": ("float8_e4m3fn[2,4](numpy)", 1, 8, 8),
        "['i4']": ("i4[6](numpy)", 1, 6, 6),
        "['i32']": ("i32[2,2]", 1, 4, 16),
        "['np_scalar']": ("f64[](numpy)", 1, 1, 8),
        "['empty']": ("f32[0,7]", 1, 0, 0),
        "['key']": ("key<fry>[]", 1, 1, 8),
        "['key_shape']": ("key<fry>[]", 1, 1, 8),
    }
    assert (s.arrays, s.params, s.bytes) == (8, 36, 84)


class _Shaped:
    """A leaf with ``shape`` and ``dtype`` attributes given as they are."""

    def __init__(self, shape: Any, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype


class _OtherDtype:
    itemsize = 4  # has an itemsize, but is neither a numpy dtype nor one JAX knows


def test_summary_leaves_non_array_leaves_at_zero() -> None:
    f32 = np.dtype(np.float32)
    tree = {
        "int": 1,
        "float": 0.5,
        "bool": True,
        "str": "relu",
        "fn": abs,
        "none": None,
        "np_class": np.float32,  # a class has .shape / .dtype descriptors, not values
        "no_dtype": _Shaped((2, 3), None),
        "str_dtype": _Shaped((2, 3), "float32"),
        "other_dtype": _Shaped((2, 3), _OtherDtype()),
        "list_shape": _Shaped([2, 3], f32),
        "symbolic": _Shaped((2, "n"), f32),
        "bool_dim": _Shaped((True, 3), f32),
        "negative": _Shaped((-1, 3), f32),
        "duck": _Shaped((2, 3), f32),  # counted: an int-tuple shape and a numpy dtype
    }
    s = spruce.summary(tree)
    rows = {r.path: r for r in s.rows}
    assert "['none']" not in rows  # None is an empty place: no row
    zero = [p for p, r in rows.items() if p and (r.arrays, r.params, r.bytes) == (0, 0, 0)]
    assert len(zero) == len(tree) - 2
    assert rows["['int']"].type_name == "int" and rows["['fn']"].type_name == "builtin_function_or_method"
    assert rows["['np_class']"].type_name == "type" and rows["['no_dtype']"].type_name == "_Shaped"
    assert rows["['duck']"] == spruce.SummaryRow("['duck']", 1, "f32[2,3]", 1, 6, 24)
    assert (s.arrays, s.params, s.bytes) == (1, 6, 24)


def test_summary_counts_tracers_inside_a_transform() -> None:
    params = {"W": jnp.zeros((3, 4)), "b": jnp.zeros(4, jnp.bfloat16)}
    seen: list[tuple[int, int, int]] = []

    def f(p: Any) -> Any:
        s = spruce.summary(p)
        seen.append((s.arrays, s.params, s.bytes))
        return p

    jax.jit(f)(params)
    s = spruce.summary(params)
    assert seen == [(s.arrays, s.params, s.bytes)] == [(2, 16, 56)]
