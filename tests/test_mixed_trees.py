"""The model layer on trees mixing spruce Modules with classes registered only with JAX.

An Equinox Module (``eqx.nn.Linear``) and a flax-struct-style dataclass (registered with
``jax.tree_util.register_dataclass`` only) inside a spruce Module are handled exactly as spruce
Modules are: each function is run on the mixed tree and on the same tree built from spruce
Modules only, and must give the same leaves, paths and values.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import spruce
import spruce.io as sio
import spruce.jax as sj
import spruce.tree as st


@jtu.register_dataclass
@dataclasses.dataclass
class Head:
    """flax.struct-style: a dataclass registered with JAX only."""

    kernel: Any
    bias: Any
    features: int = dataclasses.field(default=2, metadata={"static": True})


class SpruceLinear(spruce.Module):
    weight: Any
    bias: Any

    def __call__(self, x: Any) -> Any:
        return self.weight @ x + self.bias


class SpruceHead(spruce.Module):
    kernel: Any
    bias: Any
    features: int = spruce.field(static=True, default=2)


class Block(spruce.Module):
    lin: Any
    head: Any
    scale: Any
    name: str = spruce.field(static=True, default="blk")


W = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
B = np.array([0.5, -0.5], np.float32)
K = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
HB = np.array([0.1, 0.2], np.float32)


def eqx_linear() -> eqx.nn.Linear:
    lin = eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(0))
    lin = eqx.tree_at(lambda m: m.weight, lin, jnp.asarray(W))
    return eqx.tree_at(lambda m: m.bias, lin, jnp.asarray(B))


def mixed() -> Block:
    return Block(eqx_linear(), Head(jnp.asarray(K), jnp.asarray(HB)), jnp.array(1.5))


def native() -> Block:
    return Block(SpruceLinear(jnp.asarray(W), jnp.asarray(B)), SpruceHead(jnp.asarray(K), jnp.asarray(HB)), jnp.array(1.5))


PATHS = [".lin.weight", ".lin.bias", ".head.kernel", ".head.bias", ".scale"]


def loss(m: Block, x: Any) -> Any:
    return jnp.sum(m.lin(x)) * m.scale + jnp.sum(m.head.kernel @ x[:2] + m.head.bias)


def paths(tree: Any) -> list[str]:
    return [st.keystr(p) for p, _ in st.leaves_with_path(tree)]


def test_filter_partition_combine() -> None:
    for m in (mixed(), native()):
        arrays = spruce.filter(m, spruce.is_array)
        assert paths(arrays) == PATHS
        dyn, static = spruce.partition(m, lambda x: spruce.is_array(x) and x.ndim == 2)
        kept = [st.keystr(p) for p, v in st.leaves_with_path(dyn, none_is_leaf=True) if v is not None]
        assert kept == [".lin.weight", ".head.kernel"]
        assert type(dyn.lin) is type(m.lin) and type(dyn.head) is type(m.head)
        assert dyn.lin.bias is None and static.lin.weight is None
        back = spruce.combine(dyn, static)
        assert spruce.tree_equal(back, m)
        assert back.lin.weight is m.lin.weight


def test_tree_at_and_tree_equal() -> None:
    for m in (mixed(), native()):
        new = spruce.tree_at(lambda t: (t.lin.weight, t.head.kernel), m, (jnp.zeros((2, 3)), jnp.ones((2, 2))))
        assert type(new.lin) is type(m.lin) and type(new.head) is type(m.head)
        np.testing.assert_array_equal(new.lin.weight, np.zeros((2, 3)))
        np.testing.assert_array_equal(new.head.kernel, np.ones((2, 2)))
        assert new.head.bias is m.head.bias
        assert not spruce.tree_equal(new, m)
        assert spruce.tree_equal(m, mixed() if type(m.lin) is eqx.nn.Linear else native())


def test_summary_counts_every_array() -> None:
    rows_mixed = [(r.path, r.arrays, r.params, r.bytes) for r in spruce.summary(mixed()).rows]
    rows_native = [(r.path, r.arrays, r.params, r.bytes) for r in spruce.summary(native()).rows]
    assert rows_mixed == rows_native
    assert rows_mixed[:3] == [("", 5, 15, 60), (".lin", 2, 8, 32), (".lin.weight", 1, 6, 24)]
    assert [r[0] for r in rows_mixed] == ["", ".lin", *PATHS[:2], ".head", *PATHS[2:]]
    assert [r.type_name for r in spruce.summary(mixed()).rows][1::3] == ["Linear", "Head", "f32[]"]


@pytest.mark.parametrize("make", [mixed, native])
def test_filter_jit_traces_once_for_same_shapes(make: Callable[[], Any]) -> None:
    traces: list[int] = []

    @sj.filter_jit
    def f(m: Block, x: Any) -> Any:
        traces.append(1)
        return loss(m, x)

    m = make()
    x = jnp.ones(3)
    first = f(m, x)
    m2 = spruce.tree_at(lambda t: t.head.kernel, m, jnp.zeros((2, 2)))
    second = f(m2, x)
    assert len(traces) == 1
    np.testing.assert_allclose(first, loss(m, x), rtol=1e-6)
    np.testing.assert_allclose(second, loss(m2, x), rtol=1e-6)


def test_filter_grad_and_value_and_grad_reach_foreign_nodes() -> None:
    x = jnp.array([1.0, 2.0, 3.0])
    g_mixed = sj.filter_grad(loss)(mixed(), x)
    g_native = sj.filter_grad(loss)(native(), x)
    assert type(g_mixed.lin) is eqx.nn.Linear and type(g_mixed.head) is Head
    for a, b in zip(st.leaves(g_mixed), st.leaves(g_native)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(g_mixed.lin.weight, np.full((2, 3), 1.5) * np.array([1.0, 2.0, 3.0]), rtol=1e-6)
    np.testing.assert_allclose(g_mixed.head.kernel, [[1.0, 2.0], [1.0, 2.0]], rtol=1e-6)
    (v1, g1), (v2, g2) = (sj.filter_value_and_grad(loss)(m, x) for m in (mixed(), native()))
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    assert paths(g1) == paths(g2) == PATHS


def test_filter_vmap_over_inputs() -> None:
    xs = jnp.arange(12.0).reshape(4, 3)
    out_mixed = sj.filter_vmap(lambda m, x: m.lin(x), in_axes=(None, 0))(mixed(), xs)
    out_native = sj.filter_vmap(lambda m, x: m.lin(x), in_axes=(None, 0))(native(), xs)
    assert out_mixed.shape == (4, 2)
    np.testing.assert_allclose(out_mixed, out_native, rtol=1e-6)
    # a batch of foreign nodes, mapped over their arrays
    heads = Head(jnp.ones((5, 2, 2)), jnp.zeros((5, 2)))
    out = sj.filter_vmap(lambda h: h.kernel.sum() + h.bias.sum())(heads)
    np.testing.assert_allclose(out, np.full(5, 4.0))


def test_save_and_load_like(tmp_path: Any) -> None:
    for i, m in enumerate((mixed(), native())):
        path = os.path.join(tmp_path, f"m{i}.safetensors")
        sio.save(path, m)
        back = sio.load(path, like=m)
        assert type(back.lin) is type(m.lin) and type(back.head) is type(m.head)
        assert paths(back) == PATHS
        assert spruce.tree_equal(back, m)


def test_optax_update_through_jax_jit() -> None:
    optax = pytest.importorskip("optax")
    m = mixed()
    opt = optax.sgd(0.1)
    state = opt.init(spruce.filter(m, spruce.is_inexact_array))

    @jax.jit
    def step(m: Block, state: Any, x: Any) -> Any:
        grads = jax.grad(loss)(m, x)
        updates, state = opt.update(grads, state)
        return optax.apply_updates(m, updates), state

    x = jnp.ones(3)
    new, _ = step(m, state, x)
    assert type(new.lin) is eqx.nn.Linear and type(new.head) is Head
    np.testing.assert_allclose(new.lin.weight, W - 0.1 * 1.5, rtol=1e-6)
    np.testing.assert_allclose(new.head.kernel, K - 0.1, rtol=1e-6)
