"""optree's public surface on spruce's engine: ``import spruce.optree as optree``.

The names and semantics of optree 0.20.0 (``optree.tree_map``, ``tree_flatten_with_path``,
accessors, ``treespec_*`` constructors, registration namespaces, ``optree.dataclasses``, ...),
computed by spruce's engine, so code written for optree runs unchanged and its trees, structures
and registrations are spruce's own: a ``PyTreeSpec`` here *is* a ``spruce.tree.PyTreeDef``, a
class registered here in the global namespace is a node for ``spruce.tree``, ``spruce.Module``
filters and (through the bridge) ``jax.tree_util``.

Where ``spruce.tree`` already has a name with JAX's meaning, it keeps it; optree's meaning lives
here under optree's name (``spruce.tree.flatten_one_level`` is Equinox's; ``tree_flatten_one_level``
here is optree's four-value form; ``spruce.tree.flatten_with_path`` gives JAX key paths, while
``tree_flatten_with_path`` here gives optree's tuples of raw entries).

What differs from optree, on purpose:

- error messages are spruce's (they name the key path of a mismatch and both sides); the
  exception classes are optree's;
- the global namespace is ``GLOBAL_NAMESPACE`` (optree keeps its sentinel private), and every
  traversal function also takes ``namespace=""`` for it;
- a rebuilt dict keeps the input's insertion order (``spruce.tree``'s rule; optree sorts unless
  ``dict_insertion_ordered``);
- ``MAX_RECURSION_DEPTH`` is informational: spruce's walks do not use the C stack.

``scripts/run_optree_tests.py`` runs optree's own test suite against this module and classifies
every failure (the counts are in the documentation's "Coming from optree" page).

>>> import spruce.optree as optree
>>> leaves, spec = optree.tree_flatten({'b': (2, 3), 'a': 1})
>>> leaves, spec.num_leaves, optree.treespec_paths(spec)
([1, 2, 3], 3, [('a',), ('b', 0), ('b', 1)])
>>> optree.tree_map_with_path(lambda p, x: len(p), {'b': (2, 3), 'a': 1})
{'b': (2, 2), 'a': 1}
"""

from __future__ import annotations

from . import _accessors, _ops, _registry, _types
from . import dataclasses as dataclasses
from . import functools as functools
from . import treespec as treespec
from ._accessors import (
    AutoEntry,
    DataclassEntry,
    FlattenedEntry,
    GetAttrEntry,
    GetItemEntry,
    MappingEntry,
    NamedTupleEntry,
    PyTreeAccessor,
    PyTreeEntry,
    SequenceEntry,
    StructSequenceEntry,
    tree_accessors,
    tree_flatten_with_accessor,
    tree_flatten_with_path,
    tree_paths,
    treespec_accessors,
    treespec_paths,
)
from ._ops import (
    MAX_RECURSION_DEPTH,
    NONE_IS_LEAF,
    NONE_IS_NODE,
    all_leaves,
    broadcast_common,
    broadcast_prefix,
    prefix_errors,
    tree_all,
    tree_any,
    tree_broadcast_common,
    tree_broadcast_map,
    tree_broadcast_map_with_accessor,
    tree_broadcast_map_with_path,
    tree_broadcast_prefix,
    tree_flatten,
    tree_flatten_one_level,
    tree_is_leaf,
    tree_iter,
    tree_leaves,
    tree_map,
    tree_map_,
    tree_map_with_accessor,
    tree_map_with_accessor_,
    tree_map_with_path,
    tree_map_with_path_,
    tree_max,
    tree_min,
    tree_partition,
    tree_reduce,
    tree_replace_nones,
    tree_structure,
    tree_sum,
    tree_transpose,
    tree_transpose_map,
    tree_transpose_map_with_accessor,
    tree_transpose_map_with_path,
    tree_unflatten,
)
from ._registry import (
    GLOBAL_NAMESPACE,
    PyTreeNodeRegistryEntry,
    dict_insertion_ordered,
    register_pytree_node,
    register_pytree_node_class,
    unregister_pytree_node,
)
from ._treespec import (
    treespec_child,
    treespec_children,
    treespec_defaultdict,
    treespec_deque,
    treespec_dict,
    treespec_entries,
    treespec_entry,
    treespec_from_collection,
    treespec_frozendict,
    treespec_is_leaf,
    treespec_is_one_level,
    treespec_is_prefix,
    treespec_is_strict_leaf,
    treespec_is_suffix,
    treespec_leaf,
    treespec_list,
    treespec_namedtuple,
    treespec_none,
    treespec_one_level,
    treespec_ordereddict,
    treespec_structseq,
    treespec_transform,
    treespec_tuple,
)
from ._types import (
    CustomTreeNode,
    FlattenFunc,
    PyTree,
    PyTreeDef,
    PyTreeKind,
    PyTreeSpec,
    PyTreeTypeVar,
    UnflattenFunc,
    is_namedtuple,
    is_namedtuple_class,
    is_namedtuple_instance,
    is_structseq,
    is_structseq_class,
    is_structseq_instance,
    namedtuple_fields,
    structseq_fields,
)

# optree's submodules under their names (``optree.accessors.PyTreeEntry``, ``optree.typing...``)
accessors = _accessors
ops = _ops
registry = _registry
typing = _types

__all__ = [
    "MAX_RECURSION_DEPTH",
    "NONE_IS_NODE",
    "NONE_IS_LEAF",
    "tree_flatten",
    "tree_unflatten",
    "tree_iter",
    "tree_leaves",
    "tree_structure",
    "tree_is_leaf",
    "all_leaves",
    "tree_map",
    "tree_map_",
    "tree_map_with_path",
    "tree_map_with_path_",
    "tree_map_with_accessor",
    "tree_map_with_accessor_",
    "tree_replace_nones",
    "tree_partition",
    "tree_transpose",
    "tree_transpose_map",
    "tree_transpose_map_with_path",
    "tree_transpose_map_with_accessor",
    "tree_broadcast_prefix",
    "broadcast_prefix",
    "tree_broadcast_common",
    "broadcast_common",
    "tree_broadcast_map",
    "tree_broadcast_map_with_path",
    "tree_broadcast_map_with_accessor",
    "tree_reduce",
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_all",
    "tree_any",
    "tree_flatten_one_level",
    "prefix_errors",
    "PyTreeEntry",
    "GetItemEntry",
    "GetAttrEntry",
    "FlattenedEntry",
    "AutoEntry",
    "SequenceEntry",
    "MappingEntry",
    "NamedTupleEntry",
    "StructSequenceEntry",
    "DataclassEntry",
    "PyTreeAccessor",
    "tree_accessors",
    "tree_flatten_with_accessor",
    "tree_paths",
    "tree_flatten_with_path",
    "treespec_accessors",
    "treespec_paths",
    "treespec_entries",
    "treespec_entry",
    "treespec_children",
    "treespec_child",
    "treespec_one_level",
    "treespec_transform",
    "treespec_is_leaf",
    "treespec_is_strict_leaf",
    "treespec_is_one_level",
    "treespec_is_prefix",
    "treespec_is_suffix",
    "treespec_leaf",
    "treespec_none",
    "treespec_tuple",
    "treespec_list",
    "treespec_dict",
    "treespec_namedtuple",
    "treespec_ordereddict",
    "treespec_defaultdict",
    "treespec_deque",
    "treespec_structseq",
    "treespec_frozendict",
    "treespec_from_collection",
    "GLOBAL_NAMESPACE",
    "PyTreeNodeRegistryEntry",
    "register_pytree_node",
    "register_pytree_node_class",
    "unregister_pytree_node",
    "dict_insertion_ordered",
    "PyTreeSpec",
    "PyTreeDef",
    "PyTreeKind",
    "PyTree",
    "PyTreeTypeVar",
    "CustomTreeNode",
    "FlattenFunc",
    "UnflattenFunc",
    "is_namedtuple",
    "is_namedtuple_class",
    "is_namedtuple_instance",
    "namedtuple_fields",
    "is_structseq",
    "is_structseq_class",
    "is_structseq_instance",
    "structseq_fields",
]
