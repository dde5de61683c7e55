"""Scaling (time per leaf / per level against size) and peak memory of flatten.

Scaling.  flatten, unflatten, map and flatten_with_path are timed for spruce and jax on a flat
list and a balanced tree (branching 10, alternating dict/list levels) of 10 .. 1,000,000
leaves, interleaved per size as in :mod:`bench_timing`, and reported as nanoseconds per leaf:
a linear-cost implementation gives a flat curve.  The chain (nested single-element lists)
goes from depth 10 to 100,000 and is reported per level.  jax recurses in C++ on the chain, so
its chain runs in a subprocess (with Python's recursion limit raised past the depth, since at
the default limit jax raises at depth ~1,000), where a crash only ends that subprocess and is
reported as such.

Memory.  The peak extra memory of one flatten of a 1,000,000-leaf tree is measured in a fresh
subprocess per (library, tree): the process builds the tree, collects garbage, resets the
kernel's peak-RSS mark (``/proc/self/clear_refs``; ``ru_maxrss`` is the fallback), flattens,
and reports peak RSS minus the RSS before the call (it includes the returned leaves list and
treedef).  A second subprocess reports tracemalloc's peak for the same call, which sees only
allocations made through Python's allocator (not a C++ library's own heap).

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

import bench_trees  # noqa: E402
from bench_timing import interleave  # noqa: E402

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

        return {"flatten": jtu.tree_flatten, "unflatten": jtu.tree_unflatten, "map": jtu.tree_map, "flatten_with_path": jtu.tree_flatten_with_path}
    raise ValueError(lib)


def _timers(fns: dict[str, Any], tree: Any) -> dict[str, timeit.Timer]:
    leaves, td = fns["flatten"](tree)
    env = {"t": tree, "td": td, "L": leaves, "f": _ident, **{k.upper(): v for k, v in fns.items()}}
    stmts = {"flatten": "FLATTEN(t)", "unflatten": "UNFLATTEN(td, L)", "map": "MAP(f, t)", "flatten_with_path": "FLATTEN_WITH_PATH(t)"}
    return {op: timeit.Timer(stmts[op], globals=env) for op in SCALING_OPS}


@dataclass
class ScalingResult:
    """Seconds per call, per (shape, size, lib, op); and notes on failures."""

    times: dict[tuple[str, int, str, str], float] = field(default_factory=dict)
    failures: dict[tuple[str, int, str], str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def spruce_deep_threshold() -> int | None:
    """spruce's depth past which walks start cycle detection (``_errors.DEEP``), if exposed.

    The chain is also timed at this depth and one level less, to show the cost of the guard.
    """
    try:
        from spruce._tree import _errors

        deep = getattr(_errors, "DEEP", None)
    except ImportError:
        return None
    return int(deep) if isinstance(deep, int) else None


def _interleave_sizes(trees: dict[int, Any], libs: list[str], fns: dict[str, dict[str, Any]], rounds: int, target: float, res: ScalingResult, shape: str) -> None:
    """Per op, one interleaved run over every (size, library): drift hits every size alike,
    so the shape of the per-leaf curve is not an artefact of when each size ran."""
    timers = {(n, lib): _timers(fns[lib], tree) for n, tree in trees.items() for lib in libs}
    for op in SCALING_OPS:
        series = interleave({f"{lib}@{n}": t[op] for (n, lib), t in timers.items()}, rounds, target)
        for n, lib in timers:
            res.times[(shape, n, lib, op)] = series.median(f"{lib}@{n}")


def run_scaling(sizes: list[int], depths: list[int], with_jax: bool, rounds: int, target: float, log: Callable[[str], None]) -> ScalingResult:
    """Time the scaling ops: spruce and jax interleaved in process, except jax's chain."""
    res = ScalingResult()
    libs = ["spruce"] + (["jax"] if with_jax else [])
    fns = {lib: _lib_fns(lib) for lib in libs}
    for shape in ("flat list", "balanced tree"):
        _interleave_sizes({n: build_shape(shape, n) for n in sizes}, libs, fns, rounds, target, res, shape)
        gc.collect()
        log(f"  scaling {shape} done")
    deep = spruce_deep_threshold()
    if deep is not None and depths[0] < deep <= depths[-1]:
        depths = sorted(set(depths) | {deep - 1, deep})
        res.notes.append(
            f"spruce starts cycle detection once a walk is deeper than {deep:,} levels (`spruce._tree._errors.DEEP`); "
            f"the chain is timed at depths {deep - 1:,} and {deep:,} to show what that costs per level."
        )
    _interleave_sizes({d: build_shape("chain", d) for d in depths}, ["spruce"], fns, rounds, target, res, "chain")
    gc.collect()
    log("  scaling chain (spruce) done")
    if with_jax:
        task = {"task": "chain", "lib": "jax", "depths": depths, "rounds": rounds, "target": target}
        lines, rc, err = run_worker(task, timeout=900)
        started: int | None = None
        for rec in lines:
            if "start" in rec:
                started = rec["start"]
            elif "error" in rec:
                res.failures[("chain", rec["depth"], "jax")] = rec["error"]
                started = None
            elif "done" in rec:
                started = None
            else:
                res.times[("chain", rec["depth"], "jax", rec["op"])] = rec["time"]
        if rc != 0 and started is not None:
            why = f"crashed (signal {-rc})" if rc < 0 else f"exit {rc}"
            res.failures[("chain", started, "jax")] = why
            for d in depths:
                if d > started:
                    res.failures[("chain", d, "jax")] = "not run (crashed at a smaller depth)"
        elif rc != 0:
            res.notes.append(f"jax chain worker exited {rc}: {err.strip()[-300:]}")
        log("  scaling chain (jax subprocess) done")
    return res


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


def _chain_worker(task: dict[str, Any]) -> None:
    fns = _lib_fns(task["lib"])
    for d in task["depths"]:
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 3 * d + 1000))
        print(json.dumps({"start": d}), flush=True)
        tree = build_shape("chain", d)
        try:
            timers = _timers(fns, tree)
            for op in SCALING_OPS:
                t = interleave({"x": timers[op]}, task["rounds"], task["target"]).median("x")
                print(json.dumps({"depth": d, "op": op, "time": t}), flush=True)
        except Exception as e:
            print(json.dumps({"depth": d, "error": f"raises {type(e).__name__}"}), flush=True)
            continue
        print(json.dumps({"done": d}), flush=True)


def run_worker(task: dict[str, Any], timeout: float) -> tuple[list[dict[str, Any]], int, str]:
    """Run this file as a subprocess on ``task``; its JSON output lines, exit code, stderr."""
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(task)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return [json.loads(x) for x in out.splitlines() if x.startswith("{")], -999, f"timeout after {time.monotonic() - start:.0f} s"
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return lines, proc.returncode, proc.stderr


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    {"memory": _memory_worker, "chain": _chain_worker}[job["task"]](job)
