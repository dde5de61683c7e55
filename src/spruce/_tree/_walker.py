"""The one iterative walker: leaves, node table, key paths and n-tree map in one loop.

The public walks (``_traverse``) take the first levels of a tree by recursion, which is where
the speed is, and hand a subtree deeper than that (see ``_depth``) to a ``Walker``, whose levels
cost heap, never C stack; its result is spliced back where the recursion stopped.  Walks that
are rare or need everything at once (``map`` over three or more trees, ``map_with_path``,
``is_leaf`` taking paths, the lazy ``iter``) are a ``Walker`` from the root.

What one walk does is set when the walker is made:

- ``f`` given: a map.  ``f(x, *ys)`` (``f(path, x, *ys)`` with ``paths``) at each leaf, nodes
  rebuilt from their children's results; ``walk`` returns the results of the top items.
  Without ``f``, leaves (or ``(path, leaf)`` pairs with ``paths``) are appended to ``leaves``.
- ``table``: the node table (``codes``, ``data``) is appended to, as a PyTreeDef holds it.
- ``paths``: key paths are tracked; ``kstack`` holds the keys of the nodes entered below the
  root (a leaf's path is made only at the leaf, so depth costs O(depth) per leaf, not per node).
- ``nrest``: the number of further trees matched against the first (``map``); a mismatch raises
  ``MismatchFound``.
- ``lazy``: ``run`` returns after each leaf (``iter``), keeping its place.
- ``ns``: the registry view of a walk in a namespace or with dicts in insertion order (None
  for the plain global walk); every walk that has one is a ``Walker`` from the root.

Semantics every walk keeps: ``is_leaf`` is asked once about every object, before anything
else; a list is walked as it was when entered (items a callback appends are not visited, one
that shrinks raises ``changed_size``); the cycle check below raises ``CycleFound``, and the
caller walks again to name the cycle (``_errors.cycle_error``).

Cycle check (Brent's method on the root-to-node path): each time the depth reaches a power of
two the walker marks the node entered there, and compares every node it enters below it with
the mark, so a container that contains itself with period L is caught within about
2·max(L, start depth) levels at the cost of one identity comparison per level.  The mark is
dropped when the walk climbs above it, so a subtree shared by two branches is never mistaken
for a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final

from ._depth import COMPILED, CycleFound, MismatchFound, check_depth
from ._errors import changed_size
from ._expand import (
    EMPTY,
    build,
    expand,
    expand_with_keys,
    match_children,
    ns_expand,
    ns_expand_with_keys,
    ns_match_children,
)
from ._keys import SEQUENCE_KEYS, sequence_keys
from ._kinds import LEAF, LIST, MASK, SHIFT
from ._registry import Namespace

if TYPE_CHECKING:
    from mypy_extensions import i64  # native ints when compiled (see _traverse)

_NO_MARK: Final = object()


def leaf_path(kstack: list[Any], k: Any, depth: int) -> tuple[Any, ...]:
    """The key path of an item at ``depth`` whose key is ``k``, below the nodes of ``kstack``."""
    if depth == 0:
        return ()
    # Not through ``kstack`` when it holds fewer than two keys: a list that drops from 1 item
    # to 0 (or from 2 to 1) is reallocated, and from 0 by the C library's ``realloc``, for
    # every child of the root (measured: docs/performance.md, "Key paths").
    top = len(kstack)
    if top == 0:
        return (k,)
    if top == 1:
        return (kstack[0], k)
    kstack.append(k)
    path = tuple(kstack)
    kstack.pop()
    return path


class _Frame:
    """Where a walk was in a node's parent when it entered the node: the parent's items, their
    matches in the other trees and their keys, the position after the node and the parent's
    length, and (mapping) the parent's results so far, code and node data.

    A walk keeps one frame per level it has reached and reuses it for every later node at that
    level, so entering a node allocates nothing and compiled, the two positions stay native
    ints (a tuple per level cost an allocation and the boxing of both).  A finished walk leaves
    its frames to the next one (``_POOL``)."""

    seq: list[Any]
    pos: i64
    n: i64
    depth: i64
    rseqs: list[list[Any]]
    keys: list[Any]
    outs: list[Any]
    code: int
    dat: Any

    def __init__(self) -> None:
        self.seq = EMPTY
        self.pos = 0
        self.n = 0
        self.depth = 0
        self.rseqs = EMPTY
        self.keys = EMPTY
        self.outs = EMPTY
        self.code = 0
        self.dat = None


# Compiled: the frames of finished walks, kept for the next deep walk (at most two lists of at
# most _POOL_FRAMES frames each, cleared before they are kept, so they hold nothing of a tree).
# A deep walk that allocates a frame per level also feeds the garbage collector an object per
# level, and the allocation and deallocation were a large part of a level's instructions
# (docs/performance.md, "Deep trees and the walker").
_POOL: Final[list[list[_Frame]]] = []
_POOL_FRAMES: Final = 1 << 17  # 104 bytes a frame: 14 MiB a list, 28 MiB in all at most


class Walker:
    """One walk (see the module docstring).  Make it, then ``walk`` a list of items, or
    ``start`` and ``run`` for a lazy walk."""

    f: Callable[..., Any] | None
    is_leaf: Callable[..., Any] | None
    path_leaf: bool  # is_leaf(path, x)
    none_is_leaf: bool
    paths: bool
    table: bool
    nrest: int
    lazy: bool
    leaves: list[Any]
    codes: list[int]
    data: list[Any]
    kstack: list[Any]
    # the place of a lazy walk between two ``run`` calls
    _seq: list[Any]
    _rseqs: list[list[Any]]
    _keys: list[Any]
    _pos: i64
    _n: i64
    _depth: i64
    _frames: list[_Frame]  # compiled: one per level reached below the items walk() was given
    _stack: list[tuple[list[Any], i64, i64, i64, list[list[Any]], list[Any], list[Any], int, Any]]  # uncompiled
    _sp: i64  # frames in use
    _outs: list[Any]
    _code: int
    _dat: Any
    _mark: object
    _mark_depth: i64
    _kbase: i64  # the keys kstack held when the walk started, and holds again when it ends
    ns: Namespace | None

    def __init__(
        self,
        f: Callable[..., Any] | None,
        is_leaf: Callable[..., Any] | None,
        *,
        none_is_leaf: bool,
        path_leaf: bool = False,
        paths: bool = False,
        table: bool = False,
        nrest: int = 0,
        leaves: list[Any] = EMPTY,
        codes: list[int] = EMPTY,
        data: list[Any] = EMPTY,
        kstack: list[Any] = EMPTY,
        ns: Namespace | None = None,
    ) -> None:
        """The options of one walk, by name (see the module docstring): ``f`` maps (None:
        collect ``leaves``); ``path_leaf``: ``is_leaf(path, x)``; ``paths``: track key paths
        in ``kstack``; ``table``: append the node table to ``codes`` and ``data``; ``nrest``:
        the number of further trees a map matches.  The lists default to the shared empty list,
        which a walk whose options do not use them never touches."""
        self.f = f
        self.is_leaf = is_leaf
        self.path_leaf = path_leaf
        self.none_is_leaf = none_is_leaf
        self.paths = paths
        self.table = table
        self.nrest = nrest
        self.lazy = False
        self.leaves = leaves
        self.codes = codes
        self.data = data
        self.kstack = kstack
        self.ns = ns

    def walk(self, seq: list[Any], rseqs: list[list[Any]], keys: list[Any], depth: int) -> list[Any]:
        """Walk the items of ``seq`` (the children of one node, or ``[root]``), which sit at
        ``depth`` (the root at 0); ``rseqs`` are the matching children of the other trees and
        ``keys`` the items' key entries (when tracking paths).  Returns the map's results of
        the items (an empty list when not mapping)."""
        self.start(seq, rseqs, keys, depth)
        if COMPILED and _POOL:
            try:
                self._frames = _POOL.pop()
            except IndexError:  # another thread took it
                pass
        self.run()
        frames = self._frames
        if COMPILED and frames and len(frames) <= _POOL_FRAMES:
            # Only the fields this walk sets (``run``) are cleared: the others were cleared by
            # the walk that set them, before it gave the frames back.
            nrest = self.nrest
            paths = self.paths
            mapping = self.f is not None
            for fr in frames:
                if fr.seq is EMPTY:  # unused since it was last cleared, as are the ones after it
                    break
                fr.seq = EMPTY
                if nrest:
                    fr.rseqs = EMPTY
                if paths:
                    fr.keys = EMPTY
                if mapping:
                    fr.outs = EMPTY
                    fr.dat = None
            if len(_POOL) < 2:  # (after the clearing: a __del__ it runs may have walked)
                _POOL.append(frames)
        return self._outs

    def start(self, seq: list[Any], rseqs: list[list[Any]], keys: list[Any], depth: int) -> None:
        self._seq = seq
        self._rseqs = rseqs
        self._keys = keys
        self._pos = 0
        self._n = len(seq)
        self._depth = depth
        self._frames = []
        self._stack = []
        self._sp = 0
        self._outs = []
        self._code = LIST
        self._dat = None
        self._mark = _NO_MARK
        self._mark_depth = 0
        self._kbase = len(self.kstack)

    def run(self) -> bool:
        """Walk on; returns False when the walk is over, True after a leaf of a lazy walk."""
        f = self.f
        is_leaf = self.is_leaf
        path_leaf = self.path_leaf
        none_is_leaf = self.none_is_leaf
        paths = self.paths
        table = self.table
        mapping = f is not None
        nrest = self.nrest
        lazy = self.lazy
        leaves = self.leaves
        codes = self.codes
        data = self.data
        kstack = self.kstack
        ns = self.ns
        # One frame per node being walked whose parent has more to do: compiled, ``frames[:sp]``
        # (a _Frame per level, kept and reused); run by the interpreter, where making a _Frame
        # is a Python call, a tuple (its parent's seq, pos, n, depth, rseqs, keys, outs, code,
        # dat) per node in ``stack``.  A node entered as the last item of its parent, in a walk
        # that does not map, keeps no frame for the parent (a tail call): nothing is left to do
        # there, and climbing out of the node returns to the nearest ancestor that has items
        # left, at the depth its frame records.  So a chain (every node the last child of its
        # parent) is walked without a frame, as recursion walks it without a C frame's return.
        frames = self._frames
        stack = self._stack
        sp: i64 = self._sp
        built: Any = None
        seq = self._seq
        rseqs = self._rseqs
        keys = self._keys
        pos: i64 = self._pos
        n: i64 = self._n
        depth: i64 = self._depth  # of the items of seq
        outs = self._outs
        code = self._code  # of the node whose children are seq (map)
        dat: Any = self._dat
        mark = self._mark
        mark_depth: i64 = self._mark_depth
        leaf_type: object = None  # the type of the last leaf seen: most leaves share it
        ys: list[Any] = EMPTY
        while True:
            if pos < n:
                if pos >= len(seq):
                    raise changed_size(seq, n)
                x = seq[pos]
                if nrest:
                    ys = []
                    for r in rseqs:
                        if pos >= len(r):
                            raise changed_size(r, n)
                        ys.append(r[pos])
                k: Any = keys[pos] if paths else None
                pos += 1
                path: tuple[Any, ...] | None = None  # made when needed: at a leaf, or for is_leaf
                d: Any = None
                if is_leaf is not None and (
                    is_leaf(path := leaf_path(kstack, k, depth), x) if path_leaf else is_leaf(x)
                ):
                    xcode = LEAF
                elif type(x) is leaf_type:
                    xcode = LEAF
                else:
                    t = type(x)
                    if t is list:  # the commonest node, taken apart here rather than by ``expand``
                        ch: list[Any] = x
                        xcode = (len(ch) << SHIFT) | LIST
                        if paths:
                            ckeys = SEQUENCE_KEYS if len(ch) <= len(SEQUENCE_KEYS) else sequence_keys(len(ch))
                    elif ns is not None:
                        if paths:
                            xcode, d, ch, ckeys = ns_expand_with_keys(x, none_is_leaf, ns)
                        else:
                            xcode, d, ch = ns_expand(x, none_is_leaf, ns)
                    elif paths:
                        xcode, d, ch, ckeys = expand_with_keys(x, none_is_leaf)
                    else:
                        xcode, d, ch = expand(x, none_is_leaf)
                    if xcode == LEAF:
                        leaf_type = t
                if xcode == LEAF:
                    if table:
                        codes.append(LEAF)
                    if paths and path is None:
                        path = leaf_path(kstack, k, depth)
                    if mapping:
                        assert f is not None
                        if paths:
                            outs.append(f(path, x, *ys))
                        elif nrest:
                            outs.append(f(x, *ys))
                        else:
                            outs.append(f(x))
                    else:
                        leaves.append((path, x) if paths else x)
                        if lazy:
                            break
                    continue
                if table:
                    codes.append(xcode)
                    data.append(d)
                if nrest:
                    children: list[list[Any]] = []
                    for y in ys:
                        if ns is None:
                            ych = match_children(xcode, d, y, none_is_leaf)
                        else:
                            ych = ns_match_children(xcode, d, y, none_is_leaf, ns)
                        if ych is None:
                            raise MismatchFound()
                        children.append(ych)
                if not ch:
                    if mapping:
                        outs.append(build(xcode, d, []))
                    continue
                # enter x: its children are the items at depth + 1
                if x is mark:
                    raise CycleFound()
                if depth & (depth - 1) == 0:
                    mark = x
                    mark_depth = depth
                    check_depth(depth)
                if mapping or pos < n:
                    if COMPILED:
                        if sp < len(frames):
                            fr = frames[sp]
                        else:
                            fr = _Frame()
                            frames.append(fr)
                        fr.seq = seq
                        fr.pos = pos
                        fr.n = n
                        fr.depth = depth
                        if nrest:
                            fr.rseqs = rseqs
                        if paths:
                            fr.keys = keys
                        if mapping:
                            fr.outs = outs
                            fr.code = code
                            fr.dat = dat
                        sp += 1
                    else:
                        stack.append((seq, pos, n, depth, rseqs, keys, outs, code, dat))
                if nrest:
                    rseqs = children
                if paths:
                    keys = ckeys
                    if depth > 0:
                        kstack.append(k)
                if mapping:
                    outs = []
                    code = xcode
                    dat = d
                depth += 1
                seq = ch
                pos = 0
                n = len(ch)
            elif sp > 0 or stack:  # (one of the two is used: see above)
                if COMPILED:
                    if mapping:
                        built = outs if code & MASK == LIST else build(code, dat, outs)
                    sp -= 1
                    fr = frames[sp]
                    seq = fr.seq
                    pos = fr.pos
                    n = fr.n
                    depth = fr.depth
                    if nrest:
                        rseqs = fr.rseqs
                    if paths:
                        keys = fr.keys
                    if mapping:
                        outs = fr.outs
                        code = fr.code
                        dat = fr.dat
                        outs.append(built)
                elif mapping:
                    built = outs if code & MASK == LIST else build(code, dat, outs)
                    seq, pos, n, depth, rseqs, keys, outs, code, dat = stack.pop()
                    outs.append(built)
                else:
                    seq, pos, n, depth, rseqs, keys, outs, code, dat = stack.pop()
                # back among the items at ``depth``: the nodes entered below are left
                if depth <= mark_depth:
                    mark = _NO_MARK
                    mark_depth = 0
                if paths:
                    top: i64 = depth - 1 if depth > 0 else 0  # keys above the items at depth
                    while len(kstack) > top:
                        kstack.pop()
            else:
                if paths:  # the last nodes entered kept no frame to pop their keys with
                    kbase = self._kbase
                    while len(kstack) > kbase:
                        kstack.pop()
                self._outs = outs
                return False
        # a lazy walk stops after a leaf: keep its place
        self._seq = seq
        self._rseqs = rseqs
        self._keys = keys
        self._pos = pos
        self._n = n
        self._depth = depth
        self._outs = outs
        self._code = code
        self._dat = dat
        self._mark = mark
        self._mark_depth = mark_depth
        self._sp = sp
        return True
