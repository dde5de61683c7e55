"""``tree_at``: an updated copy of a pytree with some nodes or leaves replaced.

How it stays proportional to the path.  ``where`` runs on a *lazy stand-in* of the tree: the
root is rebuilt one level deep (``flatten_one_level`` + the one-level PyTreeDef's
``unflatten``) with every child replaced by a place object, ``_Node`` for a child that is a
pytree node and ``_Leaf`` for a leaf (or a subtree ``is_leaf`` accepts).  A ``_Node`` expands
itself the same way the first time ``where`` looks into it (attribute or item access,
iteration, ``len``, a flatten by ``spruce.tree`` or ``jax.tree_util``) and forwards the
operation to its stand-in.  So only the nodes on the paths ``where`` walks are taken apart,
each once; the places ``where`` returns are place objects, one per position (two ``None`` s or
two references to one array are different places); and the copy is rebuilt from the places
up, unflattening only their ancestors with the children kept from the expansion.  Nothing else
of the tree is visited, and every step is linear in the places and the nodes expanded: places
are checked for nesting by walking up to the first ancestor already checked, and ancestors are
rebuilt level by level, deepest first (each place and node knows its depth).

Static fields of ``spruce.Module`` s are node data, not children, so the first stand-in shows
them as their values (``where`` may compute with them, e.g. ``m.layers[m.n - 1]``).  When
``where``'s result is not all places and the expanded nodes include Modules with static fields,
``where`` runs once more on a stand-in whose Module static fields are places too; if that gives
places, the static fields are replaced in the copy (checked to be hashable, as when a Module is
built).  So ``tree_at(lambda m: m.in_features, linear, 5)`` works, as in Equinox.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .. import tree as _tree
from ._module import _check_static, _ModuleMeta

_NO_VALUE: Any = object()

IsLeaf = Callable[[Any], bool] | None


class ReplaceCountError(ValueError, TypeError):
    """tree_at: ``replace`` does not have one value per place ``where`` selected.  A
    ValueError; also a TypeError, which is what Equinox raises for the same mistake."""


class _Leaf:
    """The place of a leaf (or of a subtree ``is_leaf`` accepts), or of a Module's static field
    (``index`` is then the field's name): opaque while ``where`` runs."""

    __slots__ = ("_ta_real", "_ta_parent", "_ta_index")

    def __init__(self, real: Any, parent: _Node | None, index: int | str) -> None:
        self._ta_real = real
        self._ta_parent = parent
        self._ta_index = index

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"tree_at: `where` read .{name} of a leaf of type {type(self._ta_real).__name__}; where "
            "runs on a stand-in whose leaves are placeholders and must only select places"
        )

    def __repr__(self) -> str:
        return f"<tree_at place: leaf {type(self._ta_real).__name__}>"


class _Call:
    """What the places of one run of ``where`` share."""

    __slots__ = ("is_leaf", "book", "static_places", "saw_static")

    def __init__(self, is_leaf: IsLeaf, static_places: bool) -> None:
        self.is_leaf = is_leaf
        self.book: dict[int, _Node] = {}  # id(stand-in) -> the place it stands in for
        self.static_places = static_places  # Module static fields are places in this run
        self.saw_static = False  # a Module with static fields was expanded


class _Expansion:
    """A node taken apart: its children, one-level PyTreeDef, places and stand-in."""

    __slots__ = ("children", "treedef", "places", "stand_in")

    def __init__(self, children: list[Any], treedef: Any, places: list[_Node | _Leaf], stand_in: Any) -> None:
        self.children = children
        self.treedef = treedef
        self.places = places
        self.stand_in = stand_in


class _Node:
    """The place of a pytree node; expands to a one-level stand-in when ``where`` looks in."""

    __slots__ = ("_ta_real", "_ta_parent", "_ta_index", "_ta_call", "_ta_exp", "_ta_depth")

    def __init__(self, real: Any, parent: _Node | None, index: int, call: _Call) -> None:
        self._ta_real = real
        self._ta_parent = parent
        self._ta_index = index
        self._ta_call = call
        self._ta_exp: _Expansion | None = None
        self._ta_depth: int = 0 if parent is None else parent._ta_depth + 1

    def _ta_expanded(self) -> _Expansion:
        exp = self._ta_exp
        if exp is None:
            children, treedef = _tree.flatten_one_level(self._ta_real)
            call = self._ta_call
            is_leaf = call.is_leaf
            is_node = _tree.is_tree_node
            places: list[_Node | _Leaf] = []
            append = places.append
            for i, c in enumerate(children):
                if (is_leaf is not None and is_leaf(c)) or not is_node(type(c)):
                    append(_Leaf(c, self, i))
                else:
                    append(_Node(c, self, i, call))
            exp = self._ta_exp = _Expansion(children, treedef, places, treedef.unflatten(places))
            static = _static_fields(self._ta_real)
            if static:
                call.saw_static = True
                if call.static_places:  # (the stand-in is a new Module: writing to it is safe)
                    d = exp.stand_in.__dict__
                    for name in static:
                        d[name] = _Leaf(d[name], self, name)
            # A stand-in with children is a new object, so `where` handing it back (a method
            # returning self) names this place.  A childless one may be a shared singleton.
            if places or self._ta_parent is None:
                call.book[id(exp.stand_in)] = self
        return exp

    def _ta_expand(self) -> Any:
        """The one-level stand-in: the node rebuilt with place objects as children."""
        return self._ta_expanded().stand_in

    # What `where` may do with a node: forwarded to the stand-in.
    def __getattr__(self, name: str) -> Any:
        return getattr(self._ta_expand(), name)

    def __getitem__(self, item: Any) -> Any:
        return self._ta_expand()[item]

    def __iter__(self) -> Iterator[Any]:
        it: Iterator[Any] = iter(self._ta_expand())
        return it

    def __reversed__(self) -> Iterator[Any]:
        it: Iterator[Any] = reversed(self._ta_expand())
        return it

    def __len__(self) -> int:
        return len(self._ta_expand())

    def __contains__(self, item: Any) -> bool:
        return item in self._ta_expand()

    def __bool__(self) -> bool:
        return bool(self._ta_expand())

    @property  # type: ignore[misc]  # isinstance(place, Linear) sees the node's class
    def __class__(self) -> type:
        return type(self._ta_real)

    def __repr__(self) -> str:
        return f"<tree_at place: {type(self._ta_real).__name__} node>"


def _static_fields(x: Any) -> tuple[str, ...]:
    """The static field names of a spruce Module (empty for anything else)."""
    if isinstance(type(x), _ModuleMeta):
        names: tuple[str, ...] = type(x)._spruce_fields.static
        return names
    return ()


def _node_flatten(node: _Node) -> tuple[list[Any], Any]:
    exp = node._ta_expanded()
    return list(exp.places), exp.treedef


def _node_flatten_with_keys(node: _Node) -> tuple[list[tuple[Any, Any]], Any]:
    exp = node._ta_expanded()
    keyed, _ = _tree.flatten_one_level_with_path(node._ta_real)
    return [(k, p) for (k, _), p in zip(keyed, exp.places)], exp.treedef


def _node_unflatten(treedef: Any, children: Any) -> Any:
    return treedef.unflatten(children)


# A place of a node flattens (in spruce.tree, and in jax.tree_util once JAX is imported) as the
# node it stands for, so `where=lambda m: spruce.tree.leaves(m)` selects every leaf.
_tree.register_pytree_with_keys(_Node, _node_flatten_with_keys, _node_unflatten, _node_flatten)


def tree_at(
    where: Callable[[Any], Any],
    tree: Any,
    replace: Any = _NO_VALUE,
    replace_fn: Callable[[Any], Any] | Any = _NO_VALUE,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """A copy of ``tree`` with the places that ``where`` selects replaced.

    Args:
      where: ``tree -> node`` or ``tree -> tuple/list of nodes``, selecting places by
        attribute / item access (``lambda m: m.layers[0].weight``,
        ``lambda m: (m.a, m.b[1])``), iteration, ``len``, methods of the nodes, or
        ``spruce.tree`` / ``jax.tree_util`` functions (``lambda m: spruce.tree.leaves(m)``).
        Selection is by position: two ``None`` s, two equal numbers or two references to one
        array at different places are different places.  A selected node may be a whole
        subtree.  A static field of a ``spruce.Module`` is a place too (then ``where`` runs
        twice: see the module docstring); other node data is not.
      tree: the pytree (Modules are rebuilt without running ``__init__``).
      replace: the new value (one place) or a sequence of new values, one per place; a new
        value may have any structure.
      replace_fn: instead of ``replace``, a function ``old -> new`` applied to each place (in
        the order ``where`` returned them).
      is_leaf: as in ``spruce.tree.flatten``: subtrees it accepts are places but are not looked
        into.

    Returns:
      A new pytree; untouched subtrees are shared with ``tree`` (not copied).

    Raises:
      ValueError: not exactly one of replace / replace_fn; ``where`` returned something that
        is not a place in the tree (e.g. node data of a registered class, or a newly computed
        value); a place selected twice or inside another selected place; ``replace`` length
        differs from the number of places.
      TypeError: ``where`` is not callable; a new value for a Module static field is not
        hashable.  Errors raised inside ``where`` (e.g. computing with a leaf, which is a
        placeholder there) propagate with a note; if ``where`` returned no place and raised (or
        again returned no place) on its second run with static fields as places, a ValueError
        says what each run did, chained from the second run's exception (or the first run's
        error).

    Cost: proportional to the nodes on the paths ``where`` walks (each is taken apart once,
    with one place object per child) and to their ancestors rebuilt, linear in the number of
    places; the rest of the tree is never visited (see the module docstring).  ``where`` sees the root rebuilt with place
    objects as children; a place of a node reports the node's class to ``isinstance``.

    Follows equinox.tree_at (static fields of Modules included), except that ``where`` runs on
    a lazily expanded stand-in rather than on a full copy of the tree.

    >>> tree_at(lambda t: t[1][0], [1, (2, 3)], 'x')
    [1, ('x', 3)]
    >>> tree_at(lambda t: (t[0], t[1]), [None, None], replace_fn=lambda _: 0)
    [0, 0]
    """
    if (replace is _NO_VALUE) == (replace_fn is _NO_VALUE):
        raise ValueError("tree_at: pass exactly one of replace=... and replace_fn=...")
    if not callable(where):
        raise TypeError(f"tree_at: where must be a function tree -> node(s), got {type(where).__name__}")

    try:
        places, single = _select(where, tree, is_leaf, static_places=False)
    except _RetryWithStatic as retry:
        first = retry.error
        try:
            places, single = _select(where, tree, is_leaf, static_places=True)
        except _WhereRaised as raised:  # e.g. it computes with a static field, a placeholder now
            e = raised.error
            raise ValueError(
                f"{first} (first run of where, with Module static fields as values); on the second "
                f"run, with Module static fields as places, where raised {type(e).__name__}: {e} -- "
                "a static field can be replaced only when where selects it without computing with it"
            ) from e
        except ValueError as second:
            raise ValueError(
                f"{first} (first run of where, with Module static fields as values); on the second "
                f"run, with Module static fields as places: {second}"
            ) from first

    index: dict[int, int] = {}  # id(place) -> position in where's result
    for k, p in enumerate(places):
        if id(p) in index:
            raise ValueError(f"tree_at: where selected the same place twice (items {index[id(p)]} and {k})")
        index[id(p)] = k
    # No place inside another: walk up from each place to the first ancestor already known to
    # have no selected place above it (so each node is walked once in all).
    clear: set[int] = set()
    for k, p in enumerate(places):
        path: list[int] = []
        a = p._ta_parent
        while a is not None and id(a) not in clear:
            if id(a) in index:
                raise ValueError(
                    f"tree_at: place {k} of where's result lies inside another selected place "
                    f"(place {index[id(a)]}); select either a node or its descendants, not both"
                )
            path.append(id(a))
            a = a._ta_parent
        clear.update(path)

    if replace is not _NO_VALUE:
        if single:
            new_values: list[Any] = [replace]
        else:
            try:
                new_values = list(replace)
            except TypeError:
                raise ReplaceCountError(
                    f"tree_at: where selected {len(places)} places, so replace must be a sequence "
                    f"of {len(places)} values, got {type(replace).__name__}"
                ) from None
            if len(new_values) != len(places):
                raise ReplaceCountError(
                    f"tree_at: where selected {len(places)} places but replace has {len(new_values)} values"
                )
    else:
        new_values = [replace_fn(p._ta_real) for p in places]

    return _rebuild(places, new_values)


class _WhereRaised(Exception):
    """``where`` raised ``error`` on the run with Module static fields as places."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _RetryWithStatic(Exception):
    """``where`` did not return places, and Module static fields were seen: try them as places."""

    def __init__(self, error: ValueError) -> None:
        super().__init__(str(error))
        self.error = error


def _select(where: Callable[[Any], Any], tree: Any, is_leaf: IsLeaf, static_places: bool) -> tuple[list[_Node | _Leaf], bool]:
    """Run ``where`` on a stand-in of ``tree``: ``(places, whether where returned one place)``."""
    root: _Node | _Leaf
    call = _Call(is_leaf, static_places)
    if (is_leaf is not None and is_leaf(tree)) or not _tree.is_tree_node(type(tree)):
        root = _Leaf(tree, None, 0)
        stand_in: Any = root
    else:
        root = _Node(tree, None, 0, call)
        stand_in = root._ta_expand()
    try:
        selected = where(stand_in)
    except Exception as e:
        if static_places:
            raise _WhereRaised(e) from None
        e.add_note(
            "(tree_at runs `where` on a stand-in of the tree whose leaves are placeholders: "
            "`where` must only select places by attribute / item access, not compute with leaves)"
        )
        raise

    def as_place(x: Any) -> _Node | _Leaf | None:
        t = type(x)
        if t is _Node or t is _Leaf:
            return x  # type: ignore[no-any-return]
        return call.book.get(id(x))  # a stand-in: the root's, or one a node's method returned

    def not_a_place(x: Any) -> Exception:
        error = ValueError(_not_a_place(x))
        return _RetryWithStatic(error) if call.saw_static and not static_places else error

    one = as_place(selected)
    if one is not None:
        return [one], True
    if isinstance(selected, (tuple, list)):
        places = []
        for p in selected:
            q = as_place(p)
            if q is None:
                raise not_a_place(p)
            places.append(q)
        return places, False
    raise not_a_place(selected)


def _rebuild(places: list[_Node | _Leaf], new_values: list[Any]) -> Any:
    """Put each new value at its place and rebuild the ancestors, deepest level first."""
    # levels[d]: id(node) -> (node, {child index or static field name: new value}) for the
    # nodes at depth d with a changed child
    levels: list[dict[int, tuple[_Node, dict[int | str, Any]]]] = []

    def put(parent: _Node, index: int | str, value: Any) -> None:
        d = parent._ta_depth
        while len(levels) <= d:
            levels.append({})
        entry = levels[d].get(id(parent))
        if entry is None:
            entry = levels[d][id(parent)] = (parent, {})
        entry[1][index] = value

    for p, v in zip(places, new_values):
        parent = p._ta_parent
        if parent is None:  # the root itself (then it is the only place)
            return v
        put(parent, p._ta_index, v)
    for d in range(len(levels) - 1, -1, -1):
        for node, changes in levels[d].values():
            exp = node._ta_expanded()
            children = list(exp.children)
            static: list[tuple[str, Any]] = []
            for i, v in changes.items():
                if isinstance(i, str):
                    static.append((i, v))
                else:
                    children[i] = v
            rebuilt = exp.treedef.unflatten(children)
            if static:  # a new Module from unflatten: its fields may be written before it is seen
                rd = rebuilt.__dict__
                for name, v in static:
                    rd[name] = v
                _check_static(rebuilt, type(rebuilt)._spruce_fields)
            parent = node._ta_parent
            if parent is None:
                return rebuilt
            put(parent, node._ta_index, rebuilt)
    raise AssertionError("unreachable: the root is at depth 0")


def _not_a_place(x: Any) -> str:
    return (
        f"tree_at: where returned an object of type {type(x).__name__} that is not a node or "
        "leaf of the tree. Select places by attribute / item access on the argument (e.g. "
        "lambda m: m.layers[0].weight, or a tuple of such); node data of registered classes "
        "(other than Module static fields) and values computed inside where cannot be replaced"
    )
