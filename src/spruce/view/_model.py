"""The tree as the pictures see it: one ``Node`` per pytree node or leaf, in pre-order.

Built by an explicit stack (any depth), from the public engine only
(``spruce.tree.is_leaf`` / ``flatten_one_level_with_path``).  Nothing about a node may stop
the walk: a node whose flatten raises, an object whose ``repr`` or ``shape`` raises, a cycle,
become rows that say so.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .. import tree as _tree
from .._arrays import shape_and_itemsize
from ..io import TensorInfo, path_name

# Node kinds.
NODE = "node"  # a pytree node with children
ARRAY = "array"  # an array leaf (or a checkpoint header entry)
LEAF = "leaf"  # any other leaf (a Python scalar, a string, a function, ...)
NONE = "none"  # None: an empty node
SHARED = "shared"  # a node object already shown at another path
CYCLE = "cycle"  # a node that contains itself
ERROR = "error"  # a node whose flatten raised

_REPR_LIMIT = 80
_EXIT = -2


class Node:
    """One row of a picture.  ``key`` is the dotted-name component of the last key entry
    (``''`` for the root); ``index`` the position in pre-order; ``parent`` its parent's index."""

    __slots__ = (
        "index", "parent", "depth", "key", "kind", "type_name", "children",
        "leaves", "arrays", "params", "nbytes",
        "dtype", "shape", "obj", "text", "tied", "target",
    )

    def __init__(self, index: int, parent: int, depth: int, key: str) -> None:
        self.index = index
        self.parent = parent
        self.depth = depth
        self.key = key
        self.kind = LEAF
        self.type_name = ""
        self.children: list[int] = []
        self.leaves = 0
        self.arrays = 0
        self.params = 0
        self.nbytes = 0
        self.dtype = ""  # arrays: numpy's dtype name
        self.shape: tuple[int, ...] = ()
        self.obj: Any = None  # arrays: the array (None for a header entry: no data)
        self.text = ""  # leaves: a short repr; errors: the message
        self.tied: list[int] = []  # arrays: other nodes holding the same object
        self.target = -1  # SHARED / CYCLE: the node first showing the object


class Model:
    """The nodes of one tree (``nodes[0]`` is the root) and where they came from."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def name(self, index: int) -> str:
        """The dotted name of node ``index`` (``''`` for the root)."""
        parts: list[str] = []
        while index > 0:
            node = self.nodes[index]
            parts.append(node.key)
            index = node.parent
        return ".".join(reversed(parts))


def safe_repr(x: Any, limit: int = _REPR_LIMIT) -> str:
    """``repr(x)`` on one line, cut to ``limit`` characters; never raises."""
    try:
        text = repr(x)
    except Exception as e:  # a picture never fails on a user object
        return f"<repr raised {type(e).__name__}>"
    if not isinstance(text, str):
        return "<repr returned a non-str>"
    return shorten(" ".join(text.split()), limit)


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to at most ``limit`` characters (``…`` marks the cut)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def type_name(x: Any) -> str:
    try:
        return str(type(x).__name__)
    except Exception:  # a metaclass whose __name__ raises
        return "?"


_PLAIN = (bool, int, float, complex, str, bytes)


_DTYPE_NAMES: dict[Any, str] = {}


def _array_info(x: Any) -> tuple[str, tuple[int, ...], int] | None:
    """``(dtype name, shape, itemsize)`` of an array-like leaf, else None (never raises)."""
    try:
        shaped = shape_and_itemsize(x)
        if shaped is None:
            return None
        dtype = x.dtype
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            name = str(dtype)
            if len(_DTYPE_NAMES) < 256:
                _DTYPE_NAMES[dtype] = name
        return name, shaped[0], shaped[1]
    except Exception:  # a shape or dtype property that raises
        return None


def _key(entry: Any) -> str:
    """The dotted-name component of one key entry (``spruce.io.path_name``'s rule)."""
    if type(entry) is _tree.SequenceKey:
        return str(entry.idx)
    try:
        return path_name((entry,))
    except Exception:  # a key whose str raises
        return "?"


def build(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> Model:
    """Walk ``tree`` into a ``Model``; totals are counted per path, as ``spruce.summary`` does
    (a leaf or subtree reachable at two paths counts at both)."""
    nodes: list[Node] = []
    on_path: set[int] = set()  # ids of the nodes being walked (cycle check)
    seen: dict[int, int] = {}  # id of a node object -> its first Node
    arrays_seen: dict[int, int] = {}  # id of an array leaf -> its first Node
    keep: list[Any] = []  # every walked object stays alive, so ids are not reused
    # (parent, depth, key, object); parent _EXIT marks the end of the subtree of object id `depth`.
    stack: list[tuple[int, int, str, Any]] = [(-1, 0, "", tree)]
    while stack:
        parent, depth, key, x = stack.pop()
        if parent == _EXIT:
            on_path.discard(depth)
            continue
        n = Node(len(nodes), parent, depth, key)
        nodes.append(n)
        if parent >= 0:
            nodes[parent].children.append(n.index)
        keep.append(x)
        n.type_name = type_name(x)
        if x is None:
            n.kind = NONE
            continue
        try:
            chosen = isinstance(x, TensorInfo) or (is_leaf is not None and bool(is_leaf(x)))
            leafy = chosen or _tree.is_leaf(x)
        except Exception as e:  # a registry lookup or predicate that raises
            n.kind, n.text = ERROR, f"{type(e).__name__}: {safe_repr(e, 120)}"
            continue
        if leafy:
            # Nodes registered only with JAX are nodes here too: spruce.tree sees JAX's registry.
            _fill_leaf(n, x, arrays_seen, nodes)
            continue
        oid = id(x)
        if oid in on_path:
            n.kind, n.target = CYCLE, seen[oid]
            continue
        if oid in seen:
            n.kind, n.target = SHARED, seen[oid]
            continue
        try:
            children = _tree.flatten_one_level_with_path(x)[0]
        except Exception as e:  # a custom flatten that raises
            n.kind, n.text = ERROR, f"flatten raised {type(e).__name__}: {safe_repr(e, 120)}"
            continue
        n.kind = NODE
        seen[oid] = n.index
        on_path.add(oid)
        stack.append((_EXIT, oid, "", None))
        for k, child in reversed(children):
            stack.append((n.index, depth + 1, _key(k), child))
    _totals(nodes)
    return Model(nodes)


def _fill_leaf(n: Node, x: Any, arrays_seen: dict[int, int], nodes: list[Node]) -> None:
    if isinstance(x, TensorInfo):
        n.kind, n.dtype, n.shape = ARRAY, str(x.dtype), tuple(x.shape)
        n.type_name = "tensor"
        n.leaves, n.arrays, n.params, n.nbytes = 1, 1, int(x.size), int(x.nbytes)
        return
    info = _array_info(x)
    n.leaves = 1
    if info is None:
        n.kind, n.text = LEAF, safe_repr(x)
        return
    n.kind, n.obj = ARRAY, x
    n.dtype, n.shape, itemsize = info
    n.arrays = 1
    n.params = math.prod(n.shape)
    n.nbytes = n.params * itemsize
    first = arrays_seen.setdefault(id(x), n.index)
    if first != n.index:
        nodes[first].tied.append(n.index)
        n.tied.append(first)


def _totals(nodes: list[Node]) -> None:
    """Subtree totals, children before parents; a SHARED node counts what its target holds."""
    shared: dict[int, tuple[int, int, int, int]] = {}
    for _ in range(2):  # the second pass knows the totals of shared subtrees' targets
        for n in nodes:
            if n.kind in (NODE, NONE, CYCLE, ERROR, SHARED):
                n.leaves, n.arrays, n.params, n.nbytes = shared.get(n.index, (0, 0, 0, 0))
        for n in reversed(nodes):
            if n.parent >= 0:
                p = nodes[n.parent]
                p.leaves += n.leaves
                p.arrays += n.arrays
                p.params += n.params
                p.nbytes += n.nbytes
        for n in nodes:
            if n.kind == SHARED:
                t = nodes[n.target]
                shared[n.index] = (t.leaves, t.arrays, t.params, t.nbytes)
        if not shared:
            break
