"""A tree whose leaves are not of the declared leaf type."""

from __future__ import annotations

import spruce.tree as st
from spruce.typing import PyTree


class Array:
    def sum(self) -> float:
        return 0.0


def total(x: Array) -> float:
    return x.sum()


ints: dict[str, int] = {"a": 1}
bad: PyTree[Array] = {"w": 1}  # E: an int leaf
bad_nested: PyTree[Array] = {"w": [Array(), 2.0]}  # E: a float leaf inside
arrays: list[Array] = st.leaves(ints)  # E: leaves are ints
sums = st.map(total, ints)  # E: total takes an Array
