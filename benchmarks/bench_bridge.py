"""What a node registered only with JAX costs spruce, against what it costs jax.tree_util.

The tree: a dict holding a list of ``N_LAYERS`` dataclasses registered with
``jax.tree_util.register_dataclass`` only (two array fields, one static field) — the shape of a
flax ``struct.dataclass`` model.  spruce finds the class through its JAX bridge (JAX's C++
one-level flatten, JAX's unflatten function).  Each operation is timed as the minimum over
``--repeat`` rounds of ``--number`` calls (the machine is shared: the minimum is the least
disturbed round), and reported as spruce's time over JAX's.

    python benchmarks/bench_bridge.py [--repeat 30] [--number 50]

(spruce is imported from wherever Python finds it: the installed build, compiled or not, or
``PYTHONPATH=src`` for the source tree.)
"""

from __future__ import annotations

import argparse
import dataclasses
import timeit
from typing import Any, Callable

import jax.tree_util as jtu
import numpy as np

import spruce
import spruce.tree as st

N_LAYERS = 300


@jtu.register_dataclass
@dataclasses.dataclass
class Layer:
    """A flax-struct-style layer: registered with JAX only."""

    weight: Any
    bias: Any
    activation: str = dataclasses.field(default="relu", metadata={"static": True})


def jax_dataclass_tree(n: int = N_LAYERS) -> dict[str, Any]:
    """``{'layers': [Layer, ...], 'step': 0}``: n JAX-registered dataclasses, 2n + 1 leaves."""
    return {
        "layers": [Layer(np.full((2, 2), float(i % 7), np.float32), np.zeros(2, np.float32)) for i in range(n)],
        "step": 0,
    }


def operations(tree: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (spruce call, jax call), each doing the same work on ``tree``."""
    leaves, sdef = st.flatten(tree)
    jleaves, jdef = jtu.tree_flatten(tree)
    ident = lambda x: x
    return {
        "flatten": (lambda: st.flatten(tree), lambda: jtu.tree_flatten(tree)),
        "leaves": (lambda: st.leaves(tree), lambda: jtu.tree_leaves(tree)),
        "map": (lambda: st.map(ident, tree), lambda: jtu.tree_map(ident, tree)),
        "flatten_with_path": (lambda: st.flatten_with_path(tree), lambda: jtu.tree_flatten_with_path(tree)),
        "unflatten": (lambda: sdef.unflatten(leaves), lambda: jdef.unflatten(jleaves)),
    }


def best(fn: Callable[[], Any], repeat: int, number: int) -> float:
    """Seconds per call: the minimum over ``repeat`` rounds of ``number`` calls."""
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number


def run(repeat: int, number: int) -> list[tuple[str, float, float]]:
    """``(operation, spruce seconds, jax seconds)`` per operation, after checking both agree."""
    tree = jax_dataclass_tree()
    ours, theirs = st.leaves(tree), jtu.tree_leaves(tree)
    assert len(ours) == len(theirs) and all(a is b for a, b in zip(ours, theirs))
    assert repr(st.structure(tree)) == repr(jtu.tree_structure(tree))
    rows = []
    for name, (s, j) in operations(tree).items():
        s()
        j()
        rows.append((name, best(s, repeat, number), best(j, repeat, number)))
    return rows


def note(rows: list[tuple[str, float, float]], compiled: bool) -> str:
    """One line for the benchmark report: spruce/jax per operation."""
    ratios = ", ".join(f"{name} {s / j:.2f}" for name, s, j in rows)
    build = "compiled" if compiled else "UNCOMPILED"
    return (
        f"Nodes registered only with JAX ({N_LAYERS} `jax.tree_util.register_dataclass` dataclasses in a list, "
        f"{2 * N_LAYERS + 1} leaves; spruce, {build}, finds them through its JAX bridge): spruce time / jax time, "
        f"minimum over rounds (`benchmarks/bench_bridge.py`): {ratios}."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--number", type=int, default=50)
    args = parser.parse_args(argv)
    print(f"spruce compiled: {spruce.__compiled__}; tree: {N_LAYERS} jax.tree_util.register_dataclass nodes")
    print(f"{'operation':<20}{'spruce µs':>12}{'jax µs':>12}{'spruce/jax':>12}")
    for name, s, j in run(args.repeat, args.number):
        print(f"{name:<20}{s * 1e6:>12.1f}{j * 1e6:>12.1f}{s / j:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
