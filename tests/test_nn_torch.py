"""spruce.nn against PyTorch: every layer's output equals torch.nn's for the same parameters and
input, with the parameters moved by name in both directions (spruce -> ``load_state_dict``, and
a PyTorch ``state_dict`` -> ``spruce.io.load(like=layer)``).

torch is a test-only dependency (a CPU build, installed by the Makefile under Python 3.11);
where it is absent these tests skip with the reason below.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.io
import spruce.nn as nn

torch = pytest.importorskip(
    "torch",
    reason="torch is not installed: the PyTorch comparison tests need it (a test-only dependency; "
    "`make test` installs a CPU build under Python 3.11, the only interpreter with one)",
)
from safetensors.numpy import save_file  # noqa: E402  (after the torch skip)

# torch's performance note about padding='same' with an even kernel (it pads a copy first).
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")

KEY = jax.random.key(0)
RTOL, ATOL = 1e-5, 1e-5


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _torch_params(tlayer: Any) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in tlayer.state_dict().items()}


def copy_to_torch(layer: Any, tlayer: Any) -> None:
    """Load the spruce layer's parameters into the torch layer by name, strictly: the dotted key
    paths of the spruce layer are exactly the keys of torch's state_dict (buffers included)."""
    params = {name: np.asarray(v) for name, v in spruce.io.flatten_names(layer).items()}
    assert sorted(params) == sorted(tlayer.state_dict())
    tlayer.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in params.items()})


def load_from_torch(tlayer: Any, layer: Any, tmp_path: Any) -> Any:
    """A PyTorch state_dict, saved as safetensors, loaded into the spruce layer by name,
    strictly (every tensor used, every leaf filled, dtypes equal)."""
    path = os.path.join(tmp_path, "torch.safetensors")
    sd = {k: v.detach().numpy().copy() for k, v in tlayer.state_dict().items()}
    save_file(sd, path)
    tree = spruce.io.load(path, like=layer)
    for name, value in spruce.io.flatten_names(tree).items():
        np.testing.assert_array_equal(np.asarray(value), sd[name])
    return tree


def _randomise(tlayer: Any, seed: int) -> None:
    """New random parameters (and buffers) for the torch layer, different from the spruce ones."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in tlayer.state_dict().items():
            if t.dtype.is_floating_point:
                if name.endswith("running_var"):
                    v = torch.rand(t.shape, generator=g) + 0.5
                else:
                    v = torch.randn(t.shape, generator=g) * 0.5
                t.copy_(v)


@jax.jit
def _vmapped(layer: Any, x: jax.Array) -> jax.Array:
    return jax.vmap(layer)(x)


def _batch(layer: Any, x: np.ndarray) -> np.ndarray:
    # The layer is an argument, so layers of one structure (spruce's and the one loaded from
    # torch) share a compilation.
    return np.asarray(_vmapped(layer, jnp.asarray(x)))


def _tolerance(reduced: int) -> dict[str, float]:
    """Float32 tolerance for a sum of ``reduced`` products: rounding grows like sqrt(n)."""
    scale = max(1.0, math.sqrt(reduced) / 4)
    return {"rtol": RTOL * scale, "atol": ATOL * scale}


def check_both_ways(layer: Any, tlayer: Any, x: np.ndarray, tmp_path: Any, reduced: int = 1) -> None:
    """spruce params -> torch: same output; then fresh torch params -> spruce: same output."""
    tol = _tolerance(reduced)
    copy_to_torch(layer, tlayer)
    with torch.no_grad():
        expected = tlayer(torch.from_numpy(x)).numpy()
    got = _batch(layer, x)
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, **tol)
    _randomise(tlayer, seed=1)
    loaded = load_from_torch(tlayer, layer, tmp_path)
    with torch.no_grad():
        expected = tlayer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_batch(loaded, x), expected, **tol)


def _torch_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    out = dict(kw)
    if "use_bias" in out:
        out["bias"] = out.pop("use_bias")
    return out


# ------------------------------------------------------------------ convolutions

CONV_CASES = [
    ("Conv1d", dict(in_channels=2, out_channels=4, kernel_size=3, stride=2, padding=1), (2, 2, 11)),
    ("Conv1d", dict(in_channels=2, out_channels=3, kernel_size=4, dilation=2, padding="same", padding_mode="reflect"),
     (2, 2, 12)),
    ("Conv1d", dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, padding="valid", use_bias=False), (2, 4, 9)),
    ("Conv1d", dict(in_channels=3, out_channels=2, kernel_size=5, padding=2, padding_mode="circular"), (2, 3, 8)),
    ("Conv2d", dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
     (2, 4, 9, 8)),
    ("Conv2d", dict(in_channels=3, out_channels=5, kernel_size=3, padding=2, padding_mode="replicate"), (2, 3, 7, 6)),
    ("Conv2d", dict(in_channels=1, out_channels=8, kernel_size=(64, 1), stride=(4, 1), padding=0), (2, 1, 128, 1)),
    ("Conv2d", dict(in_channels=3, out_channels=4, kernel_size=(2, 3), padding="same", padding_mode="reflect"), (2, 3, 6, 7)),
    ("Conv3d", dict(in_channels=2, out_channels=4, kernel_size=(2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), groups=2),
     (2, 2, 5, 6, 4)),
    ("Conv3d", dict(in_channels=2, out_channels=2, kernel_size=3, padding="same", padding_mode="circular", use_bias=False),
     (2, 2, 4, 5, 4)),
    ("ConvTranspose1d", dict(in_channels=4, out_channels=6, kernel_size=3, stride=3, padding=2, output_padding=1, dilation=2),
     (2, 4, 5)),
    ("ConvTranspose1d", dict(in_channels=3, out_channels=2, kernel_size=4, stride=2, padding=1), (2, 3, 6)),
    ("ConvTranspose2d", dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, output_padding=1, groups=2),
     (2, 4, 5, 4)),
    ("ConvTranspose2d", dict(in_channels=2, out_channels=3, kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1), use_bias=False),
     (2, 2, 4, 3)),
    ("ConvTranspose3d",
     dict(in_channels=2, out_channels=4, kernel_size=(2, 3, 2), stride=(2, 1, 2), padding=(0, 1, 0),
          output_padding=(1, 0, 0)), (2, 2, 3, 4, 3)),
]


@pytest.mark.parametrize(("name", "kw", "shape"), CONV_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONV_CASES)])
@pytest.mark.slow
def test_conv_matches_torch(name: str, kw: dict[str, Any], shape: tuple[int, ...], tmp_path: Any) -> None:
    layer = getattr(nn, name)(**kw, key=KEY)
    tlayer = getattr(torch.nn, name)(**_torch_kwargs(kw))
    assert layer.weight.shape == tuple(tlayer.weight.shape)
    x = _rng().standard_normal(shape).astype(np.float32)
    check_both_ways(layer, tlayer, x, tmp_path, reduced=int(np.prod(layer.weight.shape[1:])))


@pytest.mark.parametrize("name", ["Conv2d", "ConvTranspose2d"])
@pytest.mark.slow
def test_conv_initialisation_has_torch_bounds(name: str) -> None:
    # PyTorch: kaiming_uniform_(a=sqrt(5)) -> bound 1/sqrt(fan_in), fan_in from the weight's axis 1.
    torch.manual_seed(0)
    layer = getattr(nn, name)(6, 32, (3, 2), groups=2, key=KEY)
    tlayer = getattr(torch.nn, name)(6, 32, (3, 2), groups=2)
    bound = 1 / math.sqrt(layer.weight.shape[1] * 3 * 2)
    for ours, theirs in ((layer.weight, tlayer.weight), (layer.bias, tlayer.bias)):
        ours_max, theirs_max = float(jnp.max(jnp.abs(ours))), float(theirs.detach().abs().max())
        assert ours_max <= bound and theirs_max <= bound
        assert ours_max > 0.6 * bound and theirs_max > 0.6 * bound
    # Spread as uniform(-b, b) (std b / sqrt(3)), like torch's, over 12,288 draws.
    w = np.asarray(nn.Conv1d(64, 64, 3, key=KEY).weight)
    tw = torch.nn.Conv1d(64, 64, 3).weight.detach().numpy()
    b = 1 / math.sqrt(64 * 3)
    assert w.std() == pytest.approx(b / math.sqrt(3), rel=0.03) and tw.std() == pytest.approx(b / math.sqrt(3), rel=0.03)


@pytest.mark.slow
def test_conv_per_side_padding_equals_torch_pad_then_conv() -> None:
    layer = nn.Conv2d(2, 3, (3, 2), padding=((1, 2), (0, 1)), key=KEY)
    tlayer = torch.nn.Conv2d(2, 3, (3, 2))
    copy_to_torch(layer, tlayer)
    x = _rng().standard_normal((2, 2, 6, 5)).astype(np.float32)
    with torch.no_grad():
        expected = tlayer(torch.nn.functional.pad(torch.from_numpy(x), (0, 1, 1, 2))).numpy()
    np.testing.assert_allclose(_batch(layer, x), expected, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_conv_transpose_is_the_gradient_of_conv() -> None:
    # The transposed convolution is the vector-Jacobian product of the convolution with the
    # same weight (PyTorch's definition); checked with jax.vjp, independently of torch.
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1, key=KEY)
    convt = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1, use_bias=False, key=KEY)
    convt = spruce.tree_at(lambda m: m.weight, convt, conv.weight)
    x = jnp.asarray(_rng().standard_normal((3, 8, 8)), jnp.float32)
    y, vjp = jax.vjp(lambda x: conv(x) - conv.bias[:, None, None], x)
    g = jnp.asarray(_rng(1).standard_normal(y.shape), jnp.float32)
    np.testing.assert_allclose(convt(g), vjp(g)[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ pooling

POOL_CASES = [
    ("MaxPool1d", dict(kernel_size=3, stride=2, padding=1), (2, 3, 10)),
    ("MaxPool1d", dict(kernel_size=2, ceil_mode=True), (2, 3, 9)),
    ("MaxPool2d", dict(kernel_size=(2, 1)), (2, 3, 9, 4)),
    ("MaxPool2d", dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2), ceil_mode=True), (2, 2, 10, 7)),
    ("MaxPool3d", dict(kernel_size=2, stride=1, padding=1), (2, 2, 4, 5, 3)),
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1), (2, 3, 10)),
    ("AvgPool1d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True), (2, 3, 10)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 2, 10, 8)),
    ("AvgPool2d", dict(kernel_size=(2, 3), padding=(1, 1), count_include_pad=False), (2, 2, 7, 8)),
    ("AvgPool2d", dict(kernel_size=2, divisor_override=3), (2, 2, 6, 6)),
    ("AvgPool3d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), (2, 2, 6, 7, 5)),
    ("AdaptiveAvgPool1d", dict(output_size=3), (2, 3, 10)),
    ("AdaptiveAvgPool1d", dict(output_size=7), (2, 3, 5)),
    ("AdaptiveAvgPool2d", dict(output_size=(4, 5)), (2, 2, 10, 7)),
    ("AdaptiveAvgPool2d", dict(output_size=(3, None)), (2, 2, 10, 7)),
    ("AdaptiveAvgPool2d", dict(output_size=1), (2, 2, 6, 6)),
    ("AdaptiveMaxPool1d", dict(output_size=4), (2, 3, 10)),
    ("AdaptiveMaxPool2d", dict(output_size=(3, 9)), (2, 2, 10, 7)),
    ("AdaptiveAvgPool3d", dict(output_size=(2, None, 3)), (2, 2, 5, 3, 7)),
    ("AdaptiveMaxPool3d", dict(output_size=(3, 2, 4)), (2, 2, 5, 3, 7)),
]


@pytest.mark.parametrize(("name", "kw", "shape"), POOL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL_CASES)])
def test_pool_matches_torch(name: str, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    layer = getattr(nn, name)(**kw)
    tlayer = getattr(torch.nn, name)(**kw)
    x = _rng().standard_normal(shape).astype(np.float32)
    expected = tlayer(torch.from_numpy(x)).numpy()
    got = _batch(layer, x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    assert spruce.tree.leaves(layer) == []


@pytest.mark.parametrize(("name", "kw", "shape"), POOL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(POOL_CASES)])
def test_pool_gradient_under_jit_matches_torch(name: str, kw: dict[str, Any], shape: tuple[int, ...]) -> None:
    """The gradient of ``sum(w * pool(x))`` with respect to x, by jax.grad under jax.jit (batched
    with vmap), equals torch autograd's (max: to each window's maximum; average: spread over the
    window by PyTorch's divisor)."""
    layer = getattr(nn, name)(**kw)
    tlayer = getattr(torch.nn, name)(**kw)
    x = _rng().standard_normal(shape).astype(np.float32)  # (distinct values: no ties)
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    ty = tlayer(tx)
    w = _rng(1).uniform(0.5, 1.5, tuple(ty.shape)).astype(np.float32)
    (ty * torch.from_numpy(w)).sum().backward()
    assert tx.grad is not None
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.asarray(w) * jax.vmap(layer)(x))))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(grad), tx.grad.numpy(), rtol=RTOL, atol=ATOL)
    assert np.count_nonzero(tx.grad.numpy()) > 0


# ------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    ("tname", "shape", "kw"),
    [
        ("BatchNorm1d", (3, 4), {}),
        ("BatchNorm1d", (3, 4, 6), {"eps": 1e-3}),
        ("BatchNorm2d", (3, 4, 5, 2), {"affine": False}),
        ("BatchNorm3d", (2, 3, 2, 3, 4), {"momentum": 0.5}),
    ],
)
def test_batchnorm_inference_matches_torch_eval(tname: str, shape: tuple[int, ...], kw: dict[str, Any], tmp_path: Any) -> None:
    layer = nn.BatchNorm(shape[1], inference=True, **kw)
    tlayer = getattr(torch.nn, tname)(shape[1], **kw).eval()
    _randomise(tlayer, seed=2)  # running statistics and affine parameters away from 0 / 1
    loaded = load_from_torch(tlayer, layer, tmp_path)
    x = (_rng().standard_normal(shape) * 3 + 1).astype(np.float32)
    with torch.no_grad():
        expected = tlayer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_batch(loaded, x), expected, rtol=RTOL, atol=ATOL)
    check_both_ways(loaded, tlayer, x, tmp_path)


@pytest.mark.parametrize(("shape", "affine"), [((8, 3), True), ((4, 3, 5, 6), True), ((3, 2, 7), False)])
def test_batchnorm_training_matches_torch_train(shape: tuple[int, ...], affine: bool, tmp_path: Any) -> None:
    tlayer = getattr(torch.nn, f"BatchNorm{max(1, len(shape) - 2)}d")(shape[1], momentum=0.3, affine=affine).train()
    _randomise(tlayer, seed=3)
    layer = load_from_torch(tlayer, nn.BatchNorm(shape[1], momentum=0.3, affine=affine, axis_name="batch"), tmp_path)
    state = nn.State(layer)
    step = jax.jit(jax.vmap(layer, axis_name="batch", in_axes=(0, None), out_axes=(0, None)))
    for i in range(3):
        x = (_rng(i).standard_normal(shape) * (i + 1) + i).astype(np.float32)
        y, state = step(jnp.asarray(x), state)
        with torch.no_grad():
            expected = tlayer(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(np.asarray(y), expected, rtol=RTOL, atol=ATOL)
        mean, var, count = state.get(layer)
        assert int(count) == int(tlayer.num_batches_tracked) == i + 1  # counted with any momentum
        # PyTorch updates running_var with the unbiased batch variance.
        np.testing.assert_allclose(mean, tlayer.running_mean.numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(var, tlayer.running_var.numpy(), rtol=RTOL, atol=ATOL)
    trained = nn.inference_mode(nn.update_state(layer, state))
    tlayer.eval()
    x = _rng(9).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(_batch(trained, x), tlayer(torch.from_numpy(x)).numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", [(6, 3), (4, 2, 5)])
def test_batchnorm_cumulative_average_matches_torch(shape: tuple[int, ...], tmp_path: Any) -> None:
    """momentum=None: PyTorch's cumulative moving average, with its num_batches_tracked buffer."""
    tlayer = getattr(torch.nn, f"BatchNorm{max(1, len(shape) - 2)}d")(shape[1], momentum=None).train()
    _randomise(tlayer, seed=4)
    with torch.no_grad():
        tlayer.num_batches_tracked.fill_(2)  # resuming: two batches already seen
    layer = nn.BatchNorm(shape[1], momentum=None, axis_name="batch")
    path = os.path.join(tmp_path, "torch.safetensors")
    save_file({k: v.detach().numpy().copy() for k, v in tlayer.state_dict().items()}, path)
    layer = spruce.io.load(path, like=layer)  # every name, num_batches_tracked (int64) included
    assert int(layer.num_batches_tracked) == 2 and layer.num_batches_tracked.dtype == np.int64
    state = nn.State(layer)
    step = jax.jit(jax.vmap(layer, axis_name="batch", in_axes=(0, None), out_axes=(0, None)))
    for i in range(4):
        x = (_rng(i).standard_normal(shape) * (i + 1) - i).astype(np.float32)
        y, state = step(jnp.asarray(x), state)
        with torch.no_grad():
            expected = tlayer(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(np.asarray(y), expected, rtol=RTOL, atol=ATOL)
        mean, var, count = state.get(layer)
        assert int(count) == int(tlayer.num_batches_tracked) == 3 + i
        np.testing.assert_allclose(mean, tlayer.running_mean.numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(var, tlayer.running_var.numpy(), rtol=RTOL, atol=ATOL)
    trained = nn.update_state(layer, state)
    # And back into torch by name: the spruce layer's state dict is torch's, buffer included.
    fresh = getattr(torch.nn, f"BatchNorm{max(1, len(shape) - 2)}d")(shape[1], momentum=None)
    sd = {name: torch.from_numpy(np.array(v)) for name, v in spruce.io.flatten_names(trained).items()}
    assert sorted(sd) == sorted(fresh.state_dict())
    fresh.load_state_dict(sd)
    assert fresh.num_batches_tracked.dtype == torch.int64 and int(fresh.num_batches_tracked) == 6
    for name in ("running_mean", "running_var", "weight", "bias"):
        np.testing.assert_allclose(
            getattr(fresh, name).detach().numpy(), getattr(tlayer, name).detach().numpy(), rtol=RTOL, atol=ATOL
        )


def test_batchnorm_without_running_stats_matches_torch() -> None:
    layer = nn.BatchNorm(3, track_running_stats=False, axis_name="b", inference=True)
    tlayer = torch.nn.BatchNorm1d(3, track_running_stats=False).eval()  # batch statistics in eval too
    assert layer.running_mean is None and layer.state_index is None
    x = _rng().standard_normal((5, 3, 4)).astype(np.float32)
    got = jax.vmap(layer, axis_name="b")(jnp.asarray(x))
    with torch.no_grad():
        np.testing.assert_allclose(got, tlayer(torch.from_numpy(x)).numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("groups", "channels", "affine", "shape"),
                         [(1, 4, True, (2, 4, 7)), (2, 4, True, (2, 4, 3, 5)), (6, 6, False, (2, 6, 4)), (3, 6, True, (2, 6))])
def test_groupnorm_matches_torch(groups: int, channels: int, affine: bool, shape: tuple[int, ...], tmp_path: Any) -> None:
    layer = nn.GroupNorm(groups, channels, eps=1e-4, affine=affine)
    tlayer = torch.nn.GroupNorm(groups, channels, eps=1e-4, affine=affine)
    x = (_rng().standard_normal(shape) * 2 + 3).astype(np.float32)
    if affine:
        check_both_ways(layer, tlayer, x, tmp_path)
    else:
        assert spruce.tree.leaves(layer) == []
        np.testing.assert_allclose(_batch(layer, x), tlayer(torch.from_numpy(x)).detach().numpy(), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ activations, cells, embeddings


@pytest.mark.parametrize(("num", "shape"), [(1, (2, 5)), (3, (2, 3, 4, 2)), (4, (2, 4))])
def test_prelu_matches_torch(num: int, shape: tuple[int, ...], tmp_path: Any) -> None:
    x = _rng().standard_normal(shape).astype(np.float32)
    check_both_ways(nn.PReLU(num, init=0.1), torch.nn.PReLU(num, init=0.1), x, tmp_path)


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.slow
def test_lstm_cell_matches_torch_over_a_sequence(use_bias: bool, tmp_path: Any) -> None:
    layer = nn.LSTMCell(3, 5, use_bias=use_bias, key=KEY)
    tlayer = torch.nn.LSTMCell(3, 5, bias=use_bias)
    xs = _rng().standard_normal((2, 6, 3)).astype(np.float32)  # batch 2, 6 steps

    def run(cell: Any) -> tuple[np.ndarray, np.ndarray]:
        def step(hc: Any, x: jax.Array) -> Any:
            h, c = cell(x, hc)
            return (h, c), h

        def one(seq: jax.Array) -> Any:
            return jax.lax.scan(step, (jnp.zeros(5), jnp.zeros(5)), seq)

        (h, c), hs = jax.jit(jax.vmap(one))(jnp.asarray(xs))
        return np.asarray(hs), np.asarray(c)

    def run_torch() -> tuple[np.ndarray, np.ndarray]:
        hx = None
        hs = []
        with torch.no_grad():
            for t in range(xs.shape[1]):
                hx = tlayer(torch.from_numpy(xs[:, t]), hx)
                hs.append(hx[0].numpy())
        assert hx is not None
        return np.stack(hs, 1), hx[1].numpy()

    copy_to_torch(layer, tlayer)
    for ours, theirs in zip(run(layer), run_torch()):
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)
    _randomise(tlayer, seed=4)
    loaded = load_from_torch(tlayer, layer, tmp_path)
    for ours, theirs in zip(run(loaded), run_torch()):
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)
    h, c = loaded(jnp.asarray(xs[0, 0]))  # hidden=None: zeros, as PyTorch
    with torch.no_grad():
        th, tc = tlayer(torch.from_numpy(xs[:1, 0]))
    np.testing.assert_allclose(h, th[0].numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.slow
def test_gru_cell_matches_torch(use_bias: bool, tmp_path: Any) -> None:
    layer = nn.GRUCell(4, 3, use_bias=use_bias, key=KEY)
    tlayer = torch.nn.GRUCell(4, 3, bias=use_bias)
    x = _rng().standard_normal((2, 4)).astype(np.float32)
    h = _rng(1).standard_normal((2, 3)).astype(np.float32)
    for current in (layer, None):
        if current is None:
            _randomise(tlayer, seed=5)
            current = load_from_torch(tlayer, layer, tmp_path)
        else:
            copy_to_torch(current, tlayer)
        got = jax.vmap(current)(jnp.asarray(x), jnp.asarray(h))
        with torch.no_grad():
            np.testing.assert_allclose(got, tlayer(torch.from_numpy(x), torch.from_numpy(h)).numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_rnn_cell_initialisation_bounds_match_torch() -> None:
    torch.manual_seed(0)
    layer, tlayer = nn.GRUCell(4, 16, key=KEY), torch.nn.GRUCell(4, 16)
    bound = 1 / math.sqrt(16)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        ours, theirs = float(jnp.max(jnp.abs(getattr(layer, name)))), float(getattr(tlayer, name).detach().abs().max())
        assert 0.6 * bound < ours <= bound and 0.6 * bound < theirs <= bound


def _hf_rope(x: Any, positions: Any, theta: float) -> Any:
    """Hugging Face transformers' LLaMA rotary embedding (rotate_half layout), in torch."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


@pytest.mark.slow
def test_rotary_embedding_matches_hugging_face_layout() -> None:
    rope = nn.RotaryPositionalEmbedding(16, theta=500.0)
    x = _rng().standard_normal((2, 3, 7, 16)).astype(np.float32)  # batch, heads, seq, dim
    got = jax.vmap(jax.vmap(rope))(jnp.asarray(x))
    expected = _hf_rope(torch.from_numpy(x), torch.arange(7), 500.0).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    pos = np.array([5, 9, 11, 0, 2, 3, 100])
    np.testing.assert_allclose(rope(jnp.asarray(x[0, 0]), jnp.asarray(pos)),
                               _hf_rope(torch.from_numpy(x[0, 0]), torch.from_numpy(pos), 500.0).numpy(), rtol=1e-5, atol=2e-5)


@pytest.mark.slow
def test_embedding_and_linear_match_torch(tmp_path: Any) -> None:
    x = _rng().standard_normal((2, 5)).astype(np.float32)
    check_both_ways(nn.Linear(5, 3, key=KEY), torch.nn.Linear(5, 3), x, tmp_path, reduced=5)
    emb, temb = nn.Embedding(7, 3, key=KEY), torch.nn.Embedding(7, 3)
    copy_to_torch(emb, temb)
    idx = np.array([[0, 6, 2], [3, 3, 1]])
    with torch.no_grad():
        np.testing.assert_array_equal(np.asarray(jax.vmap(emb)(jnp.asarray(idx))), temb(torch.from_numpy(idx)).numpy())


@pytest.mark.parametrize("fmt", ["torch.save", "safetensors"])
def test_torch_sequential_state_dict_loads_strictly_into_sequential(fmt: str, tmp_path: Any) -> None:
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    k1, k2 = jax.random.split(KEY)
    model = nn.Sequential([nn.Linear(4, 3, key=k1), nn.Lambda(jax.nn.relu), nn.Linear(3, 2, key=k2)])
    assert sorted(spruce.io.flatten_names(model)) == sorted(tmodel.state_dict()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    if fmt == "torch.save":
        path = os.path.join(tmp_path, "seq.pth")
        torch.save(tmodel.state_dict(), path)
    else:
        path = os.path.join(tmp_path, "seq.safetensors")
        save_file({k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()}, path)
    loaded = spruce.io.load(path, like=model)  # strict: every name used, every leaf filled
    assert type(loaded) is nn.Sequential and len(loaded) == 3
    for name, value in tmodel.state_dict().items():
        np.testing.assert_array_equal(np.asarray(spruce.io.flatten_names(loaded)[name]), value.detach().numpy())
    x = _rng().standard_normal((5, 4)).astype(np.float32)
    with torch.no_grad():
        expected = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_batch(loaded, x), expected, rtol=RTOL, atol=ATOL)
    # Nested in a Module, the names are PyTorch's for a submodule Sequential too.
    class Net(spruce.Module):
        encoder: nn.Sequential

    tnet = torch.nn.Module()
    tnet.encoder = tmodel
    assert sorted(spruce.io.flatten_names(Net(model))) == sorted(tnet.state_dict())


@pytest.mark.slow
def test_small_model_state_dict_loads_by_name(tmp_path: Any) -> None:
    # A CREPE-style stack: a whole PyTorch Sequential's state_dict (BatchNorm's counters
    # included) loads strictly into the spruce Sequential by name, and the outputs agree.
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, (8, 1), stride=(2, 1), padding=(3, 0)), torch.nn.ReLU(),
        torch.nn.BatchNorm2d(4, eps=1e-3), torch.nn.MaxPool2d((2, 1)),
        torch.nn.Conv2d(4, 2, (4, 1), padding="same"), torch.nn.ReLU(), torch.nn.BatchNorm2d(2, eps=1e-3),
    ).eval()
    for m in tmodel:
        if isinstance(m, torch.nn.BatchNorm2d):
            _randomise(m, seed=6)
    keys = jax.random.split(KEY, 2)
    model = nn.Sequential([
        nn.Conv2d(1, 4, (8, 1), stride=(2, 1), padding=(3, 0), key=keys[0]), nn.Lambda(jax.nn.relu),
        nn.BatchNorm(4, eps=1e-3, inference=True), nn.MaxPool2d((2, 1)),
        nn.Conv2d(4, 2, (4, 1), padding="same", key=keys[1]), nn.Lambda(jax.nn.relu), nn.BatchNorm(2, eps=1e-3, inference=True),
    ])
    path = os.path.join(tmp_path, "model.safetensors")
    save_file({k: v.numpy() for k, v in tmodel.state_dict().items()}, path)
    loaded = spruce.io.load(path, like=model)
    x = _rng().standard_normal((3, 1, 64, 1)).astype(np.float32)
    with torch.no_grad():
        expected = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_batch(loaded, x), expected, **_tolerance(32))


@pytest.mark.slow
def test_tied_weights_match_torch_tied_gradient() -> None:
    emb, head = nn.Embedding(6, 4, key=KEY), nn.Linear(4, 6, use_bias=False, key=jax.random.key(1))
    shared = nn.Shared((emb, head), lambda t: t[1].weight, lambda t: t[0].weight)
    temb, thead = torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False)
    copy_to_torch(emb, temb)
    thead.weight = temb.weight  # PyTorch's tying
    ids = np.array([1, 4, 4])

    def loss(s: Any) -> jax.Array:
        e, h = s()
        return jnp.sum(jax.nn.log_softmax(jax.vmap(h)(e(jnp.asarray(ids))))[:, 0])

    g = jax.grad(loss)(shared)
    tl = torch.log_softmax(thead(temb(torch.from_numpy(ids))), -1)[:, 0].sum()
    tl.backward()
    assert g.pytree[1].weight is None  # the tied place holds no array
    np.testing.assert_allclose(g.pytree[0].weight, temb.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss(shared), tl.item(), rtol=1e-5)


# ------------------------------------------------------------------ attention

MHA_CASES = [
    dict(),
    dict(kdim=3, vdim=5),  # separate q/k/v projection weights
    dict(bias=False),
    dict(add_bias_kv=True),
    dict(add_zero_attn=True),
    dict(bias=False, add_bias_kv=True, add_zero_attn=True, kdim=6),
]


def _mha_calls(lq: int, lk: int, heads: int, extra_keys: bool) -> list[dict[str, Any]]:
    """Keyword arguments of the forward call (torch's names, torch's mask conventions).

    With keys appended (add_bias_kv, add_zero_attn), torch's ``is_causal`` without weights
    drops the padded attn_mask and applies its own causal mask to the longer key sequence,
    which blocks the appended keys (its ``need_weights=True`` path keeps them): that call is
    compared only without appended keys."""
    rng = _rng(7)
    blocked = np.zeros((lq, lk), bool)
    blocked[0, 1] = blocked[2, 0] = True
    padding = np.array([False, False, True, False, False])
    return [
        {},
        {"attn_mask": blocked, "key_padding_mask": padding},
        {"attn_mask": np.stack([blocked, ~np.tri(lq, lk, dtype=bool)]), "average_attn_weights": False},
        {"attn_mask": rng.standard_normal((heads, lq, lk)).astype(np.float32),
         "key_padding_mask": np.where(padding, -2.0, 0.5).astype(np.float32)},
        {"attn_mask": ~np.tri(lq, lk, dtype=bool), "is_causal": True},
        {"key_padding_mask": padding, "need_weights": False},
    ] + ([] if extra_keys else [{"attn_mask": ~np.tri(lq, lk, dtype=bool), "is_causal": True, "need_weights": False}])


def _compare_mha(layer: Any, tlayer: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    tol = _tolerance(q.shape[-1])
    extra_keys = layer.bias_k is not None or layer.add_zero_attn
    for kw in _mha_calls(q.shape[0], k.shape[0], layer.num_heads, extra_keys):
        tkw = {n: torch.from_numpy(a) if isinstance(a, np.ndarray) else a for n, a in kw.items()}
        with torch.no_grad():
            t_out, t_w = tlayer(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), **tkw)
        out, w = layer(q, k, v, **kw)
        assert out.shape == tuple(t_out.shape) and out.dtype == np.float32, kw
        np.testing.assert_allclose(out, t_out.numpy(), **tol, err_msg=str(kw))
        if t_w is None:
            assert w is None
        else:
            assert w is not None and w.shape == tuple(t_w.shape), kw
            np.testing.assert_allclose(w, t_w.numpy(), **tol, err_msg=str(kw))


@pytest.mark.parametrize("kw", MHA_CASES, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
@pytest.mark.slow
def test_multihead_attention_matches_torch(kw: dict[str, Any], tmp_path: Any) -> None:
    e, heads, lq, lk = 8, 2, 3, 5
    layer = nn.MultiheadAttention(e, heads, **kw, key=KEY)
    tlayer = torch.nn.MultiheadAttention(e, heads, **kw).eval()
    rng = _rng(3)
    q = rng.standard_normal((lq, e)).astype(np.float32)
    k = rng.standard_normal((lk, kw.get("kdim", e))).astype(np.float32)
    v = rng.standard_normal((lk, kw.get("vdim", e))).astype(np.float32)
    copy_to_torch(layer, tlayer)  # the key sets are equal, then spruce's parameters -> torch
    _compare_mha(layer, tlayer, q, k, v)
    _randomise(tlayer, seed=8)  # nonzero biases; then torch's state_dict -> spruce by name
    _compare_mha(load_from_torch(tlayer, layer, tmp_path), tlayer, q, k, v)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_vmap_matches_torch_batches(batch_first: bool, tmp_path: Any) -> None:
    # Self-attention on a batch in eval mode without gradients: torch's fast path when batch_first.
    tlayer = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    _randomise(tlayer, seed=9)
    layer = load_from_torch(tlayer, nn.MultiheadAttention(8, 2, key=KEY), tmp_path)
    x = _rng(4).standard_normal((3, 4, 8)).astype(np.float32)  # (N, L, E)
    padding = np.zeros((3, 4), bool)  # (N, L)
    padding[1, 2:] = True
    axis = 0 if batch_first else 1
    if not batch_first:
        x = np.ascontiguousarray(x.swapaxes(0, 1))  # (L, N, E)
    with torch.no_grad():
        t_out, t_w = tlayer(*(torch.from_numpy(x),) * 3, key_padding_mask=torch.from_numpy(padding))
    out, w = jax.vmap(lambda a, m: layer(a, a, a, key_padding_mask=m), in_axes=(axis, 0), out_axes=(axis, 0))(x, padding)
    np.testing.assert_allclose(out, t_out.numpy(), **_tolerance(8))
    np.testing.assert_allclose(w, t_w.numpy(), **_tolerance(8))


@pytest.mark.slow
def test_multihead_attention_initialisation_matches_torch_statistics() -> None:
    # Same rules: xavier uniform input projections, zero biases, Linear's out_proj, xavier
    # normal bias_k / bias_v; compared by bounds and standard deviations over a large layer.
    torch.manual_seed(0)
    e = 256
    layer = nn.MultiheadAttention(e, 4, add_bias_kv=True, kdim=64, key=KEY)
    tlayer = torch.nn.MultiheadAttention(e, 4, add_bias_kv=True, kdim=64)
    ours = {n: np.asarray(v) for n, v in spruce.io.flatten_names(layer).items()}
    theirs = _torch_params(tlayer)
    assert sorted(ours) == sorted(theirs)
    for name, t in theirs.items():
        o = ours[name]
        assert o.shape == t.shape and o.dtype == t.dtype, name
        if not t.any():
            np.testing.assert_array_equal(o, t, err_msg=name)  # zero biases
            continue
        np.testing.assert_allclose(o.std(), t.std(), rtol=0.2, err_msg=name)  # sampling noise of 256 values (bias_k) at worst
        if name.endswith("weight"):
            np.testing.assert_allclose(np.abs(o).max(), np.abs(t).max(), rtol=0.05, err_msg=name)


@pytest.mark.slow
def test_torch_is_not_imported_by_the_library() -> None:
    import subprocess
    import sys

    code = "import sys, spruce, spruce.nn, spruce.io, spruce.jax; sys.exit('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0

