"""``tree_at``: an updated copy of a pytree with some nodes or leaves replaced."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from . import tree as _tree

_NO_VALUE: Any = object()


class _Marker:
    """Stands in for one position of the tree while ``where`` runs."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<tree_at position {self.index}>"


def _childless_node(x: Any) -> bool:
    # None, (), {} , [] and registered nodes without children: a rebuilt copy may be a shared
    # singleton (``tuple([]) is ()``), so they are selected as positions, like leaves.
    children, td = _tree.flatten_one_level(x)
    return not children and td.num_nodes == 1 and td.num_leaves == 0


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
        ``lambda m: (m.a, m.b[1])``).  Selection is by position: two ``None`` s, two equal
        numbers or two references to one array at different places are different places.  A
        selected node may be a whole subtree.  Static fields and node data are not places.
      tree: the pytree (Modules are rebuilt without running ``__init__``).
      replace: the new value (one place) or a sequence of new values, one per place; a new
        value may have any structure.
      replace_fn: instead of ``replace``, a function ``old -> new`` applied to each place.
      is_leaf: as in ``spruce.tree.flatten``: subtrees it accepts are places but are not looked
        into.

    Returns:
      A new pytree; untouched subtrees are shared with ``tree`` (not copied).

    Raises:
      ValueError: not exactly one of replace / replace_fn; ``where`` returned something that
        is not a place in the tree (e.g. a static field, or a newly computed value); a place
        selected twice or inside another selected place; ``replace`` length differs from the
        number of places.
      TypeError: ``where`` is not callable.

    Cost: one pass over the tree (to build the stand-in tree ``where`` runs on) plus one
    rebuild of the nodes on the paths to the places.  Follows equinox.tree_at.

    >>> tree_at(lambda t: t[1][0], [1, (2, 3)], 'x')
    [1, ('x', 3)]
    >>> tree_at(lambda t: (t[0], t[1]), [None, None], replace_fn=lambda _: 0)
    [0, 0]
    """
    if (replace is _NO_VALUE) == (replace_fn is _NO_VALUE):
        raise ValueError("tree_at: pass exactly one of replace=... and replace_fn=...")
    if not callable(where):
        raise TypeError(f"tree_at: where must be a function tree -> node(s), got {type(where).__name__}")

    def stand_in_leaf(x: Any) -> bool:
        return (is_leaf is not None and bool(is_leaf(x))) or x is None or _childless_node(x)

    leaves, treedef = _tree.flatten(tree, stand_in_leaf)
    markers = [_Marker(i) for i in range(len(leaves))]
    shadow = treedef.unflatten(markers)

    # Every node of the stand-in tree, by id (the stand-in is alive, so ids are stable).
    node_ids: dict[int, Any] = {}
    stack = [shadow]
    while stack:
        node = stack.pop()
        if type(node) is _Marker:
            continue
        node_ids[id(node)] = node
        children, _ = _tree.flatten_one_level(node)
        stack.extend(children)

    try:
        selected = where(shadow)
    except Exception as e:
        e.add_note(
            "(tree_at runs `where` on a stand-in copy of the tree whose leaves are placeholders: "
            "`where` must only select places by attribute / item access, not compute with leaves)"
        )
        raise
    if type(selected) is _Marker or id(selected) in node_ids:
        places: Sequence[Any] = [selected]
        single = True
    elif isinstance(selected, (tuple, list)):
        places = selected
        single = False
    else:
        raise ValueError(_not_a_place(selected))
    targets: dict[int, int] = {}  # id(place) -> index among places
    for k, p in enumerate(places):
        if type(p) is not _Marker and id(p) not in node_ids:
            raise ValueError(_not_a_place(p))
        if id(p) in targets:
            raise ValueError(f"tree_at: where selected the same place twice (items {targets[id(p)]} and {k})")
        targets[id(p)] = k
    if replace is not _NO_VALUE:
        if single:
            new_values: list[Any] = [replace]
        else:
            try:
                new_values = list(replace)
            except TypeError:
                raise ValueError(
                    f"tree_at: where selected {len(places)} places, so replace must be a sequence "
                    f"of {len(places)} values, got {type(replace).__name__}"
                ) from None
            if len(new_values) != len(places):
                raise ValueError(
                    f"tree_at: where selected {len(places)} places but replace has {len(new_values)} values"
                )

    done: set[int] = set()

    def new_value(k: int, old: Any) -> Any:
        if replace is not _NO_VALUE:
            return new_values[k]
        return replace_fn(old)

    def rebuild(real: Any, stand_in: Any) -> tuple[Any, bool]:
        k = targets.get(id(stand_in))
        if k is not None:
            done.add(id(stand_in))
            return new_value(k, real), True
        if type(stand_in) is _Marker:
            return real, False
        real_children, real_def = _tree.flatten_one_level(real)
        stand_children, _ = _tree.flatten_one_level(stand_in)
        changed = False
        out = []
        for r, s in zip(real_children, stand_children):
            v, c = rebuild(r, s)
            out.append(v)
            changed = changed or c
        if not changed:
            return real, False
        return real_def.unflatten(out), True

    result, _ = rebuild(tree, shadow)
    if len(done) != len(targets):
        missing = [k for i, k in targets.items() if i not in done]
        raise ValueError(
            f"tree_at: place(s) {missing} of where's result lie inside another selected place; "
            "select either a node or its descendants, not both"
        )
    return result


def _not_a_place(x: Any) -> str:
    return (
        f"tree_at: where returned an object of type {type(x).__name__} that is not a node or "
        "leaf of the tree. Select places by attribute / item access on the argument (e.g. "
        "lambda m: m.layers[0].weight, or a tuple of such); static fields and values computed "
        "inside where cannot be replaced"
    )
