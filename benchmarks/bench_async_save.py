"""How long a save blocks the caller: ``blocking=False`` against ``blocking=True``.

Usage::

    python benchmarks/bench_async_save.py [--mib 100] [--rounds 5] [--devices 1]

A tree of float32 jax.Arrays (one 4 MiB array per layer, ``--mib`` in all) on the CPU is saved
``--rounds`` times after one warm-up save, each way:

- ``save``: ``spruce.io.save(file, tree)`` (blocking) and ``spruce.io.save(file, tree,
  blocking=False)``; the time of the call only (the background write then finishes before the
  next round, as training steps would run meanwhile);
- ``manager``: ``CheckpointManager(dir).save(step, tree)`` with ``blocking=True`` and with the
  default ``blocking=False``;
- ``host copy``: ``np.asarray`` of every leaf into fresh memory (what a save that allocated
  its host copy every time would pay at least).

With ``--devices 8`` the arrays are split over 8 host devices (the manager then writes sharded
steps).  Also printed: the peak resident memory above the start of the timed rounds
(``/proc/self/status`` VmHWM is not reset, so it is the high-water mark of the whole run).
Times are medians, in milliseconds; the machine is shared: compare rows of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--devices", type=int, default=1)
    args = ap.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np

    import spruce.io as sio

    layers = max(1, args.mib // 4)
    tree: Any = {f"layer{i}": {"w": jnp.full((1024, 1024), i, jnp.float32)} for i in range(layers)}
    if args.devices > 1:
        from jax.sharding import NamedSharding, PartitionSpec

        mesh = jax.make_mesh((args.devices,), ("d",))
        tree = jax.device_put(tree, NamedSharding(mesh, PartitionSpec("d")))
    jax.block_until_ready(tree)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(tree))
    folder = tempfile.mkdtemp(prefix="spruce-bench-async-")
    results: dict[str, list[float]] = {}

    def timed(name: str, call: Callable[[], Any], after: Callable[[Any], None] = lambda r: None) -> None:
        after(call())  # warm-up
        for _ in range(args.rounds):
            t = time.perf_counter()
            r = call()
            results.setdefault(name, []).append((time.perf_counter() - t) * 1000)
            after(r)

    rss0 = _rss_mib()
    path = os.path.join(folder, "t.safetensors")
    if args.devices == 1:
        timed("save blocking=True", lambda: sio.save(path, tree))
        timed("save blocking=False", lambda: sio.save(path, tree, blocking=False), lambda p: p.wait())
    for blocking in (True, False):
        mgr = sio.CheckpointManager(os.path.join(folder, f"m{blocking}"), keep_last=2, blocking=blocking)
        steps = iter(range(10**6))
        timed(
            f"manager blocking={blocking}",
            lambda mgr=mgr, steps=steps: mgr.save(next(steps), tree),  # type: ignore[misc]
            lambda p, mgr=mgr: mgr.wait(),  # type: ignore[misc]
        )
        mgr.close()
    timed("host copy (fresh memory)", lambda: [np.array(x) for x in jax.tree.leaves(tree)])
    print(f"tree: {len(jax.tree.leaves(tree))} arrays, {nbytes / 2**20:.0f} MiB, {args.devices} device(s); "
          f"{args.rounds} rounds after a warm-up; call time in ms (median, min, max)")
    for name, ts in results.items():
        print(f"  {name:28s} {statistics.median(ts):8.1f} {min(ts):8.1f} {max(ts):8.1f}")
    print(f"resident memory now {_rss_mib() - rss0:+.0f} MiB above the start of the rounds")
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
