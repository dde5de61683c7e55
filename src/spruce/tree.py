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

import typing as _typing

from ._partial import Partial as Partial
from ._partial import static as static
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
from ._tree._treedef import PyTreeDef as PyTreeDef
from ._tree._treedef import from_jax as from_jax
from ._tree._treedef import treedef_children as treedef_children
from ._tree._treedef import treedef_is_leaf as treedef_is_leaf
from ._tree._treedef import treedef_tuple as treedef_tuple

if _typing.TYPE_CHECKING:
    # What a type checker sees of the traversal functions (``spruce.typing`` explains the types).
    # At run time the names are bound to the engine's functions themselves (the ``else`` branch):
    # no Python wrapper stands between a call and the compiled code.  ``namespace`` is the
    # registration namespace every traversal function takes.  The overloads without ``is_leaf``
    # and ``none_is_leaf`` come first and carry the leaf type; those with either give Any (a
    # subtree may become a leaf).  The ``(*args, **kwargs)`` definitions after each group are the
    # implementation an overload needs in a .py file; they are never bound.
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any, Literal, TypeVar, overload

    from .typing import PyTree, PyTreeNode

    _T = TypeVar("_T")
    _U = TypeVar("_U")
    _S = TypeVar("_S")
    _KeyPath = tuple[Any, ...]
    _IsLeaf = Callable[..., Any]

    def flatten(
        tree: _S, is_leaf: _IsLeaf | None = None, *, none_is_leaf: bool = False, namespace: str = ""
    ) -> tuple[list[Any], PyTreeDef[_S]]: ...

    def structure(
        tree: _S, is_leaf: _IsLeaf | None = None, *, none_is_leaf: bool = False, namespace: str = ""
    ) -> PyTreeDef[_S]: ...

    def flatten_with_path(
        tree: _S,
        is_leaf: _IsLeaf | None = None,
        is_leaf_takes_path: bool = False,
        *,
        none_is_leaf: bool = False,
        namespace: str = "",
    ) -> tuple[list[tuple[_KeyPath, Any]], PyTreeDef[_S]]: ...

    @overload
    def unflatten(treedef: PyTreeDef[_S], leaves: Iterable[Any]) -> _S: ...
    @overload
    def unflatten(treedef: Any, leaves: Iterable[Any]) -> Any: ...  # a jax PyTreeDef
    def unflatten(*args: Any, **kwargs: Any) -> Any: ...

    # A Module (a PyTreeNode) at the root: its leaf types are not visible to a checker (without
    # this overload the Module itself would be taken for the leaf type).
    @overload
    def leaves(
        tree: PyTreeNode, is_leaf: None = None, *, none_is_leaf: Literal[False] = False, namespace: str = ""
    ) -> list[Any]: ...
    @overload
    def leaves(
        tree: PyTree[_T], is_leaf: None = None, *, none_is_leaf: Literal[False] = False, namespace: str = ""
    ) -> list[_T]: ...
    @overload
    def leaves(
        tree: Any, is_leaf: _IsLeaf, *, none_is_leaf: bool = False, namespace: str = ""
    ) -> list[Any]: ...
    @overload
    def leaves(
        tree: Any, is_leaf: _IsLeaf | None = None, *, none_is_leaf: bool, namespace: str = ""
    ) -> list[Any]: ...
    def leaves(*args: Any, **kwargs: Any) -> Any: ...  # never bound (see above)

    @overload
    def iter(
        tree: PyTreeNode, is_leaf: None = None, *, none_is_leaf: Literal[False] = False, namespace: str = ""
    ) -> Iterator[Any]: ...
    @overload
    def iter(
        tree: PyTree[_T], is_leaf: None = None, *, none_is_leaf: Literal[False] = False, namespace: str = ""
    ) -> Iterator[_T]: ...
    @overload
    def iter(
        tree: Any, is_leaf: _IsLeaf, *, none_is_leaf: bool = False, namespace: str = ""
    ) -> Iterator[Any]: ...
    @overload
    def iter(
        tree: Any, is_leaf: _IsLeaf | None = None, *, none_is_leaf: bool, namespace: str = ""
    ) -> Iterator[Any]: ...
    def iter(*args: Any, **kwargs: Any) -> Any: ...  # never bound (see above)

    @overload
    def leaves_with_path(
        tree: PyTreeNode,
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        *,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> list[tuple[_KeyPath, Any]]: ...
    @overload
    def leaves_with_path(
        tree: PyTree[_T],
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        *,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> list[tuple[_KeyPath, _T]]: ...
    @overload
    def leaves_with_path(
        tree: Any, is_leaf: _IsLeaf, is_leaf_takes_path: bool = False, *, none_is_leaf: bool = False, namespace: str = ""
    ) -> list[tuple[_KeyPath, Any]]: ...
    @overload
    def leaves_with_path(
        tree: Any, is_leaf: _IsLeaf | None = None, is_leaf_takes_path: bool = False, *, none_is_leaf: bool, namespace: str = ""
    ) -> list[tuple[_KeyPath, Any]]: ...
    def leaves_with_path(*args: Any, **kwargs: Any) -> Any: ...  # never bound (see above)

    @overload
    def map(
        f: Callable[[_T], _T], tree: _S, *, is_leaf: None = None, none_is_leaf: Literal[False] = False, namespace: str = ""
    ) -> _S: ...
    @overload
    def map(
        f: Callable[[Any], _U],
        tree: PyTreeNode,
        *,
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map(
        f: Callable[[_T], _U],
        tree: PyTree[_T],
        *,
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map(
        f: Callable[[_T, Any], _T],
        tree: _S,
        other: PyTree[Any],
        /,
        *,
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _S: ...
    @overload
    def map(
        f: Callable[..., _U],
        tree: PyTree[Any],
        other: PyTree[Any],
        /,
        *rest: PyTree[Any],
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map(
        f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: _IsLeaf, none_is_leaf: bool = False, namespace: str = ""
    ) -> Any: ...
    @overload
    def map(
        f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: _IsLeaf | None = None, none_is_leaf: bool, namespace: str = ""
    ) -> Any: ...
    def map(*args: Any, **kwargs: Any) -> Any: ...

    @overload
    def map_with_path(
        f: Callable[[_KeyPath, _T], _T],
        tree: _S,
        *,
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _S: ...
    @overload
    def map_with_path(
        f: Callable[[_KeyPath, Any], _U],
        tree: PyTreeNode,
        *,
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map_with_path(
        f: Callable[[_KeyPath, _T], _U],
        tree: PyTree[_T],
        *,
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map_with_path(
        f: Callable[..., _U],
        tree: PyTree[Any],
        other: PyTree[Any],
        /,
        *rest: PyTree[Any],
        is_leaf: None = None,
        is_leaf_takes_path: bool = False,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> PyTree[_U]: ...
    @overload
    def map_with_path(
        f: Callable[..., Any],
        tree: Any,
        *rest: Any,
        is_leaf: _IsLeaf,
        is_leaf_takes_path: bool = False,
        none_is_leaf: bool = False,
        namespace: str = "",
    ) -> Any: ...
    @overload
    def map_with_path(
        f: Callable[..., Any],
        tree: Any,
        *rest: Any,
        is_leaf: _IsLeaf | None = None,
        is_leaf_takes_path: bool = False,
        none_is_leaf: bool,
        namespace: str = "",
    ) -> Any: ...
    def map_with_path(*args: Any, **kwargs: Any) -> Any: ...

    @overload
    def reduce(
        function: Callable[[_T, _T], _T],
        tree: PyTreeNode,
        *,
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _T: ...
    @overload
    def reduce(
        function: Callable[[_U, Any], _U],
        tree: PyTreeNode,
        initializer: _U,
        is_leaf: None = None,
        *,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _U: ...
    @overload
    def reduce(
        function: Callable[[_T, _T], _T],
        tree: PyTree[_T],
        *,
        is_leaf: None = None,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _T: ...
    @overload
    def reduce(
        function: Callable[[_U, _T], _U],
        tree: PyTree[_T],
        initializer: _U,
        is_leaf: None = None,
        *,
        none_is_leaf: Literal[False] = False,
        namespace: str = "",
    ) -> _U: ...
    @overload
    def reduce(
        function: Callable[[Any, Any], Any],
        tree: Any,
        initializer: Any,
        is_leaf: _IsLeaf,
        *,
        none_is_leaf: bool = False,
        namespace: str = "",
    ) -> Any: ...
    @overload
    def reduce(
        function: Callable[[Any, Any], Any], tree: Any, *, is_leaf: _IsLeaf, none_is_leaf: bool = False, namespace: str = ""
    ) -> Any: ...
    @overload
    def reduce(
        function: Callable[[Any, Any], Any],
        tree: Any,
        initializer: Any = ...,
        is_leaf: _IsLeaf | None = None,
        *,
        none_is_leaf: bool,
        namespace: str = "",
    ) -> Any: ...
    def reduce(*args: Any, **kwargs: Any) -> Any: ...

else:
    from ._tree._folds import reduce as reduce
    from ._tree._traverse import flatten as flatten
    from ._tree._traverse import flatten_with_path as flatten_with_path
    from ._tree._traverse import iter_leaves as iter
    from ._tree._traverse import leaves as leaves
    from ._tree._traverse import leaves_with_path as leaves_with_path
    from ._tree._traverse import map as map
    from ._tree._traverse import map_with_path as map_with_path
    from ._tree._traverse import structure as structure
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
