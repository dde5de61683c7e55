"""spruce.tree_util: the objects of ``spruce.tree`` under jax.tree_util's names.

Replace ``import jax.tree_util as tree_util`` with ``import spruce.tree_util as tree_util`` and
code written for JAX runs unchanged.  Every name here is the same object as in ``spruce.tree``
(this module only re-binds); see ``spruce.tree`` for the semantics and the differences from JAX.
``flatten_one_level`` / ``flatten_one_level_with_keys`` return a PyTreeDef as second element
(Equinox's convention) where JAX returns the node's aux data.
"""

from typing import Any as _Any

from .tree import DictKey as DictKey
from .tree import FlattenedIndexKey as FlattenedIndexKey
from .tree import GetAttrKey as GetAttrKey
from .tree import Partial as Partial
from .tree import PyTreeDef as PyTreeDef
from .tree import SequenceKey as SequenceKey
from .tree import all as tree_all
from .tree import all_leaves as all_leaves
from .tree import any as tree_any
from .tree import broadcast as tree_broadcast
from .tree import flatten as tree_flatten
from .tree import flatten_one_level as flatten_one_level
from .tree import flatten_one_level_with_path as flatten_one_level_with_keys
from .tree import flatten_with_path as tree_flatten_with_path
from .tree import is_tree_node as is_tree_node
from .tree import keystr as keystr
from .tree import leaves as tree_leaves
from .tree import leaves_with_path as tree_leaves_with_path
from .tree import map as tree_map
from .tree import map_with_path as tree_map_with_path
from .tree import partition as tree_partition
from .tree import reduce as tree_reduce
from .tree import reduce_associative as tree_reduce_associative
from .tree import register_dataclass as register_dataclass
from .tree import register_pytree_node as register_pytree_node
from .tree import register_pytree_node_class as register_pytree_node_class
from .tree import register_pytree_with_keys as register_pytree_with_keys
from .tree import register_pytree_with_keys_class as register_pytree_with_keys_class
from .tree import register_static as register_static
from .tree import static as static
from .tree import structure as tree_structure
from .tree import transpose as tree_transpose
from .tree import treedef_children as treedef_children
from .tree import treedef_is_leaf as treedef_is_leaf
from .tree import treedef_tuple as treedef_tuple
from .tree import unflatten as tree_unflatten
from .tree import unregister as unregister

#: The type of one key-path entry (``DictKey``, ``SequenceKey``, ``GetAttrKey``,
#: ``FlattenedIndexKey`` or a custom node's own), as jax.tree_util's ``KeyEntry``.
KeyEntry = _Any
#: The type of a key path: a tuple of ``KeyEntry``, as jax.tree_util's ``KeyPath``.
KeyPath = tuple[_Any, ...]

# A literal list: type checkers read it to know what this module exports (a renaming import
# such as ``map as tree_map`` is not a re-export otherwise, and mypy --strict rejects
# ``tree_util.tree_map`` in user code).  tests/test_typing.py checks it against the module.
__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "KeyEntry",
    "KeyPath",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "flatten_one_level",
    "flatten_one_level_with_keys",
    "is_tree_node",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "static",
    "tree_all",
    "tree_any",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_partition",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
    "unregister",
]
