"""flatten / structure give a PyTreeDef of the tree's type; unflatten gives that type back."""

from __future__ import annotations

from typing import Any, assert_type

import spruce.tree as st
import spruce.tree_util as tu
from spruce.tree import PyTreeDef


class Array:
    pass


a = Array()
nested: dict[str, list[Array]] = {"layers": [a, a]}

leaves, treedef = st.flatten(nested)
assert_type(treedef, PyTreeDef[dict[str, list[Array]]])
assert_type(st.unflatten(treedef, leaves), dict[str, list[Array]])
assert_type(treedef.unflatten(leaves), dict[str, list[Array]])
assert_type(tu.tree_unflatten(tu.tree_structure(nested), leaves), dict[str, list[Array]])
assert_type(st.structure((a, [a])), PyTreeDef[tuple[Array, list[Array]]])
pairs, treedef2 = st.flatten_with_path(nested)
assert_type(treedef2.unflatten([x for _, x in pairs]), dict[str, list[Array]])
# A bare PyTreeDef (an engine result, a user annotation) is PyTreeDef[Any].
children: list[PyTreeDef] = treedef.children()
assert_type(children[0].unflatten([a]), Any)
