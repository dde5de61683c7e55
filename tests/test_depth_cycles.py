"""Depth and cycles.

Very deep trees either work or raise RecursionError, never crash; 100,000 levels must work.
Cycles raise an error that says "cycle" and names the key path where the cycle closes.

The risky probes run in a fresh interpreter (``helpers.run_python``): a segfault or a C stack
overflow then fails the test instead of killing pytest.
"""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import pytest

import spruce.tree as st
from helpers import run_python

pytestmark = pytest.mark.subprocess

DEPTH_PRELUDE = """
import json, pickle, resource, signal, sys
import spruce.tree as st

# a memory blow-up shows as MemoryError (a failure) instead of the OOM killer taking the machine
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

class ProbeTimeout(Exception):
    pass

def _on_alarm(signum, frame):
    raise ProbeTimeout()

signal.signal(signal.SIGALRM, _on_alarm)
PROBE_SECONDS = 30  # a linear-time operation needs a few seconds at 1,000,000 levels

def probe(name, f):
    signal.alarm(PROBE_SECONDS)
    try:
        result = f()
    except RecursionError as e:
        print(json.dumps([name, "RecursionError"]), flush=True)
        return None
    except MemoryError:
        print(json.dumps([name, "MemoryError"]), flush=True)
        return None
    except ProbeTimeout:
        print(json.dumps([name, f"Timeout after {PROBE_SECONDS} s"]), flush=True)
        return None
    finally:
        signal.alarm(0)
    print(json.dumps([name, "ok", result]), flush=True)
    return result

def chain_depth(y, kinds):
    # iterative: how many wrappers of the given kinds, and what sits at the bottom
    d = 0
    while True:
        if type(y) is list and len(y) == 1 and "list" in kinds:
            y = y[0]
        elif type(y) is tuple and len(y) == 1 and "tuple" in kinds:
            y = y[0]
        elif type(y) is dict and list(y) == ["k"] and "dict" in kinds:
            y = y["k"]
        else:
            return d, repr(y)
        d += 1
"""

PROBES = """
try:
    leaves, td = st.flatten(x)
    print(json.dumps(["flatten", "ok"]), flush=True)
except RecursionError:
    td = None
    print(json.dumps(["flatten", "RecursionError"]), flush=True)
if td is not None:
    probe("counts", lambda: [len(leaves), leaves[:1], td.num_leaves, td.num_nodes])
    probe("unflatten", lambda: chain_depth(st.unflatten(td, ["new"]), KINDS))
    probe("map", lambda: chain_depth(st.map(lambda v: ("m", v), x), KINDS))
    probe("leaves", lambda: st.leaves(x))
    probe("iter", lambda: list(st.iter(x)))
    probe("structure_eq", lambda: st.structure(x) == td)
    probe("hash", lambda: isinstance(hash(td), int))
    if WITH_REPR:
        probe("repr_len", lambda: len(repr(td)))
    probe("pickle", lambda: pickle.loads(pickle.dumps(td)) == td)
    probe("flatten_up_to", lambda: td.flatten_up_to(x))
    probe("map2", lambda: chain_depth(st.map(lambda a, b: a + b, x, x), KINDS))
    if WITH_PATHS:
        if probe("paths", lambda: [len(p) for p, _ in st.leaves_with_path(x)]) is not None:
            probe("treedef_paths", lambda: [len(p) for p in td.paths()])
print(json.dumps(["done"]))
"""


def _run_depth(
    build: str, with_paths: bool, with_repr: bool = True, timeout: float = 300
) -> dict[str, Any]:
    code = DEPTH_PRELUDE + build + f"WITH_PATHS = {with_paths}\nWITH_REPR = {with_repr}\n" + PROBES
    proc = run_python(code, timeout=timeout)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert out[-1] == ["done"], proc.stdout[-2000:]
    return {row[0]: row[1:] for row in out[:-1]}


BUILD_LIST = """
N = {n}
KINDS = ("list",)
x = [1]
for _ in range(N):
    x = [x]
"""

BUILD_MIXED = """
N = {n}
KINDS = ("list", "tuple", "dict")
x = [1]
for i in range(N):
    x = ({{"k": x}}, [x], (x,))[i % 3]
"""


def _expected(depth_wrappers: int, node_count: int) -> dict[str, Any]:
    return {
        "counts": [1, [1], 1, node_count],
        "unflatten": [depth_wrappers, "'new'"],
        "map": [depth_wrappers, "('m', 1)"],
        "leaves": [1],
        "iter": [1],
        "structure_eq": True,
        "hash": True,
        "pickle": True,
        "flatten_up_to": [1],
        "map2": [depth_wrappers, "2"],
    }


@pytest.mark.parametrize(
    "build", [BUILD_LIST, pytest.param(BUILD_MIXED, marks=pytest.mark.slow)], ids=["lists", "dict-list-tuple"]
)
def test_100k_deep_round_trips(build: str) -> None:
    n = 100_000
    got = _run_depth(build.format(n=n), with_paths=False)
    expected = _expected(n + 1, n + 2)
    assert got["flatten"] == ["ok"]
    for name, want in expected.items():
        assert got.get(name) == ["ok", want], (name, got.get(name))
    assert got["repr_len"][0] == "ok"


def test_100k_deep_key_paths() -> None:
    # One leaf 100,001 levels down: its key path has 100,001 entries.  Building it must not
    # need a path per node (quadratic: ~40 GB here); the subprocess is capped at 2 GB.
    n = 100_000
    got = _run_depth(BUILD_LIST.format(n=n), with_paths=True)
    assert got["paths"] == ["ok", [n + 1]]
    assert got["treedef_paths"] == ["ok", [n + 1]]


@pytest.mark.slow
def test_1m_deep_list_flattens_or_raises_recursion_error_never_crashes() -> None:
    n = 1_000_000
    # (repr is checked at 100,000 levels; at 1,000,000 it is only slow, not unsafe)
    got = _run_depth(BUILD_LIST.format(n=n), with_paths=True, with_repr=False, timeout=600)
    if got["flatten"] == ["RecursionError"]:
        return
    expected = _expected(n + 1, n + 2)
    expected["paths"] = [n + 1]
    expected["treedef_paths"] = [n + 1]
    for name, want in expected.items():
        # each operation either works (with the right answer) or raises RecursionError
        assert got.get(name) in (["ok", want], ["RecursionError"]), (name, got.get(name))


def test_1m_deep_empty_list_chain() -> None:
    # the spec's construction, verbatim: x = [] ; for _ in range(10**6): x = [x]
    code = """
    import spruce.tree as st
    x = []
    for _ in range(10**6):
        x = [x]
    try:
        leaves, td = st.flatten(x)
        print("ok", len(leaves), td.num_nodes, td.num_leaves)
    except RecursionError:
        print("RecursionError")
    """
    proc = run_python(code, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() in ("ok 0 1000001 0", "RecursionError")


def test_deep_is_leaf_and_paths_in_process_moderate_depth() -> None:
    x: Any = "bottom"
    for _ in range(5000):
        x = {"k": [x]}
    seen = []
    leaves = st.leaves(x, is_leaf=lambda v: seen.append(1) or v == "bottom")
    assert leaves == ["bottom"]
    assert len(seen) == 10_001
    ((path, leaf),) = st.leaves_with_path(x)
    assert leaf == "bottom" and len(path) == 10_000
    assert st.keystr(path[:4]) == "['k'][0]['k'][0]"


def _spine(depth: int, bottom: Any) -> Any:
    """``[0, [1, [2, ... [depth - 1, bottom]]]]``: every nested node is its parent's last child."""
    x = bottom
    for i in reversed(range(depth)):
        x = [i, x]
    return x


@pytest.mark.parametrize("depth", [40, pytest.param(3000, marks=pytest.mark.slow)])
def test_walks_climb_out_of_last_child_spines_to_the_right_place(depth: int) -> None:
    # A walk that does not map keeps no frame for a node whose last child it enters, and climbs
    # out of such a spine straight to the nearest ancestor with items left: that ancestor's
    # later items, their depths and their key paths must be as if every level had been kept.
    tree = {"a": _spine(depth, "end"), "b": [_spine(depth, ("e", "f")), "z"], "c": "last"}
    s, z, e1 = st.SequenceKey(1), st.SequenceKey(0), st.SequenceKey(1)
    a, b, c = st.DictKey("a"), st.DictKey("b"), st.DictKey("c")
    want = (
        [((a,) + (s,) * i + (z,), i) for i in range(depth)]
        + [((a,) + (s,) * depth, "end")]
        + [((b, z) + (s,) * i + (z,), i) for i in range(depth)]
        + [((b, z) + (s,) * depth + (z,), "e"), ((b, z) + (s,) * depth + (e1,), "f")]
        + [((b, e1), "z"), ((c,), "last")]
    )
    assert st.leaves_with_path(tree) == want
    assert st.leaves(tree) == [leaf for _, leaf in want]
    assert list(st.iter(tree)) == [leaf for _, leaf in want]
    leaves, td = st.flatten(tree)
    assert leaves == [leaf for _, leaf in want]
    # nodes: 2 spines of depth lists, the tuple, b's list and the root; leaves: 2 * depth + 5
    assert td.num_leaves == len(want) and td.num_nodes == (2 * depth + 3) + (2 * depth + 5)
    rebuilt = st.unflatten(td, leaves)  # (== on 3,000-deep lists exceeds the recursion limit)
    assert st.flatten(rebuilt) == (leaves, td) and rebuilt["b"][1] == "z"
    assert st.structure(tree) == td
    pairs, td_paths = st.flatten_with_path(tree)
    assert pairs == want and td_paths == td
    # is_leaf with paths: a Walker from the root, its key stack checked at every leaf
    assert st.leaves_with_path(tree, lambda p, x: False, True) == want
    mapped = st.map_with_path(lambda p, x: len(p), tree)
    assert st.leaves(mapped) == [len(p) for p, _ in want]
    # a cut at the bottom of a spine, made by is_leaf, leaves the climb where it was
    cut = st.leaves(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert cut[-4:] == [depth - 1, ("e", "f"), "z", "last"]


def _pooled_frames_are_blank() -> bool:
    """(Compiled) every frame a finished walk left for the next one holds nothing, whichever
    kind of walk (map, key paths, several trees) used it last.  A function, so that no local
    variable of the test keeps a pooled frame list that a later walk fills."""
    from spruce._tree import _walker
    from spruce._tree._expand import EMPTY

    return all(
        fr.seq is EMPTY and fr.rseqs is EMPTY and fr.keys is EMPTY and fr.outs is EMPTY and fr.dat is None
        for frames in _walker._POOL
        for fr in frames
    )


@pytest.mark.slow
def test_deep_walks_keep_nothing_of_the_tree_after_they_end() -> None:
    # the frames a deep walk leaves for the next one hold no reference to the tree it walked
    class Leaf:
        pass

    def deep(leaf: Any) -> Any:
        x: Any = [leaf, {"a": 1}]
        for _ in range(5000):
            x = [x, (2,)]
        return x

    for walk in [
        st.leaves,
        st.flatten,
        st.structure,
        st.leaves_with_path,
        st.flatten_with_path,
        lambda t: st.map(lambda v: v, t),
        lambda t: st.map(lambda u, v: u, t, deep(3)),
        lambda t: st.map(lambda u, v, w: u, t, deep(3), deep(4)),
        lambda t: st.map_with_path(lambda p, v: v, t),
    ]:
        leaf = Leaf()
        ref = weakref.ref(leaf)
        tree = deep(leaf)
        out = walk(tree)
        assert len(st.leaves(tree)) == 5000 + 2
        del tree, out, leaf
        gc.collect()
        assert ref() is None, walk
        assert _pooled_frames_are_blank(), walk
    # a walk that stops at an error keeps nothing either, and the next walk is whole
    leaf = Leaf()
    ref = weakref.ref(leaf)
    bad = deep(leaf)
    with pytest.raises(ValueError):
        st.map(lambda u, v: u, bad, deep(3)[0])
    del bad, leaf
    gc.collect()
    assert ref() is None
    assert st.leaves(deep(7))[:3] == [7, 1, 2]


def test_deep_walks_keep_at_most_two_frame_lists() -> None:
    # a node's aux data whose __del__ runs deep walks, freed while a finished walk clears its
    # frames for the next one: the walks it starts return frames to the pool first
    from spruce._tree import _walker

    def chain(n: int) -> Any:
        x: Any = 1
        for _ in range(n):
            x = [x]
        return x

    walks_left = [3]

    class WalksWhenFreed:
        def __del__(self) -> None:
            if not walks_left[0]:
                return
            walks_left[0] -= 1
            first = [True]

            def f(x: Any) -> Any:
                if first[0]:
                    first[0] = False
                    assert st.leaves(chain(3000)) == [1]
                return x

            assert st.leaves(st.map(f, chain(3000))) == [1]

    class Fresh:
        def __init__(self, d: Any) -> None:
            self.d = d

    st.register_pytree_node(Fresh, lambda x: ([x.d], WalksWhenFreed()), lambda a, ch: Fresh(ch[0]))
    node: Any = 1
    for level in range(2000):
        node = Fresh(node) if level < 900 else [node]
    _walker._POOL.clear()
    out = st.map(lambda a: a + 1, node)
    assert walks_left == [0]
    assert len(_walker._POOL) <= 2
    assert st.leaves(out) == [2]


def test_shared_subtrees_are_not_cycles() -> None:
    shared = [1, {"a": 2}]
    tree = [shared, (shared, {"x": shared})]
    assert st.leaves(tree) == [1, 2, 1, 2, 1, 2]
    # a shared node appearing at many depths of a deep tree
    x: Any = "end"
    for _ in range(3000):
        x = [x, shared]
    leaves = st.leaves(x)
    assert leaves[0] == "end" and len(leaves) == 1 + 3000 * 2
    assert st.map(lambda v: v, x)[1] == shared


# -------------------------------------------------------------------------------- cycles

CYCLES_SCRIPT = """
import dataclasses, json
import spruce.tree as st

@dataclasses.dataclass
class Node:
    x: object
    y: object

st.register_dataclass(Node)

def make():
    a = []
    a.append(a)
    d = {}
    d["k"] = d
    t = ([1, None],)
    t[0][1] = t
    m = {"a": [1, (2, [])]}
    m["a"][1][1].append(m)
    n = Node(1, None)
    n.y = [n]
    deep_then_cycle = {"top": [0]}
    cur = deep_then_cycle["top"]
    for _ in range(3000):
        nxt = [0]
        cur.append(nxt)
        cur = nxt
    cur.append(deep_then_cycle)
    return {
        "list_self": a,
        "dict_self": d,
        "tuple_list_mix": t,
        "nested_mix": m,
        "dataclass": n,
        "deep_then_cycle": deep_then_cycle,
    }

ops = {
    "flatten": lambda t: st.flatten(t),
    "leaves": lambda t: st.leaves(t),
    "structure": lambda t: st.structure(t),
    "map": lambda t: st.map(lambda v: v, t),
    "flatten_with_path": lambda t: st.flatten_with_path(t),
    "iter": lambda t: list(st.iter(t)),
    "none_is_leaf": lambda t: st.flatten(t, none_is_leaf=True),
}
for case, tree in make().items():
    for op, f in ops.items():
        try:
            f(tree)
            row = [case, op, "no error", ""]
        except Exception as e:
            ok_type = isinstance(e, (ValueError, RecursionError))
            row = [case, op, type(e).__name__ if ok_type else "WRONG:" + type(e).__name__, str(e)]
        print(json.dumps(row), flush=True)
print(json.dumps(["done"]))
"""

CYCLE_PATHS = {
    "list_self": "[0]",
    "dict_self": "['k']",
    "tuple_list_mix": "[0][1]",
    "nested_mix": "['a'][1][1][0]",
    "dataclass": ".y[0]",
    "deep_then_cycle": "['top']" + "[1]" * 3001,
}


def _cycle_rows() -> list[list[str]]:
    proc = run_python(CYCLES_SCRIPT, timeout=300)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows[-1] == ["done"]
    return rows[:-1]


_ROWS: list[list[str]] | None = None


def _rows_for(case: str) -> list[list[str]]:
    global _ROWS
    if _ROWS is None:
        _ROWS = _cycle_rows()
    return [r for r in _ROWS if r[0] == case]


@pytest.mark.parametrize("case", list(CYCLE_PATHS))
def test_cycles_raise_naming_cycle_and_closing_path(case: str) -> None:
    rows = _rows_for(case)
    assert len(rows) == 7
    path = CYCLE_PATHS[case]
    for _, op, kind, msg in rows:
        assert kind in ("ValueError", "RecursionError") or kind.startswith("RecursionError"), (
            op,
            kind,
            msg[:300],
        )
        assert "cycle" in msg.lower(), (op, msg[:300])
        if case == "deep_then_cycle":
            # a 3,000-level path may be shortened in the message; its start must be there
            assert "['top'][1][1]" in msg, (op, msg[:300])
            assert len(msg) < 20_000, (op, len(msg))
        else:
            assert path in msg, (op, msg)
            # the path where the cycle first closes, not a path that went round it again
            assert path + path not in msg, (op, msg)


DEEP_ERRORS = """
N = 300_000
def chain(bottom):
    x = bottom
    for _ in range(N):
        x = [x]
    return x

def message(f):
    try:
        f()
    except ValueError as e:
        return str(e)
    return "no error"

bottom = [0]
cyclic = chain(bottom)
bottom.append(cyclic)  # the bottom list holds the root: the cycle closes N + 1 levels down
probe("cycle", lambda: message(lambda: st.leaves(cyclic)))
probe("mismatch", lambda: message(lambda: st.map(lambda a, b: a, chain([0]), chain([0, 1]))))
print(json.dumps(["done"]))
"""


@pytest.mark.slow
def test_errors_300k_levels_down_name_their_key_path_in_linear_time() -> None:
    # The error is made by walking the tree again to the node where the walk failed.  That walk
    # must make a key path only at the error (or for an is_leaf that takes paths): making one
    # for every node took time quadratic in the depth, over 2 minutes here against the probe's
    # 30 s alarm; linear, it takes a few seconds.
    proc = run_python(DEPTH_PRELUDE + DEEP_ERRORS, timeout=120)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    got = {row[0]: row[1:] for row in (json.loads(line) for line in proc.stdout.splitlines())}
    assert "done" in got, proc.stdout[-2000:]
    status, cycle = got["cycle"]
    assert status == "ok", got["cycle"]
    assert cycle.startswith("cycle in pytree: the list at key path [0][0][0]"), cycle[:300]
    assert "(300001 keys in all)" in cycle and cycle.count("[0]") > 20, cycle[:600]
    status, mismatch = got["mismatch"]
    assert status == "ok", got["mismatch"]
    assert mismatch.startswith("map: tree #2 (rest[0]) does not match at key path [0][0]"), mismatch[:300]
    assert "(300000 keys in all)" in mismatch, mismatch[:600]



THREAD_STACK_SCRIPT = """
import json, threading
import spruce.tree as st
from spruce._tree import _depth

def chain(depth, kind):
    # returns the chain and its node at depth 1000 (where a nested walk starts)
    t = 1.0
    nodes = []
    for i in range(depth):
        t = [t] if kind == "list" else {"k": [t, None]}
        nodes.append(t)
    return t, nodes[depth - 1000]

def walks(t, at_1000):
    leaves, td = st.flatten(t)
    same = lambda u: u is not t and st.flatten(u) == (leaves, td)  # == on the trees would recurse
    yield "flatten", len(leaves)
    yield "leaves", len(st.leaves(t))
    yield "structure", st.structure(t) == td
    yield "unflatten", same(st.unflatten(td, leaves))
    yield "map", same(st.map(lambda x: x, t))
    yield "map2", same(st.map(lambda x, y: x, t, t))
    yield "map3", same(st.map(lambda x, y, z: x, t, t, t))
    yield "flatten_with_path", len(st.flatten_with_path(t)[0][0][0])
    # a callback that walks again, 1,000 levels down: the nested walk's stack adds to the outer's
    seen = []
    is_leaf = lambda x: x is at_1000 and seen.append(len(st.leaves(x))) and False
    yield "nested", (len(st.leaves(t, is_leaf=is_leaf)), seen)

def run(stack_kib, nested):
    threading.stack_size(stack_kib * 1024)
    out = []
    def body():
        for kind in ("list", "dict"):
            t, at_1000 = chain(3000, kind)
            for name, value in walks(t, at_1000):
                if (name == "nested") == nested:
                    out.append([kind, name, value])
    th = threading.Thread(target=body)
    th.start()
    th.join()
    return out

print(json.dumps({"deep": _depth.DEEP, "compiled": _depth.COMPILED,
                  "single": run(512, False), "nested": run(1024, True)}))
"""


def test_deep_walks_fit_in_small_thread_stacks() -> None:
    # The first DEEP levels of a walk are C recursion in the compiled build (see _depth.DEEP):
    # any single walk must fit in a 512 KiB thread stack, and a walk started by a callback of
    # another walk in 1 MiB (CPython's own thread stacks are larger).  A C stack overflow kills
    # the interpreter, so this runs in a fresh one.
    proc = run_python(THREAD_STACK_SCRIPT, timeout=600)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    got = json.loads(proc.stdout)
    assert got["compiled"] == (not hasattr(st.flatten, "__code__"))
    assert got["deep"] == (1024 if got["compiled"] else 16)
    path_len = {"list": 3000, "dict": 6000}
    assert got["single"] == [
        [kind, name, value]
        for kind in ("list", "dict")
        for name, value in [
            ("flatten", 1),
            ("leaves", 1),
            ("structure", True),
            ("unflatten", True),
            ("map", True),
            ("map2", True),
            ("map3", True),
            ("flatten_with_path", path_len[kind]),
        ]
    ]
    assert got["nested"] == [["list", "nested", [1, [1]]], ["dict", "nested", [1, [1]]]]


NESTED_WALKS_SCRIPT = """
import json, threading
import spruce.tree as T
from spruce._tree import _depth

def chain(d, leaf):
    x = leaf
    for _ in range(d):
        x = [x]
    return x

a, b = chain(1000, 0), chain(1000, 1)
out = []

def g(k):
    return 0 if k == 0 else T.map(lambda x: g(k - 1), a)

try:
    out.append(T.leaves(g(200)) == [0])
except RecursionError:
    out.append("RecursionError")

def run():
    r = T.map(lambda x, y: T.map(lambda u, v: u + v, a, b), a, b)
    out.append(T.leaves(r) == [1] and T.structure(r) == T.structure(chain(2000, 0)))

threading.stack_size(512 * 1024)
t = threading.Thread(target=run)
t.start()
t.join()
print(json.dumps({"compiled": _depth.COMPILED, "out": out, "active": _depth.WALKS.active}))
"""


def test_walks_started_by_callbacks_do_not_overflow_the_c_stack() -> None:
    # Only the outermost walk recurses DEEP levels; a walk started from a callback while another
    # recurses gets NESTED_DEEP (Python's recursion limit cannot see the outer walk's C frames).
    # Before that rule, 30-45 nested maps over a 1,000-deep tree crashed the compiled build.
    proc = run_python(NESTED_WALKS_SCRIPT, timeout=600)
    assert proc.returncode == 0, f"interpreter died (rc={proc.returncode}): {proc.stderr[-2000:]}"
    got = json.loads(proc.stdout)
    first = [True] if got["compiled"] else [True, "RecursionError"]
    assert got["out"][0] in first
    assert got["out"][1:] == [True]
    assert got["active"] == 0  # every walk that began has ended (errors included)
