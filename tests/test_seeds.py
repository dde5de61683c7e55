"""The programs of the two pytree tutorials spruce is specified against (described in
examples/README.md), run with spruce in place of JAX.

The English tutorial (tests named ``*_002_*``) uses ``jax.tree_util``; here ``spruce.tree_util``.
The Korean tutorial (tests named ``*_000_*``) uses ``jax.tree``; here ``spruce.tree``.
Printed structures must match the tutorials character for character; numbers are the ones the
tutorials print (float32), re-typed here as arrays.
"""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from functools import partial
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import spruce.tree as tree_api
import spruce.tree_util as tree_util

# --------------------------------------------------------------- 002: structures & leaves

x = jnp.array([1, 2, 3])


def test_002_trivial_structures() -> None:
    assert repr(tree_util.tree_structure(x)) == "PyTreeDef(*)"
    assert repr(tree_util.tree_structure((1, x, "hello"))) == "PyTreeDef((*, *, *))"
    assert repr(tree_util.tree_structure([1, x, "hello"])) == "PyTreeDef([*, *, *])"
    tree = {"a": 1, "b": x, "c": "hello"}
    assert repr(tree_util.tree_structure(tree)) == "PyTreeDef({'a': *, 'b': *, 'c': *})"


NESTED = {
    "tree1": {"a": 1, "b": x, "c": "hello"},
    "tree2": {"a": 1, "b": (x, x, x), "c": "hello"},
}
NESTED_REPR = (
    "PyTreeDef({'tree1': {'a': *, 'b': *, 'c': *}, 'tree2': {'a': *, 'b': (*, *, *), 'c': *}})"
)


def test_002_nested_structure_leaves_flatten_unflatten() -> None:
    assert repr(tree_util.tree_structure(NESTED)) == NESTED_REPR
    leaves = tree_util.tree_leaves(NESTED)
    expected = [1, x, "hello", 1, x, x, x, "hello"]
    assert len(leaves) == len(expected)
    assert all(a is b for a, b in zip(leaves, expected))

    flat_values, tree_type = tree_util.tree_flatten(NESTED)
    assert all(a is b for a, b in zip(flat_values, expected))
    assert repr(tree_type) == NESTED_REPR
    assert str(tree_type) == NESTED_REPR

    rebuilt = tree_util.tree_unflatten(tree_type, flat_values)
    assert list(rebuilt) == ["tree1", "tree2"]
    assert rebuilt["tree1"]["b"] is x
    assert len(rebuilt["tree2"]["b"]) == 3 and all(a is x for a in rebuilt["tree2"]["b"])
    assert type(rebuilt["tree2"]["b"]) is tuple
    assert rebuilt["tree1"]["c"] == "hello" and rebuilt["tree2"]["a"] == 1


# ------------------------------------------------------- 002: parameters, SGD, reduce

f32 = partial(np.array, dtype=np.float32)

PARAMS = {
    "layer1": {
        "W": f32([[-0.11168969, 0.58439565, 1.437887], [0.533231, -1.0117726, -2.316002]]),
        "b": f32([-1.5917008, -0.9385306]),
    },
    "layer2": {
        "W": f32([[0.43686673, -0.5115205]]),
        "b": f32([0.6714109]),
    },
}
GRADS = {
    "layer1": {
        "W": f32([[-0.11328071, -0.06153299, 0.23609458], [0.04657721, -0.01834877, 0.02984624]]),
        "b": f32([0.2492916, -0.12900007]),
    },
    "layer2": {
        "W": f32([[-0.47350553, -1.016762]]),
        "b": f32([1.0130714]),
    },
}
NEW_PARAMS = {
    "layer1": {
        "W": f32([[-0.10036162, 0.59054893, 1.4142776], [0.5285733, -1.0099378, -2.3189864]]),
        "b": f32([-1.61663, -0.9256306]),
    },
    "layer2": {
        "W": f32([[0.4842173, -0.4098443]]),
        "b": f32([0.57010376]),
    },
}
PARAMS_SQUARED = {
    "layer1": {
        "W": f32([[0.01247459, 0.34151828, 2.067519], [0.28433532, 1.0236839, 5.363865]]),
        "b": f32([2.5335114, 0.8808397]),
    },
    "layer2": {
        "W": f32([[0.19085254, 0.2616532]]),
        "b": f32([0.4507926]),
    },
}


def _assert_close_trees(got: Any, want: Any, **tol: float) -> None:
    assert repr(tree_util.tree_structure(got)) == repr(tree_util.tree_structure(want))
    for g, w in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want)):
        assert g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g), w, **tol)


@pytest.mark.parametrize("as_jax", [False, True], ids=["numpy", "jax"])
def test_002_sgd_step_with_tree_map(as_jax: bool) -> None:
    conv = jnp.asarray if as_jax else (lambda a: a)
    params = tree_util.tree_map(conv, PARAMS)
    g = tree_util.tree_map(conv, GRADS)
    new_params = tree_util.tree_map(lambda x, g: x - 0.1 * g, params, g)
    assert list(new_params) == ["layer1", "layer2"]
    assert list(new_params["layer1"]) == ["W", "b"]
    _assert_close_trees(new_params, NEW_PARAMS, atol=1e-6, rtol=0)


@pytest.mark.parametrize("as_jax", [False, True], ids=["numpy", "jax"])
def test_002_square_and_tree_reduce(as_jax: bool) -> None:
    conv = jnp.asarray if as_jax else (lambda a: a)
    params = tree_util.tree_map(conv, PARAMS)
    params_2 = tree_util.tree_map(lambda x: x**2, params)
    _assert_close_trees(params_2, PARAMS_SQUARED, rtol=1e-6, atol=0)
    total = tree_util.tree_reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), params_2, 0.0)
    np.testing.assert_allclose(float(total), 13.411046, rtol=1e-6)


def test_002_leaf_order_of_params() -> None:
    leaves = tree_util.tree_leaves(PARAMS)
    expected = [PARAMS["layer1"]["W"], PARAMS["layer1"]["b"], PARAMS["layer2"]["W"], PARAMS["layer2"]["b"]]
    assert all(a is b for a, b in zip(leaves, expected)) and len(leaves) == 4
    assert repr(tree_util.tree_structure(PARAMS)) == (
        "PyTreeDef({'layer1': {'W': *, 'b': *}, 'layer2': {'W': *, 'b': *}})"
    )


# ------------------------------------------------------------------- 002: named tuples

NNParameters = namedtuple("NNParameters", ["layer1", "layer2"])
LayerParameters = namedtuple("LayerParameters", ["W", "b"])

NT_PARAMS = NNParameters(
    LayerParameters(W=PARAMS["layer1"]["W"], b=PARAMS["layer1"]["b"]),
    LayerParameters(W=PARAMS["layer2"]["W"], b=PARAMS["layer2"]["b"]),
)


def test_002_namedtuple_structure() -> None:
    assert repr(tree_util.tree_structure(NT_PARAMS)) == (
        "PyTreeDef(CustomNode(namedtuple[NNParameters], [CustomNode(namedtuple[LayerParameters],"
        " [*, *]), CustomNode(namedtuple[LayerParameters], [*, *])]))"
    )


def test_002_namedtuple_tree_map_and_reduce() -> None:
    squared = tree_util.tree_map(lambda x: x**2, NT_PARAMS)
    assert type(squared) is NNParameters and type(squared.layer1) is LayerParameters
    np.testing.assert_allclose(squared.layer1.W, PARAMS_SQUARED["layer1"]["W"], rtol=1e-6)
    np.testing.assert_allclose(squared.layer2.b, PARAMS_SQUARED["layer2"]["b"], rtol=1e-6)
    total = tree_util.tree_reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), squared, 0.0)
    np.testing.assert_allclose(float(total), 13.411046, rtol=1e-6)
    assert [tree_util.keystr(p) for p, _ in tree_util.tree_leaves_with_path(NT_PARAMS)] == [
        ".layer1.W",
        ".layer1.b",
        ".layer2.W",
        ".layer2.b",
    ]


# ---------------------------------------- 002: an Equinox-style module (flatten_one_level)
# The tutorial's Equinox module flattens with node data holding (dynamic field names, static
# field names, static field values), printed as the three parts joined by ", ".


class ModuleMeta(tuple):  # type: ignore[type-arg]
    """Hashable node data printed like Equinox's: the parts without the enclosing brackets."""

    def __repr__(self) -> str:
        return ", ".join(repr(part) for part in self)

    __str__ = __repr__


class Linear:
    def __init__(self, weight: Any, bias: Any, in_features: int, out_features: int) -> None:
        self.weight, self.bias = weight, bias
        self.in_features, self.out_features, self.use_bias = in_features, out_features, True


class SimpleNN:
    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers


tree_util.register_pytree_node(
    Linear,
    lambda m: (
        (m.weight, m.bias),
        ModuleMeta((("weight", "bias"), ("in_features", "out_features", "use_bias"),
                    (m.in_features, m.out_features, m.use_bias))),
    ),
    lambda aux, ch: Linear(ch[0], ch[1], aux[2][0], aux[2][1]),
)  # fmt: skip
tree_util.register_pytree_node(
    SimpleNN,
    lambda m: ((m.layers,), ModuleMeta((("layers",), (), ()))),
    lambda aux, ch: SimpleNN(ch[0]),
)

MODEL = SimpleNN(
    [
        Linear(
            f32([[-0.48662117, 0.08805605, 0.25260752], [0.55680007, -0.21773158, -0.5048137]]),
            f32([-0.04204372, -0.52129227]),
            3,
            2,
        ),
        Linear(f32([[-0.42024657, -0.18588884]]), f32([-0.30617577]), 2, 1),
    ]
)


def test_002_module_structure() -> None:
    assert repr(tree_util.tree_structure(MODEL)) == (
        "PyTreeDef(CustomNode(SimpleNN[('layers',), (), ()], [[CustomNode(Linear[('weight',"
        " 'bias'), ('in_features', 'out_features', 'use_bias'), (3, 2, True)], [*, *]),"
        " CustomNode(Linear[('weight', 'bias'), ('in_features', 'out_features', 'use_bias'),"
        " (2, 1, True)], [*, *])]]))"
    )
    leaves = tree_util.tree_leaves(MODEL)
    assert [leaf.shape for leaf in leaves] == [(2, 3), (2,), (1, 2), (1,)]
    assert leaves[0] is MODEL.layers[0].weight and leaves[3] is MODEL.layers[1].bias


def test_002_flatten_one_level_of_module() -> None:
    children, treedef = tree_api.flatten_one_level(MODEL)
    assert len(children) == 1 and children[0] is MODEL.layers
    assert repr(treedef) == "PyTreeDef(CustomNode(SimpleNN[('layers',), (), ()], [*]))"


def test_002_l2_norm_of_module() -> None:
    total = tree_util.tree_reduce(
        lambda x, y: jnp.sum(x) + jnp.sum(y), tree_util.tree_map(lambda x: x**2, MODEL), 0.0
    )
    # by hand from the printed leaves
    by_hand = sum(float(np.sum(leaf.astype(np.float64) ** 2)) for leaf in tree_util.tree_leaves(MODEL))
    np.testing.assert_allclose(float(total), by_hand, rtol=1e-6)
    np.testing.assert_allclose(float(total), 1.4990535, rtol=1e-5)


# -------------------------------------------------------------- 000 (Korean tutorial)


def test_000_containers() -> None:
    params = {"W": jnp.zeros((3, 4)), "b": jnp.zeros((4,))}
    weights = [jnp.zeros((3, 4)), jnp.zeros((4, 2))]
    state = (jnp.zeros(()), jnp.zeros((10,)))
    deep = {
        "encoder": [jnp.zeros((3, 8)), jnp.zeros((8, 4))],
        "decoder": [jnp.zeros((4, 8)), jnp.zeros((8, 3))],
        "stats": (jnp.array(0), jnp.array(0.0)),
    }
    assert repr(tree_api.structure(jnp.array([1, 2, 3]))) == "PyTreeDef(*)"
    assert repr(tree_api.structure(params)) == "PyTreeDef({'W': *, 'b': *})"
    assert repr(tree_api.structure(weights)) == "PyTreeDef([*, *])"
    assert repr(tree_api.structure(state)) == "PyTreeDef((*, *))"
    assert repr(tree_api.structure(deep)) == (
        "PyTreeDef({'decoder': [*, *], 'encoder': [*, *], 'stats': (*, *)})"
    )
    assert [leaf.shape for leaf in tree_api.leaves(deep)] == [
        (4, 8), (8, 3), (3, 8), (8, 4), (), (),
    ]  # fmt: skip


def test_000_tree_map() -> None:
    params = {"W": jnp.zeros((3, 4)), "b": jnp.zeros((4,))}
    doubled = tree_api.map(lambda x: x * 2, params)
    assert {k: v.shape for k, v in doubled.items()} == {"W": (3, 4), "b": (4,)}
    assert all(float(jnp.abs(v).sum()) == 0.0 for v in doubled.values())
    zeros = tree_api.map(jnp.zeros_like, params)
    ones = tree_api.map(jnp.ones_like, params)
    assert float(ones["W"].sum()) == 12.0 and float(zeros["b"].sum()) == 0.0
    assert ones["b"].shape == (4,)

    grads = {"W": jnp.ones((3, 4)), "b": jnp.ones((4,))}
    new_params = tree_api.map(lambda p, g: p - 0.01 * g, params, grads)
    np.testing.assert_allclose(np.asarray(new_params["W"]), np.full((3, 4), -0.01), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_params["b"]), np.full((4,), -0.01), rtol=1e-6)

    # "두 pytree 의 구조가 같아야 함": a mismatched structure is an error
    with pytest.raises(ValueError):
        tree_api.map(lambda p, g: p - 0.01 * g, params, {"W": jnp.ones((3, 4))})


def _block_params(d: int) -> dict[str, Any]:
    return {
        "attention": {
            "W_q": jnp.zeros((d, d)),
            "W_k": jnp.zeros((d, d)),
            "W_v": jnp.zeros((d, d)),
            "W_o": jnp.zeros((d, d)),
        },
        "mlp": {"W1": jnp.zeros((d, 4 * d)), "W2": jnp.zeros((4 * d, d))},
        "ln1": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
        "ln2": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
    }


# By hand: attention 4·d², mlp 2·4·d², two layer norms 2·2·d  =>  12·d² + 4·d.
@pytest.mark.parametrize("d,printed", [(8, "params: 800"), (64, "params: 49,408")])
def test_000_transformer_block_param_count(d: int, printed: str, capsys: Any) -> None:
    block_params = _block_params(d)
    zero_grads = tree_api.map(jnp.zeros_like, block_params)
    assert tree_api.structure(zero_grads) == tree_api.structure(block_params)
    n_params = sum(x.size for x in tree_api.leaves(block_params))
    print(f"params: {n_params:,}")
    assert capsys.readouterr().out == printed + "\n"
    assert len(tree_api.leaves(block_params)) == 10


@dataclasses.dataclass
class _DataclassParams:  # "@dataclass (등록 후)": a dataclass is a pytree once registered
    W: Any
    b: Any


tree_api.register_dataclass(_DataclassParams)


def test_000_registered_dataclass_and_none() -> None:
    p = _DataclassParams(W=jnp.zeros((2,)), b=None)
    assert repr(tree_api.structure(p)) == "PyTreeDef(CustomNode(_DataclassParams[()], [*, None]))"
    out = tree_api.map(lambda a: a + 1, p)
    assert out.b is None and float(out.W.sum()) == 2.0
