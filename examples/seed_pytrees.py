"""The two tutorials' pytree examples (examples/README.md), run with spruce in place of
jax.tree_util / jax.tree.

Arrays come from numpy (the engine needs nothing else); the structures, leaf orders and
reductions are the ones the tutorials print.  Run: ``python examples/seed_pytrees.py``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

import spruce
import spruce.tree as tree
import spruce.tree_util as tree_util


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    print(f"spruce {spruce.__version__} (compiled engine: {spruce.__compiled__})")

    section("Structures (the English tutorial)")
    x = np.array([1, 2, 3], dtype=np.int32)
    print(tree_util.tree_structure(x))
    print(tree_util.tree_structure((1, x, "hello")))
    print(tree_util.tree_structure([1, x, "hello"]))
    print(tree_util.tree_structure({"a": 1, "b": x, "c": "hello"}))
    nested = {
        "tree1": {"a": 1, "b": x, "c": "hello"},
        "tree2": {"a": 1, "b": (x, x, x), "c": "hello"},
    }
    flat_values, tree_type = tree_util.tree_flatten(nested)
    print(tree_type)
    print(f"{len(flat_values)} leaves:", [type(v).__name__ for v in flat_values])
    rebuilt = tree_util.tree_unflatten(tree_type, flat_values)
    print("unflatten gives the same structure back:", tree_util.tree_structure(rebuilt) == tree_type)

    section("Neural network parameters as a dict")
    rng = np.random.default_rng(0)
    params = {
        "layer1": {"W": rng.normal(size=(2, 3)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)},
        "layer2": {"W": rng.normal(size=(1, 2)).astype(np.float32), "b": rng.normal(size=(1,)).astype(np.float32)},
    }
    grads = tree.map(np.ones_like, params)
    new_params = tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    print("SGD step keeps the structure:", tree.structure(new_params) == tree.structure(params))
    squares = tree_util.tree_map(lambda v: v**2, params)
    l2 = tree_util.tree_reduce(lambda a, b: np.sum(a) + np.sum(b), squares, 0.0)
    print(f"L2 norm via tree_reduce: {float(l2):.6f} (direct: {sum(float(np.sum(v**2)) for v in tree.leaves(params)):.6f})")
    for path, leaf in tree.leaves_with_path(params):
        print(f"  {tree.keystr(path):18s} {leaf.dtype}{list(leaf.shape)}")

    section("Named tuples")
    NNParameters = namedtuple("NNParameters", ["layer1", "layer2"])
    LayerParameters = namedtuple("LayerParameters", ["W", "b"])
    nt_params = NNParameters(
        LayerParameters(W=params["layer1"]["W"], b=params["layer1"]["b"]),
        LayerParameters(W=params["layer2"]["W"], b=params["layer2"]["b"]),
    )
    print(tree_util.tree_structure(nt_params))

    section("Transformer block parameters (the Korean tutorial)")
    d = 64
    block_params = {
        "attention": {"W_q": np.zeros((d, d)), "W_k": np.zeros((d, d)), "W_v": np.zeros((d, d)), "W_o": np.zeros((d, d))},
        "mlp": {"W1": np.zeros((d, 4 * d)), "W2": np.zeros((4 * d, d))},
        "ln1": {"gamma": np.ones(d), "beta": np.zeros(d)},
        "ln2": {"gamma": np.ones(d), "beta": np.zeros(d)},
    }
    zero_grads = tree.map(np.zeros_like, block_params)
    n_params = sum(v.size for v in tree.leaves(block_params))
    print(tree.structure(zero_grads))
    print(f"params: {n_params:,}")


if __name__ == "__main__":
    main()
