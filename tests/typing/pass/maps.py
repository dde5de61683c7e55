"""map keeps the tree's type when the function keeps the leaf type, else gives PyTree[U]."""

from __future__ import annotations

from typing import Any, assert_type

import spruce.tree as st
import spruce.tree_util as tu
from spruce.typing import PyTree


class Array:
    def __mul__(self, other: float) -> Array:
        return self

    def __sub__(self, other: Array) -> Array:
        return self

    def sum(self) -> float:
        return 0.0


def scale(x: Array) -> Array:
    return x * 0.5


def total(x: Array) -> float:
    return x.sum()


def step(p: Array, g: Array) -> Array:
    return p - g * 0.1


def named(path: tuple[Any, ...], x: Array) -> Array:
    return x


a = Array()
lr = 0.1
params: dict[str, Array] = {"w": a, "b": a}
grads: dict[str, Array] = {"w": a, "b": a}
nested: dict[str, list[Array]] = {"layers": [a, a]}

assert_type(st.map(scale, params), dict[str, Array])
assert_type(st.map(scale, nested), dict[str, list[Array]])
assert_type(tu.tree_map(scale, nested), dict[str, list[Array]])
assert_type(st.map(total, nested), PyTree[float])
assert_type(st.map(step, params, grads), dict[str, Array])
assert_type(st.map_with_path(named, nested), dict[str, list[Array]])
# An unannotated lambda: a dict[str, Array] for basedpyright, Any for mypy and pyrefly (which
# cannot choose an overload from a lambda); either is accepted here, as in user code.
scaled: dict[str, Array] = st.map(lambda x: x * lr, params)
updated: dict[str, Array] = st.map(lambda p, g: p - g * lr, params, grads)
# is_leaf / none_is_leaf: Any.
assert_type(st.map(scale, nested, is_leaf=lambda x: isinstance(x, list)), Any)
