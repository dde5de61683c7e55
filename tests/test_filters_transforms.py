"""spruce.jax: filter_jit / filter_grad / filter_value_and_grad / filter_vmap."""

from __future__ import annotations

import copy
from collections import OrderedDict, deque, namedtuple
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
import spruce
import spruce.nn as nn
import spruce.tree as st
from spruce.jax import _split, filter_grad, filter_jit, filter_value_and_grad, filter_vmap

KEY = jax.random.PRNGKey(0)


class Scaled(spruce.Module):
    w: jax.Array
    act: Callable[[jax.Array], jax.Array]  # a function as a leaf (not static): filter_jit copes
    label: str

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(self.w * x)


def test_filter_jit_traces_arrays_and_keeps_the_rest_static() -> None:
    traces: list[Any] = []

    @filter_jit
    def f(m: Scaled, x: Any, n: int) -> Any:
        traces.append(n)
        return m(x) * n, m.label, m

    m = Scaled(jnp.ones(3), jnp.tanh, "a")
    y, label, m2 = f(m, jnp.full(3, 0.5), 2)
    np.testing.assert_allclose(y, 2 * np.tanh(0.5), rtol=1e-6)
    assert label == "a" and type(m2) is Scaled and m2.act is jnp.tanh and m2.label == "a"
    f(m, jnp.full(3, 0.7), 2)
    assert traces == [2]  # same structure and static values: cached, no retrace
    f(m, jnp.full(3, 0.7), 3)
    f(spruce.tree_at(lambda s: s.label, m, "b"), jnp.full(3, 0.7), 3)
    assert traces == [2, 3, 3]
    # NumPy arrays are traced too
    np.testing.assert_allclose(f(m, np.full(3, 0.5, np.float32), 2)[0], y, rtol=1e-6)


def test_filter_jit_does_not_block() -> None:
    x = jnp.eye(256) * 0.5

    @filter_jit
    def slow(x: jax.Array, steps: int) -> jax.Array:
        return jax.lax.fori_loop(0, steps, lambda i, a: jnp.tanh(a @ a + 1.0), x)

    slow(x, 400).block_until_ready()  # compile
    out = slow(x, 400)
    assert not out.is_ready(), "filter_jit waited for the computation (async dispatch lost)"
    out.block_until_ready()
    assert out.is_ready()


def test_filter_jit_as_method_and_with_kwargs() -> None:
    class Model(spruce.Module):
        lin: nn.Linear

        @filter_jit
        def __call__(self, x: jax.Array, *, scale: float = 1.0) -> jax.Array:
            return self.lin(x) * scale

    m = Model(nn.Linear(2, 2, key=KEY))
    np.testing.assert_allclose(m(jnp.ones(2), scale=2.0), 2 * m.lin(jnp.ones(2)), rtol=1e-6)


def test_filter_jit_unhashable_static_error() -> None:
    class Opaque:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"must be hashable.*Opaque"):
        filter_jit(lambda o: 1)(Opaque())
    with pytest.raises(TypeError, match="expected a function"):
        filter_jit(3)  # type: ignore[arg-type]


def test_filter_grad_differentiates_inexact_arrays_only() -> None:
    class Mixed(spruce.Module):
        w: jax.Array
        steps: jax.Array  # integer array: not differentiated
        act: Callable[[jax.Array], jax.Array]

    m = Mixed(jnp.array([1.0, 2.0]), jnp.array(3), jnp.sin)

    def loss(m: Mixed, x: jax.Array) -> jax.Array:
        return jnp.sum(m.act(m.w * x)) * m.steps

    g = filter_grad(loss)(m, 2.0)
    assert type(g) is Mixed and g.steps is None and g.act is None
    np.testing.assert_allclose(g.w, 3 * 2.0 * np.cos(np.array([2.0, 4.0])), rtol=1e-6)
    v, g2 = filter_value_and_grad(loss)(m, 2.0)
    np.testing.assert_allclose(v, 3 * (np.sin(2.0) + np.sin(4.0)), rtol=1e-6)
    spruce.assert_tree_equal(g, g2, rtol=helpers.FLOAT_RTOL, atol=helpers.FLOAT_ATOL)  # two XLA programs
    (v, aux), _ = filter_value_and_grad(lambda m: (jnp.sum(m.w), "aux"), has_aux=True)(m)
    assert aux == "aux" and float(v) == 3.0


def test_filter_vmap() -> None:
    mlp = nn.MLP(3, 2, 4, 1, key=KEY)
    xs = jnp.arange(15.0).reshape(5, 3)
    out = filter_vmap(lambda m, x: m(x), in_axes=(None, 0))(mlp, xs)
    np.testing.assert_allclose(out, jax.vmap(mlp)(xs), rtol=1e-6)
    # a batch of modules: the function-valued static leaves are simply not mapped
    k1, k2 = jax.random.split(KEY)
    stacked = spruce.tree.map(lambda a, b: jnp.stack([a, b]), nn.MLP(3, 2, 4, 1, key=k1), nn.MLP(3, 2, 4, 1, key=k2))
    assert filter_vmap(lambda m, x: m(x), in_axes=(0, None))(stacked, xs[0]).shape == (2, 2)
    with pytest.raises(ValueError, match="in_axes has 1 entries for 2 arguments"):
        filter_vmap(lambda m, x: m(x), in_axes=(0,))(mlp, xs)


# ------------------------------------------------------------------ filter_jit: the per-call walk


def _walk(tree: Any) -> tuple[list[Any], list[Any]]:
    key: list[Any] = []
    dyn: list[Any] = []
    _split._walk(tree, key, dyn)
    return key, dyn


def _with_arrays(tree: Any) -> Any:
    """The tree with every float / ndarray leaf made a (traced) NumPy array."""
    return st.map(lambda x: np.asarray(x, np.float32) if isinstance(x, (float, np.ndarray)) else x, tree)


@pytest.mark.parametrize("case", helpers.cases())
def test_walk_finds_the_array_leaves_in_flatten_order(case: Any) -> None:
    tree = _with_arrays(case.tree)
    key, dyn = _walk(tree)
    arrays = [x for x in st.leaves(tree) if spruce.is_array(x)]
    assert len(dyn) == len(arrays) and all(a is b for a, b in zip(dyn, arrays))
    assert _walk(tree)[0] == key  # deterministic
    assert _walk(copy.deepcopy(tree))[0] == key or any(
        not isinstance(x, (int, str, type(None), np.ndarray)) for x in st.leaves(tree)
    )  # a copy has an equal key (unless a leaf compares by identity)


def test_walk_keys_are_unambiguous_over_the_corpus() -> None:
    # Equal keys must mean equal structure and equal static leaves (same types): the cache
    # never hands one compiled function arguments of another structure.
    trees = [_with_arrays(c.tree) for c in helpers.CASES]
    trees += [(t, None) for t in trees[:8]] + [[t] for t in trees[:8]] + [{"k": t} for t in trees[:8]]
    trees += [Scaled(jnp.ones(2), jnp.tanh, "a"), Scaled(jnp.ones(2), jnp.tanh, "b"), (1,), (1.0,), (True,)]
    walked = [_walk(t)[0] for t in trees]
    for i, (a, ka) in enumerate(zip(trees, walked)):
        statics_a = [(type(x), x) for x in st.leaves(a) if not spruce.is_array(x)]
        for b, kb in zip(trees[i + 1 :], walked[i + 1 :]):
            if ka == kb:
                statics_b = [(type(x), x) for x in st.leaves(b) if not spruce.is_array(x)]
                assert st.structure(a) == st.structure(b) and statics_a == statics_b, (a, b)


# ------------------------------------------------------------------ filter_jit: behaviour


def _traces(fun: Callable[..., Any]) -> tuple[Callable[..., Any], list[Any]]:
    log: list[Any] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        log.append(1)
        return fun(*args, **kwargs)

    return filter_jit(counted), log


def test_filter_jit_cache_keys_on_structure_and_typed_static_leaves() -> None:
    f, log = _traces(lambda x, n: x * n)
    x = jnp.ones(2)
    assert [float(f(x, n)[0]) for n in (2, 2, 2.0, True, 3)] == [2.0, 2.0, 2.0, 1.0, 3.0]
    assert len(log) == 4  # 2 / 2.0 / True are different static leaves; the repeat is cached
    assert type(f(x, 2.0)[0].item()) is float and len(log) == 4
    # structure: a list, a tuple, a dict in another insertion order, keyword arguments
    g, glog = _traces(lambda t, **kw: st.map(lambda v: v * 2, (t, kw)))
    out = g({"b": x, "a": 3.0}, scale=x)
    assert list(out[0]) == ["b", "a"] and out[0]["a"] == 6.0 and float(out[1]["scale"][0]) == 2.0
    g({"a": 3.0, "b": x}, scale=x)
    g([x, x])
    g((x, x))
    g((x, x), scale=x)
    g((x, x), other=x)
    assert len(glog) == 6
    g((jnp.zeros(2), x), other=jnp.zeros(2))
    assert len(glog) == 6  # new array values, same shapes: cached


def test_filter_jit_node_kinds_outputs_and_numpy_inputs() -> None:
    P = namedtuple("P", ["a", "b"])

    @filter_jit
    def f(t: Any) -> Any:
        return t  # every kind of node and leaf comes back as it went in, arrays as jax arrays

    x = np.arange(3.0, dtype=np.float32)
    tree = {
        "nt": P(x, "s"),
        "od": OrderedDict(z=x, a=1),
        "dq": deque([x, None], maxlen=3),
        "box": helpers.Box(x, [2, x], "tag"),
        "params": helpers.PARAMS,
        "mod": nn.Linear(2, 1, key=KEY),
        "fn": jnp.tanh,
        "empty": ((), [], {}),
    }
    out = f(tree)
    assert st.structure(out) == st.structure(tree)
    for a, b in zip(st.leaves(out), st.leaves(tree)):
        if spruce.is_array(b):
            assert isinstance(a, jax.Array)
            np.testing.assert_array_equal(a, b)
        else:
            assert a is b
    assert type(out["nt"]) is P and out["dq"].maxlen == 3 and list(out["od"]) == ["z", "a"]


def test_filter_jit_of_a_module_traces_its_arrays() -> None:
    lin = nn.Linear(3, 2, key=KEY)
    f = filter_jit(lin)
    np.testing.assert_allclose(f(jnp.ones(3)), lin(jnp.ones(3)), rtol=1e-6)
    (call,) = jax.make_jaxpr(lambda x: f(x))(jnp.ones(3)).jaxpr.eqns  # the one jitted call
    assert sorted(v.aval.shape for v in call.invars) == [(2,), (2, 3), (3,)]  # weight is an input


def test_filter_jit_output_static_part_may_depend_on_shapes() -> None:
    f, log = _traces(lambda x: (x.shape[0], x * 2))
    n2, y2 = f(jnp.ones(2))
    n3, y3 = f(jnp.ones(3))  # jax retraces; the output's static part changes
    assert (n2, y2.shape, n3, y3.shape) == (2, (2,), 3, (3,))
    assert f(jnp.ones(2))[0] == 2 and f(jnp.ones(3))[0] == 3 and f(jnp.ones(4))[0] == 4
    # a function whose non-array output changes between two traces of the same shapes
    state = {"n": 0}

    def unstable(x: jax.Array, tag: str) -> Any:
        state["n"] += 1
        return state["n"], x

    g = filter_jit(unstable)
    assert g(jnp.ones(2), "t")[0] == 1
    assert g(jnp.ones(3), "t")[0] == 3  # the retrace (2) differed: retraced per shape (3)
    assert g(jnp.ones(3), "t")[0] == 3 and g(jnp.ones(5), "t")[0] == 4


def test_filter_jit_all_array_arguments() -> None:
    # arguments that are all arrays or None take a direct jax.jit path; results are the same
    f, log = _traces(lambda x, y, z: (x + 1, [y * 2]) if z is None else x)
    x = jnp.ones(2)
    out = f(x, jnp.float32(3), None)
    assert type(out) is tuple and type(out[1]) is list and float(out[1][0]) == 6.0
    f(jnp.zeros(2), jnp.float32(1), None)
    assert len(log) == 1
    np.testing.assert_array_equal(f(x, x, x), x)  # another None pattern: traced again
    assert len(log) == 2
    # an output that needs spruce (a static leaf, a dict) moves the function to the general path
    g, glog = _traces(lambda x: {"n": x.shape[0], "y": x})
    for _ in range(3):
        out = g(x)
        assert out["n"] == 2 and isinstance(out["y"], jax.Array)
    assert len(glog) == 2  # the direct trace, then the general one; cached afterwards
    # and it does not block
    big = jnp.eye(256) * 0.5
    slow = filter_jit(lambda a: jax.lax.fori_loop(0, 400, lambda i, b: jnp.tanh(b @ b + 1.0), a))
    slow(big).block_until_ready()
    out = slow(big)
    assert not out.is_ready(), "filter_jit waited for the computation (async dispatch lost)"
    out.block_until_ready()


def test_filter_jit_under_jit_grad_and_vmap() -> None:
    mlp = nn.MLP(3, 1, 4, 1, key=KEY)
    f = filter_jit(lambda m, x: jnp.sum(m(x)))
    x = jnp.arange(3.0)
    g = jax.grad(lambda m: f(m, x))(mlp)
    g_ref = jax.grad(lambda m: jnp.sum(m(x)))(mlp)
    spruce.assert_tree_equal(g, g_ref, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(lambda x: f(mlp, x))(x), f(mlp, x), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(lambda x: f(mlp, x))(jnp.stack([x, x])), [f(mlp, x)] * 2, rtol=1e-6)


def test_filter_jit_does_not_block_with_module_and_mixed_outputs() -> None:
    m = Scaled(jnp.eye(256) * 0.5, jnp.tanh, "slow")

    @filter_jit
    def slow(m: Scaled, steps: int) -> Any:
        y = jax.lax.fori_loop(0, steps, lambda i, a: m.act(a @ a + 1.0), m.w)
        return {"y": y, "label": m.label, "model": m}

    jax.block_until_ready(slow(m, 400))  # compile
    out = slow(m, 400)
    assert out["label"] == "slow" and out["model"].act is jnp.tanh
    assert not out["y"].is_ready(), "filter_jit waited for the computation (async dispatch lost)"
    jax.block_until_ready(out)


def test_filter_jit_registration_changed_after_first_use() -> None:
    class Late(spruce.Module):
        w: jax.Array

    f = filter_jit(lambda m: m)
    f(Late(jnp.ones(2)))
    st.unregister(Late)  # now a leaf for spruce, but filter_jit already walked it as a node
    try:
        with pytest.raises(RuntimeError, match="registered or unregistered after"):
            f(Late(jnp.ones(3)), 1)
    finally:
        st.register_pytree_with_keys(
            Late,
            lambda m: ([(st.GetAttrKey("w"), m.w)], None),
            lambda _, c: Late(*c),
        )
