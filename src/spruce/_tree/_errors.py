"""Error messages that say where (the key path) and what (both sides).

Only error paths come here, so nothing in this module is performance sensitive.  Walkers keep
the objects and positions of the nodes they are inside (their frame stack); the key path is
rebuilt from that stack only when an error has to be reported.
"""

from __future__ import annotations

from typing import Any, Final

from ._keys import keystr
from ._registry import (
    CUSTOM,
    DEFAULTDICT,
    DEQUE,
    DICT,
    LEAF,
    LIST,
    MASK,
    NAMEDTUPLE,
    NONE,
    ORDEREDDICT,
    SHIFT,
    STRUCTSEQ,
    TUPLE,
    CustomData,
    DictData,
    expand,
    expand_with_keys,
    qualified_name,
)

MAX_KEYS_SHOWN: Final = 8
MAX_REPR: Final = 120


def short_repr(x: Any, limit: int = MAX_REPR) -> str:
    try:
        s = repr(x)
    except Exception as e:  # a broken __repr__ must not hide the real error
        s = f"<{type(x).__name__} object (repr failed: {type(e).__name__})>"
    return s if len(s) <= limit else s[: limit - 3] + "..."


def keys_text(keys: Any) -> str:
    ks = list(keys)
    shown = ", ".join(short_repr(k, 40) for k in ks[:MAX_KEYS_SHOWN])
    if len(ks) > MAX_KEYS_SHOWN:
        shown += f", ... ({len(ks) - MAX_KEYS_SHOWN} more)"
    return "[" + shown + "]"


def child_key(node: Any, index: int, none_is_leaf: bool) -> Any:
    """The key entry of child ``index`` of ``node`` (error paths only; -1: not known)."""
    if index < 0:
        return "[<unknown child>]"
    try:
        keys = expand_with_keys(node, none_is_leaf)[3]
        return keys[index]
    except Exception:
        return f"[<child {index}>]"


def path_of(nodes: list[Any], positions: list[int], none_is_leaf: bool) -> tuple[Any, ...]:
    """Key path of ``nodes[-1]`` from a walker's frame stack.

    ``nodes[i]`` is the node entered at depth i (``nodes[0]`` the root) and ``positions[i]`` is
    one past its index among its parent's children (``positions[0]`` is ignored).
    """
    path = []
    for i in range(1, len(nodes)):
        path.append(child_key(nodes[i - 1], positions[i] - 1, none_is_leaf))
    return tuple(path)


MAX_PATH_TEXT: Final = 240


def path_text(path: tuple[Any, ...]) -> str:
    """``keystr`` of a path, shortened in the middle when long (deep trees)."""
    if not path:
        return "<root>"
    s = keystr(path)
    if len(s) <= MAX_PATH_TEXT:
        return s
    return f"{s[:80]}...({len(path)} keys in all)...{s[-140:]}"


def _type_name(t: Any) -> str:
    return str(getattr(t, "__name__", t))


def describe(code: int, data: Any, x: Any, other_type: Any = None) -> str:
    """Human description of one node (or leaf) for mismatch messages."""
    kind = code & MASK
    n = code >> SHIFT
    if kind == LEAF:
        return f"a leaf of type {type(x).__name__}" if x is not None else "a leaf (None)"
    if kind == NONE:
        return "None"
    if kind == TUPLE:
        return f"a tuple of length {n}"
    if kind == LIST:
        return f"a list of length {n}"
    if kind == DEQUE:
        return f"a deque of length {n} (maxlen={data!r})"
    if kind == DICT or kind == ORDEREDDICT or kind == DEFAULTDICT:
        dd: DictData = data
        label = {DICT: "a dict", ORDEREDDICT: "an OrderedDict", DEFAULTDICT: "a defaultdict"}[kind]
        extra = f" (default_factory={short_repr(dd.factory, 60)})" if kind == DEFAULTDICT else ""
        return f"{label} with keys {keys_text(dd.keys)}{extra}"
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        return f"a {'namedtuple' if kind == NAMEDTUPLE else 'struct sequence'} {_named(data, other_type)}"
    if kind == CUSTOM:
        cd: CustomData = data
        return (
            f"a {_named(cd.info.nodetype, other_type)} node with {n} children and node data "
            f"{short_repr(cd.aux_text())}"
        )
    return f"a node of code {code}"


def _named(t: Any, other: Any) -> str:
    if other is not None and other is not t and _type_name(other) == _type_name(t):
        return f"{_type_name(t)} ({qualified_name(t)}; distinct classes with the same name)"
    return _type_name(t)


def _node_type(code: int, data: Any) -> Any:
    kind = code & MASK
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        return data
    if kind == CUSTOM:
        return data.info.nodetype
    return None


def mismatch_detail(code: int, data: Any, ycode: int, ydata: Any, y: Any) -> str:
    """What differs between an expected node (code, data) and the node ``y`` found."""
    t1 = _node_type(code, data)
    t2 = _node_type(ycode, ydata)
    kind, ykind = code & MASK, ycode & MASK
    expected = describe(code, data, None, t2)
    got = describe(ycode, ydata, y, t1)
    if ykind == LEAF and kind != LEAF:
        got = f"a leaf of type {qualified_name(type(y))}"
    msg = f"expected {expected}, got {got}"
    if kind == ykind and kind in (DICT, ORDEREDDICT, DEFAULTDICT):
        a: DictData = data
        b: DictData = ydata
        a_keys = set(a.keys)
        b_keys = set(b.keys)
        missing = [k for k in a.keys if k not in b_keys]
        extra = [k for k in b.keys if k not in a_keys]
        if missing:
            msg += f"; missing key(s) {keys_text(missing)}"
        if extra:
            msg += f"; extra key(s) {keys_text(extra)}"
        if not missing and not extra and a.keys != b.keys:
            msg += "; the same keys in a different order"
    return msg


def mismatch_error(
    what: str,
    nodes: list[Any],
    positions: list[int],
    none_is_leaf: bool,
    code: int,
    data: Any,
    y: Any,
    which: str,
) -> ValueError:
    """A ValueError for a structure mismatch found while walking ``nodes``' frame stack."""
    ycode, ydata, _ = expand(y, none_is_leaf)
    path = path_of(nodes, positions, none_is_leaf)
    detail = mismatch_detail(code, data, ycode, ydata, y)
    return ValueError(f"{what}: {which} does not match at key path {path_text(path)}: {detail}")


def positions_by_identity(nodes: list[Any], none_is_leaf: bool) -> list[int]:
    """The positions ``path_of`` takes for a root-to-node path of which only the nodes are known
    (the uncompiled map's recursion keeps its ancestors, not their indices): each node is looked
    up by identity among its parent's children.  A node that is twice among its siblings gets
    the first position, which names the same object; one not found (a flatten function that
    makes new children on every call) gets position 0, which ``child_key`` shows as unknown.
    """
    positions = [0]
    for i in range(1, len(nodes)):
        try:
            children = expand(nodes[i - 1], none_is_leaf)[2]
        except Exception:
            children = []
        node = nodes[i]
        at = 0  # not found: child_key shows it as unknown
        for j in range(len(children)):
            if children[j] is node:
                at = j + 1
                break
        positions.append(at)
    return positions


def cycle_error_below(
    ancestors: list[Any], base: int, nodes: list[Any], positions: list[int], none_is_leaf: bool
) -> ValueError:
    """``cycle_error`` for a walk of a subtree whose root ``nodes[0]`` is at depth ``base``,
    below ``ancestors[:base]`` (root first): the uncompiled map's handoff from its recursion."""
    full = ancestors[:base] + nodes
    return cycle_error(full, positions_by_identity(full[: base + 1], none_is_leaf) + positions[1:], none_is_leaf)


def cycle_error(nodes: list[Any], positions: list[int], none_is_leaf: bool) -> ValueError:
    """A ValueError for a container that contains itself; names where the cycle closes."""
    first: dict[int, int] = {}
    for j, node in enumerate(nodes):
        i = first.get(id(node))
        if i is not None:
            closing = path_of(nodes[: j + 1], positions[: j + 1], none_is_leaf)
            ancestor = path_of(nodes[: i + 1], positions[: i + 1], none_is_leaf)
            return ValueError(
                f"cycle in pytree: the {type(node).__name__} at key path {path_text(closing)} is "
                f"the same object as its ancestor at key path {path_text(ancestor)}, so the tree "
                "would be infinitely deep; a pytree must not contain itself"
            )
        first[id(node)] = j
    return ValueError("cycle in pytree: a container contains itself")


# ---------------------------------------------------------------------------------------------
# Depth.  The first DEEP levels of a walk are walked by recursion, which is the cheapest walk
# (no frame stack to grow and pop); past DEEP a walk carries on iteratively with an explicit
# frame stack, so depth costs heap, never C stack.  (unflatten never recurses: it is one pass
# over the node table.)  Compiled, DEEP is 1024, about the depth optree's C++ recursion allows
# (1,000 levels, beyond which it refuses the tree).  A recursive level takes 200-300 bytes of C
# stack, so one walk holds at most about 300 KiB of it: measured, a 3,000-deep walk runs in a
# thread whose whole stack is 224 KiB (flatten) to 320 KiB (two-tree map).  A callback that
# walks again adds its own walk on top.  tests/test_depth_cycles.py runs every walk in a
# 512 KiB thread and a nested walk in a 1 MiB one; CPython's default thread stacks are larger
# on the platforms it supports.  Uncompiled, each level is a Python frame counted against
# sys.getrecursionlimit(), so DEEP stays at 16.
#
# Below DEEP levels a walk does nothing else about depth.  From DEEP on, each time the depth
# reaches a power of two the walker marks the node entered there, and compares every node it
# enters below it with the mark (Brent's cycle detection on the root-to-node path): a container
# that contains itself with period L is caught within about 2·max(L, DEEP) levels, at the cost
# of one identity comparison per level.  The mark is dropped when the walk climbs above it, so
# a subtree shared by two branches is never mistaken for a cycle.


def _probe() -> None:
    """Compiled by mypyc or not: a compiled function has no ``__code__``."""


COMPILED: Final = not hasattr(_probe, "__code__")
DEEP: Final = 1024 if COMPILED else 16  # a power of two (see above)
NESTED_DEEP: Final = 16  # the recursion depth of a walk started while another one recurses


class _Walks:
    """How many walks are inside their recursive part right now (any thread).

    A callback (``f``, ``is_leaf``, a flatten function) can start a walk inside a walk, and
    Python's recursion limit does not see the C frames of the outer one.  So only a walk that
    starts while no other walk recurses gets DEEP levels of recursion; the others get
    NESTED_DEEP, and a thread's C stack never holds more than one deep recursion (plus
    nested walks of NESTED_DEEP levels each, bounded by Python's recursion limit through the
    callbacks between them).  A walk on another thread that happens to start meanwhile is only
    slower, never less safe.
    """

    active: int

    def __init__(self) -> None:
        self.active = 0


WALKS: Final = _Walks()


def begin_walk() -> int:
    """The recursion depth for a walk starting now; pair it with ``end_walk`` (try/finally)."""
    a = WALKS.active
    WALKS.active = a + 1
    return DEEP if a == 0 else NESTED_DEEP


def end_walk() -> None:
    WALKS.active -= 1
MAX_DEPTH: Final = 1 << 21  # 2,097,152 levels: a 1,000,000-deep list still flattens


def nodes_of(st_seq: list[list[Any]], st_pos: list[int]) -> list[Any]:
    """The nodes on a walker's current root-to-node path, from its frame stack."""
    return [st_seq[i][st_pos[i] - 1] for i in range(len(st_seq))]


def check_depth(depth: int) -> None:
    """RecursionError at MAX_DEPTH (called at powers of two only)."""
    if depth >= MAX_DEPTH:
        raise RecursionError(
            f"pytree is {MAX_DEPTH:,} levels deep or more; spruce walks trees iteratively, but "
            "refuses trees this deep (a registered flatten function that makes a new child on "
            "every call builds an endless tree)"
        )


def changed_size(seq: list[Any], n: int) -> RuntimeError:
    """A list shrank while it was being walked (a callback removed items from it)."""
    return RuntimeError(
        f"a list of the pytree changed size while it was being walked (it had {n} items, now "
        f"{len(seq)}); callbacks (f, is_leaf, flatten functions) must not remove items from "
        "the tree they are walking"
    )
