"""spruce.nn layers: shapes, dtypes, initialisation, keys, errors; and the numbers the
Equinox tutorial prints (examples/README.md)."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as random
import numpy as np
import pytest

import spruce
import spruce.nn as nn
import spruce.tree as st
from helpers import FLOAT_ATOL, FLOAT_RTOL
from spruce.jax import filter_grad
from test_module import SimpleNN

KEY = random.PRNGKey(0)


@pytest.fixture
def legacy_threefry() -> Iterator[None]:
    """The tutorial was produced with jax_threefry_partitionable=False (the old default)."""
    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", False)
    try:
        yield
    finally:
        jax.config.update("jax_threefry_partitionable", old)


def _seed_data() -> tuple[jax.Array, jax.Array]:
    key = random.PRNGKey(0)
    keys = random.split(key, 4)
    key, subkey = random.split(keys[0])
    xs = random.normal(subkey, (10, 3))
    key, subkey = random.split(key)
    ys = random.normal(subkey, (10,))
    return xs, ys


@pytest.mark.slow
def test_seed_parameters_and_forward_pass_reproduce(legacy_threefry: None) -> None:
    # Numbers printed by the English tutorial ("Equinox - How to actually do this"; see
    # examples/README.md).
    model = SimpleNN(3, 2, 1, random.PRNGKey(314))
    xs, _ = _seed_data()
    leaves = st.leaves(model)
    # Compared with the suite's float tolerance (conftest.py): a different init rule or key
    # split would be off in the first digit.
    close = partial(np.testing.assert_allclose, rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
    close(leaves[0], np.array([[-0.48662117, 0.08805605, 0.25260752], [0.55680007, -0.21773158, -0.5048137]], np.float32))
    close(leaves[1], np.array([-0.04204372, -0.52129227], np.float32))
    close(leaves[2], np.array([[-0.42024657, -0.18588884]], np.float32))
    close(leaves[3], np.array([-0.30617577], np.float32))
    expected = [-0.26482067, -0.17487162, -0.28958413, -0.34640497, -0.10561763,
                -0.12498382, -0.26911202, -0.24482018, -0.36088067, -0.21855468]
    np.testing.assert_allclose(model(xs)[:, 0], np.array(expected, np.float32), rtol=1e-6)
    l2 = st.reduce(lambda x, y: jnp.sum(x) + jnp.sum(y), st.map(lambda x: x**2, model), 0.0)
    np.testing.assert_allclose(float(l2), 1.4990535, rtol=1e-6)


# ------------------------------------------------------------------ Linear


def test_linear_shapes_dtype_and_init_bounds() -> None:
    lin = nn.Linear(64, 5, key=KEY)
    assert lin.weight.shape == (5, 64) and lin.bias is not None and lin.bias.shape == (5,)
    assert lin.weight.dtype == jnp.float32
    lim = 1 / np.sqrt(64)
    assert float(jnp.max(jnp.abs(lin.weight))) <= lim and float(jnp.max(jnp.abs(lin.bias))) <= lim
    assert float(jnp.max(jnp.abs(lin.weight))) > 0.8 * lim  # spread over the whole interval
    x = jnp.arange(64.0)
    np.testing.assert_allclose(lin(x), lin.weight @ x + lin.bias, rtol=1e-5)
    assert lin(x).shape == (5,)


def test_linear_without_bias_scalar_and_dtype() -> None:
    lin = nn.Linear("scalar", "scalar", use_bias=False, dtype=jnp.float16, key=KEY)
    assert lin.bias is None and lin.weight.shape == (1, 1) and lin.weight.dtype == jnp.float16
    y = lin(jnp.array(2.0, jnp.float16))
    assert y.shape == () and float(y) == pytest.approx(2 * float(lin.weight[0, 0]), rel=1e-3)
    assert st.leaves(lin) == [lin.weight]


def test_linear_errors() -> None:
    with pytest.raises(TypeError, match="needs a PRNG key"):
        nn.Linear(2, 3, key=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="in_features must be an int or 'scalar'"):
        nn.Linear(2.5, 3, key=KEY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out_features must be >= 0"):
        nn.Linear(2, -1, key=KEY)
    lin = nn.Linear(2, 3, key=KEY)
    with pytest.raises(ValueError, match=r"expected an input of shape \(2,\).*jax.vmap.*got shape \(4, 2\)"):
        lin(jnp.ones((4, 2)))
    assert jax.vmap(lin)(jnp.ones((4, 2))).shape == (4, 3)


# ------------------------------------------------------------------ MLP / Sequential / Lambda / Identity


@pytest.mark.slow
def test_mlp_structure_and_forward() -> None:
    mlp = nn.MLP(4, 2, width_size=8, depth=2, activation=jax.nn.tanh, key=KEY)
    assert [(layer.in_features, layer.out_features) for layer in mlp.layers] == [(4, 8), (8, 8), (8, 2)]
    x = jnp.linspace(-1, 1, 4)
    h = x
    for layer in mlp.layers[:-1]:
        h = jnp.tanh(layer.weight @ h + layer.bias)
    expected = mlp.layers[-1].weight @ h + mlp.layers[-1].bias
    np.testing.assert_allclose(mlp(x), expected, rtol=1e-5)
    assert nn.MLP(3, 1, 5, 0, key=KEY).layers[0].weight.shape == (1, 3)
    # Activations are static: jit works on the module directly and the leaves are arrays only.
    assert all(isinstance(leaf, jax.Array) for leaf in st.leaves(mlp))
    np.testing.assert_allclose(jax.jit(lambda m, x: m(x))(mlp, x), mlp(x), rtol=1e-5)
    assert nn.MLP(3, 1, 5, 1, final_activation=jax.nn.sigmoid, key=KEY)(x[:3]).shape == (1,)


@pytest.mark.slow
def test_mlp_gradient_is_mlp_shaped() -> None:
    mlp = nn.MLP(3, 1, 4, 1, key=KEY)
    g = jax.grad(lambda m: jnp.sum(m(jnp.ones(3)) ** 2))(mlp)
    assert type(g) is nn.MLP and st.structure(g) == st.structure(mlp)


@pytest.mark.slow
def test_complex_parameters_draw_real_and_imaginary_parts() -> None:
    layer = nn.Linear(4, 3, dtype=jnp.complex64, key=KEY)
    assert layer.weight.dtype == jnp.complex64 and layer.bias.dtype == jnp.complex64
    lim = 1 / np.sqrt(4)
    for part in (layer.weight.real, layer.weight.imag, layer.bias.real, layer.bias.imag):
        assert float(jnp.max(jnp.abs(part))) <= lim and float(jnp.std(part)) > 0.05
    assert not np.allclose(layer.weight.real, layer.weight.imag)  # two independent draws
    x = jnp.array([1 + 1j, 2, -1j, 0.5], jnp.complex64)
    y = layer(x)
    assert y.dtype == jnp.complex64 and y.shape == (3,)
    np.testing.assert_allclose(y, np.asarray(layer.weight) @ np.asarray(x) + np.asarray(layer.bias), rtol=1e-5, atol=1e-6)
    with jax.numpy_dtype_promotion("strict"):
        assert layer(x).dtype == jnp.complex64
    # Real dtypes draw exactly as before (jax.random.uniform of the whole key).
    wkey, _ = random.split(KEY, 2)
    real = nn.Linear(4, 3, key=KEY)
    np.testing.assert_array_equal(real.weight, random.uniform(wkey, (3, 4), jnp.float32, -lim, lim))
    conv = nn.Conv1d(2, 3, 3, dtype=jnp.complex64, key=KEY)
    assert conv.weight.dtype == jnp.complex64 and float(jnp.std(conv.weight.imag)) > 0.05
    assert conv(jnp.ones((2, 5), jnp.complex64)).dtype == jnp.complex64


def _count_primitives(jaxpr: Any, name: str) -> int:
    """Occurrences of primitive ``name`` in a (closed) jaxpr, sub-jaxprs included."""
    count = 0
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        count += eqn.primitive.name == name
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(sub, "eqns"):  # a Jaxpr or ClosedJaxpr (scan's body, jit's inner jaxpr)
                    count += _count_primitives(sub, name)
    return count


@pytest.mark.parametrize(
    "in_size, out_size, depth, use_bias",
    [(3, 2, 0, True), (3, 2, 1, True), (3, 2, 2, True), (3, 2, 5, False), ("scalar", "scalar", 4, True)],
)
@pytest.mark.slow
def test_mlp_scan_equals_the_unrolled_mlp(in_size: Any, out_size: Any, depth: int, use_bias: bool) -> None:
    kw = dict(activation=jax.nn.tanh, final_activation=jax.nn.sigmoid, use_bias=use_bias, key=KEY)
    flat = nn.MLP(in_size, out_size, 6, depth, **kw)
    deep = nn.MLP(in_size, out_size, 6, depth, scan=True, **kw)
    assert deep.scan is True and flat.scan is False
    if depth == 0:
        assert len(deep.layers) == 1
        np.testing.assert_array_equal(deep.layers[0].weight, flat.layers[0].weight)
    else:
        first, hidden, last = deep.layers
        assert hidden.weight.shape == (depth - 1, 6, 6)
        assert hidden.bias is None if not use_bias else hidden.bias.shape == (depth - 1, 6)
        assert (hidden.in_features, hidden.out_features, hidden.use_bias) == (6, 6, use_bias)
        # The same key gives the same numbers: layer i of the unrolled MLP is hidden[i - 1].
        np.testing.assert_array_equal(first.weight, flat.layers[0].weight)
        np.testing.assert_array_equal(last.weight, flat.layers[-1].weight)
        for i in range(1, depth):
            np.testing.assert_array_equal(hidden.weight[i - 1], flat.layers[i].weight)
            if use_bias:
                np.testing.assert_array_equal(hidden.bias[i - 1], flat.layers[i].bias)
    x = jnp.float32(0.3) if in_size == "scalar" else jnp.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(deep(x), flat(x), rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
    assert deep(x).shape == flat(x).shape and deep(x).dtype == flat(x).dtype
    # Gradients agree as well, layer by layer.
    loss = lambda m: jnp.sum(m(x) ** 2)
    g_deep, g_flat = jax.grad(loss)(deep), jax.grad(loss)(flat)
    assert type(g_deep) is nn.MLP and st.structure(g_deep) == st.structure(deep)
    if depth >= 2:
        for i in range(1, depth):
            np.testing.assert_allclose(g_deep.layers[1].weight[i - 1], g_flat.layers[i].weight, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_mlp_scan_traces_one_scan_whatever_the_depth() -> None:
    x = jnp.ones(3)
    sizes = {}
    for depth in (3, 40):
        deep = nn.MLP(3, 2, 4, depth, scan=True, key=KEY)
        jaxpr = jax.make_jaxpr(lambda m, x: m(x))(deep, x)
        assert _count_primitives(jaxpr, "scan") == 1
        assert _count_primitives(jaxpr, "dot_general") == 3  # first, the scanned body, last
        sizes[depth] = len(jaxpr.jaxpr.eqns)
    assert sizes[3] == sizes[40]
    unrolled = jax.make_jaxpr(lambda m, x: m(x))(nn.MLP(3, 2, 4, 40, key=KEY), x)
    assert _count_primitives(unrolled, "scan") == 0 and _count_primitives(unrolled, "dot_general") == 41


@pytest.mark.slow
def test_mlp_scan_under_jit_vmap_and_save(tmp_path: Any) -> None:
    import spruce.io

    deep = nn.MLP(3, 2, 4, 3, scan=True, key=KEY)
    xs = jnp.arange(6.0).reshape(2, 3)
    out = jax.jit(jax.vmap(lambda x: deep(x)))(xs)
    np.testing.assert_allclose(out, jnp.stack([deep(x) for x in xs]), rtol=FLOAT_RTOL, atol=FLOAT_ATOL)
    spruce.io.save(tmp_path / "mlp.safetensors", deep)
    back = spruce.io.load(tmp_path / "mlp.safetensors", like=deep)
    assert back.scan is True and spruce.tree_equal(back, deep)


def test_mlp_refuses_an_activation_with_parameters() -> None:
    for kw in ({"activation": nn.PReLU()}, {"final_activation": nn.PReLU(2)}):
        name = next(iter(kw))
        with pytest.raises(TypeError, match=f"MLP: {name} holds arrays \\(PReLU, a layer with parameters\\)"):
            nn.MLP(3, 2, 4, 2, key=KEY, **kw)
    # A parameter-free Module (a Lambda of a function) is fine.
    mlp = nn.MLP(3, 2, 4, 1, activation=nn.Lambda(jax.nn.relu), key=KEY)
    np.testing.assert_allclose(mlp(jnp.ones(3)), nn.MLP(3, 2, 4, 1, key=KEY)(jnp.ones(3)), rtol=FLOAT_RTOL, atol=FLOAT_ATOL)


def test_mlp_scan_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="MLP: scan must be a bool, got 1"):
        nn.MLP(3, 2, 4, 2, scan=1, key=KEY)  # type: ignore[arg-type]


def test_sequential_lambda_identity() -> None:
    k1, k2 = random.split(KEY)
    seq = nn.Sequential([nn.Linear(3, 4, key=k1), nn.Lambda(jax.nn.relu), nn.Identity(), nn.Linear(4, 2, key=k2)])
    assert isinstance(seq.layers, tuple) and len(seq) == 4
    x = jnp.array([1.0, -2.0, 3.0])
    expected = seq[3](jax.nn.relu(seq[0](x)))
    np.testing.assert_allclose(seq(x), expected, rtol=1e-6)
    np.testing.assert_allclose(seq(x, key=KEY), expected, rtol=1e-6)
    assert type(seq[1:]) is nn.Sequential and len(seq[1:]) == 3
    assert [type(layer).__name__ for layer in seq] == ["Linear", "Lambda", "Identity", "Linear"]
    assert nn.Identity(1, 2, foo=3)(x) is x
    with pytest.raises(TypeError, match="fn must be callable"):
        nn.Lambda(3)  # type: ignore[arg-type]


def test_sequential_children_are_its_layers_keyed_by_position(tmp_path: Any) -> None:
    import spruce.io

    k1, k2 = random.split(KEY)
    seq = nn.Sequential([nn.Linear(3, 4, key=k1), nn.Lambda(jax.nn.relu), nn.Linear(4, 2, key=k2)])
    # PyTorch's names: '0.weight', not 'layers.0.weight'; the same key paths in spruce and JAX.
    paths = ["[0].weight", "[0].bias", "[2].weight", "[2].bias"]
    assert [st.keystr(p) for p, _ in st.leaves_with_path(seq)] == paths
    assert [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(seq)] == paths
    assert list(spruce.io.flatten_names(seq)) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert st.flatten_one_level(seq)[0] == list(seq.layers)
    # Rebuilt by unflatten (no __init__): a Sequential whose layers are a tuple.
    leaves, treedef = st.flatten(seq)
    back = st.unflatten(treedef, leaves)
    assert type(back) is nn.Sequential and isinstance(back.layers, tuple) and back[0].weight is seq[0].weight
    assert jax.tree_util.tree_structure(seq) == jax.tree_util.tree_structure(back)
    doubled = jax.tree.map(lambda a: 2 * a, seq)
    assert type(doubled) is nn.Sequential and isinstance(doubled.layers, tuple)
    np.testing.assert_allclose(doubled[2].bias, 2 * seq[2].bias, rtol=1e-6)
    moved = spruce.tree_at(lambda s: s.layers[2].bias, seq, jnp.zeros(2))
    assert moved[0] is seq[0] and np.all(np.asarray(moved[2].bias) == 0) and moved[2].weight is seq[2].weight
    x = jnp.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(jax.jit(lambda s, x: s(x))(seq, x), seq(x), rtol=1e-6)
    by_bias = jax.grad(lambda b: jnp.sum(seq[2](jax.nn.relu(seq[0].weight @ x + b))))(seq[0].bias)
    np.testing.assert_allclose(jax.grad(lambda s: jnp.sum(s(x)))(seq)[0].bias, by_bias, rtol=1e-6)
    # A checkpoint round-trips, into a like= structure or (its layers' static fields plain
    # data) without one; a Lambda's function needs like=, as anywhere.
    plain = nn.Sequential([seq[0], seq[2]])
    spruce.io.save(tmp_path / "seq.safetensors", plain)
    saved = tmp_path / "seq.safetensors"
    for loaded in (spruce.io.load(saved, like=plain), spruce.io.load(saved)):
        assert type(loaded) is nn.Sequential and isinstance(loaded.layers, tuple)
        assert spruce.tree_equal(loaded, plain)
        assert list(spruce.io.flatten_names(loaded)) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    spruce.io.save(tmp_path / "lambda.safetensors", seq)
    with pytest.raises(spruce.io.CheckpointError, match="like="):
        spruce.io.load(tmp_path / "lambda.safetensors")
    # A file written when a Sequential's names were 'layers.0.weight' (the structure document
    # names each tensor) still loads without like=; with like=, its names need a rename.
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(tmp_path / "seq.safetensors"), "np") as f:
        meta = f.metadata()
        old = {"layers." + k: f.get_tensor(k) for k in f.keys()}
    meta["spruce.treedef"] = meta["spruce.treedef"].replace('"tensor":"', '"tensor":"layers.')
    save_file(old, str(tmp_path / "old.safetensors"), metadata=meta)
    assert spruce.tree_equal(spruce.io.load(tmp_path / "old.safetensors"), plain)
    renamed = spruce.io.load(tmp_path / "old.safetensors", like=plain, rename=lambda n: n.replace("layers.", "", 1))
    assert spruce.tree_equal(renamed, plain)
    # A subclass is an ordinary Module: its tuple field is its child.
    class Stack(nn.Sequential):
        pass

    assert [st.keystr(p) for p, _ in st.leaves_with_path(Stack(list(seq)))] == [".layers" + p for p in paths]


# ------------------------------------------------------------------ norms


def test_layernorm_matches_formula() -> None:
    ln = nn.LayerNorm(5)
    x = jnp.array([1.0, 2.0, 4.0, 8.0, 16.0])
    xn = np.asarray(x)
    expected = (xn - xn.mean()) / np.sqrt(xn.var() + 1e-5)
    np.testing.assert_allclose(ln(x), expected, rtol=1e-5)
    assert ln.weight is not None and ln.bias is not None
    np.testing.assert_array_equal(ln.weight, np.ones(5)) and np.testing.assert_array_equal(ln.bias, np.zeros(5))
    ln2 = spruce.tree_at(lambda m: (m.weight, m.bias), ln, (jnp.full(5, 2.0), jnp.full(5, 1.0)))
    np.testing.assert_allclose(ln2(x), 2 * expected + 1, rtol=1e-5)
    y = nn.LayerNorm((2, 3), use_weight=False, use_bias=False)(jnp.arange(6.0).reshape(2, 3).astype(jnp.bfloat16))
    assert y.dtype == jnp.bfloat16 and y.shape == (2, 3)
    with pytest.raises(ValueError, match=r"expected an input of shape \(5,\)"):
        ln(jnp.ones(4))
    with pytest.raises(TypeError, match="shape must be"):
        nn.LayerNorm("5")  # type: ignore[arg-type]


def test_rmsnorm_matches_formula() -> None:
    norm = nn.RMSNorm(4)
    x = jnp.array([1.0, -2.0, 3.0, -4.0])
    xn = np.asarray(x)
    np.testing.assert_allclose(norm(x), xn / np.sqrt((xn**2).mean() + 1e-6), rtol=1e-5)
    assert norm.bias is None and st.leaves(norm) == [norm.weight]


# ------------------------------------------------------------------ embedding / dropout


def test_embedding() -> None:
    emb = nn.Embedding(10, 3, key=KEY)
    assert emb.weight.shape == (10, 3)
    np.testing.assert_array_equal(emb(4), emb.weight[4])
    assert emb(jnp.array([1, 2])).shape == (2, 3)
    fixed = nn.Embedding(weight=jnp.eye(3))
    assert (fixed.num_embeddings, fixed.embedding_size) == (3, 3)
    np.testing.assert_array_equal(fixed(jnp.int32(1)), [0.0, 1.0, 0.0])
    with pytest.raises(TypeError, match="indices must be integers"):
        emb(1.0)
    with pytest.raises(ValueError, match="num_embeddings=4 but weight has shape"):
        nn.Embedding(4, weight=jnp.eye(3))
    with pytest.raises(TypeError, match="needs a PRNG key"):
        nn.Embedding(3, 2)


def test_dropout() -> None:
    drop = nn.Dropout(0.5)
    x = jnp.ones(1000)
    y = drop(x, key=KEY)
    kept = np.asarray(y) != 0
    assert 400 < kept.sum() < 600
    np.testing.assert_array_equal(np.asarray(y)[kept], 2.0)
    assert drop(x, inference=True) is x
    assert nn.Dropout(0.5, inference=True)(x) is x
    assert nn.Dropout(0.0)(x) is x
    np.testing.assert_array_equal(nn.Dropout(1.0)(x, key=KEY), np.zeros(1000))
    with pytest.raises(ValueError, match="needs a PRNG key when active"):
        drop(x)
    with pytest.raises(ValueError, match=r"p must be a number in \[0, 1\]"):
        nn.Dropout(1.5)
    assert st.leaves(drop) == []


# ------------------------------------------------------------------ attention


def _reference_attention(
    mha: nn.MultiheadAttention, q: Any, k: Any, v: Any, blocked: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy multi-head attention, one head at a time, from the layer's PyTorch-named
    parameters; ``blocked`` (L, S) is True where a query may not attend to a key."""
    h, e = mha.num_heads, mha.embed_dim
    if mha.in_proj_weight is not None:
        wq, wk, wv = np.split(np.asarray(mha.in_proj_weight), 3)
    else:
        wq, wk, wv = (np.asarray(w) for w in (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight))
    bq, bk, bv = np.split(np.asarray(mha.in_proj_bias), 3) if mha.in_proj_bias is not None else (0, 0, 0)
    Q = (np.asarray(q) @ wq.T + bq).reshape(q.shape[0], h, -1)
    K = (np.asarray(k) @ wk.T + bk).reshape(k.shape[0], h, -1)
    V = (np.asarray(v) @ wv.T + bv).reshape(v.shape[0], h, -1)
    out = np.zeros((q.shape[0], h, e // h), np.float32)
    weights = np.zeros((h, q.shape[0], k.shape[0]), np.float32)
    for head in range(h):
        logits = Q[:, head] @ K[:, head].T / np.sqrt(e // h)
        if blocked is not None:
            logits = np.where(blocked, -np.inf, logits)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        weights[head] = w
        out[:, head] = w @ V[:, head]
    y = out.reshape(q.shape[0], -1) @ np.asarray(mha.out_proj.weight).T
    if mha.out_proj.bias is not None:
        y = y + np.asarray(mha.out_proj.bias)
    return y, weights


def _random_params(mha: Any, seed: int = 1) -> Any:
    """The layer with every parameter drawn from normal(0, 0.5) (the initial biases are zero)."""
    leaves, treedef = jax.tree.flatten(mha)
    keys = random.split(random.PRNGKey(seed), len(leaves))
    return jax.tree.unflatten(treedef, [0.5 * random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])


@pytest.mark.slow
def test_multihead_attention_matches_reference() -> None:
    mha = _random_params(nn.MultiheadAttention(8, 2, key=KEY))
    kq, kk = random.split(random.PRNGKey(1))
    q = random.normal(kq, (3, 8))
    kv = random.normal(kk, (5, 8))
    expected, weights = _reference_attention(mha, q, kv, kv)
    out, avg = mha(q, kv, kv)
    assert out.shape == (3, 8) and out.dtype == jnp.float32 and avg is not None and avg.shape == (3, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(avg, weights.mean(0), rtol=1e-4, atol=1e-6)
    blocked = ~np.tri(3, 5, dtype=bool)
    expected, weights = _reference_attention(mha, q, kv, kv, blocked)
    out, per_head = mha(q, kv, kv, attn_mask=blocked, average_attn_weights=False)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(per_head, weights, rtol=1e-4, atol=1e-6)
    # is_causal builds the same mask; need_weights=False gives no weights
    causal, none = mha(q, kv, kv, need_weights=False, is_causal=True)
    assert none is None
    np.testing.assert_allclose(causal, expected, rtol=1e-4, atol=1e-5)
    # separate projections (kdim, vdim differ from embed_dim), no biases
    cross = _random_params(nn.MultiheadAttention(8, 4, bias=False, kdim=3, vdim=6, key=KEY))
    k, v = random.normal(kk, (5, 3)), random.normal(kq, (5, 6))
    np.testing.assert_allclose(cross(q, k, v)[0], _reference_attention(cross, q, k, v)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_multihead_attention_batches_with_vmap_in_either_layout() -> None:
    mha = _random_params(nn.MultiheadAttention(8, 2, key=KEY))
    x = random.normal(random.PRNGKey(2), (4, 3, 8))  # (N, L, E): torch's batch_first=True
    out, w = jax.vmap(mha)(x, x, x)
    assert out.shape == (4, 3, 8) and w.shape == (4, 3, 3)
    np.testing.assert_allclose(out[1], mha(x[1], x[1], x[1])[0], rtol=1e-5, atol=1e-6)
    xt = jnp.swapaxes(x, 0, 1)  # (L, N, E): torch's default batch_first=False
    out_t, w_t = jax.vmap(mha, in_axes=1, out_axes=(1, 0))(xt, xt, xt)
    np.testing.assert_allclose(out_t, jnp.swapaxes(out, 0, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w_t, w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_multihead_attention_parameter_names_shapes_and_initialisation() -> None:
    import spruce.io

    def shapes(m: Any) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in spruce.io.flatten_names(m).items()}

    mha = nn.MultiheadAttention(16, 4, key=KEY)
    assert shapes(mha) == {"in_proj_weight": (48, 16), "in_proj_bias": (48,), "out_proj.weight": (16, 16), "out_proj.bias": (16,)}
    assert (mha.embed_dim, mha.num_heads, mha.head_dim, mha.kdim, mha.vdim) == (16, 4, 4, 16, 16)
    np.testing.assert_array_equal(mha.in_proj_bias, np.zeros(48))
    np.testing.assert_array_equal(mha.out_proj.bias, np.zeros(16))
    assert np.abs(np.asarray(mha.in_proj_weight)).max() <= np.sqrt(6 / (16 + 48))  # xavier uniform
    assert np.abs(np.asarray(mha.out_proj.weight)).max() <= 1 / np.sqrt(16)
    sep = nn.MultiheadAttention(16, 4, bias=False, add_bias_kv=True, kdim=5, vdim=16, key=KEY)
    assert shapes(sep) == {"q_proj_weight": (16, 16), "k_proj_weight": (16, 5), "v_proj_weight": (16, 16),
                           "bias_k": (1, 1, 16), "bias_v": (1, 1, 16), "out_proj.weight": (16, 16)}
    assert sep.in_proj_weight is None and sep.in_proj_bias is None and sep.out_proj.bias is None
    assert np.abs(np.asarray(sep.k_proj_weight)).max() <= np.sqrt(6 / (16 + 5))
    bf16 = nn.MultiheadAttention(8, 2, dtype=jnp.bfloat16, key=KEY)
    assert {x.dtype for x in st.leaves(bf16)} == {jnp.dtype(jnp.bfloat16)}
    assert bf16(jnp.ones((2, 8), jnp.float32), jnp.ones((2, 8)), jnp.ones((2, 8)))[0].dtype == jnp.float32


@pytest.mark.slow
def test_multihead_attention_fully_blocked_query_gets_zero_weights() -> None:
    mha = _random_params(nn.MultiheadAttention(8, 2, key=KEY))
    q = random.normal(random.PRNGKey(3), (3, 8))
    blocked = np.zeros((3, 4), bool)
    blocked[1] = True
    out, w = mha(q, q[:1].repeat(4, 0), q[:1].repeat(4, 0), attn_mask=blocked)
    np.testing.assert_array_equal(w[1], np.zeros(4))
    np.testing.assert_allclose(out[1], mha.out_proj.bias, rtol=1e-6, atol=1e-6)
    assert np.isfinite(np.asarray(out)).all() and np.isfinite(np.asarray(w)).all()


@pytest.mark.slow
def test_multihead_attention_dropout() -> None:
    mha = nn.MultiheadAttention(8, 2, dropout=0.5, key=KEY)
    x = jnp.ones((4, 8))
    _, w = mha(x, x, x, average_attn_weights=False, key=random.PRNGKey(5))
    kept = np.asarray(w) != 0
    assert w.shape == (2, 4, 4) and 0 < kept.sum() < w.size
    np.testing.assert_allclose(np.asarray(w)[kept], 0.5, rtol=1e-6)  # uniform 1/4, scaled by 1 / (1 - p)
    with pytest.raises(ValueError, match="needs a PRNG key when active"):
        mha(x, x, x)
    _, w_eval = mha(x, x, x, inference=True)
    np.testing.assert_allclose(w_eval, np.full((4, 4), 0.25), rtol=1e-6)
    _, w_mode = nn.inference_mode(mha)(x, x, x)
    np.testing.assert_allclose(w_mode, np.full((4, 4), 0.25), rtol=1e-6)
    assert nn.MultiheadAttention(8, 2, dropout=0.5, inference=True, key=KEY).dropout.inference


@pytest.mark.slow
def test_multihead_attention_sizes_and_errors() -> None:
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        nn.MultiheadAttention(10, 3, key=KEY)
    with pytest.raises(ValueError, match=r"embed_dim \(8\) must be divisible by num_heads \(16\)"):
        nn.MultiheadAttention(8, 16, key=KEY)  # was 16 heads of size 0
    with pytest.raises(ValueError, match="embed_dim and num_heads must be >= 1, got embed_dim=8 and num_heads=0"):
        nn.MultiheadAttention(8, 0, key=KEY)
    with pytest.raises(ValueError, match="embed_dim and num_heads must be >= 1, got embed_dim=0 and num_heads=2"):
        nn.MultiheadAttention(0, 2, key=KEY)
    with pytest.raises(ValueError, match="must be >= 1, got embed_dim=8 and num_heads=-2"):
        nn.MultiheadAttention(8, -2, key=KEY)
    with pytest.raises(TypeError, match=r"num_heads must be an int, got 2\.0"):
        nn.MultiheadAttention(8, 2.0, key=KEY)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\], got 1.5"):
        nn.MultiheadAttention(8, 2, dropout=1.5, key=KEY)
    with pytest.raises(TypeError, match="needs a PRNG key"):
        nn.MultiheadAttention(8, 2, key=None)  # type: ignore[arg-type]
    mha = nn.MultiheadAttention(8, 2, kdim=6, vdim=5, key=KEY)
    q, k, v = jnp.ones((2, 8)), jnp.ones((3, 6)), jnp.ones((3, 5))
    assert mha(q, k, v)[0].shape == (2, 8)
    with pytest.raises(ValueError, match=r"key_ must have shape \(seq_len, 6\) \(one example.*got \(3, 8\)"):
        mha(q, jnp.ones((3, 8)), v)
    with pytest.raises(ValueError, match=r"query must have shape \(seq_len, 8\).*use jax.vmap for a batch\), got \(4, 2, 8\)"):
        mha(jnp.ones((4, 2, 8)), k, v)
    with pytest.raises(ValueError, match="key_ and value must have the same length, got 3 and 4"):
        mha(q, k, jnp.ones((4, 5)))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(2, 3\) or \(2, 2, 3\), got \(3, 3\)"):
        mha(q, k, v, attn_mask=jnp.ones((3, 3), bool))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(3,\), got \(2,\)"):
        mha(q, k, v, key_padding_mask=jnp.ones((2,), bool))
    with pytest.raises(TypeError, match="attn_mask must be a boolean or floating array, got dtype int32"):
        mha(q, k, v, attn_mask=jnp.ones((2, 3), jnp.int32))
    # torch's keyword names: key= is spruce's PRNG key, so the key sequence is the positional key_
    for call in (lambda: mha(q, key=k, value=v), lambda: mha(q, k), lambda: mha(q, k, v, key=k)):
        with pytest.raises(
            TypeError, match=r"second and third positional arguments, key_ and value.*key= is the PRNG key of the dropout"
        ):
            call()


# ------------------------------------------------------------------ convolutions and pooling (torch-free checks; the
# comparisons with torch.nn are in test_nn_torch.py)


def test_conv_matches_a_direct_sum() -> None:
    conv = nn.Conv1d(2, 3, 3, stride=2, padding=1, dilation=1, key=KEY)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 7)), jnp.float32)
    xp = np.pad(np.asarray(x), ((0, 0), (1, 1)))
    w, b = np.asarray(conv.weight), np.asarray(conv.bias)
    expected = np.array([[np.sum(w[o] * xp[:, 2 * t : 2 * t + 3]) + b[o] for t in range(4)] for o in range(3)])
    np.testing.assert_allclose(conv(x), expected, rtol=1e-5, atol=1e-6)
    assert conv.padding == ((1, 1),) and conv.kernel_size == (3,) and st.leaves(conv) == [conv.weight, conv.bias]


@pytest.mark.slow
def test_conv_padding_forms() -> None:
    same = nn.Conv2d(1, 1, (4, 3), dilation=(1, 2), padding="same", key=KEY)
    assert same.padding == ((1, 2), (2, 2)) and same(jnp.ones((1, 6, 5))).shape == (1, 6, 5)
    assert nn.Conv2d(1, 1, 3, padding="valid", key=KEY).padding == ((0, 0), (0, 0))
    assert nn.Conv2d(1, 1, 3, padding=(1, 2), key=KEY).padding == ((1, 1), (2, 2))
    assert nn.Conv2d(1, 1, 3, padding=((0, 1), 2), key=KEY).padding == ((0, 1), (2, 2))
    assert nn.Conv3d(1, 1, 1, padding=1, key=KEY)(jnp.ones((1, 2, 2, 2))).shape == (1, 4, 4, 4)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: nn.Conv2d(3, 4, 3, groups=2, key=KEY), ValueError,
         r"in_channels \(3\) and out_channels \(4\) must both be divisible by groups \(2\)"),
        (lambda: nn.Conv2d(2, 2, 3, groups=0, key=KEY), ValueError, "groups must be an int >= 1"),
        (lambda: nn.Conv2d(2, 2, (3, 3, 3), key=KEY), ValueError, "kernel_size must be an int or a tuple of 2 ints"),
        (lambda: nn.Conv2d(2, 2, 0, key=KEY), ValueError, "kernel_size must be >= 1"),
        (lambda: nn.Conv1d(2, 2, 3, stride=2, padding="same", key=KEY), ValueError, "padding='same' needs stride 1"),
        (lambda: nn.Conv1d(2, 2, 3, padding="full", key=KEY), ValueError, "padding must be 'same', 'valid', an int"),
        (lambda: nn.Conv1d(2, 2, 3, padding=-1, key=KEY), ValueError, "padding must be >= 0"),
        (lambda: nn.Conv1d(2, 2, 3, padding=((1, 2, 3),), key=KEY), TypeError, "padding must be an int"),
        (lambda: nn.Conv1d(2, 2, 3, padding_mode="mirror", key=KEY), ValueError, "padding_mode must be 'zeros', 'reflect'"),
        (lambda: nn.Conv1d(2, 2, 3, key=None), TypeError, "needs a PRNG key"),  # type: ignore[arg-type]
        (lambda: nn.ConvTranspose1d(2, 2, 3, stride=2, output_padding=2, key=KEY), ValueError,
         "output_padding must be smaller than stride or dilation"),
        (lambda: nn.ConvTranspose1d(2, 2, 3, padding="same", key=KEY), ValueError, "padding must be an int"),
        (lambda: nn.ConvTranspose1d(2, 2, 3, padding_mode="reflect", key=KEY), ValueError, "only padding_mode='zeros'"),
        (lambda: nn.MaxPool2d(2, padding=2), ValueError, "padding should be at most half the kernel size"),
        (lambda: nn.AvgPool1d(2, divisor_override=0), ValueError, "divisor_override must be None or an int > 0"),
        (lambda: nn.AdaptiveAvgPool2d((2, 0)), ValueError, "output_size must be an int >= 1 or a tuple of 2"),
        (lambda: nn.GroupNorm(3, 4), ValueError, r"num_channels \(4\) must be divisible by num_groups \(3\)"),
        (lambda: nn.BatchNorm(3, momentum=1.5), ValueError, r"momentum must be a number in \[0, 1\] or None, got 1.5"),
        (lambda: nn.PReLU(0), ValueError, "num_parameters must be >= 1"),
        (lambda: nn.RotaryPositionalEmbedding(5), ValueError, "embedding_size must be an even int > 0"),
        (lambda: nn.LSTMCell(2, -1, key=KEY), ValueError, "hidden_size must be >= 0"),
    ],
)
def test_layer_construction_errors(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(
    ("layer", "x", "match"),
    [
        (nn.Conv2d(3, 2, 3, key=KEY), jnp.ones((2, 3, 5, 5)),
         r"expected one example of shape \(C, H, W\).*jax.vmap.*got shape \(2, 3, 5, 5\)"),
        (nn.Conv2d(3, 2, 3, key=KEY), jnp.ones((4, 5, 5)), r"expected 3 input channels \(axis 0\)"),
        (nn.ConvTranspose1d(3, 2, 3, key=KEY), jnp.ones((3,)), r"shape \(C, L\)"),
        (nn.MaxPool1d(3), jnp.ones((1, 2)), "smaller than the window"),
        (nn.AdaptiveMaxPool1d(2), jnp.ones((2, 0)), "spatial sizes must be > 0"),
        (nn.BatchNorm(3, inference=True), jnp.ones((4, 2)), r"expected one example of shape \(3, \.\.\.\)"),
        (nn.GroupNorm(1, 3), jnp.ones((2, 3)), r"expected one example of shape \(3, \.\.\.\)"),
        (nn.PReLU(3), jnp.ones((2, 3)), r"the input must have shape \(3, \.\.\.\)"),
        (nn.RotaryPositionalEmbedding(4), jnp.ones((2, 3, 4)), r"expected x of shape \(seq_len, 4\)"),
        (nn.GRUCell(3, 2, key=KEY), jnp.ones((2, 3)), r"expected an input of shape \(3,\)"),
    ],
)
def test_layer_call_shape_errors(layer: Any, x: jax.Array, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        layer(x)


@pytest.mark.parametrize(
    ("layer", "shape", "match"),
    [
        (nn.Conv2d(3, 4, 3, key=KEY), (3, 2, 2),
         r"Conv2d: the input size \(2, 2\) gives the output size \(0, 0\).*effective kernel size \(3, 3\)"),
        (nn.Conv1d(3, 4, 2, dilation=3, key=KEY), (3, 3),
         r"Conv1d: the input size \(3,\) gives the output size \(0,\)"
         r".*effective kernel size \(4,\) \(kernel_size \(2,\), dilation \(3,\)\)"),
        (nn.ConvTranspose2d(3, 4, 5, padding=4, key=KEY), (3, 2, 2),
         r"ConvTranspose2d: the input size \(2, 2\) gives the output size \(-2, -2\).*padding \(\(4, 4\), \(4, 4\)\)"),
        (nn.ConvTranspose2d(3, 4, 2, padding=3, key=KEY), (3, 1, 1),
         r"ConvTranspose2d: the input size \(1, 1\) gives the output size \(-4, -4\)"),
    ],
)
def test_conv_input_too_small_for_the_kernel(layer: Any, shape: tuple[int, ...], match: str) -> None:
    # PyTorch refuses these ("Kernel size can't be greater than actual input size"); an empty
    # output or XLA's negative-padding error would name no layer.
    with pytest.raises(ValueError, match=match):
        layer(jnp.zeros(shape))
    with pytest.raises(ValueError, match=match):
        jax.jit(layer)(jnp.zeros(shape))  # shapes are static: the check runs at trace time


def test_conv_smallest_input_gives_size_one() -> None:
    assert nn.Conv2d(3, 4, 3, key=KEY)(jnp.zeros((3, 3, 3))).shape == (4, 1, 1)
    assert nn.Conv1d(3, 4, 2, dilation=3, key=KEY)(jnp.zeros((3, 4))).shape == (4, 1)
    assert nn.ConvTranspose2d(3, 4, 5, padding=4, key=KEY)(jnp.zeros((3, 5, 5))).shape == (4, 1, 1)
    assert nn.ConvTranspose2d(3, 4, 2, padding=3, key=KEY)(jnp.zeros((3, 6, 6))).shape == (4, 1, 1)


def test_cell_hidden_state_errors() -> None:
    lstm = nn.LSTMCell(3, 2, key=KEY)
    with pytest.raises(ValueError, match=r"h must have shape \(2,\)"):
        lstm(jnp.ones(3), (jnp.ones(3), jnp.ones(2)))
    with pytest.raises(ValueError, match=r"hidden must be a pair \(h, c\)"):
        lstm(jnp.ones(3), jnp.ones(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positions must be an integer array"):
        nn.RotaryPositionalEmbedding(4)(jnp.ones((2, 4)), jnp.array([0.0, 1.0]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: (nn.Conv2d(2, 3, 3, padding=1, key=KEY), (2, 5, 4)),
        lambda: (nn.ConvTranspose1d(2, 3, 3, stride=2, key=KEY), (2, 5)),
        lambda: (nn.BatchNorm(2, inference=True), (2, 5)),
        lambda: (nn.GroupNorm(1, 2), (2, 5)),
        lambda: (nn.PReLU(2), (2, 5)),
        lambda: (nn.AvgPool1d(2), (2, 4)),
        lambda: (nn.AdaptiveAvgPool1d(2), (2, 5)),
        lambda: (nn.RotaryPositionalEmbedding(4), (3, 4)),
    ],
)
def test_layers_under_strict_dtype_promotion(make: Any) -> None:
    # bfloat16 input with float32 parameters: every layer casts explicitly, so it runs under
    # jax_numpy_dtype_promotion='strict' and returns the promoted dtype.
    layer, shape = make()
    x = jnp.ones(shape, jnp.bfloat16)
    with jax.numpy_dtype_promotion("strict"):
        y = jax.jit(layer)(x)
    params = st.leaves(layer)
    expected = jnp.float32 if params else jnp.bfloat16
    assert y.dtype == expected
    with jax.numpy_dtype_promotion("strict"):
        y16 = jax.jit(st.map(lambda a: a.astype(jnp.bfloat16), layer))(x)
    assert y16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y16, np.float32), np.asarray(y, np.float32), rtol=0.05, atol=0.05)


@pytest.mark.slow
def test_cells_under_strict_dtype_promotion_and_scan() -> None:
    lstm = nn.LSTMCell(3, 4, key=KEY)
    with jax.numpy_dtype_promotion("strict"):
        (h, c), hs = jax.lax.scan(lambda hc, x: (lstm(x, hc), lstm(x, hc)[0]), (jnp.zeros(4), jnp.zeros(4)),
                                  jnp.ones((5, 3), jnp.bfloat16))
        gru = nn.GRUCell(3, 4, dtype=jnp.bfloat16, key=KEY)
        assert gru(jnp.ones(3, jnp.bfloat16)).dtype == jnp.bfloat16
    assert hs.shape == (5, 4) and h.dtype == jnp.float32


def test_max_pool_keeps_integer_dtype() -> None:
    x = jnp.arange(12, dtype=jnp.int32).reshape(1, 3, 4)
    y = nn.MaxPool2d(2, padding=1)(x)
    assert y.dtype == jnp.int32
    np.testing.assert_array_equal(y, [[[0, 2, 3], [8, 10, 11]]])
    np.testing.assert_array_equal(nn.AdaptiveMaxPool2d((1, 2))(x), [[[9, 11]]])
    assert nn.AvgPool2d(2)(x).dtype == jnp.float32


def test_rotary_embedding_depends_on_relative_position_only() -> None:
    rope = nn.RotaryPositionalEmbedding(8)
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(rng.standard_normal((1, 8)), jnp.float32) for _ in range(2))

    def score(m: int, n: int) -> float:
        return float(jnp.sum(rope(q, jnp.array([m])) * rope(k, jnp.array([n]))))

    assert score(3, 1) == pytest.approx(score(12, 10), rel=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), rel=1e-2)
    np.testing.assert_allclose(rope(q, jnp.array([0])), q, rtol=1e-6)  # position 0: no rotation
    np.testing.assert_allclose(jnp.linalg.norm(rope(q, jnp.array([7]))), jnp.linalg.norm(q), rtol=1e-5)


# ------------------------------------------------------------------ state, inference mode, sharing


def _model_with_batchnorm() -> Any:
    k1, k2 = random.split(KEY)
    return nn.Sequential([nn.Conv1d(2, 3, 3, key=k1), nn.BatchNorm(3, axis_name="batch"), nn.Dropout(0.5),
                          nn.Linear(4, 2, key=k2)])


def test_batchnorm_training_threads_a_state() -> None:
    bn = nn.BatchNorm(2, momentum=0.5, axis_name="batch")
    bn2, state = nn.make_with_state(nn.BatchNorm)(2, momentum=0.5, axis_name="batch")
    assert list(state.values) == [bn2.state_index] and bn.state_index != bn2.state_index
    state = nn.State(bn)
    x = jnp.array([[[1.0, 3.0], [0.0, 0.0]], [[5.0, 7.0], [2.0, 2.0]]])  # batch 2, C 2, L 2
    f = jax.jit(jax.vmap(bn, axis_name="batch", in_axes=(0, None), out_axes=(0, None)))
    y, new = f(x, state)
    # channel 0: values 1, 3, 5, 7: mean 4, biased var 5, unbiased 20/3; channel 1: 0, 0, 2, 2.
    np.testing.assert_allclose(new.get(bn)[0], [2.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(new.get(bn)[1], [0.5 + 0.5 * 20 / 3, 0.5 + 0.5 * 4 / 3], rtol=1e-6)
    np.testing.assert_allclose(y[:, 0], (np.array([[1.0, 3.0], [5.0, 7.0]]) - 4) / np.sqrt(5 + 1e-5), rtol=1e-5)
    np.testing.assert_array_equal(bn.running_mean, [0.0, 0.0])  # the layer itself is unchanged
    trained = nn.update_state(bn, new)
    np.testing.assert_allclose(trained.running_mean, [2.0, 0.5], rtol=1e-6)
    # Inference with a state passed returns it unchanged.
    y_inf, same = jax.vmap(nn.inference_mode(trained), in_axes=(0, None), out_axes=(0, None))(x, new)
    assert same is new or st.structure(same) == st.structure(new)
    np.testing.assert_allclose(y_inf, jax.vmap(nn.inference_mode(trained))(x), rtol=1e-6)


def test_batchnorm_takes_numpy_scalars_and_refuses_nan() -> None:
    bn = nn.BatchNorm(2, eps=np.float32(1e-3), momentum=np.float32(0.25))
    assert type(bn.momentum) is float and bn.momentum == 0.25 and type(bn.eps) is float
    assert bn.eps == pytest.approx(1e-3)
    for bad in (dict(momentum=float("nan")), dict(momentum=np.float32(1.5)), dict(momentum=np.bool_(True))):
        with pytest.raises(ValueError, match="momentum must be a number in"):
            nn.BatchNorm(2, **bad)
    with pytest.raises(ValueError, match="eps must be a number >= 0"):
        nn.BatchNorm(2, eps=float("nan"))


def test_batchnorm_momentum_none_is_the_average_of_all_batches(tmp_path: Any) -> None:
    import spruce.io

    bn = nn.BatchNorm(2, momentum=None, axis_name="batch")
    assert bn.momentum is None and bn.state_fields == ("running_mean", "running_var", "num_batches_tracked")
    assert isinstance(bn.num_batches_tracked, np.ndarray) and bn.num_batches_tracked.dtype == np.int64
    assert bn.num_batches_tracked.shape == () and int(bn.num_batches_tracked) == 0
    state = nn.State(bn)
    step = jax.jit(jax.vmap(bn, axis_name="batch", in_axes=(0, None), out_axes=(0, None)))
    # Three batches of 2 examples x 2 channels x 2 positions; per channel, the batch mean and the
    # unbiased variance of its 4 values, computed by hand.
    batches = [
        np.array([[[1.0, 3.0], [0.0, 0.0]], [[5.0, 7.0], [2.0, 2.0]]]),  # means 4, 1; vars 20/3, 4/3
        np.array([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 4.0], [1.0, 1.0]]]),  # means 1, 1; vars 4, 0
        np.array([[[2.0, 2.0], [-3.0, 3.0]], [[2.0, 2.0], [3.0, -3.0]]]),  # means 2, 0; vars 0, 12
    ]
    means = [[4.0, 1.0], [1.0, 1.0], [2.0, 0.0]]
    variances = [[20 / 3, 4 / 3], [4.0, 0.0], [0.0, 12.0]]
    for k, x in enumerate(batches, start=1):
        _, state = step(jnp.asarray(x, jnp.float32), state)
        mean, var, count = state.get(bn)
        assert int(count) == k
        # The first batch replaces the initial (0, 1); then a plain average of all batches.
        np.testing.assert_allclose(mean, np.mean(means[:k], axis=0), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(var, np.mean(variances[:k], axis=0), rtol=1e-6, atol=1e-7)
    trained = nn.update_state(bn, state)
    assert isinstance(trained.num_batches_tracked, np.ndarray) and trained.num_batches_tracked.dtype == np.int64
    assert int(trained.num_batches_tracked) == 3
    np.testing.assert_allclose(trained.running_mean, [7 / 3, 2 / 3], rtol=1e-6)
    # Training resumes from the saved counter: a fourth batch weighs 1/4.
    spruce.io.save(tmp_path / "bn.safetensors", trained)
    back = spruce.io.load(tmp_path / "bn.safetensors", like=nn.BatchNorm(2, momentum=None, axis_name="batch"))
    assert back.num_batches_tracked.dtype == np.int64 and int(back.num_batches_tracked) == 3
    back = spruce.tree_at(lambda b: b.state_index, back, trained.state_index)
    _, state4 = step(jnp.asarray(batches[0], jnp.float32), nn.State(back))
    np.testing.assert_allclose(state4.get(back)[0], [(7 + 4) / 4, (2 + 1) / 4], rtol=1e-6)
    # Inference uses the running statistics alone; without running statistics there is no counter.
    y = jax.vmap(nn.inference_mode(trained))(jnp.asarray(batches[0], jnp.float32))
    expected = (batches[0] - np.array([7 / 3, 2 / 3])[:, None]) / np.sqrt(np.array([32 / 9, 40 / 9])[:, None] + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert nn.BatchNorm(2, momentum=None, track_running_stats=False).num_batches_tracked is None


def test_batchnorm_training_errors() -> None:
    with pytest.raises(ValueError, match="build it with axis_name='batch'"):
        jax.vmap(nn.BatchNorm(2))(jnp.ones((3, 2)), None)
    bn = nn.BatchNorm(2, axis_name="batch")
    with pytest.raises(ValueError, match=r"call it as `y, state = bn\(x, state\)`"):
        jax.vmap(bn, axis_name="batch")(jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="expected more than 1 value per channel"):
        jax.vmap(bn, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(jnp.ones((1, 2)), nn.State(bn))
    with pytest.raises(TypeError, match=r"state must be a spruce\.nn\.State"):
        nn.update_state(bn, {})  # type: ignore[arg-type]


@pytest.mark.slow
def test_state_in_a_model_trains_under_jit_and_grad() -> None:
    model = _model_with_batchnorm()
    state = nn.State(model)
    assert len(state.values) == 1
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 2, 6)), jnp.float32)

    def forward(m: Any, s: nn.State, x: jax.Array, key: jax.Array) -> Any:
        h = m[0](x)
        h, s = m[1](h, s)
        return m[3](m[2](h, key=key).mean(0)), s

    @jax.jit
    def loss(m: Any, s: nn.State) -> Any:
        keys = random.split(KEY, 4)
        out, s = jax.vmap(forward, axis_name="batch", in_axes=(None, None, 0, 0), out_axes=(0, None))(m, s, x, keys)
        return jnp.sum(out**2), s

    # allow_int: the model holds BatchNorm's integer counter (its gradient is a float0 zero).
    (value, new_state), grads = jax.value_and_grad(loss, has_aux=True, allow_int=True)(model, state)
    assert grads[1].num_batches_tracked.dtype == jax.dtypes.float0
    assert int(new_state.get(model[1])[2]) == 1
    assert st.structure(new_state) == st.structure(state)
    assert not np.allclose(new_state.get(model[1])[0], 0.0)
    # The running statistics take no part in the training output: their gradients are zero.
    np.testing.assert_array_equal(grads[1].running_mean, 0.0)
    updated = nn.update_state(model, new_state)
    np.testing.assert_array_equal(updated[1].running_var, new_state.get(model[1])[1])
    assert updated[0] is not model[0] and updated[0].weight is model[0].weight


def test_batchnorm_counter_is_pytorchs_and_every_training_step_counts() -> None:
    bn = nn.BatchNorm(2, axis_name="batch")  # momentum 0.1: the counter is kept all the same
    count = bn.num_batches_tracked
    assert isinstance(count, np.ndarray) and count.dtype == np.int64 and count.shape == () and int(count) == 0
    assert bn.state_fields == ("running_mean", "running_var", "num_batches_tracked")
    assert nn.BatchNorm(2, track_running_stats=False).num_batches_tracked is None  # as PyTorch
    step = jax.jit(jax.vmap(bn, axis_name="batch", in_axes=(0, None), out_axes=(0, None)))
    state = nn.State(bn)
    for _ in range(2):
        _, state = step(jnp.ones((3, 2)), state)
    trained = nn.update_state(bn, state)
    assert trained.num_batches_tracked.dtype == np.int64 and int(trained.num_batches_tracked) == 2
    # A layer without a counter (saved by an earlier spruce, which kept none with a momentum)
    # counts from 0.
    old = spruce.tree_at(lambda b: b.num_batches_tracked, bn, None)
    _, state = jax.vmap(old, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(jnp.ones((3, 2)), nn.State(old))
    assert int(state.get(old)[2]) == 1


def test_gradients_of_a_model_with_a_batchnorm_counter() -> None:
    """The integer counter is a leaf: filter_grad skips it (None), jax.grad with allow_int=True
    gives it a float0 zero, plain jax.grad refuses it; the floating gradients agree."""
    model = nn.inference_mode(_model_with_batchnorm())
    x = jnp.asarray(np.random.default_rng(1).standard_normal((2, 6)), jnp.float32)

    def loss(m: Any) -> jax.Array:
        return jnp.sum(m[3](m[2](m[1](m[0](x))).mean(0)) ** 2)

    filtered = filter_grad(loss)(model)
    assert filtered[1].num_batches_tracked is None
    plain = jax.grad(loss, allow_int=True)(model)
    assert plain[1].num_batches_tracked.dtype == jax.dtypes.float0
    params, rest = spruce.partition(model, spruce.is_inexact_array)
    partitioned = jax.grad(lambda p: loss(spruce.combine(p, rest)))(params)
    for grads in (plain, partitioned):
        for got, want in zip(st.leaves(spruce.filter(grads, spruce.is_inexact_array)), st.leaves(filtered), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.any(np.asarray(filtered[0].weight) != 0)
    with pytest.raises(TypeError, match="allow_int"):
        jax.grad(loss)(model)


def test_inference_mode_switches_every_layer_with_an_inference_field() -> None:
    model = {"net": _model_with_batchnorm(), "other": [nn.Dropout(0.1, inference=True), 3]}
    on = nn.inference_mode(model)
    assert on["net"][1].inference and on["net"][2].inference and on["other"][0].inference
    assert on["other"][1] == 3 and on["net"][0].weight is model["net"][0].weight
    off = nn.inference_mode(on, value=False)
    assert not off["net"][1].inference and not off["other"][0].inference
    assert not model["net"][1].inference  # the input is not modified
    x = jnp.ones((3, 4))
    assert on["net"][2](x) is x  # dropout off: no key needed
    np.testing.assert_allclose(on["net"][1](x), x / np.sqrt(1 + 1e-5), rtol=1e-6)  # running statistics, no state
    with pytest.raises(TypeError, match="value must be a bool"):
        nn.inference_mode(model, value=1)  # type: ignore[arg-type]

    class Custom(spruce.Module):
        inference: bool = False

    assert nn.inference_mode([Custom()])[0].inference is True


def test_inference_flag_is_static_for_jax_and_prints_as_a_bool(tmp_path: Any) -> None:
    import spruce.io

    drop = nn.Dropout(0.5)
    flag = drop.inference
    # (operator.eq: the comparison with a bool is what is tested)
    assert not flag and operator.eq(flag, False) and hash(flag) == hash(False) and repr(flag) == "False"
    assert operator.eq(flag, nn.Dropout(0.1).inference) and not operator.eq(flag, True) and flag is not False
    assert repr(drop) == "Dropout(p=0.5, inference=False)" and st.leaves(drop) == [] and jax.tree_util.tree_leaves(drop) == []
    assert operator.eq(nn.BatchNorm(2, inference=True).inference, True)
    with pytest.raises(TypeError, match="inference must be a bool"):
        nn.Dropout(0.5, inference=1)  # type: ignore[arg-type]
    spruce.io.save(tmp_path / "drop.safetensors", nn.inference_mode(drop))  # no tensor, the flag in the structure
    back = spruce.io.load(tmp_path / "drop.safetensors")
    assert type(back.inference) is type(flag) and operator.eq(back.inference, True)
    # jax.jit with the model as an argument: the flag is in the treedef, one compilation per mode.
    traces = []

    @jax.jit
    def run(m: Any, x: jax.Array) -> jax.Array:
        traces.append(1)
        return m(x, key=KEY)

    x = jnp.ones(8)
    model = nn.Sequential([nn.Linear(8, 8, key=KEY), nn.Dropout(0.5)])
    assert np.any(np.asarray(run(model, x)) == 0)
    evaluation = nn.inference_mode(model)
    np.testing.assert_allclose(run(evaluation, x), model[0](x), rtol=1e-6)
    run(nn.inference_mode(evaluation), x)
    assert len(traces) == 2
    # jax.grad over the whole model: no bool leaf.
    grads = jax.grad(lambda m: jnp.sum(m(x, key=KEY)))(model)
    assert st.structure(grads) == st.structure(model)


def _mixed() -> Any:
    """A spruce model holding Equinox layers, inside an Equinox Module holding spruce layers."""
    eqx = pytest.importorskip("equinox")

    class Outer(eqx.Module):
        spruce_part: Any
        spruce_norm: Any
        eqx_drop: Any

    inner = nn.Sequential([nn.Linear(4, 4, key=KEY), nn.Dropout(0.5), eqx.nn.Dropout(0.3)])
    mha = nn.MultiheadAttention(4, 2, dropout=0.1, key=KEY)
    return Outer((inner, mha), nn.BatchNorm(4, axis_name="b"), eqx.nn.Dropout(0.2))


def _flags(model: Any) -> list[Any]:
    inner, mha = model.spruce_part
    return [inner[1].inference, inner[2].inference, mha.dropout.inference, model.spruce_norm.inference, model.eqx_drop.inference]


def test_inference_mode_of_either_library_switches_a_mixed_model() -> None:
    eqx = pytest.importorskip("equinox")
    model = _mixed()
    assert _flags(model) == [False] * 5
    for switch in (nn.inference_mode, eqx.nn.inference_mode):
        on = switch(model)
        assert _flags(on) == [True] * 5, switch
        assert _flags(switch(on, value=False)) == [False] * 5, switch
        assert on.spruce_part[0][0].weight is model.spruce_part[0][0].weight
    assert _flags(model) == [False] * 5  # the input is not modified
    # spruce's switch keeps spruce's flags static (Flag nodes); Equinox's stores plain bools.
    inner, mha = nn.inference_mode(model).spruce_part
    assert type(inner[1].inference) is type(mha.dropout.inference) is type(model.spruce_norm.inference)
    assert type(eqx.nn.inference_mode(model).spruce_part[0][1].inference) is bool


def test_a_layer_switched_by_equinox_runs_where_its_bool_leaf_is_static() -> None:
    eqx = pytest.importorskip("equinox")
    from spruce.jax import filter_jit

    bn = nn.BatchNorm(3)
    rng = np.random.default_rng(0)
    stats = (jnp.asarray(rng.standard_normal(3), jnp.float32), jnp.full(3, 4.0))
    bn = spruce.tree_at(lambda b: (b.running_mean, b.running_var), bn, stats)
    x = jnp.asarray(rng.standard_normal((3, 5)), jnp.float32)
    expected = nn.inference_mode(bn)(x)
    switched = eqx.nn.inference_mode(bn)
    assert switched.inference is True
    for got in (switched(x), filter_jit(lambda m, x: m(x))(switched, x), eqx.filter_jit(lambda m, x: m(x))(switched, x),
                jax.jit(lambda x: switched(x))(x)):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    # As an argument of jax.jit the bool leaf is traced: the layer says what to do.
    with pytest.raises(TypeError, match=r"BatchNorm: its inference flag is a traced value.*spruce\.nn\.inference_mode"):
        jax.jit(lambda m, x: m(x))(switched, x)
    with pytest.raises(TypeError, match="Dropout: its inference flag is a traced value"):
        jax.jit(lambda m, x: m(x))(eqx.nn.inference_mode(nn.Dropout(0.5)), x)
    # spruce's switch makes the flag static again.
    again = nn.inference_mode(switched)
    np.testing.assert_allclose(jax.jit(lambda m, x: m(x))(again, x), expected, rtol=1e-6)


def test_inference_mode_names_a_node_whose_inference_it_cannot_switch() -> None:
    eqx = pytest.importorskip("equinox")

    class Frozen(eqx.Module):
        inference: bool = eqx.field(static=True, default=False)

    with pytest.raises(
        TypeError, match=r"the .*Frozen at \['b'\]\[1\] has an `inference` attribute that is not one of its pytree children"
    ):
        nn.inference_mode({"a": nn.Dropout(0.1), "b": [1, Frozen()]})
    with pytest.raises(TypeError, match=r"the .*Frozen at \[0\]\[2\] has an `inference`"):
        nn.inference_mode([nn.Sequential([nn.Dropout(0.1), nn.Lambda(jax.nn.relu), Frozen()])], value=False)
    with pytest.raises(TypeError, match=r"the .*Frozen at the root"):
        nn.inference_mode(Frozen())


def test_shared_ties_weights_and_sums_gradients() -> None:
    emb, head = nn.Embedding(5, 3, key=KEY), nn.Linear(3, 5, use_bias=False, key=random.PRNGKey(1))
    shared = nn.Shared((emb, head), lambda t: t[1].weight, lambda t: t[0].weight)
    assert st.leaves(shared) == [emb.weight]
    e, h = shared()
    assert h.weight is e.weight
    # d/dW of sum(W @ W[i]) = one-hot-row contribution (the embedding) + x (the head)
    g = jax.grad(lambda s: jnp.sum(s()[1](s()[0](2))))(shared)
    w = np.asarray(emb.weight)
    expected = np.tile(w[2], (5, 1))
    expected[2] += w.sum(0)
    np.testing.assert_allclose(g.pytree[0].weight, expected, rtol=1e-5)
    with pytest.raises(ValueError, match="same structure and leaf shapes"):
        nn.Shared((emb, nn.Linear(3, 4, key=KEY)), lambda t: t[1].weight, lambda t: t[0].weight)


@pytest.mark.slow
def test_conv_batchnorm_model_saves_and_loads_without_like(tmp_path: Any) -> None:
    import spruce.io

    model = nn.Sequential([
        nn.Conv2d(1, 2, (3, 1), padding="same", key=KEY), nn.BatchNorm(2, axis_name="b"),
        nn.MaxPool2d((2, 1)), nn.GroupNorm(1, 2), nn.PReLU(), nn.AdaptiveAvgPool2d((2, None)),
    ])
    path = str(tmp_path / "model.safetensors")
    spruce.io.save(path, model)
    loaded = spruce.io.load(path)  # every static field is plain data
    assert loaded[1].state_index == model[1].state_index and loaded[0].padding == ((1, 1), (0, 0))
    assert "state_index" not in repr(model)
    x = jnp.linspace(-1, 1, 24).reshape(1, 8, 3)
    np.testing.assert_allclose(nn.inference_mode(st.map(jnp.asarray, loaded))(x), nn.inference_mode(model)(x), rtol=1e-6)
    spruce.io.save(path, nn.State(model))
    np.testing.assert_array_equal(spruce.io.load(path).get(model[1])[1], np.ones(2, np.float32))
