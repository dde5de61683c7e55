"""Per-call dispatch overhead of spruce.jax.filter_jit against plain jax.jit.

Usage::

    python benchmarks/bench_dispatch.py            # 25 rounds of 500 calls per contender
    python benchmarks/bench_dispatch.py --rounds 5

For each case the baseline is ``jax.jit`` called on the *pre-split* parameters (the arrays of
the model, split once outside the loop with ``spruce.partition``); spruce's contender is
``filter_jit`` called on the whole model.  Both loops only dispatch (nothing waits for the
results; the last result of each timed loop is blocked on, outside the timing of the next
sample).  Rounds interleave the contenders, alternating their order; the reported ratio is the
median over rounds of the per-round quotient (drift on a shared machine cancels), with the
interquartile range of those quotients beside it.  Target: <= 1.3.

Cases: (a) one small array, (b) MLP(64 -> 10, width 128, depth 3) plus input, (c) a stack of
12 Linear(128, 128) plus input.

If Equinox is importable (it is not a dependency of spruce), ``equinox.filter_jit`` on the same
spruce models is timed in the same rounds, for comparison only (``--no-equinox`` skips it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
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
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--no-equinox", action="store_true", help="do not time equinox.filter_jit")
    args = parser.parse_args()
    eqx: Any = None
    if not args.no_equinox:
        try:
            import equinox as eqx
        except ImportError:
            pass
    print(f"spruce {spruce.__version__} (compiled engine: {spruce.__compiled__}), jax {jax.__version__}")
    print(f"filter_jit from {sys.modules[filter_jit.__module__].__file__}")
    header = f"{'case':34} {'jax.jit us':>11} {'filter_jit us':>14} {'ratio':>7} {'(IQR)':>13}"
    if eqx is not None:
        header += f" {'equinox ' + eqx.__version__ + ' us':>19} {'ratio':>7}"
    print(header)
    for name, (model, x, fn) in cases().items():
        params, static = spruce.partition(model, spruce.is_array)
        plain = jax.jit(lambda p, x, fn=fn, static=static: fn(spruce.combine(p, static), x))
        filt = filter_jit(fn)
        contenders: list[Callable[[], Any]] = [
            lambda plain=plain, params=params, x=x: plain(params, x),
            lambda filt=filt, model=model, x=x: filt(model, x),
        ]
        if eqx is not None:
            efilt = eqx.filter_jit(fn)
            contenders.append(lambda efilt=efilt, model=model, x=x: efilt(model, x))
        times: list[list[float]] = [[] for _ in contenders]
        ratios: list[list[float]] = [[] for _ in contenders]
        for r in range(args.rounds):
            order = list(range(len(contenders)))
            if r % 2:
                order.reverse()
            for i in order:
                times[i].append(_per_call(contenders[i], args.calls))
            for i in range(1, len(contenders)):
                ratios[i].append(times[i][-1] / times[0][-1])
        line = f"{name:34} {statistics.median(times[0]) * 1e6:11.1f}"
        q1, _, q3 = statistics.quantiles(ratios[1], n=4)
        line += f" {statistics.median(times[1]) * 1e6:14.1f} {statistics.median(ratios[1]):7.2f} ({q1:.2f}-{q3:.2f})"
        if eqx is not None:
            line += f" {statistics.median(times[2]) * 1e6:19.1f} {statistics.median(ratios[2]):7.2f}"
        print(line)


if __name__ == "__main__":
    main()
