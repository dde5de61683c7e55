"""Interleaved timing and the ratio statistics.

Method.  For one (tree, op), every library's statement is first *calibrated*: the number of
calls per sample is chosen so that one sample lasts about ``target`` seconds.  Then ``rounds``
rounds are run; in each round every library takes one sample, in an order rotated by one
position each round (so no library is always first or last).  A sample is ``timeit``'s loop
(garbage collector off during the loop) and yields the time per call.

Statistics.  ``median`` of a library's per-round times is its reported time.  The ratio
spruce/peer is the median over rounds of the per-round quotient t_spruce[r] / t_peer[r]:
both samples of a round are taken seconds apart, so machine drift (other tenants, frequency
changes) cancels in the quotient.  Values below 1 mean spruce is faster.
"""

from __future__ import annotations

import math
import statistics
import timeit
from dataclasses import dataclass


def calibrate(timer: timeit.Timer, target: float) -> int:
    """Calls per sample so that one sample takes about ``target`` seconds (at least 1)."""
    n = 1
    while True:
        t = timer.timeit(n)
        if t >= target / 5 or n >= 1 << 24:
            break
        n *= 10 if t < target / 100 else 2
    return max(1, round(n * target / max(t, 1e-9)))


@dataclass
class Series:
    """Per-round seconds per call of each library for one (tree, op)."""

    times: dict[str, list[float]]

    def median(self, lib: str) -> float:
        return statistics.median(self.times[lib])

    def ratio(self, a: str, b: str) -> float:
        """Median over rounds of t_a[r] / t_b[r]."""
        return statistics.median(x / y for x, y in zip(self.times[a], self.times[b]))


def interleave(timers: dict[str, timeit.Timer], rounds: int, target: float) -> Series:
    """Time every library's timer over ``rounds`` rotated rounds (see the module docstring)."""
    names = list(timers)
    numbers = {name: calibrate(timers[name], target) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(timers[name].timeit(numbers[name]) / numbers[name])
    return Series(times)


def geomean(values: list[float]) -> float:
    """Geometric mean (nan for an empty list)."""
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))
