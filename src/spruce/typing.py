"""Tree types for static type checkers: ``PyTree[T]`` and the node protocol ``PyTreeNode``.

``PyTree[T]`` is a tree whose leaves are ``T``: a ``T``, a ``Sequence`` or ``Mapping`` of
``PyTree[T]`` (lists, tuples, namedtuples, dicts), a ``PyTreeNode`` or None.  It is built from
the covariant ``Sequence`` and ``Mapping``: ``dict[str, Array]`` is a ``PyTree[Array]`` for every
checker, where an alias built from the invariant ``dict`` / ``list`` is rejected.  The
traversal functions of ``spruce.tree`` (and their ``spruce.tree_util`` names) are typed with it:

- ``leaves(params)`` is a ``list[Array]``, ``iter`` an ``Iterator[Array]``,
  ``leaves_with_path`` a ``list[tuple[KeyPath, Array]]``, ``reduce`` returns the fold's type;
- ``map(f, tree)`` returns the input's own type when ``f`` keeps the leaf type (its parameter
  and return types are one type: ``map(lambda x: x * lr, params)`` is a ``dict[str, Array]``, a
  ``Linear`` stays a ``Linear``), and ``PyTree[U]`` when ``f`` returns a ``U`` (with the leaf
  type checked against ``f``'s parameter); ``map_with_path`` likewise;
- ``flatten(tree)`` / ``structure(tree)`` give a ``PyTreeDef[type of tree]`` and
  ``unflatten(PyTreeDef[S], leaves)`` / ``treedef.unflatten(leaves)`` return an ``S``, so a
  round trip keeps the type.  ``flatten``'s leaves are ``list[Any]``: one argument cannot give a
  checker both the tree's own type and its leaf type (that needs an intersection type); use
  ``leaves`` for typed leaves.

With ``is_leaf`` (a subtree may become a leaf) or ``none_is_leaf=True`` the results are ``Any``
and the functions accept any tree, as ``jax.tree_util``'s annotations do everywhere.

``PyTreeNode`` is the protocol of the classes spruce walks into that are neither sequences nor
mappings: it asks for the class attribute ``__spruce_pytree__``.  Every ``spruce.Module``
declares it, so every Module (``spruce.nn.Linear``, yours) is a ``PyTreeNode`` to a checker.
Registering a class through ``spruce.tree`` (``register_pytree_node``, ``register_dataclass``,
the class decorators, ...) sets it at run time (``isinstance(x, PyTreeNode)`` is then true;
``unregister`` removes it), but a checker does not run the registration: declare
``__spruce_pytree__: ClassVar[bool]`` in the class body to let a checker see the class as a
node.  A class it does not see as a node is a leaf of type itself, as at run time before
registration.

Module fields are checked through ``dataclass_transform``: the generated ``__init__`` takes
each field with its declared type (a wrong type is an error).  Modules are frozen at run time
(assignment after ``__init__`` raises ``FrozenInstanceError``); to have checkers reject such an
assignment, annotate the field ``Final[...]`` (``weight: Final[Array]``): all three checkers
below then allow the assignment in a hand-written ``__init__`` and reject it elsewhere.  (PEP
681's ``frozen_default=True`` would make them reject the assignments of every hand-written
``__init__`` too, so spruce does not declare it.)

Shape strings.  A field may be annotated jaxtyping-style, ``weight: Float[Array, "out in"]``:
spruce keeps the annotation as written (``__annotations__``; with ``from __future__ import
annotations`` it is never evaluated) and does nothing with it at run time: no shape or dtype
is checked, and spruce does not import jaxtyping.  To have shapes checked at run time, use
jaxtyping's own ``jaxtyped`` decorator on the functions concerned.  A checker reads
``Float[Array, "out in"]`` as jaxtyping declares it for checkers, ``Annotated[Array, "out
in"]``: an ``Array``, so such a field is checked as an ``Array`` field.

Checked with mypy 2.4.1, basedpyright 1.40.2 and pyrefly 1.5.0 (``tests/typing``; the versions
are pinned in the Makefile).  "yes": the checker gives the type or the error described.

========================================================  ====  ============  =======
what                                                      mypy  basedpyright  pyrefly
========================================================  ====  ============  =======
dicts, lists, tuples, None, Modules as ``PyTree[Array]``  yes   yes           yes
``leaves(params)`` is ``list[Array]``                     yes   yes           yes
``leaves(module)`` is ``list[Any]``                       yes   yes           yes
ints given as a ``PyTree[Array]``: rejected               yes   yes           yes
a set, object, function as ``PyTree[Array]``: rejected    yes   yes           yes
``map(f, tree)``, ``f: Array -> Array``: tree's type      yes   yes           yes
``map(step, params, grads)``: ``params``' type            yes   yes           yes
``map(lambda x: x * lr, params)``: ``dict[str, Array]``   Any   yes           Any
``map(f, tree)``, ``f: Array -> float``: PyTree[float]    yes   yes           yes
``map(f, ints)``, ``f: Array -> float``: rejected         yes   yes           yes
flatten / unflatten round trip keeps the type             yes   yes           yes
Module: wrong field type or missing field: rejected       yes   yes           yes
Module: assignment to a ``Final`` field: rejected         yes   yes           yes
========================================================  ====  ============  =======

"Any": with overloads, mypy and pyrefly cannot choose between "keeps the leaf type" and
"changes it" for an unannotated lambda and give ``Any`` (no false error; annotate the
function, or the variable, to get the type).

Known limits (of today's type system and checkers, not of spruce):

- a ``str`` is a ``Sequence[str]``, and so a ``PyTree[T]`` for every ``T`` to mypy (whose
  recursive check accepts it); bytes are a ``Sequence[int]``.  At run time both are leaves;
- no higher-kinded types: "the same tree with leaves of type ``U``" cannot be written, so a
  function that changes the leaf type returns ``PyTree[U]``, not ``dict[str, U]``;
- the "keeps the type" overload of ``map`` takes its leaf type from ``f`` alone: a tree whose
  leaves are not what ``f`` takes is not rejected there (that needs an intersection type);
- basedpyright gives an unannotated lambda's parameter no type in that overload, so
  ``map(lambda x: x.sum(), params)`` is typed ``dict[str, Array]`` there (annotate the lambda's
  result variable, or use a ``def``);
- mypy infers the leaf type of an argument that is itself typed ``PyTree[X]`` (or holds
  ``tuple[Any, ...]``) as a union with the node types, and may reject it: annotate the result
  (``arrays: list[Array] = leaves(tree)``) and mypy takes the leaf type from it;
- a Module's own leaf types are not visible: ``leaves(module)`` is ``list[Any]``, and in a
  container of Modules (``[linear, linear]``) the Module type is taken for the leaf type;
- a tuple is a ``Sequence`` of one leaf type: ``(Array, int)`` is a ``PyTree[Array | int]``;
- a class registered by a call the checker does not follow, or only with ``jax.tree_util``,
  is a leaf to a checker unless it declares ``__spruce_pytree__``.

The alias is written in Python 3.11 syntax, a ``TypeAlias`` with its recursion in strings.
All three checkers accept it; the 3.12 ``type`` statement is not 3.11 syntax, and
``typing_extensions.TypeAliasType`` would make typing_extensions a dependency.  At run time
``PyTree[float]`` is the same union one level deep (``float | Sequence[Any] | Mapping[Any,
Any] | PyTreeNode | None``), so ``typing.get_type_hints`` evaluates annotations that use it.

>>> from spruce.typing import PyTree, PyTreeNode
>>> import spruce
>>> class Scale(spruce.Module):
...     factor: float
>>> isinstance(Scale(2.0), PyTreeNode), isinstance({"a": 1}, PyTreeNode)
(True, False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, TypeVar, runtime_checkable

__all__ = ["PyTree", "PyTreeNode"]

T = TypeVar("T")


@runtime_checkable
class PyTreeNode(Protocol):
    """A class spruce walks into that is neither a sequence nor a mapping: every
    ``spruce.Module``, and every class registered through ``spruce.tree`` (set at run time; declare
    ``__spruce_pytree__: ClassVar[bool]`` for a checker to see it)."""

    __spruce_pytree__: ClassVar[bool]


if TYPE_CHECKING:
    PyTree: TypeAlias = T | Sequence["PyTree[T]"] | Mapping[Any, "PyTree[T]"] | PyTreeNode | None
    """A pytree whose leaves are ``T`` (see the module docstring)."""
else:
    # At run time one level deep: the strings of the recursive form would be evaluated by
    # typing.get_type_hints in the namespace of the annotated function, where they mean nothing.
    PyTree = T | Sequence[Any] | Mapping[Any, Any] | PyTreeNode | None
