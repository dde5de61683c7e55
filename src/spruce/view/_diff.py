"""``diff(a, b)``: two trees compared tensor by tensor, and ``diff_html`` its page."""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

import numpy as np

from .. import tree as _tree
from .._arrays import format_bytes
from ..io import CheckpointInfo, TensorInfo, path_name, read_info
from ..io._api import load_flat
from ._model import _array_info, safe_repr
from ._stats import fmt
from ._style import bar, esc, page

ADDED, REMOVED, RESHAPED, UNREADABLE, CHANGED, SAME = "added", "removed", "reshaped", "unreadable", "changed", "same"
_ORDER = {REMOVED: 0, ADDED: 1, RESHAPED: 2, UNREADABLE: 3, CHANGED: 4, SAME: 5}
_CSS = {ADDED: "add", REMOVED: "del", RESHAPED: "shp", UNREADABLE: "del", CHANGED: "chg", SAME: "same"}
_CHUNK = 1 << 20


class TensorDiff(NamedTuple):
    """One name of a ``diff``.

    Attributes:
      name: the dotted name (as ``spruce.io`` names tensors).
      status: ``'removed'`` (only in A), ``'added'`` (only in B), ``'reshaped'`` (shape or
        dtype differ), ``'unreadable'`` (the values of one side could not be read or compared,
        e.g. a deleted (donated) jax.Array; ``note`` says why), ``'changed'`` (values differ),
        ``'same'``.
      a, b: ``'float32[384, 384]'`` (or a leaf's short repr) on each side; ``''`` when absent.
      max_abs: the largest ``|b - a|`` over the elements; NaN when the values were not compared
        as numbers (absent, reshaped, unreadable, no data, or non-numeric arrays such as strings
        or objects, which compare by element equality) and infinite where exactly one side is
        NaN or infinite.
      rel_l2: ``||b - a|| / ||a||`` (L2 norms over all elements; infinite if ``||a|| = 0``
        and they differ); NaN when not compared as numbers.
      nbytes: bytes of the tensor (B's when present, else A's).
      note: why the values are unreadable (the exception's type and message); ``''`` otherwise.
    """

    name: str
    status: str
    a: str
    b: str
    max_abs: float
    rel_l2: float
    nbytes: int
    note: str = ""


def _named(tree: Any, values: bool) -> dict[str, Any]:
    """The leaves of one side of ``diff`` by dotted name (see ``diff`` for paths and headers)."""
    if isinstance(tree, (str, os.PathLike)):
        return load_flat(tree) if values else dict(read_info(tree).tensors)
    if isinstance(tree, CheckpointInfo):
        return dict(tree.tensors)
    if type(tree) is dict and tree and all(isinstance(v, TensorInfo) for v in tree.values()):
        return dict(tree)  # read_header's result: already the file's names
    out: dict[str, Any] = {}
    for path, leaf in _tree.leaves_with_path(tree, is_leaf=lambda x: isinstance(x, TensorInfo)):
        name = path_name(path)
        if name in out:
            raise ValueError(f"diff: two leaves get the name {name!r}")
        out[name] = leaf
    return out


def _spec(x: Any) -> tuple[str, tuple[int, ...], int] | None:
    """``(dtype, shape, nbytes)`` of an array or TensorInfo, else None."""
    if isinstance(x, TensorInfo):
        return str(x.dtype), tuple(x.shape), int(x.nbytes)
    info = _array_info(x)
    if info is None:
        return None
    return info[0], info[1], math.prod(info[1]) * info[2]


def _text(x: Any) -> str:
    s = _spec(x)
    if s is None:
        return safe_repr(x, 40)
    return f"{s[0]}[{', '.join(str(d) for d in s[1])}]"


def _numeric(c: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    kind = c.dtype.kind
    if kind == "c":
        return c.astype(np.complex128)
    if kind == "V":  # ml_dtypes
        return c.astype(np.float32).astype(np.float64)
    return c.astype(np.float64)


def _is_numeric(dtype: np.dtype[Any]) -> bool:
    """Whether ``compare_values`` can take the dtype: bool, integers, floats, complex and the
    ml_dtypes floats (kind ``'V'`` without fields)."""
    return dtype.kind in "biufc" or (dtype.kind == "V" and dtype.fields is None and dtype.itemsize <= 2)


def _compare(a: Any, b: Any) -> tuple[str, float, float, str]:
    """``(status, max_abs, rel_l2, note)`` of two arrays of one shape and dtype: numbers by
    ``compare_values``, other dtypes (strings, objects) by element equality; an array that
    cannot be read (or compared) is UNREADABLE with the reason, never an exception."""
    nan = math.nan
    try:
        fa, fb = np.asarray(a), np.asarray(b)
    except Exception as e:  # e.g. a deleted (donated) jax.Array
        return UNREADABLE, nan, nan, f"{type(e).__name__}: {e}"
    try:
        if _is_numeric(fa.dtype) and _is_numeric(fb.dtype):
            m, r = compare_values(fa, fb)
            return (CHANGED if m > 0 else SAME), m, r, ""
        fa, fb = fa.reshape(-1), fb.reshape(-1)
        for start in range(0, fa.size, _CHUNK):
            if not np.array_equal(fa[start:start + _CHUNK], fb[start:start + _CHUNK]):
                return CHANGED, nan, nan, ""
        return SAME, nan, nan, ""
    except Exception as e:  # an element __eq__ that raises or is not a bool
        return UNREADABLE, nan, nan, f"could not compare the values: {type(e).__name__}: {e}"


def compare_values(a: Any, b: Any) -> tuple[float, float]:
    """``(max |b - a|, ||b - a|| / ||a||)`` of two arrays of one shape, in chunks of 2**20
    elements (positions NaN on both sides, or the same infinity, count as equal)."""
    fa = np.asarray(a).reshape(-1)
    fb = np.asarray(b).reshape(-1)
    max_abs = 0.0
    sq_diff = 0.0
    sq_a = 0.0
    for start in range(0, fa.size, _CHUNK):
        ca = _numeric(fa[start:start + _CHUNK])
        cb = _numeric(fb[start:start + _CHUNK])
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(cb - ca)
        if d.dtype.kind == "f" and not np.isfinite(d).all():
            same = (ca == cb) | (np.isnan(ca) & np.isnan(cb))
            d[same] = 0.0
            d[np.isnan(d)] = math.inf
        if d.size:
            max_abs = max(max_abs, float(d.max()))
            finite = np.isfinite(ca)
            sq_a += float(np.sum(np.square(np.abs(ca[finite]) if ca.dtype.kind == "c" else ca[finite])))
            with np.errstate(over="ignore"):
                sq_diff += float(np.sum(np.square(d)))
    if max_abs == 0:
        return 0.0, 0.0
    rel = math.sqrt(sq_diff) / math.sqrt(sq_a) if sq_a > 0 else math.inf
    return max_abs, rel


def diff(a: Any, b: Any, *, values: bool = True) -> list[TensorDiff]:
    """Compare two trees leaf by leaf, matched by dotted name (``spruce.io``'s naming).

    Args:
      a, b: pytrees (a Module, a loaded checkpoint, ``spruce.io.unflatten_names`` of a flat
        state dict); ``spruce.io.TensorInfo`` leaves (a header, no data) compare by shape and
        dtype only.  A ``str`` or ``os.PathLike`` is a checkpoint file (or sharded directory)
        and is read as the ``spruce diff`` command reads it: its header (``read_info``), or with
        ``values`` its entries (arrays memory-mapped, and the values spruce stored in the
        metadata).  A path, a ``read_info`` result (``CheckpointInfo``) and a ``read_header``
        result (a dict of TensorInfo) are named by the file's tensor names as they are
        (``encoder.0.weight``), not escaped again (a tree's leaves are named by
        ``spruce.io.path_name``, which writes a ``.`` inside a key as ``%2E``, as ``save`` does).
      values: compare the values of tensors whose shape and dtype agree (reads both; False
        compares names, shapes and dtypes only).  Numeric arrays get ``max_abs`` and
        ``rel_l2``; string and object arrays compare by element equality (``'changed'`` or
        ``'same'``, both numbers NaN); an array whose values cannot be read (a deleted
        jax.Array, a conversion that raises) is ``'unreadable'`` with the reason in ``note``.

    Returns:
      One ``TensorDiff`` per name of either tree: removed, added, reshaped and unreadable names first, then
      the changed ones by decreasing relative L2 change (the largest change first), then the
      unchanged ones, each group in name order.

    Raises:
      ValueError: two leaves of one tree get the same name.
      CheckpointError, OSError: a path that cannot be read (as ``spruce.io.load``).

    >>> import numpy as np
    >>> a = {'w': np.ones(4, np.float32), 'b': np.zeros(2), 'old': np.ones(1)}
    >>> b = {'w': np.array([1, 1, 1, 3], np.float32), 'b': np.zeros(2), 'new': np.ones(1)}
    >>> [(d.name, d.status, d.max_abs) for d in diff(a, b)]
    [('old', 'removed', nan), ('new', 'added', nan), ('w', 'changed', 2.0), ('b', 'same', 0.0)]
    >>> round(diff(a, b)[2].rel_l2, 6)   # ||(0, 0, 0, 2)|| / ||(1, 1, 1, 1)||
    1.0
    """
    na, nb = _named(a, values), _named(b, values)
    out: list[TensorDiff] = []
    nan = math.nan
    for name in list(na) + [n for n in nb if n not in na]:
        xa, xb = na.get(name, _MISSING), nb.get(name, _MISSING)
        sa, sb = _spec(xa), _spec(xb)
        nbytes = (sb or sa or ("", (), 0))[2]
        ta = "" if xa is _MISSING else _text(xa)
        tb = "" if xb is _MISSING else _text(xb)
        if xb is _MISSING:
            out.append(TensorDiff(name, REMOVED, ta, tb, nan, nan, nbytes))
        elif xa is _MISSING:
            out.append(TensorDiff(name, ADDED, ta, tb, nan, nan, nbytes))
        elif (sa is None) != (sb is None) or (sa is not None and sb is not None and sa[:2] != sb[:2]):
            out.append(TensorDiff(name, RESHAPED, ta, tb, nan, nan, nbytes))
        elif sa is None:  # two non-array leaves
            equal = _equal(xa, xb)
            num = _number_diff(xa, xb)
            out.append(TensorDiff(name, SAME if equal else CHANGED, ta, tb, num, nan, 0))
        elif not values or isinstance(xa, TensorInfo) or isinstance(xb, TensorInfo):
            out.append(TensorDiff(name, SAME, ta, tb, nan, nan, nbytes))
        else:
            status, m, r, note = _compare(xa, xb)
            out.append(TensorDiff(name, status, ta, tb, m, r, nbytes, note))
    out.sort(key=_rank)
    return out


_MISSING: Any = object()


def _rank(d: TensorDiff) -> tuple[int, float, float, str]:
    change = -d.rel_l2 if d.status == CHANGED and not math.isnan(d.rel_l2) else 0.0
    size = -d.max_abs if d.status == CHANGED and not math.isnan(d.max_abs) else 0.0
    return (_ORDER[d.status], change, size, d.name)


def _equal(x: Any, y: Any) -> bool:
    try:
        return type(x) is type(y) and bool(x == y)
    except Exception:  # an __eq__ that raises or returns an array
        return x is y


def _number_diff(x: Any, y: Any) -> float:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        try:
            return float(abs(y - x))
        except (OverflowError, TypeError):
            return math.nan
    return math.nan


def diff_html(a: Any, b: Any, *, title: str | None = None, names: tuple[str, str] = ("A", "B"),
              values: bool = True, entries: list[TensorDiff] | None = None) -> str:
    """A self-contained HTML page of ``diff(a, b)``: the counts, then "what changed most" (every
    removed, added, reshaped and changed tensor, the largest change first, each with A's and
    B's dtype and shape side by side, max abs difference and relative L2 change with a bar, or
    "—" where the values are not numbers; an unreadable tensor shows the reason),
    then the unchanged tensors in a collapsed list.  Removed (and unreadable), added, reshaped
    and changed tensors have distinct colours (red, green, purple, amber), in light and dark
    themes.

    Args:
      a, b, values: as ``diff``.
      title: the page title; names: what to call the two sides (e.g. file names).
      entries: an already computed ``diff(a, b)`` (then ``a`` and ``b`` are not read).

    Returns:
      The page, a str; each tensor row carries ``data-name`` and ``data-status``.
    """
    rows = entries if entries is not None else diff(a, b, values=values)
    counts = {s: 0 for s in _ORDER}
    for d in rows:
        counts[d.status] += 1
    name = title or f"{names[0]} vs {names[1]}"
    tags = " ".join(f'<span class="tag {_CSS[s]}">{counts[s]:,} {s}</span>' for s in _ORDER)
    finite = [d.rel_l2 for d in rows if d.status == CHANGED and math.isfinite(d.rel_l2)]
    top = max(finite) if finite else 0.0
    head = (f'<tr><th>status</th><th>name</th><th>{esc(names[0])}</th><th>{esc(names[1])}</th>'
            '<th class="num">bytes</th><th class="num">max |B - A|</th><th class="num">relative L2 change</th><th></th></tr>')

    def row(d: TensorDiff) -> str:
        none = "—" if d.status in (CHANGED, SAME, UNREADABLE) else ""  # compared, but not as numbers
        rel = none if math.isnan(d.rel_l2) else fmt(d.rel_l2)
        mx = none if math.isnan(d.max_abs) else fmt(d.max_abs)
        share = (d.rel_l2 / top if top and math.isfinite(d.rel_l2) else (1.0 if d.rel_l2 == math.inf else 0.0))
        graph = bar(share) if d.status == CHANGED and not math.isnan(d.rel_l2) else esc(d.note)
        return (f'<tr data-name="{esc(d.name)}" data-status="{d.status}">'
                f'<td><span class="tag {_CSS[d.status]}">{d.status}</span></td>'
                f'<td class="mono">{esc(d.name)}</td>'
                f'<td class="mono {_CSS[d.status] if d.status in (REMOVED, RESHAPED) else ""}">{esc(d.a)}</td>'
                f'<td class="mono {_CSS[d.status] if d.status in (ADDED, RESHAPED) else ""}">{esc(d.b)}</td>'
                f'<td class="num">{esc(format_bytes(d.nbytes))}</td><td class="num">{mx}</td><td class="num">{rel}</td>'
                f'<td>{graph}</td></tr>')

    differing = [d for d in rows if d.status != SAME]
    same = [d for d in rows if d.status == SAME]
    checked = "values compared" if values else "names, shapes and dtypes compared (no values)"
    body = [f"<h1>{esc(name)}</h1>",
            f'<p class="sub">{len(rows):,} names · {checked}</p><p>{tags}</p>',
            "<h2>what changed most</h2>"]
    if differing:
        body.append(f'<table class="dl">{head}{"".join(row(d) for d in differing)}</table>')
    else:
        body.append('<p class="note">nothing differs</p>')
    body.append(f"<details><summary><b>{len(same):,} unchanged</b></summary>"
                f'<table class="dl">{head}{"".join(row(d) for d in same)}</table></details>')
    return page(name, "\n".join(body))
