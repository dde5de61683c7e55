"""The two unflatten algorithms of a PyTreeDef's node table: ``unflatten_table`` (one backward
pass over the nodes, for the first builds of a structure) and the plan (``unflatten_plan`` made
once per structure, ``unflatten_steps`` run per call: the steps a structure needs, with the runs
of leaves of each node as slices).  Neither recurses, so any depth is safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._expand import EMPTY, build, build_dict
from ._kinds import (
    CUSTOM,
    DICT,
    LEAF,
    LIST,
    MASK,
    MODE_DATACLASS,
    NONE,
    SHIFT,
)
from ._nodes import CustomData

if TYPE_CHECKING:
    from mypy_extensions import i64  # native ints when compiled (see _traverse)

# ---------------------------------------------------------------------------------------------
# Table walks.


def unflatten_table(codes: list[int], data: list[Any], nodes: list[int], leaves: list[Any]) -> Any:
    """Build the tree of a node table from exactly the right number of leaves.

    ``nodes`` are the positions of the non-leaf codes (so node t has node data ``data[t]``).
    One backward pass over them, children before parents, so any depth costs neither C stack
    nor recursion, and runs of leaves cost nothing to skip.  Built nodes wait on a stack (the
    nearest one in pre-order on top; the stack never shrinks, ``sp`` marks its top, so pushes
    and pops never reallocate it).  The leaves met since the last node are not pushed but kept
    pending as the slice ``leaves[lo:hi]``: a node whose children are all leaves takes them as
    one slice (a dict reads them in place, without one), and only leaves that belong to an
    ancestor are pushed, once each.
    """
    if not nodes:  # the root is a leaf
        return leaves[0]
    stack: list[Any] = []
    sp: i64 = 0
    hi: i64 = len(leaves)
    lo: i64 = hi
    after: i64 = len(codes)  # position of the node handled last (children before parents)
    t: i64 = len(nodes) - 1
    while t >= 0:
        p: i64 = nodes[t]
        lo -= after - p - 1  # the leaf codes between this node and that one
        after = p
        c = codes[p]
        k: i64 = c >> SHIFT
        pending: i64 = hi - lo
        if k <= pending:
            # pending leaves after this node's own belong to an ancestor: they go under it
            j: i64 = hi - 1
            while j >= lo + k:
                if sp < len(stack):
                    stack[sp] = leaves[j]
                else:
                    stack.append(leaves[j])
                sp += 1
                j -= 1
            # its own are leaves[lo:lo + k]: a dict reads them there, other nodes get a slice
            # (a None hole, common in optimizer states, gets nothing)
            if c == NONE:
                node: Any = None
            elif c & MASK == DICT:
                node = build_dict(data[t], leaves, lo)
            elif c & MASK == CUSTOM:
                cd: CustomData = data[t]  # typed first: attribute reads on Any are generic lookups
                info = cd.info
                if info.mode == MODE_DATACLASS:
                    node = info.build_dataclass(cd.aux, leaves, lo)
                else:
                    node = info.unflatten_node(cd.aux, leaves[lo : lo + k])
            else:
                ch = leaves[lo : lo + k]
                node = ch if c & MASK == LIST else build(c, data[t], ch)
        else:
            if pending == 0:
                m: i64 = sp - k
                if k == 1:
                    ch = [stack[m]]
                else:
                    ch = stack[m:sp]
                    ch.reverse()
            else:
                ch = leaves[lo:hi]
                m = sp - (k - pending)
                j = sp - 1
                while j >= m:
                    ch.append(stack[j])
                    j -= 1
            sp = m
            # a fresh list (a slice or made here): a list node is that list, as build gives
            node = ch if c & MASK == LIST else build(c, data[t], ch)
        hi = lo
        if sp < len(stack):
            stack[sp] = node
        else:
            stack.append(node)
        sp += 1
        t -= 1
    return stack[0]


# How unflatten makes one node (``_Step.op``): from leaves in a row, from the nodes built just
# before it, or from a per-child layout.
_DICT_AT: Final = 0  # a dict whose children are leaves[lo:lo + k], read in place
_DATACLASS_AT: Final = 1  # a register_dataclass node whose children are leaves[lo:lo + k]
_SLICE: Final = 2  # any other node whose children are leaves[lo:lo + k] (or which has none)
_WRAP: Final = 3  # one child, the node built last (a chain's level)
_NODES: Final = 4  # k children, all nodes, the first of them built last
_MIXED: Final = 5  # ``layout`` gives each child: a leaf's index, _BUILT or _HOLE
_BUILT: Final = -1  # in a layout: the next built node
_HOLE: Final = -2  # in a layout: a None node (no step of its own)


class _Step:
    """One node of a PyTreeDef as unflatten builds it; see ``unflatten_plan``."""

    op: i64
    code: int
    data: Any
    k: i64
    lo: i64
    layout: list[int]

    def __init__(self, op: i64, code: int, data: Any, k: i64, lo: i64, layout: list[int]) -> None:
        self.op = op
        self.code = code
        self.data = data
        self.k = k
        self.lo = lo
        self.layout = layout


class _Plan:
    """How to unflatten one PyTreeDef, made on its second unflatten (``unflatten_plan``).

    ``steps`` are its nodes in reverse pre-order, so every node comes after its children and
    right after its first child node; ``blank`` is a list of Nones as long as the deepest the
    stack of built nodes gets.
    """

    steps: list[_Step]
    blank: list[Any]

    def __init__(self, steps: list[_Step], blank: list[Any]) -> None:
        self.steps = steps
        self.blank = blank


def unflatten_plan(codes: list[int], data: list[Any], num_leaves: i64) -> _Plan:
    """The ``_Plan`` of a node table: one ``_Step`` per node, None nodes under a parent
    excepted (the parent puts None there itself).

    One backward pass over the table.  The leaves met since the last node are kept pending as
    the range ``lo:hi``: a node with at most that many children takes them all from there.
    Children that belong to a node further up wait on the stack ``entries`` (the nearest in
    pre-order on top; ``sp`` marks its top, so it never shrinks): a leaf's index, _BUILT for
    a node or _HOLE for a None node.
    """
    steps: list[_Step] = []
    entries: list[int] = []
    sp: i64 = 0
    built: i64 = 0  # _BUILT entries: the nodes unflatten holds on its own stack at that point
    most: i64 = 0
    hi: i64 = num_leaves
    lo: i64 = hi
    di: i64 = len(data)
    i: i64 = len(codes) - 1
    while i >= 0:
        c = codes[i]
        i -= 1
        if c == LEAF:
            lo -= 1
            continue
        di -= 1
        k: i64 = c >> SHIFT
        pending: i64 = hi - lo
        # pending leaves that are not this node's belong to an ancestor
        j: i64 = hi - 1
        while j >= lo + k:
            _put(entries, sp, j)
            sp += 1
            j -= 1
        hi = lo
        if c == NONE and i >= 0:  # a None node under a parent: its parent puts None there
            _put(entries, sp, _HOLE)
            sp += 1
            continue
        kind = c & MASK
        op: i64 = _SLICE
        layout: list[int] = EMPTY
        if k <= pending:
            if kind == DICT:
                op = _DICT_AT
            elif kind == CUSTOM:
                cd: CustomData = data[di]
                if cd.info.mode == MODE_DATACLASS:
                    op = _DATACLASS_AT
        else:
            # its children: the pending leaves, then the top k - pending entries
            m: i64 = sp - (k - pending)
            taken: i64 = 0
            j = m
            while j < sp:
                if entries[j] == _BUILT:
                    taken += 1
                j += 1
            if taken == k:
                op = _WRAP if k == 1 else _NODES
            else:
                op = _MIXED
                layout = [x for x in range(lo, lo + pending)]
                j = sp - 1
                while j >= m:
                    layout.append(entries[j])
                    j -= 1
            sp = m
            built -= taken
        steps.append(_Step(op, c, data[di], k, lo, layout))
        _put(entries, sp, _BUILT)
        sp += 1
        built += 1
        if built > most:
            most = built
    return _Plan(steps, [None] * (most + 1))


def _put(stack: list[int], sp: i64, x: int) -> None:
    """``stack[sp] = x``, growing the stack by one if it is full."""
    if sp < len(stack):
        stack[sp] = x
    else:
        stack.append(x)


def unflatten_steps(plan: _Plan, leaves: list[Any]) -> Any:
    """``unflatten_table`` by a plan (``unflatten_plan``).

    The steps come children before parents, so any depth costs neither C stack nor recursion.
    The node built last is kept in ``top``: a chain's next level wraps it without touching the
    stack.  Any other step first pushes it, so the stack holds, top first, the nodes built and
    not yet taken, the next node's first child on top.  The stack is allocated once at its
    full size (``sp`` marks its top).
    """
    steps = plan.steps
    if not steps:  # the root is a leaf
        return leaves[0]
    stack = plan.blank[:]
    sp: i64 = 0
    top: Any = None
    for s in steps:
        op = s.op
        if op == _WRAP:
            ch = [top]
            code = s.code
            top = ch if code & MASK == LIST else build(code, s.data, ch)
            continue
        stack[sp] = top
        sp += 1
        if op == _DICT_AT:
            top = build_dict(s.data, leaves, s.lo)
        elif op == _SLICE:
            lo = s.lo
            ch = leaves[lo : lo + s.k]
            code = s.code
            top = ch if code & MASK == LIST else build(code, s.data, ch)
        elif op == _DATACLASS_AT:
            cd: CustomData = s.data
            top = cd.info.build_dataclass(cd.aux, leaves, s.lo)
        else:
            if op == _NODES:
                m: i64 = sp - s.k
                ch = stack[m:sp]
                ch.reverse()
                sp = m
            else:
                ch = []
                for j in s.layout:
                    if j >= 0:
                        ch.append(leaves[j])
                    elif j == _BUILT:
                        sp -= 1
                        ch.append(stack[sp])
                    else:
                        ch.append(None)
            code = s.code
            top = ch if code & MASK == LIST else build(code, s.data, ch)
    return top
