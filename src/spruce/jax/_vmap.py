"""``filter_vmap``: ``jax.vmap`` over the array leaves of pytree arguments (imports JAX;
re-exported by ``spruce.jax``)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Hashable

import jax

from .. import tree as _tree
from .._arrays import if_array, is_array
from ._split import _merge, _split


def filter_vmap(
    fun: Callable[..., Any] | None = None,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
) -> Any:
    """``jax.vmap`` over the array leaves of the arguments; other leaves are not mapped.

    Args:
      fun: a function of positional pytree arguments.  Without it, ``filter_vmap(in_axes=...)``
        returns a decorator (as Equinox's).
      in_axes: an int or None for every array leaf of every argument, or a tuple with one entry
        per positional argument, each an int / None or a pytree prefix of that argument with
        int / None leaves (e.g. ``in_axes=(dict(x=0, y=None),)`` for one dict argument: its
        ``"x"`` entry is mapped over axis 0, its ``"y"`` entry is not).  Non-array leaves are never mapped, whatever the spec says.
        A spec leaf may also be a callable ``leaf -> int | None`` called on every leaf it
        covers, such as ``spruce.if_array(0)`` (as Equinox's ``in_axes``).
      out_axes: int or None for every array leaf of the output (non-array outputs are returned
        as traced, unmapped); ``spruce.if_array(n)`` means ``n``.
      axis_name: as jax.vmap.
      axis_size: the size of the mapped axis, passed to jax.vmap; needed when no argument is
        mapped (the output then gets a new leading axis of that size), otherwise it must equal
        the mapped arguments' size.

    Returns:
      The vectorised function.  Raises ValueError (from JAX) when mapped sizes disagree with
      each other or with ``axis_size``, or when nothing is mapped and ``axis_size`` is not
      given; ValueError when ``in_axes`` is a tuple of the wrong length; TypeError when ``fun``
      is not callable, when an ``in_axes`` callable returns something other than an int or
      None (naming the leaf's key path), or when ``out_axes`` is a callable other than
      ``if_array``.
    Follows equinox.filter_vmap (restricted to positional arguments).

    >>> import jax.numpy as jnp
    >>> f = filter_vmap(lambda d: d["x"] * 2 + d["y"], in_axes=(dict(x=0, y=None),))
    >>> f({"x": jnp.arange(3.0), "y": jnp.ones(())}).tolist()
    [1.0, 3.0, 5.0]
    >>> filter_vmap(lambda: jnp.ones(2), axis_size=4)().shape
    (4, 2)
    >>> from spruce import if_array
    >>> filter_vmap(lambda x, n: x * n, in_axes=if_array(0))(jnp.arange(3.0), 2.0).tolist()
    [0.0, 2.0, 4.0]
    """
    if fun is None:
        return functools.partial(
            filter_vmap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name, axis_size=axis_size
        )
    if not callable(fun):
        raise TypeError(f"filter_vmap: expected a function, got {type(fun).__name__}")
    if isinstance(out_axes, if_array):  # every output leaf jax.vmap sees is an array
        out_axes = out_axes.axis
    elif callable(out_axes):
        raise TypeError(
            f"filter_vmap: out_axes must be an int, None or spruce.if_array(n), got {out_axes!r}"
        )

    @functools.wraps(fun)
    def wrapper(*args: Any) -> Any:
        specs = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        if len(specs) != len(args):
            raise ValueError(f"filter_vmap: in_axes has {len(specs)} entries for {len(args)} arguments")
        leaf_axes: list[Any] = []
        all_leaves: list[Any] = []
        for argnum, (arg, spec) in enumerate(zip(args, specs)):
            spec_def = _tree.structure(spec, none_is_leaf=True)
            start = len(all_leaves)
            for s, sub in zip(_tree.leaves(spec, none_is_leaf=True), spec_def.flatten_up_to(arg)):
                for leaf in _tree.leaves(sub):
                    axis = s(leaf) if callable(s) else s
                    if callable(s) and axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
                        path = _tree.leaves_with_path(arg)[len(all_leaves) - start][0]
                        raise TypeError(
                            f"filter_vmap: the in_axes callable {s!r} returned {axis!r} for the leaf "
                            f"at args[{argnum}]{_tree.keystr(path)}; it must return an int or None"
                        )
                    all_leaves.append(leaf)
                    leaf_axes.append(axis if is_array(leaf) else None)
        _, treedef = _tree.flatten(args)
        dyn_idx = [i for i, a in enumerate(leaf_axes) if a is not None]
        static = list(all_leaves)
        cell: list[Any] = [None, None]

        def mapped(dyn: list[Any]) -> list[Any]:
            leaves = list(static)
            for i, v in zip(dyn_idx, dyn):
                leaves[i] = v
            out = fun(*treedef.unflatten(leaves))
            out_leaves, out_def = _tree.flatten(out)
            out_dyn, out_static = _split(out_leaves)
            cell[0], cell[1] = out_def, out_static
            return out_dyn

        dyn = [all_leaves[i] for i in dyn_idx]
        axes = [leaf_axes[i] for i in dyn_idx]
        out_dyn = jax.vmap(mapped, in_axes=(axes,), out_axes=out_axes, axis_name=axis_name, axis_size=axis_size)(
            dyn
        )
        return cell[0].unflatten(_merge(out_dyn, cell[1]))

    return wrapper
