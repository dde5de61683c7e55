"""Leaf facts shared by every layer, that never import JAX or NumPy themselves: the array
predicates (``is_array`` and kin, and ``if_array``, the axis spec built on them), array
summaries (``f32[2,3]``), shape and itemsize of an array-like leaf, and the one byte formatter.

An object can only be a ``jax.Array`` if JAX has been imported, and a NumPy array only if NumPy
has been; the modules are looked up in ``sys.modules`` so that ``import spruce`` stays free of
both.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

_SCALARS = (bool, int, float, complex)


def jax_if_imported() -> Any:
    """The ``jax`` module if something has imported it, else None: spruce's one test of "is
    JAX imported" (a JAX array, tracer or dtype cannot exist before it is).  Never imports JAX."""
    return sys.modules.get("jax")


def _jax_array_type() -> Any:
    return getattr(jax_if_imported(), "Array", None)


def is_array(x: Any) -> bool:
    """True for ``jax.Array`` (tracers included), ``numpy.ndarray`` and NumPy scalars
    (``numpy.generic``); False for Python scalars and everything else.

    Follows ``equinox.is_array``.
    """
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, (np.ndarray, np.generic)):
        return True
    jarr = _jax_array_type()
    return jarr is not None and isinstance(x, jarr)


def has_shape_and_dtype(x: Any) -> bool:
    """True for any object (not a class) with ``shape`` and ``dtype`` attributes: arrays,
    tracers, ``jax.ShapeDtypeStruct`` and other array stand-ins.  The duck test of the layers
    that only read shapes and dtypes (sharding specs, checkpoints, pretty printing)."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, type)


def is_array_like(x: Any) -> bool:
    """True for arrays (``is_array``), Python ``bool``/``int``/``float``/``complex``, and objects
    with a ``__jax_array__`` method: what ``jax.numpy.asarray`` accepts as a single value.

    Follows ``equinox.is_array_like``.
    """
    return isinstance(x, _SCALARS) or is_array(x) or hasattr(type(x), "__jax_array__")


def is_inexact_array(x: Any) -> bool:
    """True for arrays (``is_array``) whose dtype is floating point or complex — the leaves that
    ``filter_grad`` differentiates.  Follows ``equinox.is_inexact_array``.
    """
    if not is_array(x):
        return False
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if kind in ("f", "c"):
        return True
    if kind == "V":  # bfloat16 and the float8 types are numpy "void" kind extension dtypes
        name = str(x.dtype.name)
        return "float" in name
    return False


def is_inexact_array_like(x: Any) -> bool:
    """True for floating-point and complex arrays (``is_inexact_array``), Python ``float`` and
    ``complex``, and objects with a ``__jax_array__`` method whose array is inexact; False for
    everything else (``bool``, ``int``, integer arrays, containers).  The ``is_array_like``
    counterpart of ``is_inexact_array``: what ``jax.numpy.asarray`` turns into a floating or
    complex value.

    Follows ``equinox.is_inexact_array_like``, except that a NumPy array of an ml_dtypes float
    (bfloat16, float8_*) counts as inexact, as the same JAX array does (``is_inexact_array``).

    >>> is_inexact_array_like(2.0), is_inexact_array_like(1j), is_inexact_array_like(1), is_inexact_array_like(True)
    (True, True, False, False)
    """
    if hasattr(type(x), "__jax_array__"):
        x = x.__jax_array__()
    if is_array(x):
        return is_inexact_array(x)
    return isinstance(x, (float, complex))


@dataclasses.dataclass(frozen=True)
class if_array:
    """``if_array(axis)(x)`` is ``axis`` when ``x`` is an array (``is_array``) and None otherwise:
    an axis spec, for the ``in_axes`` of ``spruce.jax.filter_vmap`` (and of ``jax.vmap`` over
    a prefix), that maps array leaves over ``axis`` and leaves every other leaf unmapped.

    A frozen dataclass, so equal specs compare and hash equal (a spec can be part of a cache
    key); not a pytree (a leaf).  ``axis`` must be an int (TypeError otherwise; a bool is
    refused too).  Follows ``equinox.if_array``.

    >>> import numpy as np
    >>> spec = if_array(1)
    >>> spec(np.zeros((2, 3))), spec(3.0), spec('text')
    (1, None, None)
    """

    axis: int

    def __post_init__(self) -> None:
        if isinstance(self.axis, bool) or not isinstance(self.axis, int):
            raise TypeError(f"if_array(axis): axis must be an int, got {self.axis!r}")

    def __call__(self, x: Any) -> int | None:
        return self.axis if is_array(x) else None


def dtype_short_name(dtype: Any) -> str:
    """``float32 -> 'f32'``, ``bfloat16 -> 'bf16'``, ``int8 -> 'i8'``, ``uint8 -> 'u8'``,
    ``complex64 -> 'c64'``, ``bool -> 'bool'``; other dtypes keep their name."""
    name = str(getattr(dtype, "name", dtype))
    for long, short in (("bfloat", "bf"), ("float", "f"), ("uint", "u"), ("int", "i"), ("complex", "c")):
        if name.startswith(long) and name[len(long) :].isdigit():
            return short + name[len(long) :]
    return name


def array_summary(x: Any) -> str:
    """``'f32[2,3]'``: dtype short name and shape of an array-like with ``shape`` and ``dtype``
    (a ``jax.Array``, tracer, ``jax.ShapeDtypeStruct`` or NumPy array; NumPy ones get a
    ``(numpy)`` suffix)."""
    shape = ",".join(str(d) for d in x.shape)
    text = f"{dtype_short_name(x.dtype)}[{shape}]"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, (np.ndarray, np.generic)):
        text += "(numpy)"
    return text


def _is_dim(d: object) -> bool:
    return isinstance(d, int) and not isinstance(d, bool) and d >= 0


def shape_and_itemsize(x: Any) -> tuple[tuple[int, ...], int] | None:
    """``(shape, dtype.itemsize)`` of a leaf that ``summary`` counts, else None.

    Counted: an object (not a class) whose ``shape`` is a tuple of non-negative ints and whose
    ``dtype`` is a ``numpy.dtype`` (ml_dtypes' bfloat16, int4, float8_* included) or a JAX
    extended dtype (PRNG keys): JAX and NumPy arrays and scalars, tracers, and
    ``jax.ShapeDtypeStruct``.  NumPy and JAX are looked up in ``sys.modules``, never imported:
    a dtype of theirs cannot exist before they are.
    """
    if isinstance(x, type):
        return None
    shape = getattr(x, "shape", None)
    if not isinstance(shape, tuple) or not all(_is_dim(d) for d in shape):
        return None
    dtype = getattr(x, "dtype", None)
    itemsize = getattr(dtype, "itemsize", None)
    if type(itemsize) is not int:
        return None
    np = sys.modules.get("numpy")
    if np is not None and isinstance(dtype, np.dtype):
        return shape, itemsize
    jax = jax_if_imported()
    if jax is not None and not isinstance(dtype, type):
        try:
            if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
                return shape, itemsize
        except TypeError:  # not a dtype JAX knows (e.g. another library's)
            pass
    return None


def format_bytes(n: int) -> str:
    """A byte count in binary units with one decimal: ``'100 B'``, ``'1.5 KiB'``, ``'86.6 MiB'``
    (B, KiB, MiB, GiB, TiB; exact bytes below 1 KiB).  The one byte formatter of spruce's
    tables, pages and command line.

    >>> format_bytes(100), format_bytes(1536), format_bytes(90_854_912), format_bytes(2**43)
    ('100 B', '1.5 KiB', '86.6 MiB', '8.0 TiB')
    """
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
