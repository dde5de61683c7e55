"""Instruction counts per call of (tree, op) cells, by callgrind: the engine's repeatable instrument.

    python benchmarks/callgrind_cells.py spruce gpt12:unflatten,dataclass:eq,chain10000:leaves 20
    python benchmarks/callgrind_cells.py jax gpt12:unflatten 20        # a peer, same harness

Trees are the benchmark's (``bench_trees``), plus ``chainN`` for a chain N levels deep,
``balancedN`` for a balanced tree of N leaves and ``wideN`` for a flat list of N leaves; ops are
flatten, unflatten, leaves, structure, map, map2, fwp (flatten_with_path), eq (treedef ==) and
noop (the loop alone).  The spruce measured is the one ``import spruce`` finds (set PYTHONPATH
to a build's ``src``).

Method (docs/performance.md): this script re-runs itself under ``setarch -R valgrind
--tool=callgrind`` with ``PYTHONHASHSEED=0``, collecting only inside ``exec`` and dumping after
each one.  Each cell, after three warm-up calls and with the garbage collector off, ``exec``s a
loop of R calls and then one of 2R calls; per call = (2R dump - R dump) / R.  A cell written
``tree:op*R`` uses its own R (``bench_scaling`` measures large trees with R = 1).
"""

from __future__ import annotations

import functools
import gc
import glob
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent


def _ops(lib: str) -> tuple[Callable[..., Any], ...]:
    """(flatten, unflatten, leaves, structure, map, flatten_with_path) of ``lib``."""
    sys.path.insert(0, str(HERE))
    import bench_trees as bt

    if lib == "spruce":
        import spruce.tree as t

        bt.register_nodes("spruce", t)
        return t.flatten, t.unflatten, t.leaves, t.structure, t.map, t.flatten_with_path
    if lib == "jax":
        import jax.tree_util as j

        bt.register_nodes("jax", j)
        return j.tree_flatten, j.tree_unflatten, j.tree_leaves, j.tree_structure, j.tree_map, j.tree_flatten_with_path
    import optree as o

    bt.register_nodes("optree", o)
    ns = {"namespace": bt.OPTREE_NAMESPACE}
    return (
        functools.partial(o.tree_flatten, **ns), o.tree_unflatten, functools.partial(o.tree_leaves, **ns),
        functools.partial(o.tree_structure, **ns), functools.partial(o.tree_map, **ns),
        functools.partial(o.tree_flatten_with_path, **ns),
    )  # fmt: skip


def _cell(ops: tuple[Callable[..., Any], ...], cell: str) -> Callable[[], Any]:
    import bench_trees as bt

    fl, unfl, lv, st, mp, fwp = ops
    tree, op = cell.split(":")
    m = re.fullmatch(r"(chain|balanced|wide)_?(\d+)", tree)
    shapes = {"chain": bt.chain, "balanced": bt.balanced, "wide": bt.wide_list}
    make = functools.partial(shapes[m.group(1)], int(m.group(2))) if m else {c.name: c.build for c in bt.tree_cases()}[tree]
    t1, t2 = make(), make()
    leaves, td = fl(t1)
    td2 = st(t2)
    return {
        "flatten": lambda: fl(t1), "unflatten": lambda: unfl(td, leaves), "leaves": lambda: lv(t1),
        "structure": lambda: st(t1), "map": lambda: mp(lambda x: x, t1),
        "map2": lambda: mp(lambda x, y: x, t1, t2), "fwp": lambda: fwp(t1), "eq": lambda: td == td2,
        "noop": lambda: None,
    }[op]  # fmt: skip


def _split(cell: str, r: int) -> tuple[str, int]:
    """``tree:op`` or ``tree:op*R`` -> (``tree:op``, its R)."""
    name, _, own = cell.partition("*")
    return name, int(own) if own else r


def measure(lib: str, cells: list[str], r: int) -> None:
    """Run under callgrind (see ``main``): one exec of R calls, one of 2R calls, per cell."""
    depths = [int(m.group(1)) for c in cells if (m := re.match(r"chain_?(\d+):", c))]
    sys.setrecursionlimit(max(10_000, 3 * max(depths, default=0) + 1_000))  # jax recurses on chains
    ops = _ops(lib)
    fns = []
    for cell in cells:
        name, reps = _split(cell, r)
        fn = _cell(ops, name)
        for _ in range(3):
            fn()
        fns.append((fn, reps))
    code = compile("for _ in range(n): F()", "<loop>", "exec")
    gc.collect()
    gc.disable()
    for fn, reps in fns:
        exec(code, {"F": fn, "n": reps})
        exec(code, {"F": fn, "n": 2 * reps})


def counts(lib: str, cells: list[str], r: int) -> dict[str, float]:
    """Instructions per call of each cell (``tree:op``, or ``tree:op*R`` for its own R) of
    ``lib``, all in one process under callgrind.  Raises RuntimeError with valgrind's stderr if
    the run fails (valgrind missing, or the process crashed)."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [
            "setarch", "-R", "valgrind", "--tool=callgrind", "--collect-atstart=no",
            "--toggle-collect=builtin_exec", "--dump-after=builtin_exec",
            f"--callgrind-out-file={d}/cg.%p", sys.executable, __file__, "--measure", lib, ",".join(cells), str(r),
        ]  # fmt: skip
        try:
            proc = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True)
        except OSError as e:
            raise RuntimeError(f"cannot run valgrind: {e}") from None
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        parts = sorted(glob.glob(f"{d}/cg.*.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        totals = []
        for f in parts[-2 * len(cells) :]:  # imports exec too: the cells' dumps are the last ones
            text = Path(f).read_text()
            found = re.search(r"^totals: (\d+)", text, re.M)
            totals.append(int(found.group(1)) if found else 0)
    out = {}
    for i, cell in enumerate(cells):
        name, reps = _split(cell, r)
        out[name] = (totals[2 * i + 1] - totals[2 * i]) / reps
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "--measure":
        measure(argv[1], argv[2].split(","), int(argv[3]))
        return 0
    if len(argv) != 3:
        print(__doc__)
        return 2
    try:
        per_call = counts(argv[0], argv[1].split(","), int(argv[2]))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    for cell, n in per_call.items():
        print(f"{cell:32s} {n:12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
