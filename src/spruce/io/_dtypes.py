"""The dtypes a checkpoint can hold, by name, and their safetensors codes.

Names are NumPy's ``dtype.name`` (``float32``, ``bool``, ``bfloat16``, ``float8_e4m3fn``); the
low-precision float types come from ``ml_dtypes`` (installed with JAX), imported on first use.
Data is little-endian in both formats.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

# safetensors' dtype codes (its header's "dtype" field) and the NumPy dtype names they map to.
SAFETENSORS_CODES: Final[dict[str, str]] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}
CODE_OF_NAME: Final[dict[str, str]] = {v: k for k, v in SAFETENSORS_CODES.items()}

# Names of the dtypes that NumPy itself knows (the others need ml_dtypes).
_NUMPY_NAMES: Final = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
     "float16", "float32", "float64", "complex64", "complex128"]
)
_ML_NAMES: Final = frozenset(n for n in SAFETENSORS_CODES.values() if n not in _NUMPY_NAMES)


def needs_ml_dtypes(name: str) -> bool:
    """True for the dtypes NumPy does not know by itself (bfloat16, the float8 types)."""
    return name in _ML_NAMES

SAFETENSORS_NAMES: Final = frozenset(SAFETENSORS_CODES.values())
NPZ_NAMES: Final = SAFETENSORS_NAMES | {"complex128"}

_cache: dict[str, np.dtype[Any]] = {}


def dtype_of(name: str) -> np.dtype[Any]:
    """The little-endian NumPy dtype called ``name`` (one of the supported names).

    Raises:
      ValueError: ``name`` is not a supported dtype, or it needs ml_dtypes and ml_dtypes is not
        installed.
    """
    d = _cache.get(name)
    if d is not None:
        return d
    if name in _NUMPY_NAMES:
        d = np.dtype(name).newbyteorder("<") if np.dtype(name).itemsize > 1 else np.dtype(name)
    elif name in _ML_NAMES:
        try:
            import ml_dtypes
        except ImportError as e:  # pragma: no cover - ml_dtypes comes with jax
            raise ValueError(f"the dtype {name} needs the ml_dtypes package, which is not installed") from e
        d = np.dtype(getattr(ml_dtypes, name))
    else:
        raise ValueError(f"unsupported dtype {name!r}")
    _cache[name] = d
    return d


def name_of(dtype: Any, allowed: frozenset[str]) -> str | None:
    """The supported name of ``dtype`` (any byte order), or None if it is not in ``allowed``."""
    dtype = np.dtype(dtype)
    name = str(dtype.name)
    if name not in allowed:
        return None
    try:
        expected = dtype_of(name)
    except ValueError:
        return None
    if dtype.kind != expected.kind or dtype.itemsize != expected.itemsize or dtype.fields is not None:
        return None
    if name in _ML_NAMES and dtype != expected:
        return None
    return name


def describe(dtype: Any) -> str:
    """A dtype for messages: its name (``float32``, ``bfloat16``)."""
    try:
        return str(np.dtype(dtype).name)
    except TypeError:
        return repr(dtype)
