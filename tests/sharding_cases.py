"""Tests of spruce.sharding and sharded checkpoints that need 8 devices.

Not collected by itself (the name does not start with ``test_``): ``test_sharding.py`` runs
this file in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (set
before JAX starts), so that the other test files keep JAX's default single CPU device, and
reports each case as its own test.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections import namedtuple
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file

import spruce
import spruce.io as sio
import spruce.sharding as sh
from spruce.io import CheckpointError, MismatchError, _sharded


@pytest.fixture(autouse=True, scope="module")
def _eight_devices() -> None:
    # (a check, not an import-time assert: --doctest-modules imports this file everywhere)
    assert jax.device_count() == 8, "run through test_sharding.py (8 host devices)"

Pair = namedtuple("Pair", ["kernel", "bias"])


@pytest.fixture(scope="module")
def mesh24() -> Any:
    return sh.mesh({"data": 2, "model": 4})


@pytest.fixture(scope="module")
def mesh8() -> Any:
    return sh.mesh({"x": 8})


def _tree() -> dict[str, Any]:
    return {
        "embed": np.arange(16 * 6, dtype=np.float32).reshape(16, 6),
        "layers": [
            {"attn": {"query_proj": Pair(np.arange(24, dtype=np.float32).reshape(4, 6) + i, np.arange(6, dtype=np.float32))}}
            for i in range(2)
        ],
        "scale": np.float32(0.5),
        "step": 7,
        "name": "tiny",
    }


RULES = sh.Rules(
    [
        ("embed", P("model", None)),
        ("layers.*.attn.*_proj.kernel", P("data", None)),
        ("**.bias", P()),
        ("scale", None),
    ]
)


def _per_device(tree: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            for s in leaf.addressable_shards:
                out[s.device.id] = out.get(s.device.id, 0) + s.data.nbytes
    return out


def _buffers(x: Any) -> list[int]:
    return [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]


def _equal_trees(a: Any, b: Any) -> None:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        if hasattr(x, "shape"):
            assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        else:
            assert type(x) is type(y) and x == y


# -- spruce.sharding ---------------------------------------------------------------------------------


def test_mesh_axes_and_types() -> None:
    m = sh.mesh({"data": 2, "model": 4})
    assert dict(m.shape) == {"data": 2, "model": 4}
    assert all(t == jax.sharding.AxisType.Auto for t in m.axis_types)
    e = sh.mesh({"a": 8}, axis_types="explicit")
    assert e.axis_types == (jax.sharding.AxisType.Explicit,)
    devs = jax.devices()[::-1]
    r = sh.mesh({"a": 2, "b": 4}, devices=devs)
    assert list(r.devices.flat) == devs
    with pytest.raises(ValueError, match=r"need 6 devices, but there are 8"):
        sh.mesh({"a": 2, "b": 3})


def test_placement_follows_rules(mesh24: Any) -> None:
    placed = sh.shard(_tree(), mesh24, RULES)
    assert placed["embed"].sharding == NamedSharding(mesh24, P("model", None))
    assert placed["embed"].addressable_shards[0].data.shape == (4, 6)
    k = placed["layers"][1]["attn"]["query_proj"].kernel
    assert k.sharding.spec == P("data", None) and k.addressable_shards[0].data.shape == (2, 6)
    assert isinstance(placed["layers"][0]["attn"]["query_proj"], Pair)
    assert placed["step"] == 7 and placed["name"] == "tiny"  # non-array leaves pass through
    assert placed["scale"].sharding.spec == P()
    _equal_trees(jax.tree.map(np.asarray, placed), jax.tree.map(np.asarray, _tree()))


def test_explain_bytes_are_what_placement_holds(mesh24: Any) -> None:
    tree = _tree()
    e = sh.explain(tree, mesh24, RULES)
    assert e.bytes_per_device == _per_device(sh.shard(tree, mesh24, RULES))
    # embed 16x6 f32 split 4 ways = 96 B; kernels 4x6 split 2 ways = 48 B each; biases 24 B
    # each; scale 4 B
    assert set(e.bytes_per_device.values()) == {96 + 2 * 48 + 2 * 24 + 4}
    rows = {r.path: r for r in e.rows}
    assert rows["embed"].replication == 2 and rows["embed"].bytes_per_device == 96
    assert rows["layers.0.attn.query_proj.bias"].replication == 8
    assert rows["layers.0.attn.query_proj.kernel"].rule == "layers.*.attn.*_proj.kernel"
    assert e.unmatched == []
    text = str(e)
    assert text.splitlines()[0].split() == ["path", "shape", "dtype", "rule", "spec", "per", "device", "replicated"]
    assert re.search(r"^embed\s+\(16, 6\)\s+float32\s+embed\s+P\('model', None\)\s+96 B\s+2x$", text, re.M)
    assert "step" not in text  # non-array leaves have no row


def test_unmatched_rules_are_reported(mesh24: Any) -> None:
    rules = sh.Rules([("**.kernel", P()), ("nothing.here", P()), ("**", None)])
    e = sh.explain(_tree(), mesh24, rules)
    assert e.unmatched == ["nothing.here"]
    assert "rules that matched nothing: 'nothing.here'" in str(e)


def test_indivisible_names_path_shape_dim_axis_and_size(mesh24: Any) -> None:
    rules = sh.Rules([("embed", P(None, "model")), ("**", None)])
    with pytest.raises(sh.ShardingError) as info:
        sh.shardings(_tree(), mesh24, rules)
    assert str(info.value) == (
        "key path 'embed': dimension 1 of shape (16, 6) has length 6, which mesh axis 'model' "
        "of size 4 does not divide (spec P(None, 'model')); change the rule, or pass "
        "on_indivisible='replicate' to leave such dimensions unsplit"
    )
    two = sh.Rules([("embed", P(("data", "model"), None)), ("**", None)])
    assert sh.specs(_tree(), two, mesh=mesh24)["embed"] == P(("data", "model"), None)
    bad = sh.Rules([("embed", P(None, ("data", "model"))), ("**", None)])
    with pytest.raises(sh.ShardingError, match=r"mesh axis 'data' of size 2 x 'model' of size 4 does not divide"):
        sh.specs(_tree(), bad, mesh=mesh24)


def test_on_indivisible_replicate(mesh24: Any) -> None:
    rules = sh.Rules([("embed", P("data", "model")), ("**", None)], on_indivisible="replicate")
    s = sh.shardings(_tree(), mesh24, rules)
    assert s["embed"].spec == P("data", None)  # only the dimension that does not divide


def test_unknown_mesh_axis(mesh24: Any) -> None:
    rules = sh.Rules([("embed", P("tensor")), ("**", None)])
    with pytest.raises(
        sh.ShardingError, match=r"^key path 'embed': the spec .* names mesh axis 'tensor', which the mesh "
                                r"\{'data': 2, 'model': 4\} does not have"
    ):
        sh.shardings(_tree(), mesh24, rules)


def test_shard_inside_jit(mesh24: Any) -> None:
    @jax.jit
    def f(tree: Any) -> Any:
        return sh.shard(jax.tree.map(lambda x: x * 2, tree), mesh24, RULES)

    arrays = {k: v for k, v in _tree().items() if k in ("embed", "layers")}
    out = f(arrays)
    assert out["embed"].sharding.is_equivalent_to(NamedSharding(mesh24, P("model", None)), 2)
    np.testing.assert_array_equal(out["embed"], _tree()["embed"] * 2)


# -- spruce.jax.filter_shard and filter_jit(in_shardings=, out_shardings=) ----------------------------


def test_filter_shard_places_arrays_and_passes_the_rest(mesh24: Any) -> None:
    from spruce.jax import filter_shard

    tree = _tree()
    placements = sh.shardings(tree, mesh24, RULES)  # None for the int and str leaves: a fit
    out = filter_shard(tree, placements)
    _equal_trees(jax.tree.map(np.asarray, out), jax.tree.map(np.asarray, tree))
    assert out["embed"].sharding == NamedSharding(mesh24, P("model", None))
    assert out["layers"][1]["attn"]["query_proj"].kernel.addressable_shards[0].data.shape == (2, 6)
    assert out["step"] == 7 and out["name"] == "tiny"
    # one sharding for everything, a prefix with None (left alone), and a Device
    whole = filter_shard(tree, NamedSharding(mesh24, P()))
    assert all(x.sharding.spec == P() for x in jax.tree.leaves(whole) if isinstance(x, jax.Array))
    prefix = filter_shard(
        tree, {"embed": NamedSharding(mesh24, P(None, None)), "layers": None, "scale": None, "step": None, "name": None}
    )
    assert isinstance(prefix["embed"], jax.Array) and isinstance(prefix["layers"][0]["attn"]["query_proj"].kernel, np.ndarray)
    dev = jax.devices()[5]
    one = filter_shard(tree, dev)
    assert one["embed"].sharding == SingleDeviceSharding(dev) and one["embed"].devices() == {dev}
    # under a trace: a constraint, which decides the output's sharding
    traced = jax.jit(lambda t: filter_shard(jax.tree.map(lambda x: x + 1, t), {**placements, "name": None}))
    got = traced({**tree, "name": None})  # (a str cannot enter jax.jit; None is an empty node)
    assert got["embed"].sharding.is_equivalent_to(NamedSharding(mesh24, P("model", None)), 2)
    np.testing.assert_array_equal(got["embed"], tree["embed"] + 1)


def test_filter_shard_bad_shardings_name_the_key_path(mesh24: Any) -> None:
    from spruce.jax import filter_shard

    tree = {"w": np.ones((6, 4), np.float32), "b": [np.ones(4, np.float32)]}
    with pytest.raises(
        ValueError, match=r"^filter_shard: the leaf at key path \['w'\] \(shape \(6, 4\), float32\) does not fit its sharding "
                          r".*spec=P\('model',\)"
    ):
        filter_shard(tree, {"w": NamedSharding(mesh24, P("model")), "b": None})  # 6 % 4
    with pytest.raises(
        ValueError, match=r"filter_shard: the shardings must be .* prefix .*; at key path \['b'\]: expected a tuple of length "
                          r"1, got a list of length 1"
    ):
        filter_shard(tree, {"w": None, "b": (None,)})
    with pytest.raises(
        ValueError, match=r"at key path <root>: expected a dict with keys \['w'\], got a dict with keys \['b', 'w'\]; extra "
                          r"key\(s\) \['b'\]"
    ):
        filter_shard(tree, {"w": None})
    with pytest.raises(
        TypeError, match=r"^filter_shard: the sharding at key path \['b'\]\[0\] must be a jax.sharding.Sharding, a jax.Device "
                         r"or None, got P .*NamedSharding\(mesh, spec\)"
    ):
        filter_shard(tree, {"w": None, "b": [P("model")]})


def _step_fn(params: Any, x: Any, *, lr: float = 0.5) -> Any:
    y = jnp.tanh(x @ params["w"]) + params["b"]
    loss = jnp.mean(y**2)
    new = {"w": params["w"] - lr * params["w"] * loss, "b": params["b"] * (1 - lr), "act": params["act"]}
    return new, {"loss": loss, "y": y, "note": "step"}


def _step_inputs() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(16, 8)).astype(np.float32), "b": rng.normal(size=(8,)).astype(np.float32), "act": "tanh"}
    return params, rng.normal(size=(4, 16)).astype(np.float32)


def test_filter_jit_in_and_out_shardings(mesh24: Any) -> None:
    from spruce.jax import filter_jit

    def S(*entries: Any) -> Any:
        return NamedSharding(mesh24, P(*entries))

    params, x = _step_inputs()
    plain_new, plain_aux = filter_jit(_step_fn)(params, x)
    f = filter_jit(
        _step_fn,
        in_shardings=({"w": S(None, "model"), "b": S("model"), "act": S()}, S("data")),  # "act" is static: ignored
        out_shardings=({"w": S("model", None), "b": None, "act": None}, {"loss": S(), "y": S("data", "model"), "note": S()}),
    )
    for _ in range(2):  # the first call compiles, the second takes the cached entry
        new, aux = f(params, x)
        for a, b in [(new["w"], plain_new["w"]), (new["b"], plain_new["b"]), (aux["loss"], plain_aux["loss"]),
                     (aux["y"], plain_aux["y"])]:
            # the unsharded call's values: a partitioned matmul or mean may add in another order,
            # so the last bits can differ (they do on jax 0.12), within float32 rounding
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        assert new["act"] == "tanh" and aux["note"] == "step"
        assert new["w"].sharding == S("model", None) and new["w"].addressable_shards[0].data.shape == (4, 8)
        assert aux["y"].sharding == S("data", "model") and aux["y"].addressable_shards[0].data.shape == (2, 2)
        assert aux["loss"].sharding.is_fully_replicated
    # the inputs were placed as asked: what the compiled function expects
    shardings = f.lower(params, x).compile().input_shardings[0]
    assert [s.spec for s in shardings] == [P("model"), P(None, "model"), P("data")]  # b, w, x (flatten order)
    # one sharding for every argument, and for the whole output; a bare-array output
    rep = filter_jit(_step_fn, in_shardings=S(), out_shardings=S())
    new, aux = rep(params, x)
    assert all(a.sharding == S() for a in jax.tree.leaves((new, aux)) if isinstance(a, jax.Array))
    np.testing.assert_allclose(np.asarray(new["w"]), np.asarray(plain_new["w"]), rtol=1e-5, atol=1e-6)
    bare = filter_jit(lambda a, n: a * n, in_shardings=(S("model"), None), out_shardings=S("data"))
    out = bare(np.arange(8.0, dtype=np.float32), 3)
    assert out.sharding == S("data") and out.tolist() == [3.0 * i for i in range(8)]
    # a Module as the function: its own arrays are not constrained; in_shardings are the call's
    from spruce import nn

    lin = nn.Linear(16, 8, key=jax.random.key(0))
    g = filter_jit(lin, in_shardings=S("model"), out_shardings=S("data"))
    y = g(jnp.asarray(x[0]))
    assert y.sharding == S("data")
    np.testing.assert_allclose(np.asarray(y), np.asarray(lin(jnp.asarray(x[0]))), rtol=1e-6, atol=1e-6)


def test_filter_jit_bad_shardings_name_the_key_path(mesh24: Any) -> None:
    from spruce.jax import filter_jit

    S = NamedSharding(mesh24, P())
    params, x = _step_inputs()
    with pytest.raises(
        ValueError, match=r"^filter_jit\(_step_fn\): in_shardings: the shardings must be .*; at key path args: expected a "
                          r"tuple of length 1, got a tuple of length 2"
    ):
        filter_jit(_step_fn, in_shardings=({"w": S},))(params, x)
    with pytest.raises(
        ValueError, match=r"in_shardings: .*at key path args\[0\]: expected a dict with keys \['w'\], got a dict with keys "
                          r"\['act', 'b', 'w'\]"
    ):
        filter_jit(_step_fn, in_shardings=({"w": S}, None))(params, x)
    with pytest.raises(
        ValueError, match=r"^filter_jit\(_step_fn\): out_shardings: .*at key path output\[1\]: expected a tuple of length 2, "
                          r"got a dict"
    ):
        filter_jit(_step_fn, out_shardings=(None, (S, S)))(params, x)
    with pytest.raises(
        TypeError, match=r"in_shardings: the sharding at key path args\[1\] must be a jax.sharding.Sharding, a jax.Device or "
                         r"None, got P"
    ):
        filter_jit(_step_fn, in_shardings=(None, P("data")))(params, x)
    # a sharding that does not fit its argument: JAX's error, with the argument's key path
    with pytest.raises(
        ValueError, match=r"^filter_jit: argument args\[1\]: One of pjit arguments is incompatible with its sharding .* rank "
                          r"at least 3"
    ):
        filter_jit(_step_fn, in_shardings=(None, NamedSharding(mesh24, P("model", "data", None))))(params, x)
    with pytest.raises(ValueError, match=r"^filter_jit: argument args\[0\]\['w'\]: One of pjit arguments is incompatible"):
        filter_jit(_step_fn,
                   in_shardings=({"w": NamedSharding(mesh24, P("model", "data", None)), "b": None, "act": None}, None))(params, x)
    # an argument committed to another sharding than in_shardings asks: JAX's error, named
    placed = jax.device_put(x, NamedSharding(mesh24, P("model")))
    with pytest.raises(
        ValueError, match=r"^filter_jit: argument args\[1\] is committed to a sharding other than its in_shardings entry "
                          r".*does not match the sharding"
    ):
        filter_jit(_step_fn, in_shardings=(None, NamedSharding(mesh24, P("data"))))(params, placed)


def test_filter_jit_sharding_errors_name_the_argument_output_or_module(mesh24: Any) -> None:
    from spruce.jax import filter_jit

    S = NamedSharding(mesh24, P("model"))  # 4 ways: does not divide 3
    with pytest.raises(
        ValueError, match=r"^filter_jit: the in_shardings entry for argument args\[1\]\['w'\] \(shape \(3,\)\) does not divide "
                          r"it: "
    ):
        filter_jit(lambda q, p: p["w"] * 2, in_shardings=(None, {"w": S}))(np.ones(8), {"w": np.ones(3)})
    with pytest.raises(ValueError, match=r"^filter_jit: an output of shape \(3,\) does not fit its out_shardings entry: "):
        filter_jit(lambda a: {"k": a[:3]}, out_shardings={"k": S})(np.ones(8))
    with pytest.raises(ValueError, match=r"^filter_jit: the output \(one array\) is incompatible with its sharding annotation"):
        filter_jit(lambda a: a.sum(), out_shardings=S)(np.ones(8))
    with pytest.raises(
        ValueError, match=r"the function returns a single array, so out_shardings must be one Sharding \(or None\), not a tuple"
    ):
        filter_jit(lambda a: a * 2, out_shardings=(S, S))(np.ones(8))
    with pytest.raises(ValueError, match=r"at key path output\['k'\]: expected a dict with keys \['x'\], got an array"):
        filter_jit(lambda a: {"k": a}, out_shardings={"k": {"x": S}})(np.ones(8))

    class Scale(spruce.Module):
        w: Any

        def __call__(self, x: Any) -> Any:
            return self.w * x

    with pytest.raises(ValueError, match=r"^filter_jit\(.*Scale\): in_shardings: "):
        filter_jit(Scale(np.ones(8)), in_shardings=(S, S))(np.ones(8))


def test_view_counts_a_tied_array_once_and_draws_explain(mesh24: Any) -> None:
    """spruce.view's sharding records: an array held at two paths is held once by the devices,
    so it is one record and its bytes count once; and explain's report draws as a page whose
    memory bars are explain's exact bytes per device."""
    import spruce.view as view

    placed = sh.shard(_tree(), mesh24, RULES)
    tied = {"a": placed["embed"], "b": placed["embed"], "c": placed["layers"][0]["attn"]["query_proj"].kernel}
    leaves = view.sharding_leaves(tied)
    assert [x.path for x in leaves] == ["a", "c"]
    held = _per_device({"a": tied["a"], "c": tied["c"]})  # what the devices hold
    order = list(mesh24.devices.flat)
    assert view.device_memory(leaves) == [held[d.id] for d in order] == [96 + 48] * 8
    page = view.html(tied)
    assert page.count('<span class="mono">device ') == 8
    assert "memory per device (2 sharded arrays)" in page and page.count(">144 B<") == 8
    e = sh.explain(_tree(), mesh24, RULES)
    plan = view.sharding_html(e, title="plan")
    assert plan.count('<svg class="grid"') == len(e.rows) == 6
    per = 96 + 2 * 48 + 2 * 24 + 4
    assert set(e.bytes_per_device.values()) == {per} and plan.count(f">{per} B<") == 8
    assert "P(&#x27;model&#x27;, None) over data=2 model=4" in plan


def test_specs_cache_sees_a_split_that_stops_dividing(mesh24: Any) -> None:
    """A cached result is reused only while each split dimension still has the length it had:
    an array reshaped in place (the same object) is resolved anew."""
    rules = sh.Rules([("w", P("model")), ("**", None)], on_indivisible="replicate")
    a = np.zeros((8, 2))
    assert sh.specs({"w": a, "b": a}, rules, mesh=mesh24) == {"w": P("model"), "b": P()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy 2.5 deprecates setting .shape
        a.shape = (2, 8)
    assert sh.specs({"w": a, "b": a}, rules, mesh=mesh24) == {"w": P(None), "b": P()}
    strict = sh.Rules([("w", P("model")), ("**", None)])
    assert sh.specs({"w": np.zeros((4, 2))}, strict, mesh=mesh24) == {"w": P("model")}
    with pytest.raises(
        sh.ShardingError, match=r"dimension 0 of shape \(6, 2\) has length 6, which mesh axis 'model' of size 4 does not divide"
    ):
        sh.specs({"w": np.zeros((6, 2))}, strict, mesh=mesh24)


def test_explain_counts_a_tied_placed_array_once(mesh24: Any) -> None:
    """A jax.Array at two key paths, already laid out as its spec says, stays where it is when
    placed: explain counts it once, as spruce.view does; a NumPy array at two key paths is
    copied per path and counts twice."""
    import spruce.view as view

    placed = sh.shard(_tree(), mesh24, RULES)
    embed, kernel = placed["embed"], placed["layers"][0]["attn"]["query_proj"].kernel
    rules = sh.Rules([("a", P("model", None)), ("b", P("model")), ("c", P("data", None))])
    tied = {"a": embed, "b": embed, "c": kernel}  # P("model") is P("model", None)'s layout
    e = sh.explain(tied, mesh24, rules)
    held = _per_device({"a": embed, "c": kernel})
    assert e.bytes_per_device == held == {d.id: 96 + 48 for d in mesh24.devices.flat}
    assert view.device_memory(view.sharding_leaves(tied)) == [held[d.id] for d in mesh24.devices.flat]
    assert e.total_bytes == 16 * 6 * 4 + 4 * 6 * 4
    assert [r.path for r in e.rows] == ["a", "b", "c"] and e.rows[1].bytes_per_device == 96
    out = sh.shard(tied, mesh24, rules)
    assert out["a"] is embed and _buffers(out["b"]) == _buffers(embed)  # nothing was copied
    # placed otherwise (replicated), the array is copied per key path: twice
    moved = sh.explain(tied, mesh24, sh.Rules([("a", None), ("b", None), ("c", P("data", None))]))
    assert set(moved.bytes_per_device.values()) == {2 * 16 * 6 * 4 + 48}
    # a NumPy array at two key paths: two device_puts, two copies
    host = np.ones((8, 4), np.float32)
    e2 = sh.explain({"a": host, "b": host}, mesh24, sh.Rules([("*", P("model"))]))
    out2 = sh.shard({"a": host, "b": host}, mesh24, sh.Rules([("*", P("model"))]))
    assert out2["a"] is not out2["b"]
    assert e2.bytes_per_device == _per_device(out2) == {d.id: 2 * 2 * 4 * 4 for d in mesh24.devices.flat}
    assert e2.total_bytes == 2 * 8 * 4 * 4


def test_filter_shard_of_shape_dtype_structs_checks_the_split(mesh24: Any) -> None:
    """A jax.ShapeDtypeStruct leaf gets the error a real array gets, naming the key path, the
    shape, the dimension, the mesh axis and its size."""
    from spruce.jax import filter_shard

    S = NamedSharding(mesh24, P("model"))
    why = (
        r"\(shape \(6, 4\), float32\) does not fit its sharding .*; dimension 0 of shape \(6, 4\) has length 6, "
        r"which mesh axis 'model' of size 4 does not divide \(spec P\('model',\)\): \w*Error: "
    )
    abstract = {"w": jax.ShapeDtypeStruct((6, 4), np.float32), "b": [jax.ShapeDtypeStruct((8,), np.float32)]}
    with pytest.raises(ValueError, match=r"^filter_shard: the leaf at key path \['w'\] " + why):
        filter_shard(abstract, {"w": S, "b": None})
    with pytest.raises(ValueError, match=r"^filter_shard: the leaf at key path \['w'\] " + why):
        filter_shard({"w": np.ones((6, 4), np.float32), "b": None}, {"w": S, "b": None})  # the same for an array
    both = NamedSharding(mesh24, P(("data", "model")))
    with pytest.raises(
        ValueError, match=r"^filter_shard: the leaf at key path \['b'\]\[0\] .*; dimension 0 of shape \(4,\) has length 4, "
                          r"which mesh axis 'data' of size 2 x 'model' of size 4 does not divide"
    ):
        filter_shard({"b": [jax.ShapeDtypeStruct((4,), np.float32)]}, both)
    with pytest.raises(
        ValueError, match=r"^filter_shard: the leaf at the root \(shape \(8,\), float32\) does not fit its sharding .*rank at "
                          r"least 2"
    ):
        filter_shard(jax.ShapeDtypeStruct((8,), np.float32), NamedSharding(mesh24, P(None, "model")))
    out = filter_shard(abstract, {"w": NamedSharding(mesh24, P(None, "model")), "b": S})
    assert out["w"].sharding == NamedSharding(mesh24, P(None, "model")) and out["w"].shape == (6, 4)
    assert out["b"][0].sharding == S and out["b"][0].dtype == np.float32
    weak = jax.ShapeDtypeStruct((8,), jnp.float32, weak_type=True)
    placed = filter_shard({"x": weak}, S)["x"]
    assert placed.weak_type and placed.sharding == S  # as a weak-typed array keeps it


def test_fsdp_keeps_about_one_copy(mesh24: Any) -> None:
    from spruce.models import minilm

    model = minilm.load()
    rules = sh.Rules.fsdp(("data", "model"), min_size=1024)
    e = sh.explain(model, mesh24, rules)
    total = sum(e.bytes_per_device.values())
    assert total / e.total_bytes < 1.01
    rows = {r.path: r for r in e.rows}
    assert rows["embeddings.word_embeddings.weight"].spec == P(None, ("data", "model"))  # 384 % 8 == 0, 30522 % 8 != 0
    assert rows["embeddings.position_embeddings.weight"].spec == P(("data", "model"))  # 512 > 384
    assert rows["layers.0.attention_norm.bias"].spec == P()  # 384 < min_size
    # dim 0 or replicate only: ~4.6x
    dim0 = sh.Rules([("embeddings.word_embeddings.weight", P()), ("re:.*(weight)", P("model")), ("**", None)],
                    on_indivisible="replicate")
    assert sum(sh.explain(model, mesh24, dim0).bytes_per_device.values()) / e.total_bytes > 4


# -- sharded checkpoints -----------------------------------------------------------------------------


def _saved(tmp_path: Any, mesh: Any, tree: Any = None, rules: Any = RULES) -> tuple[str, Any]:
    placed = sh.shard(_tree() if tree is None else tree, mesh, rules)
    d = str(tmp_path / "ckpt")
    sio.save_sharded(d, placed)
    return d, placed


def _index(d: str) -> dict[str, Any]:
    with open(os.path.join(d, "index.json")) as f:
        return json.load(f)  # type: ignore[no-any-return]


def _pieces(d: str) -> list[str]:
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def test_each_distinct_shard_written_once(tmp_path: Any, mesh24: Any) -> None:
    d, placed = _saved(tmp_path, mesh24)
    (piece,) = _pieces(d)
    stored = load_file(os.path.join(d, piece))  # a plain safetensors file
    # embed: 4 distinct row blocks (replicated over 'data'); kernels: 2 blocks each; the
    # replicated bias and scale: once each
    assert sorted(k for k in stored if k.startswith("embed")) == [
        "embed[0:4,0:6]", "embed[12:16,0:6]", "embed[4:8,0:6]", "embed[8:12,0:6]"
    ]
    assert sorted(k for k in stored if k.startswith("layers.0")) == [
        "layers.0.attn.query_proj.bias", "layers.0.attn.query_proj.kernel[0:2,0:6]", "layers.0.attn.query_proj.kernel[2:4,0:6]"
    ]
    total = sum(np.asarray(x).nbytes for x in jax.tree.leaves(_tree()) if hasattr(x, "nbytes"))
    assert sum(v.nbytes for v in stored.values()) == total
    np.testing.assert_array_equal(stored["embed[4:8,0:6]"], _tree()["embed"][4:8])
    idx = _index(d)
    assert idx["format"] == "spruce.sharded" and idx["version"] == 1
    assert idx["tensors"]["embed"]["shape"] == [16, 6] and idx["tensors"]["embed"]["dtype"] == "F32"
    assert [piece, "embed[4:8,0:6]", [[4, 8], [0, 6]]] in idx["tensors"]["embed"]["slices"]
    assert sio.read_header(d)["embed"] == sio.TensorInfo("float32", (16, 6), 96, 384)


def test_load_without_shardings_is_the_single_file(tmp_path: Any, mesh24: Any) -> None:
    d, placed = _saved(tmp_path, mesh24)
    single = str(tmp_path / "single.safetensors")
    sio.save(single, placed)
    a, b = sio.load(d), sio.load(single)
    _equal_trees(a, b)
    assert isinstance(a["embed"], np.ndarray) and isinstance(a["layers"][0]["attn"]["query_proj"], Pair)
    assert a["scale"].shape == () and a["step"] == 7 and a["name"] == "tiny"
    host = str(tmp_path / "host")
    sio.save_sharded(host, _tree())  # NumPy leaves: one block each, NumPy scalars kept
    assert type(sio.load(host)["scale"]) is np.float32
    _equal_trees(sio.load(host), _tree())


def test_restore_onto_other_meshes(tmp_path: Any, mesh24: Any, mesh8: Any) -> None:
    d, placed = _saved(tmp_path, mesh24)
    expected = jax.tree.map(np.asarray, _tree())
    # 2x4 -> 8 devices, one sharding for everything
    every = sio.load(d, shardings=NamedSharding(mesh8, P()))
    assert every["embed"].sharding == NamedSharding(mesh8, P()) and every["step"] == 7
    _equal_trees(jax.tree.map(np.asarray, every), expected)
    # 2x4 -> 8, by rules
    rules8 = sh.Rules([("embed", P("x")), ("**", None)])
    like = _tree()
    got = sio.load(d, like, shardings=sh.shardings(like, mesh8, rules8))
    assert got["embed"].sharding.spec == P("x") and got["embed"].addressable_shards[0].data.shape == (2, 6)
    _equal_trees(jax.tree.map(np.asarray, got), expected)
    # 8 devices -> 1
    one = SingleDeviceSharding(jax.devices()[3])
    single = sio.load(d, like, shardings=one)
    assert single["embed"].sharding == one
    _equal_trees(jax.tree.map(np.asarray, single), expected)
    # like= jax.Arrays: their own shardings
    again = sio.load(d, like=placed)
    assert again["embed"].sharding == placed["embed"].sharding
    # a prefix tree of shardings: None leaves stay NumPy
    prefix = {"embed": NamedSharding(mesh8, P("x")), "layers": None, "scale": None, "step": None, "name": None}
    mixed = sio.load(d, like, shardings=prefix)
    assert isinstance(mixed["embed"], jax.Array) and isinstance(mixed["layers"][0]["attn"]["query_proj"].kernel, np.ndarray)
    with pytest.raises(
        ValueError, match=r"load: the shardings must be .* a prefix of the structure of like; at key path like: expected a "
                          r"dict with keys \['embed'\]"
    ):
        sio.load(d, like, shardings={"embed": one})


def test_a_sharding_that_does_not_fit_names_the_leaf(tmp_path: Any, mesh24: Any, mesh8: Any) -> None:
    """A spec longer than a tensor's rank, or mesh axes that do not divide a dimension: a
    ShardingError naming the key path, the shape and the spec, JAX's error chained."""
    path = str(tmp_path / "t.safetensors")
    sio.save(path, {"bias": np.ones(5, np.float32), "w": np.ones((4, 8), np.float32)})
    with pytest.raises(sh.ShardingError) as info:
        sio.load(path, shardings=NamedSharding(mesh24, P("data", "model")))
    assert str(info.value) == (
        "load: bias: the sharding P('data', 'model') does not fit the tensor of shape [5]: the spec has 2 "
        "entries, the tensor 1 dimensions (a spec has at most one entry per dimension)"
    )
    assert isinstance(info.value, ValueError)
    like = {"bias": np.ones(5, np.float32), "w": np.ones((4, 8), np.float32)}
    with pytest.raises(sh.ShardingError) as info2:
        sio.load(path, like, shardings={"bias": NamedSharding(mesh8, P("x")), "w": None})
    assert re.match(r"load: bias: the sharding P\('x',\) does not fit the tensor of shape \[5\]: ",
                    str(info2.value)), str(info2.value)
    assert info2.value.__cause__ is not None
    got = sio.load(path, like, shardings={"bias": None, "w": NamedSharding(mesh24, P("data", "model"))})
    assert got["w"].addressable_shards[0].data.shape == (2, 2)


def test_each_device_reads_only_its_block(tmp_path: Any, mesh24: Any, mesh8: Any, monkeypatch: Any) -> None:
    d, _ = _saved(tmp_path, mesh24)
    seen: list[tuple[str, tuple[tuple[int, int], ...]]] = []
    region = _sharded.Reader.region

    def spy(self: Any, name: str, index: Any, detach: bool = False) -> Any:
        out = region(self, name, index, detach)
        if name == "embed":  # placed: a copy, not a view of the mapping
            assert detach and not any(np.shares_memory(out, self._view(s)) for s in self.index.slices[name])
            seen.append((name, tuple((s.start, s.stop) for s in index)))
        return out

    monkeypatch.setattr(_sharded.Reader, "region", spy)
    like = _tree()
    got = sio.load(d, like, shardings=sh.shardings(like, mesh8, sh.Rules([("embed", P("x")), ("**", None)])))
    embed = sorted(i for n, i in seen if n == "embed")
    assert embed == [((2 * k, 2 * k + 2), (None, None)) for k in range(8)]
    np.testing.assert_array_equal(got["embed"], like["embed"])


def test_single_file_onto_a_mesh(tmp_path: Any, mesh24: Any) -> None:
    path = str(tmp_path / "one.safetensors")
    sio.save(path, _tree())
    like = _tree()
    got = sio.load(path, like, shardings=sh.shardings(like, mesh24, RULES))
    assert got["embed"].sharding.spec == P("model", None)
    _equal_trees(jax.tree.map(np.asarray, got), jax.tree.map(np.asarray, _tree()))


def test_strict_names_missing_unexpected_reshaped(tmp_path: Any, mesh24: Any) -> None:
    d, _ = _saved(tmp_path, mesh24)
    like = _tree()
    del like["embed"]
    like["extra"] = np.zeros(2, np.float32)
    with pytest.raises(MismatchError) as info:
        sio.load(d, like)
    assert info.value.missing == ["extra"] and info.value.unexpected == ["embed"]
    reshaped = _tree()
    reshaped["embed"] = np.zeros((6, 16), np.float32)
    with pytest.raises(MismatchError, match=r"embed: like has float32\[6, 16\], the file float32\[16, 6\]"):
        sio.load(d, reshaped)


def test_a_killed_save_leaves_the_previous_checkpoint(tmp_path: Any, mesh24: Any, monkeypatch: Any) -> None:
    d, _ = _saved(tmp_path, mesh24)
    before = _pieces(d)
    newer = _tree()
    newer["embed"] = newer["embed"] + 1

    def killed(path: str, write: Any) -> None:
        raise KeyboardInterrupt  # the pieces are written, the index is not

    monkeypatch.setattr(_sharded, "atomic_write", killed)
    with pytest.raises(KeyboardInterrupt):
        sio.save_sharded(d, sh.shard(newer, mesh24, RULES))
    assert _pieces(d) == before  # an interrupted save removes its own piece
    _equal_trees(sio.load(d), sio.load(d))
    np.testing.assert_array_equal(sio.load(d)["embed"], _tree()["embed"])
    orphan = os.path.join(d, "0123456789abcdef-00000-of-00001.safetensors")
    with open(os.path.join(d, before[0]), "rb") as src, open(orphan, "wb") as dst:
        dst.write(src.read())  # the orphan a process killed with SIGKILL (no clean-up) leaves
    assert len(_pieces(d)) == 2
    monkeypatch.undo()
    sio.save_sharded(d, sh.shard(newer, mesh24, RULES))
    assert len(_pieces(d)) == 1 and _pieces(d) != before  # old and orphan pieces removed
    np.testing.assert_array_equal(sio.load(d)["embed"], newer["embed"])


def test_save_sharded_bad_input(tmp_path: Any, mesh24: Any) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as info:
        sio.save_sharded(str(f), {"a": np.ones(2)})
    assert info.value.filename == str(f)
    with pytest.raises(ValueError, match=r"key path \['a'\]\[0\]"):
        sio.save_sharded(str(tmp_path / "d"), {"a": [object()]})
    assert not os.path.exists(tmp_path / "d" / "index.json")


# -- corrupted sharded checkpoints: one CheckpointError naming the tensor and the file --------------


def _corrupt(tmp_path: Any, mesh24: Any, edit: Any) -> tuple[str, str]:
    d, _ = _saved(tmp_path, mesh24)
    idx = _index(d)
    edit(idx, d)
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(idx, f)
    return d, _pieces(d)[0]


def _raises(d: str, pattern: str) -> None:
    for call in (lambda: sio.load(d), lambda: sio.read_header(d)):
        with pytest.raises(CheckpointError) as info:
            call()
        assert info.value.path == d
        assert re.search(pattern, str(info.value)), str(info.value)


def test_corrupt_missing_piece(tmp_path: Any, mesh24: Any) -> None:
    d, piece = _corrupt(tmp_path, mesh24, lambda idx, d: None)
    os.unlink(os.path.join(d, piece))
    _raises(d, rf"tensor 'embed': piece file '{piece}' is missing")


def test_corrupt_truncated_piece(tmp_path: Any, mesh24: Any) -> None:
    d, piece = _corrupt(tmp_path, mesh24, lambda idx, d: None)
    full = os.path.join(d, piece)
    os.truncate(full, os.path.getsize(full) - 8)
    _raises(d, rf"tensor 'embed': piece file '{piece}' is unreadable: .*truncated")


def test_corrupt_shape_lies(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["shape"] = [20, 6]

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'embed': its slices cover 96 of its 120 elements \(shape \[20, 6\]; pieces \['{piece}'\]\): "
               r"the checkpoint is incomplete")


def test_corrupt_slice_differs_from_block(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["slices"][0][2] = [[0, 3], [0, 6]]

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, r"tensor 'embed': the index says the slice \[0:3, 0:6\] \(shape \[3, 6\], float32\) "
               rf"is the block 'embed\[0:4,0:6\]' of '{piece}', which is float32\[4, 6\]")


def test_corrupt_dtype_lies(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["dtype"] = "I32"

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'embed': the index says .* \(shape \[4, 6\], int32\) .* of '{piece}', which is float32\[4, 6\]")


def test_corrupt_slice_outside_shape(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["slices"][3][2] = [[14, 18], [0, 6]]

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'embed': the slice \[14:18, 0:6\] in '{piece}' lies outside its shape \[16, 6\]")


def test_corrupt_overlapping_slices(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        s = idx["tensors"]["embed"]["slices"]
        s[1] = [s[1][0], s[0][1], [[2, 6], [0, 6]]]  # the block of rows 0:4 claimed for rows 2:6

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'embed': the slices \[0:4, 0:6\] in '{piece}' and \[2:6, 0:6\] in '{piece}' overlap")


def test_corrupt_incomplete_slices(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        del idx["tensors"]["layers.1.attn.query_proj.kernel"]["slices"][1]

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'layers.1.attn.query_proj.kernel': its slices cover 12 of its 24 elements .*'{piece}'.*incomplete")


def test_corrupt_block_not_in_piece(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["slices"][0][1] = "embed[0:4]"

    d, piece = _corrupt(tmp_path, mesh24, edit)
    _raises(d, rf"tensor 'embed': the piece file '{piece}' has no block 'embed\[0:4\]'")


def test_corrupt_piece_name_outside_the_directory(tmp_path: Any, mesh24: Any) -> None:
    def edit(idx: Any, d: str) -> None:
        idx["tensors"]["embed"]["slices"][0][0] = "../elsewhere.safetensors"

    d, _ = _corrupt(tmp_path, mesh24, edit)
    _raises(d, r"tensor 'embed': piece file '../elsewhere.safetensors' is not a plain .safetensors file name")


def test_corrupt_index_not_json(tmp_path: Any, mesh24: Any) -> None:
    d, _ = _saved(tmp_path, mesh24)
    with open(os.path.join(d, "index.json"), "w") as f:
        f.write('{"format": "spruce.sharded", ')
    _raises(d, r"corrupted index: index.json is not JSON")
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"format": "spruce.sharded", "version": 1, "metadata": {},
                   "tensors": {"a": {"dtype": "F32", "shape": [2], "slices": "x"}}}, f)
    _raises(d, r"corrupted index: tensor 'a' has no slices")


# -- the real thing ----------------------------------------------------------------------------------

BERT_RULES = sh.Rules(
    [
        ("embeddings.word_embeddings.weight", P(None, "model")),
        ("embeddings.position_embeddings.weight", P(None, "model")),
        ("layers.*.attention.*_proj.weight", P("model", None)),
        ("layers.*.attention.*_proj.bias", P("model")),
        ("layers.*.intermediate.weight", P("model", None)),
        ("layers.*.intermediate.bias", P("model")),
        ("layers.*.output.weight", P(None, "model")),
        ("**", None),
    ]
)


def test_minilm_sharded_from_the_hugging_face_file(mesh24: Any) -> None:
    from spruce.models import bert, minilm

    folder = minilm.model_path()
    skeleton = bert.BertModel.skeleton(bert.BertConfig.from_json(folder / "config.json"))
    placements = sh.shardings(skeleton, mesh24, BERT_RULES)
    model = sio.load(folder / "model.safetensors", like=skeleton, rename=bert.checkpoint_key, shardings=placements)
    q = model.layers[0].attention.query_proj.weight
    assert isinstance(q, jax.Array) and q.sharding.spec == P("model", None)
    assert q.addressable_shards[0].data.shape == (96, 384)
    assert model.embeddings.word_embeddings.weight.addressable_shards[0].data.shape == (30522, 96)
    assert sh.explain(skeleton, mesh24, BERT_RULES).bytes_per_device == _per_device(model)
    ids = np.array([[101, 7592, 2088, 102, 0, 0], [101, 2129, 2024, 2017, 1029, 102]], np.int32)
    mask = (ids != 0).astype(np.int32)
    batch = NamedSharding(mesh24, P("data"))

    def embed(model: Any, ids: Any, mask: Any) -> Any:  # minilm.encode's batch function, on this model
        arrays, static = spruce.partition(list(model.layers), spruce.is_array)
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)
        return minilm._embed_batch(model.embeddings, stacked, static[0], ids, mask)

    sharded = jax.jit(embed)(model, jax.device_put(ids, batch), jax.device_put(mask, batch))
    plain = jax.jit(embed)(jax.device_put(minilm.load(), jax.devices()[0]), ids, mask)
    assert sharded.shape == (2, 384)
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(plain), rtol=0, atol=1e-6)


# -- the command line --------------------------------------------------------------------------------


def test_cli_inspect_shows_the_merged_tree_and_its_split(tmp_path: Any, mesh24: Any, capsys: Any) -> None:
    from spruce.cli import main

    d, _ = _saved(tmp_path, mesh24)
    assert main(["inspect", d]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "ckpt  (sharded)  6 tensors, 157 parameters, 628 B (628 bytes)"
    assert re.search(r"embed\s+\[16, 6\]\s+float32\s+96\s+384 B\s+[^\n]*?%\s+4x1 blocks of \(4, 6\) in 1 file\s*$", out, re.M)
    assert re.search(r"kernel\s+\[4, 6\]\s+float32\s+24\s+96 B\s+[^\n]*?%\s+2x1 blocks of \(2, 6\) in 1 file\s*$", out, re.M)
    assert re.search(r"bias\s+\[6\]\s+float32\s+6\s+24 B\s+[^\n]*?%\s+whole\s*$", out, re.M)


def test_cli_diff_sharded_directory_and_file(tmp_path: Any, mesh24: Any, capsys: Any) -> None:
    from spruce.cli import main

    d, placed = _saved(tmp_path, mesh24)
    same = str(tmp_path / "same.safetensors")
    sio.save(same, placed)
    assert main(["diff", d, same]) == 0
    assert "same structure: 6 tensors with the same names, shapes and dtypes" in capsys.readouterr().out
    other = jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, placed)
    other["embed"] = other["embed"][:8]
    del other["scale"]
    diff = str(tmp_path / "other.safetensors")
    sio.save(diff, other)
    assert main(["diff", d, diff]) == 1
    out = capsys.readouterr().out
    assert "- scale  float32[]" in out and "~ embed  float32[16, 6] -> float32[8, 6]" in out


def test_typed_keys_sharded_save_and_restore(tmp_path: Any, mesh8: Any, mesh24: Any) -> None:
    """An array of typed PRNG keys split over 8 devices is written as its key data, one block
    per device, and restored as keys on the like's sharding or on another mesh."""
    keys = jax.device_put(jax.random.split(jax.random.key(4), 8), NamedSharding(mesh8, P("x")))
    tree = {"keys": keys, "one": jax.random.key(9, impl="rbg")}
    d = str(tmp_path / "keys")
    sio.save_sharded(d, tree)
    slices = _index(d)["tensors"]["keys"]["slices"]
    assert sorted(tuple(tuple(b) for b in s[2]) for s in slices) == [((i, i + 1), (0, 2)) for i in range(8)]
    want = np.asarray(jax.random.key_data(keys))
    got = sio.load(d, like=tree)
    assert got["keys"].dtype == keys.dtype and got["keys"].sharding == keys.sharding
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got["keys"])), want)
    assert got["one"].dtype == tree["one"].dtype
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got["one"])), np.asarray(jax.random.key_data(tree["one"])))
    other = NamedSharding(mesh24, P("model"))
    moved = sio.load(d, shardings={"keys": other, "one": None})
    assert moved["keys"].sharding == other and moved["keys"].dtype == keys.dtype
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(moved["keys"])), want)


def test_url_loads_fetch_only_each_devices_bytes(mesh8: Any, mesh24: Any) -> None:
    """From an object store (``countmem://``: fsspec's memory filesystem logging the ranges
    read), each device's block is fetched alone: rows as one range, columns as one range per
    row; a sharded checkpoint's blocks only where they overlap."""
    pytest.importorskip("fsspec")
    import uuid

    import cloud_helpers as ch

    x = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)  # 256 KiB
    url = f"countmem://{uuid.uuid4().hex}/m.safetensors"
    sio.save(url, {"x": x})
    for spec, runs in ((P("x"), 1), (P(None, "x"), 64)):
        ch.clear()
        got = sio.load(url, shardings=NamedSharding(mesh8, spec))["x"]
        np.testing.assert_array_equal(np.asarray(got), x)
        # the header's read (one readahead block), then each device's block and nothing else
        assert ch.READS[0][1] == 0 and ch.READS[0][3] == 64 << 10
        data = [n for _, _, _, n in ch.READS[1:]]
        assert data == [x.nbytes // 8 // runs] * (8 * runs), (spec, data[:20])
    # a sharded checkpoint stored in 8 row blocks, placed on 2 row halves (each device of a half
    # fetches the 4 stored blocks it overlaps)
    d = f"countmem://{uuid.uuid4().hex}/ckpt"
    sio.save_sharded(d, {"x": jax.device_put(x, NamedSharding(mesh8, P("x")))})
    ch.clear()
    got = sio.load(d, shardings=NamedSharding(mesh24, P("data")))["x"]
    np.testing.assert_array_equal(np.asarray(got), x)
    blocks = [n for _, start, _, n in ch.READS if start is not None and start > 0 and n == x.nbytes // 8]
    assert len(blocks) == 8 * 4, len(blocks)  # 8 devices x the 4 blocks of their half


def test_manager_on_a_url_sharded_step(mesh8: Any) -> None:
    """A step whose arrays lie on 8 devices is a sharded checkpoint on the store: its pieces,
    then its index, then its marker, written in that order (no rename)."""
    pytest.importorskip("fsspec")
    import uuid

    import cloud_helpers as ch

    prefix = uuid.uuid4().hex
    x = jax.device_put(np.arange(64.0, dtype=np.float32).reshape(8, 8), NamedSharding(mesh8, P("x")))
    ch.clear()
    with sio.CheckpointManager(f"countmem://{prefix}/run") as mgr:
        mgr.save(7, {"x": x, "step": 7})
        mgr.wait()
        assert mgr.steps() == [7]
        got = mgr.restore(like={"x": x, "step": 0})
    assert got["x"].sharding == x.sharding and got["step"] == 7
    np.testing.assert_array_equal(np.asarray(got["x"]), np.asarray(x))
    names = [w.removeprefix(f"/{prefix}/run/") for w in ch.WRITES]
    assert names[-2:] == ["step_7/index.json", "step_7.commit"]
    assert len(names) == 3 and names[0].startswith("step_7/") and names[0].endswith("-00000-of-00001.safetensors")
