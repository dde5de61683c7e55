"""Scaling (time per leaf / per level against size) and peak memory of flatten.

Scaling.  flatten, unflatten, map and flatten_with_path are timed for spruce and jax on a flat
list and a balanced tree (branching 10, list and dict levels) of 10 .. 1,000,000 leaves, and on
a chain (nested single-element lists) of depth 10 .. 100,000, and reported as nanoseconds per
leaf (per level for the chain): a linear-cost implementation gives a flat curve.  For each
(shape, op) one interleaved run (as in :mod:`bench_timing`) covers every (size, library), so
machine drift hits every size alike and does not bend the curves.

All of it runs in one fresh subprocess (a clean heap, not the one left by the ratio table).
jax recurses in C++ on the chain, so before that a probe subprocess runs jax's chain ops at
each depth, with Python's recursion limit raised past the depth (at the default limit jax
raises at depth ~1,000); the depths where the probe crashed are left out of the timing run and
reported as crashes.

Memory.  The peak extra memory of one flatten of a 1,000,000-leaf tree is measured in a fresh
subprocess per (library, tree): the process builds the tree, collects garbage, resets the
kernel's peak-RSS mark (``/proc/self/clear_refs``; ``ru_maxrss`` is the fallback), flattens,
and reports peak RSS minus the RSS before the call (it includes the returned leaves list and
treedef).  A second subprocess reports tracemalloc's peak for the same call, which sees only
allocations made through Python's allocator (not a C++ library's own heap).

Instructions.  The same (shape, size, op) cells are counted by callgrind
(``callgrind_cells``), up to ``instruction_sizes``: the work per leaf, free of the noise and
the cache effects that bend the time curves at the largest sizes.

This file is also the subprocess worker: ``python bench_scaling.py '<json task>'``.
"""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import subprocess
import sys
import time
import timeit
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_trees
from bench_timing import interleave

SCALING_OPS: tuple[str, ...] = ("flatten", "unflatten", "map", "flatten_with_path")
SHAPES: tuple[str, ...] = ("flat list", "balanced tree", "chain")


def build_shape(shape: str, n: int) -> Any:
    """The scaling tree: ``n`` leaves (flat list, balanced tree) or ``n`` levels (chain)."""
    if shape == "flat list":
        return bench_trees.wide_list(n)
    if shape == "balanced tree":
        return bench_trees.balanced(n)
    if shape == "chain":
        return bench_trees.chain(n)
    raise ValueError(shape)


def _ident(x: Any) -> Any:
    return x


def _lib_fns(lib: str) -> dict[str, Any]:
    """flatten / unflatten(treedef, leaves) / map / flatten_with_path of spruce or jax."""
    if lib == "spruce":
        import spruce.tree as t

        return {"flatten": t.flatten, "unflatten": t.unflatten, "map": t.map, "flatten_with_path": t.flatten_with_path}
    if lib == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax.tree_util as jtu

        return {
            "flatten": jtu.tree_flatten, "unflatten": jtu.tree_unflatten, "map": jtu.tree_map,
            "flatten_with_path": jtu.tree_flatten_with_path,
        }
    raise ValueError(lib)


def _timers(fns: dict[str, Any], tree: Any) -> dict[str, timeit.Timer]:
    leaves, td = fns["flatten"](tree)
    env = {"t": tree, "td": td, "L": leaves, "f": _ident, **{k.upper(): v for k, v in fns.items()}}
    stmts = {
        "flatten": "FLATTEN(t)", "unflatten": "UNFLATTEN(td, L)", "map": "MAP(f, t)", "flatten_with_path": "FLATTEN_WITH_PATH(t)"
    }
    return {op: timeit.Timer(stmts[op], globals=env) for op in SCALING_OPS}


@dataclass
class ScalingResult:
    """Seconds per call, per (shape, size, lib, op); and notes on failures."""

    times: dict[tuple[str, int, str, str], float] = field(default_factory=dict)
    failures: dict[tuple[str, int, str], str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    instructions: dict[tuple[str, int, str, str], float] = field(default_factory=dict)  # per call
    jax_depths: list[int] = field(default_factory=list)  # the chain depths jax's probe survived


def spruce_deep_threshold() -> int | None:
    """spruce's depth past which walks switch from recursion to an explicit stack with cycle
    detection (``_depth.DEEP``), if exposed.

    The chain is also timed at this depth and one level less, to show the cost of the guard.
    """
    try:
        from spruce._tree import _depth

        deep = getattr(_depth, "DEEP", None)
    except ImportError:
        return None
    return int(deep) if isinstance(deep, int) else None


def _interleave_sizes(
    trees: dict[int, Any], libs_at: Callable[[int], list[str]], fns: dict[str, dict[str, Any]], rounds: int, target: float,
    shape: str,
) -> None:
    """Per op, one interleaved run over every (size, library); prints one JSON line per result."""
    timers = {(n, lib): _timers(fns[lib], tree) for n, tree in trees.items() for lib in libs_at(n)}
    for op in SCALING_OPS:
        series = interleave({f"{lib}@{n}": t[op] for (n, lib), t in timers.items()}, rounds, target)
        for n, lib in timers:
            print(json.dumps({"shape": shape, "n": n, "lib": lib, "op": op, "time": series.median(f"{lib}@{n}")}), flush=True)


def _scaling_worker(task: dict[str, Any]) -> None:
    libs: list[str] = task["libs"]
    fns = {lib: _lib_fns(lib) for lib in libs}
    for shape in ("flat list", "balanced tree"):
        trees = {n: build_shape(shape, n) for n in task["sizes"]}
        _interleave_sizes(trees, lambda n: libs, fns, task["rounds"], task["target"], shape)
        gc.collect()
        print(json.dumps({"log": f"scaling {shape} done"}), flush=True)
    jax_depths = set(task["jax_depths"])
    if jax_depths:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 3 * max(jax_depths) + 1000))
    _interleave_sizes(
        {d: build_shape("chain", d) for d in task["depths"]},
        lambda d: [lib for lib in libs if lib != "jax" or d in jax_depths],
        fns, task["rounds"], task["target"], "chain",
    )  # fmt: skip
    print(json.dumps({"log": "scaling chain done"}), flush=True)


def _probe_chain_worker(task: dict[str, Any]) -> None:
    """Run each scaling op once on each chain depth, deepest last; a crash ends the process."""
    fns = _lib_fns(task["lib"])
    for d in task["depths"]:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 3 * d + 1000))
        print(json.dumps({"start": d}), flush=True)
        try:
            for timer in _timers(fns, build_shape("chain", d)).values():
                timer.timeit(1)
        except Exception as e:
            print(json.dumps({"error": d, "why": f"raises {type(e).__name__}"}), flush=True)
            continue
        print(json.dumps({"ok": d}), flush=True)


def run_scaling(
    sizes: list[int], depths: list[int], with_jax: bool, rounds: int, target: float, log: Callable[[str], None]
) -> ScalingResult:
    """Probe jax's chain depths, then time everything in one fresh subprocess."""
    res = ScalingResult()
    deep = spruce_deep_threshold()
    if deep is not None and depths[0] < deep <= depths[-1]:
        depths = sorted(set(depths) | {deep - 1, deep})
        res.notes.append(
            f"spruce walks the first {deep:,} levels by recursion and deeper levels with an explicit frame stack and "
            f"cycle detection (`spruce._tree._depth.DEEP`); the chain is timed at depths {deep - 1:,} and {deep:,} "
            "to show what the switch costs per level."
        )
    jax_depths: list[int] = []
    if with_jax:
        lines, rc, err = run_worker({"task": "probe_chain", "lib": "jax", "depths": depths}, timeout=600)
        started: int | None = None
        for rec in lines:
            if "start" in rec:
                started = rec["start"]
            elif "ok" in rec:
                jax_depths.append(rec["ok"])
                started = None
            elif "error" in rec:
                res.failures[("chain", rec["error"], "jax")] = rec["why"]
                started = None
        if rc != 0 and started is not None:
            res.failures[("chain", started, "jax")] = f"crashed (signal {-rc})" if rc < 0 else f"exit {rc}"
            for d in depths:
                if d > started:
                    res.failures[("chain", d, "jax")] = "not run (crashed at a smaller depth)"
        elif rc != 0:
            res.notes.append(f"jax chain probe exited {rc}: {err.strip()[-300:]}")
        log(f"  jax chain probe: ok at depths {jax_depths}")
        res.jax_depths = jax_depths
    task = {"task": "scaling", "libs": ["spruce"] + (["jax"] if with_jax else []), "sizes": sizes, "depths": depths,
            "jax_depths": jax_depths, "rounds": rounds, "target": target}
    lines, rc, err = run_worker(task, timeout=1800)
    for rec in lines:
        if "time" in rec:
            res.times[(rec["shape"], rec["n"], rec["lib"], rec["op"])] = rec["time"]
        elif "log" in rec:
            log("  " + rec["log"])
    if rc != 0:
        res.notes.append(f"the scaling subprocess exited {rc}: {err.strip()[-300:]}")
    return res


# ---------------------------------------------------------------------------------------------
# Instructions


INSTRUCTION_OPS: dict[str, str] = {"flatten": "flatten", "unflatten": "unflatten", "map": "map", "flatten_with_path": "fwp"}
_CELL_TREES: dict[str, str] = {"flat list": "wide", "balanced tree": "balanced", "chain": "chain"}


def run_instructions(
    res: ScalingResult, sizes: list[int], depths: list[int], libs: list[str], log: Callable[[str], None]
) -> None:
    """Instructions per call of every scaling (shape, size, op), by callgrind
    (``callgrind_cells``), into ``res.instructions``: the work itself, which neither the
    machine's other tenants nor its caches change, so a flat row here means linear work and
    any growth left in the time table is the memory hierarchy's.  One valgrind process per
    library; jax only at the chain depths its probe survived.  Does nothing, with a note, when
    valgrind cannot run."""
    import callgrind_cells

    for lib in libs:
        cells = []
        for shape, tree in _CELL_TREES.items():
            for n in depths if shape == "chain" else sizes:
                if shape == "chain" and lib == "jax" and n not in res.jax_depths:
                    continue
                reps = max(1, 20_000 // n)
                cells += [f"{tree}{n}:{op}*{reps}" for op in INSTRUCTION_OPS.values()]
        try:
            per_call = callgrind_cells.counts(lib, cells, 1)
        except RuntimeError as e:
            res.notes.append(f"instruction counts of {lib} not measured: {str(e).strip()[-200:]}")
            continue
        ops = {v: k for k, v in INSTRUCTION_OPS.items()}
        shapes = {v: k for k, v in _CELL_TREES.items()}
        for cell, count in per_call.items():
            m = re.fullmatch(r"([a-z]+)(\d+):(\w+)", cell)
            assert m is not None, cell
            res.instructions[(shapes[m.group(1)], int(m.group(2)), lib, ops[m.group(3)])] = count
        log(f"  instructions of {lib} done")


# ---------------------------------------------------------------------------------------------
# Memory


MEMORY_LIBS: dict[str, tuple[str, str]] = {
    "spruce": ("spruce.tree", "flatten"),
    "jax": ("jax.tree_util", "tree_flatten"),
    "optree": ("optree", "tree_flatten"),
    "dm-tree": ("tree", "flatten"),
    "torch": ("torch.utils._pytree", "tree_flatten"),
}


@dataclass
class MemoryResult:
    """Peak extra bytes of one flatten, per (shape, lib, method); errors per same key."""

    n: int
    bytes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    errors: dict[tuple[str, str, str], str] = field(default_factory=dict)


def run_memory(libs: list[str], shapes: list[str], n: int, log: Callable[[str], None]) -> MemoryResult:
    """One subprocess per (shape, lib, method): see the module docstring."""
    res = MemoryResult(n)
    for shape in shapes:
        for lib in libs:
            for method in ("rss", "tracemalloc"):
                lines, rc, err = run_worker({"task": "memory", "lib": lib, "shape": shape, "n": n, "method": method}, timeout=300)
                rec = next((x for x in lines if "bytes" in x), None)
                if rec is not None:
                    res.bytes[(shape, lib, method)] = int(rec["bytes"])
                else:
                    res.errors[(shape, lib, method)] = f"exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}"
            log(f"  memory {shape} {lib} done")
    return res


def _proc_status(key: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def _memory_worker(task: dict[str, Any]) -> None:
    modname, fname = MEMORY_LIBS[task["lib"]]
    if task["lib"] == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import importlib

    flatten = getattr(importlib.import_module(modname), fname)
    tree = build_shape(task["shape"], int(task["n"]))
    flatten(build_shape(task["shape"], 100))  # warm any lazy initialisation
    gc.collect()
    gc.disable()
    if task["method"] == "tracemalloc":
        import tracemalloc

        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        out = flatten(tree)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        extra = peak - before
    else:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (VmHWM)
            before_rss = _proc_status("VmRSS")
            out = flatten(tree)
            peak_rss = _proc_status("VmHWM")
            assert before_rss is not None and peak_rss is not None
            extra = peak_rss - before_rss
        except (OSError, AssertionError):
            before_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            out = flatten(tree)
            extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before_max
    del out
    print(json.dumps({"bytes": extra}), flush=True)


def run_worker(task: dict[str, Any], timeout: float) -> tuple[list[dict[str, Any]], int, str]:
    """Run this file as a subprocess on ``task``; its JSON output lines, exit code, stderr."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), json.dumps(task)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return lines, -999, f"timeout after {time.monotonic() - start:.0f} s"
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return lines, proc.returncode, proc.stderr


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    {"memory": _memory_worker, "probe_chain": _probe_chain_worker, "scaling": _scaling_worker}[job["task"]](job)
