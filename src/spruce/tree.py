"""spruce.tree: the pytree engine, with short names (as ``jax.tree``).

A pytree is a nest of containers — tuple, list, dict, OrderedDict, defaultdict, namedtuple,
deque, struct sequences (``time.struct_time``), None, and registered classes/dataclasses —
whose leaves are everything else (arrays, scalars, strings, ...).

Parameters shared by the traversal functions, described once:

- ``is_leaf``: optional predicate called on every object visited, the root included, before it
  is expanded; a true result makes the object a leaf (as jax.tree_util).
- ``none_is_leaf`` (keyword-only): if True, None is a leaf; by default it is a node with no
  children (as jax.tree_util; the switch comes from optree).
- ``namespace`` (keyword-only, optree's): the registration namespace of the walk; classes
  registered with ``register_*(..., namespace="ns")`` are nodes only in walks called with
  ``namespace="ns"``.  "" (the default) is the global namespace, the one JAX's registry shares.

Semantics follow jax.tree_util, with these intentional differences (each has a test):

- a dict rebuilt by ``unflatten`` / ``map`` keeps the input's insertion order (JAX sorts it);
- dict keys that do not compare with each other are ordered by (type, key) instead of raising;
- deque and struct sequences are nodes; namedtuple subclasses are nodes;
- ``flatten_one_level`` returns ``(children, PyTreeDef)`` as Equinox does;
- ``transpose`` checks the whole outer∘inner structure, not only the leaf count;
- ``register_dataclass`` unflattens without calling ``__init__`` / ``__post_init__``;
- no input depth can crash the interpreter, and cycles raise a ValueError naming the key path.
"""

from ._partial import Partial as Partial
from ._partial import static as static
from ._tree._folds import reduce as reduce
from ._tree._folds import reduce_associative as reduce_associative
from ._tree._keys import DictKey as DictKey
from ._tree._keys import FlattenedIndexKey as FlattenedIndexKey
from ._tree._keys import GetAttrKey as GetAttrKey
from ._tree._keys import SequenceKey as SequenceKey
from ._tree._keys import keystr as keystr
from ._tree._kindenum import PyTreeKind as PyTreeKind
from ._tree._ops import all as all
from ._tree._ops import all_leaves as all_leaves
from ._tree._ops import any as any
from ._tree._ops import broadcast as broadcast
from ._tree._ops import flatten_one_level as flatten_one_level
from ._tree._ops import flatten_one_level_with_path as flatten_one_level_with_path
from ._tree._ops import is_leaf as is_leaf
from ._tree._ops import partition as partition
from ._tree._ops import transpose as transpose
from ._tree._registry import dict_insertion_ordered as dict_insertion_ordered
from ._tree._registry import is_dict_insertion_ordered as is_dict_insertion_ordered
from ._tree._registry import is_tree_node as is_tree_node
from ._tree._registry import register_dataclass as register_dataclass
from ._tree._registry import register_pytree_node as register_pytree_node
from ._tree._registry import register_pytree_node_class as register_pytree_node_class
from ._tree._registry import register_pytree_with_keys as register_pytree_with_keys
from ._tree._registry import (
    register_pytree_with_keys_class as register_pytree_with_keys_class,
)
from ._tree._registry import register_static as register_static
from ._tree._registry import unregister as unregister
from ._tree._traverse import flatten as flatten
from ._tree._traverse import flatten_with_path as flatten_with_path
from ._tree._traverse import iter_leaves as iter
from ._tree._traverse import leaves as leaves
from ._tree._traverse import leaves_with_path as leaves_with_path
from ._tree._traverse import map as map
from ._tree._traverse import map_with_path as map_with_path
from ._tree._traverse import structure as structure
from ._tree._treedef import PyTreeDef as PyTreeDef
from ._tree._treedef import from_jax as from_jax
from ._tree._treedef import treedef_children as treedef_children
from ._tree._treedef import treedef_is_leaf as treedef_is_leaf
from ._tree._treedef import treedef_tuple as treedef_tuple
from ._tree._treedef import unflatten as unflatten

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "Partial",
    "PyTreeDef",
    "PyTreeKind",
    "SequenceKey",
    "all",
    "all_leaves",
    "any",
    "broadcast",
    "dict_insertion_ordered",
    "flatten",
    "flatten_one_level",
    "flatten_one_level_with_path",
    "flatten_with_path",
    "is_dict_insertion_ordered",
    "is_leaf",
    "is_tree_node",
    "iter",
    "keystr",
    "leaves",
    "leaves_with_path",
    "map",
    "map_with_path",
    "partition",
    "reduce",
    "reduce_associative",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "static",
    "structure",
    "transpose",
    "from_jax",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
    "unflatten",
    "unregister",
]
