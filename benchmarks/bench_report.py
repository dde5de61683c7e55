"""The markdown report (docs/benchmarks.md) and the chart (docs/benchmarks.png).

Everything here is derived from a :class:`Results`; nothing is timed.  Ratio definitions are
those of :mod:`bench_timing`: spruce/peer is the median over rounds of the per-round quotient,
so below 1 means spruce is faster.  "Fastest peer" of a (tree, op) is the peer library against
which spruce's ratio is highest there (the hardest comparison; with a noisy machine the peer
of lowest median time can give a lower ratio than another peer); spruce-pure (the uncompiled
build) is never a peer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench_libs import OP_GROUPS, OP_TITLES, OPS, TARGETS, Library
from bench_scaling import SCALING_OPS, MemoryResult, ScalingResult
from bench_timing import Series, geomean
from bench_trees import TreeCase

SPRUCE = "spruce"
PURE = "spruce-pure"


@dataclass
class Results:
    """Everything one run measured."""

    libs: list[Library]
    missing: list[str]
    cases: list[TreeCase]
    series: dict[tuple[str, str], Series]  # (tree, op) -> per-round times of each library
    na: dict[tuple[str, str, str], str]  # (tree, op, lib) -> why it is not timed
    leaf_counts: dict[tuple[str, str], int | None]  # (tree, lib) -> leaves that lib sees
    default_limit_failures: dict[str, list[str]]  # tree -> "lib: ops" that fail at the default recursion limit
    settings: dict[str, Any]
    machine: dict[str, str]
    scaling: ScalingResult | None = None
    memory: MemoryResult | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def peers(self) -> list[str]:
        return [lib.name for lib in self.libs if not lib.is_spruce]

    @property
    def has_pure(self) -> bool:
        return any(lib.name == PURE for lib in self.libs)

    def fastest(self, tree: str, op: str) -> str | None:
        s = self.series.get((tree, op))
        if s is None:
            return None
        timed = [p for p in self.peers if p in s.times and SPRUCE in s.times]
        if not timed:
            timed = [p for p in self.peers if p in s.times]
            return min(timed, key=s.median) if timed else None
        return max(timed, key=lambda p: s.ratio(SPRUCE, p))

    def ratio(self, tree: str, op: str, peer: str | None, who: str = SPRUCE) -> float | None:
        """who/peer for one cell (peer None: the fastest peer); None when either is untimed."""
        s = self.series.get((tree, op))
        if peer is None:
            peer = self.fastest(tree, op)
        if s is None or peer is None or peer not in s.times or who not in s.times:
            return None
        return s.ratio(who, peer)

    def op_geomean(self, op: str, peer: str | None, who: str = SPRUCE) -> tuple[float, int]:
        vals = [r for c in self.cases if (r := self.ratio(c.name, op, peer, who)) is not None]
        return geomean(vals), len(vals)

    def op_worst(self, op: str) -> tuple[float, str]:
        cells = [(r, c.name) for c in self.cases if (r := self.ratio(c.name, op, None)) is not None]
        return max(cells) if cells else (math.nan, "-")


# ---------------------------------------------------------------------------------------------
# formatting helpers


def fmt_ratio(r: float | None) -> str:
    """2 decimals; 2 significant digits below 0.1; 1 decimal from 10."""
    if r is None or math.isnan(r):
        return "n/a"
    if r < 0.1:
        return f"{r:.2g}"
    return f"{r:.2f}" if r < 10 else f"{r:.1f}"


def fmt_time(seconds: float) -> str:
    """A time per call with 3 significant digits in ns/µs/ms."""
    for unit, scale in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3)):
        v = seconds / scale
        if v < 1000:
            return f"{v:.3g} {unit}"
    return f"{seconds:.3g} s"


def fmt_bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    seps = [":---" if a == "l" else "---:" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(seps) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


_VERDICT = {True: "PASS", False: "**FAIL**", None: "—"}  # a target met, missed, or not set


def _target_status(res: Results, op: str) -> tuple[str, bool | None]:
    t = TARGETS.get(op)
    if t is None:
        return "—", None
    g, n = res.op_geomean(op, None)
    if n == 0:
        return "—", None
    ok = g <= t.geomean_max
    text = f"geomean ≤ {t.geomean_max:g}"
    if t.single_max is not None:
        worst, _ = res.op_worst(op)
        ok = ok and worst <= t.single_max
        text += f", every tree ≤ {t.single_max:g}"
    return text, ok


# ---------------------------------------------------------------------------------------------
# markdown


def headline_table(res: Results) -> list[str]:
    """Per-op geometric means over trees: vs fastest peer, vs each peer, targets."""
    header = ["op", "spruce / fastest peer", "worst tree", "target", "pass?"]
    header += [f"spruce / {p}" for p in res.peers]
    if res.has_pure:
        header += ["spruce-pure / fastest peer"]
    rows = []
    for op in OPS:
        g, n = res.op_geomean(op, None)
        worst, wtree = res.op_worst(op)
        text, ok = _target_status(res, op)
        row = [f"`{op}`", f"**{fmt_ratio(g)}**" if n else "n/a", f"{fmt_ratio(worst)} ({wtree})" if n else "n/a", text,
               _VERDICT[ok]]
        for p in res.peers:
            gp, np_ = res.op_geomean(op, p)
            row.append(f"{fmt_ratio(gp)} ({np_})" if np_ else "n/a")
        if res.has_pure:
            gp, np_ = res.op_geomean(op, None, PURE)
            row.append(fmt_ratio(gp) if np_ else "n/a")
        rows.append(row)
    return _table(header, rows)


def group_table(res: Results) -> list[str]:
    header = ["op group", "ops", "spruce / fastest peer"] + (["spruce-pure / fastest peer"] if res.has_pure else [])
    rows = []
    for group, ops in OP_GROUPS.items():
        vals = [r for op in ops for c in res.cases if (r := res.ratio(c.name, op, None)) is not None]
        row = [group, ", ".join(f"`{o}`" for o in ops), fmt_ratio(geomean(vals))]
        if res.has_pure:
            pv = [r for op in ops for c in res.cases if (r := res.ratio(c.name, op, None, PURE)) is not None]
            row.append(fmt_ratio(geomean(pv)))
        rows.append(row)
    return _table(header, rows, ["l", "l"] + ["r"] * (len(header) - 2))


PURE_MAP_MAX = 3.0  # target: the uncompiled build stays within 3x of the compiled one on map


def pure_table(res: Results) -> list[str]:
    """The uncompiled build against the compiled one, per op (the same rounds' medians)."""
    header = ["op", "spruce-pure / spruce", "worst tree", "target", "pass?"]
    rows = []
    for op in OPS:
        cells = [(r, c.name) for c in res.cases if (r := res.ratio(c.name, op, SPRUCE, PURE)) is not None]
        if not cells:
            continue
        g = geomean([r for r, _ in cells])
        worst, wtree = max(cells)
        target, ok = ("—", None)
        if op == "map":
            target, ok = f"geomean ≤ {PURE_MAP_MAX:g}", g <= PURE_MAP_MAX
        rows.append([f"`{op}`", fmt_ratio(g), f"{fmt_ratio(worst)} ({wtree})", target, _VERDICT[ok]])
    return _table(header, rows)


def ratio_table(res: Results) -> list[str]:
    """Every (tree, op): fastest peer, spruce/fastest, spruce/each peer, pure, times."""
    header = ["tree", "op", "fastest peer", "spruce / fastest"] + [f"/ {p}" for p in res.peers]
    if res.has_pure:
        header.append("pure / fastest")
    header += ["spruce time", "fastest time"]
    rows = []
    for c in res.cases:
        for op in OPS:
            s = res.series.get((c.name, op))
            fast = res.fastest(c.name, op)
            row = [c.name, f"`{op}`", fast or "—"]
            r = res.ratio(c.name, op, None)
            row.append(f"**{fmt_ratio(r)}**" if r is not None and r > 1.5 else fmt_ratio(r))
            for p in res.peers:
                rp = res.ratio(c.name, op, p)
                row.append(fmt_ratio(rp) if rp is not None else _na_text(res, c.name, op, p))
            if res.has_pure:
                row.append(fmt_ratio(res.ratio(c.name, op, None, PURE)))
            row.append(fmt_time(s.median(SPRUCE)) if s is not None and SPRUCE in s.times else "—")
            row.append(fmt_time(s.median(fast)) if s is not None and fast else "—")
            rows.append(row)
    return _table(header, rows, ["l", "l", "l"] + ["r"] * (len(header) - 3))


def _na_text(res: Results, tree: str, op: str, lib: str) -> str:
    why = res.na.get((tree, op, lib))
    return f"n/a ({why})" if why and why.startswith("raises") else "n/a"


def worst_cells(res: Results, k: int = 8) -> list[str]:
    cells = sorted(
        ((r, c.name, op) for c in res.cases for op in OPS if (r := res.ratio(c.name, op, None)) is not None), reverse=True
    )
    rows = [[c, f"`{op}`", res.fastest(c, op) or "—", fmt_ratio(r)] for r, c, op in cells[:k]]
    return _table(["tree", "op", "fastest peer", "spruce / fastest"], rows, ["l", "l", "l", "r"])


def scaling_section(sc: ScalingResult) -> list[str]:
    out: list[str] = []
    libs = sorted({k[2] for k in sc.times} | {k[2] for k in sc.instructions}, key=lambda x: (x != SPRUCE, x))
    for shape in ("flat list", "balanced tree", "chain"):
        unit = "level" if shape == "chain" else "leaf"
        sizes = sorted({k[1] for k in sc.times if k[0] == shape} | {k[1] for k in sc.failures if k[0] == shape})
        if sizes:
            out.append(f"**{shape}** — ns per {unit} ({'depth' if shape == 'chain' else 'leaves'} in the first column)")
            out.append("")
            out += _per_unit(sc, sc.times, shape, sizes, libs, lambda t: f"{t * 1e9:.1f}")
            growth = _growths(sc.times, shape, libs)
            if growth:
                out.append("Per-" + unit + " cost growth, largest size vs 1,000 (≈1 is linear): " + growth + ".")
                out.append("")
        sizes = sorted({k[1] for k in sc.instructions if k[0] == shape})
        if sizes:
            out += [f"Instructions per {unit} (callgrind; the work alone, which caches and other tenants do not change):", ""]
            out += _per_unit(sc, sc.instructions, shape, sizes, libs, lambda c: f"{c:,.0f}")
            growth = _growths(sc.instructions, shape, libs)
            if growth:
                out.append(f"Instructions per {unit}, largest size vs 1,000: " + growth + ".")
                out.append("")
    return out


Table = dict[tuple[str, int, str, str], float]  # a figure per call, per (shape, size, lib, op)


def _per_unit(
    sc: ScalingResult, table: Table, shape: str, sizes: list[int], libs: list[str], fmt: Callable[[float], str]
) -> list[str]:
    """The lines of one shape's table of ``table``'s figures divided by the size (per leaf, or
    per level), a column per (op, lib); a missing cell shows why (a crash) or a dash."""
    header = ["n"] + [f"{lib} {op}" for op in SCALING_OPS for lib in libs]
    rows = []
    for n in sizes:
        row = [f"{n:,}"]
        for op in SCALING_OPS:
            for lib in libs:
                v = table.get((shape, n, lib, op))
                row.append(fmt(v / n) if v is not None else (sc.failures.get((shape, n, lib)) or "—"))
        rows.append(row)
    return _table(header, rows) + [""]


def _growths(table: Table, shape: str, libs: list[str]) -> str:
    """``lib op ×g (base→top)`` of every (lib, op) of a shape that has two sizes, joined."""
    growth = []
    for lib in libs:
        for op in SCALING_OPS:
            g = growth_factor(table, shape, lib, op)
            if g is not None:
                growth.append(f"{lib} {op} ×{g[0]:.2f} ({g[1]:,}→{g[2]:,})")
    return "; ".join(growth)


def growth_factor(table: Table, shape: str, lib: str, op: str) -> tuple[float, int, int] | None:
    """(per-unit figure at the largest size) / (at 1,000 or the nearest size), and those sizes,
    of a table of times or instruction counts."""
    sizes = sorted(n for (s, n, lb, o) in table if s == shape and lb == lib and o == op)
    if len(sizes) < 2:
        return None
    base = min(sizes, key=lambda n: abs(math.log10(n) - 3))
    top = sizes[-1]
    if top <= base:
        return None
    return (table[(shape, top, lib, op)] / top) / (table[(shape, base, lib, op)] / base), base, top


def memory_section(mem: MemoryResult) -> list[str]:
    shapes = sorted({k[0] for k in mem.bytes} | {k[0] for k in mem.errors})
    libs = sorted({k[1] for k in mem.bytes} | {k[1] for k in mem.errors}, key=lambda x: (x != SPRUCE, x != "jax", x))
    rows = []
    for shape in shapes:
        for lib in libs:
            cells = []
            for method in ("rss", "tracemalloc"):
                b = mem.bytes.get((shape, lib, method))
                cells.append(fmt_bytes(b) if b is not None else f"error ({mem.errors.get((shape, lib, method), '?')})")
            rows.append([shape, lib, *cells])
    out = [f"Peak extra memory of one `flatten` of a {mem.n:,}-leaf tree (result included), one fresh subprocess per cell:", ""]
    header = ["tree", "library", "peak RSS − RSS before", "tracemalloc peak (Python allocator only)"]
    out += _table(header, rows, ["l", "l", "r", "r"])
    return out


def markdown(res: Results, chart_name: str | None) -> str:
    st, m = res.settings, res.machine
    lines = [
        "# spruce benchmarks",
        "",
        f"Generated by `{st['command']}` on {m['date']} — regenerate, do not edit by hand.",
        "",
        "Ratios are **spruce time / peer time** (below 1: spruce is faster), measured in one process with the "
        "libraries interleaved; see *Method* at the end. `spruce` is the compiled (mypyc) build, `spruce-pure` the "
        "same source run as plain Python.",
        "",
        "## Setup",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory']}; {m['platform']}; load average {m['load']} at start, "
        f"{m.get('load_end', '?')} at the end (other tenants share the machine: hence ratios)",
        f"- Python {m['python']}; spruce source: {m.get('source', '?')}",
    ]
    for lib in res.libs:
        lines.append(f"- {lib.name} {lib.version}")
    if res.missing:
        lines.append(f"- not installed (skipped): {', '.join(res.missing)}")
    lines.append(f"- {st['rounds']} rounds per (tree, op), samples of ~{st['target'] * 1e3:g} ms, mode: {st['mode']}; "
                 f"the run took {m.get('minutes', '?')} min")
    lines.append("")
    if chart_name:
        lines += [f"![ratios]({chart_name})", ""]
    lines += ["## Headline: geometric mean over trees, per op", "", "Compiled build vs the fastest peer of each (tree, op); "
              "the peer columns give the geometric mean vs that peer over the trees it handles (their count in parentheses). "
              "Targets are reported, not enforced.", ""]
    lines += headline_table(res)
    lines += ["", "Per op group (geometric mean over every (tree, op) cell of the group):", ""]
    lines += group_table(res)
    if res.has_pure:
        lines += ["", "The uncompiled build (the fallback) against the compiled one, geometric mean over trees:", ""]
        lines += pure_table(res)
    lines += ["", "## Worst cells (spruce / fastest peer)", ""]
    lines += worst_cells(res)
    lines += ["", "## Every (tree, op)", "", "Trees:", ""]
    for c in res.cases:
        counts = ", ".join(f"{lib}: {n}" for (t, lib), n in res.leaf_counts.items() if t == c.name and n is not None)
        lines.append(f"- `{c.name}` — {c.title}. Leaves seen: {counts}.")
    lines += [""]
    lines += ratio_table(res)
    if res.scaling is not None:
        lines += ["", "## Scaling", "",
                  "Median time per call divided by the number of leaves (per level for the chain). A flat row means linear "
                  "cost; growth at 10^5–10^6 with a flat instruction row below it is the memory hierarchy's (the tree, its "
                  "leaves and the result no longer fit in the caches), and it comes for every library. Everything here runs "
                  "in one fresh subprocess, every (size, library) of a (shape, op) interleaved. jax's chain depths are first "
                  "probed in another subprocess with Python's recursion limit raised past the depth; a depth where jax "
                  "crashes is reported, not timed.", ""]
        lines += scaling_section(res.scaling)
        lines += [f"{note}" for note in res.scaling.notes]
    if res.memory is not None:
        lines += ["", "## Memory", ""]
        lines += memory_section(res.memory)
    lines += ["", "## Method", ""]
    lines += ["- Ops: " + "; ".join(f"`{op}`: {OP_TITLES[op]}" for op in OPS) + "."]
    lines += [
        "- For each (tree, op), each library's call is calibrated so one sample lasts ~"
        f"{st['target'] * 1e3:g} ms; then {st['rounds']} rounds run, each taking one sample per library in an order "
        "rotated every round (timeit loop, garbage collector off during a sample).",
        "- A library's time is the median of its per-round times per call. A ratio spruce/peer is the median over "
        "rounds of the per-round quotient, so drift of the shared machine cancels; the \"fastest peer\" of a cell is the "
        "peer against which that ratio is highest (the hardest comparison). Geometric means are over trees.",
        "- Mapped functions are trivial (`lambda x: x`, `lambda x, y: x`), the fold counts leaves: library "
        "overhead is what is timed. `treedef_eq` compares two equal, distinct treedefs; `treedef_hash` hashes the "
        "same treedef repeatedly (spruce caches the hash after the first call, so its figure is a cache hit).",
        "- Nearest equivalents: dm-tree `flatten`/`leaves` → `tree.flatten` (leaves only, no structure object), "
        "`unflatten` → `tree.unflatten_as(tree, leaves)`, `map`/`map2` → `map_structure`, `flatten_with_path` → "
        "`flatten_with_path`; it has no structure object, fold or custom nodes (n/a). torch.utils._pytree has no "
        "fold (n/a). optree calls on the dataclass and module trees pass the registration namespace.",
        "- None: a leafless node in spruce, jax and optree; a leaf in dm-tree and torch (they see more leaves in "
        "`opt_state`).",
        "- The dataclass tree registers the same classes with each library's API: `spruce.tree.register_dataclass`, "
        "`jax.tree_util.register_dataclass`, `optree.register_pytree_node` (namespace), "
        "`torch.utils._pytree.register_pytree_node` (with `flatten_with_keys_fn`).",
        "- The module tree is made of `spruce.Module` subclasses (Linear, LayerNorm, Block, Model; sizes and `eps` "
        "are static fields). spruce registers them itself, and with jax.tree_util too (spruce's JAX bridge); "
        "the uncompiled build gets the same node functions Module makes; optree and torch get the same `__dict__` "
        "reads and writes through their registration APIs. Flattening a module runs its (Python) node function "
        "in every library, so this tree times that call as much as the library.",
    ]
    for tree, fails in res.default_limit_failures.items():
        if fails:
            lines.append(f"- `{tree}` is timed with `sys.setrecursionlimit(10000)`; at Python's default limit these fail on it: "
                         + "; ".join(fails) + ".")
        else:
            lines.append(f"- `{tree}` is timed with `sys.setrecursionlimit(10000)`; "
                         "every library also handles it at the default limit.")
    for note in res.notes:
        lines.append(f"- {note}")
    lines.append("")
    return "\n".join(lines)


def stdout_summary(res: Results) -> str:
    """What the command prints: the headline and the full ratio table."""
    out = ["## Headline: geometric mean over trees, per op (spruce / peer)", ""]
    out += headline_table(res)
    out += ["", "## Every (tree, op)", ""]
    out += ratio_table(res)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# chart


def chart(res: Results, path: Path) -> bool:
    """Write the PNG; False (nothing written) when matplotlib is not installed.

    Row 1: heatmap of spruce / fastest peer per (tree, op).  Row 2: per-op geometric means
    against each peer, with the targets.  Row 3: flatten and map time per leaf against size.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import TwoSlopeNorm
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        return False
    import numpy as np

    trees = [c.name for c in res.cases]
    op_labels = [o.replace("_", "_\n", 1) if len(o) > 10 else o for o in OPS]
    sc = res.scaling if res.scaling is not None and res.scaling.times else None
    fig = plt.figure(figsize=(16, 19 if sc else 13), dpi=100)
    rows = 3 if sc else 2
    gs = fig.add_gridspec(rows, 3, height_ratios=[1.25, 0.9, 0.8][:rows], hspace=0.3, wspace=0.25, top=0.95, bottom=0.04)

    # (1) heatmap of spruce / fastest peer; colours clipped at 1/8 and 8
    ax = fig.add_subplot(gs[0, :])
    lim = 3.0
    grid = np.full((len(trees), len(OPS)), np.nan)
    for i, t in enumerate(trees):
        for j, op in enumerate(OPS):
            r = res.ratio(t, op, None)
            if r is not None:
                grid[i, j] = max(-lim, min(lim, math.log2(r)))
    cmap = plt.get_cmap("RdYlGn_r").copy()
    cmap.set_bad("#dddddd")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=TwoSlopeNorm(0.0, -lim, lim), aspect="auto")
    ax.set_xticks(range(len(OPS)), op_labels, fontsize=10)
    ax.set_yticks(range(len(trees)), trees, fontsize=10)
    for i, t in enumerate(trees):
        for j, op in enumerate(OPS):
            r = res.ratio(t, op, None)
            label = f"{fmt_ratio(r)}\n{res.fastest(t, op)}" if r is not None else "n/a"
            ax.text(j, i, label, ha="center", va="center", fontsize=9)
    cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01)
    cb.set_ticks([-3, -2, -1, 0, 1, 2, 3], labels=["≤1/8", "1/4", "1/2", "1", "2", "4", "≥8"])
    cb.set_label("spruce / fastest peer")
    ax.set_title("spruce (compiled) time / fastest peer time — green: spruce faster, red: slower; "
                 "each cell: ratio and the fastest peer", fontsize=11)

    # (2) per-op geometric means vs each peer
    axb = fig.add_subplot(gs[1, :])
    series: list[tuple[str, str | None, str]] = [("spruce / fastest peer", None, SPRUCE)]
    series += [(f"spruce / {p}", p, SPRUCE) for p in res.peers]
    if res.has_pure:
        series.append(("spruce-pure / fastest peer", None, PURE))
    width = 0.84 / len(series)
    x = np.arange(len(OPS))
    floor = 0.02
    for k, (label, peer, who) in enumerate(series):
        vals = [res.op_geomean(op, peer, who)[0] for op in OPS]
        xs = x + (k - (len(series) - 1) / 2) * width
        hs = [max(v, floor) if not math.isnan(v) else 0.0 for v in vals]
        axb.bar(xs, hs, width, label=label, color="black" if who == SPRUCE and peer is None else None,
                hatch="//" if who == PURE else None, alpha=0.55 if who == PURE else 1.0)
        if who == SPRUCE and peer is None:
            for xi, v in zip(xs, vals):
                if not math.isnan(v):
                    axb.text(xi, max(v, floor) * 1.08, fmt_ratio(v), ha="center", va="bottom", fontsize=8, rotation=90)
    for j, op in enumerate(OPS):
        target = TARGETS.get(op)
        if target is not None:
            axb.plot([j - 0.45, j + 0.45], [target.geomean_max] * 2, color="red", lw=1.8, ls="--")
    axb.axhline(1.0, color="gray", lw=0.8)
    axb.set_yscale("log")
    axb.set_ylim(floor * 0.8, 40)
    axb.set_xticks(x, op_labels, fontsize=10)
    axb.set_ylabel("spruce / peer, geometric mean over trees")
    axb.set_title("Per-op geometric means (black: vs fastest peer, labelled; red dashes: targets; bars cut at 0.02)", fontsize=11)
    axb.legend(fontsize=8.5, ncol=len(series), loc="upper center")
    axb.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    # (3) scaling: ns per leaf (per level for the chain), flatten and map, spruce vs jax
    if sc is not None:
        colors = {"spruce": "tab:green", "jax": "tab:blue"}
        for col, shape in enumerate(("flat list", "balanced tree", "chain")):
            axc = fig.add_subplot(gs[2, col])
            for lib, color in colors.items():
                for op, ls in (("flatten", "-"), ("map", "--")):
                    pts = sorted(
                        (n, t / n * 1e9) for (s, n, lb, o), t in sc.times.items() if s == shape and lb == lib and o == op
                    )
                    if pts:
                        axc.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, color=color, marker="o", ms=4,
                                 label=f"{lib} {op}")
            for (s, n, lb), why in sc.failures.items():
                if s == shape and lb == "jax" and "crash" in why:
                    axc.axvline(n, color="tab:blue", lw=1, ls=":")
                    axc.text(n, axc.get_ylim()[1], " jax crashes", color="tab:blue", fontsize=8, va="top", rotation=90)
            axc.set_xscale("log")
            axc.set_yscale("log")
            axc.set_xlabel("depth" if shape == "chain" else "leaves")
            axc.set_ylabel(f"ns per {'level' if shape == 'chain' else 'leaf'}")
            axc.set_title(f"Scaling, {shape} (flat line = linear cost)", fontsize=11)
            axc.legend(fontsize=8)
            axc.grid(True, which="both", alpha=0.25)
            axc.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axc.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axc.yaxis.set_minor_formatter(NullFormatter())
    m = res.machine
    fig.suptitle(f"spruce benchmarks ({res.settings['mode']} run) — {m['cpu']}, {m['cores']} cores, "
                 f"Python {m['python']}, {m['date']}", fontsize=13, y=0.975)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True
