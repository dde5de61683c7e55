"""``filter_vmap``: ``jax.vmap`` over the array leaves of pytree arguments (imports JAX;
re-exported by ``spruce.jax``).

An axis specification (``in_axes`` / ``out_axes``) is a pytree prefix whose leaves are an int,
None, or a callable ``leaf -> int | None`` that is asked about every leaf of its subtree.  It is
resolved here into one axis per leaf of the arguments (at the call) and of the output (while
tracing); the leaves are then split into those JAX maps and those that pass through.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Hashable

import jax
import jax.numpy as jnp

from .. import tree as _tree
from .._arrays import is_array


class _ArrayAxis:
    """The default ``in_axes`` / ``out_axes``: axis 0 for an array leaf, None for any other."""

    __slots__ = ()

    def __call__(self, x: Any) -> int | None:
        return 0 if is_array(x) else None

    def __repr__(self) -> str:
        return "<axis 0 of every array leaf>"


_AXIS_0_OF_ARRAYS: Any = _ArrayAxis()

_PYTHON_SCALARS = (bool, int, float, complex)


def _is_spec_leaf(s: Any) -> bool:
    return s is None or callable(s)


def _resolve(spec: Any, tree: Any, what: str) -> list[int | None]:
    """One axis per leaf of ``tree`` (``spruce.tree.leaves`` order) from ``spec``, a pytree
    prefix of ``tree`` with int / None / callable leaves.  ``what`` names ``tree`` in errors
    (``in_axes[1]``, ``out_axes``)."""
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return [spec] * len(_tree.leaves(tree))
    spec_leaves, spec_def = _tree.flatten_with_path(spec, is_leaf=_is_spec_leaf)
    try:
        subtrees = spec_def.flatten_up_to(tree)
    except ValueError as e:
        raise ValueError(f"filter_vmap: {what} is not a prefix of the value it describes: {e}") from None
    axes: list[int | None] = []
    for (path, s), sub in zip(spec_leaves, subtrees):
        where = what + _tree.keystr(path)
        if s is None or (isinstance(s, int) and not isinstance(s, bool)):
            axes += [s] * len(_tree.leaves(sub))
        elif callable(s):
            for leaf_path, leaf in _tree.leaves_with_path(sub):
                a = s(leaf)
                if a is not None and (not isinstance(a, int) or isinstance(a, bool)):
                    raise ValueError(
                        f"filter_vmap: the callable at {where} returned {a!r} for the leaf at "
                        f"{_tree.keystr(leaf_path) or '<root>'}; it must return an int or None"
                    )
                axes.append(a)
        else:
            raise ValueError(
                f"filter_vmap: {where} is a {type(s).__name__}; an axis specification holds ints, "
                "None and callables (leaf -> int | None) only"
            )
    return axes


def _named_in_axes(fun: Callable[..., Any], in_axes: dict[Any, Any], n_args: int) -> tuple[Any, ...]:
    """``in_axes`` given by parameter name: one entry per positional argument passed, the
    named ones from the dict and the default for the others."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        raise TypeError(
            "filter_vmap: in_axes is a dict of parameter names, but the signature of the function "
            "cannot be read; give in_axes as a tuple with one entry per positional argument"
        ) from None
    names: list[str] = []
    for p in params:
        if p.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    left = dict(in_axes)
    specs = [left.pop(name, _AXIS_0_OF_ARRAYS) for name in names[:n_args]]
    specs += [_AXIS_0_OF_ARRAYS] * (n_args - len(specs))
    if left:
        raise ValueError(
            f"filter_vmap: in_axes names {sorted(map(str, left))}, which are not positional "
            f"parameters given in this call (parameters given: {names[:n_args]}); a parameter "
            "named in in_axes must be passed, by position"
        )
    return tuple(specs)


def filter_vmap(
    fun: Callable[..., Any] | None = None,
    in_axes: Any = _AXIS_0_OF_ARRAYS,
    out_axes: Any = _AXIS_0_OF_ARRAYS,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
) -> Any:
    """``jax.vmap`` over the array leaves of the arguments; other leaves are not mapped.

    An axis specification (``in_axes``, ``out_axes``) is a pytree prefix of what it describes,
    whose leaves are an int (the mapped axis), None (not mapped) or a callable
    ``leaf -> int | None`` applied to every leaf below it (``lambda x: 0 if spruce.is_array(x)
    else None`` is the default of both).

    Args:
      fun: a function of positional pytree arguments.  Without it, ``filter_vmap(in_axes=...)``
        returns a decorator (as Equinox's).
      in_axes: for the positional arguments: a tuple with one entry per argument (each a
        specification for that argument, e.g. ``(dict(x=0, y=None),)`` for one dict argument
        whose ``"x"`` entry is mapped over axis 0 and ``"y"`` entry is not); a dict naming
        parameters of ``fun`` (``dict(y=1)``: the argument ``y`` mapped over axis 1, every
        other argument given the default); or one int / None / callable for every argument.
        Non-array leaves are never mapped, whatever the spec says.
      out_axes: a specification for the output: where the mapped axis goes in each array leaf
        (None: that leaf must not depend on the mapped axis, and is returned once).  An int
        for a Python bool / int / float / complex leaf broadcasts it into an array with the
        mapped axis, as JAX does; other non-array leaves are returned as the trace produced them.
      axis_name: as jax.vmap.
      axis_size: the size of the mapped axis, passed to jax.vmap; needed when no argument is
        mapped and some output leaf is (that leaf then gets the new axis), otherwise it must
        equal the mapped arguments' size.

    Returns:
      The vectorised function.  It takes positional arguments only (a keyword argument is a
      TypeError; name a parameter in ``in_axes=dict(...)`` and pass it by position).

    Raises:
      ValueError: mapped sizes disagree with each other or with ``axis_size`` (from JAX);
        nothing is mapped, ``axis_size`` is not given and an output leaf has an int axis;
        ``in_axes`` is a tuple of the wrong length, or a dict naming a parameter that is not
        passed by position; a specification is not a prefix of its value, holds something other
        than ints, None and callables, or its callable returns something else.
      TypeError: ``fun`` is not callable; the vectorised function is given keyword arguments.

    Follows equinox.filter_vmap, except that a non-array argument leaf is never mapped (Equinox
    passes it to jax.vmap, which fails for an int axis), a non-array, non-scalar output leaf
    with an int axis is returned as it is rather than refused, and keyword arguments to the
    vectorised function are a TypeError (Equinox: RuntimeError).

    >>> import jax.numpy as jnp
    >>> f = filter_vmap(lambda d: d["x"] * 2 + d["y"], in_axes=(dict(x=0, y=None),))
    >>> f({"x": jnp.arange(3.0), "y": jnp.ones(())}).tolist()
    [1.0, 3.0, 5.0]
    >>> filter_vmap(lambda x, y: x + y, in_axes=dict(y=1))(jnp.zeros((3, 2)), jnp.ones((2, 3))).shape
    (3, 2)
    >>> filter_vmap(lambda: jnp.ones(2), axis_size=4)().shape
    (4, 2)
    >>> filter_vmap(lambda x: (x, 2 * x), out_axes=(0, 1))(jnp.ones((3, 2)))[1].shape
    (2, 3)
    """
    if fun is None:
        return functools.partial(
            filter_vmap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name, axis_size=axis_size
        )
    if not callable(fun):
        raise TypeError(f"filter_vmap: expected a function, got {type(fun).__name__}")

    @functools.wraps(fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"filter_vmap: the vectorised function takes positional arguments only, got keyword "
                f"argument(s) {sorted(kwargs)}; pass them by position (in_axes=dict(name=...) "
                "gives the axes of a parameter by its name)"
            )
        if isinstance(in_axes, dict):
            specs = _named_in_axes(fun, in_axes, len(args))
        elif isinstance(in_axes, tuple):
            specs = in_axes
        else:
            specs = (in_axes,) * len(args)
        if len(specs) != len(args):
            raise ValueError(f"filter_vmap: in_axes has {len(specs)} entries for {len(args)} arguments")
        leaf_axes: list[Any] = []
        for i, (arg, spec) in enumerate(zip(args, specs)):
            axes = _resolve(spec, arg, f"in_axes[{i}]")
            leaf_axes += [a if is_array(x) else None for a, x in zip(axes, _tree.leaves(arg))]
        all_leaves, treedef = _tree.flatten(args)
        dyn_idx = [i for i, a in enumerate(leaf_axes) if a is not None]
        # Recorded by the trace: the output's PyTreeDef, and per output leaf either
        # ("mapped", axis), ("unmapped", None) for an array returned once, or ("static", value).
        cell: list[Any] = [None, None]

        def mapped(dyn: list[Any]) -> tuple[list[Any], list[Any]]:
            leaves = list(all_leaves)
            for i, v in zip(dyn_idx, dyn):
                leaves[i] = v
            out = fun(*treedef.unflatten(leaves))
            out_leaves, out_def = _tree.flatten(out)
            out_ax = _resolve(out_axes, out, "out_axes")
            layout: list[tuple[str, Any]] = []
            vmapped: list[Any] = []
            once: list[Any] = []
            for x, a in zip(out_leaves, out_ax):
                if a is not None and (is_array(x) or type(x) in _PYTHON_SCALARS):
                    layout.append(("mapped", a))
                    vmapped.append(x)
                elif is_array(x):
                    layout.append(("unmapped", None))
                    once.append(x)
                else:
                    layout.append(("static", x))
            cell[0], cell[1] = out_def, layout
            return vmapped, once

        if not dyn_idx and axis_size is None:
            vmapped, once = mapped([])
            if vmapped:
                raise ValueError(
                    "filter_vmap: no argument is mapped (every in_axes entry is None, or over "
                    "non-array leaves) and axis_size is not given, so the size of the mapped axis "
                    "that out_axes asks for is unknown; pass axis_size=... or out_axes=None"
                )
        else:
            dyn = [all_leaves[i] for i in dyn_idx]
            axes = [leaf_axes[i] for i in dyn_idx]
            vmapped, once = jax.vmap(
                mapped, in_axes=(axes,), out_axes=(0, None), axis_name=axis_name, axis_size=axis_size
            )(dyn)
        out_def, layout = cell
        it_mapped, it_once = iter(vmapped), iter(once)
        leaves_out = []
        for kind, v in layout:
            if kind == "mapped":
                x = next(it_mapped)
                leaves_out.append(x if v == 0 else jnp.moveaxis(x, 0, v))
            elif kind == "unmapped":
                leaves_out.append(next(it_once))
            else:
                leaves_out.append(v)
        return out_def.unflatten(leaves_out)

    return wrapper
