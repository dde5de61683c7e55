"""``ravel_pytree``: a pytree of arrays as one flat vector, and the function that undoes it
(imports JAX; re-exported by ``spruce.jax``)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .. import tree as _tree


class _Unravel:
    """The inverse of one ``ravel_pytree`` call: a flat vector back to the pytree.

    Hashable and compared by value (structure, sizes, shapes, dtypes), so two ravels of trees
    of the same structure and leaf types give equal functions (usable as a static argument of
    ``jax.jit``), as JAX's.
    """

    # (__weakref__: jax.jit keeps weak references to functions)
    __slots__ = ("treedef", "sizes", "shapes", "from_dtypes", "to_dtype", "__weakref__")

    def __init__(
        self,
        treedef: Any,
        sizes: tuple[int, ...],
        shapes: tuple[tuple[int, ...], ...],
        from_dtypes: tuple[Any, ...] | None,
        to_dtype: Any,
    ) -> None:
        self.treedef = treedef
        self.sizes = sizes
        self.shapes = shapes
        self.from_dtypes = from_dtypes  # None: one dtype in, so any dtype out (no casts)
        self.to_dtype = to_dtype

    def _key(self) -> tuple[Any, ...]:
        return (self.treedef, self.sizes, self.shapes, self.from_dtypes, self.to_dtype)

    def __eq__(self, other: object) -> bool:
        return type(other) is _Unravel and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"<unravel to {self.treedef}>"

    def __call__(self, flat: Any) -> Any:
        if not self.sizes:  # the empty tree: nothing to read, as JAX
            return self.treedef.unflatten([])
        total = sum(self.sizes)
        shape = np.shape(flat)
        if shape != (total,):
            raise ValueError(
                f"unravel: expected a 1-D array of {total} elements (the leaves of {self.treedef}), "
                f"got shape {shape}"
            )
        if self.from_dtypes is not None:
            dtype = jax.dtypes.result_type(flat)
            if dtype != self.to_dtype:
                raise TypeError(
                    f"unravel: given an array of dtype {dtype}, but expected dtype {self.to_dtype} "
                    "(the dtype ravel_pytree promoted the leaves to)"
                )
        chunks = jax.lax.split(flat, self.sizes)
        leaves = [c.reshape(s) for c, s in zip(chunks, self.shapes)]
        if self.from_dtypes is not None:
            leaves = [_cast_back(x, d) for x, d in zip(leaves, self.from_dtypes)]
        return self.treedef.unflatten(leaves)


def _cast_back(x: Any, dtype: Any) -> Any:
    if jax.numpy.issubdtype(x.dtype, jax.numpy.complexfloating) and not jax.numpy.issubdtype(
        dtype, jax.numpy.complexfloating
    ):
        x = x.real  # (a leaf that was real: drop the zero imaginary part without a warning)
    return jax.lax.convert_element_type(x, dtype)


def _leaf_dtype(x: Any, tree: Any, i: int) -> Any:
    try:
        dtype = getattr(x, "dtype", None)
        if dtype is None:
            dtype = np.asarray(x).dtype  # (a Python scalar: its NumPy dtype, made 32-bit below)
        if not (jax.numpy.issubdtype(dtype, jax.numpy.number) or jax.numpy.issubdtype(dtype, jax.numpy.bool_)):
            raise TypeError(f"dtype {dtype}")
        return jax.dtypes.canonicalize_dtype(dtype)
    except TypeError as e:
        path = _tree.keystr(_tree.leaves_with_path(tree)[i][0])
        raise TypeError(
            f"ravel_pytree: the leaf at key path {path or '<root>'} of type {type(x).__name__} is "
            f"not a numeric array or scalar ({e})"
        ) from None


def ravel_pytree(pytree: Any) -> tuple[jax.Array, _Unravel]:
    """The leaves of ``pytree`` raveled and concatenated into one 1-D array, and the function
    that takes such a vector back to a pytree of the same structure.

    Args:
      pytree: a pytree whose leaves are arrays or numeric scalars (JAX, NumPy, Python).

    Returns:
      ``(flat, unravel)``.  ``flat`` has ``sum(leaf sizes)`` elements, of the dtype the leaf
      dtypes promote to (``jax.numpy.result_type``; JAX's 32-bit default applies); an empty
      tree gives a float32 array of length 0.  ``unravel(v)`` splits ``v`` at the leaf sizes,
      reshapes each piece and rebuilds the tree.  If the leaves had one dtype, ``unravel``
      takes a vector of any dtype and keeps it; otherwise it requires ``flat``'s dtype and
      casts each piece back to its leaf's dtype.  ``unravel`` of the empty tree ignores its
      argument.  ``unravel`` is hashable and compares by value.

    Raises:
      TypeError: a leaf is not numeric (names its key path); ``unravel`` given a vector of
        another dtype when the leaves had several.
      ValueError: ``unravel`` given a vector whose shape is not ``(len(flat),)``.

    Follows jax.flatten_util.ravel_pytree (JAX raises ValueError from ``lax.split`` for a
    vector of the wrong length, and says nothing about the shape).

    >>> import jax.numpy as jnp
    >>> flat, unravel = ravel_pytree({'b': jnp.ones((2, 2)), 'a': jnp.arange(2)})
    >>> flat.dtype, flat.shape
    (dtype('float32'), (6,))
    >>> unravel(flat)['a'].dtype
    dtype('int32')
    """
    leaves, treedef = _tree.flatten(pytree)
    if not leaves:
        return jax.numpy.zeros((0,), jax.numpy.float32), _Unravel(treedef, (), (), None, None)
    from_dtypes = tuple(_leaf_dtype(x, pytree, i) for i, x in enumerate(leaves))
    to_dtype = jax.dtypes.result_type(*from_dtypes)
    sizes = tuple(int(np.size(x)) for x in leaves)
    shapes = tuple(tuple(np.shape(x)) for x in leaves)
    if all(d == to_dtype for d in from_dtypes):
        # no casts: leaves keep their (possibly weak) type, and unravel takes any dtype
        flat = jax.lax.concatenate([jax.lax.reshape(x, (n,)) for x, n in zip(leaves, sizes)], 0)
        return flat, _Unravel(treedef, sizes, shapes, None, to_dtype)
    flat = jax.lax.concatenate(
        [jax.lax.reshape(jax.lax.convert_element_type(x, to_dtype), (n,)) for x, n in zip(leaves, sizes)], 0
    )
    return flat, _Unravel(treedef, sizes, shapes, from_dtypes, to_dtype)
