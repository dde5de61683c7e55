"""Typed PRNG keys in checkpoints: recognised by dtype, stored as their uint32 key data plus the
implementation's name, and rebuilt with ``jax.random.wrap_key_data``; and the test of a leaf that
no checkpoint holds (code, which ``like=`` supplies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import has_shape_and_dtype, jax_if_imported
from ._dtypes import describe
from ._errors import CheckpointError


def is_key_dtype(dtype: Any) -> bool:
    """True for the dtype of typed PRNG keys (``jax.random.key(0).dtype``, ``key<fry>``)."""
    jax = jax_if_imported()
    if jax is None or dtype is None or isinstance(dtype, np.dtype):
        return False
    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        return False


def never_stored(x: Any) -> bool:
    """True for a leaf that no checkpoint holds: neither array-like (an array, a NumPy scalar, a
    ``jax.ShapeDtypeStruct`` placeholder) nor a Python bool / int / float / str.  ``save``
    refuses such a leaf (or, ``skip_code=True``, leaves code out), so ``load(..., like=...)``
    takes it from ``like``."""
    t = type(x)
    if t is bool or t is int or t is float or t is str:
        return False
    return not has_shape_and_dtype(x)


def wrap_keys(data: Any, impl: str, file: str, where: str) -> Any:
    """Typed PRNG keys from their key data: ``jax.random.wrap_key_data(data, impl=impl)``.

    Raises:
      CheckpointError: JAX is not installed, the data is not uint32, ``impl`` is not an
        implementation JAX knows by name, or the data does not have its shape; naming
        ``where`` and ``file``.
    """
    try:
        import jax
    except ImportError:  # pragma: no cover - jax is installed wherever keys were saved
        raise CheckpointError(
            f"the stored structure at {where or '<root>'!r} holds PRNG keys ({impl[:60]}), which need JAX", file
        ) from None
    if np.dtype(data.dtype) != np.uint32:
        raise CheckpointError(
            f"the stored structure at {where or '<root>'!r} holds PRNG keys ({impl[:60]}) whose key "
            f"data is {describe(data.dtype)}, not uint32",
            file,
        )
    try:
        return jax.random.wrap_key_data(jax.numpy.asarray(data), impl=impl)
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(
            f"the stored structure at {where or '<root>'!r} holds PRNG keys of the implementation "
            f"{impl[:60]!r} with key data of shape {list(np.shape(data))}, which JAX cannot rebuild: {e}",
            file,
        ) from None


_key_names: dict[Any, str | None] = {}


def key_impl_name(x: Any) -> str | None:
    """The name of the PRNG implementation of the key array ``x`` if
    ``jax.random.wrap_key_data(..., impl=name)`` gives keys of the same dtype back, else None
    (an implementation not registered by name)."""
    import jax

    if x.dtype in _key_names:
        return _key_names[x.dtype]
    name: str | None = str(jax.random.key_impl(x))
    try:
        one = jax.numpy.zeros(tuple(jax.random.key_data(x).shape[x.ndim:]), jax.numpy.uint32)
        if jax.random.wrap_key_data(one, impl=name).dtype != x.dtype:
            name = None
    except (TypeError, ValueError, KeyError):
        name = None
    if len(_key_names) < 64:
        _key_names[x.dtype] = name
    return name
