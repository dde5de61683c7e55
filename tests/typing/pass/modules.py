"""Modules are pytree nodes to the checkers; their fields are checked; Final fields are frozen."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Final, assert_type

import spruce
import spruce.tree as st
from spruce.typing import PyTree, PyTreeNode


class Array:
    def __mul__(self, other: float) -> Array:
        return self


class Linear(spruce.Module):
    weight: Array
    bias: Array | None
    in_features: int = spruce.field(static=True, default=1)


class Frozen(spruce.Module):
    weight: Final[Array]

    def __init__(self, weight: Array) -> None:
        self.weight = weight  # allowed in __init__


@st.register_dataclass
@dataclasses.dataclass
class Point:
    __spruce_pytree__: ClassVar[bool]  # set by the registration; declared for the checkers
    x: float
    y: float


def scale(x: Array) -> Array:
    return x * 2.0


def norm(x: Array) -> float:
    return 1.0


a = Array()
linear = Linear(weight=a, bias=None)
frozen = Frozen(a)
node: PyTreeNode = linear
tree: PyTree[Array] = [linear, frozen, {"head": Linear(a, a, in_features=3)}]
assert_type(st.map(scale, linear), Linear)
assert_type(st.map(scale, {"a": linear, "b": linear}), dict[str, Linear])
point: PyTree[float] = Point(1.0, 2.0)
leaves, treedef = st.flatten(linear)
assert_type(treedef.unflatten(leaves), Linear)
# A Module's leaf types are not visible to a checker: Any, not the Module itself.
assert_type(st.leaves(linear), list[Any])
assert_type(st.map(norm, linear), PyTree[float])
assert_type(st.reduce(lambda acc, x: acc + norm(x), linear, 0.0), float)
