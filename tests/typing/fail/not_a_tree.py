"""Containers spruce does not walk into are not trees of the leaf type."""

from __future__ import annotations

from spruce.typing import PyTree


class Array:
    pass


def count(tree: PyTree[Array]) -> int:
    return 0


a = Array()
count({a})  # E: a set is a leaf, not a tree of Arrays
count(frozenset([a]))  # E: likewise
count(object())  # E: an object is not an Array
count(lambda: a)  # E: nor is a function
