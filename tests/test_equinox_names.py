"""Names spruce shares with Equinox, with Equinox's semantics, each compared with Equinox's own
function (a test dependency) and, for the layers, with PyTorch: ``is_inexact_array_like``,
``if_array`` (and callables in ``filter_vmap``'s ``in_axes``), ``tree_check``, the warning for a
field assigned a JAX-transformed callable that hides arrays, ``nn.WeightNorm`` and
``nn.SpectralNorm``."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import warnings
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import spruce
import spruce.io
import spruce.nn as nn
from spruce.jax import filter_grad, filter_vmap

try:
    import torch
except ImportError:  # a test-only dependency; the comparisons with PyTorch skip without it
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the PyTorch comparisons need it")
KEY = jax.random.key(0)
# Outputs of layers (float32 matrix products and norms, summed in different orders by XLA and
# by PyTorch or by Equinox's differently shaped computation) agree to a few float32 ulps.
LAYER_RTOL, LAYER_ATOL = 1e-5, 1e-5


def _close(a: Any, b: Any, rtol: float = LAYER_RTOL, atol: float = LAYER_ATOL) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# -- is_inexact_array_like ---------------------------------------------------------------------


class _HasJaxArray:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __jax_array__(self) -> Any:
        return jnp.asarray(self.value)


def _objects() -> list[Any]:
    return [
        1,
        2.0,
        1j,
        [2.0],
        True,
        None,
        "text",
        object(),
        jnp.array([1]),
        jnp.array(1.0),
        jnp.array([1 + 2j]),
        jnp.array([True]),
        jnp.zeros(2, jnp.bfloat16),
        np.array(1.0),
        np.array(1),
        np.float32(1.5),
        np.int8(3),
        np.complex64(1j),
        _HasJaxArray(1.0),
        _HasJaxArray(1),
        nn.Linear(1, 1, key=KEY),
    ]


def test_is_inexact_array_like_agrees_with_equinox() -> None:
    objs = _objects()
    assert [spruce.is_inexact_array_like(o) for o in objs] == [eqx.is_inexact_array_like(o) for o in objs]
    assert [spruce.is_inexact_array_like(o) for o in objs] == [
        False, True, True, False, False, False, False, False, False, True, True, False, True,
        True, False, True, False, True, True, False, False,
    ]  # fmt: skip


def test_is_inexact_array_like_takes_a_numpy_bfloat16_array_as_inexact() -> None:
    # A deliberate difference: the same array as JAX's is inexact for both libraries; a NumPy
    # bfloat16 (an ml_dtypes float) array is too for spruce, as for spruce.is_inexact_array.
    x = np.zeros(2, ml_dtypes.bfloat16)
    assert spruce.is_inexact_array_like(x) and spruce.is_inexact_array(x)
    assert not eqx.is_inexact_array_like(x)


def test_is_inexact_array_like_is_exported_and_does_not_import_jax() -> None:
    assert "is_inexact_array_like" in spruce.__all__ and "if_array" in spruce.__all__
    code = (
        "import sys, spruce\n"
        "assert spruce.is_inexact_array_like(1.0) and spruce.if_array(0)(1.0) is None\n"
        "assert 'jax' not in sys.modules, 'spruce imported jax'\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# -- if_array ----------------------------------------------------------------------------------


def test_if_array_agrees_with_equinox() -> None:
    objs = _objects()
    for axis in (0, 1, -1):
        assert [spruce.if_array(axis)(o) for o in objs] == [eqx.if_array(axis)(o) for o in objs]
    assert spruce.if_array(1)(np.zeros(3)) == 1 and spruce.if_array(1)(3.0) is None


def test_if_array_compares_and_hashes_by_axis_and_is_a_leaf() -> None:
    assert spruce.if_array(0) == spruce.if_array(0) and spruce.if_array(0) != spruce.if_array(1)
    assert hash(spruce.if_array(2)) == hash(spruce.if_array(2))
    spec = spruce.if_array(0)
    assert spruce.tree.leaves(spec) == [spec] and jax.tree_util.tree_leaves(spec) == [spec]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.axis = 1  # type: ignore[misc]


@pytest.mark.parametrize("axis", ["0", 1.0, True, None])
def test_if_array_refuses_an_axis_that_is_not_an_int(axis: Any) -> None:
    with pytest.raises(TypeError, match=r"if_array\(axis\): axis must be an int, got"):
        spruce.if_array(axis)


def test_filter_vmap_takes_if_array_in_axes() -> None:
    def f(m: Any, x: Any) -> Any:
        return m["w"] * x + m["n"]

    xs = jnp.arange(3.0)
    m = {"w": jnp.array([1.0, 2.0, 3.0]), "n": 10}
    out = filter_vmap(f, in_axes=(spruce.if_array(0), None))(m, 2.0)
    np.testing.assert_array_equal(np.asarray(out), [12.0, 14.0, 16.0])
    out = filter_vmap(f, in_axes=({"w": spruce.if_array(0), "n": None}, spruce.if_array(0)))(m, xs)
    np.testing.assert_array_equal(np.asarray(out), [10.0, 12.0, 16.0])
    out = filter_vmap(f, in_axes=spruce.if_array(0))(m, xs)
    np.testing.assert_array_equal(np.asarray(out), [10.0, 12.0, 16.0])
    # the same call through Equinox gives the same numbers
    np.testing.assert_array_equal(np.asarray(eqx.filter_vmap(f, in_axes=eqx.if_array(0))(m, xs)), np.asarray(out))


def test_filter_vmap_takes_any_callable_in_axes_and_checks_what_it_returns() -> None:
    by_rank = lambda leaf: 1 if getattr(leaf, "ndim", 0) == 2 else None
    out = filter_vmap(lambda a, b: a.sum() + b, in_axes=by_rank)(jnp.ones((2, 3)), jnp.ones(()))
    assert out.shape == (3,)
    np.testing.assert_array_equal(np.asarray(out), [3.0, 3.0, 3.0])
    with pytest.raises(
        ValueError,
        match=r"filter_vmap: the callable at in_axes\[1\] returned 'x' for the leaf at \['b'\]\[0\]; it must return an int",
    ):
        filter_vmap(lambda a, d: a, in_axes=lambda leaf: "x" if leaf.ndim == 1 else 0)(jnp.ones((2, 2)), {"b": [jnp.ones(2)]})


def test_filter_vmap_out_axes_if_array() -> None:
    out = filter_vmap(lambda x: jnp.stack([x, -x]), out_axes=spruce.if_array(1))(jnp.arange(3.0))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(out), [[0.0, 1.0, 2.0], [-0.0, -1.0, -2.0]])
    # any callable (leaf -> int | None) is an out_axes spec, as in Equinox
    same = filter_vmap(lambda x: jnp.stack([x, -x]), out_axes=lambda leaf: 1)(jnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(same), np.asarray(out))


# -- tree_check --------------------------------------------------------------------------------


def _cases() -> list[tuple[str, Callable[[], Any]]]:
    def cycle2() -> Any:
        x: list[Any] = []
        y: list[Any] = [x]
        x.append(y)
        return x

    def cycle1() -> Any:
        x: list[Any] = []
        x.append(x)
        return x

    def dict_cycle() -> Any:
        d: dict[str, Any] = {"a": 1}
        d["self"] = [d]
        return d

    def shared_list() -> Any:
        e = [1]
        return [e, e]

    def shared_linear() -> Any:
        lin = nn.Linear(2, 2, key=KEY)
        return {"a": lin, "b": (lin,)}

    def empty_module() -> Any:
        m = spruce.Module()
        return [m, m]

    def empty_list() -> Any:
        c: list[Any] = []
        return [c, c]

    def shared_leaf() -> Any:
        a = jnp.ones(2)
        return [a, a, {"k": a}]

    return [
        ("cycle of two lists", cycle2),
        ("list inside itself", cycle1),
        ("dict inside itself", dict_cycle),
        ("a list twice", shared_list),
        ("a Linear twice", shared_linear),
        ("None twice", lambda: [None, None]),
        ("an int twice", lambda: [0, 0]),
        ("an empty Module twice", empty_module),
        ("an empty list twice", empty_list),
        ("an array leaf three times", shared_leaf),
        ("equal but distinct lists", lambda: [[1], [1]]),
        ("two distinct Linears", lambda: [nn.Linear(2, 2, key=KEY), nn.Linear(2, 2, key=KEY)]),
        ("a list holding an empty list, twice", lambda: (lambda e: [e, e])([[]])),
    ]


def _raises(check: Callable[[Any], Any], tree: Any) -> bool:
    try:
        check(tree)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("make", [c[1] for c in _cases()], ids=[c[0] for c in _cases()])
def test_tree_check_agrees_with_equinox(make: Callable[[], Any]) -> None:
    tree = make()
    assert _raises(spruce.tree_check, tree) == _raises(eqx.tree_check, tree)


def test_tree_check_verdicts() -> None:
    verdicts = {name: _raises(spruce.tree_check, make()) for name, make in _cases()}
    assert [name for name, bad in verdicts.items() if bad] == [
        "cycle of two lists",
        "list inside itself",
        "dict inside itself",
        "a list twice",
        "a Linear twice",
        "a list holding an empty list, twice",
    ]
    assert spruce.tree_check({"a": 1}) is None


def test_tree_check_names_the_key_paths() -> None:
    e = [1]
    with pytest.raises(ValueError) as info:
        spruce.tree_check({"q": [e, (e,)]})
    assert str(info.value) == (
        "tree_check: the list at ['q'][0] appears again at ['q'][1][0]: a node with children may "
        "appear only once in a pytree (transforms such as jax.jit flatten and rebuild the tree, "
        "which makes two independent copies of it); leaves and empty nodes may repeat"
    )

    class Pair(spruce.Module):
        a: Any
        b: Any

    lin = nn.Linear(2, 2, key=KEY)
    with pytest.raises(ValueError, match=r"^tree_check: the Linear at \.a appears again at \.b\[1\]:"):
        spruce.tree_check(Pair(lin, [0, lin]))

    x: list[Any] = []
    y: list[Any] = [x]
    x.append(y)
    with pytest.raises(
        ValueError, match=r"^tree_check: the list at the root contains itself at \[0\]\[0\]: a pytree cannot hold a cycle$"
    ):
        spruce.tree_check(x)
    d: dict[str, Any] = {"k": [0]}
    d["k"].append(d["k"])
    with pytest.raises(
        ValueError, match=r"^tree_check: the list at \['k'\] contains itself at \['k'\]\[1\]: a pytree cannot hold a cycle$"
    ):
        spruce.tree_check(d)


def test_tree_check_handles_any_depth() -> None:
    deep: list[Any] = [1]
    for _ in range(50_000):
        deep = [deep]
    spruce.tree_check(deep)
    with pytest.raises(ValueError, match=r"^tree_check: the list at \[0\] appears again at \[1\]"):
        spruce.tree_check([deep, deep])


# -- the warning for a field holding a JAX-transformed callable ---------------------------------

TRANSFORMS = [jax.jit, jax.grad, jax.vmap, jax.value_and_grad, jax.jacfwd, jax.jacrev, jax.hessian,
              jax.custom_jvp, jax.custom_vjp, jax.checkpoint, jax.pmap]  # fmt: skip
MSG = "Possibly assigning a JAX-transformed callable as an attribute on"


class Generated(spruce.Module):
    f: Any


class HandWritten(spruce.Module):
    f: Any

    def __init__(self, f: Any) -> None:
        self.f = f


class EqxGenerated(eqx.Module):
    f: Any


@pytest.mark.parametrize("cls", [Generated, HandWritten])
@pytest.mark.parametrize("transform", TRANSFORMS, ids=[t.__name__ for t in TRANSFORMS])
def test_a_field_assigned_a_transformed_module_warns(cls: type, transform: Callable[[Any], Any]) -> None:
    wrapped = transform(nn.Linear(2, 2, key=KEY))
    with pytest.warns(UserWarning, match=MSG) as record:
        cls(wrapped)
    assert len(record) == 1
    # pointed at the user's line: the construction, or the assignment in a hand-written __init__
    assert record[0].filename == __file__
    text = str(record[0].message)
    assert f"{MSG} {__name__}.{cls.__qualname__}: field 'f' holds a" in text


def _warns(make: Callable[[], Any]) -> bool:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make()
    return any(MSG in str(w.message) for w in record)


def _values() -> list[tuple[str, Callable[[], Any]]]:
    lin = nn.Linear(2, 2, key=KEY)

    def calls_linear(x: Any) -> Any:
        return lin(x)

    def wrapper_of_linear() -> Any:  # a new function each time: functools.wraps sets attributes on it
        def call(x: Any) -> Any:
            return lin(x)

        return functools.wraps(lin)(call)

    return [
        ("jit of a Linear", lambda: jax.jit(lin)),
        ("vmap of jit of a Linear", lambda: jax.vmap(jax.jit(lin))),
        ("jit of a Linear in a list", lambda: [1, jax.jit(lin)]),
        ("jit of a function", lambda: jax.jit(lambda x: x)),
        ("jax.nn.relu", lambda: jax.nn.relu),
        ("functools.wraps of a Linear", wrapper_of_linear),
        ("jit of a Partial holding an array", lambda: jax.jit(jax.tree_util.Partial(jnp.add, jnp.ones(2)))),
        ("jit of a partial holding an array", lambda: jax.jit(functools.partial(jnp.add, jnp.ones(2)))),
        ("a Linear", lambda: lin),
        ("a plain function", lambda: calls_linear),
    ]


@pytest.mark.parametrize("make", [v[1] for v in _values()], ids=[v[0] for v in _values()])
def test_the_transform_warning_agrees_with_equinox(make: Callable[[], Any]) -> None:
    value = make()
    assert _warns(lambda: Generated(value)) == _warns(lambda: EqxGenerated(value))


def test_the_transform_warning_verdicts() -> None:
    verdicts = {name: _warns(lambda make=make: Generated(make())) for name, make in _values()}
    assert [name for name, warned in verdicts.items() if warned] == [
        "jit of a Linear",
        "vmap of jit of a Linear",
        "jit of a Linear in a list",
        "functools.wraps of a Linear",
        "jit of a Partial holding an array",
    ]
    # a hand-written __init__: the leaves of the assigned value are checked too (Equinox looks
    # only at the value itself there)
    assert _warns(lambda: HandWritten([jax.jit(nn.Linear(2, 2, key=KEY))]))
    # spruce's own layers that store functions do not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.Lambda(jax.jit(jnp.sin))
        nn.MLP(2, 2, 4, 2, activation=jax.nn.gelu, key=KEY)


# -- nn.WeightNorm -----------------------------------------------------------------------------


def _to_jax(t: Any) -> jax.Array:
    return jnp.asarray(t.detach().numpy())


def _with_weight(layer: Any, name: str, value: Any) -> Any:
    return spruce.tree_at(lambda m: getattr(m, name), layer, jnp.asarray(value))


def _spruce_linear(tlin: Any) -> Any:
    lin = nn.Linear(tlin.in_features, tlin.out_features, key=KEY)
    lin = _with_weight(lin, "weight", _to_jax(tlin.weight))
    return _with_weight(lin, "bias", _to_jax(tlin.bias))


@needs_torch
@pytest.mark.parametrize("axis", [0, 1, None])
def test_weight_norm_matches_torch_parametrization(axis: Any) -> None:
    torch.manual_seed(0)
    tlin = torch.nn.Linear(4, 5)
    lin = _spruce_linear(tlin)
    twn = torch.nn.utils.parametrizations.weight_norm(tlin, dim=axis)
    wn = nn.WeightNorm(lin, axis=axis)
    g = twn.parametrizations.weight.original0
    assert wn.g.shape == tuple(g.shape) and wn.g.dtype == jnp.float32
    _close(wn.g, _to_jax(g))
    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    _close(wn(jnp.asarray(x)), twn(torch.from_numpy(x)).detach().numpy())
    # new magnitudes and directions, set in both
    with torch.no_grad():
        g.mul_(torch.linspace(0.5, 2.0, g.numel()).reshape(g.shape))
        twn.parametrizations.weight.original1.add_(0.25)
    wn = spruce.tree_at(lambda m: m.g, wn, _to_jax(g))
    wn = spruce.tree_at(lambda m: m.layer.weight, wn, _to_jax(twn.parametrizations.weight.original1))
    _close(wn(jnp.asarray(x)), twn(torch.from_numpy(x)).detach().numpy())


@needs_torch
def test_weight_norm_of_a_convolution_matches_torch() -> None:
    torch.manual_seed(1)
    tconv = torch.nn.Conv2d(3, 4, 3)
    conv = nn.Conv2d(3, 4, 3, key=KEY)
    conv = _with_weight(_with_weight(conv, "weight", _to_jax(tconv.weight)), "bias", _to_jax(tconv.bias))
    twn = torch.nn.utils.parametrizations.weight_norm(tconv)
    with torch.no_grad():
        twn.parametrizations.weight.original0.mul_(1.5)
    wn = nn.WeightNorm(conv)
    assert wn.g.shape == (4, 1, 1, 1)
    wn = spruce.tree_at(lambda m: m.g, wn, _to_jax(twn.parametrizations.weight.original0))
    x = np.random.default_rng(1).standard_normal((3, 6, 6)).astype(np.float32)
    _close(wn(jnp.asarray(x)), twn(torch.from_numpy(x)[None])[0].detach().numpy())


@pytest.mark.parametrize("axis", [0, None])
def test_weight_norm_matches_equinox(axis: Any) -> None:
    elin = eqx.nn.Linear(4, 3, key=jax.random.key(3))
    lin = _with_weight(_with_weight(nn.Linear(4, 3, key=KEY), "weight", elin.weight), "bias", elin.bias)
    ewn = eqx.nn.WeightNorm(elin, axis=axis)
    wn = nn.WeightNorm(lin, axis=axis)
    _close(wn.g, ewn.g.reshape(wn.g.shape))  # Equinox keeps size-1 axes with axis=None: (1, 1)
    ewn = eqx.tree_at(lambda m: m.g, ewn, ewn.g * 2.0)
    wn = spruce.tree_at(lambda m: m.g, wn, wn.g * 2.0)
    x = jax.random.normal(jax.random.key(4), (4,))
    _close(wn(x), ewn(x))
    _close(wn(x), 2.0 * lin(x) - lin.bias)


def test_weight_norm_as_equinox_uses_it() -> None:
    # Equinox's own test: the wrapped layer computes what the bare one did, for a Linear
    # (either axis) and a Conv3d; gradients reach the direction and the magnitude.
    for axis in (0, None):
        linear = nn.Linear(4, 4, key=jax.random.key(5))
        x = jax.random.normal(jax.random.key(6), (4,))
        _close(nn.WeightNorm(layer=linear, weight_name="weight", axis=axis)(x), linear(x))
    conv = nn.Conv3d(2, 3, 3, key=jax.random.key(7))
    x = jax.random.normal(jax.random.key(8), (2, 3, 3, 3))
    _close(nn.WeightNorm(layer=conv, weight_name="weight")(x), conv(x))
    wn = nn.WeightNorm(nn.Linear(4, 4, key=jax.random.key(9)))
    grads = filter_grad(lambda m, x: jnp.mean(m(x)))(wn, jax.random.normal(jax.random.key(10), (4,)))
    assert bool(jnp.any(grads.layer.weight != 0)) and bool(jnp.any(grads.g != 0))
    # under jax.jit and jax.vmap
    out = jax.jit(jax.vmap(wn))(jnp.ones((5, 4)))
    assert out.shape == (5, 4)
    _close(out[0], wn(jnp.ones(4)))


def test_weight_norm_keeps_a_bfloat16_weight() -> None:
    lin = nn.Linear(4, 3, dtype=jnp.bfloat16, key=KEY)
    wn = nn.WeightNorm(lin)
    assert wn.g.dtype == jnp.bfloat16 and wn.layer.weight.dtype == jnp.bfloat16
    assert wn(jnp.ones(4, jnp.bfloat16)).dtype == jnp.bfloat16


def test_weight_norm_bad_input() -> None:
    lin = nn.Linear(2, 2, key=KEY)
    with pytest.raises(AttributeError, match=r"WeightNorm: the layer \(Linear\) has no attribute 'wieght' to normalise"):
        nn.WeightNorm(lin, "wieght")
    with pytest.raises(TypeError, match=r"WeightNorm: Linear.in_features must be a floating-point or complex array, got int"):
        nn.WeightNorm(lin, "in_features")
    with pytest.raises(TypeError, match=r"WeightNorm: weight_name must be a str, got 0"):
        nn.WeightNorm(lin, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"WeightNorm: axis=2 is out of range for a weight with 2 axes"):
        nn.WeightNorm(lin, axis=2)
    with pytest.raises(TypeError, match=r"WeightNorm: axis must be an int, got True"):
        nn.WeightNorm(lin, axis=True)
    assert nn.WeightNorm(lin, axis=-1).axis == 1


@needs_torch
@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
def test_weight_norm_loads_a_torch_state_dict_with_the_documented_rename(tmp_path: Any) -> None:
    from safetensors.numpy import save_file

    torch.manual_seed(2)
    tlin = torch.nn.utils.weight_norm(torch.nn.Linear(3, 2))
    with torch.no_grad():
        tlin.weight_g.mul_(3.0)
    sd = {k: v.detach().numpy().copy() for k, v in tlin.state_dict().items()}
    assert sorted(sd) == ["bias", "weight_g", "weight_v"]
    path = os.path.join(tmp_path, "wn.safetensors")
    save_file(sd, path)
    like = nn.WeightNorm(nn.Linear(3, 2, key=KEY))
    wn = spruce.io.load(path, like=like, rename={"weight_g": "g", "weight_v": "layer.weight", "bias": "layer.bias"})
    x = np.random.default_rng(2).standard_normal(3).astype(np.float32)
    _close(wn(jnp.asarray(x)), tlin(torch.from_numpy(x)).detach().numpy())


# -- nn.SpectralNorm ---------------------------------------------------------------------------


def _sigma_max(sn: Any, u: Any, v: Any) -> float:
    w = sn.layer.weight.reshape(sn.layer.weight.shape[0], -1)
    return float(jnp.linalg.svd(w / jnp.vdot(u, w @ v), compute_uv=False)[0])


def test_spectral_norm_matches_equinox() -> None:
    # the same key gives the same initial vectors, and a training step the same vectors and output
    elin = eqx.nn.Linear(5, 6, key=jax.random.key(11))
    lin = _with_weight(_with_weight(nn.Linear(5, 6, key=KEY), "weight", elin.weight), "bias", elin.bias)
    esn, estate = eqx.nn.make_with_state(eqx.nn.SpectralNorm)(elin, "weight", key=jax.random.key(12))
    sn = nn.SpectralNorm(lin, "weight", key=jax.random.key(12))
    eu, ev = estate.get(esn.uv_index)
    _close(sn.u, eu)
    _close(sn.v, ev)
    state = nn.State(sn)
    x = jax.random.normal(jax.random.key(13), (5,))
    for _ in range(3):
        ey, estate = esn(x, estate)
        y, state = sn(x, state)
        _close(y, ey)
        for a, b in zip(state.get(sn.uv_index), estate.get(esn.uv_index)):
            _close(a, b)
    esn = eqx.nn.inference_mode(esn)
    ey, _ = esn(x, estate)
    y = nn.inference_mode(nn.update_state(sn, state))(x)
    _close(y, ey)


def _torch_spectral(tlayer: Any, layer: Any) -> tuple[Any, Any]:
    """torch's spectral_norm of ``tlayer`` and spruce's of ``layer`` (same weights), with the
    spruce vectors set to torch's."""
    tsn = torch.nn.utils.parametrizations.spectral_norm(tlayer)
    p = tsn.parametrizations.weight[0]
    sn = nn.SpectralNorm(layer, key=KEY)
    assert sn.u.shape == tuple(p._u.shape) and sn.v.shape == tuple(p._v.shape)
    sn = spruce.tree_at(lambda m: (m.u, m.v), sn, (_to_jax(p._u), _to_jax(p._v)))
    return tsn, sn


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.nn.Linear(4, 3), lambda t: _spruce_linear(t), (4,)),
        lambda: (torch.nn.Conv2d(2, 3, 2), lambda t: _conv_from(t, nn.Conv2d(2, 3, 2, key=KEY)), (2, 5, 5)),
        lambda: (torch.nn.ConvTranspose2d(3, 2, 2), lambda t: _conv_from(t, nn.ConvTranspose2d(3, 2, 2, key=KEY)), (3, 4, 4)),
    ],
    ids=["Linear", "Conv2d", "ConvTranspose2d"],
)
def test_spectral_norm_matches_torch_parametrization(make: Callable[[], Any]) -> None:
    torch.manual_seed(3)
    tlayer, convert, shape = make()
    layer = convert(tlayer)
    tsn, sn = _torch_spectral(tlayer, layer)
    assert sn.dim == (1 if isinstance(layer, nn.ConvTranspose2d) else 0)
    p = tsn.parametrizations.weight[0]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    state = nn.State(sn)
    for _ in range(2):  # training: one power-iteration step per call, in torch's order
        ty = tsn(torch.from_numpy(x)[None])[0]
        y, state = sn(jnp.asarray(x), state)
        _close(y, ty.detach().numpy())
        u, v = state.get(sn)
        _close(u, _to_jax(p._u))
        _close(v, _to_jax(p._v))
    tsn.eval()
    sn = nn.inference_mode(nn.update_state(sn, state))
    _close(sn(jnp.asarray(x)), tsn(torch.from_numpy(x)[None])[0].detach().numpy())


def _conv_from(tconv: Any, conv: Any) -> Any:
    return _with_weight(_with_weight(conv, "weight", _to_jax(tconv.weight)), "bias", _to_jax(tconv.bias))


def test_spectral_norm_as_equinox_uses_it() -> None:
    # Equinox's own test: the normalised weight's largest singular value converges to 1, again
    # after the weight changes, and stays put in inference mode; a Conv3d works.
    x = jax.random.normal(jax.random.key(14), (5,))
    spectral = nn.SpectralNorm(nn.Linear(5, 6, key=jax.random.key(15)), "weight", key=jax.random.key(16))
    state = nn.State(spectral)
    step = jax.jit(lambda m, s: m(x, s))
    for _ in range(100):
        _, state = step(spectral, state)
    assert abs(_sigma_max(spectral, *state.get(spectral.uv_index)) - 1) < 1e-5
    spectral = spruce.tree_at(lambda s: s.layer.weight, spectral, spectral.layer.weight + 1)
    assert abs(_sigma_max(spectral, *state.get(spectral.uv_index)) - 1) > 1e-2
    for _ in range(100):
        _, state = step(spectral, state)
    assert abs(_sigma_max(spectral, *state.get(spectral.uv_index)) - 1) < 1e-5
    spectral = spruce.tree_at(lambda s: s.layer.weight, spectral, spectral.layer.weight + 1)
    spectral = nn.inference_mode(spectral, value=True)
    before = state.get(spectral)
    for _ in range(3):
        _, state = spectral(x, state)
    assert state.get(spectral) is before
    conv = nn.Conv3d(5, 4, 3, key=jax.random.key(17))
    spectral = nn.SpectralNorm(conv, "weight", key=jax.random.key(18))
    out, _ = spectral(jax.random.normal(jax.random.key(19), (5, 8, 8, 8)), nn.State(spectral))
    assert out.shape == (4, 6, 6, 6)


def test_spectral_norm_state_and_gradients() -> None:
    sn, state = nn.make_with_state(nn.SpectralNorm)(nn.Linear(3, 4, key=KEY), key=jax.random.key(20))
    assert [a.shape for a in state.get(sn)] == [(4,), (3,)] and state.get(sn.uv_index) is state.get(sn)
    # a batch under vmap: the vectors do not depend on the examples (out_axes None)
    xs = jnp.ones((2, 3))
    ys, new = jax.vmap(sn, in_axes=(0, None), out_axes=(0, None))(xs, state)
    assert ys.shape == (2, 4)
    updated = nn.update_state(sn, new)
    _close(updated.u, new.get(sn)[0], rtol=0, atol=0)
    # gradients reach the weight, never the vectors (buffers, as PyTorch's)
    grads = jax.grad(lambda m: jnp.sum(m(jnp.ones(3), state)[0] ** 2))(sn)
    assert bool(jnp.any(grads.layer.weight != 0))
    assert not bool(jnp.any(grads.u != 0)) and not bool(jnp.any(grads.v != 0))
    # inference with the layer's own vectors, and the state passed back unchanged
    y, same = sn(jnp.ones(3), state, inference=True)
    assert same is state and y.shape == (4,)
    assert nn.inference_mode(sn)(jnp.ones(3)).shape == (4,)


def test_spectral_norm_bad_input() -> None:
    lin = nn.Linear(3, 4, key=KEY)
    sn = nn.SpectralNorm(lin, key=KEY)
    with pytest.raises(
        ValueError,
        match=r"SpectralNorm in training mode returns its updated power-iteration vectors: call it as `y, state = sn\(x, ",
    ):
        sn(jnp.ones(3))
    with pytest.raises(ValueError, match=r"SpectralNorm: Linear.bias must have at least 2 axes, got shape \(4,\)"):
        nn.SpectralNorm(lin, "bias", key=KEY)
    with pytest.raises(ValueError, match=r"SpectralNorm: num_power_iterations must be an int >= 1, got 0"):
        nn.SpectralNorm(lin, num_power_iterations=0, key=KEY)
    with pytest.raises(ValueError, match=r"SpectralNorm: eps must be a number > 0, got -1.0"):
        nn.SpectralNorm(lin, eps=-1.0, key=KEY)
    with pytest.raises(ValueError, match=r"SpectralNorm: dim=2 is out of range for a weight with 2 axes"):
        nn.SpectralNorm(lin, dim=2, key=KEY)
    with pytest.raises(TypeError, match=r"SpectralNorm needs a PRNG key"):
        nn.SpectralNorm(lin, key=None)  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match=r"SpectralNorm: the layer \(Linear\) has no attribute 'w' to normalise"):
        nn.SpectralNorm(lin, "w", key=KEY)


@needs_torch
def test_spectral_norm_loads_a_torch_state_dict_with_the_documented_rename(tmp_path: Any) -> None:
    from safetensors.numpy import save_file

    torch.manual_seed(4)
    tsn = torch.nn.utils.spectral_norm(torch.nn.Linear(3, 2))
    tsn.eval()
    sd = {k: v.detach().numpy().copy() for k, v in tsn.state_dict().items()}
    assert sorted(sd) == ["bias", "weight_orig", "weight_u", "weight_v"]
    path = os.path.join(tmp_path, "sn.safetensors")
    save_file(sd, path)
    like = nn.SpectralNorm(nn.Linear(3, 2, key=KEY), inference=True, key=KEY)
    rename = {"weight_orig": "layer.weight", "weight_u": "u", "weight_v": "v", "bias": "layer.bias"}
    sn = spruce.io.load(path, like=like, rename=rename)
    x = np.random.default_rng(4).standard_normal(3).astype(np.float32)
    _close(sn(jnp.asarray(x)), tsn(torch.from_numpy(x)).detach().numpy())


def test_equinox_inference_mode_switches_spectral_norm() -> None:
    """SpectralNorm's inference flag is a Flag node, as Dropout's: Equinox's inference_mode
    switches it (in a mixed model too), and spruce's keeps it static for jax.jit."""
    layer = nn.SpectralNorm(nn.Linear(3, 3, key=jax.random.key(0)), key=jax.random.key(1))
    model = nn.Sequential([layer, nn.Dropout(0.5)])
    on = eqx.nn.inference_mode(model)
    assert bool(on[0].inference) is True and bool(on[1].inference) is True
    off = eqx.nn.inference_mode(on, value=False)
    assert bool(off[0].inference) is False
    ours = nn.inference_mode(model)
    x = jnp.ones(3)
    np.testing.assert_allclose(jax.jit(lambda m, x: m(x))(ours, x), ours(x), rtol=1e-6)
    assert not bool(layer.inference)
