"""PyTreeDef: the structure of a pytree as a flat pre-order node table.

A PyTreeDef holds ``codes`` (one int per node, leaves included, in pre-order: see
``_kinds`` for the packing of kind and arity) and ``data`` (one entry per non-leaf node, in
the same order).  Equality is two list comparisons; unflatten, repr and every other operation
walk the table iteratively, so a PyTreeDef of any depth is safe to use.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Final, Generic, Iterable

from . import _spec
from ._depth import begin_walk, end_walk
from ._errors import changed_size, mismatch_detail, nodes_of, path_of, path_text
from ._expand import EMPTY, expand, match_children, ns_expand
from ._kindenum import PyTreeKind, of_kind
from ._kinds import CUSTOM, DEFAULTDICT, DICT, LEAF, MASK, NAMEDTUPLE, NONE, NUM_KINDS, SHIFT, TUPLE
from ._registry import view
from ._spec import node_data as _node_data
from ._spec import span
from ._text import short_repr
from ._treetext import _bad, _decode, encode_table, table_str
from ._typevars import S
from ._unflatten import _Plan, unflatten_plan, unflatten_steps, unflatten_table
from ._walker import Walker

_STATE_VERSION: Final = 1
_active: Final[set[tuple[int, int, int]]] = set()


def _enter(kind: int, a: object, b: object) -> bool:
    """Re-entrancy guard for repr/hash/eq of a PyTreeDef whose node data refers back to it.

    Keyed by thread, so two threads printing one PyTreeDef do not see each other; set
    operations are atomic under the GIL.
    """
    key = (threading.get_ident() * 4 + kind, id(a), id(b))
    if key in _active:
        return False
    _active.add(key)
    return True


def _leave(kind: int, a: object, b: object) -> None:
    _active.discard((threading.get_ident() * 4 + kind, id(a), id(b)))


class PyTreeDef(Generic[S]):
    """The structure of a pytree: everything but the leaves.

    Made by ``spruce.tree.flatten`` / ``structure``; immutable, hashable (when all node data is
    hashable), picklable.  ``repr`` is identical to jax.tree_util.PyTreeDef's for every node
    kind JAX has (``PyTreeDef({'a': *, 'b': [*, None]})``); deques and struct sequences print as
    ``deque([*, *], maxlen=2)`` and ``time.struct_time(tm_year=*, ...)``.

    Two structures are equal when they have the same nodes, node data (dict keys, aux data,
    namedtuple classes, deque maxlen, defaultdict factory) and ``none_is_leaf``, and their
    namespaces are the same or one of them is "" (as optree's).  Dicts compare by their sorted
    keys, so insertion order does not matter (unless made under ``dict_insertion_ordered``);
    OrderedDict key order does.

    It also has optree's PyTreeSpec surface (``type``, ``kind``, ``entries``, ``child``,
    ``is_prefix``, ``<=`` as prefix order, ``transform``, ``traverse``...; ``walk`` keeps JAX's
    meaning first).  Type checkers see it generic in its tree's type: ``flatten(params)`` gives a
    ``PyTreeDef[dict[str, Array]]`` whose ``unflatten`` returns that type (``spruce.typing``).
    """

    _codes: list[int]
    _data: list[Any]
    _num_leaves: int
    _none_is_leaf: bool
    _hash: int
    _hashed: bool
    _nodes: list[int] | None  # positions of the non-leaf codes; made on first unflatten
    _calls_out: bool  # unflatten runs code of the user's (registered or namedtuple nodes); ditto
    _plan: _Plan | None  # how unflatten builds it; made on the second unflatten
    _namespace: str  # the registration namespace it was made in ("" global)
    _namespaced: bool  # _namespace != ""

    def __init__(
        self, codes: list[int], data: list[Any], num_leaves: int, none_is_leaf: bool, namespace: str = ""
    ) -> None:
        self._codes = codes
        self._data = data
        self._num_leaves = num_leaves
        self._none_is_leaf = none_is_leaf
        self._hash = 0
        self._hashed = False
        self._nodes = None
        self._calls_out = False
        self._plan = None
        self._namespace = namespace
        self._namespaced = bool(namespace)

    def _make(self, codes: list[int], data: list[Any], num_leaves: int) -> PyTreeDef:
        """A structure of the given table with this one's none_is_leaf and namespace."""
        return PyTreeDef(codes, data, num_leaves, self._none_is_leaf, self._namespace)

    # -- sizes -----------------------------------------------------------------------------

    @property
    def num_leaves(self) -> int:
        """Number of leaves."""
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes, leaves included (as jax.tree_util: ``PyTreeDef(*)`` has 1)."""
        return len(self._codes)

    @property
    def none_is_leaf(self) -> bool:
        """Whether this structure was made with ``none_is_leaf=True``."""
        return self._none_is_leaf

    # -- unflatten / flatten_up_to ---------------------------------------------------------

    def unflatten(self, leaves: Iterable[Any]) -> S:
        """Build a pytree of this structure from ``leaves`` (any iterable, in leaf order).

        Raises:
          ValueError: the number of leaves differs from ``num_leaves`` (both counts are named).
        """
        if type(leaves) is list:
            items: list[Any] = leaves
            sized = True
        elif hasattr(type(leaves), "__len__"):
            sized = True
            items = list(leaves)
        else:
            # At most one leaf more than needed is taken, so an endless iterator also fails.
            sized = False
            items = list(itertools.islice(leaves, self._num_leaves + 1))
        if len(items) != self._num_leaves:
            if len(items) < self._num_leaves:
                given = f"{len(items)} were given"
                few = "too few"
            else:
                given = f"{len(items)} were given" if sized else "more were given"
                few = "too many"
            raise ValueError(
                f"unflatten: {few} leaves: the PyTreeDef has {self._num_leaves} leaves, but "
                f"{given} (structure: {short_repr(self, 200)})"
            )
        nodes = self._nodes
        first = nodes is None
        if nodes is None:
            codes = self._codes
            nodes = [i for i in range(len(codes)) if codes[i] != LEAF]
            for i in nodes:
                kind = codes[i] & MASK
                if kind == CUSTOM or kind == NAMEDTUPLE:
                    self._calls_out = True
                    break
            self._nodes = nodes
        if items is leaves and self._calls_out:
            # A copy (jax and optree copy the leaves into their own buffer too) when the build
            # runs the user's code: an unflatten function that changes the caller's list cannot
            # change the tree being built.  Trees of built-in nodes run none, and skip the copy.
            items = items[:]
        if first:
            # A PyTreeDef is often unflattened once (flatten, change the leaves, unflatten): the
            # first time walks the table; making a plan costs about one more unflatten, and
            # pays off from the second.
            built: S = unflatten_table(self._codes, self._data, nodes, items)  # S: the checker's type
            return built
        plan = self._plan
        if plan is None:
            plan = unflatten_plan(self._codes, self._data, self._num_leaves)
            self._plan = plan
        built = unflatten_steps(plan, items)
        return built

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The subtrees of ``tree`` at the leaf positions of this structure, in leaf order.

        ``tree`` must have this structure as a prefix (it may be deeper at the leaves).

        Raises:
          ValueError: ``tree`` does not match; the message names the key path of the first
            mismatch and both sides.
        """
        return flatten_up_to(self, tree, "flatten_up_to", "the tree", self._namespace)

    # -- structure queries -----------------------------------------------------------------

    def children(self) -> list[PyTreeDef]:
        """The structures of the root's children (empty for a leaf)."""
        codes = self._codes
        root = codes[0]
        if root == LEAF:
            return []
        out: list[PyTreeDef] = []
        i = 1
        di = 1
        for _ in range(root >> SHIFT):
            j, dj = span(codes, i, di)
            out.append(self._slice(i, j, di, dj))
            i = j
            di = dj
        return out

    def _slice(self, i: int, j: int, di: int, dj: int) -> PyTreeDef:
        sub = self._codes[i:j]
        leaves = 0
        for c in sub:
            if c == LEAF:
                leaves += 1
        return PyTreeDef(sub, self._data[di:dj], leaves, self._none_is_leaf, self._namespace)

    def node_data(self) -> Any:
        """``(type, data)`` of the root node, or None for a leaf, as jax.tree_util.

        data is None for tuple/list/None/namedtuple/struct sequences, the key list for dict
        (sorted), the key tuple for OrderedDict (in order), ``(default_factory, key tuple)`` for
        defaultdict, ``maxlen`` for deque, and the aux data for registered classes.
        """
        code = self._codes[0]
        if code == LEAF:
            return None
        return _node_data(code, self._data[0])

    def walk(self, *args: Any, **kwargs: Any) -> Any:
        """Fold this structure over leaves, children before parents.

        JAX's form, ``walk(f_node, f_leaf, leaves)`` (jax.tree_util.PyTreeDef.walk): each leaf
        becomes ``f_leaf(leaf)`` (the leaf itself if ``f_leaf`` is None), and each node
        ``f_node(results, data)``: ``results`` a tuple of what its children became, in order,
        and ``data`` the second item of ``node_data()`` for that node (None for tuples and
        lists, the key list for a dict, the aux data of a registered class...), except for
        namedtuples and struct sequences, whose class it is (as JAX's).

        optree's form, ``walk(leaves, f_node=None, f_leaf=None)`` (optree.PyTreeSpec.walk),
        chosen when the first argument is not callable: each node becomes ``f_node(node type,
        node data, results tuple)``, or the node rebuilt from the results when ``f_node`` is
        None.  Returns what the root became.  Iterative: any depth.

        Raises:
          ValueError: the number of leaves differs from ``num_leaves``.

        >>> from spruce.tree import structure
        >>> td = structure({'b': (0, 0), 'a': 0})
        >>> td.walk(lambda r, d: sum(r), lambda x: 10 * x, [1, 2, 3])
        60
        >>> td.walk(lambda r, d: (d, r), None, 'xyz')
        (['a', 'b'], ('x', (None, ('y', 'z'))))
        >>> td.walk([1, 2, 3], f_leaf=lambda x: -x)
        {'b': (-2, -3), 'a': -1}
        """
        if args and callable(args[0]) and len(args) == 3 and not kwargs:
            return _spec.walk_jax(self, args[0], args[1], self._leaves_for("walk", args[2]))
        f_node, f_leaf, leaves = _spec.optree_args("walk", args, kwargs)
        return _spec.walk_optree(self, self._leaves_for("walk", leaves), f_node, f_leaf)

    def traverse(
        self, leaves: Iterable[Any], f_node: Callable[[Any], Any] | None = None, f_leaf: Callable[[Any], Any] | None = None
    ) -> Any:
        """Rebuild the tree from ``leaves``, each leaf replaced by ``f_leaf(leaf)`` and each
        node by ``f_node(node)`` once rebuilt from its children (as optree.PyTreeSpec.traverse).

        >>> from spruce.tree import structure
        >>> structure([0, (0,)]).traverse([1, 2], lambda n: ('node', n), lambda x: x * 10)
        ('node', [10, ('node', (20,))])
        """
        return _spec.traverse(self, self._leaves_for("traverse", leaves), f_node, f_leaf)

    def _leaves_for(self, what: str, leaves: Iterable[Any]) -> list[Any]:
        n = self._num_leaves
        items = list(itertools.islice(leaves, n + 1))
        if len(items) != n:
            raise ValueError(
                f"{what}: {'too few' if len(items) < n else 'too many'} leaves: the PyTreeDef has {n} "
                f"leaves (structure: {short_repr(self, 200)})"
            )
        return items

    def compose(self, inner: PyTreeDef) -> PyTreeDef:
        """The structure made by replacing every leaf of this one with ``inner``.

        Raises:
          ValueError: the two were made with different ``none_is_leaf``.
        """
        _check_treedef(inner, "compose")
        if inner._none_is_leaf != self._none_is_leaf:
            raise ValueError("compose: both PyTreeDefs must have the same none_is_leaf")
        namespace = _spec.same_namespace(self, inner, "compose")
        codes: list[int] = []
        data: list[Any] = []
        di = 0
        for c in self._codes:
            if c == LEAF:
                codes.extend(inner._codes)
                data.extend(inner._data)
            else:
                codes.append(c)
                data.append(self._data[di])
                di += 1
        return PyTreeDef(codes, data, self._num_leaves * inner._num_leaves, self._none_is_leaf, namespace)

    def is_prefix_of(self, other: PyTreeDef, strict: bool = False) -> bool:
        """True if ``other`` can be obtained by replacing leaves of this structure with subtrees.

        Every structure is a prefix of itself unless ``strict``.  ``PyTreeDef(*)`` is a prefix
        of everything.
        """
        _check_treedef(other, "is_prefix_of")
        if self._none_is_leaf != other._none_is_leaf:
            return False
        a, b = self._codes, other._codes
        i = j = di = dj = 0
        n = len(a)
        while i < n:
            c = a[i]
            if c == LEAF:
                j, dj = span(b, j, dj)
                i += 1
                continue
            if j >= len(b) or b[j] != c or not _data_eq(self._data[di], other._data[dj]):
                return False
            i += 1
            j += 1
            di += 1
            dj += 1
        if strict:  # another structure: more nodes, or a 0-arity node where this has a leaf
            return len(a) != len(b) or a != b
        return True

    def is_suffix_of(self, other: PyTreeDef, strict: bool = False) -> bool:
        """True if ``other`` is a prefix of this structure (see ``is_prefix_of``)."""
        _check_treedef(other, "is_suffix_of")
        return other.is_prefix_of(self, strict)

    def paths(self) -> list[tuple[Any, ...]]:
        """The key paths of the leaves, in leaf order (as ``leaves_with_path`` would give)."""
        tree = self.unflatten([_Placeholder() for _ in range(self._num_leaves)])
        out: list[tuple[tuple[Any, ...], Any]] = []
        begin_walk()
        try:
            Walker(None, None, none_is_leaf=self._none_is_leaf, paths=True, leaves=out, kstack=[]).walk([tree], EMPTY, [None], 0)
        finally:
            end_walk()
        return [p for p, _ in out]

    def to_jax(self) -> Any:
        """The same structure as a ``jax.tree_util.PyTreeDef`` (imports JAX).

        Every node type spruce knows is a node in JAX too (spruce's registrations reach
        ``jax.tree_util``).  A structure made with ``none_is_leaf=True`` becomes one whose None
        positions are leaves (as ``jax.tree_util.tree_structure(tree, is_leaf=lambda x: x is
        None)`` gives).  The inverse is ``spruce.tree.from_jax``.

        Raises:
          ValueError: the structure holds a node type JAX has no node for (a deque, a struct
            sequence), so JAX's structure would have other leaves.

        >>> import jax
        >>> from spruce.tree import structure
        >>> structure({'a': 1, 'b': (2, None)}).to_jax() == jax.tree_util.tree_structure({'a': 1, 'b': (2, None)})
        True
        """
        import importlib

        tree_util = importlib.import_module("jax.tree_util")
        tree = self.unflatten([_Placeholder() for _ in range(self._num_leaves)])
        if self._none_is_leaf:
            out = tree_util.tree_structure(tree, is_leaf=_none_or_placeholder)
        else:
            out = tree_util.tree_structure(tree)
        # A node kind JAX does not have is a leaf there: the structure would not come back.
        if out.num_leaves != self._num_leaves or (not self._none_is_leaf and from_jax(out) != self):
            raise ValueError(
                f"to_jax: JAX sees another structure in the same tree ({out.num_leaves} leaves "
                f"where this one has {self._num_leaves}, or other nodes): it holds a node type "
                "that jax.tree_util does not know (a deque or a struct sequence such as "
                "time.struct_time are nodes in spruce, leaves in JAX)"
            )
        return out

    # -- dunder ----------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            if _is_jax_treedef(other):
                raise TypeError(
                    "a spruce PyTreeDef compared with a jax.tree_util.PyTreeDef: JAX's == answers "
                    "False for any other type, so the answer would depend on the order of the "
                    "operands; compare spruce.tree.from_jax(jax_treedef) == treedef, or "
                    "treedef.to_jax() == jax_treedef"
                )
            return False
        if self is other:
            return True
        if (
            self._num_leaves != other._num_leaves
            or self._none_is_leaf != other._none_is_leaf
            or self._codes != other._codes
        ):
            return False
        # Node data is compared with == (one C-level list comparison: identical entries, the
        # usual case with shared dict shapes and None for lists and tuples, cost no call); if
        # user aux data refers back to these very PyTreeDefs, Python's own recursion check
        # turns that into a RecursionError.
        if not bool(self._data == other._data):
            return False
        if self._namespaced and other._namespaced:  # (native bools: no cost when unused)
            return self._namespace == other._namespace
        return True

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        if self._hashed:
            return self._hash
        if not _enter(2, self, self):
            return 0  # node data refers back to this PyTreeDef
        try:
            h = hash((tuple(self._codes), tuple(self._data), self._none_is_leaf))
        finally:
            _leave(2, self, self)
        self._hash = h
        self._hashed = True
        return h

    def __repr__(self) -> str:
        if not _enter(3, self, self):
            return "PyTreeDef(...)"
        try:
            body = table_str(self._codes, self._data)
        finally:
            _leave(3, self, self)
        if self._namespace:
            body += f", namespace={self._namespace!r}"
        if self._none_is_leaf:
            return f"PyTreeDef({body}, none_is_leaf=True)"
        return f"PyTreeDef({body})"

    def __reduce__(self) -> Any:
        return (_treedef_from_state, (self.__getstate__(),))

    def __getstate__(self) -> Any:
        state = (_STATE_VERSION, tuple(self._codes), encode_table(self._codes, self._data), self._none_is_leaf)
        return state + (self._namespace,) if self._namespace else state

    def __copy__(self) -> PyTreeDef:
        return self

    def __deepcopy__(self, memo: Any) -> PyTreeDef:
        return self

    # -- optree's PyTreeSpec surface (see _spec) -------------------------------------------

    def __len__(self) -> int:
        """The number of leaves (optree's ``len(treespec)``)."""
        return self._num_leaves

    def __bool__(self) -> bool:  # always true, as JAX's (which has no len): not len() != 0
        return True

    @property
    def namespace(self) -> str:
        """The registration namespace the structure was made in ("" the global one): set when
        a node needed it (a registered class, a dict in insertion order), as optree's."""
        return self._namespace

    @property
    def num_children(self) -> int:
        """The number of children of the root (0 for a leaf)."""
        return self._codes[0] >> SHIFT

    @property
    def kind(self) -> PyTreeKind:
        """The root node's kind, a ``spruce.tree.PyTreeKind`` (optree's values)."""
        return of_kind(self._codes[0] & MASK)

    def entries(self) -> list[Any]:
        """The entries of the root's children (optree's): a dict's keys in the structure's
        order, a register_dataclass class's field names, else the positions 0..n-1.

        >>> from spruce.tree import structure
        >>> structure({'b': 1, 'a': (2,)}).entries(), structure([1, 2]).entries()
        (['a', 'b'], [0, 1])
        """
        return _spec.entries(self)

    def entry(self, index: int) -> Any:
        """``entries()[index]``; IndexError out of range."""
        return _spec.entries(self)[_spec.index(index, self.num_children, "entry")]

    def child(self, index: int) -> PyTreeDef:
        """``children()[index]``; IndexError out of range."""
        return self.children()[_spec.index(index, self.num_children, "child")]

    def is_leaf(self, *, strict: bool = True) -> bool:
        """True for ``PyTreeDef(*)``; with ``strict=False`` also for a node with no children
        (None, ``()``, ...), as optree's (``treedef_is_leaf`` is the latter, as JAX's)."""
        return len(self._codes) == 1 and (not strict or self._codes[0] == LEAF)

    def is_prefix(self, other: PyTreeDef, *, strict: bool = False) -> bool:
        """optree's name of ``is_prefix_of`` (ValueError for two different namespaces)."""
        _check_treedef(other, "is_prefix")
        _spec.same_namespace(self, other, "is_prefix")
        return self.is_prefix_of(other, strict)

    def is_suffix(self, other: PyTreeDef, *, strict: bool = False) -> bool:
        """optree's name of ``is_suffix_of`` (ValueError for two different namespaces)."""
        _check_treedef(other, "is_suffix")
        _spec.same_namespace(self, other, "is_suffix")
        return other.is_prefix_of(self, strict)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            raise _spec.order_error(other, "<")
        return self.is_prefix(other, strict=True)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            raise _spec.order_error(other, "<=")
        return self.is_prefix(other)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            raise _spec.order_error(other, ">")
        return other.is_prefix(self, strict=True)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, PyTreeDef):
            raise _spec.order_error(other, ">=")
        return other.is_prefix(self)

    def transform(
        self, f_node: Callable[[PyTreeDef], PyTreeDef] | None = None, f_leaf: Callable[[PyTreeDef], PyTreeDef] | None = None
    ) -> PyTreeDef:
        """A new structure: each leaf replaced by ``f_leaf(PyTreeDef(*))`` and each node by
        ``f_node(its one-level structure)`` (a structure with as many leaves as the node has
        children, which then stand for them), as optree.PyTreeSpec.transform.

        Raises:
          TypeError: a function returned something other than a PyTreeDef.
          ValueError: ``f_node`` returned a structure with another number of leaves.

        >>> from spruce.tree import structure
        >>> structure([1, (2, 3)]).transform(None, lambda leaf: structure((0, 0)))
        PyTreeDef([(*, *), ((*, *), (*, *))])
        """
        out: PyTreeDef = _spec.transform(self, f_node, f_leaf)
        return out

    def broadcast_to_common_suffix(self, other: PyTreeDef) -> PyTreeDef:
        """The smallest structure both this one and ``other`` are prefixes of (optree's).

        Raises:
          ValueError: at some place both have nodes, of another kind, arity or node data.

        >>> from spruce.tree import structure
        >>> structure([0, (0, 0)]).broadcast_to_common_suffix(structure([(0, 0), 0]))
        PyTreeDef([(*, *), (*, *)])
        """
        _check_treedef(other, "broadcast_to_common_suffix")
        out: PyTreeDef = _spec.broadcast_to_common_suffix(self, other)
        return out

    @property
    def type(self) -> Any:
        """The class of the root node, None for a leaf (optree's PyTreeSpec.type)."""
        return _spec.root_type(self)


def _check_treedef(x: object, what: str) -> None:
    if not isinstance(x, PyTreeDef):
        raise TypeError(f"{what}: expected a PyTreeDef, got {type(x).__name__}")


class _Placeholder:
    """A stand-in leaf used to rebuild a tree from a structure alone."""


def _none_or_placeholder(x: Any) -> bool:
    return x is None or isinstance(x, _Placeholder)


def _is_jax_treedef(x: object) -> bool:
    """True for a ``jax.tree_util.PyTreeDef`` (recognised by its class, without importing JAX)."""
    t = type(x)
    return t.__name__ == "PyTreeDef" and str(getattr(t, "__module__", "")).startswith("jaxlib")


def from_jax(treedef: Any) -> PyTreeDef:
    """The spruce ``PyTreeDef`` of the structure a ``jax.tree_util.PyTreeDef`` describes.

    Rebuilds a tree of stand-in leaves with JAX's ``treedef.unflatten`` and takes spruce's
    structure of it, so every node type both registries know (spruce's registrations reach JAX,
    and JAX's are nodes in spruce) maps to itself.  A JAX structure whose leaves sat where
    None was (made with an ``is_leaf`` that stops at None) has stand-ins there, so its
    positions are kept.  The inverse is ``PyTreeDef.to_jax()``.

    Raises:
      TypeError: ``treedef`` is not a ``jax.tree_util.PyTreeDef``.

    >>> import jax
    >>> from spruce.tree import from_jax, structure
    >>> from_jax(jax.tree_util.tree_structure({'a': 1, 'b': [2, 3]})) == structure({'a': 0, 'b': [0, 0]})
    True
    """
    if isinstance(treedef, PyTreeDef):
        return treedef
    if not _is_jax_treedef(treedef):
        raise TypeError(f"from_jax expects a jax.tree_util.PyTreeDef, got {short_repr(treedef)}")
    tree = treedef.unflatten([_Placeholder() for _ in range(treedef.num_leaves)])
    codes: list[int] = []
    data: list[Any] = []
    leaves: list[Any] = []
    begin_walk()
    try:
        Walker(None, None, none_is_leaf=False, table=True, leaves=leaves, codes=codes, data=data).walk([tree], EMPTY, [None], 0)
    finally:
        end_walk()
    return PyTreeDef(codes, data, len(leaves), False)


def _data_eq(a: Any, b: Any) -> bool:
    if a is b:
        return True
    return bool(a == b)


def flatten_up_to(td: PyTreeDef, tree: Any, what: str, which: str, namespace: str = "") -> list[Any]:
    """Subtrees of ``tree`` at the leaves of ``td`` (nodes read in ``namespace``); a clear
    ValueError on mismatch."""
    codes = td._codes
    data = td._data
    none_is_leaf = td._none_is_leaf
    ns = view(namespace or td._namespace)
    out: list[Any] = []
    seq: list[Any] = [tree]
    pos = 0
    n = 1
    st_seq: list[list[Any]] = []
    st_pos: list[int] = []
    di = 0
    st_n: list[int] = []
    for c in codes:
        while pos >= n:
            seq = st_seq.pop()
            pos = st_pos.pop()
            n = st_n.pop()
        if pos >= len(seq):
            raise changed_size(seq, n)
        x = seq[pos]
        pos += 1
        if c == LEAF:
            out.append(x)
            continue
        d = data[di]
        di += 1
        if c & MASK == DICT or c & MASK == DEFAULTDICT:  # by key: a structure's order need not be the tree's
            found = match_children(c, d, x, none_is_leaf)
            ycode, ydata, ych = (c, d, found) if found is not None else expand(x, none_is_leaf)
        else:
            ycode, ydata, ych = expand(x, none_is_leaf) if ns is None else ns_expand(x, none_is_leaf, ns)
        if ycode != c or not _data_eq(d, ydata):
            nodes = nodes_of(st_seq, st_pos) + [x]
            positions = st_pos + [pos]
            path = path_of(nodes, positions, none_is_leaf, ns)
            raise ValueError(
                f"{what}: {which} does not match the structure at key path {path_text(path)}: "
                f"{mismatch_detail(c, d, ycode, ydata, x)}"
            )
        if c >> SHIFT == 0:
            continue
        st_seq.append(seq)
        st_pos.append(pos)
        st_n.append(n)
        seq = ych
        pos = 0
        n = len(ych)
    return out


def _treedef_from_state(state: Any) -> PyTreeDef:
    """Rebuild a pickled PyTreeDef, validating every part of the state."""
    if not (isinstance(state, tuple) and (len(state) == 4 or (len(state) == 5 and type(state[4]) is str))):
        raise _bad("expected a 4-tuple (version, codes, data, none_is_leaf), or that and a namespace")
    version, codes_in, data_in, none_is_leaf = state[:4]
    if version != _STATE_VERSION:
        raise _bad(f"unknown version {short_repr(version)}")
    if not isinstance(codes_in, tuple) or not isinstance(data_in, tuple) or type(none_is_leaf) is not bool:
        raise _bad("codes and data must be tuples and none_is_leaf a bool")
    if not codes_in:
        raise _bad("no nodes")
    codes: list[int] = []
    data: list[Any] = []
    need = 1
    leaves = 0
    di = 0
    for i, c in enumerate(codes_in):
        if type(c) is not int or c < 0:
            raise _bad(f"node {i} has code {short_repr(c)}, not a non-negative int")
        if need <= 0:
            raise _bad(f"nodes after the end of the tree (node {i})")
        kind = c & MASK
        arity = c >> SHIFT
        if kind >= NUM_KINDS or (kind == LEAF and c != LEAF):
            raise _bad(f"node {i} has an invalid code {c}")
        need += arity - 1
        codes.append(c)
        if kind == LEAF:
            leaves += 1
            continue
        if kind == NONE and none_is_leaf:
            raise _bad("a None node in a structure made with none_is_leaf=True")
        if di >= len(data_in):
            raise _bad("fewer node data entries than nodes")
        data.append(_decode(kind, arity, data_in[di], state[4] if len(state) == 5 else ""))
        di += 1
    if need != 0:
        raise _bad("the node table is truncated")
    if di != len(data_in):
        raise _bad("more node data entries than nodes")
    return PyTreeDef(codes, data, leaves, none_is_leaf, state[4] if len(state) == 5 else "")


# ---------------------------------------------------------------------------------------------
# Module-level helpers of jax.tree_util.


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    """The structure of a tuple whose children have the given structures (jax.tree_util).

    Raises:
      TypeError: an element is not a PyTreeDef.
      ValueError: the structures disagree on ``none_is_leaf``.
    """
    tds = list(treedefs)
    codes: list[int] = [(len(tds) << SHIFT) | TUPLE]
    data: list[Any] = [None]
    leaves = 0
    nil: bool | None = None
    namespace = ""
    for td in tds:
        if not isinstance(td, PyTreeDef):
            raise TypeError(f"treedef_tuple: expected PyTreeDefs, got {type(td).__name__}")
        if nil is not None and td._none_is_leaf != nil:
            raise ValueError("treedef_tuple: the PyTreeDefs disagree on none_is_leaf")
        nil = td._none_is_leaf
        if td._namespace and namespace and td._namespace != namespace:
            raise ValueError(f"treedef_tuple: the PyTreeDefs have different namespaces, {namespace!r} and {td._namespace!r}")
        namespace = namespace or td._namespace
        codes.extend(td._codes)
        data.extend(td._data)
        leaves += td._num_leaves
    return PyTreeDef(codes, data, leaves, bool(nil), namespace)


def unflatten(treedef: Any, leaves: Iterable[Any]) -> Any:
    """Build a pytree of structure ``treedef`` (a PyTreeDef; any object with an ``unflatten``
    method, such as a jax PyTreeDef, is asked to do it) from ``leaves`` (any iterable), as
    jax.tree_util.tree_unflatten; same as ``treedef.unflatten(leaves)``.

    Raises:
      ValueError: wrong number of leaves (both counts are named).
      TypeError: ``treedef`` is not a PyTreeDef and has no ``unflatten`` method.

    >>> from spruce.tree import flatten, unflatten
    >>> leaves, treedef = flatten({'b': 1, 'a': 2})
    >>> unflatten(treedef, [10, 20])
    {'b': 20, 'a': 10}
    """
    # Part of the engine, not a Python wrapper around the method: a Python frame per call is a
    # measurable part of unflattening a small tree (docs/performance.md, "Unflatten").
    if isinstance(treedef, PyTreeDef):
        td: PyTreeDef = treedef
        return td.unflatten(leaves)
    method = getattr(treedef, "unflatten", None)
    if not callable(method):
        raise TypeError(f"unflatten expects a PyTreeDef as its first argument, got {short_repr(treedef)}")
    return method(leaves)


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """``treedef.children()`` (jax.tree_util)."""
    _check_treedef(treedef, "treedef_children")
    return treedef.children()


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True if the structure has a single node (a leaf, or an empty container), as jax.tree_util."""
    _check_treedef(treedef, "treedef_is_leaf")
    return treedef.num_nodes == 1
