"""Who writes a replicated tree: ``save_sharded`` from 2 processes (jax.distributed on loopback).

Starts 2 processes with 2 host devices each; every array of a tree of about 200 MB is
replicated on all 4 devices.  Each process reports the bytes of the piece it wrote and the wall
time of the save (from a barrier before to the return: the barriers inside make the slowest
process's time everyone's).  ``--src`` runs another checkout's ``src`` (to compare before and
after a change); ``--repeat`` saves that many times and keeps the best time.

    python benchmarks/bench_replicated_writers.py [--src PATH/src] [--mb 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, pid, folder, mb, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import spruce.io
    mesh = Mesh(np.array(jax.devices()), ("x",))
    rep = NamedSharding(mesh, P())
    # about `mb` MB: one array of a quarter, the rest in arrays of 4 MiB and 64 KiB
    sizes = [mb * (1 << 20) // 4] + [4 << 20] * ((mb - mb // 4 - 2) // 4) + [64 << 10] * 32
    tree = {}
    for i, n in enumerate(sizes):
        host = np.full((n // 4096, 1024), i, np.float32)
        tree[f"a{i:03d}"] = jax.make_array_from_callback(host.shape, rep, lambda idx, h=host: h[idx])
    total = sum(x.nbytes for x in tree.values())
    best = None
    for r in range(repeat):
        d = os.path.join(folder, f"r{r}")
        multihost_utils.sync_global_devices(f"start{r}")
        t = time.perf_counter()
        spruce.io.save_sharded(d, tree)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    mine = [f for f in os.listdir(d) if f.endswith(f"-{pid:05d}-of-00002.safetensors")]
    written = sum(os.path.getsize(os.path.join(d, f)) for f in mine)
    print(json.dumps({"process": pid, "tree_bytes": total, "written_bytes": written, "seconds": round(best, 3)}))
    """
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(args.src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="spruce-bench-") as folder:
        port = _free_port()
        procs = [
            subprocess.Popen([sys.executable, "-c", WORKER, str(port), str(i), folder, str(args.mb), str(args.repeat)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(2)
        ]
        rows = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise SystemExit(f"a worker failed:\n{err[-3000:]}")
            rows.append(json.loads(out.strip().splitlines()[-1]))
    for r in rows:
        share = r["written_bytes"] / r["tree_bytes"]
        print(f"process {r['process']}: wrote {r['written_bytes'] / 1e6:.1f} MB ({share:.0%} of the tree's "
              f"{r['tree_bytes'] / 1e6:.1f} MB), save {r['seconds']:.2f} s")


if __name__ == "__main__":
    main()
