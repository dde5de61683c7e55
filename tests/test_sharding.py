"""spruce.sharding and sharded checkpoints.

The cases that need 8 devices live in ``sharding_cases.py`` and run in one subprocess started
with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (JAX reads it once, when its
backend starts, so this process and the other test files keep the default device set); each
case is reported here as its own test.  The patterns, the rule checks and the two-process
save run here.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
import textwrap
import warnings
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import spruce.io as sio
import spruce.sharding as sh
from spruce.sharding import _specs as sh_specs

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "sharding_cases.py")


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    src = os.path.join(os.path.dirname(HERE), "src")
    if os.environ.get("SPRUCE_EXPECT_COMPILED") == "0":
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _case_names() -> list[str]:
    with open(CASES, encoding="utf-8") as f:
        module = ast.parse(f.read())
    return [n.name for n in module.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: Any) -> dict[str, str | None]:
    """Run sharding_cases.py on 8 host devices once; case name -> None (passed) or the
    failure text."""
    report = tmp_path_factory.mktemp("cases") / "report.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
         f"--rootdir={os.path.dirname(HERE)}", CASES],
        env=_env(8), capture_output=True, text=True, timeout=900,
    )
    if not report.exists():
        pytest.fail(f"the 8-device cases did not run:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    out: dict[str, str | None] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        bad = [c for c in case if c.tag in ("failure", "error", "skipped")]
        out[case.get("name", "")] = None if not bad else f"{bad[0].tag}: {bad[0].get('message')}\n{bad[0].text}"
    return out


@pytest.mark.slow  # one subprocess for all cases: 15-45 s on the shared machine, JAX start-up included
@pytest.mark.parametrize("case", _case_names())
def test_on_8_devices(outcomes: dict[str, str | None], case: str) -> None:
    assert case in outcomes, f"{case} was not run"
    if outcomes[case] is not None:
        pytest.fail(outcomes[case], pytrace=False)


# -- patterns and rules (no devices needed) -----------------------------------------------------------


@pytest.mark.parametrize(
    "pattern, name, hit",
    [
        ("*_proj", "query_proj", True),
        ("*_proj", "layers.query_proj", False),  # * stays within one component
        ("layers.*.weight", "layers.3.weight", True),
        ("layers.*.weight", "layers.3.attn.weight", False),
        ("**.weight", "weight", True),  # ** matches zero components
        ("**.weight", "a.b.c.weight", True),
        ("layers.**", "layers", True),
        ("layers.**", "layers.0.w", True),
        ("layers.**", "layersX.0", False),
        ("a.**.b", "a.b", True),
        ("a.**.b", "a.x.y.b", True),
        ("a.**.b", "a.xb", False),
        ("layer?.w", "layer1.w", True),
        ("layer?.w", "layer12.w", False),
        ("re:layers\\.[0-2]\\..*", "layers.2.w", True),
        ("re:layers\\.[0-2]\\..*", "layers.3.w", False),
        ("re:w", "ww", False),  # a regex matches the whole name
        ("**", "", True),  # the root leaf
        ("a+b", "a+b", True),  # other characters are literal
        ("a+b", "aab", False),
    ],
)
def test_patterns(pattern: str, name: str, hit: bool) -> None:
    assert (sh.Rules([(pattern, P())]).match(name) is not None) is hit


def test_first_match_wins_and_strict() -> None:
    rules = sh.Rules([("layers.0.w", P("a")), ("layers.*.w", P("b"))])
    tree = {"layers": [{"w": np.zeros(4)}, {"w": np.zeros(4)}], "n": 3}
    assert sh.specs(tree, rules) == {"layers": [{"w": P("a")}, {"w": P("b")}], "n": None}
    with pytest.raises(sh.ShardingError) as info:
        sh.specs({"layers": [{"w": np.zeros(4)}], "head": np.zeros((2, 3))}, rules)
    assert str(info.value).startswith("key path 'head' (shape (2, 3)): no rule matches it (strict rules)")
    loose = sh.Rules(rules.rules, strict=False)
    assert sh.specs({"head": np.zeros((2, 3))}, loose) == {"head": P()}


def test_conflicts_are_errors() -> None:
    with pytest.raises(sh.ShardingError, match=r"rule 1 \('b'\): the spec .* uses mesh axis 'm' twice \(dimensions 0 and 1\)"):
        sh.Rules([("a", P()), ("b", P("m", "m"))])
    with pytest.raises(sh.ShardingError, match=r"uses mesh axis 'm' twice \(dimensions 0 and 1\)"):
        sh.Rules([("b", P(("d", "m"), "m"))])
    with pytest.raises(sh.ShardingError, match=r"name one mesh axis twice"):
        sh.Rules.fsdp(("m", "m"))


def test_bad_rules() -> None:
    with pytest.raises(sh.ShardingError, match=r"^key path 'w': the spec .* has 2 entries but the array has shape \(4,\)"):
        sh.specs({"w": np.zeros(4)}, sh.Rules([("w", P("a", "b"))]))
    with pytest.raises(TypeError, match=r"PartitionSpec or None"):
        sh.Rules([("w", ("a",))])
    with pytest.raises(ValueError, match=r"'\*\*' must be a whole component"):
        sh.Rules([("a**", None)])
    with pytest.raises(ValueError, match=r"bad regular expression"):
        sh.Rules([("re:(", None)])
    with pytest.raises(ValueError, match=r"on_indivisible must be"):
        sh.Rules([], on_indivisible="pad")  # type: ignore[arg-type]
    with pytest.raises(sh.ShardingError, match=r"Rules.fsdp needs the mesh"):
        sh.specs({"w": np.zeros(4096)}, sh.Rules.fsdp("m"))


def test_rules_are_values() -> None:
    a = sh.Rules({"w": P("m"), "**": None})
    b = sh.Rules([("w", P("m")), ("**", P())])
    assert a == b and hash(a) == hash(b) and a != sh.Rules([("w", P("m"))])
    with pytest.raises(AttributeError):
        a.strict = False  # type: ignore[misc]


def test_bad_strict_and_mesh_are_type_errors() -> None:
    with pytest.raises(TypeError, match=r"Rules: strict must be True or False, got 'no'"):
        sh.Rules([("**", None)], strict="no")  # type: ignore[arg-type]
    rules = sh.Rules([("**", None)])
    for bad in ({"a": 4}, "data"):
        with pytest.raises(TypeError, match=r"mesh must be a jax.sharding.Mesh .*, got (dict|str)"):
            sh.shardings({"w": np.zeros(4)}, bad, rules)


def test_specs_cache_sees_new_shapes() -> None:
    rules = sh.Rules([("w", P("m")), ("**", None)])
    m = sh.mesh({"m": 1})
    assert sh.specs({"w": np.zeros(4)}, rules, mesh=m) == {"w": P("m")}
    with pytest.raises(sh.ShardingError, match=r"has 1 entries but the array has shape \(\)"):
        sh.specs({"w": np.zeros(())}, rules, mesh=m)
    # the cache is keyed by (structure, rules, mesh) and checked against the leaves' types and
    # shapes: a leaf that stops being an array, or changes shape, is resolved anew
    fsdp = sh.Rules.fsdp("m", min_size=4)
    assert sh.specs({"w": np.zeros((2, 8)), "b": 1}, fsdp, mesh=m) == {"w": P(None, "m"), "b": None}
    assert sh.specs({"w": np.zeros((8, 2)), "b": 1}, fsdp, mesh=m) == {"w": P("m"), "b": None}
    assert sh.specs({"w": 3.0, "b": np.zeros((8, 2))}, fsdp, mesh=m) == {"w": None, "b": P("m")}
    assert sh.specs({"w": np.zeros((8, 2)), "b": np.zeros(2)}, fsdp, mesh=m) == {"w": P("m"), "b": P()}
    # a cached result is never shared: each call returns its own tree
    one, two = (sh.specs({"w": np.zeros((8, 2)), "b": 1}, fsdp, mesh=m) for _ in range(2))
    one["w"] = None
    assert two == {"w": P("m"), "b": None}


@pytest.mark.filterwarnings("ignore:the rules? .* matched no array leaf")
def test_specs_cache_checks_what_specs_depend_on() -> None:
    m = sh.mesh({"m": 1})
    # without a mesh a spec depends on the rank only: a rank that no longer fits is an error
    ranked = sh.Rules([("w", P("m", None)), ("**", None)], strict=False)
    assert sh.specs({"w": np.zeros((4, 4)), "b": np.zeros(3)}, ranked) == {"w": P("m", None), "b": P()}
    with pytest.raises(
        sh.ShardingError, match=r"key path 'w': the spec P\('m', None\) has 2 entries but the array has shape \(4,\)"
    ):
        sh.specs({"w": np.zeros(4), "b": np.zeros(3)}, ranked)
    # a NumPy array reshaped in place (the same object) is seen: fsdp chooses anew
    fsdp = sh.Rules.fsdp("m", min_size=4)
    a = np.zeros((2, 8))
    assert sh.specs({"w": a}, fsdp, mesh=m) == {"w": P(None, "m")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy 2.5 deprecates setting .shape
        a.shape = (8, 2)
    assert sh.specs({"w": a}, fsdp, mesh=m) == {"w": P("m")}

    class Loose:
        """Neither an array nor not one by its type: it is one while it has a shape and a dtype."""

    def loose(shape: Any = None) -> Loose:
        x = Loose()
        if shape is not None:
            x.shape, x.dtype = shape, np.dtype("float32")  # type: ignore[attr-defined]
        return x

    rules = sh.Rules([("w", P("m")), ("**", None)], strict=False)
    assert sh.specs({"w": loose()}, rules) == {"w": None}
    assert sh.specs({"w": loose((4,))}, rules) == {"w": P("m")}
    with pytest.raises(sh.ShardingError, match=r"has 1 entries but the array has shape \(\)"):
        sh.specs({"w": loose(())}, rules)  # (no ndim: its shape is compared)
    assert sh.specs({"w": loose()}, rules) == {"w": None}


@pytest.mark.filterwarnings("ignore:the rules? .* matched no array leaf")
def test_specs_cache_keeps_trees_of_one_size_apart() -> None:
    """Two trees with as many nodes and leaves (an encoder and a decoder) are both cached: a
    call alternating between them resolves each once (the same resolution is returned)."""
    from spruce import tree as st

    rules = sh.Rules([("enc.*", P("m")), ("**", None)], strict=False)
    enc, dec = {"enc": {"q": np.zeros(4), "k": np.zeros(4)}}, {"dec": {"q": np.zeros(4), "k": np.zeros(4)}}
    resolved = {}
    for _ in range(2):
        for name, t in (("enc", enc), ("dec", dec)):
            leaves, treedef = st.flatten(t)
            got = sh_specs._resolve_tree(leaves, treedef, t, rules, None)
            assert resolved.setdefault(name, got) is got
    assert sh.specs(enc, rules) == {"enc": {"q": P("m"), "k": P("m")}}
    assert sh.specs(dec, rules) == {"dec": {"q": P(), "k": P()}}
    # and the cache stays bounded
    for i in range(3 * sh_specs._CACHE_SIZE):  # as many structures of one size, and as many rules
        sh.specs({f"k{i}": np.zeros(4)}, rules)
        sh.specs({"k": np.zeros(4)}, sh.Rules([(f"k{i}", None), ("**", None)], strict=False))
    assert sum(len(w) for w in sh_specs._cache.values()) == sh_specs._cached[0] <= sh_specs._CACHE_SIZE
    assert max(len(w) for w in sh_specs._cache.values()) <= sh_specs._CACHE_WAYS


@pytest.mark.filterwarnings("ignore:the rules? .* matched no array leaf")
def test_specs_cache_tells_equal_dict_keys_with_other_names_apart() -> None:
    """The dict keys 1, True and 1.0 are equal, so the structures of these trees are equal,
    but the leaves' names differ ('1.w', 'True.w', '1%2E0.w')."""
    rules = sh.Rules([("True.w", P("m")), ("1%2E0.w", P(None, "m")), ("**", None)], strict=False)
    a = np.zeros((4, 4))
    for _ in range(2):
        assert sh.specs({1: {"w": a}}, rules) == {1: {"w": P()}}
        assert sh.specs({True: {"w": a}}, rules) == {True: {"w": P("m")}}
        assert sh.specs({1.0: {"w": a}}, rules) == {1.0: {"w": P(None, "m")}}
        assert list(sh.specs({True: {"w": a}}, rules)) == [True]
    # deeper, and after other non-str keys: only the second key of 'a' differs
    deep = sh.Rules([("a.True.w", P("m")), ("a.-0%2E0.w", P(None, "m")), ("**", None)], strict=False)
    for _ in range(2):
        assert sh.specs({"a": {0: {"w": a}, 1: {"w": a}}}, deep) == {"a": {0: {"w": P()}, 1: {"w": P()}}}
        assert sh.specs({"a": {0: {"w": a}, True: {"w": a}}}, deep) == {"a": {0: {"w": P()}, True: {"w": P("m")}}}
        assert sh.specs({"a": {0.0: {"w": a}, 1: {"w": a}}}, deep) == {"a": {0.0: {"w": P()}, 1: {"w": P()}}}
        assert sh.specs({"a": {-0.0: {"w": a}, 1: {"w": a}}}, deep) == {"a": {-0.0: {"w": P(None, "m")}, 1: {"w": P()}}}


@pytest.mark.filterwarnings("ignore:the rules? .* matched no array leaf")
def test_specs_cache_probes_equal_dict_keys_under_a_node_that_repeats_its_key() -> None:
    """A node whose children all have one key entry: the dicts under its two children are
    different nodes, so the name of the second one's key is probed on a cached call too (the
    keys 1 and 1 of the first call compare equal to the keys 1 and True of the second)."""
    import spruce.tree as st

    shared = st.DictKey("s")

    class Same:
        def __init__(self, *children: Any) -> None:
            self.children = children

    st.register_pytree_with_keys(
        Same, lambda x: ([(shared, c) for c in x.children], len(x.children)), lambda n, ch: Same(*ch)
    )
    try:
        rules = sh.Rules([("s.1.*", P("m")), ("s.True.*", P(None, "m")), ("**", None)], strict=False)
        a = np.zeros((4, 4))
        for _ in range(2):
            assert sh.specs(Same({1: {"p": a}}, {1: {"q": a}}), rules).children == ({1: {"p": P("m")}}, {1: {"q": P("m")}})
            got = sh.specs(Same({1: {"p": a}}, {True: {"q": a}}), rules).children
            assert got == ({1: {"p": P("m")}}, {True: {"q": P(None, "m")}})
    finally:
        st.unregister(Same)


def test_cached_results_are_built_from_the_callers_own_structure() -> None:
    """A cached call's result has the tree's own dict key order, static values and key
    objects, not those of the tree that filled the cache (they are equal, not the same)."""
    import dataclasses

    import spruce.tree as st

    @dataclasses.dataclass(frozen=True)
    class Config:
        act: str

    class Layer:
        def __init__(self, w: Any, config: Any) -> None:
            self.w, self.config = w, config

    st.register_pytree_node(Layer, lambda n: ((n.w,), n.config), lambda config, ch: Layer(ch[0], config))
    rules = sh.Rules([("**", None)])
    m = sh.mesh({"m": 1})
    first, second = Layer(np.zeros(2), Config("relu")), Layer(np.ones(2), Config("relu"))
    assert first.config == second.config and first.config is not second.config
    sh.specs(first, rules, mesh=m)
    out = sh.specs(second, rules, mesh=m)
    assert isinstance(out, Layer) and out.w == P() and out.config is second.config
    assert sh.specs(Layer(np.zeros(2), True), rules, mesh=m).config is True
    assert sh.specs(Layer(np.zeros(2), 1), rules, mesh=m).config == 1  # cached
    assert sh.specs(Layer(np.zeros(2), True), rules, mesh=m).config is True  # not the cached 1
    placed = sh.shard(second, m, rules)
    assert placed.config is second.config
    np.testing.assert_array_equal(np.asarray(placed.w), np.ones(2))
    # insertion order: a cached {'a', 'b'} must not reorder {'b', 'a'} (zip with the tree stays right)
    split = sh.Rules([("a", P("m")), ("**", None)])
    m2 = sh.mesh({"m": 1})
    sh.specs({"a": np.zeros(8), "b": np.zeros(3)}, split, mesh=m2)
    tree = {"b": np.zeros(3), "a": np.zeros(8)}
    out2 = sh.specs(tree, split, mesh=m2)
    assert list(out2) == ["b", "a"] and out2 == {"b": P(), "a": P("m")}
    assert list(sh.shardings(tree, m2, split)) == ["b", "a"]


def test_a_structure_with_an_unhashable_static_field_is_resolved_on_every_call() -> None:
    import dataclasses

    import spruce.tree as st

    @dataclasses.dataclass
    class L:
        w: Any
        cfg: Any = dataclasses.field(metadata={"static": True})

    st.register_dataclass(L)
    rules = sh.Rules([("w", P("m")), ("**", None)])
    m = sh.mesh({"m": 1})
    for cfg in ([1, 2], [1, 2], "ok", [3], "ok"):
        out = sh.specs(L(np.zeros(4), cfg), rules, mesh=m)
        assert out.w == P("m") and out.cfg == cfg
        assert sh.shardings(L(np.zeros(4), cfg), m, rules).w.spec == P("m")


def test_an_array_like_with_a_list_shape_is_checked_again_after_the_list_changes() -> None:
    class Arr:
        dtype = np.dtype("float32")

        def __init__(self, shape: list[int]) -> None:
            self.shape = shape

    rules = sh.Rules([("x", P("m")), ("**", None)])
    m = sh.mesh({"m": 1})
    a = Arr([8])
    assert sh.specs({"x": a}, rules, mesh=m) == {"x": P("m")}
    a.shape.clear()  # rank 0 now, the same list: a spec with one entry no longer fits it
    with pytest.raises(sh.ShardingError, match="key path 'x'"):
        sh.specs({"x": a}, rules, mesh=m)

    class Shape(list):  # a list subclass
        pass

    b = Arr(Shape([8]))
    assert sh.specs({"x": b}, rules, mesh=m) == {"x": P("m")}
    b.shape.clear()
    with pytest.raises(sh.ShardingError, match="key path 'x'"):
        sh.specs({"x": b}, rules, mesh=m)
    # an array as a shape: kept as a tuple of ints, and a later tree of the same structure with
    # a tuple shape is still served (comparing an array with a tuple must not raise)
    assert sh.specs({"x": Arr(np.array([8]))}, rules, mesh=m) == {"x": P("m")}  # type: ignore[arg-type]
    assert sh.specs({"x": Arr((8,))}, rules, mesh=m) == {"x": P("m")}  # type: ignore[arg-type]
    assert sh.specs({"x": Arr(np.array([8]))}, rules, mesh=m) == {"x": P("m")}  # type: ignore[arg-type]


# -- sharded checkpoints on one device -----------------------------------------------------------------


def test_dtype_cast_on_load(tmp_path: Any) -> None:
    import ml_dtypes

    path = str(tmp_path / "half.safetensors")
    stored = {"w": np.arange(4, dtype=ml_dtypes.bfloat16), "ids": np.arange(3, dtype=np.int64)}
    sio.save(path, stored)
    like = {"w": np.zeros(4, np.float32), "ids": np.zeros(3, np.int64)}
    with pytest.raises(sio.MismatchError, match=r"w: like has float32\[4\], the file bfloat16\[4\]"):
        sio.load(path, like)
    got = sio.load(path, like, dtype="like")
    assert got["w"].dtype == np.float32 and got["ids"].dtype == np.int64
    np.testing.assert_array_equal(got["w"], [0, 1, 2, 3])
    plain = sio.load(path, dtype=np.float32)
    assert plain["w"].dtype == np.float32 and plain["ids"].dtype == np.int64  # ints are not cast
    d = str(tmp_path / "sharded")
    sio.save_sharded(d, stored)
    assert sio.load(d, dtype="float16")["w"].dtype == np.float16
    with pytest.raises(ValueError, match=r"dtype='like' casts to the dtypes of like's leaves"):
        sio.load(path, dtype="like")


def test_save_sharded_metadata_and_round_trip(tmp_path: Any) -> None:
    d = str(tmp_path / "ckpt")
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": (np.int8(3), None), "lr": 0.5}
    sio.save_sharded(d, tree, metadata={"epoch": "2"})
    assert sio.read_metadata(d)["epoch"] == "2"
    back = sio.load(d)
    assert back["b"] == (np.int8(3), None) and type(back["b"][0]) is np.int8 and back["lr"] == 0.5
    np.testing.assert_array_equal(back["w"], tree["w"])
    with pytest.raises(ValueError, match=r"metadata keys starting with 'spruce.' are reserved"):
        sio.save_sharded(d, tree, metadata={"spruce.x": "1"})
    with pytest.raises(ValueError, match=r"metadata must map str to str"):
        sio.save_sharded(d, tree, metadata={"epoch": 2})  # type: ignore[dict-item]
    assert sio.read_metadata(d)["epoch"] == "2"  # the refused saves left it as it was


def test_shardings_without_like_for_every_kind_of_file(tmp_path: Any) -> None:
    """shardings= without like: the stored structure (or the nested names of a file without
    one) gets jax.Arrays; NumPy scalars and Python values stay as they are."""
    import jax
    from jax.sharding import SingleDeviceSharding
    from safetensors.numpy import save_file

    one = SingleDeviceSharding(jax.devices()[0])
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": 4, "s": np.float32(2)}
    plain = str(tmp_path / "plain.safetensors")
    save_file({"enc.0.w": np.ones((2, 2), np.float32)}, plain)  # no spruce structure
    back = sio.load(plain, shardings=one)
    assert isinstance(back["enc"][0]["w"], jax.Array) and back["enc"][0]["w"].sharding == one
    for name in ("t.npz", "t.safetensors", "dir"):
        path = str(tmp_path / name)
        (sio.save_sharded if name == "dir" else sio.save)(path, tree)
        got = sio.load(path, shardings=one)
        assert isinstance(got["w"], jax.Array) and got["w"].sharding == one
        np.testing.assert_array_equal(np.asarray(got["w"]), tree["w"])
        assert got["n"] == 4 and type(got["s"]) is np.float32


def _write_index(d: Any, tensors: dict[str, Any]) -> None:
    import json

    with open(d / "index.json", "w") as f:
        json.dump({"format": "spruce.sharded", "version": 1, "metadata": {}, "tensors": tensors}, f)


@pytest.mark.slow
def test_many_slices_are_checked_for_overlap_and_coverage(tmp_path: Any) -> None:
    """An index of 20,000 one-element slices is validated without comparing all pairs; an
    overlap among them or a missing one is still found."""
    from safetensors.numpy import save_file

    n = 20_000
    d = tmp_path / "many"
    d.mkdir()
    save_file({f"b{i}": np.array([i], np.float32) for i in range(n)}, str(d / "p.safetensors"))
    slices = [["p.safetensors", f"b{i}", [[i, i + 1]]] for i in reversed(range(n))]
    _write_index(d, {"v": {"dtype": "F32", "shape": [n], "slices": slices}})
    np.testing.assert_array_equal(np.asarray(sio.load(str(d))["v"]), np.arange(n, dtype=np.float32))
    _write_index(d, {"v": {"dtype": "F32", "shape": [n], "slices": slices[:-1] + [["p.safetensors", "b7", [[7, 8]]]]}})
    with pytest.raises(
        sio.CheckpointError,
        match=rf"^{d}: tensor 'v': the slices \[7:8\] in 'p.safetensors' and \[7:8\] in 'p.safetensors' overlap",
    ):
        sio.read_header(str(d))
    _write_index(d, {"v": {"dtype": "F32", "shape": [n], "slices": slices[1:]}})
    with pytest.raises(sio.CheckpointError, match=rf"tensor 'v': its slices cover {n - 1} of its {n} elements"):
        sio.read_header(str(d))


def test_overlap_check_agrees_with_all_pairs() -> None:
    """The sweep finds an overlap exactly when some pair of blocks shares an element (random
    2-D and 3-D blocks, empty ones included)."""
    from spruce.io._sharded import Slice, _overlap

    rng = np.random.default_rng(0)
    found = 0
    for trial in range(400):
        ndim = 2 + trial % 2
        blocks = []
        for _ in range(int(rng.integers(2, 7))):
            start = tuple(int(v) for v in rng.integers(0, 6, ndim))
            stop = tuple(a + int(v) for a, v in zip(start, rng.integers(0, 3, ndim)))
            blocks.append(Slice("f", "k", start, stop, None))
        pairs = any(
            all(max(a, c) < min(b, e) for a, b, c, e in zip(s.start, s.stop, o.start, o.stop))
            for i, s in enumerate(blocks) for o in blocks[:i]
        )
        got = _overlap(blocks, ndim)
        assert (got is not None) == pairs, blocks
        if got is not None:
            found += 1
            one, two = got
            where = [next(i for i, b in enumerate(blocks) if b is x) for x in (one, two)]
            assert where[0] < where[1]
            assert all(max(a, c) < min(b, e) for a, b, c, e in zip(one.start, one.stop, two.start, two.stop))
    assert 10 < found < 390  # both outcomes represented


def test_index_with_a_dtype_of_the_wrong_type(tmp_path: Any) -> None:
    """A dtype that is not a string (a list) is a CheckpointError naming the tensor, not a
    TypeError from a dict look-up."""
    d = tmp_path / "lying"
    d.mkdir()
    for code in (["F32"], {"F32": 1}, 3, None):
        _write_index(d, {"w": {"dtype": code, "shape": [1], "slices": [["p.safetensors", "w", [[0, 1]]]]}})
        with pytest.raises(sio.CheckpointError, match=rf"^{d}: corrupted index: tensor 'w' has an unknown dtype"):
            sio.load(str(d))


def _mapped_kib(path: str) -> int:
    """KiB of this process's mappings of ``path`` that are resident (/proc/self/smaps)."""
    want = os.path.realpath(path)
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line; the file is the 6th field
                fields = line.split(maxsplit=5)
                inside = len(fields) == 6 and os.path.realpath(fields[5].strip()) == want
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.slow
def test_detached_regions_release_the_mapping_and_stay_exact(tmp_path: Any, monkeypatch: Any) -> None:
    """Placing on devices reads regions with detach=True: new arrays, after which the pages of
    the stored blocks are dropped from the process (madvise); views made before still read the
    file's values (the pages fault back in from the file).  (Files this small are read into
    memory, not mapped: the threshold is lowered so that they are mapped.)"""
    from spruce.io import _api, _files

    monkeypatch.setattr(_files, "COPY_BELOW", 0)

    rng = np.random.default_rng(1)
    tree = {"w": rng.normal(size=(64, 1024)).astype(np.float32), "b": np.arange(5, dtype=np.int32)}
    one = str(tmp_path / "one.safetensors")
    sio.save(one, tree)
    sio.save_sharded(str(tmp_path / "dir"), tree)
    piece = [f for f in os.listdir(tmp_path / "dir") if f.endswith(".safetensors")]
    for path, mapped in ((one, one), (str(tmp_path / "dir"), str(tmp_path / "dir" / piece[0]))):
        with _api._open(path, False) as reader:
            view = reader.region("w", (slice(0, 64), slice(None)))
            assert float(view.sum()) == pytest.approx(float(tree["w"].sum(dtype=np.float64)), rel=1e-4)  # (touches every page)
            if sys.platform == "linux":
                assert _mapped_kib(mapped) >= 256  # the 256 KiB of "w" are resident through the mapping
            part = reader.region("w", (slice(8, 24), slice(100, 300)), detach=True)
            whole = reader.region("w", (slice(0, 64), slice(0, 1024)), detach=True)
            if sys.platform == "linux":
                assert _mapped_kib(mapped) <= 16  # released: at most the pages shared with the header and "b"
            assert not np.shares_memory(part, view) and not np.shares_memory(whole, view)
            np.testing.assert_array_equal(part, tree["w"][8:24, 100:300])
            np.testing.assert_array_equal(whole, tree["w"])
            np.testing.assert_array_equal(view, tree["w"])  # read again after the release
            np.testing.assert_array_equal(reader.region("b", (slice(1, 3),), detach=True), [1, 2])


def test_load_shardings_entries_devices_and_bad_entries(tmp_path: Any) -> None:
    import jax
    from jax.sharding import SingleDeviceSharding

    path = str(tmp_path / "t.safetensors")
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
    sio.save(path, tree)
    dev = jax.devices()[0]
    got = sio.load(path, tree, shardings={"w": dev, "b": None})
    assert got["w"].sharding == SingleDeviceSharding(dev) and isinstance(got["b"], np.ndarray)
    np.testing.assert_array_equal(np.asarray(got["w"]), tree["w"])
    with pytest.raises(
        TypeError, match=r"^load: the sharding at key path like\['w'\] must be a jax.sharding.Sharding, a jax.Device or None, "
                         r"got str"
    ):
        sio.load(path, tree, shardings={"w": "cpu", "b": None})
    with pytest.raises(TypeError, match=r"key path like\['b'\] .* got P \(a PartitionSpec needs a mesh"):
        sio.load(path, tree, shardings={"w": None, "b": P()})


def test_mmap_false_copies(tmp_path: Any) -> None:
    for path in (str(tmp_path / "a.safetensors"), str(tmp_path / "d")):
        save = sio.save_sharded if path.endswith("d") else sio.save
        save(path, {"w": np.arange(1000, dtype=np.float32)})
        copied = sio.load(path, mmap=False)["w"]
        mapped = sio.load(path)["w"]
        assert copied.flags.owndata and not mapped.flags.owndata
        for root, _, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
            for f in files:
                if f.endswith(".safetensors"):
                    os.truncate(os.path.join(root, f), 0)  # cannot disturb the copy
        np.testing.assert_array_equal(copied, np.arange(1000, dtype=np.float32))


# -- two processes -----------------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    import numpy as np
    from jax.sharding import PartitionSpec as P
    import spruce.io, spruce.sharding as sh
    assert jax.device_count() == 8 and jax.local_device_count() == 4
    mesh = sh.mesh({"data": 2, "model": 4})
    tree = {"embed": np.arange(16 * 8, dtype=np.float32).reshape(16, 8),
            "layers": [{"w": np.arange(64, dtype=np.float32).reshape(8, 8) * (i + 1),
                        "b": np.ones(8, np.float32)} for i in range(2)],
            "step": 5,
            # replicated on both processes, 9 MiB: written in two row blocks, one by each
            "big": np.arange(2304 * 1024, dtype=np.float32).reshape(2304, 1024)}
    rules = sh.Rules([("embed", P("model", "data")), ("layers.*.w", P("data", None)), ("**", None)])
    placed = sh.shard(tree, mesh, rules)
    assert not placed["embed"].is_fully_addressable
    spruce.io.save_sharded(folder, placed, metadata={"writer": "two processes"})
    print("saved", pid)
    """
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_processes_save_one_checkpoint(tmp_path: Any) -> None:
    folder = str(tmp_path / "ckpt")
    port = _free_port()
    env = _env(4)
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(port), str(i), folder], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (code, out, err) in enumerate(outputs):
        assert code == 0 and f"saved {i}" in out, f"process {i} failed:\n{out}\n{err[-3000:]}"
    pieces = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    assert [p.split("-", 1)[1] for p in pieces] == ["00000-of-00002.safetensors", "00001-of-00002.safetensors"]
    tree = sio.load(folder)
    np.testing.assert_array_equal(tree["embed"], np.arange(16 * 8, dtype=np.float32).reshape(16, 8))
    np.testing.assert_array_equal(tree["layers"][1]["w"], np.arange(64, dtype=np.float32).reshape(8, 8) * 2)
    assert tree["step"] == 5 and sio.read_metadata(folder)["writer"] == "two processes"
    big = tree["big"]
    assert big.dtype == np.float32 and np.array_equal(big, np.arange(2304 * 1024, dtype=np.float32).reshape(2304, 1024))
    # each process wrote the blocks its devices own, no block twice
    from safetensors.numpy import load_file

    keys = [set(load_file(os.path.join(folder, p))) for p in pieces]
    assert not keys[0] & keys[1]
    assert sum(1 for k in keys[0] | keys[1] if k.startswith("embed")) == 8
    assert "step" not in keys[0] | keys[1]
    # the replicated arrays were shared out: each process wrote one row block of 'big' and one
    # of the two replicated biases (the one that had written fewer bytes so far took each)
    assert sorted(k for k in keys[0] | keys[1] if k.startswith("big")) == ["big[0:1152,0:1024]", "big[1152:2304,0:1024]"]
    assert all(any(k.startswith("big") for k in ks) for ks in keys)
    assert all(len({"layers.0.b", "layers.1.b"} & ks) == 1 for ks in keys)
    sizes = [os.path.getsize(os.path.join(folder, p)) for p in pieces]
    assert max(sizes) < 1.1 * min(sizes), sizes


@pytest.mark.slow
def test_sharded_training_example() -> None:
    script = os.path.join(os.path.dirname(HERE), "examples", "sharded_training.py")
    proc = subprocess.run([sys.executable, script, "--steps", "20"], env=_env(8), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bit-identical: True" in proc.stdout
    assert "restored on mesh {'data': 4, 'model': 2}: layers.0.weight P('model', None), (32, 8) per device" in proc.stdout
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("final loss")]
    assert len(losses) == 2 and abs(losses[0] - losses[1]) < 1e-5


_SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import spruce.io
    folder = sys.argv[1]
    k = 1
    while True:
        spruce.io.save_sharded(folder, {"step": k, "w": [np.full((256, 256), k, np.float32) for _ in range(8)]})
        k += 1
    """
)


def _step(folder: str) -> int:
    """The step of the checkpoint being rewritten by another process (-1 when this read lost
    the race with the deletion of the pieces it was about to read, as docs/io.md says)."""
    try:
        return int(sio.load(folder)["step"])
    except (sio.CheckpointError, OSError):
        return -1


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.13])
def test_a_save_killed_with_sigkill_leaves_a_loadable_checkpoint(tmp_path: Any, delay: float) -> None:
    """A process saving in a loop is killed (SIGKILL) at some point: the directory still
    loads, and the tree is one complete save (every array filled with that save's step)."""
    import time

    folder = str(tmp_path / "ckpt")
    sio.save_sharded(folder, {"step": 0, "w": [np.zeros((256, 256), np.float32) for _ in range(8)]})
    env = _env(1)
    proc = subprocess.Popen([sys.executable, "-c", _SAVER, folder], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while _step(folder) < 2 and time.monotonic() < deadline:  # saving in a loop now
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.01)
        time.sleep(delay)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    tree = sio.load(folder)
    step = tree["step"]
    assert step >= 2 and len(tree["w"]) == 8 and all(np.all(w == step) for w in tree["w"])


def test_a_rule_shadowed_by_the_catch_all_is_named() -> None:
    """A pattern that matches nothing while a catch-all follows (a typo: 'layer.*' for
    'layers.*') would send its arrays to the catch-all unnoticed: an error under strict rules,
    a warning otherwise, naming the pattern; explain reports it without raising."""
    params = {"layers": [{"w": np.zeros((4, 4))}], "head": np.zeros(4)}
    typo = [("layer.*.w", P("model", None)), ("**", None)]
    with pytest.raises(
        sh.ShardingError, match=r"the rule 'layer\.\*\.w' matched no array leaf of the tree, and the catch-all '\*\*'"
    ):
        sh.specs(params, sh.Rules(typo))
    with pytest.warns(UserWarning, match=r"the rule 'layer\.\*\.w' matched no array leaf"):
        got = sh.specs(params, sh.Rules(typo, strict=False))
    assert got == {"layers": [{"w": P()}], "head": P()}
    # named every time, not only when the resolution is not cached
    with pytest.raises(sh.ShardingError, match="layer"):
        sh.specs(params, sh.Rules(typo))
    two = [("a", None), ("layers.*.w", P("model", None)), ("b", None), ("**", None)]
    with pytest.raises(sh.ShardingError, match=r"the rules 'a', 'b' matched no array leaf"):
        sh.specs(params, sh.Rules(two))
    # no catch-all: an unused rule is fine (explain lists it); all rules used: fine
    assert sh.specs(params, sh.Rules([("zzz", None), ("**.w", None), ("head", None)])) == {"layers": [{"w": P()}], "head": P()}
    assert sh.specs(params, sh.Rules([("layers.*.w", P("model", None)), ("**", None)]))["layers"][0]["w"] == P("model", None)
    # a rule after the catch-all is never reached, and not this check's business
    assert sh.specs(params, sh.Rules([("**", None), ("never", None)])) == {"layers": [{"w": P()}], "head": P()}
