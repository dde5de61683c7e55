"""spruce.optree.dataclasses and spruce.optree.functools, checked against optree itself (a test
oracle): the same classes (or the same stdlib dataclass registered through both libraries)
flatten to the same leaves, paths, entries and accessors, and every error is raised as optree
raises it (the exception class; the words may be spruce's).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import operator
import sys
from typing import Any

import optree
import pytest

import spruce.optree as so
import spruce.tree as st
from spruce.optree import dataclasses as sdc
from spruce.optree import functools as sft

NS = "spruce-test-dataclasses"
_O_GLOBAL = getattr(optree.registry, "__GLOBAL_NAMESPACE")  # optree's private spelling of ""


def flat(lib: Any, tree: Any, **kw: Any) -> Any:
    """Leaves, paths, entries of the root, and accessor values/spellings of ``tree`` in ``lib``."""
    paths, leaves, spec = lib.tree_flatten_with_path(tree, **kw)
    accessors = lib.tree_flatten_with_accessor(tree, **kw)[0]
    return (
        leaves,
        paths,
        spec.entries(),
        spec.num_leaves,
        spec.num_nodes,
        int(spec.kind),
        spec.namespace,
        [a(tree) for a in accessors],
        [a.codify("t") for a in accessors],
        [[type(e).__name__ for e in a] for a in accessors],
    )


# ------------------------------------------------------------------------------------- surface


def test_public_names_match_optree() -> None:
    assert sdc.__all__ == optree.dataclasses.__all__ == ["DataclassEntry", "register_node", *dataclasses.__all__]
    for name in dataclasses.__all__:
        if name in ("field", "dataclass", "make_dataclass"):
            assert getattr(sdc, name) is not getattr(dataclasses, name)
        else:
            assert getattr(sdc, name) is getattr(dataclasses, name)
    assert sdc.DataclassEntry is so.DataclassEntry
    assert sft.__all__ == optree.functools.__all__
    assert sft.reduce is so.tree_reduce
    assert so.dataclasses is sdc and so.functools is sft


@pytest.mark.parametrize("name", ["field", "dataclass", "make_dataclass", "register_node"])
def test_signatures_match_optree(name: str) -> None:
    def params(f: Any) -> list[Any]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

    assert params(getattr(sdc, name)) == params(getattr(optree.dataclasses, name))


# --------------------------------------------------------------------------------------- field


def test_field_records_pytree_node() -> None:
    cases: list[tuple[dict[str, Any], bool]] = [
        ({}, True),
        ({"pytree_node": False}, False),
        ({"metadata": {"pytree_node": False}}, False),
        ({"init": False, "pytree_node": False}, False),
        ({"metadata": {"pytree_node": 0}, "pytree_node": True}, True),
    ]
    for kw, expected in cases:
        assert sdc.field(**kw).metadata["pytree_node"] is expected
        assert optree.dataclasses.field(**kw).metadata["pytree_node"] is expected
    given = {"unit": "m"}
    f = sdc.field(default=1, metadata=given, kw_only=True, repr=False)
    assert given == {"unit": "m"}  # copied, not changed
    assert dict(f.metadata) == {"unit": "m", "pytree_node": True}
    assert (f.default, f.kw_only, f.repr) == (1, True, False)


def test_field_errors() -> None:
    for kw in ({"init": False}, {"init": False, "pytree_node": True}, {"init": False, "metadata": {"pytree_node": True}}):
        for lib in (sdc, optree.dataclasses):
            with pytest.raises(TypeError, match="`pytree_node=True` is not allowed for non-init fields"):
                lib.field(**kw)
    if sys.version_info < (3, 14):
        for lib in (sdc, optree.dataclasses):
            with pytest.raises(TypeError, match="unexpected keyword argument 'doc'"):
                lib.field(doc="x")


# ----------------------------------------------------------------------------------- dataclass


def make_point(lib: Any, namespace: str) -> Any:
    @lib.dataclass(namespace=namespace)
    class Point:
        x: float
        y: Any = 0.0
        tag: str = lib.field(default="p", pytree_node=False)
        norm: float = lib.field(init=False, pytree_node=False, default=0.0)
        z: Any = dataclasses.field(default=None, metadata={"pytree_node": True})
        calls: int = dataclasses.field(default=0, metadata={"pytree_node": False})

        def __post_init__(self) -> None:
            self.norm = abs(self.x)
            self.calls += 1

    return Point


@pytest.mark.parametrize("none_is_leaf", [False, True])
def test_dataclass_flattens_as_optree(none_is_leaf: bool) -> None:
    Ours, Theirs = make_point(sdc, NS), make_point(optree.dataclasses, NS)
    ours, theirs = Ours(-3.0, (1, [2]), "q"), Theirs(-3.0, (1, [2]), "q")
    kw = {"none_is_leaf": none_is_leaf, "namespace": NS}
    assert flat(so, ours, **kw) == flat(optree, theirs, **kw)
    assert so.tree_flatten_with_path(ours)[:2] == ([()], [ours])  # a leaf outside the namespace
    assert optree.tree_flatten_with_path(theirs)[:2] == ([()], [theirs])
    leaves, spec = so.tree_flatten(ours, **kw)
    assert spec.entries() == ["x", "y", "z"]
    assert spec == st.structure(ours, **kw)
    assert Ours.__spruce_optree_fields__ == (("x", "y", "z"), ("tag", "calls"))
    back = so.tree_unflatten(spec, leaves)
    assert (back.x, back.y, back.z, back.tag, back.norm) == (-3.0, (1, [2]), None, "q", 3.0)
    assert back.calls == ours.calls + 1  # rebuilt with cls(**fields): __post_init__ ran again
    doubled = so.tree_map(lambda v: v * 2, ours, namespace=NS)
    assert (doubled.x, doubled.y, doubled.norm) == (-6.0, (2, [4]), 6.0)


def test_dataclass_metadata_is_node_data() -> None:
    Point = make_point(sdc, NS)
    a, b = st.structure(Point(1.0, tag="a"), namespace=NS), st.structure(Point(1.0, tag="b"), namespace=NS)
    assert a != b
    assert a == st.structure(Point(2.0, tag="a"), namespace=NS)
    assert a.node_data()[0] is Point
    assert tuple(a.node_data()[1].metadata) == (("tag", "a"), ("calls", 1))


def test_dataclass_decorator_forms_and_options() -> None:
    class Plain:
        x: int

    Made = sdc.dataclass(Plain, namespace=NS, frozen=True, order=True)
    assert Made is Plain and dataclasses.is_dataclass(Made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Made(1).x = 2  # type: ignore[misc]
    assert Made(1) < Made(2)
    assert st.leaves(Made(5), namespace=NS) == [5]

    for namespace in ("", so.GLOBAL_NAMESPACE):

        @sdc.dataclass(namespace=namespace)
        class Everywhere:
            v: int

        assert st.leaves(Everywhere(3)) == [3]
        assert so.tree_flatten_with_path(Everywhere(3))[0] == [("v",)]
        so.unregister_pytree_node(Everywhere, namespace=so.GLOBAL_NAMESPACE)


def test_dataclass_errors() -> None:
    def func() -> None:
        pass

    for lib in (sdc, optree.dataclasses):
        with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'namespace'"):
            lib.dataclass()
        for bad in (func, lambda x: x, 3):
            with pytest.raises(TypeError, match=r"dataclass\(\) can only be used with classes"):
                lib.dataclass(bad, namespace=NS)
        with pytest.raises(TypeError, match=r"dataclass\(\) cannot be applied to .* more than once"):

            @lib.dataclass(namespace=NS + "-twice")
            @lib.dataclass(namespace=NS + "-twice")
            class Twice:
                x: int

        with pytest.raises(TypeError, match="The namespace must be a string"):

            @lib.dataclass(namespace=1)
            class BadNamespace:
                x: int

        with pytest.raises(TypeError, match=r"PyTree node field 'x' must be included in `__init__\(\)`"):

            @lib.dataclass(namespace=NS + "-err")
            class NotInit:
                x: int = dataclasses.field(init=False, default=0)


# ------------------------------------------------------------------------------ make_dataclass


def test_make_dataclass_matches_optree() -> None:
    fields = ["a", ("b", int), ("c", int, sdc.field(default=0, pytree_node=False))]
    Ours = sdc.make_dataclass("Made", fields, namespace=NS, frozen=True)
    Theirs = optree.dataclasses.make_dataclass("Made", fields, namespace=NS, frozen=True)
    assert flat(so, Ours([1], 2, 3), namespace=NS) == flat(optree, Theirs([1], 2, 3), namespace=NS)
    assert Ours.__module__ == Theirs.__module__
    # The standard library's class-body dict is ``ns``; passed the other way round, the two swap.
    Swapped = sdc.make_dataclass("Swapped", ["a"], ns={"double": lambda self: 2 * self.a}, namespace=NS)
    Swapped2 = sdc.make_dataclass("Swapped2", ["a"], namespace={"double": lambda self: 2 * self.a}, ns=NS)  # type: ignore[arg-type]
    for cls in (Swapped, Swapped2):
        assert cls(4).double() == 8
        assert st.leaves(cls(4), namespace=NS) == [4]


def test_make_dataclass_errors() -> None:
    for lib in (sdc, optree.dataclasses):
        with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'namespace'"):
            lib.make_dataclass("A", ["a"])
        with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'ns'"):
            lib.make_dataclass("A", ["a"], namespace={})
        with pytest.raises(TypeError, match="The namespace must be a string"):
            lib.make_dataclass("A", ["a"], namespace=3)
        if sys.version_info < (3, 12):
            with pytest.raises(TypeError, match="unexpected keyword argument 'module'"):
                lib.make_dataclass("A", ["a"], module="m", namespace=NS)
        if sys.version_info < (3, 14):
            with pytest.raises(TypeError, match="unexpected keyword argument 'decorator'"):
                lib.make_dataclass("A", ["a"], decorator=lambda c, **kw: c, namespace=NS)


# ------------------------------------------------------------------------------- register_node


def test_register_node_on_one_class_in_both_libraries() -> None:
    @dataclasses.dataclass
    class Both:
        a: Any
        meta: str = dataclasses.field(default="m", metadata={"pytree_node": False})
        derived: int = dataclasses.field(init=False, default=0, metadata={"pytree_node": False})
        b: Any = None

    assert sdc.register_node(Both, namespace=NS) is Both
    optree.dataclasses.register_node(Both, namespace=NS)
    obj = Both({"k": 1, "j": (2,)}, "x", b=[3, None])
    for nil in (False, True):
        assert flat(so, obj, namespace=NS, none_is_leaf=nil) == flat(optree, obj, namespace=NS, none_is_leaf=nil)
    assert so.DataclassEntry(1, Both, so.PyTreeKind.CUSTOM).field == "b"  # an index counts children only
    assert Both.__spruce_optree_fields__ == (("a", "b"), ("meta",))


def test_register_node_call_forms() -> None:
    def fresh() -> Any:
        @dataclasses.dataclass
        class C:
            x: int

        return C

    C1 = sdc.register_node(namespace=NS)(fresh())
    C2 = sdc.register_node(NS)(fresh())
    C3 = sdc.register_node(fresh(), namespace=NS)
    for cls in (C1, C2, C3):
        assert st.leaves(cls(7), namespace=NS) == [7]
        assert st.leaves(cls(7)) == [cls(7)]
    for namespace in ("", so.GLOBAL_NAMESPACE):
        C4 = sdc.register_node(fresh(), namespace=namespace)
        assert st.leaves(C4(7)) == [7]
        so.unregister_pytree_node(C4, namespace=so.GLOBAL_NAMESPACE)
    C5 = sdc.register_node(so.GLOBAL_NAMESPACE)(fresh())
    assert st.leaves(C5(7)) == [7]
    so.unregister_pytree_node(C5, namespace=so.GLOBAL_NAMESPACE)


def test_register_node_errors() -> None:
    @dataclasses.dataclass
    class D:
        x: int

    class NotADataclass:
        pass

    @dataclasses.dataclass
    class WithInitVar:
        x: int
        scale: dataclasses.InitVar[int]

    @dataclasses.dataclass
    class NonInitChild:
        x: int = dataclasses.field(init=False, default=0, metadata={"pytree_node": True})

    for lib in (sdc, optree.dataclasses):
        with pytest.raises(ValueError, match="Cannot specify `namespace` when the first argument is a string"):
            lib.register_node("a", namespace="b")
        with pytest.raises(ValueError, match="The namespace cannot be an empty string"):
            lib.register_node("")
        with pytest.raises(ValueError, match="Must specify `namespace` when the first argument is a class"):
            lib.register_node(D)
        with pytest.raises(TypeError, match="Expected a class"):
            lib.register_node(42, namespace=NS)
        with pytest.raises(TypeError, match="is not a dataclass"):
            lib.register_node(NotADataclass, namespace=NS)
        with pytest.raises(TypeError, match="The namespace must be a string"):
            lib.register_node(D, namespace=1)
        with pytest.raises(TypeError, match=r"has `InitVar` field\(s\) \['scale'\]"):
            lib.register_node(WithInitVar, namespace=NS)
        with pytest.raises(TypeError, match="PyTree node field 'x' must be included in"):
            lib.register_node(NonInitChild, namespace=NS)
    sdc.register_node(D, namespace=NS)
    with pytest.raises(TypeError, match="as a pytree node more than once"):
        sdc.register_node(D, namespace=NS + "-second")
    # as the message says, another namespace takes the generic registration
    so.register_pytree_node(D, lambda d: ((d.x,), None), lambda _, c: D(*c), namespace=NS + "-second")
    assert st.leaves(D(1), namespace=NS + "-second") == [1]


def test_init_false_class_warns() -> None:
    @dataclasses.dataclass(init=False)
    class NoInit:
        x: int

    with pytest.warns(UserWarning, match="was defined with `init=False`"):
        sdc.register_node(NoInit, namespace=NS)
    with pytest.warns(UserWarning, match="was defined with `init=False`"):
        optree.dataclasses.register_node(NoInit, namespace=NS)


def test_a_failed_registration_leaves_the_class_as_it_was() -> None:
    @dataclasses.dataclass
    class Taken:
        x: int

    so.register_pytree_node(Taken, lambda t: ((t.x,), None), lambda _, c: Taken(*c), namespace=NS + "-taken")
    with pytest.raises(ValueError, match="already registered"):
        sdc.register_node(Taken, namespace=NS + "-taken")
    assert "__spruce_optree_fields__" not in Taken.__dict__
    so.unregister_pytree_node(Taken, namespace=NS + "-taken")
    sdc.register_node(Taken, namespace=NS + "-taken")
    assert so.tree_flatten_with_path(Taken(1), namespace=NS + "-taken")[0] == [("x",)]

    class RefusesOnce(type):
        refused = False

        def __setattr__(cls, name: str, value: Any) -> None:
            if name == "__spruce_optree_fields__" and not RefusesOnce.refused:
                RefusesOnce.refused = True
                raise RuntimeError("refused")
            super().__setattr__(name, value)

    @dataclasses.dataclass
    class Guarded(metaclass=RefusesOnce):
        x: int

    with pytest.raises(RuntimeError, match="refused"):
        sdc.register_node(Guarded, namespace=NS + "-guard")
    assert "__spruce_optree_fields__" not in Guarded.__dict__
    with pytest.raises(ValueError, match="not registered"):
        so.unregister_pytree_node(Guarded, namespace=NS + "-guard")
    sdc.register_node(Guarded, namespace=NS + "-guard")
    assert st.leaves(Guarded(2), namespace=NS + "-guard") == [2]


def test_init_vars_reach_into_the_standard_library() -> None:
    """register_node finds InitVar pseudo-fields through dataclasses' private marker: this
    fails loudly if the standard library renames it."""
    assert hasattr(dataclasses, "_FIELD_INITVAR")

    @dataclasses.dataclass
    class V:
        x: int
        k: dataclasses.InitVar[int] = 0

    assert sdc._init_vars(V) == ["k"]


# ----------------------------------------------------------------------------------- functools


def add3(a: Any, b: Any = 0, c: Any = 0) -> Any:
    return a + b + c


PARTIALS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((add3,), {}),
    ((add3,), {"b": None}),
    ((add3, 1, 2), {}),
    ((add3, 1, None), {}),
    ((add3, (1, [2])), {}),
    ((add3, 1), {"c": {"z": 1, "a": None}}),
    ((functools.partial(add3, 10), 2), {"c": 3}),
]


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("i", range(len(PARTIALS)))
def test_partial_flattens_as_optree(i: int, none_is_leaf: bool) -> None:
    args, kw = PARTIALS[i]
    ours, theirs = sft.partial(*args, **kw), optree.functools.partial(*args, **kw)
    for ns in ("", NS):
        expected = flat(optree, theirs, none_is_leaf=none_is_leaf, namespace=ns)
        assert flat(so, ours, none_is_leaf=none_is_leaf, namespace=ns) == expected
    assert repr(ours).replace("spruce.optree", "optree") == repr(theirs)
    leaves, spec = so.tree_flatten(ours, none_is_leaf=none_is_leaf)
    back = so.tree_unflatten(spec, leaves)
    assert type(back) is sft.partial
    assert (back.func, back.args, back.keywords) == (ours.func, ours.args, ours.keywords)
    assert list(back.keywords) == list(ours.keywords)


def test_partial_keeps_a_partial_whole_and_calls() -> None:
    inner = functools.partial(add3, 10)
    p = sft.partial(inner, 2, c=3)
    assert p.args == (2,) and p.keywords == {"c": 3}
    assert p.func == inner and hash(p.func) == hash(inner)
    assert p() == 15
    doubled = so.tree_map(lambda x: x * 2, p)
    assert doubled() == 10 + 4 + 6
    q = sft.partial(operator.mul, 3)
    assert st.structure(q).entries() == ["args", "keywords"]
    assert st.structure(q) == st.structure(sft.partial(operator.mul, 4))
    assert st.structure(q) != st.structure(sft.partial(operator.add, 3))
    assert so.tree_reduce(operator.add, {"a": 1, "b": [2, 3]}) == sft.reduce(operator.add, {"a": 1, "b": [2, 3]}) == 6
