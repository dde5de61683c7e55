"""``html(tree)``: a tree as one self-contained page of collapsible rows."""

from __future__ import annotations

from typing import Any, Callable

from .._arrays import format_bytes
from . import _model
from ._model import ARRAY, CYCLE, LEAF, NODE, NONE, SHARED, Model, Node, shorten
from ._sharding import device_grid, device_memory, leaf_layout
from ._stats import BINS, Stats, array_stats, fmt
from ._style import bar, dtype_colour, esc, page

NEST_LIMIT = 32  # rendered levels of <details>; deeper subtrees are listed flat
FLAT_LIMIT = 1000  # rows listed flat under one collapsed subtree
_LABEL = 72  # characters of a row's name


def html(tree: Any, *, title: str | None = None, stats: bool = True,
         is_leaf: Callable[[Any], bool] | None = None) -> str:
    """One self-contained HTML page showing ``tree`` as collapsible rows.

    Every node is a ``<details>`` row (collapsible without JavaScript) with its type, number
    of leaves, parameter count (array elements) and bytes, with a bar showing its share of the
    whole tree's bytes.  Every array leaf shows its dtype (a colour per dtype family), shape,
    parameters, bytes and, when ``stats`` is true, the mean, standard deviation, min and max of
    its finite values, its NaN and Inf counts (in red when not zero) and a histogram; an array
    with a ``NamedSharding`` (a sharded ``jax.Array``) also shows its layout as a device grid, and
    the page starts with the bytes each device holds.
    Leaves that are one object at two paths (tied weights) and subtrees shared between paths
    are marked; a node that contains itself is shown as a cycle.  The page follows the reader's
    light or dark theme (``prefers-color-scheme``), uses no script and loads nothing.

    Structure comes from spruce's engine (``spruce.tree.flatten_one_level_with_path``), so
    Modules, JAX-registered node types and every registered node are walked; rows are named by
    the dotted names of ``spruce.io`` (``encoder.layer.0.attention.self.query.weight``); dict
    children appear in sorted key order, as in ``spruce.tree.flatten``.  Totals are per path,
    as ``spruce.summary`` counts them.  Any depth works: chains of single-child nodes share one
    row, and subtrees deeper than 32 shown levels list their leaves flat (at most 1,000 rows per
    subtree).  A leaf whose ``repr`` raises, a node whose flatten raises, a cycle: each becomes
    a row saying so, never an error.  ``spruce.io.TensorInfo`` leaves (from
    ``spruce.io.read_header``) are shown as arrays without data.  JAX is never imported here;
    JAX arrays are read with ``numpy.asarray`` for their statistics.

    Args:
      tree: any pytree: a Module, nested dicts/lists of NumPy or JAX arrays, ...
      title: the page's title (default: the root's type and size).
      stats: compute statistics and histograms (reads every array once or twice; False shows
        only shapes, dtypes and sizes).
      is_leaf: as in ``spruce.tree.flatten``.

    Returns:
      The page, a str (UTF-8 text of about 0.6 KB per array leaf).

    >>> import numpy as np
    >>> page = html({'w': np.ones((2, 3), np.float32), 'b': np.zeros(3, np.float32)}, title='toy')
    >>> page.startswith('<!DOCTYPE html>'), '<title>toy</title>' in page, page.count('<details')
    (True, True, 1)
    >>> 'float32' in page and '[2, 3]' in page and 'prefers-color-scheme:dark' in page
    True
    """
    model = _model.build(tree, is_leaf=is_leaf)
    root = model.root
    name = title if title is not None else f"{root.type_name}: {root.params:,} parameters"
    body = [_header(model, name), _device_memory(model), _COLUMNS, _rows(model, stats)]
    return page(name, "\n".join(body))


def _device_memory(model: Model) -> str:
    """Memory bars per device for the sharded arrays of the tree (all on one mesh), or ''."""
    leaves = []
    for n in model.nodes:
        if n.tied and n.tied[0] < n.index:  # the same array at an earlier path: held once
            continue
        layout = leaf_layout(n.obj) if n.kind == ARRAY and n.obj is not None else None
        if layout is not None:
            leaves.append((model.name(n.index), n.shape, n.dtype, layout.spec, layout.mesh))
    if not leaves:
        return ""
    try:
        memory = device_memory(leaves)
    except (ValueError, TypeError):  # arrays on meshes of different sizes: no common picture
        return ""
    top = max(memory) or 1
    bars = "".join(f'<span class="mono">device {i}</span>{bar(b / top)}<span class="mono">{esc(format_bytes(b))}</span>'
                   for i, b in enumerate(memory))
    return (f'<h2>memory per device ({len(leaves):,} sharded arrays)</h2>'
            f'<div class="mem">{bars}</div><h2>tree</h2>')


def _header(model: Model, title: str) -> str:
    root = model.root
    dtypes: dict[str, list[int]] = {}
    tied = 0
    tied_bytes = 0
    for n in model.nodes:
        if n.kind == ARRAY:
            acc = dtypes.setdefault(n.dtype, [0, 0, 0])
            acc[0] += 1
            acc[1] += n.params
            acc[2] += n.nbytes
            if n.tied and n.tied[0] < n.index:
                tied += 1
                tied_bytes += n.nbytes
    parts = [f"<h1>{esc(title)}</h1>"]
    line = (f"{esc(root.type_name)} · {root.leaves:,} leaves · {root.arrays:,} arrays · "
            f"{root.params:,} parameters · {esc(format_bytes(root.nbytes))} ({root.nbytes:,} bytes)")
    if tied:
        line += (f' · <span class="tie">{tied:,} tied array{"s" if tied != 1 else ""} '
                 f"({esc(format_bytes(tied_bytes))} counted twice)</span>")
    parts.append(f'<p class="sub">{line}</p>')
    if dtypes:
        items = "".join(
            f'<span><i class="sw" style="background:{dtype_colour(d)}"></i>{esc(d)}: {c:,} '
            f"array{'s' if c != 1 else ''}, {p:,} params, {esc(format_bytes(b))}</span>"
            for d, (c, p, b) in sorted(dtypes.items(), key=lambda kv: -kv[1][2])
        )
        parts.append(f'<p class="sub legend">{items}</p>')
    return "\n".join(parts)


_COLUMNS = ('<div class="r hd"><span class="k">name</span><span class="t">type / dtype</span>'
            '<span class="s">shape / leaves</span><span class="p">params</span>'
            '<span class="b">bytes</span><span class="st">mean ± std [min, max]</span>'
            '<span>histogram</span></div>')


def _chain(model: Model, n: Node) -> tuple[list[str], Node]:
    """Follow single-child node chains: the keys passed and the node where the chain ends."""
    keys = [n.key]
    while n.kind == NODE and len(n.children) == 1:
        child = model.nodes[n.children[0]]
        if child.kind != NODE:
            break
        keys.append(child.key)
        n = child
    return keys, n


def _rows(model: Model, stats: bool) -> str:
    total = model.root.nbytes
    open_depth = 3 if len(model.nodes) <= 400 else 1
    out: list[str] = []
    # (node index, shown depth); index -1 closes a <details>.
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        index, depth = stack.pop()
        if index < 0:
            out.append("</details>")
            continue
        first = model.nodes[index]
        keys, n = _chain(model, first)
        label = ".".join(k for k in keys if k) or "(root)"
        if n.kind != NODE or not n.children:
            out.append(_row(model, n, label, depth, total, stats, "div"))
            continue
        flat = depth >= NEST_LIMIT
        opened = " open" if depth < open_depth and not flat else ""
        out.append(f"<details{opened}>")
        out.append(_row(model, n, label, depth, total, stats, "summary"))
        if flat:
            out.extend(_flat_rows(model, n, depth + 1, total, stats))
            out.append("</details>")
            continue
        stack.append((-1, 0))
        for c in reversed(n.children):
            stack.append((c, depth + 1))
    return "\n".join(out)


def _flat_rows(model: Model, top: Node, depth: int, total: int, stats: bool) -> list[str]:
    """The leaves under ``top``, one row each named relative to ``top``."""
    rows: list[str] = []
    levels = 0
    more = 0
    stack = list(reversed(top.children))
    while stack:
        n = model.nodes[stack.pop()]
        levels = max(levels, n.depth - top.depth)
        if n.kind == NODE:
            stack.extend(reversed(n.children))
            continue
        if len(rows) >= FLAT_LIMIT:
            more += 1
            continue
        parts: list[str] = []
        i = n.index
        while i != top.index:
            parts.append(model.nodes[i].key)
            i = model.nodes[i].parent
        rows.append(_row(model, n, ".".join(reversed(parts)), depth, total, stats, "div"))
    note = f"{levels:,} deeper levels, listed flat by their path below this row"
    if more:
        note += f"; {more:,} more leaves not listed"
    rows.insert(0, f'<div class="r"><span class="k note" style="--d:{depth}">{esc(note)}</span></div>')
    return rows


def _row(model: Model, n: Node, label: str, depth: int, total: int, stats: bool, tag: str) -> str:
    short = shorten(label, _LABEL)
    title = f' title="{esc(shorten(label, 1000))}"' if short != label else ""
    kcls = "k" if tag == "summary" else "k leafk"
    cells = [f'<span class="{kcls}" style="--d:{depth}"{title}>{esc(short)}</span>']
    share = n.nbytes / total if total else 0.0
    size = (f'<span class="p">{n.params:,}</span>'
            f'<span class="b">{esc(format_bytes(n.nbytes))}{bar(share)}</span>')
    if n.kind == NODE:
        cells.append(f'<span class="t">{esc(n.type_name)}</span>')
        cells.append(f'<span class="n">{_leaves(n.leaves)}</span>')
        cells.append(size)
        cells.append(f'<span class="st">{"1 array" if n.arrays == 1 else f"{n.arrays:,} arrays"}</span><span></span>')
    elif n.kind == ARRAY:
        colour = dtype_colour(n.dtype)
        cells.append(f'<span class="t"><span class="dt" style="background:{colour}">{esc(n.dtype)}</span></span>')
        cells.append(f'<span class="s">[{", ".join(str(d) for d in n.shape)}]</span>')
        cells.append(size)
        cells.append(_array_cells(model, n, stats))
    elif n.kind == LEAF:
        cells.append(f'<span class="t">{esc(n.type_name)}</span>')
        cells.append(f'<span class="s" title="{esc(n.text)}">{esc(n.text)}</span>' + "<span></span>" * 4)
    elif n.kind == NONE:
        cells.append('<span class="t">None</span><span class="n note">empty</span>' + "<span></span>" * 4)
    elif n.kind in (SHARED, CYCLE):
        where = model.name(n.target) or "(root)"
        if n.kind == SHARED:
            text = f'<span class="tie">same object as {esc(shorten(where, 120))}</span>'
            cells.append(f'<span class="t">{esc(n.type_name)}</span><span class="n">{_leaves(n.leaves)}</span>{size}'
                         f'<span class="st">{text}</span><span></span>')
        else:
            text = f'<span class="bad">cycle: contains itself (back to {esc(shorten(where, 120))})</span>'
            cells.append(f'<span class="t">{esc(n.type_name)}</span><span class="st" style="grid-column:span 5">{text}</span>')
    else:  # ERROR
        cells.append(f'<span class="t">{esc(n.type_name)}</span>'
                     f'<span class="st bad" style="grid-column:span 5">{esc(n.text)}</span>')
    if n.kind == NODE and not n.children:
        cells[2] = '<span class="n note">empty</span>'
    return f'<{tag} class="r">{"".join(cells)}</{tag}>'


def _leaves(n: int) -> str:
    return "1 leaf" if n == 1 else f"{n:,} leaves"


def _array_cells(model: Model, n: Node, stats: bool) -> str:
    notes: list[str] = []
    if n.tied:
        others = ", ".join(shorten(model.name(i), 60) for i in n.tied[:3])
        notes.append(f'<span class="tie">tied: same array as {esc(others)}</span> ')
    s: Stats | None = array_stats(n.obj) if stats and n.obj is not None else None
    layout = leaf_layout(n.obj) if n.obj is not None else None
    text = ""
    if s is not None:
        if s.finite:
            text = f"{fmt(s.mean)} ± {fmt(s.std)} [{fmt(s.min)}, {fmt(s.max)}]"
        for count, what in ((s.nan, "NaN"), (s.inf, "Inf")):
            if count:
                text += f' <span class="bad">{count:,} {what}</span>'
    elif n.obj is None:
        text = '<span class="note">not read</span>'
    if layout is not None:
        text = f"{esc(layout.describe())} " + text
    hist = _histogram(s) if s is not None else ""
    if layout is not None:
        hist = device_grid(n.shape, layout.spec, layout.mesh, width=72, height=20)
    return f'<span class="st">{"".join(notes)}{text}</span><span>{hist}</span>'


def _histogram(s: Stats) -> str:
    """A bar histogram as inline SVG (72 x 18 px)."""
    peak = max(s.hist) if s.hist else 0
    if peak == 0:
        return ""
    d = []
    for i, c in enumerate(s.hist):
        if c:
            h = max(0.6, 10 * c / peak)
            d.append(f"M{i} 10v-{h:.1f}h1v{h:.1f}z")
    return (f'<svg class="h" width="72" height="18" viewBox="0 0 {BINS} 10" preserveAspectRatio="none">'
            f'<path d="{"".join(d)}"/></svg>')
