"""The JAX internals spruce's JAX bridge relies on (``spruce/_jax_bridge.py``), one section each.

Each section checks, on the installed JAX, that the internal has the shape the bridge relies on
and that the behaviour built on it works; and, on a stand-in for a JAX that changed it, that the
bridge says so (JaxBridgeError, or JaxBridgeWarning where giving up the shortcut is the safe
choice) instead of quietly doing less.  A JAX release that changes one of them fails here first,
with the name of the internal.

- JAX's Python-side registry dict, swapped for one that reports new entries (``_swap_registry_dict``)
- the ``__eq__`` of JAX's four key entry classes, widened to accept spruce's (``_widen_key_eq``)
- the loader of the ``jax`` package, wrapped to connect right after it ran (``_hook_jax_import``)
- the closure of ``register_dataclass``'s unflatten function (``_dataclass_fields_of_jax_registration``)
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import sys
import types
from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np
import pytest
from jax._src import tree_util as jsrc

import spruce.tree as st
from helpers import run_python
from spruce import _jax_bridge as bridge
from spruce._tree import _keys, _registry
from spruce._tree._kinds import MODE_DATACLASS_INIT, MODE_FUNCS

CHECKED = r"checked with jax 0\.10\.2 and 0\.12\.0\.1"


def test_bridge_is_connected_on_installed_jax() -> None:
    # importing spruce.jax would raise if any check failed; here: connected, fast path on
    import spruce.jax  # noqa: F401

    assert bridge._connected[0]
    assert bridge.CHECKED_JAX_VERSIONS == ("0.10.2", "0.12.0.1")
    assert bridge._jax["dataclass_code"] is not None


# --------------------------------------------------------------------- the registry dict


def test_registry_dict_has_the_shape_the_bridge_relies_on() -> None:
    entries = jsrc._registry
    assert type(entries) is bridge._ReportingRegistry and isinstance(entries, dict)
    assert entries is bridge._jax["entries"]
    for t in (tuple, list, dict, type(None)):
        assert t in entries
    assert all(callable(e.from_iter) for e in entries.values())
    assert entries[list].from_iter(None, (1, 2)) == [1, 2]
    # JAX's registration functions write through the module global, into the swapped dict
    assert bridge._JaxDataclassProbe in entries

    class Written:
        pass

    jtu.register_pytree_node(Written, lambda x: ((), None), lambda aux, ch: Written())
    assert Written in entries and callable(entries[Written].from_iter)


def test_registry_dict_behaviour_late_jax_registration_becomes_a_node() -> None:
    class Later:
        def __init__(self, v: Any) -> None:
            self.v = v

    assert st.leaves([Later(1)])[0].v == 1  # a leaf, cached as such
    jtu.register_pytree_node(Later, lambda x: ((x.v,), "aux"), lambda aux, ch: Later(*ch))
    assert st.leaves([Later(1)]) == [1]
    assert repr(st.structure(Later(1))) == "PyTreeDef(CustomNode(Later[aux], [*]))"
    # rebuilt by the unflatten JAX holds in the dict
    info = _registry.lookup(Later)
    assert info.mode == MODE_FUNCS and info.unflatten is jsrc._registry[Later].from_iter


class _Entry:
    def __init__(self, from_iter: Any) -> None:
        self.from_iter = from_iter


def _fake_jsrc(registry: Any) -> types.ModuleType:
    fake = types.ModuleType("fake_jax_tree_util")
    fake._registry = registry  # type: ignore[attr-defined]
    return fake


def _register_into(module: types.ModuleType) -> Any:
    """A register_dataclass that writes as JAX's does: through the module's attribute."""

    def register_dataclass(cls: type, **fields: Any) -> type:
        module._registry[cls] = _Entry(lambda aux, ch: cls(*ch))  # type: ignore[attr-defined]
        return cls

    return register_dataclass


def test_registry_dict_swap_works_on_a_jax_like_module() -> None:
    fake = _fake_jsrc({tuple: _Entry(lambda aux, ch: tuple(ch))})
    got = bridge._swap_registry_dict(fake, _register_into(fake))
    assert type(got) is bridge._ReportingRegistry and fake._registry is got
    assert set(got) == {tuple, bridge._JaxDataclassProbe}
    # idempotent: the same dict, no second registration
    assert bridge._swap_registry_dict(fake, pytest.fail) is got


@pytest.mark.parametrize(
    "registry,found",
    [
        (None, "no such attribute"),
        (types.MappingProxyType({tuple: _Entry(tuple)}), "a mappingproxy there"),
        ({tuple: ("to_iter", "from_iter")}, r"entries without from_iter \(for \[<class 'tuple'>\]\)"),
        ({list: _Entry(list)}, "no entry for tuple"),
    ],
    ids=["missing", "not-a-dict", "entry-without-from_iter", "no-tuple-entry"],
)
def test_registry_dict_changed_raises(registry: Any, found: str) -> None:
    fake = _fake_jsrc(registry) if registry is not None else types.ModuleType("fake")
    with pytest.raises(bridge.JaxBridgeError, match=rf"jax\._src\.tree_util\._registry.*{CHECKED}.*{found}"):
        bridge._swap_registry_dict(fake, _register_into(fake))
    assert getattr(fake, "_registry", None) is registry  # left as it was


def test_registry_dict_not_written_by_jax_raises() -> None:
    fake = _fake_jsrc({tuple: _Entry(tuple)})
    elsewhere: dict[Any, Any] = {}
    with pytest.raises(bridge.JaxBridgeError, match="did not store its entry in that dict") as info:
        bridge._swap_registry_dict(fake, lambda cls, **kw: elsewhere.setdefault(cls, _Entry(cls)))
    assert "Without it, a class registered with jax.tree_util after spruce first met it" in str(info.value)

    def refuses(cls: type, **kw: Any) -> None:
        raise ValueError("Duplicate custom PyTreeDef type registration")

    duplicate = r"registering a probe class raised ValueError\('Duplicate"
    with pytest.raises(bridge.JaxBridgeError, match=duplicate):
        bridge._swap_registry_dict(_fake_jsrc({tuple: _Entry(tuple)}), refuses)


# --------------------------------------------------------------------- key entry equality


KEY_CLASSES = [
    ("DictKey", "key", 1),
    ("SequenceKey", "idx", 2),
    ("GetAttrKey", "name", 3),
    ("FlattenedIndexKey", "key", 4),
]


@pytest.mark.parametrize("name,field,kind", KEY_CLASSES, ids=[c[0] for c in KEY_CLASSES])
def test_key_classes_have_the_shape_the_bridge_relies_on(name: str, field: str, kind: int) -> None:
    jax_cls, spruce_cls = getattr(jtu, name), getattr(st, name)
    assert isinstance(jax_cls, type)
    assert jax_cls._spruce_equality is True
    assert jax_cls.__eq__.__qualname__ == "_widen_key_eq.<locals>.__eq__"  # the bridge's, set once
    assert _keys.JAX_KEY_KINDS[jax_cls] == kind
    values: list[Any] = ["a", "", 0, -3, 7, (1, "x")] if name == "DictKey" else ["w", "_x", "b2"]
    if name in ("SequenceKey", "FlattenedIndexKey"):
        values = [0, 1, 12, -5, 2**31 - 1]
    for v in values:
        jk, sk = jax_cls(v), spruce_cls(v)
        assert getattr(jk, field) == v
        assert hash(jk) == hash(sk), (name, v)
        assert jk == sk and sk == jk and not (jk != sk) and not (sk != jk)
        assert jk == jax_cls(v)  # JAX's own equality is kept
    assert jax_cls(values[0]) != spruce_cls(values[1]) and spruce_cls(values[1]) != jax_cls(values[0])


def test_key_equality_behaviour_paths_of_both_libraries_mix() -> None:
    tree = {"enc": [(1.0, {"w": 2.0})]}
    jax_paths = [p for p, _ in jtu.tree_leaves_with_path(tree)]
    spruce_paths = [p for p, _ in st.leaves_with_path(tree)]
    assert jax_paths == spruce_paths and spruce_paths == jax_paths
    assert {p: i for i, p in enumerate(jax_paths)}[spruce_paths[1]] == 1
    assert len(set(jax_paths) | set(spruce_paths)) == 2


class _Immutable(type):
    def __setattr__(cls, name: str, value: Any) -> None:
        raise TypeError(f"cannot set {name!r} attribute of immutable type {cls.__name__!r}")


class _FrozenDictKey(metaclass=_Immutable):
    def __init__(self, key: Any) -> None:
        self.key = key

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return type(other) is _FrozenDictKey and other.key == self.key


class _SaltedDictKey:
    def __init__(self, key: Any) -> None:
        self.key = key

    def __hash__(self) -> int:
        return hash(self.key) + 1


class _RenamedDictKey:
    def __init__(self, k: Any) -> None:
        self.k = k


@pytest.mark.parametrize(
    "cls,found",
    [
        (None, r"None, for which that raised TypeError"),
        (_RenamedDictKey, r"for which that raised AttributeError\(.*'key'"),
        (_SaltedDictKey, r"a DictKey\('a'\) with \.key == 'a' and hash -?\d+ \(spruce's: -?\d+\)"),
        (_FrozenDictKey, r"a class that refuses it \(TypeError\(\"cannot set '__eq__'"),
    ],
    ids=["missing", "field-renamed", "hash-changed", "eq-not-settable"],
)
def test_key_classes_changed_raise(cls: Any, found: str) -> None:
    fake = types.ModuleType("fake_jax_tree_util")
    if cls is not None:
        fake.DictKey = cls  # type: ignore[attr-defined]
    expected = rf"jax\.tree_util\.DictKey, a class whose.*{CHECKED}.*{found}"
    with pytest.raises(bridge.JaxBridgeError, match=expected) as info:
        bridge._widen_key_eq(fake)
    assert "compare equal one way only" in str(info.value)
    assert cls not in _keys.JAX_KEY_KINDS  # spruce's side left as it was
    assert st.DictKey("a") != _FrozenDictKey("a")


# --------------------------------------------------------------------- the import of jax


def test_jax_loader_has_the_shape_the_hook_relies_on() -> None:
    # a fresh spec for the jax package, as the hook's finder gets it (not the loaded module's)
    spec = importlib.machinery.PathFinder.find_spec("jax")
    assert spec is not None and spec.loader is not None
    assert callable(type(spec.loader).exec_module)
    assert bridge._hook_jax_import(spec) is True
    try:
        assert vars(spec.loader)["exec_module"].__qualname__ == "_hook_jax_import.<locals>.exec_module"
    finally:
        del spec.loader.exec_module
    # what jax_fully_imported reads
    assert isinstance(jax.tree_util, types.ModuleType)
    assert not getattr(jax.__spec__, "_initializing", False)
    assert bridge.jax_fully_imported()
    assert "exec_module" not in vars(jax.__spec__.loader)  # the hook's wrapper removed itself


@pytest.mark.subprocess
@pytest.mark.slow
def test_hook_behaviour_importing_jax_after_spruce_connects() -> None:
    proc = run_python(
        """
        import sys, warnings
        warnings.simplefilter("error")
        import spruce, spruce._jax_bridge as bridge

        class M(spruce.Module):
            w: object

        assert "jax" not in sys.modules and bridge._hook in sys.meta_path
        assert not bridge._connected[0]
        import jax, jax.tree_util as jtu
        print(bridge._connected[0], bridge._hook in sys.meta_path, "exec_module" in vars(jax.__spec__.loader))
        print(jtu.tree_leaves(M(1)), jtu.keystr(jtu.tree_leaves_with_path(M(1))[0][0]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True False False", "[1] .w"]


class _SlottedLoader:
    __slots__ = ()

    def exec_module(self, module: Any) -> None:
        raise AssertionError("never run")


def test_hook_on_a_loader_it_cannot_wrap_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bridge._hook_jax_import(importlib.machinery.ModuleSpec("jax", None)) is False
    spec = importlib.machinery.ModuleSpec("jax", _SlottedLoader())  # type: ignore[arg-type]
    assert bridge._hook_jax_import(spec) is False

    class Finder:
        @staticmethod
        def find_spec(name: str, path: Any, target: Any = None) -> Any:
            return spec if name == "jax" else None

    monkeypatch.setattr(sys, "meta_path", [Finder()])
    expected = r"could not attach to the import of jax \(its loader <.*_SlottedLoader"
    with pytest.warns(bridge.JaxBridgeWarning, match=expected):
        assert bridge._JaxImportHook().find_spec("jax", None) is spec
    assert bridge._JaxImportHook().find_spec("jaxlib", None) is None


@pytest.mark.subprocess
@pytest.mark.slow
def test_changed_internal_seen_when_jax_is_imported_warns_then_spruce_jax_raises() -> None:
    proc = run_python(
        """
        import warnings
        import spruce, spruce._jax_bridge as bridge

        def changed(jtu):
            raise bridge.JaxBridgeError("a simulated change")
        bridge._widen_key_eq = changed
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import jax
        print([str(w.message)[:60] for w in caught if w.category is bridge.JaxBridgeWarning])
        print(bridge._connected[0])
        try:
            import spruce.jax
        except bridge.JaxBridgeError as e:
            print("JaxBridgeError:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[\"a simulated change spruce's pytree registry is not connected\"]",
        "False",
        "JaxBridgeError: a simulated change",
    ]


@pytest.mark.subprocess
@pytest.mark.slow
def test_changed_registry_when_spruce_is_imported_after_jax_warns_then_spruce_jax_raises() -> None:
    proc = run_python(
        """
        import types, warnings
        import jax, jax.tree_util as jtu
        from jax._src import tree_util as jsrc
        jsrc._registry = types.MappingProxyType(dict(jsrc._registry))  # a JAX that changed it
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import spruce, spruce._jax_bridge as bridge
        ours = [str(w.message) for w in caught if w.category is bridge.JaxBridgeWarning]
        print(len(ours), "jax._src.tree_util._registry" in ours[0])

        class M(spruce.Module):
            w: object
        m = M(1)
        print(bridge._connected[0], jtu.tree_leaves(m)[0] is m)
        try:
            import spruce.nn
        except bridge.JaxBridgeError as e:
            print(str(e).split(" (")[0], "|", str(e).split("has ")[1][:20])
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "1 True",
        "False True",
        "spruce's JAX bridge relies on jax._src.tree_util._registry, a dict from each type "
        "registered through jax.tree_util to an entry with a from_iter(aux, children) function, "
        "written by every registration function | a mappingproxy there",
    ]


# --------------------------------------------------------------------- register_dataclass


@dataclasses.dataclass
class Head:
    kernel: Any
    bias: Any
    features: int = dataclasses.field(default=2, metadata={"static": True})
    calls: Any = dataclasses.field(default=0, init=False, compare=False)

    def __post_init__(self) -> None:
        self.calls = "init"


jtu.register_dataclass(Head, data_fields=["kernel", "bias"], meta_fields=["features"])


def test_register_dataclass_entry_has_the_shape_the_bridge_relies_on() -> None:
    code = bridge._jax["dataclass_code"]
    entry = jsrc._registry[Head]
    assert entry.from_iter.__code__ is code  # one code object for every registration
    assert {"nodetype", "data_fields", "meta_fields"} <= set(code.co_freevars)
    assert entry.from_iter.__qualname__ in (
        "register_dataclass.<locals>.unflatten_func",  # jax 0.10.2
        "_register_dataclass.<locals>.unflatten_func",  # jax 0.12.0.1
    )
    fields = bridge._dataclass_fields_of_jax_registration(Head, entry, code)
    assert fields == (("kernel", "bias"), ("features",))
    # JAX's own flatten gives what spruce's fast path gives
    h = Head(np.ones(2), 0.5, features=3)
    children, aux = jsrc.default_registry.flatten_one_level(h)
    assert list(children) == [h.kernel, h.bias] and aux == (3,)


def test_register_dataclass_behaviour_fast_path_same_as_jax() -> None:
    info = _registry.lookup(Head)
    assert info.mode == MODE_DATACLASS_INIT  # spruce's own loops, not JAX's functions
    assert info.data_fields == ("kernel", "bias") and info.meta_fields == ("features",)
    h = Head(np.ones(2), 0.5, features=3)
    assert repr(st.structure(h)) == repr(jtu.tree_structure(h)) == "PyTreeDef(CustomNode(Head[(3,)], [*, *]))"
    assert [st.keystr(p) for p, _ in st.leaves_with_path(h)] == [".kernel", ".bias"]
    ours, theirs = st.map(lambda x: x * 2, h), jtu.tree_map(lambda x: x * 2, h)
    assert type(ours) is Head and ours.features == theirs.features == 3
    assert ours.calls == theirs.calls == "init"  # rebuilt through __init__, as JAX does
    np.testing.assert_array_equal(ours.kernel, theirs.kernel)


def test_register_dataclass_lookalike_closure_is_not_read() -> None:
    class Look:
        def __init__(self, a: Any) -> None:
            self.a = a

    nodetype, data_fields, meta_fields = Look, ("a",), ()

    def unflatten_func(meta: Any, data: Any) -> Any:  # same free variables, not JAX's code
        return nodetype(**dict(zip(data_fields + meta_fields, data)))

    jtu.register_pytree_node(Look, lambda x: ((x.a,), ()), unflatten_func)
    entry = jsrc._registry[Look]
    assert bridge._dataclass_fields_of_jax_registration(Look, entry, bridge._jax["dataclass_code"]) is None
    assert _registry.lookup(Look).mode == MODE_FUNCS
    assert st.map(lambda x: x + 1, Look(1)).a == 2
    # the fast path is off when the check at connect failed
    assert bridge._dataclass_fields_of_jax_registration(Head, jsrc._registry[Head], None) is None


def test_register_dataclass_changed_warns_and_falls_back() -> None:
    probe = bridge._JaxDataclassProbe
    renamed = {probe: _Entry(lambda meta, data: probe(*data, *meta))}  # not a closure over the fields
    expected = rf"register_dataclass storing.*{CHECKED}.*same results, slower"
    with pytest.warns(bridge.JaxBridgeWarning, match=expected):
        assert bridge._learn_dataclass_unflatten(renamed, jsrc.default_registry) is None

    class OtherAux:  # a JAX whose C++ flatten gives the node data in another form
        @staticmethod
        def flatten_one_level(x: Any) -> Any:
            return [x.x], {"tag": x.tag}

        @staticmethod
        def flatten_one_level_with_keys(x: Any) -> Any:
            return [(jtu.GetAttrKey("x"), x.x)], {"tag": x.tag}

    with pytest.warns(bridge.JaxBridgeWarning, match=r"flattens to \[1\.5\], \{'tag': 't'\}"):
        assert bridge._learn_dataclass_unflatten(jsrc._registry, OtherAux) is None
    # the real registration passes the same check
    code = bridge._learn_dataclass_unflatten(jsrc._registry, jsrc.default_registry)
    assert code is bridge._jax["dataclass_code"]
