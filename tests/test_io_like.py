"""spruce.io with models that mix data and code, and training states: leaves that a checkpoint
never holds (an ``equinox.nn.MLP``'s activation functions) taken from ``like``,
``save(..., skip_code=True)``, ``like=`` built by ``spruce.jax.filter_eval_shape``, typed PRNG
keys, and ``dtype='like'`` for integer tensors.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import spruce
import spruce.io as sio
import spruce.jax
import spruce.tree as st
from spruce.io import CheckpointError, MismatchError

FORMATS = ["safetensors", "npz"]


class Net(spruce.Module):
    """A spruce Module holding an equinox MLP, whose activations are leaves (functions)."""

    mlp: eqx.nn.MLP
    scale: jax.Array


def make_net(seed: int = 0) -> Net:
    return Net(eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(seed)), jnp.arange(2.0) + seed)


def arrays_of(tree: Any) -> list[tuple[str, np.ndarray]]:
    return [(k, np.asarray(v)) for k, v in sio.flatten_names(eqx.filter(tree, eqx.is_array)).items()]


def assert_same_arrays(a: Any, b: Any) -> None:
    left, right = arrays_of(a), arrays_of(b)
    assert [k for k, _ in left] == [k for k, _ in right]
    for (k, x), (_, y) in zip(left, right):
        assert x.dtype == y.dtype and x.shape == y.shape, k
        np.testing.assert_array_equal(x, y, err_msg=k)  # a copy: exact


# -- code leaves --------------------------------------------------------------------------------------


def test_save_refuses_a_function_leaf_and_names_skip_code(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError) as caught:
        sio.save(str(tmp_path / "n.safetensors"), make_net())
    text = str(caught.value)
    assert text.startswith(
        "save: the leaf at key path .mlp.activation cannot be saved: the function relu (custom_jvp) is code, not data"
    )
    assert "save(..., skip_code=True) leaves code out, and load(path, like=...) takes it from like" in text
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_skip_code_round_trip_through_like(fmt: str, tmp_path: pathlib.Path) -> None:
    model = make_net()
    path = str(tmp_path / f"n.{fmt}")
    sio.save(path, model, skip_code=True)
    assert list(sio.read_header(path)) == [
        "mlp.layers.0.weight", "mlp.layers.0.bias", "mlp.layers.1.weight", "mlp.layers.1.bias", "scale"
    ]
    doc = json.loads(sio.read_metadata(path)["spruce.treedef"])
    assert doc["version"] == 2
    mlp_fields = dict(doc["tree"]["fields"])["mlp"]["fields"]
    assert dict(mlp_fields)["activation"] == {"skipped": "the function relu (custom_jvp)", "name": "mlp.activation"}
    assert dict(mlp_fields)["final_activation"] == {"skipped": "the function <lambda>", "name": "mlp.final_activation"}
    fresh = make_net(seed=1)  # other values, same structure and the same activation functions
    got = sio.load(path, like=fresh)
    assert type(got) is Net and type(got.mlp) is eqx.nn.MLP
    assert got.mlp.activation is fresh.mlp.activation is model.mlp.activation
    assert got.mlp.final_activation is fresh.mlp.final_activation
    assert_same_arrays(got, model)
    res = sio.load(path, like=fresh, strict=False)
    assert res.missing == [] and res.unexpected == []
    x = jnp.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(np.asarray(got.mlp(x)), np.asarray(model.mlp(x)), rtol=1e-6, atol=1e-6)


def test_skip_code_leaves_data_it_cannot_hold_refused(tmp_path: pathlib.Path) -> None:
    """Only code is skipped: bytes, complex numbers, placeholders and unsupported dtypes are
    data the file cannot hold, and still raise; a plain object (not data) is skipped."""
    path = str(tmp_path / "d.safetensors")
    for leaf, match in [
        (b"raw", r"\['x'\] cannot be saved: a bytes is not plain data"),
        (1j, r"\['x'\] cannot be saved: a complex is not plain data"),
        (jax.ShapeDtypeStruct((2,), jnp.float32), r"\['x'\] is a ShapeDtypeStruct with a shape and a dtype but no data"),
        (np.zeros(2, np.complex128), r"\['x'\] is an array of dtype complex128"),
    ]:
        with pytest.raises(ValueError, match=match) as caught:
            sio.save(path, {"x": leaf, "w": np.ones(2)}, skip_code=True)
        assert "skip_code" not in str(caught.value)
    thing = object()
    sio.save(path, {"x": thing, "w": np.ones(2)}, skip_code=True)
    doc = json.loads(sio.read_metadata(path)["spruce.treedef"])
    assert doc == {"version": 2, "tree": {"dict": [["x", {"skipped": "an object", "name": "x"}], ["w", {"tensor": "w"}]]}}
    got = sio.load(path, like={"x": thing, "w": np.zeros(2)})
    assert got["x"] is thing and got["w"].tolist() == [1.0, 1.0]


def test_a_tree_without_new_leaves_is_still_written_as_version_1(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "v.safetensors")
    sio.save(path, {"w": np.ones(2)}, skip_code=True)
    assert json.loads(sio.read_metadata(path)["spruce.treedef"]) == {"version": 1, "tree": {"dict": [["w", {"tensor": "w"}]]}}


@pytest.mark.parametrize("fmt", FORMATS)
def test_filtered_save_loads_into_the_full_model(fmt: str, tmp_path: pathlib.Path) -> None:
    model = make_net()
    path = str(tmp_path / f"f.{fmt}")
    sio.save(path, eqx.filter(model, eqx.is_array))
    fresh = make_net(seed=2)
    got = sio.load(path, like=fresh)
    assert got.mlp.activation is model.mlp.activation and got.mlp.final_activation is fresh.mlp.final_activation
    assert_same_arrays(got, model)
    res = sio.load(path, like=fresh, strict=False)
    assert res.missing == [] and res.unexpected == []
    # an array that the file lacks is still missing
    with pytest.raises(MismatchError, match=r"missing from the file: 'extra'"):
        sio.load(path, like={"net": fresh, "extra": np.zeros(1)}, rename=lambda n: "net." + n)


def test_skipped_entries_are_not_unexpected(tmp_path: pathlib.Path) -> None:
    """A file saved with skip_code loads into a like without the code leaves (strict): a
    skipped leaf holds no data."""
    model = make_net()
    path = str(tmp_path / "s.safetensors")
    sio.save(path, model, skip_code=True)
    got = sio.load(path, like=eqx.filter(make_net(seed=3), eqx.is_array))
    assert got.mlp.activation is None
    assert_same_arrays(got, model)


def test_load_without_like_lists_what_it_cannot_rebuild(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "n.safetensors")
    sio.save(path, make_net(), skip_code=True)
    expected = (
        f"{path}: the stored structure cannot be rebuilt without like=: save left out 2 leaves that "
        "are code, not data (skip_code=True): 'mlp.activation' (the function relu (custom_jvp)), "
        "'mlp.final_activation' (the function <lambda>). Load it into a tree of the same structure "
        "with spruce.io.load(path, like=...), which takes them from like; "
        "spruce.jax.filter_eval_shape(Model, ...) builds one without computing anything"
    )
    for kwargs in [{}, {"strict": False}, {"shardings": jax.devices()[0]}]:
        with pytest.raises(CheckpointError) as caught:
            sio.load(path, **kwargs)
        assert str(caught.value) == expected, kwargs
    one = str(tmp_path / "one.npz")
    sio.save(one, {"f": jnp.tanh, "w": np.ones(1)}, skip_code=True)
    with pytest.raises(
        CheckpointError, match=r"save left out 1 leaf that is code, not data \(skip_code=True\): 'f' \(the function tanh "
                               r"\(PjitFunction\)\)"
    ):
        sio.load(one)
    # with rename=, the file's data nested by name (the stored structure is not used): the
    # skipped leaves hold none
    got = sio.load(path, rename={})
    assert sorted(sio.flatten_names(got)) == [
        "mlp.layers.0.bias", "mlp.layers.0.weight", "mlp.layers.1.bias", "mlp.layers.1.weight", "scale"
    ]
    assert got["scale"].tolist() == [0.0, 1.0]


def test_like_from_filter_eval_shape(tmp_path: pathlib.Path) -> None:
    model = make_net()
    path = str(tmp_path / "n.safetensors")
    sio.save(path, model, skip_code=True)
    like = spruce.jax.filter_eval_shape(make_net, 5)
    assert like.mlp.layers[0].weight == jax.ShapeDtypeStruct((4, 3), jnp.float32)
    assert like.mlp.activation is model.mlp.activation
    got = sio.load(path, like=like)
    assert type(got.mlp.layers[0].weight) is np.ndarray and got.mlp.activation is model.mlp.activation
    assert_same_arrays(got, model)
    # the filtered file too
    filtered = str(tmp_path / "f.safetensors")
    sio.save(filtered, eqx.filter(model, eqx.is_array))
    assert_same_arrays(sio.load(filtered, like=like), model)
    # jax.eval_shape itself cannot build such a like (its outputs must be arrays)
    with pytest.raises(TypeError):
        jax.eval_shape(make_net, 5)


def test_code_leaf_against_data_is_a_mismatch(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "m.safetensors")
    sio.save(path, {"f": jax.nn.relu, "w": np.ones(2, np.float32)}, skip_code=True)
    with pytest.raises(MismatchError) as caught:
        sio.load(path, like={"f": np.zeros(2, np.float32), "w": jax.nn.relu})
    assert str(caught.value) == (
        f"load: {path} does not fit like: f: like has float32[2], the file no data: save left out "
        "the function relu (custom_jvp) (skip_code=True); w: like has the function relu "
        "(custom_jvp), the file float32[2]"
    )
    assert caught.value.mismatched == [
        ("f", "float32[2]", "no data: save left out the function relu (custom_jvp) (skip_code=True)"),
        ("w", "the function relu (custom_jvp)", "float32[2]"),
    ]


@pytest.mark.parametrize(
    "node, match",
    [
        ({"skipped": 3, "name": "f"}, "a skipped leaf's description is not a str"),
        ({"skipped": "the function f"}, "a skipped leaf has no name"),
        ({"tensor": "a", "key": 7}, "'key' is not a str"),
        ({"tensor": "a", "key": "threefry2x32", "scalar": True}, "'key' is not a str, or is on a scalar"),
        ({"tensor": "a", "key": "no_such_impl"},
         r"at '<root>' holds PRNG keys of the implementation 'no_such_impl' with key data of shape \[3\], "
         r"which JAX cannot rebuild"),
        ({"tensor": "a", "key": "threefry2x32"},
         r"holds PRNG keys of the implementation 'threefry2x32' with key data of shape \[3\], which JAX cannot rebuild"),
        ({"tensor": "b", "key": "threefry2x32"},
         r"at '<root>' holds PRNG keys \(threefry2x32\) whose key data is uint64, not uint32"),
        ({"dict": [["k", {"tensor": "b", "key": "threefry2x32"}]]},
         r"at 'k' holds PRNG keys \(threefry2x32\) whose key data is uint64, not uint32"),
    ],
)
def test_bad_new_leaves_in_the_structure(node: Any, match: str, tmp_path: pathlib.Path) -> None:
    from safetensors.numpy import load_file, save_file

    path = str(tmp_path / "a.safetensors")
    sio.save(path, {"a": np.arange(3, dtype=np.uint32), "b": np.zeros(2, np.uint64)})
    meta = sio.read_metadata(path)
    meta["spruce.treedef"] = json.dumps({"version": 2, "tree": node})
    save_file(load_file(path), path, metadata=meta)
    with pytest.raises(CheckpointError, match=match):
        sio.load(path, strict=False)


# -- typed PRNG keys ----------------------------------------------------------------------------------


KEY_TREES = {
    "default": lambda: jax.random.key(0),
    "threefry2x32": lambda: jax.random.key(7, impl="threefry2x32"),
    "rbg": lambda: jax.random.key(7, impl="rbg"),
    "unsafe_rbg": lambda: jax.random.key(7, impl="unsafe_rbg"),
    "split": lambda: jax.random.split(jax.random.key(3), 4),
    "split_rbg_2d": lambda: jax.random.split(jax.random.key(3, impl="rbg"), (2, 3)),
}


def assert_same_keys(got: Any, want: Any) -> None:
    assert isinstance(got, jax.Array) and jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert str(jax.random.key_impl(got)) == str(jax.random.key_impl(want))
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got)), np.asarray(jax.random.key_data(want)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("which", list(KEY_TREES))
def test_typed_keys_round_trip(which: str, fmt: str, tmp_path: pathlib.Path) -> None:
    keys = KEY_TREES[which]()
    path = str(tmp_path / f"k.{fmt}")
    sio.save(path, {"key": keys, "w": np.ones(2)})
    impl = str(jax.random.key_impl(keys))
    data = np.asarray(jax.random.key_data(keys))
    info = sio.read_header(path)["key"]
    assert (info.dtype, info.shape) == ("uint32", data.shape)
    doc = json.loads(sio.read_metadata(path)["spruce.treedef"])
    assert doc == {"version": 2, "tree": {"dict": [["key", {"tensor": "key", "key": impl}], ["w", {"tensor": "w"}]]}}
    assert_same_keys(sio.load(path)["key"], keys)
    assert_same_keys(sio.load(path, like={"key": keys, "w": np.zeros(2)})["key"], keys)
    shapes = jax.eval_shape(lambda: keys)  # a ShapeDtypeStruct of a key dtype
    assert_same_keys(sio.load(path, like={"key": shapes, "w": np.zeros(2)})["key"], keys)
    placed = sio.load(path, shardings=jax.devices()[0])["key"]
    assert_same_keys(placed, keys)
    assert placed.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    # the loaded keys draw the same numbers
    got = sio.load(path)["key"]
    first = (got.reshape(-1)[0], keys.reshape(-1)[0])
    np.testing.assert_array_equal(np.asarray(jax.random.bits(first[0], (3,))), np.asarray(jax.random.bits(first[1], (3,))))


def test_typed_keys_by_name_and_in_the_cli(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Loaded by name (rename=, the stored structure unused) keys are their key data, which
    is what ``spruce diff --values`` compares."""
    from spruce.cli import main

    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    sio.save(a, {"k": jax.random.split(jax.random.key(0), 3), "f": jnp.tanh}, skip_code=True)
    sio.save(b, {"k": jax.random.split(jax.random.key(1), 3)})
    flat = sio.load(a, rename={})
    assert list(flat) == ["k"] and flat["k"].dtype == np.uint32
    np.testing.assert_array_equal(flat["k"], np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 3))))
    assert main(["diff", a, b, "--values"]) == 1
    out = capsys.readouterr().out
    assert "~ k  max abs diff" in out and "not readable" not in out


def test_typed_keys_save_sharded(tmp_path: pathlib.Path) -> None:
    tree = {"k": jax.random.key(1), "ks": jax.random.split(jax.random.key(2, impl="rbg"), 4), "w": jnp.arange(3.0)}
    d = str(tmp_path / "ckpt")
    sio.save_sharded(d, tree)
    assert sio.read_header(d)["ks"].shape == (4, 4)
    for got in (sio.load(d), sio.load(d, like=tree), sio.load(d, like=jax.eval_shape(lambda: tree))):
        assert_same_keys(got["k"], tree["k"])
        assert_same_keys(got["ks"], tree["ks"])
        np.testing.assert_array_equal(np.asarray(got["w"]), [0.0, 1.0, 2.0])


def test_key_mismatches(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "k.safetensors")
    sio.save(path, {"k": jax.random.key(0), "ks": jax.random.split(jax.random.key(0), 4)})
    with pytest.raises(MismatchError) as caught:
        sio.load(path, like={"k": jax.random.key(0, impl="rbg"), "ks": jax.random.split(jax.random.key(0), 3)})
    assert str(caught.value) == (
        f"load: {path} does not fit like: k: like has key<rbg>[], the file PRNG keys (threefry2x32) "
        "with key data uint32[2]; ks: like has key<fry>[3], the file PRNG keys (threefry2x32) with key "
        "data uint32[4, 2]"
    )
    # raw uint32 key data is not a key, and a key is not raw data
    with pytest.raises(
        MismatchError, match=r"k: like has uint32\[2\], the file PRNG keys \(threefry2x32\) with key data uint32\[2\]"
    ):
        sio.load(path, like={"k": np.zeros(2, np.uint32), "ks": jax.random.split(jax.random.key(0), 4)})
    raw = str(tmp_path / "raw.safetensors")
    sio.save(raw, {"k": jax.random.PRNGKey(0)})
    assert sio.load(raw)["k"].dtype == np.uint32  # old-style keys are plain arrays
    with pytest.raises(MismatchError, match=r"k: like has key<fry>\[\], the file uint32\[2\]"):
        sio.load(raw, like={"k": jax.random.key(0)})
    # dtype='like' never casts keys
    with pytest.raises(MismatchError, match=r"k: like has uint32\[2\]"):
        sio.load(path, like={"k": np.zeros(2, np.uint32), "ks": jax.random.split(jax.random.key(0), 4)}, dtype="like")


class Trainer(spruce.Module):
    model: Net
    opt_state: Any
    key: jax.Array
    step: int


@pytest.mark.parametrize("fmt", FORMATS)
def test_training_state_with_optax_and_a_key(fmt: str, tmp_path: pathlib.Path) -> None:
    model = make_net()
    params = eqx.filter(model, eqx.is_inexact_array)
    opt = optax.adam(1e-2)
    opt_state = opt.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, opt_state = opt.update(grads, opt_state, params)
    model = eqx.apply_updates(model, updates)
    key = jax.random.split(jax.random.key(5))[0]
    state = Trainer(model, opt_state, key, 1)
    path = str(tmp_path / f"state.{fmt}")
    sio.save(path, state, skip_code=True)
    like = Trainer(make_net(seed=4), opt.init(eqx.filter(make_net(seed=4), eqx.is_inexact_array)), jax.random.key(0), 0)
    got = sio.load(path, like=like)
    assert got.step == 1 and got.model.mlp.activation is model.mlp.activation
    assert_same_keys(got.key, key)
    assert st.structure(got) == st.structure(state)
    for (pa, a), (pb, b) in zip(st.flatten_with_path(got)[0], st.flatten_with_path(state)[0]):
        assert pa == pb
        if isinstance(b, jax.Array) and jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key):
            continue
        if callable(b):
            assert a is b
            continue
        assert np.asarray(a).dtype == np.asarray(b).dtype and np.shape(a) == np.shape(b), pa
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(pa))
    # the loaded state trains on: one more step gives the same result as the original's
    def step(s: Trainer) -> Any:
        p = eqx.filter(s.model, eqx.is_inexact_array)
        u, _ = opt.update(jax.tree.map(jnp.ones_like, p), s.opt_state, p)
        return eqx.filter(eqx.apply_updates(s.model, u), eqx.is_array)
    assert_same_arrays(step(got), step(state))
    # a key and optax state without code load without like
    plain = str(tmp_path / f"plain.{fmt}")
    sio.save(plain, {"opt_state": opt_state, "key": key})
    back = sio.load(plain)
    assert_same_keys(back["key"], key)
    assert type(back["opt_state"][0]).__name__ == "ScaleByAdamState"
    assert int(back["opt_state"][0].count) == 1


# -- dtype='like' for integers ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_dtype_like_casts_integers_that_fit(fmt: str, tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / f"i.{fmt}")
    sio.save(path, {"i": np.array([-5, 0, 300]), "u": np.arange(3, dtype=np.uint64), "s": np.int64(7),
                    "b": np.array([True, False]), "e": np.zeros(0, np.int64)})
    like = {"i": np.zeros(3, np.int16), "u": np.zeros(3, np.int8), "s": np.int32(0), "b": np.zeros(2, bool),
            "e": np.zeros(0, np.uint8)}
    with pytest.raises(
        MismatchError, match=r"e: like has uint8\[0\], the file int64\[0\]; i: like has int16\[3\], the file int64\[3\]"
    ):
        sio.load(path, like=like)
    got = sio.load(path, like=like, dtype="like")
    assert {k: v.dtype for k, v in got.items()} == {"i": np.int16, "u": np.int8, "s": np.int32, "b": np.bool_, "e": np.uint8}
    assert got["i"].tolist() == [-5, 0, 300] and got["u"].tolist() == [0, 1, 2] and got["b"].tolist() == [True, False]
    assert type(got["s"]) is np.int32 and got["s"] == 7
    placed = sio.load(path, like=like, dtype="like", shardings=jax.devices()[0])
    assert placed["i"].dtype == jnp.int16 and np.asarray(placed["i"]).tolist() == [-5, 0, 300]
    # an explicit dtype still casts only floating-point tensors
    assert sio.load(path, dtype=np.float16)["i"].dtype == np.int64


def test_dtype_like_refuses_integers_that_do_not_fit(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "i.safetensors")
    sio.save(path, {"layers": [{"ids": np.array([-200, 5, 100])}], "u": np.array([2**63], np.uint64), "b": np.array([True])})
    like = {"layers": [{"ids": np.zeros(3, np.int8)}], "u": np.zeros(1, np.int64), "b": np.zeros(1, np.int8)}
    with pytest.raises(MismatchError) as caught:
        sio.load(path, like=like, dtype="like")
    assert str(caught.value) == (
        f"load: {path} does not fit like: b: like has int8[1], the file bool[1]; "
        "layers.0.ids: like has int8[3], the file int64[3] holding -200 (its values span [-200, 100]), "
        "outside the range of int8, [-128, 127], so dtype='like' cannot cast it; "
        "u: like has int64[1], the file uint64[1] holding 9223372036854775808 (its values span "
        "[9223372036854775808, 9223372036854775808]), outside the range of int64, "
        "[-9223372036854775808, 9223372036854775807], so dtype='like' cannot cast it"
    )
    assert [m[0] for m in caught.value.mismatched] == ["b", "layers.0.ids", "u"]
    with pytest.raises(MismatchError, match=r"layers.0.ids: like has int8\[3\], the file int64\[3\] holding -200"):
        sio.load(path, like=like, dtype="like", shardings=jax.devices()[0])


def test_placed_minilm_round_trips_through_dtype_like(tmp_path: pathlib.Path) -> None:
    """Placing all-MiniLM-L6-v2 with JAX's 32-bit default turns its int64 position ids into
    int32; a sharded save of the placed model loads into ``minilm.load()`` with dtype='like',
    and the shipped int64 checkpoint into the placed model."""
    from spruce.models import minilm

    host = minilm.load()
    assert host.embeddings.position_ids.dtype == np.int64
    placed = jax.device_put(host, jax.devices()[0])
    assert placed.embeddings.position_ids.dtype == jnp.int32
    d = str(tmp_path / "ckpt")
    sio.save_sharded(d, placed)
    with pytest.raises(MismatchError, match=r"embeddings.position_ids: like has int64\[1, 512\], the file int32\[1, 512\]"):
        sio.load(d, like=host)
    back = sio.load(d, like=host, dtype="like")
    assert back.embeddings.position_ids.dtype == np.int64
    np.testing.assert_array_equal(back.embeddings.position_ids, np.arange(512)[None, :])
    assert_same_arrays(back, host)
    from spruce.models import bert

    folder = pathlib.Path(minilm.model_path())
    again = sio.load(folder / "model.safetensors", like=placed, rename=bert.checkpoint_key, dtype="like")
    assert isinstance(again.embeddings.position_ids, jax.Array) and again.embeddings.position_ids.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(again.embeddings.position_ids), np.arange(512)[None, :])
