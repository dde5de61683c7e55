"""Depth: how far a walk recurses, which build is running, and how deep a tree may be.

Every walk takes the first levels of a tree by recursion, which is the cheapest walk (compiled,
a direct C call per level: no frame stack to grow and pop), and hands a subtree deeper than
that to the one iterative walker (``_walker.Walker``), whose levels cost heap, never C stack.
``unflatten`` never recurses: it is one pass over the node table.

Compiled, a walk recurses ``DEEP`` = 1,024 levels, about the depth optree's C++ recursion
allows (1,000 levels, beyond which it refuses the tree).  A recursive level takes a few hundred
bytes of C stack, so one walk holds at most about 300 KiB of it (measured: docs/performance.md,
"Deep trees and the walker").  ``tests/test_depth_cycles.py`` runs every walk in a 512 KiB
thread and a nested walk in a 1 MiB one; CPython's default thread stacks are larger on the
platforms it supports.
Uncompiled, each level is a Python frame counted against ``sys.getrecursionlimit()``, so
``DEEP`` is 16.

A callback (``f``, ``is_leaf``, a flatten function) can start a walk inside a walk, and
Python's recursion limit does not see the C frames of the outer one.  So only a walk that
starts while no other walk recurses gets ``DEEP`` levels (``begin_walk``); the others get
``NESTED_DEEP``, and a thread's C stack never holds more than one deep recursion.

The iterative walker checks for cycles (Brent's method on the root-to-node path, one identity
comparison per level, see ``Walker``) and refuses trees ``MAX_DEPTH`` levels deep or more
(``check_depth``), which is how an endless tree (a flatten function that makes a new child on
every call) ends.
"""

from __future__ import annotations

from typing import Final


def _probe() -> None:
    """Compiled by mypyc or not: a compiled function has no ``__code__``."""


COMPILED: Final = not hasattr(_probe, "__code__")  # the one test of which build runs
DEEP: Final = 1024 if COMPILED else 16  # levels of recursion of an outermost walk
NESTED_DEEP: Final = 16  # the recursion depth of a walk started while another one recurses
MAX_DEPTH: Final = 1 << 21  # 2,097,152 levels: a 1,000,000-deep list still flattens


class _Walks:
    """How many walks are inside their recursive part right now (any thread).  A walk on
    another thread that happens to start meanwhile is only slower, never less safe."""

    active: int

    def __init__(self) -> None:
        self.active = 0


WALKS: Final = _Walks()


def begin_walk() -> int:
    """The recursion depth for a walk starting now; pair it with ``end_walk`` (try/finally)."""
    a = WALKS.active
    WALKS.active = a + 1
    return DEEP if a == 0 else NESTED_DEEP


def end_walk() -> None:
    WALKS.active -= 1


def check_depth(depth: int) -> None:
    """RecursionError at MAX_DEPTH (callers test it at powers of two only)."""
    if depth >= MAX_DEPTH:
        raise RecursionError(
            f"pytree is {MAX_DEPTH:,} levels deep or more; spruce walks trees iteratively, but "
            "refuses trees this deep (a registered flatten function that makes a new child on "
            "every call builds an endless tree)"
        )


class CycleFound(Exception):
    """Internal: the iterative walker met a node that is its own ancestor.  The public function
    that started the walk catches it and walks the tree again to name the cycle's key paths
    (``_errors.cycle_error``), so no walk keeps its ancestors for the sake of an error."""


class MismatchFound(Exception):
    """Internal: a tree of a multi-tree map does not match the first one.  Caught like
    ``CycleFound``; ``_errors.mismatch_error`` walks the trees again to name where."""
