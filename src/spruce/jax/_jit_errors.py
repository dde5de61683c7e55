"""JAX's errors from a ``filter_jit`` call, rewritten in the user's terms: ``dyn[3]`` becomes
the key path of the argument (``args[0]['w']``), and a sharding that does not fit names the
leaf, its shape and the mesh axes.
"""

from __future__ import annotations

import re
from typing import Any

import jax

from .. import tree as _tree
from .._place import leaf_shardings
from ._split import _call_first, _is_dynamic, _split


def _name(fun: Any, args: tuple[Any, ...] = (), kept: int = 0) -> str:
    """The function's name for messages: the Module's class when filter_jit wraps a Module
    (``args[0]``, called through ``_call_first``)."""
    if fun is _call_first and kept and args:
        return str(type(args[0]).__qualname__)
    return str(getattr(fun, "__qualname__", None) or type(fun).__name__)


def _in_shardings(fun: Any, shardings: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kept: int, n: int) -> tuple[Any, ...]:
    """jax.jit's in_shardings for filter_jit's array-leaf list: the entries of filter_jit's
    ``in_shardings`` (a prefix of the positional arguments) at the array leaves of
    ``args[kept:]``; None (unconstrained) for a leading Module's leaves and keyword arguments."""
    user = args[kept:]
    lead = len(_split(_tree.leaves(args[:kept]))[0]) if kept else 0
    per_leaf = leaf_shardings(shardings, user, f"filter_jit({_name(fun, args, kept)}): in_shardings", "args")
    out: list[Any] = [None] * lead
    out += [s for s, x in zip(per_leaf, _tree.leaves(user)) if _is_dynamic(x)]
    out += [None] * (n - len(out))
    return tuple(out)


def _shown(path: tuple[Any, ...], kept: int) -> str:
    """A key path into ``(args, kwargs)`` as the user sees it: ``args[0]['w']``, ``keyword
    argument g[0]``, or a place in the function's own Module (``kept``: 1 if ``args[0]`` is
    that Module)."""
    where, rest = path[0].idx, path[1:]
    if where == 1:
        return "keyword argument " + _tree.keystr(rest[:1], simple=True) + _tree.keystr(rest[1:])
    if kept and rest[0].idx < kept:
        return f"the array at {_tree.keystr(rest[1:]) or '<root>'} of the function's own Module"
    return f"argument args[{rest[0].idx - kept}]{_tree.keystr(rest[1:])}"


_FULL_SHAPE = re.compile(r"full shape: (\([^)]*\))")
_BARE_OUTPUT = "One of pjit outputs with pytree key path result is"
_DYN_PATH = re.compile(r"\s*with pytree key path dyn\[(\d+)\]")
_ARG_SHARDING = re.compile(r"arg sharding: (.*) for arg type: (\S+)", re.DOTALL)


def _call_error(err: Exception, args: tuple[Any, ...], kwargs: dict[str, Any], kept: int) -> Exception | None:
    """A clearer error for a call that failed with ``err``, naming the argument's key path, or
    None to re-raise ``err`` as it is.  Cases: an array argument was deleted (donated to an
    earlier call); JAX's errors about an argument and its ``in_shardings`` entry, which name a
    position in filter_jit's list of array leaves (``dyn[2]``) or no argument at all."""
    pairs: list[tuple[Any, Any]] = _tree.leaves_with_path((args, kwargs))
    dyn = [(p, x) for p, x in pairs if _is_dynamic(x)]
    for path, x in dyn:
        try:
            gone = isinstance(x, jax.Array) and x.is_deleted()
        except Exception:  # not a concrete array (a tracer): not deleted
            gone = False
        if gone:
            return RuntimeError(
                f"filter_jit: {_shown(path, kept)} (a {x.dtype}{list(x.shape)} array) has been deleted: it "
                "was donated to an earlier call (donate='all' or 'all-except-first' gives its buffer "
                "to that call's output) or deleted explicitly. Pass that call's output instead (e.g. "
                "`params = step(params, batch)`), copy the array before the call, or do not donate "
                "it (donate='all-except-first' keeps the first argument, donate='none' keeps all)"
            )
    if "previously donated in the same call" in str(err):  # one buffer passed twice, donated
        seen: dict[int, Any] = {}
        for path, x in dyn:
            if id(x) in seen:
                return ValueError(
                    f"filter_jit: {_shown(seen[id(x)], kept)} and {_shown(path, kept)} are the same array, "
                    "and its buffer is donated: it cannot be given to the call twice. Pass a copy "
                    "as one of them, or do not donate it (donate='none', or 'all-except-first' "
                    "when it is in the first argument)"
                )
            seen[id(x)] = path
    if not isinstance(err, ValueError):
        return None
    text = str(err)
    if "should evenly divide the shape" in text:  # jax's IndivisibleError names no argument
        m = _FULL_SHAPE.search(text)
        if m is not None:
            hits = [p for p, x in dyn if str(tuple(getattr(x, "shape", ()))) == m.group(1)]
            if hits:
                shown = ", ".join(_shown(p, kept) for p in hits[:4]) + (", ..." if len(hits) > 4 else "")
                return ValueError(
                    f"filter_jit: the in_shardings entry for {'' if len(hits) == 1 else 'one of '}{shown} "
                    f"(shape {m.group(1)}) does not divide it: {text}"
                )
            return ValueError(f"filter_jit: an output of shape {m.group(1)} does not fit its out_shardings entry: {text}")
    if text.startswith(_BARE_OUTPUT):
        return ValueError("filter_jit: the output (one array) is" + text[len(_BARE_OUTPUT):])
    m = _DYN_PATH.search(text)
    if m is not None and int(m.group(1)) < len(dyn):
        shown = _shown(dyn[int(m.group(1))][0], kept)
        return ValueError(f"filter_jit: {shown}: " + text[: m.start()] + text[m.end():])
    m = _ARG_SHARDING.search(text)
    if m is not None:
        for path, x in dyn:
            if str(getattr(x, "sharding", None)) == m.group(1).strip() and str(jax.typeof(x)) == m.group(2):
                return ValueError(
                    f"filter_jit: {_shown(path, kept)} is committed to a sharding other than its "
                    f"in_shardings entry (move it with jax.device_put, or give it None): {text}"
                )
    return None
