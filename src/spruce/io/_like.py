"""Loading into ``like``: each leaf of the wanted structure filled from the file entry of its
dotted name, checked (shape, dtype, kind) and cast only as ``dtype=`` says (``_Cast``), placed
on its sharding, with the mismatch messages that name the key paths (``_load_like``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Union

import numpy as np

from .. import tree as _tree
from .._arrays import jax_if_imported
from .._names import flatten_names
from ._dtypes import describe, dtype_of
from ._errors import CheckpointError, MismatchError
from ._files import Parsed
from ._prng import is_key_dtype, never_stored, wrap_keys
from ._structure import TREEDEF_KEY, LeafSpec, leaf_table
from ._values import describe_leaf

Rename = Union[Callable[[str], Union[str, None]], Mapping[str, str]]

_MAX_LISTED = 20  # names listed in one message


class _Cast:
    """The ``dtype=`` policy of ``load``."""

    def __init__(self, dtype: Any) -> None:
        self.like = isinstance(dtype, str) and dtype == "like"
        self.dtype = None if dtype is None or self.like else dtype_of_any(dtype)
        if self.dtype is not None and not _is_float(self.dtype):
            # A float tensor cast to an integer, bool, complex or object dtype would lose or
            # change its values without a word: only a cast between float types is a policy.
            raise TypeError(
                f"load: dtype= casts floating-point tensors to another floating-point dtype; "
                f"{describe(self.dtype)} is not one (integer and bool tensors are never cast)"
            )

    def result(self, stored: np.dtype[Any], wanted: Any = None) -> np.dtype[Any]:
        """The dtype a tensor stored as ``stored`` loads as (into a leaf of dtype ``wanted``)."""
        if not _is_float(stored):
            if self.like and wanted is not None and _is_int(stored) and not is_key_dtype(wanted):
                try:
                    w = np.dtype(wanted)
                except TypeError:
                    return stored
                return w if _is_int(w) else stored
            return stored
        if self.dtype is not None:
            return self.dtype
        if self.like and wanted is not None:
            w = np.dtype(wanted)
            return w if _is_float(w) else stored
        return stored

    def apply(self, arr: np.ndarray[Any, Any], wanted: Any = None) -> np.ndarray[Any, Any]:
        to = self.result(arr.dtype, wanted)
        return arr if to == arr.dtype else arr.astype(to)


def _is_float(dt: np.dtype[Any]) -> bool:
    return dt.kind == "f" or (dt.kind == "V" and "float" in dt.name)


def _is_int(dt: np.dtype[Any]) -> bool:
    return dt.kind in "iu"


class _Unfit(Exception):
    """A file entry that cannot load into its ``like`` leaf; the message is the file side of
    the mismatch line."""


def _check_fits(arr: np.ndarray[Any, Any], to: np.dtype[Any], stored_text: str) -> None:
    """Raise _Unfit unless every value of the integer array ``arr`` fits the integer ``to``."""
    if arr.size == 0:
        return
    info = np.iinfo(to)
    lo, hi = int(arr.min()), int(arr.max())
    if info.min <= lo and hi <= info.max:
        return
    bad = lo if lo < info.min else hi
    raise _Unfit(
        f"{stored_text} holding {bad} (its values span [{lo}, {hi}]), outside the range of "
        f"{describe(to)}, [{info.min}, {info.max}], so dtype='like' cannot cast it"
    )


def dtype_of_any(dtype: Any) -> np.dtype[Any]:
    """``np.dtype(dtype)``, also for ml_dtypes names such as ``'bfloat16'``; TypeError if it is
    not a dtype."""
    if isinstance(dtype, str):
        try:
            return dtype_of(dtype)
        except ValueError:
            pass
    try:
        out: np.dtype[Any] = np.dtype(dtype)
        return out
    except TypeError:
        raise TypeError(f"load: dtype must be None, 'like' or a dtype, got {dtype!r}") from None


# -- loading helpers -----------------------------------------------------------------------------


def _listing(names: list[str]) -> str:
    return _joined([repr(n) for n in names[:_MAX_LISTED]], len(names))


def _joined(shown: list[str], total: int) -> str:
    more = f" and {total - _MAX_LISTED} more" if total > _MAX_LISTED else ""
    return f"{', '.join(shown[:_MAX_LISTED])}{more}"


def _entries(parsed: Parsed, doc: dict[str, Any] | None) -> dict[str, LeafSpec]:
    """The file's loadable entries by name: the stored structure's leaves, then the tensors
    it does not use."""
    out: dict[str, LeafSpec] = {}
    if doc is not None:
        for spec in leaf_table(doc["tree"], parsed.path):
            if spec.name in out:
                raise CheckpointError(f"corrupted {TREEDEF_KEY} metadata: the name {spec.name!r} is used twice", parsed.path)
            if spec.tensor and spec.name not in parsed.tensors:
                raise CheckpointError(
                    f"the stored structure names a tensor {spec.name[:200]!r} that the file does not have", parsed.path
                )
            out[spec.name] = spec
    for name in parsed.tensors:
        if name not in out:
            out[name] = LeafSpec(name, True, False, None)
    return out


def _renamed(entries: dict[str, LeafSpec], rename: Rename | None) -> dict[str, tuple[str, LeafSpec]]:
    if rename is None:
        return {n: (n, s) for n, s in entries.items()}
    out: dict[str, tuple[str, LeafSpec]] = {}
    for name, spec in entries.items():
        if isinstance(rename, Mapping):
            target: Any = rename.get(name, name)
        else:
            target = rename(name)
            if target is None:
                continue
        if type(target) is not str:
            raise TypeError(f"load: rename must give a str (or None to drop), got {target!r} for {name!r}")
        if target in out:
            raise ValueError(f"load: rename maps both {out[target][0]!r} and {name!r} to {target!r}")
        out[target] = (name, spec)
    return out


def _plain(array: Callable[[str], Any], spec: LeafSpec) -> Any:
    """The leaf as load without ``like`` gives it by name (typed keys as their key data)."""
    if not spec.tensor:
        return spec.value
    arr = array(spec.name)
    return arr[()] if spec.scalar and arr.shape == () else arr


def _spec_text(parsed: Parsed, spec: LeafSpec, cast: _Cast | None = None, x: Any = None) -> str:
    if spec.skipped:
        return f"no data: save left out {spec.value[:200]} (skip_code=True)"
    if not spec.tensor:
        return f"a stored {type(spec.value).__name__} value"
    e = parsed.tensors[spec.name]
    if spec.key is not None:
        return f"PRNG keys ({spec.key[:60]}) with key data {describe(e.final_dtype)}{list(e.shape)}"
    text = f"{describe(e.final_dtype)}{list(e.shape)}"
    if cast is not None and (cast.like or cast.dtype is not None):
        to = cast.result(e.final_dtype, getattr(x, "dtype", None))
        if to != e.final_dtype:  # say what the dtype= policy made of it
            policy = "'like'" if cast.like else describe(to)
            text += f" (loaded as {describe(to)} by dtype={policy})"
    return text


def _like_text(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{describe(x.dtype)}{list(x.shape)}"
    if never_stored(x):
        return describe_leaf(x)
    return f"a {type(x).__name__}"


def _jax_types() -> tuple[Any, Any]:
    jax = jax_if_imported()
    if jax is None:
        return None, None
    return getattr(jax, "Array", None), getattr(jax, "ShapeDtypeStruct", None)


def _place(reader: Any, name: str, sharding: Any, dtype: np.dtype[Any], where: str) -> Any:
    """A jax.Array on ``sharding`` whose devices each read only their own block.

    Raises:
      spruce.sharding.ShardingError: ``sharding`` does not fit the tensor (a spec longer than
        its rank, a dimension the mesh axes do not divide), naming the key path ``where``, the
        shape and the spec; JAX's error is chained.
    """
    import jax

    e = reader.parsed.tensors[name]
    failed: list[BaseException] = []

    def block(index: Any) -> np.ndarray[Any, Any]:
        try:
            arr: np.ndarray[Any, Any] = reader.region(name, index, detach=True)
        except BaseException as err:  # reading failed: raised as it is, not as a sharding error
            failed.append(err)
            raise
        return arr if arr.dtype == dtype else arr.astype(dtype)

    spec = getattr(sharding, "spec", None)
    if isinstance(spec, jax.sharding.PartitionSpec) and len(spec) > len(e.shape):
        from .._place import ShardingError

        raise ShardingError(
            f"load: {where or '<root>'}: the sharding {spec} does not fit the tensor of shape "
            f"{list(e.shape)}: the spec has {len(spec)} entries, the tensor {len(e.shape)} dimensions "
            "(a spec has at most one entry per dimension)"
        )
    try:
        return jax.make_array_from_callback(e.shape, sharding, block)
    except Exception as err:
        if failed or isinstance(err, (CheckpointError, OSError)):
            raise
        from .._place import ShardingError

        spec = getattr(sharding, "spec", sharding)
        raise ShardingError(
            f"load: {where or '<root>'}: the sharding {spec} does not fit the tensor of shape "
            f"{list(e.shape)}: {type(err).__name__}: {err}"
        ) from err


def _fill(parsed: Parsed, reader: Any, spec: LeafSpec, x: Any, sharding: Any, cast: _Cast, where: str) -> tuple[bool, Any]:
    """``(ok, value)``: the file entry ``spec`` loaded as the kind of leaf ``x`` is (placed on
    ``sharding`` if it is not None); ``where`` is the leaf's key path, for errors.

    Raises:
      _Unfit: an integer tensor whose values do not fit the dtype ``dtype='like'`` casts to.
    """
    if spec.skipped:  # code the file does not hold: like's own, if like has code there
        return (True, x) if never_stored(x) else (False, None)
    if spec.key is not None or is_key_dtype(getattr(x, "dtype", None)):
        return _fill_keys(parsed, reader, spec, x, sharding, where)
    t = type(x)
    if t is bool or t is int or t is float:
        if not spec.tensor:
            return type(spec.value) is t, spec.value
        e = parsed.tensors[spec.name]
        kinds = {bool: "b", int: "iu", float: "f"}[t]
        dt = e.final_dtype
        is_float = dt.kind == "f" or "float" in dt.name
        if e.shape != () or not ((dt.kind in kinds) or (t is float and is_float)):
            return False, None
        return True, t(reader.array(spec.name)[()])
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        if spec.tensor:
            return False, None
        return type(spec.value) is t, spec.value
    if not spec.tensor:
        return False, None
    e = parsed.tensors[spec.name]
    try:
        to = cast.result(e.final_dtype, x.dtype)
        same = tuple(x.shape) == e.shape and np.dtype(x.dtype) == to
    except TypeError:
        same = False
    if not same:
        return False, None
    jarr, sds = _jax_types()
    if sharding is None and (
        (jarr is not None and isinstance(x, jarr)) or (sds is not None and isinstance(x, sds) and x.sharding is not None)
    ):
        sharding = x.sharding
    if to != e.final_dtype and _is_int(to):
        _check_fits(reader.array(spec.name), to, _spec_text(parsed, spec))
    if sharding is not None and not isinstance(x, np.generic):
        return True, _place(reader, spec.name, sharding, to, where)
    arr = cast.apply(reader.array(spec.name), to)
    if isinstance(x, np.generic):
        return True, arr[()]
    return True, arr


def _fill_keys(parsed: Parsed, reader: Any, spec: LeafSpec, x: Any, sharding: Any, where: str) -> tuple[bool, Any]:
    """``_fill`` for typed PRNG keys: stored keys into a key leaf of ``like`` (a key array or
    a ``jax.ShapeDtypeStruct``) of the same shape and implementation; a jax.Array, placed on
    ``sharding``, else on the leaf's own sharding, else on JAX's default device."""
    if spec.key is None or not is_key_dtype(getattr(x, "dtype", None)):
        return False, None
    keys = wrap_keys(reader.array(spec.name), spec.key, parsed.path, where)
    if keys.dtype != x.dtype or tuple(keys.shape) != tuple(x.shape):
        return False, None
    if sharding is None:
        sharding = getattr(x, "sharding", None)
    if sharding is not None:
        import jax

        keys = jax.device_put(keys, sharding)
    return True, keys


def _like_casts(parsed: Parsed, spec: LeafSpec, x: Any) -> bool:
    """Whether ``dtype='like'`` would load the entry ``spec`` into the array leaf ``x``: the
    same shape, and a stored dtype that this policy casts to ``x``'s."""
    if not spec.tensor or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return False
    e = parsed.tensors[spec.name]
    try:
        return tuple(x.shape) == e.shape and _Cast("like").result(e.final_dtype, x.dtype) == np.dtype(x.dtype)
    except TypeError:
        return False


def _shardings_for(shardings: Any, like: Any, n: int) -> list[Any]:
    """One sharding (or None) per leaf of ``like``, from a tree of shardings that is a prefix
    of ``like`` (None entries: not placed)."""
    if shardings is None:
        return [None] * n
    from .._place import leaf_shardings

    return leaf_shardings(shardings, like, "load", "like")


def _load_like(
    parsed: Parsed, doc: dict[str, Any] | None, reader: Any, like: Any, strict: bool, rename: Rename | None,
    shardings: Any = None, cast: _Cast | None = None,
) -> tuple[Any, list[str], list[str]]:
    names = list(flatten_names(like))  # raises on two leaves with one name
    leaves, treedef = _tree.flatten(like)
    placements = _shardings_for(shardings, like, len(leaves))
    cast = cast if cast is not None else _Cast(None)
    entries = _renamed(_entries(parsed, doc), rename)
    out: list[Any] = []
    missing: list[str] = []
    mismatched: list[tuple[str, str, str]] = []
    castable: list[str] = []  # mismatched leaves that dtype='like' would load
    used: set[str] = set()
    for name, x, sharding in zip(names, leaves, placements):
        hit = entries.get(name)
        if hit is None:
            if not never_stored(x):  # (code that no file holds stays like's, not missing)
                missing.append(name)
            out.append(x)
            continue
        used.add(name)
        unfit = None
        try:
            ok, value = _fill(parsed, reader, hit[1], x, sharding, cast, name)
        except _Unfit as e:
            ok, unfit = False, str(e)
        if not ok:
            shown = name if hit[0] == name else f"{name} (stored as {hit[0]})"
            mismatched.append((shown, _like_text(x), unfit or _spec_text(parsed, hit[1], cast, x)))
            if not cast.like and _like_casts(parsed, hit[1], x):
                castable.append(name)
            out.append(x)
            continue
        out.append(value)
    # (leaves save left out hold no data: like need not have them)
    unused = [(target, orig) for target, (orig, spec) in entries.items() if target not in used and not spec.skipped]
    unexpected = [orig for _, orig in unused]
    if mismatched:
        lines = "; ".join(f"{n}: like has {a}, the file {b}" for n, a, b in mismatched[:_MAX_LISTED])
        more = f" and {len(mismatched) - _MAX_LISTED} more" if len(mismatched) > _MAX_LISTED else ""
        plural = "s" if len(castable) > 1 else ""
        hint = f"; dtype='like' would cast {_listing(castable)} to like's dtype{plural}" if castable else ""
        raise MismatchError(
            f"load: {parsed.path} does not fit like: {lines}{more}{hint}",
            missing, unexpected, mismatched,
        )
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing from the file: {_listing(missing)}")
        if unused:  # the names rename gave, which are the ones compared with like's
            listed = [repr(t) if t == o else f"{t!r} (stored as {o!r})" for t, o in unused[:_MAX_LISTED]]
            parts.append(f"in the file but not in like: {_joined(listed, len(unused))}")
        advice = (
            "names as rename= gave them; strict=False loads what matches" if rename is not None
            else "pass rename= to map names, or strict=False to load what matches"
        )
        raise MismatchError(
            f"load: {parsed.path} does not match like: {'; '.join(parts)} ({advice})",
            missing, unexpected,
        )
    return treedef.unflatten(out), missing, unexpected
