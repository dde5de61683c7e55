"""One shared corpus of example trees, with golden outputs, for every test module.

Each ``Case`` holds a tree and what spruce must say about it.  The golden values are literals
written here by hand: for every node kind that jax.tree_util also has, they were checked once
against jax 0.10.2 (same leaves, same ``PyTreeDef`` repr, same key paths, same counts).  Kinds
JAX has no node for (deque, struct sequences, dicts with keys of mixed types) carry the values
the spruce spec promises instead.

Nothing in this file is computed by spruce; the module only registers the corpus types with it.

Also here: ``assert_tree_equal`` (a type-, order- and value-strict comparison written without
spruce), ``follow`` (walks a key path by hand), and ``run_python`` (runs a snippet in a fresh
interpreter, for tests where a crash must fail the test instead of killing pytest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any, Callable, NamedTuple

import numpy as np

import spruce
import spruce.tree as st

SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

# ---------------------------------------------------------------------------------------------
# Node types used by the corpus (module level so that treedefs holding them pickle).
# ---------------------------------------------------------------------------------------------

Point = namedtuple("Point", ["x", "y"])


class PointSub(Point):
    """A subclass of a namedtuple: still a namedtuple node."""

    __slots__ = ()

    def norm1(self) -> Any:
        return self.x + self.y


class Pair(NamedTuple):
    first: Any
    second: Any


@st.register_dataclass
@dataclasses.dataclass
class Params:
    """Registered dataclass: ``w`` and ``b`` are children, ``name`` is static (node data)."""

    w: Any
    b: Any
    name: str = dataclasses.field(default="lin", metadata={"static": True})


class Box:
    """A custom node registered without key names (paths use FlattenedIndexKey)."""

    def __init__(self, a: Any, b: Any, tag: Any) -> None:
        self.a = a
        self.b = b
        self.tag = tag

    def __repr__(self) -> str:
        return f"Box({self.a!r}, {self.b!r}, tag={self.tag!r})"


st.register_pytree_node(
    Box,
    lambda box: ((box.a, box.b), box.tag),
    lambda tag, children: Box(children[0], children[1], tag),
)


class KeyedBox:
    """A custom node registered with keys (paths use the keys its flatten_with_keys gives)."""

    def __init__(self, left: Any, right: Any) -> None:
        self.left = left
        self.right = right

    def __repr__(self) -> str:
        return f"KeyedBox({self.left!r}, {self.right!r})"


st.register_pytree_with_keys(
    KeyedBox,
    lambda kb: (((st.GetAttrKey("left"), kb.left), (st.GetAttrKey("right"), kb.right)), None),
    lambda aux, children: KeyedBox(*children),
)


@dataclasses.dataclass(frozen=True)
class StaticTag:
    """Registered with register_static: a node with no children; the object is the node data."""

    v: str


st.register_static(StaticTag)

# ---------------------------------------------------------------------------------------------
# Leaves with identity (arrays compare by identity in the corpus).
# ---------------------------------------------------------------------------------------------

ARR = np.arange(6, dtype=np.float32).reshape(2, 3)
ARR2 = np.array([1.5, -2.5])
EPOCH = time.gmtime(0)

# ---------------------------------------------------------------------------------------------
# The corpus.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OneOf:
    """A golden value where the spec allows any of a few forms (see the note at its use)."""

    options: tuple[Any, ...]

    def __contains__(self, value: object) -> bool:
        return value in self.options


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    tree: Any
    leaves: list[Any]
    #: exact ``repr(structure(tree))``; None where JAX has no such node kind
    treedef_repr: str | None
    #: ``keystr`` of each leaf's path, in leaf order (or a ``OneOf`` of such tuples)
    paths: Any
    num_leaves: int
    num_nodes: int
    #: the root's direct children, in flatten order (``[tree]`` for a leaf)
    children: list[Any]
    #: substrings the repr must contain when ``treedef_repr`` is None
    repr_mentions: tuple[str, ...] = ()
    #: False: the spec fixes no order between the root's children (mixed-type dict keys)
    ordered: bool = True


def _structseq_paths(names: list[str]) -> OneOf:
    # The spec lists key kinds per node type but not for struct sequences: they are tuples
    # (SequenceKey, like optree) with named fields (GetAttrKey, like namedtuples).  Either form
    # is accepted.
    return OneOf(
        (
            tuple(f"[{i}]" for i in range(len(names))),
            tuple(f".{n}" for n in names),
        )
    )


STRUCT_TIME_FIELDS = [
    "tm_year", "tm_mon", "tm_mday", "tm_hour", "tm_min", "tm_sec", "tm_wday", "tm_yday",
    "tm_isdst",
]  # fmt: skip

PARAMS = Params(w=ARR, b=ARR2, name="dense")
BOX = Box(1, [2, 3], ("tag", 1))
PARTIAL = st.Partial(operator.add, 1, 2)

CASES: list[Case] = [
    Case("leaf_int", 1, [1], "PyTreeDef(*)", ("",), 1, 1, [1]),
    Case("leaf_str", "hello", ["hello"], "PyTreeDef(*)", ("",), 1, 1, ["hello"]),
    Case("leaf_ndarray", ARR, [ARR], "PyTreeDef(*)", ("",), 1, 1, [ARR]),
    Case("none", None, [], "PyTreeDef(None)", (), 0, 1, []),
    Case("empty_tuple", (), [], "PyTreeDef(())", (), 0, 1, []),
    Case("empty_list", [], [], "PyTreeDef([])", (), 0, 1, []),
    Case("empty_dict", {}, [], "PyTreeDef({})", (), 0, 1, []),
    Case(
        "tuple",
        (1, "two", 3.0),
        [1, "two", 3.0],
        "PyTreeDef((*, *, *))",
        ("[0]", "[1]", "[2]"),
        3,
        4,
        [1, "two", 3.0],
    ),
    Case(
        "list_none_holes",
        [1, [None, 2], None],
        [1, 2],
        "PyTreeDef([*, [None, *], None])",
        ("[0]", "[1][1]"),
        2,
        6,
        [1, [None, 2], None],
    ),
    Case(
        "dict_unsorted_insertion",
        {"b": 2, "a": 1, "c": 3},
        [1, 2, 3],
        "PyTreeDef({'a': *, 'b': *, 'c': *})",
        ("['a']", "['b']", "['c']"),
        3,
        4,
        [1, 2, 3],
    ),
    Case(
        "dict_int_keys",
        {10: "ten", 2: "two", -1: "minus"},
        ["minus", "two", "ten"],
        "PyTreeDef({-1: *, 2: *, 10: *})",
        ("[-1]", "[2]", "[10]"),
        3,
        4,
        ["minus", "two", "ten"],
    ),
    Case(
        "dict_of_empties",
        {"d": (), "c": None, "b": {}, "a": []},
        [],
        "PyTreeDef({'a': [], 'b': {}, 'c': None, 'd': ()})",
        (),
        0,
        5,
        [[], {}, None, ()],
    ),
    Case(
        "nested_builtins",
        {"y": {"z": None, "w": ARR}, "x": [1, (2, 3)], "e": ()},
        [1, 2, 3, ARR],
        "PyTreeDef({'e': (), 'x': [*, (*, *)], 'y': {'w': *, 'z': None}})",
        ("['x'][0]", "['x'][1][0]", "['x'][1][1]", "['y']['w']"),
        4,
        10,
        [(), [1, (2, 3)], {"z": None, "w": ARR}],
    ),
    Case(
        "namedtuple",
        Point(x=1, y=[2, 3]),
        [1, 2, 3],
        "PyTreeDef(CustomNode(namedtuple[Point], [*, [*, *]]))",
        (".x", ".y[0]", ".y[1]"),
        3,
        5,
        [1, [2, 3]],
    ),
    Case(
        "namedtuple_subclass",
        PointSub(x=(1,), y=None),
        [1],
        "PyTreeDef(CustomNode(namedtuple[PointSub], [(*,), None]))",
        (".x[0]",),
        1,
        4,
        [(1,), None],
    ),
    Case(
        "typing_namedtuple",
        Pair(first="f", second={"k": 2}),
        ["f", 2],
        "PyTreeDef(CustomNode(namedtuple[Pair], [*, {'k': *}]))",
        (".first", ".second['k']"),
        2,
        4,
        ["f", {"k": 2}],
    ),
    Case(
        "ordereddict",
        OrderedDict([("b", 1), ("a", [2, 3])]),
        [1, 2, 3],
        "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, [*, *]]))",
        ("['b']", "['a'][0]", "['a'][1]"),
        3,
        5,
        [1, [2, 3]],
    ),
    Case(
        "defaultdict",
        defaultdict(list, {"b": 1, "a": 2}),
        [2, 1],
        "PyTreeDef(CustomNode(defaultdict[(<class 'list'>, ('a', 'b'))], [*, *]))",
        ("['a']", "['b']"),
        2,
        3,
        [2, 1],
    ),
    Case(
        "deque_maxlen",
        deque([1, 2, 3], maxlen=5),
        [1, 2, 3],
        None,
        ("[0]", "[1]", "[2]"),
        3,
        4,
        [1, 2, 3],
        repr_mentions=("deque", "maxlen", "5"),
    ),
    Case(
        "deque_nested",
        {"q": deque([[1], None, (2,)])},
        [1, 2],
        None,
        ("['q'][0][0]", "['q'][2][0]"),
        2,
        7,
        [deque([[1], None, (2,)])],
        repr_mentions=("deque",),
    ),
    Case(
        "struct_time",
        EPOCH,
        [1970, 1, 1, 0, 0, 0, 3, 1, 0],
        None,
        _structseq_paths(STRUCT_TIME_FIELDS),
        9,
        10,
        [1970, 1, 1, 0, 0, 0, 3, 1, 0],
        repr_mentions=("struct_time",),
    ),
    Case(
        "dict_mixed_key_types",
        {"a": "A", 1: "one", (2,): "two"},
        ["A", "one", "two"],
        None,
        ("['a']", "[1]", "[(2,)]"),
        3,
        4,
        ["A", "one", "two"],
        repr_mentions=("'a': *", "1: *", "(2,): *"),
        ordered=False,
    ),
    Case(
        "dataclass",
        PARAMS,
        [ARR, ARR2],
        "PyTreeDef(CustomNode(Params[('dense',)], [*, *]))",
        (".w", ".b"),
        2,
        3,
        [ARR, ARR2],
    ),
    Case(
        "custom_node",
        BOX,
        [1, 2, 3],
        "PyTreeDef(CustomNode(Box[('tag', 1)], [*, [*, *]]))",
        # FlattenedIndexKey prints as JAX's does: "[<flat index 0>]".
        ("[<flat index 0>]", "[<flat index 1>][0]", "[<flat index 1>][1]"),
        3,
        5,
        [1, [2, 3]],
    ),
    Case(
        "custom_node_with_keys",
        KeyedBox({"p": 1}, None),
        [1],
        "PyTreeDef(CustomNode(KeyedBox[None], [{'p': *}, None]))",
        (".left['p']",),
        1,
        4,
        [{"p": 1}, None],
    ),
    Case(
        "register_static",
        [StaticTag("t"), 2],
        [2],
        "PyTreeDef([CustomNode(StaticTag[StaticTag(v='t')], []), *])",
        ("[1]",),
        1,
        3,
        [StaticTag("t"), 2],
    ),
    Case(
        "partial",
        PARTIAL,
        [1, 2],
        "PyTreeDef(CustomNode(Partial[<built-in function add>], [(*, *), {}]))",
        ("[<flat index 0>][0]", "[<flat index 0>][1]"),
        2,
        5,
        [(1, 2), {}],
    ),
    Case(
        "everything_nested",
        Point(
            x=Params(w=[1, None], b=Pair(first=(), second=2), name="p"),
            y=OrderedDict(
                [("z", deque([None, 3], maxlen=2)), ("a", defaultdict(int, {"k": [4]}))]
            ),
        ),
        [1, 2, 3, 4],
        None,
        (
            ".x.w[0]",
            ".x.b.second",
            ".y['z'][1]",
            ".y['a']['k'][0]",
        ),
        4,
        15,
        [
            Params(w=[1, None], b=Pair(first=(), second=2), name="p"),
            OrderedDict([("z", deque([None, 3], maxlen=2)), ("a", defaultdict(int, {"k": [4]}))]),
        ],
        repr_mentions=("namedtuple[Point]", "Params[('p',)]", "deque", "maxlen", "defaultdict"),
    ),
]

CASE_IDS = [c.id for c in CASES]
CASES_BY_ID = {c.id: c for c in CASES}


def cases(*, exclude: tuple[str, ...] = ()) -> list[Any]:
    """The corpus as ``pytest.param`` objects with readable ids."""
    import pytest

    return [pytest.param(c, id=c.id) for c in CASES if c.id not in exclude]


# ---------------------------------------------------------------------------------------------
# Comparison helpers, written without spruce.
# ---------------------------------------------------------------------------------------------


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_structseq(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "n_sequence_fields")


def same_leaf(a: Any, b: Any) -> bool:
    """Identity for arrays and other objects; equality (with the same type) for plain values."""
    if a is b:
        return True
    if isinstance(a, (int, float, str, bytes, complex, bool)) or a is None:
        return type(a) is type(b) and bool(a == b)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    return type(a) is type(b) and _safe_eq(a, b)


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays and friends; identity was checked already
        return False


def assert_leaves_equal(actual: list[Any], expected: list[Any]) -> None:
    assert isinstance(actual, list), f"expected a list of leaves, got {type(actual)}"
    assert len(actual) == len(expected), f"{len(actual)} leaves, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert same_leaf(a, e), f"leaf {i}: {a!r} != {e!r}"


def assert_tree_equal(actual: Any, expected: Any, where: str = "tree") -> None:
    """Strict structural equality: same types, same dict key *order*, same aux, same leaves."""
    ta, te = type(actual), type(expected)
    assert ta is te, f"{where}: type {ta!r} != {te!r}"
    if isinstance(expected, (dict,)):
        assert list(actual.keys()) == list(expected.keys()), (
            f"{where}: keys {list(actual.keys())} != {list(expected.keys())}"
        )
        if isinstance(expected, defaultdict):
            assert actual.default_factory is expected.default_factory, f"{where}: factory"
        for k in expected:
            assert_tree_equal(actual[k], expected[k], f"{where}[{k!r}]")
    elif isinstance(expected, deque):
        assert actual.maxlen == expected.maxlen, f"{where}: maxlen"
        assert len(actual) == len(expected), f"{where}: len"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_equal(a, e, f"{where}[{i}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: len {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_equal(a, e, f"{where}[{i}]")
    elif isinstance(expected, functools.partial):
        assert actual.func is expected.func, f"{where}: func"
        assert_tree_equal(actual.args, expected.args, f"{where}.args")
        assert_tree_equal(dict(actual.keywords), dict(expected.keywords), f"{where}.keywords")
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert hasattr(actual, f.name), f"{where}: field {f.name} missing"
            assert_tree_equal(getattr(actual, f.name), getattr(expected, f.name), f"{where}.{f.name}")
    elif isinstance(expected, (Box, KeyedBox)) or type(expected) in HAND_FLATTEN:
        assert sorted(vars(actual)) == sorted(vars(expected)), f"{where}: attributes"
        for name, value in vars(expected).items():
            assert_tree_equal(getattr(actual, name), value, f"{where}.{name}")
    else:
        assert same_leaf(actual, expected), f"{where}: {actual!r} != {expected!r}"


#: hand-written children of the custom node types whose paths use FlattenedIndexKey
#: (test modules add their own types here)
HAND_FLATTEN: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    Box: lambda b: (b.a, b.b),
    st.Partial: lambda p: (p.args, p.keywords),
}


def follow(tree: Any, path: tuple[Any, ...]) -> Any:
    """Walk a key path by hand: DictKey -> [key], SequenceKey -> [idx], GetAttrKey -> .name,
    FlattenedIndexKey -> the key-th child of the custom node's own flatten."""
    node = tree
    for entry in path:
        if isinstance(entry, st.DictKey):
            node = node[entry.key]
        elif isinstance(entry, st.SequenceKey):
            node = list(node)[entry.idx] if isinstance(node, deque) else node[entry.idx]
        elif isinstance(entry, st.GetAttrKey):
            node = getattr(node, entry.name)
        elif isinstance(entry, st.FlattenedIndexKey):
            children_of = HAND_FLATTEN.get(type(node))
            if children_of is None:
                raise AssertionError(f"no hand-written flatten for {type(node)}")
            node = children_of(node)[entry.key]
        else:
            raise AssertionError(f"unknown key entry {entry!r}")
    return node


def run_python(code: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a crash cannot take pytest down with it), importing
    the same spruce build as this process: ``src`` when the tests run on the uncompiled source,
    the installed package when they run on the compiled one.  Returns the completed process;
    the caller asserts on it."""
    env = dict(os.environ)
    if os.path.dirname(os.path.dirname(os.path.abspath(spruce.__file__))) == SRC_DIR:
        env["PYTHONPATH"] = SRC_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONFAULTHANDLER", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


# ---------------------------------------------------------------------------------------------
# Printed output that holds float results (the rule is stated in conftest.py).
# ---------------------------------------------------------------------------------------------

#: Tolerance for float32 results of XLA / BLAS kernels, which differ in their last digits
#: between processors (vector width, FMA, summation order): relative 1e-6, and absolute 1e-6
#: for values near 0 (the computations checked are of scale 1, where float32 rounding is
#: about 1.2e-7 per operation).
FLOAT_RTOL = 1e-6
FLOAT_ATOL = 1e-6

# A float as Python and NumPy print it: a decimal point or an exponent is required (integers,
# such as shapes and counts, stay text and are compared exactly), and it must stand alone (not
# the "32" of "float32", nor part of a version string such as "0.12.0").
_FLOAT_RE = re.compile(
    r"(?<![\w.])[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?!\w)(?!\.\d)"
)


def _float_split(text: str) -> tuple[list[str], list[float]]:
    """``text`` as the text between its floats (one more than the floats) and the floats.
    Whitespace that touches a float is dropped from the text around it: NumPy pads the numbers
    of an array to a common width (``[ 0.533231  , -1.0117726 ]``), so it changes with them."""
    parts = _FLOAT_RE.split(text)
    floats = [float(m) for m in _FLOAT_RE.findall(text)]
    for i in range(len(parts)):
        if i > 0:
            parts[i] = parts[i].lstrip()
        if i < len(parts) - 1:
            parts[i] = parts[i].rstrip()
    return parts, floats


def text_difference(actual: str, expected: str, *, rtol: float = FLOAT_RTOL, atol: float = FLOAT_ATOL) -> str | None:
    """The first difference between two printed outputs, or None when they agree: everything
    but the floats exactly (structure, names, shapes, dtypes, integers), each float to within
    ``atol + rtol * |expected|``, whitespace next to a float ignored."""
    a_parts, a_floats = _float_split(actual)
    e_parts, e_floats = _float_split(expected)
    for i, (a, e) in enumerate(zip(a_parts, e_parts)):
        if a != e:
            return f"text after float {i}: {a!r} != expected {e!r}"
        if i < min(len(a_floats), len(e_floats)):
            x, y = a_floats[i], e_floats[i]
            if not abs(x - y) <= atol + rtol * abs(y):
                return f"float {i}: {x!r} != expected {y!r} (rtol={rtol}, atol={atol})"
    if len(a_floats) != len(e_floats):
        return f"{len(a_floats)} floats, expected {len(e_floats)}"
    return None


def assert_text_close(actual: str, expected: str, *, rtol: float = FLOAT_RTOL, atol: float = FLOAT_ATOL) -> None:
    """Assert that printed output matches its expected text, floats compared with a tolerance
    (see ``text_difference``); the message shows both texts and the first difference."""
    diff = text_difference(actual, expected, rtol=rtol, atol=atol)
    assert diff is None, f"{diff}\n--- actual:\n{actual}\n--- expected:\n{expected}"


__all__ = [
    "ARR",
    "ARR2",
    "CASES",
    "CASE_IDS",
    "FLOAT_ATOL",
    "FLOAT_RTOL",
    "Box",
    "Case",
    "HAND_FLATTEN",
    "KeyedBox",
    "OneOf",
    "Pair",
    "Params",
    "Point",
    "PointSub",
    "StaticTag",
    "assert_leaves_equal",
    "assert_text_close",
    "assert_tree_equal",
    "browser",
    "cases",
    "chromium",
    "follow",
    "png_size",
    "run_python",
    "same_leaf",
    "text_difference",
]


@contextlib.contextmanager
def fifo(p: str) -> Any:
    """A named pipe at ``p``.  Should a reader block opening it (the bug this guards against),
    a timer opens the write end after 10 s, so the test fails instead of hanging."""
    os.mkfifo(p)

    def unblock() -> None:
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    timer = threading.Timer(10, unblock)
    timer.start()
    try:
        yield p
    finally:
        timer.cancel()


# ---------------------------------------------------------------------------------------------
# Pages in a browser: Debian's headless chromium (tests/test_view.py, tests/test_docs_site.py).
# ---------------------------------------------------------------------------------------------


def chromium() -> str:
    """The path of Debian's ``chromium`` (or ``chromium-browser``); skips the calling test,
    saying why, where it is missing (``make test`` installs it with apt-get where it can)."""
    import pytest

    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("Debian's chromium is not installed (make test installs it with apt-get where it can: "
                "as root on a Debian-like machine)")
    raise AssertionError("unreachable")


def browser(tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless chromium with ``args`` (``--dump-dom URL``, ``--screenshot=PNG URL``, ...)
    and a fresh profile under ``tmp_path``; returns the completed process (the DOM on stdout)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def png_size(path: Any) -> tuple[int, int]:
    """(width, height) of the PNG file at ``path``, read from its header."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def spec_props(spec: Any) -> Any:
    """What optree's PyTreeSpec and spruce's PyTreeDef must agree on about a structure (type,
    kind, sizes, entries, leaf tests, none_is_leaf, namespace), its children's included."""
    return (
        spec.type,
        int(spec.kind),
        spec.num_children,
        spec.num_nodes,
        spec.num_leaves,
        len(spec),
        spec.entries(),
        spec.is_leaf(),
        spec.is_leaf(strict=False),
        spec.none_is_leaf,
        spec.namespace,
        [spec_props(c) for c in spec.children()],
    )
