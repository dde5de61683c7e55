"""spruce.optree's ``treespec_*`` functions and the ``spruce.optree.treespec`` module, checked
against optree itself (a test oracle) on the same inputs.

optree's PyTreeSpec and spruce's PyTreeDef are different classes with different reprs (spruce
prints JAX's), so structures are compared by what both define the same way (``props``: type,
kind, sizes, entries, leaf tests, none_is_leaf, namespace, and the children's), by optree's
repr where the two grammars agree, and with the structure ``spruce.tree.structure`` gives for the
corresponding tree (equal, and the same repr).  Every error the functions raise has a test.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from collections import OrderedDict, defaultdict, deque, namedtuple
from collections.abc import Iterator
from typing import Any

import optree
import pytest

import spruce.optree as so
import spruce.optree.treespec as short
import spruce.tree as st
from helpers import spec_props
from spruce.optree import _treespec

NT = namedtuple("NT", ["x", "y"])
_O_GLOBAL = getattr(optree.registry, "__GLOBAL_NAMESPACE")  # optree's private spelling of ""
NS = "spruce-test-treespec"

TREES: list[Any] = [
    1,
    None,
    (),
    [],
    {},
    [1, 2],
    (1, [2, None]),
    {"b": (2, [3, 4]), "a": 1, "c": None, "d": 5},
    {"b": 1, "a": {"y": 2, "x": [3]}},
    {1: "x", "a": "y"},
    NT(1, (2, 3)),
    OrderedDict([("z", 1), ("a", [2, 3])]),
    defaultdict(list, {"b": 1, "a": (2,)}),
    defaultdict(None, {}),
    deque([1, [2]], maxlen=3),
    deque([None]),
    deque([]),
    time.struct_time(range(9)),
    [NT([], None), {"k": deque([1])}, (None,)],
]
IDS = [f"t{i}-{type(t).__name__}" for i, t in enumerate(TREES)]




def optree_repr(spec: Any) -> str:
    """spruce's repr in optree's spelling, for the kinds whose grammar is the same in both
    (tuple, list, dict, None, leaves, non-empty deques, struct sequences)."""
    text = repr(spec)
    assert text.startswith("PyTreeDef(")
    text = "PyTreeSpec(" + text[len("PyTreeDef(") :]
    ns = f", namespace={spec.namespace!r}" if spec.namespace else ""
    text = text.replace(ns + ")", ")") if ns else text
    if spec.none_is_leaf:
        text = text.replace(", none_is_leaf=True)", ", NoneIsLeaf)")
    return text[:-1] + ns + ")"


SAME_GRAMMAR = {tuple, list, dict, type(None), int, str, time.struct_time}


def same_grammar(tree: Any) -> bool:
    if type(tree) is deque:
        return len(tree) > 0 and all(same_grammar(x) for x in tree)
    if type(tree) not in SAME_GRAMMAR:
        return False
    if isinstance(tree, dict):
        return all(same_grammar(v) for v in tree.values())
    if isinstance(tree, (tuple, list)):
        return all(same_grammar(x) for x in tree)
    return True


def rebuild(m: Any, tree: Any, nil: bool, ns: str = "") -> Any:
    """The structure of ``tree`` built bottom-up with library ``m``'s specific constructors."""
    kw: dict[str, Any] = {"none_is_leaf": nil}
    if ns:
        kw["namespace"] = ns

    def kids(xs: Any) -> list[Any]:
        return [rebuild(m, x, nil, ns) for x in xs]

    t = type(tree)
    if tree is None:
        return m.treespec_none(**kw)
    if t is tuple:
        return m.treespec_tuple(kids(tree), **kw)
    if t is list:
        return m.treespec_list(kids(tree), **kw)
    if t is dict:
        return m.treespec_dict({k: rebuild(m, v, nil, ns) for k, v in tree.items()}, **kw)
    if t is OrderedDict:
        return m.treespec_ordereddict([(k, rebuild(m, v, nil, ns)) for k, v in tree.items()], **kw)
    if t is defaultdict:
        return m.treespec_defaultdict(tree.default_factory, {k: rebuild(m, v, nil, ns) for k, v in tree.items()}, **kw)
    if t is deque:
        return m.treespec_deque(kids(tree), tree.maxlen, **kw)
    if t is NT:
        return m.treespec_namedtuple(NT(*kids(tree)), **kw)
    if t is time.struct_time:
        return m.treespec_structseq(time.struct_time(kids(tree)), **kw)
    if t in (Pair, Glob):
        return m.treespec_from_collection(t(*kids([tree.a, tree.b])), **kw)
    return m.treespec_leaf(**kw)


def from_collections(m: Any, tree: Any, nil: bool) -> Any:
    """The structure of ``tree`` built bottom-up with ``treespec_from_collection`` only."""
    if tree is None or type(tree) not in (tuple, list, dict, OrderedDict, defaultdict, deque, NT, time.struct_time):
        return m.treespec_none(none_is_leaf=nil) if tree is None else m.treespec_leaf(none_is_leaf=nil)
    t = type(tree)
    if t in (dict, OrderedDict):
        coll: Any = t((k, from_collections(m, v, nil)) for k, v in tree.items())
    elif t is defaultdict:
        coll = defaultdict(tree.default_factory, {k: from_collections(m, v, nil) for k, v in tree.items()})
    elif t is deque:
        coll = deque([from_collections(m, x, nil) for x in tree], maxlen=tree.maxlen)
    elif t is NT:
        coll = NT(*[from_collections(m, x, nil) for x in tree])
    else:
        coll = t([from_collections(m, x, nil) for x in tree])
    return m.treespec_from_collection(coll, none_is_leaf=nil)


# ------------------------------------------------------------- classes registered in both libraries


class Pair:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __eq__(self, other: object) -> bool:
        return type(other) is Pair and (self.a, self.b) == (other.a, other.b)

    __hash__ = None  # type: ignore[assignment]


class Glob:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


def _pair_flatten(p: Pair) -> Any:
    return (p.a, p.b), "pair", ("a", "b")


def _glob_flatten(g: Glob) -> Any:
    return (g.a, g.b), "glob", None


def _glob_flatten_ns(g: Glob) -> Any:
    return (g.a, g.b), "glob-ns", None


@pytest.fixture(scope="module", autouse=True)
def registrations() -> Iterator[None]:
    """Pair in NS; Glob globally and (otherwise) in NS; the same in both libraries."""
    for lib, glob in ((optree, _O_GLOBAL), (so, so.GLOBAL_NAMESPACE)):
        lib.register_pytree_node(Pair, _pair_flatten, lambda _m, c: Pair(*c), namespace=NS)
        lib.register_pytree_node(Glob, _glob_flatten, lambda _m, c: Glob(*c), namespace=glob)
        lib.register_pytree_node(Glob, _glob_flatten_ns, lambda _m, c: Glob(*c), namespace=NS)
    yield
    for lib, glob in ((optree, _O_GLOBAL), (so, so.GLOBAL_NAMESPACE)):
        lib.unregister_pytree_node(Pair, namespace=NS)
        lib.unregister_pytree_node(Glob, namespace=glob)
        lib.unregister_pytree_node(Glob, namespace=NS)


def both(f: Any) -> tuple[Any, Any]:
    """``f(spruce.optree)`` and ``f(optree)``."""
    return f(so), f(optree)


# ---------------------------------------------------------------------------- constructors


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_constructors_build_the_structure_of_the_tree(tree: Any, none_is_leaf: bool) -> None:
    expected = st.structure(tree, none_is_leaf=none_is_leaf)
    for build in (rebuild, from_collections):
        ours, theirs = both(lambda m, build=build: build(m, tree, none_is_leaf))
        assert ours == expected
        assert repr(ours) == repr(expected)
        assert hash(ours) == hash(expected)
        assert spec_props(ours) == spec_props(theirs)
        assert ours.unflatten(range(ours.num_leaves)) == expected.unflatten(range(ours.num_leaves))
        if same_grammar(tree):
            assert optree_repr(ours) == repr(theirs)


@pytest.mark.parametrize("none_is_leaf", [False, True])
def test_leaf_and_none(none_is_leaf: bool) -> None:
    for f in ("treespec_leaf", "treespec_none"):
        ours, theirs = both(lambda m, f=f: getattr(m, f)(none_is_leaf=none_is_leaf, namespace=NS))
        assert spec_props(ours) == spec_props(theirs)
        assert optree_repr(ours) == repr(theirs)
        assert ours.namespace == ""  # a leaf or None needs no registration
    assert so.treespec_leaf(none_is_leaf=none_is_leaf) == st.structure(0, none_is_leaf=none_is_leaf)
    assert so.treespec_none(none_is_leaf=none_is_leaf) == st.structure(None, none_is_leaf=none_is_leaf)
    assert (so.treespec_leaf(none_is_leaf=none_is_leaf) == so.treespec_none(none_is_leaf=none_is_leaf)) is none_is_leaf


def test_mapping_constructors_take_pairs_and_keywords() -> None:
    leaf, none = so.treespec_leaf(), so.treespec_none()
    assert so.treespec_dict([("b", leaf), ("a", none)], c=leaf) == st.structure({"b": 0, "a": None, "c": 0})
    assert so.treespec_dict({"a": none}, a=leaf) == st.structure({"a": 0})  # dict(mapping, **kwargs)
    assert so.treespec_ordereddict([("b", leaf)], a=none).entries() == ["b", "a"]
    assert so.treespec_defaultdict() == st.structure(defaultdict(None))
    assert so.treespec_defaultdict(int, b=leaf) == st.structure(defaultdict(int, b=0))
    assert so.treespec_deque(iter([leaf, none]), maxlen=5) == st.structure(deque([0, None], maxlen=5))
    assert so.treespec_tuple(iter([leaf, leaf])) == st.structure((0, 0))
    for f in (so.treespec_tuple, so.treespec_list, so.treespec_dict, so.treespec_ordereddict, so.treespec_deque):
        assert spec_props(f()) == spec_props(getattr(optree, f.__name__)())
    ours, theirs = both(lambda m: m.treespec_dict({1: m.treespec_leaf(), "a": m.treespec_leaf()}))
    assert ours.entries() == theirs.entries() == [1, "a"]


def test_dict_key_order_follows_the_walk() -> None:
    leaf = so.treespec_leaf()
    with so.dict_insertion_ordered(True, namespace=NS), optree.dict_insertion_ordered(True, namespace=NS):
        ours = so.treespec_dict({"b": leaf, "a": leaf}, namespace=NS)
        theirs = optree.treespec_dict({"b": optree.treespec_leaf(), "a": optree.treespec_leaf()}, namespace=NS)
        assert ours == st.structure({"b": 0, "a": 0}, namespace=NS)
        assert ours.entries() == theirs.entries() == ["b", "a"]
        assert ours.namespace == theirs.namespace == NS
        assert so.treespec_dict({"b": leaf, "a": leaf}).entries() == ["a", "b"]  # another walk


def test_registered_classes_and_namespaces_match_optree() -> None:
    cases = {
        "root in ns": lambda m: m.treespec_from_collection(Pair(m.treespec_leaf(), m.treespec_none()), namespace=NS),
        "child in ns promotes": lambda m: m.treespec_tuple([m.tree_structure(Pair(1, 2), namespace=NS), m.treespec_leaf()]),
        "child of a global root": lambda m: m.treespec_list([m.tree_structure(Glob(1, 2))]),
        "ns registration wins": lambda m: m.treespec_from_collection(Glob(m.treespec_leaf(), m.treespec_leaf()), namespace=NS),
        "global registration": lambda m: m.treespec_from_collection(Glob(m.treespec_leaf(), m.treespec_leaf())),
        "tuple needs no namespace": lambda m: m.treespec_tuple([m.treespec_leaf()], namespace=NS),
        "two in ns": lambda m: m.treespec_list(
            [m.tree_structure(Pair(1, 2), namespace=NS), m.tree_structure(Glob(3, 4), namespace=NS)], namespace=NS
        ),
    }
    for name, f in cases.items():
        ours, theirs = both(f)
        assert spec_props(ours) == spec_props(theirs), name
    ours = so.treespec_list([so.treespec_leaf()], namespace=so.GLOBAL_NAMESPACE)
    assert spec_props(ours) == spec_props(optree.treespec_list([optree.treespec_leaf()]))
    ours = so.treespec_from_collection(Pair(so.treespec_leaf(), so.treespec_tuple([so.treespec_leaf()])), namespace=NS)
    assert ours == st.structure(Pair(1, (2,)), namespace=NS)
    assert repr(ours) == repr(st.structure(Pair(1, (2,)), namespace=NS))
    promoted = so.treespec_tuple([st.structure(Pair(1, 2), namespace=NS), so.treespec_leaf()])
    assert repr(promoted) == repr(st.structure((Pair(1, 2), 0), namespace=NS))
    assert promoted.unflatten([1, 2, 3]) == (Pair(1, 2), 3)
    for nil in (False, True):
        ours = rebuild(so, [Pair(1, None), Glob(2, 3)], nil, NS)
        assert ours == st.structure([Pair(1, None), Glob(2, 3)], none_is_leaf=nil, namespace=NS)


def test_from_collection_of_a_leaf_warns_and_gives_a_leaf() -> None:
    for value, nil in ((1, False), (None, True), (so.treespec_leaf(), False), (Pair(1, 2), False)):
        with pytest.warns(UserWarning, match="is a leaf"):
            ours = so.treespec_from_collection(value, none_is_leaf=nil)
        with pytest.warns(UserWarning, match="called on a leaf"):
            theirs = optree.treespec_from_collection(value if not isinstance(value, st.PyTreeDef) else 1, none_is_leaf=nil)
        assert spec_props(ours) == spec_props(theirs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        so.treespec_from_collection(1)
    assert caught[0].filename == __file__  # points at the caller


# -------------------------------------------------------------------------- constructor errors


def test_children_that_are_not_structures() -> None:
    leaf = so.treespec_leaf()
    calls = {
        "tuple": lambda: so.treespec_tuple([leaf, 1]),
        "list": lambda: so.treespec_list([(leaf,)]),
        "dict": lambda: so.treespec_dict({"a": leaf, "b": [leaf]}),
        "OrderedDict": lambda: so.treespec_ordereddict(a="x"),
        "defaultdict": lambda: so.treespec_defaultdict(int, a=None),
        "deque": lambda: so.treespec_deque([2]),
        "NT": lambda: so.treespec_namedtuple(NT(leaf, 2)),
        "struct_time": lambda: so.treespec_structseq(time.struct_time([leaf] * 8 + [3])),
        "Pair": lambda: so.treespec_from_collection(Pair(leaf, 1), namespace=NS),
    }
    for kind, call in calls.items():
        with pytest.raises(ValueError, match=r"Expected a\(n\) .*" + kind + r".* of PyTreeSpec\(s\)"):
            call()
    with pytest.raises(ValueError, match=re.escape("(child 1 is of type int)")):
        so.treespec_tuple([leaf, 1])
    with pytest.raises(ValueError, match=r"Expected a\(n\) tuple of PyTreeSpec\(s\)"):
        optree.treespec_tuple([optree.treespec_leaf(), 1])


def test_namedtuple_and_structseq_need_their_kind() -> None:
    leaf = so.treespec_leaf()
    for bad in ((leaf, leaf), [leaf], time.struct_time([leaf] * 9)):
        with pytest.raises(ValueError, match=r"Expected a namedtuple of PyTreeSpec\(s\)"):
            so.treespec_namedtuple(bad)
    for bad in ((leaf,), NT(leaf, leaf)):
        with pytest.raises(ValueError, match=r"Expected a PyStructSequence of PyTreeSpec\(s\)"):
            so.treespec_structseq(bad)
        with pytest.raises(ValueError, match=r"Expected a PyStructSequence of PyTreeSpec\(s\)"):
            optree.treespec_structseq(bad)


@pytest.mark.parametrize("none_is_leaf", [False, True])
def test_children_must_share_none_is_leaf(none_is_leaf: bool) -> None:
    other = so.treespec_leaf(none_is_leaf=not none_is_leaf)
    msg = re.escape(f"Expected treespec(s) with `none_is_leaf={none_is_leaf}`")
    for make in (so.treespec_tuple, so.treespec_list, so.treespec_deque):
        with pytest.raises(ValueError, match=msg):
            make([so.treespec_leaf(none_is_leaf=none_is_leaf), other], none_is_leaf=none_is_leaf)
    with pytest.raises(ValueError, match=msg):
        so.treespec_dict(a=other, none_is_leaf=none_is_leaf)
    with pytest.raises(ValueError, match=msg):
        optree.treespec_tuple([optree.treespec_leaf(none_is_leaf=not none_is_leaf)], none_is_leaf=none_is_leaf)


def test_children_must_share_a_namespace() -> None:
    a = st.structure(Pair(1, 2), namespace=NS)
    b = st.structure(Pair(1, 2), namespace=NS + "-b")  # not registered there: a leaf, namespace ""
    assert b.namespace == ""
    st.register_pytree_node(Pair, lambda p: ((p.a,), None), lambda _, c: Pair(c[0], 0), namespace=NS + "-c")
    try:
        c = st.structure(Pair(1, 2), namespace=NS + "-c")
        same = f"Expected treespecs with the same namespace, got {NS!r} vs. {NS + '-c'!r}"
        with pytest.raises(ValueError, match=re.escape(same)):
            so.treespec_tuple([a, b, c])
        with pytest.raises(ValueError, match=re.escape(f"Expected treespec(s) with namespace {NS + '-c'!r}, got {NS!r}")):
            so.treespec_list([a], namespace=NS + "-c")
        assert so.treespec_list([c], namespace=NS + "-c").namespace == NS + "-c"
    finally:
        st.unregister(Pair, namespace=NS + "-c")
    ours = so.treespec_tuple([a, b])
    assert ours.namespace == NS
    with pytest.raises(ValueError, match="Expected treespec"):
        optree.treespec_tuple([optree.tree_structure(Pair(1, 2), namespace=NS)], namespace="elsewhere")


def test_a_global_registration_cannot_join_a_namespace_that_registers_it_otherwise() -> None:
    in_ns = lambda m: m.tree_structure(Pair(1, 2), namespace=NS)
    glob = lambda m: m.tree_structure(Glob(1, 2))
    calls = [
        lambda m: m.treespec_tuple([in_ns(m), glob(m)]),
        lambda m: m.treespec_from_collection(Pair(glob(m), m.treespec_leaf()), namespace=NS),
        lambda m: m.treespec_from_collection(Glob(in_ns(m), m.treespec_leaf())),
    ]
    for call in calls:
        for m in (so, optree):
            with pytest.raises(ValueError, match="no longer resolves to its original registration"):
                call(m)
    # in a namespace that does not register Glob, the global registration is kept
    assert so.treespec_tuple([glob(so)], namespace=NS).namespace == ""


def test_argument_errors() -> None:
    leaf = so.treespec_leaf()
    for f in (so.treespec_leaf, so.treespec_none):
        with pytest.raises(TypeError, match="namespace must be a string"):
            f(namespace=1)  # type: ignore[arg-type]
    for call in (lambda: so.treespec_tuple([leaf], namespace=None), lambda: so.treespec_from_collection([leaf], namespace=b"x")):
        with pytest.raises(TypeError, match="namespace must be a string"):
            call()
    with pytest.raises(TypeError):
        so.treespec_tuple(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        so.treespec_dict(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        so.treespec_defaultdict(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="maxlen"):
        so.treespec_deque([leaf], -1)


@pytest.mark.skipif(sys.version_info >= (3, 15), reason="frozendict is built in from Python 3.15")
def test_frozendict_needs_python_3_15() -> None:
    for m in (so, optree):
        with pytest.raises(RuntimeError, match="frozendict"):
            m.treespec_frozendict()
        with pytest.raises(RuntimeError, match="frozendict"):
            m.treespec_frozendict({"a": m.treespec_leaf()})


# ------------------------------------------------------------------- questions about a structure


@pytest.mark.parametrize("none_is_leaf", [False, True])
@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_questions_match_optree(tree: Any, none_is_leaf: bool) -> None:
    ours, theirs = st.structure(tree, none_is_leaf=none_is_leaf), optree.tree_structure(tree, none_is_leaf=none_is_leaf)
    assert so.treespec_entries(ours) == optree.treespec_entries(theirs)
    assert [spec_props(c) for c in so.treespec_children(ours)] == [spec_props(c) for c in optree.treespec_children(theirs)]
    for i in range(-ours.num_children, ours.num_children):
        assert so.treespec_entry(ours, i) == optree.treespec_entry(theirs, i)
        assert spec_props(so.treespec_child(ours, i)) == spec_props(optree.treespec_child(theirs, i))
    one_o, one_t = so.treespec_one_level(ours), optree.treespec_one_level(theirs)
    assert (one_o is None) == (one_t is None)
    if one_o is not None:
        assert spec_props(one_o) == spec_props(one_t)
        assert so.treespec_is_one_level(one_o)
    for name in ("treespec_is_leaf", "treespec_is_strict_leaf", "treespec_is_one_level"):
        assert getattr(so, name)(ours) == getattr(optree, name)(theirs), name
    assert so.treespec_is_leaf(ours, strict=False) == optree.treespec_is_leaf(theirs, strict=False)


def test_one_level_keeps_namespace_and_none_is_leaf() -> None:
    for tree in ((Pair(1, 2), [3]), [Glob(1, 2)], Pair((1,), None)):
        for nil in (False, True):
            ours, theirs = both(
                lambda m, tree=tree, nil=nil: m.treespec_one_level(m.tree_structure(tree, none_is_leaf=nil, namespace=NS))
            )
            assert spec_props(ours) == spec_props(theirs)
    assert so.treespec_one_level(st.structure(None, none_is_leaf=True)) is None


DICT_KINDS = (dict, OrderedDict, defaultdict)


def _dicts_of_other_kinds(a: Any, b: Any) -> bool:
    """Two trees whose roots are dicts of different kinds, or defaultdicts of different
    factories (see test_prefix_across_dict_kinds)."""
    if type(a) not in DICT_KINDS or type(b) not in DICT_KINDS:
        return False
    return type(a) is not type(b) or getattr(a, "default_factory", None) != getattr(b, "default_factory", None)


def test_prefix_and_suffix_match_optree() -> None:
    for a in TREES:
        for b in TREES:
            if _dicts_of_other_kinds(a, b):
                continue
            sa, sb = st.structure(a), st.structure(b)
            oa, ob = optree.tree_structure(a), optree.tree_structure(b)
            for strict in (False, True):
                assert so.treespec_is_prefix(sa, sb, strict=strict) == optree.treespec_is_prefix(oa, ob, strict=strict)
                assert so.treespec_is_suffix(sa, sb, strict=strict) == optree.treespec_is_suffix(oa, ob, strict=strict)


@pytest.mark.parametrize(
    ("a", "b"), [({}, defaultdict(None)), ({"a": 1}, OrderedDict(a=(1,))), (defaultdict(int, a=1), {"a": 1})]
)
def test_prefix_across_dict_kinds(a: Any, b: Any) -> None:
    """A deliberate difference: optree lets dict, OrderedDict and defaultdict with the same keys
    be prefixes of each other; spruce's structures (as JAX's) require the same dict kind, since
    the kinds rebuild different containers (documented in the "Coming from optree" page)."""
    assert optree.treespec_is_prefix(optree.tree_structure(a), optree.tree_structure(b))
    assert not so.treespec_is_prefix(st.structure(a), st.structure(b))
    assert so.treespec_is_prefix(st.structure(a), st.structure(a))


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_transform_matches_optree(tree: Any) -> None:
    ours, theirs = st.structure(tree), optree.tree_structure(tree)

    def to_list(m: Any) -> Any:
        return lambda one: m.treespec_list([m.treespec_leaf()] * one.num_children)

    def to_pair(m: Any) -> Any:
        return lambda leaf: m.treespec_tuple([m.treespec_leaf(), m.treespec_none()])

    assert spec_props(so.treespec_transform(ours, to_list(so))) == spec_props(optree.treespec_transform(theirs, to_list(optree)))
    paired = optree.treespec_transform(theirs, None, to_pair(optree))
    assert spec_props(so.treespec_transform(ours, None, to_pair(so))) == spec_props(paired)
    assert so.treespec_transform(ours) == ours


def test_questions_reject_what_is_not_a_structure() -> None:
    spec = st.structure([1, 2])
    one_arg = [
        so.treespec_entries, so.treespec_children, so.treespec_one_level, so.treespec_transform,
        so.treespec_is_leaf, so.treespec_is_strict_leaf, so.treespec_is_one_level,
    ]
    for f in one_arg:
        with pytest.raises(TypeError, match=f"{f.__name__}: expected a PyTreeSpec"):
            f([1, 2])
    for g in (so.treespec_entry, so.treespec_child):
        with pytest.raises(TypeError, match="expected a PyTreeSpec"):
            g((1,), 0)
        with pytest.raises(IndexError):
            g(spec, 2)
        with pytest.raises(TypeError):
            g(spec, 1.0)  # type: ignore[arg-type]
    for h in (so.treespec_is_prefix, so.treespec_is_suffix):
        with pytest.raises(TypeError, match="expected a PyTreeSpec"):
            h(spec, [1, 2])
        with pytest.raises(TypeError, match="expected a PyTreeSpec"):
            h(None, spec)
    with pytest.raises(ValueError, match="different namespaces"):
        so.treespec_is_prefix(st.structure(Pair(1, 2), namespace=NS), _other_namespace_spec())
    with pytest.raises(TypeError, match="must return a PyTreeDef"):
        so.treespec_transform(spec, None, lambda leaf: 1)
    with pytest.raises(ValueError, match="as many leaves"):
        so.treespec_transform(spec, lambda one: so.treespec_leaf())


def _other_namespace_spec() -> Any:
    """A structure recording a namespace other than NS (a dict in insertion order there)."""
    with st.dict_insertion_ordered(True, namespace=NS + "-other"):
        spec = st.structure({"a": 1}, namespace=NS + "-other")
    assert spec.namespace == NS + "-other"
    return spec


# -------------------------------------------------------------------------- the treespec module


def test_treespec_module_rebinds_the_constructors() -> None:
    assert short.__all__ == optree.treespec.__all__
    for name in short.__all__:
        long_name = "treespec_" + name
        assert getattr(short, name) is getattr(_treespec, long_name) is getattr(so, long_name)
        assert getattr(optree.treespec, name) is getattr(optree, long_name)  # the same layout as optree's
    assert so.treespec is short
    assert short.dict({"b": short.leaf(), "a": short.none()}) == st.structure({"b": 0, "a": None})


def test_all_names_match_optree() -> None:
    expected = [n for n in dir(optree) if n.startswith("treespec_") and n not in ("treespec_paths", "treespec_accessors")]
    assert sorted(_treespec.__all__) == sorted(expected)
    assert len(set(_treespec.__all__)) == len(_treespec.__all__)
