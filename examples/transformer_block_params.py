"""The Korean tutorial ("Pytree 가 뭐야?", see examples/README.md): containers as pytrees, tree.map, and the parameter count
of a transformer block.

The tutorial's program, with ``spruce.tree`` in place of ``jax.tree``:

1. arrays, dicts, lists, tuples and nests of them are pytrees (their structures and leaves);
2. ``tree.map`` over one tree (doubling, zeros_like, ones_like) and over two (the update
   ``p - 0.01 * g``, which needs both trees to have the same structure — a mismatch is an
   error that names the place);
3. the transformer block's parameters as a dict of dicts — attention ``W_q W_k W_v W_o``
   (d, d), MLP ``W1`` (d, 4d) and ``W2`` (4d, d), two layer norms ``gamma`` / ``beta`` (d,) —
   its zero gradient, and the tutorial's count ``sum(x.size for x in tree.leaves(block_params))``
   printed as ``params: {n_params:,}``.  By hand: 4d² + 8d² + 4d = 12d² + 4d.
4. the same count per subtree with ``spruce.summary``, and the same block written as a
   ``spruce.Module`` from ``spruce.nn`` layers — built with ``jax.eval_shape``, so nothing is
   allocated or compiled — which has the same number of parameters.

The tutorial does not fix ``d``; this script uses d = 64 and also prints 512 and 768.

Run: ``PYTHONPATH=src python examples/transformer_block_params.py`` (about 2 s).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as random

import spruce
import spruce.nn as nn
import spruce.tree as tree


def block_params(d: int) -> dict[str, dict[str, jax.Array]]:
    """The tutorial's transformer block parameters for model width ``d`` (float32)."""
    return {
        "attention": {
            "W_q": jnp.zeros((d, d)),
            "W_k": jnp.zeros((d, d)),
            "W_v": jnp.zeros((d, d)),
            "W_o": jnp.zeros((d, d)),
        },
        "mlp": {
            "W1": jnp.zeros((d, 4 * d)),
            "W2": jnp.zeros((4 * d, d)),
        },
        "ln1": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
        "ln2": {"gamma": jnp.ones(d), "beta": jnp.zeros(d)},
    }


def count_params(params: Any) -> int:
    """The tutorial's count: the total size of the leaves."""
    return sum(x.size for x in tree.leaves(params))


class Block(spruce.Module):
    """The same block's parameters from spruce.nn layers: bias-free attention projections and
    MLP, and two LayerNorms (weight = gamma, bias = beta).  Layer weights are (out, in):
    ``mlp_in.weight`` is W1 transposed.  (Only the parameters matter here; no forward pass.)"""

    attention: nn.MultiheadAttention
    mlp_in: nn.Linear
    mlp_out: nn.Linear
    ln1: nn.LayerNorm
    ln2: nn.LayerNorm

    def __init__(self, d: int, num_heads: int, *, key: jax.Array) -> None:
        k_att, k_in, k_out = random.split(key, 3)
        self.attention = nn.MultiheadAttention(d, num_heads, bias=False, key=k_att)
        self.mlp_in = nn.Linear(d, 4 * d, use_bias=False, key=k_in)
        self.mlp_out = nn.Linear(4 * d, d, use_bias=False, key=k_out)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    section("containers are pytrees")
    a = jnp.array([1, 2, 3])
    params = {"W": jnp.zeros((3, 4)), "b": jnp.zeros((4,))}
    weights = [jnp.zeros((3, 4)), jnp.zeros((4, 2))]
    state = (jnp.zeros(()), jnp.zeros((10,)))
    deep = {
        "encoder": [jnp.zeros((3, 8)), jnp.zeros((8, 4))],
        "decoder": [jnp.zeros((4, 8)), jnp.zeros((8, 3))],
        "stats": (jnp.array(0), jnp.array(0.0)),
    }
    for name, value in [("a", a), ("params", params), ("weights", weights), ("state", state), ("deep", deep)]:
        print(f"{name:8s} {tree.structure(value)}")
    print("deep leaves:", ", ".join(f"{tree.keystr(p)} {list(x.shape)}" for p, x in tree.leaves_with_path(deep)))

    section("tree.map over one tree")
    doubled = tree.map(lambda x: x * 2, params)
    zeros = tree.map(jnp.zeros_like, params)
    ones = tree.map(jnp.ones_like, params)
    for name, value in [("doubled", doubled), ("zeros", zeros), ("ones", ones)]:
        shapes = {k: list(v.shape) for k, v in value.items()}
        sums = {k: float(v.sum()) for k, v in value.items()}
        print(f"{name:8s} shapes {shapes} sums {sums}")

    section("tree.map over two trees: p - 0.01 * g")
    grads = {"W": jnp.ones((3, 4)), "b": jnp.ones((4,))}
    new_params = tree.map(lambda p, g: p - 0.01 * g, params, grads)
    for k, v in new_params.items():
        print(f"new_params[{k!r}]: shape {list(v.shape)}, all entries == 0 - 0.01 * 1: {bool(jnp.all(v == -0.01))}")
    try:
        tree.map(lambda p, g: p - 0.01 * g, params, {"W": jnp.ones((3, 4))})
    except ValueError as e:
        print("structures differ -> ValueError:", str(e).splitlines()[0])

    section("transformer block (d = 64)")
    d = 64
    bp = block_params(d)
    zero_grads = tree.map(jnp.zeros_like, bp)
    print("zero_grads has the structure of block_params:", tree.structure(zero_grads) == tree.structure(bp))
    print(tree.structure(bp))
    n_params = count_params(bp)
    print(f"params: {n_params:,}")
    print(f"by hand, 12*d**2 + 4*d = {12 * d * d + 4 * d:,}")

    section("spruce.summary(block_params)")
    print(spruce.summary(bp))

    section("other widths (shapes only: jax.eval_shape allocates nothing)")
    for d in (512, 768):
        shapes = jax.eval_shape(partial(block_params, d))
        print(f"d = {d}: params: {count_params(shapes):,} (by hand {12 * d * d + 4 * d:,})")

    section("the same block as a spruce.Module (d = 64, 4 heads), built with jax.eval_shape")
    # eval_shape runs __init__ on abstract values: the Module's leaves are ShapeDtypeStructs
    # (shape and dtype, no data), which is all a parameter count needs.
    block = jax.eval_shape(lambda k: Block(64, 4, key=k), random.PRNGKey(0))
    print(spruce.pformat(block.mlp_in))
    children, _ = tree.flatten_one_level_with_path(block)
    for key, child in children:
        print(f"{tree.keystr((key,)):12s} {type(child).__name__:20s} {count_params(child):>8,}")
    print(f"params: {count_params(block):,}")

if __name__ == "__main__":
    main()
