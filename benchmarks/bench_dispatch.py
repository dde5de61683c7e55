"""Per-call dispatch overhead of spruce.jax.filter_jit against plain jax.jit (issue 4).

Usage::

    python benchmarks/bench_dispatch.py            # 15 rounds
    python benchmarks/bench_dispatch.py --rounds 5

For each case the baseline is ``jax.jit`` called on the *pre-split* parameters (the arrays of
the model, split once outside the loop with ``spruce.partition``); spruce's contender is
``filter_jit`` called on the whole model.  Both loops only dispatch (nothing waits for the
results; the last result of each timed loop is blocked on, outside the timing of the next
sample).  Rounds interleave the two, alternating their order; the reported ratio is the median
over rounds of the per-round quotient (drift on a shared machine cancels).  Target: <= 1.3.

Cases: (a) one small array, (b) MLP(64 -> 10, width 128, depth 3) plus input, (c) a stack of
12 Linear(128, 128) plus input.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

import spruce
import spruce.nn as nn
from spruce.jax import filter_jit


def _per_call(f: Callable[[], Any], n: int) -> float:
    out = f()
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    for _ in range(n):
        out = f()
    t1 = time.perf_counter()
    jax.block_until_ready(out)
    return (t1 - t0) / n


def cases() -> dict[str, tuple[Any, Any, Callable[..., Any]]]:
    key = jax.random.PRNGKey(0)
    mlp = nn.MLP(64, 10, 128, 3, key=key)
    stack = nn.Sequential([nn.Linear(128, 128, key=k) for k in jax.random.split(key, 12)])
    return {
        "(a) one small array": (jnp.ones(3), None, lambda a, _: a + 1),
        "(b) MLP(64->10, 128, depth 3)": (mlp, jnp.ones(64), lambda m, x: m(x)),
        "(c) 12 x Linear(128, 128)": (stack, jnp.ones(128), lambda m, x: m(x)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    print(f"spruce {spruce.__version__} (compiled engine: {spruce.__compiled__}), jax {jax.__version__}")
    print(f"{'case':34} {'jax.jit us':>11} {'filter_jit us':>14} {'ratio':>7}")
    for name, (model, x, fn) in cases().items():
        params, static = spruce.partition(model, spruce.is_array)
        plain = jax.jit(lambda p, x, fn=fn, static=static: fn(spruce.combine(p, static), x))
        filt = filter_jit(fn)
        base_f = lambda: plain(params, x)  # noqa: E731
        ours_f = lambda: filt(model, x)  # noqa: E731
        base_t: list[float] = []
        ours_t: list[float] = []
        ratios: list[float] = []
        for r in range(args.rounds):
            order = [(base_f, base_t), (ours_f, ours_t)]
            if r % 2:
                order.reverse()
            for f, sink in order:
                sink.append(_per_call(f, args.calls))
            ratios.append(ours_t[-1] / base_t[-1])
        print(
            f"{name:34} {statistics.median(base_t) * 1e6:11.1f} {statistics.median(ours_t) * 1e6:14.1f} "
            f"{statistics.median(ratios):7.2f}"
        )


if __name__ == "__main__":
    main()
