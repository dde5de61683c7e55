"""Sharded checkpoints of MiniLM on 8 CPU devices: spruce.io against orbax-checkpoint.

Usage::

    python benchmarks/bench_sharded.py [--rounds 3]

The model (all-MiniLM-L6-v2, 22.7 M float32 parameters, 86.6 MiB) is placed on a
``(data=2, model=4)`` mesh of 8 host CPU devices by ``Rules.fsdp(('data', 'model'))`` (about
one copy of the model over all devices), as a flat ``{dotted name: jax.Array}`` dict so that
both libraries save the same pytree.  Each measurement runs in a fresh subprocess (so that
memory high-water marks do not carry over), with the rounds of the different operations
interleaved:

- ``spruce save_sharded`` / ``spruce load``: ``spruce.io.save_sharded(dir, tree)``, and
  ``spruce.io.load(dir, like, shardings=...)`` back onto the same mesh;
- ``orbax save`` / ``orbax restore``: ``orbax.checkpoint.StandardCheckpointer`` ``save`` (+
  ``wait_until_finished``) and ``restore`` onto ``jax.ShapeDtypeStruct``s with the same
  shardings (orbax-checkpoint is not a spruce dependency: ``pip install orbax-checkpoint``);
- ``gather + save``: ``spruce.io.save(file, tree)``, which copies every array to the host
  (a gather) and writes one safetensors file.

Time is wall-clock of the one call (median over rounds); memory is the peak resident set size
during the call minus the size just before it, sampled every millisecond from
/proc/self/statm (Linux).  Also timed: ``spruce.sharding.specs`` on two 10,000-leaf trees (one
dict per leaf, the worst case; a transformer's parameters), first call and cached, beside
``jax.tree.map`` on the same tree (``--specs-only`` runs just that).
The machine these figures come from is shared and noisy: compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ["spruce save_sharded", "spruce load", "orbax save", "orbax restore", "gather + save"]

_CHILD = r"""
import gc, json, os, sys, threading, time
op, folder = sys.argv[1], sys.argv[2]
import jax, numpy as np
import spruce.io as sio, spruce.sharding as sh
from spruce.models import minilm

page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page

mesh = sh.mesh({"data": 2, "model": 4})
rules = sh.Rules.fsdp(("data", "model"))
host = {k: np.asarray(v, jax.dtypes.canonicalize_dtype(v.dtype)) for k, v in sio.flatten_names(minilm.load()).items()}
placements = sh.shardings(host, mesh, rules)
tree = None
if op in ("spruce save_sharded", "orbax save", "gather + save"):
    tree = jax.block_until_ready(sh.shard(host, mesh, rules))
    del host
if op == "spruce load":
    sio.save_sharded(os.path.join(folder, "spruce"), sh.shard(host, mesh, rules))
if op == "orbax restore":
    import orbax.checkpoint as ocp
    c = ocp.StandardCheckpointer(); c.save(os.path.join(folder, "orbax"), sh.shard(host, mesh, rules)); c.wait_until_finished()
if op.startswith("orbax"):
    import orbax.checkpoint as ocp
gc.collect()

peak = [0]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss()); time.sleep(0.001)
base = rss()
t = threading.Thread(target=sample, daemon=True); t.start()
start = time.perf_counter()
if op == "spruce save_sharded":
    sio.save_sharded(os.path.join(folder, "spruce"), tree)
elif op == "spruce load":
    out = jax.block_until_ready(sio.load(os.path.join(folder, "spruce"), like=host, shardings=placements))
elif op == "orbax save":
    c = ocp.StandardCheckpointer(); c.save(os.path.join(folder, "orbax"), tree); c.wait_until_finished()
elif op == "orbax restore":
    abstract = {
        k: jax.ShapeDtypeStruct(v.shape, jax.dtypes.canonicalize_dtype(v.dtype), sharding=placements[k])
        for k, v in host.items()
    }
    out = jax.block_until_ready(ocp.StandardCheckpointer().restore(os.path.join(folder, "orbax"), abstract))
elif op == "gather + save":
    sio.save(os.path.join(folder, "model.safetensors"), tree)
elapsed = time.perf_counter() - start
stop.set(); t.join()
peak[0] = max(peak[0], rss())
print(json.dumps({"seconds": elapsed, "peak_extra": peak[0] - base}))
"""


def _run(op: str) -> dict[str, float] | None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.run([sys.executable, "-c", _CHILD, op, folder], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        print(f"{op}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _transformer(layers: int = 625, d: int = 16) -> dict[str, Any]:
    """A transformer's parameters laid out as model code holds them: ``layers`` blocks of 16
    arrays (``layers.3.attn.q.weight``), an embedding and a final norm (10,003 leaves)."""
    import numpy as np

    def linear(n_out: int, n_in: int) -> dict[str, Any]:
        return {"weight": np.zeros((n_out, n_in), np.float32), "bias": np.zeros(n_out, np.float32)}

    def norm() -> dict[str, Any]:
        return {"weight": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)}

    def block() -> dict[str, Any]:
        return {
            "attn": {k: linear(d, d) for k in "qkvo"},
            "mlp": {"up": linear(4 * d, d), "down": linear(d, 4 * d)},
            "ln1": norm(),
            "ln2": norm(),
        }

    return {"embed": np.zeros((1000, d), np.float32), "layers": [block() for _ in range(layers)], "ln_f": norm()}


def _specs_trees() -> dict[str, tuple[Any, Any]]:
    """name -> (tree, rules) of the two 10,000-leaf trees ``specs`` is timed on (every split
    dimension is a multiple of 8)."""
    import numpy as np
    from jax.sharding import PartitionSpec as P

    import spruce.sharding as sh

    one_dict_per_leaf = {f"layer{i}": {"w": np.zeros((8, 4), np.float32)} for i in range(10_000)}
    tensor_parallel = sh.Rules(
        [
            ("layers.*.attn.?.weight", P(None, "m")),  # q, k, v split by columns ...
            ("layers.*.attn.o.weight", P("m", None)),  # ... o by rows, as Megatron does
            ("layers.*.mlp.up.weight", P(None, "m")),
            ("layers.*.mlp.down.weight", P("m", None)),
            ("**", None),
        ]
    )
    return {
        "one dict per leaf": (one_dict_per_leaf, sh.Rules([("*.w", P("m")), ("**", None)])),
        "transformer layout": (_transformer(), tensor_parallel),
    }


def _specs_timing(rounds: int = 15) -> dict[str, dict[str, float]]:
    """Milliseconds (median of ``rounds``) of ``spruce.sharding.specs`` on each of two
    10,000-leaf trees (``{'layer0': {'w': array}, ...}``, the worst case: one dict per leaf;
    and a transformer's parameters): the first call (every name matched against the rules)
    and cached calls, beside a ``jax.tree.map`` and a spruce flatten + unflatten of the same
    tree, timed in the same rounds (a cached call cannot be cheaper than one walk to read the
    structure and one to build the result)."""
    import jax

    import spruce.sharding as sh
    import spruce.tree as st

    mesh = sh.mesh({"m": jax.device_count()})  # 8 host devices (main sets XLA_FLAGS): every split is checked
    out: dict[str, dict[str, float]] = {}
    for tree_name, (tree, rules) in _specs_trees().items():
        t0 = time.perf_counter()
        sh.specs(tree, rules, mesh=mesh)
        first = time.perf_counter() - t0

        def roundtrip(tree: Any = tree) -> None:
            leaves, treedef = st.flatten(tree)
            treedef.unflatten(leaves)

        contenders = {
            "cached": lambda tree=tree, rules=rules: sh.specs(tree, rules, mesh=mesh),
            "jax.tree.map": lambda tree=tree: jax.tree.map(lambda x: x, tree),
            "flatten + unflatten": roundtrip,
        }
        times: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(rounds):
            for name, f in contenders.items():
                t0 = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t0)
        row = {"first": first * 1e3}
        row.update({k: statistics.median(v) * 1e3 for k, v in times.items()})
        out[tree_name] = row
    return out


def _print_specs_timing() -> None:
    import jax

    for tree_name, t in _specs_timing().items():
        print(
            f"spruce.sharding.specs, {tree_name} (10,000 leaves, mesh of {jax.device_count()} devices): "
            f"{t['first']:.1f} ms first call, "
            f"{t['cached']:.1f} ms cached; same rounds: jax.tree.map {t['jax.tree.map']:.1f} ms, "
            f"spruce flatten + unflatten {t['flatten + unflatten']:.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--specs-only", action="store_true", help="only time spruce.sharding.specs")
    args = parser.parse_args()
    # (before JAX starts in this process: the specs timing splits over 8 host devices)
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    if args.specs_only:
        _print_specs_timing()
        return
    try:
        import orbax.checkpoint as ocp  # noqa: F401  (only whether it is installed)

        ops = OPS
    except ImportError:
        print("orbax-checkpoint is not installed: its rows are skipped", file=sys.stderr)
        ops = [o for o in OPS if not o.startswith("orbax")]
    results: dict[str, list[dict[str, float]]] = {op: [] for op in ops}
    for r in range(args.rounds):
        for op in ops[r % len(ops):] + ops[: r % len(ops)]:  # rotated order each round
            got = _run(op)
            if got is not None:
                results[op].append(got)
    import spruce

    print(f"MiniLM (86.6 MiB float32) on a (data=2, model=4) mesh of 8 CPU devices, Rules.fsdp; "
          f"median of {args.rounds} rounds, each in a fresh process; spruce compiled: {getattr(spruce, '__compiled__', '?')}")
    print()
    print("| operation | time (s) | peak extra memory (MiB) |")
    print("|---|---:|---:|")
    for op in ops:
        rows = results[op]
        if not rows:
            print(f"| {op} | failed | |")
            continue
        t = statistics.median(r["seconds"] for r in rows)
        m = max(r["peak_extra"] for r in rows) / 2**20
        print(f"| {op} | {t:.3f} | {m:.1f} |")
    print()
    _print_specs_timing()


if __name__ == "__main__":
    main()
