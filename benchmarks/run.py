"""spruce benchmark suite: spruce.tree against jax.tree_util, optree, dm-tree and torch.utils._pytree.

Usage::

    python benchmarks/run.py            # full run (~18 min, ~8 with --no-instructions): writes docs/benchmarks.md and .png
    python benchmarks/run.py --quick    # < 60 s, fewer rounds and sizes: writes to a temp dir
    python benchmarks/run.py --quick --write   # quick, but write docs/ anyway

Method.  Absolute times drift on a shared 2-core machine, so the suite reports *ratios*
measured in one process: for each (tree, op) every installed library runs its nearest
equivalent of the op, interleaved — several rounds, each taking one timed sample (a calibrated
``timeit`` loop) per library, in an order rotated every round.  A library's time is the median
of its per-round times; the ratio spruce/peer is the median over rounds of the per-round
quotient t_spruce / t_peer (samples seconds apart, so drift cancels).  Below 1 means spruce is
faster.  "Fastest peer" is the peer against which that ratio is highest on that (tree, op); geometric
means over trees summarise each op and op group, against the targets of
:data:`bench_libs.TARGETS` (reported, never enforced).

The compiled build is ``import spruce`` (check ``spruce.__compiled__``); the uncompiled build
is the source tree ``src/spruce`` imported a second time under the package name
``spruce_pure`` (verified uncompiled) and timed in the same rounds.

Also measured: time per leaf against size for spruce and jax (:mod:`bench_scaling`, jax's deep
chains in a subprocess), the instructions per leaf of the same calls when valgrind is installed
(callgrind, about ten minutes; ``--no-instructions`` skips them) and the peak extra memory of
flattening a 1,000,000-leaf tree, each library in its own subprocess.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_libs
import bench_report
import bench_scaling
import bench_trees
from bench_libs import NA, OPS, Bench, Library
from bench_timing import Series, interleave

#: Python's recursion limit while the deep trees are timed (recursive peers need it).
DEEP_RECURSION_LIMIT = 10_000


class Settings:
    """Run parameters of one mode."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.rounds = 5 if quick else 21
        self.target = 0.002 if quick else 0.02  # seconds per sample
        self.scaling_sizes = [10, 100, 1_000, 10_000] if quick else [10, 100, 1_000, 10_000, 100_000, 1_000_000]
        self.scaling_depths = [10, 100, 1_000] if quick else [10, 100, 1_000, 10_000, 100_000]
        self.scaling_rounds = 3 if quick else 7
        self.scaling_target = 0.002 if quick else 0.03
        # callgrind counts (bench_scaling.run_instructions): none when quick (valgrind starts slowly);
        # 10^6 is left out, its count per leaf being the 10^5 one (measured) at minutes per cell
        self.instruction_sizes: list[int] = [] if quick else [10, 100, 1_000, 10_000, 100_000]
        self.instruction_depths: list[int] = [] if quick else [10, 100, 1_000, 10_000, 100_000]
        self.memory_n = 100_000 if quick else 1_000_000
        self.memory_shapes = ["balanced tree"] if quick else ["flat list", "balanced tree"]


def machine_info() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 2**20:.0f} GiB RAM"
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
    }


def git_state(root: Path) -> str:
    """The commit the benchmarked source comes from, and whether src/ differs from it."""
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()

        head = git("log", "-1", "--format=%h %s")
        dirty = git("status", "--porcelain", "--", "src")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"commit {head}" + (" (src/ has uncommitted changes)" if dirty else "")


def time_cases(libs: list[Library], cases: list[bench_trees.TreeCase], st: Settings, log: Callable[[str], None]) -> tuple[
    dict[tuple[str, str], Series], dict[tuple[str, str, str], str], dict[tuple[str, str], int | None], dict[str, list[str]]
]:
    """The interleaved (tree, op) measurements; see the module docstring."""
    series: dict[tuple[str, str], Series] = {}
    na: dict[tuple[str, str, str], str] = {}
    counts: dict[tuple[str, str], int | None] = {}
    limit_failures: dict[str, list[str]] = {}
    default_limit = sys.getrecursionlimit()
    for case in cases:
        if case.deep:
            fails = []
            for lib in libs:
                cells, _ = lib.benches(case)
                bad = [op for op, c in cells.items() if isinstance(c, NA) and c.reason.startswith("raises")]
                if bad:
                    reasons = sorted({c.reason for c in cells.values() if isinstance(c, NA) and c.reason.startswith("raises")})
                    fails.append(f"{lib.name} ({', '.join(bad) if len(bad) < len(OPS) else 'every op'}: {', '.join(reasons)})")
            limit_failures[case.name] = fails
            sys.setrecursionlimit(max(default_limit, DEEP_RECURSION_LIMIT))
        try:
            table: dict[str, dict[str, bench_libs.Cell]] = {}
            for lib in libs:
                table[lib.name], counts[(case.name, lib.name)] = lib.benches(case)
            for op in OPS:
                timers = {}
                for lib in libs:
                    cell = table[lib.name][op]
                    if isinstance(cell, Bench):
                        timers[lib.name] = cell.timer()
                    else:
                        na[(case.name, op, lib.name)] = cell.reason
                if timers:
                    series[(case.name, op)] = interleave(timers, st.rounds, st.target)
            log(f"  {case.name} done")
        finally:
            sys.setrecursionlimit(default_limit)
    return series, na, counts, limit_failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and sizes (< 60 s); writes to a temp dir unless --write")
    ap.add_argument("--write", action="store_true", help="with --quick: write docs/benchmarks.md and .png anyway")
    ap.add_argument("--outdir", type=Path, help="write the report here instead")
    ap.add_argument("--no-pure", action="store_true", help="skip the uncompiled build")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling and memory measurements")
    ap.add_argument("--no-instructions", action="store_true", help="skip the scaling's instruction counts (callgrind)")
    ap.add_argument("--trees", help="comma-separated tree names to run (default: all)")
    args = ap.parse_args(argv)

    st = Settings(args.quick)
    t0 = time.monotonic()
    machine = machine_info()
    machine["source"] = git_state(ROOT)

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    if args.outdir is not None:
        outdir = args.outdir
    elif not args.quick or args.write:
        outdir = ROOT / "docs"
    else:
        outdir = Path(tempfile.mkdtemp(prefix="spruce-bench-"))
    outdir.mkdir(parents=True, exist_ok=True)

    src = ROOT / "src"
    libs, missing = bench_libs.discover(None if args.no_pure or not (src / "spruce").is_dir() else src)
    notes: list[str] = []
    import spruce

    if not spruce.__compiled__:
        notes.append(
            f"`import spruce` loaded an UNCOMPILED build ({spruce.__file__}): the `spruce` column is not the mypyc build."
        )
    log("libraries: " + ", ".join(f"{lib.name} {lib.version}" for lib in libs)
        + (f"; missing: {', '.join(missing)}" if missing else ""))

    cases = bench_trees.tree_cases()
    if args.trees:
        wanted = set(args.trees.split(","))
        cases = [c for c in cases if c.name in wanted]
    series, na, counts, limit_failures = time_cases(libs, cases, st, log)

    scaling = memory = None
    names = [lib.name for lib in libs]
    if not args.no_scaling:
        log("scaling")
        scaling = bench_scaling.run_scaling(
            st.scaling_sizes, st.scaling_depths, "jax" in names, st.scaling_rounds, st.scaling_target, log
        )
        if st.instruction_sizes and not args.no_instructions:
            log("instruction counts (callgrind)")
            libs_counted = ["spruce"] + (["jax"] if "jax" in names else [])
            bench_scaling.run_instructions(scaling, st.instruction_sizes, st.instruction_depths, libs_counted, log)
        mem_libs: list[str] = (
            [n for n in ("spruce", "jax") if n in names] if args.quick else [n for n in names if n in bench_scaling.MEMORY_LIBS]
        )
        log("memory")
        memory = bench_scaling.run_memory(mem_libs, st.memory_shapes, st.memory_n, log)

    if "jax" in names:
        log("JAX-registered nodes (bench_bridge)")
        import bench_bridge

        rows = bench_bridge.run(repeat=5 if args.quick else 30, number=10 if args.quick else 50)
        notes.append(bench_bridge.note(rows, spruce.__compiled__))

    machine["load_end"] = machine_info()["load"]
    machine["minutes"] = f"{(time.monotonic() - t0) / 60:.1f}"
    command = "python benchmarks/run.py" + (" --quick" if args.quick else "")
    res = bench_report.Results(
        libs=libs, missing=missing, cases=cases, series=series, na=na, leaf_counts=counts,
        default_limit_failures=limit_failures, machine=machine, scaling=scaling, memory=memory, notes=notes,
        settings={"rounds": st.rounds, "target": st.target, "mode": "quick" if args.quick else "full", "command": command},
    )  # fmt: skip
    png = outdir / "benchmarks.png"
    wrote_png = bench_report.chart(res, png)
    md = outdir / "benchmarks.md"
    # Sections written by hand after the marker (the MiniLM figures of bench_encode.py) are kept.
    marker = "<!-- hand-written sections below: kept by benchmarks/run.py -->"
    kept = md.read_text().partition(marker)[2] if md.exists() else ""
    md.write_text(bench_report.markdown(res, png.name if wrote_png else None) + (f"\n{marker}{kept}" if kept else ""))
    print(bench_report.stdout_summary(res))
    print()
    print(f"wrote {md}" + (f" and {png}" if wrote_png else " (no chart: matplotlib is not installed)"))
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
