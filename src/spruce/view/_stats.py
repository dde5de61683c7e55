"""Summary statistics and a histogram of one array, in bounded memory (NumPy only)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

BINS = 24
_CHUNK = 1 << 20  # elements converted to float64 at a time
_SAMPLE = 1 << 15  # at most this many (evenly strided) elements go into the histogram


class Stats(NamedTuple):
    """Statistics of the finite values of an array, and how many are NaN or infinite.

    ``finite`` counts the finite values; ``mean``/``std``/``min``/``max`` are NaN when none is; ``hist`` holds ``BINS``
    counts over ``[min, max]`` (from at most 2**15 evenly strided elements: the picture is 24
    bars of a few pixels)."""

    finite: int
    mean: float
    std: float
    min: float
    max: float
    nan: int
    inf: int
    hist: tuple[int, ...]


def _real_view(x: Any) -> np.ndarray[Any, Any] | None:
    """The array as a 1-D NumPy array of a real numeric dtype, or None if it has none."""
    try:
        a = np.asarray(x)
    except Exception:  # an array that cannot reach the host (e.g. a PRNG key)
        return None
    kind = a.dtype.kind
    if kind in "biuf":
        return a.reshape(-1)
    if kind == "V" and "float" in a.dtype.name:  # ml_dtypes: bfloat16, float8_*
        try:
            return a.reshape(-1).astype(np.float32)
        except (TypeError, ValueError):
            return None
    return None  # complex, strings, objects, extended dtypes


def array_stats(x: Any) -> Stats | None:
    """``Stats`` of a NumPy / JAX array (any shape; bool, ints, floats, bfloat16, float8),
    or None for a dtype without an order (complex, strings, objects) or data that cannot be
    read.  Exact except the histogram; reads the data twice, in chunks of 2**20 elements."""
    flat = _real_view(x)
    if flat is None:
        return None
    if flat.dtype.kind == "b":
        flat = flat.view(np.uint8)
    n = 0
    mean = 0.0
    m2 = 0.0
    lo, hi = math.inf, -math.inf
    nan = inf = 0
    scale = 1.0
    for start in range(0, flat.size, _CHUNK):
        c = flat[start:start + _CHUNK]
        if c.dtype.kind == "f":
            finite = np.isfinite(c)
            if not finite.all():
                bad = int(c.size - np.count_nonzero(finite))
                k = int(np.count_nonzero(np.isnan(c)))
                nan += k
                inf += bad - k
                c = c[finite]
        if c.size == 0:
            continue
        lo = min(lo, float(c.min()))
        hi = max(hi, float(c.max()))
        # Everything is computed in units of a power of two `scale` >= half the largest |value|
        # seen so far (exact, and no overflow near the dtype's maximum: (1e308 - -1e308) is inf).
        new_scale = _scale(max(-lo, hi))
        if new_scale != scale and n:  # it only grows once set: the factor is <= 1
            mean *= scale / new_scale
            m2 *= (scale / new_scale) ** 2
        scale = new_scale
        if c.dtype == np.float32:  # float32 deviations, summed by a BLAS dot (docs/performance.md)
            cs = c / np.float32(scale)
            cm = float(np.mean(cs, dtype=np.float64))
            d = cs - np.float32(cm)
            cm2 = float(np.dot(d, d))
        else:
            cs = c.astype(np.float64) / scale
            cm = float(np.mean(cs))
            cm2 = float(np.sum(np.square(cs - cm)))
        total = n + c.size
        delta = cm - mean
        mean += delta * c.size / total
        m2 += cm2 + delta * delta * n * c.size / total
        n = total
    if n == 0:
        return Stats(0, math.nan, math.nan, math.nan, math.nan, nan, inf, (0,) * BINS)
    sample = flat[:: max(1, flat.size // _SAMPLE)]
    if sample.dtype.kind == "f":
        sample = sample[np.isfinite(sample)]
    if hi > lo:
        # The bin of each value, the last bin closed on the right (numpy.histogram's rule).
        lo_s, hi_s = lo / scale, hi / scale
        at = ((sample.astype(np.float64) / scale - lo_s) * (BINS / (hi_s - lo_s))).astype(np.intp)
        counts = tuple(int(v) for v in np.bincount(np.clip(at, 0, BINS - 1), minlength=BINS))
    else:
        counts = (int(sample.size),) + (0,) * (BINS - 1)
    return Stats(n, mean * scale, math.sqrt(m2 / n) * scale, lo, hi, nan, inf, counts)


def _scale(m: float) -> float:
    """A power of two in ``(m / 2, m]`` (1.0 for 0): dividing by it is exact."""
    return math.ldexp(1.0, math.frexp(m)[1] - 1) if m > 0 else 1.0


def fmt(v: float) -> str:
    """A statistic in 4 significant digits (``0.0123``, ``-1.5e+04``, ``nan``)."""
    if math.isnan(v):
        return "nan"
    if v == 0:
        return "0"
    return f"{v:.4g}"
