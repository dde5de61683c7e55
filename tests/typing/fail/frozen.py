"""Assignment to a frozen (Final) Module field, outside __init__."""

from __future__ import annotations

from typing import Final

import spruce


class Array:
    pass


class Linear(spruce.Module):
    weight: Final[Array]

    def __init__(self, weight: Array) -> None:
        self.weight = weight


class Auto(spruce.Module):
    weight: Final[Array]


linear = Linear(Array())
linear.weight = Array()  # E: frozen
auto = Auto(weight=Array())
auto.weight = Array()  # E: frozen
