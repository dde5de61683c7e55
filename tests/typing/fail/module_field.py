"""A Module field given a value of the wrong type."""

from __future__ import annotations

import spruce


class Array:
    pass


class Linear(spruce.Module):
    weight: Array
    bias: Array | None
    in_features: int = spruce.field(static=True, default=1)


Linear(weight=Array(), bias=None, in_features="3")  # E: str for int
Linear(weight=1.0, bias=None)  # E: float for Array
Linear(Array())  # E: bias missing
