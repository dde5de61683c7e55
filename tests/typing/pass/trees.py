"""Trees of the usual shapes are PyTrees, and the leaf type comes out of the traversals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple, assert_type

import spruce.tree as st
import spruce.tree_util as tu
from spruce.typing import PyTree


class Array:
    def __mul__(self, other: float) -> Array:
        return self

    def __add__(self, other: Array) -> Array:
        return self

    def sum(self) -> float:
        return 0.0


class Pair(NamedTuple):
    first: Array
    second: Array


a = Array()
params: dict[str, Array] = {"w": a, "b": a}
nested: dict[str, list[Array]] = {"layers": [a, a]}
mixed: dict[str, tuple[Array, ...] | list[Array] | None] = {"t": (a,), "l": [a], "n": None}

# Each is a PyTree[Array] (dict and list are invariant; Sequence and Mapping are not).
p1: PyTree[Array] = params
p2: PyTree[Array] = nested
p3: PyTree[Array] = mixed
p4: PyTree[Array] = Pair(a, a)
p5: PyTree[Array] = None
p6: PyTree[Array] = a
p7: PyTree[float] = {"x": [1.0, (2.0, 3.0)], "y": {"z": 4.0}}


def total(tree: PyTree[Array]) -> float:
    # mypy needs the annotation when the tree is typed PyTree[...] itself (spruce.typing's limits)
    arrays: list[Array] = st.leaves(tree)
    return sum(x.sum() for x in arrays)


def add(x: Array, y: Array) -> Array:
    return x + y


def add_sum(acc: float, x: Array) -> float:
    return acc + x.sum()


total(params)
total([params, nested, (a, a)])

assert_type(st.leaves(params), list[Array])
assert_type(st.leaves(nested), list[Array])
assert_type(tu.tree_leaves(nested), list[Array])
assert_type(st.leaves([1, 2, 3]), list[int])
assert_type(st.iter(params), Iterator[Array])
assert_type(st.leaves_with_path(params), list[tuple[tuple[Any, ...], Array]])
assert_type(st.reduce(add, params), Array)
assert_type(st.reduce(add_sum, params, 0.0), float)
summed: Array = st.reduce(lambda x, y: x + y, params)
# With is_leaf (a subtree may become a leaf) or none_is_leaf=True the leaves are Any.
assert_type(st.leaves(nested, is_leaf=lambda x: isinstance(x, list)), list[Any])
assert_type(st.leaves(mixed, none_is_leaf=True), list[Any])
