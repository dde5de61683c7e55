"""``treemap(tree)``: a squarified treemap of a tree's bytes as one SVG."""

from __future__ import annotations

from typing import Any, Callable, Literal

from .._arrays import format_bytes
from . import _model
from ._model import ARRAY, NODE, SHARED, Model, Node
from ._style import PALETTE, dtype_colour, esc

_CONTAINERS = frozenset({"dict", "list", "tuple", "OrderedDict", "defaultdict", "deque", "NoneType", "tensor"})
MAX_LEVELS = 64  # nested levels drawn; deeper subtrees are drawn as one rectangle
_CHAR = 6.4  # px per character of an 11 px label (estimate)
_LEGEND = 26


def squarify(values: list[float], x: float, y: float, w: float, h: float) -> list[tuple[float, float, float, float]]:
    """Rectangles ``(x, y, w, h)`` tiling the box, one per value, with areas proportional to the
    values, as close to squares as the greedy rule of Bruls, Huizing and van Wijk (2000)
    gets: values in decreasing order fill rows along the shorter side while that keeps the
    worst aspect ratio from growing.  ``values`` must be positive and sorted decreasing.

    >>> [tuple(round(v, 1) for v in r) for r in squarify([6, 6, 4, 3, 2, 2, 1], 0, 0, 6, 4)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [(0, 0, 3.0, 2.0), (0, 2.0, 3.0, 2.0), (3.0, 0, 1.7, 2.3), (4.7, 0, 1.3, 2.3),
     (3.0, 2.3, 1.2, 1.7), (4.2, 2.3, 1.2, 1.7), (5.4, 2.3, 0.6, 1.7)]
    """
    total = sum(values)
    out: list[tuple[float, float, float, float]] = []
    if total <= 0 or w <= 0 or h <= 0:
        return [(x, y, 0.0, 0.0)] * len(values)
    scale = w * h / total
    areas = [v * scale for v in values]
    i, n = 0, len(areas)
    while i < n:
        short = min(w, h)
        s = areas[i]
        best = _worst(areas[i], areas[i], s, short)
        j = i + 1
        while j < n:
            cand = _worst(areas[i], areas[j], s + areas[j], short)
            if cand > best:
                break
            best, s, j = cand, s + areas[j], j + 1
        thick = s / short
        if w >= h:  # a column on the left
            yy = y
            for a in areas[i:j]:
                hh = a / thick if thick else 0.0
                out.append((x, yy, thick, hh))
                yy += hh
            x, w = x + thick, w - thick
        else:  # a row on top
            xx = x
            for a in areas[i:j]:
                ww = a / thick if thick else 0.0
                out.append((xx, y, ww, thick))
                xx += ww
            y, h = y + thick, h - thick
        i = j
    return out


def _worst(largest: float, smallest: float, s: float, short: float) -> float:
    """The worst aspect ratio of a row of total area ``s`` along a side of length ``short``."""
    if smallest <= 0:
        return float("inf")
    s2, w2 = s * s, short * short
    return max(w2 * largest / s2, s2 / (w2 * smallest))


def _groups(model: Model, color_by: str) -> list[str]:
    """What colours each node's leaves: its dtype, or the type of the nearest enclosing node
    that is not a plain container (a Module class), else the name of its parent (a module in a
    state dict; a list index is skipped: ``layer.0.query`` gives ``query``)."""
    typed = [""] * len(model.nodes)  # nearest enclosing non-container type, pre-order
    out = [""] * len(model.nodes)
    for n in model.nodes:
        if n.parent < 0:
            continue
        p = model.nodes[n.parent]
        typed[n.index] = typed[p.index] if p.type_name in _CONTAINERS else p.type_name
        if color_by == "dtype":
            out[n.index] = n.dtype or n.type_name
        elif typed[n.index]:
            out[n.index] = typed[n.index]
        elif p.key.isdigit() and p.parent > 0:
            out[n.index] = model.nodes[p.parent].key
        else:
            out[n.index] = p.key or n.type_name
    return out


def _fitting(label: str, nbytes: int, w: float) -> str:
    """The label with its size if that fits in ``w`` px, else the label alone, else ''."""
    for text in (f"{label} {format_bytes(nbytes)}" if label else format_bytes(nbytes), label):
        if text and len(text) * _CHAR + 6 <= w:
            return text
    return ""


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _ink(fill: str) -> str:
    r, g, b = (int(fill[k:k + 2], 16) for k in (1, 3, 5))
    return "#111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def treemap(tree: Any, *, width: int = 960, height: int = 600,
            color_by: Literal["type", "dtype"] = "type", title: str | None = None,
            is_leaf: Callable[[Any], bool] | None = None) -> str:
    """A squarified treemap of ``tree`` as a standalone SVG: one rectangle per array leaf (and
    a framed group per subtree), area proportional to bytes.

    Leaves are coloured by ``color_by``: ``'type'`` — the class of the nearest enclosing node
    that is not a plain container (``Linear``, ``LayerNorm``, ``Embedding`` in a Module), or for
    plain dicts and lists (a checkpoint's state dict) the name of the leaf's module
    (``query``, ``LayerNorm``, ``word_embeddings``) — or ``'dtype'``; a legend on top names the
    colours.  Labels (the dotted key and the size) are drawn where they fit.  Every rectangle,
    group frames included, carries ``data-path`` (the dotted name, as ``spruce.io`` names
    tensors; ``''`` for the root) and ``data-bytes``.  A subtree whose box is narrower than 8 px,
    or 64 levels down, is drawn as one rectangle.  Frames take no area: every drawn box's area
    is exactly its share of the bytes.  Leaves are labelled ``module.key size`` (or ``key``)
    where that fits, the groups of the first two levels at their bottom left.  Same walk and counting as ``html`` (any depth,
    per-path totals); leaves without bytes are not drawn.

    Args:
      tree: any pytree (``spruce.io.TensorInfo`` leaves count their ``nbytes``).
      width, height: the SVG's size in px (the legend adds 26 px on top).
      color_by: ``'type'`` or ``'dtype'``.
      title: the text before the legend (default: the root's type and total bytes).
      is_leaf: as in ``spruce.tree.flatten``.

    Returns:
      The SVG document, a str.

    Raises:
      ValueError: ``color_by`` is not ``'type'`` or ``'dtype'``, or a size is not positive.

    >>> import numpy as np
    >>> svg = treemap({'big': np.zeros(300, np.float32), 'small': np.zeros(100, np.float32)})
    >>> svg.startswith('<svg') and 'data-path="big" data-bytes="1200"' in svg
    True
    """
    if color_by not in ("type", "dtype"):
        raise ValueError(f"treemap: color_by must be 'type' or 'dtype', got {color_by!r}")
    if width <= 0 or height <= 0:
        raise ValueError(f"treemap: width and height must be positive, got {width} x {height}")
    model = _model.build(tree, is_leaf=is_leaf)
    root = model.root
    colours: dict[str, str] = {}
    groups_bytes: dict[str, int] = {}
    groups = _groups(model, color_by)
    for n in model.nodes:
        if n.kind == ARRAY and n.nbytes:
            g = groups[n.index]
            groups_bytes[g] = groups_bytes.get(g, 0) + n.nbytes
    for k, g in enumerate(sorted(groups_bytes, key=lambda g: -groups_bytes[g])):
        colours[g] = dtype_colour(g) if color_by == "dtype" else PALETTE[k % len(PALETTE)]
    body: list[str] = []
    top = _LEGEND
    frames: list[str] = []  # group outlines and labels, drawn over their children
    placed: list[tuple[float, float, float, float]] = []  # group labels' boxes
    # (node, the parent's dotted name, nesting level, x, y, w, h)
    stack: list[tuple[Node, str, int, float, float, float, float]] = [
        (root, "", 0, 0.0, float(top), float(width), float(height))]
    while stack:
        n, prefix, level, x, y, w, h = stack.pop()
        keys = [n.key]
        while n.kind == NODE and len(n.children) == 1 and model.nodes[n.children[0]].kind == NODE:
            n = model.nodes[n.children[0]]
            keys.append(n.key)
        label = ".".join(k for k in keys if k)
        path = f"{prefix}.{label}" if prefix and label else (prefix or label)
        kids = [model.nodes[c] for c in n.children] if n.kind == NODE else []
        kids = [c for c in kids if c.nbytes > 0]
        if not kids or w < 8 or h < 8 or level >= MAX_LEVELS:
            fill = _fill(model, n, groups, colours)
            body.append(_rect(path, n.nbytes, x, y, w, h, fill, "leaf" if n.kind in (ARRAY, SHARED) else "group"))
            parent = prefix.rpartition(".")[2]
            text = _fitting(f"{parent}.{label}" if parent and label else label, n.nbytes, w) if h > 13 else ""
            text = text or (_fitting(label, n.nbytes, w) if h > 13 else "")
            if text:
                body.append(f'<text x="{x + 3:.1f}" y="{y + 11:.1f}" fill="{_ink(fill)}">{esc(text)}</text>')
            continue
        if n is not root:
            frames.append(_rect(path, n.nbytes, x, y, w, h, "none", "group"))
            shown = f"{prefix.rpartition('.')[2]}.{label}" if label.isdigit() and prefix else label
            text = _fitting(shown, n.nbytes, w) if level <= 2 and h > 40 else ""
            box = (x + 4, y + h - 17, x + 4 + len(text) * _CHAR, y + h - 2)
            if text and not any(_overlap(box, other) for other in placed):
                placed.append(box)
                frames.append(f'<text class="g" x="{x + 4:.1f}" y="{y + h - 5:.1f}">{esc(text)}</text>')
        kids.sort(key=lambda c: -c.nbytes)
        for c, r in zip(kids, squarify([float(c.nbytes) for c in kids], x, y, w, h)):
            stack.append((c, path, level + 1, *r))
    body.extend(reversed(frames))  # outer frames last: on top
    name = title if title is not None else f"{root.type_name}: {format_bytes(root.nbytes)} ({root.params:,} parameters)"
    legend = [f'<text class="t" x="4" y="17">{esc(name)}</text>']
    lx = 16 + len(name) * 7.8
    for g, fill in colours.items():
        share = groups_bytes[g] / root.nbytes if root.nbytes else 0
        item = f"{g} {share:.0%}" if share >= 0.01 else (f"{g} {share:.1%}" if share >= 0.001 else f"{g} <0.1%")
        if lx + 13 + len(item) * _CHAR > width:
            break
        legend.append(f'<rect x="{lx:.0f}" y="7" width="10" height="10" fill="{fill}"/>'
                      f'<text x="{lx + 13:.0f}" y="16">{esc(item)}</text>')
        lx += 22 + len(item) * _CHAR
    style = ("<style>svg{font:11px ui-sans-serif,system-ui,sans-serif}text{pointer-events:none}"
             ".bg{fill:#fff}.t,.g,.lg{fill:#1f2937}.t{font-weight:600;font-size:13px}"
             "rect.group{stroke:#334155;stroke-width:1.2}rect.leaf{stroke:#fff;stroke-width:.5}"
             ".g{font-weight:700;font-size:12px;paint-order:stroke;stroke:#fff;stroke-width:3px}"
             "@media (prefers-color-scheme:dark){.bg{fill:#0f172a}.t,.g,.lg{fill:#e2e8f0}"
             "rect.group{stroke:#cbd5e1}rect.leaf{stroke:#0f172a}.g{stroke:#0f172a}}</style>")
    total_h = height + top
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" data-bytes="{root.nbytes}">{style}'
        f'<rect class="bg" width="{width}" height="{total_h}"/>'
        f'<g class="lg">{"".join(legend)}</g>{"".join(body)}</svg>\n'
    )


def _fill(model: Model, n: Node, groups: list[str], colours: dict[str, str]) -> str:
    """The colour of a drawn box: its group's, or for a whole subtree its largest leaf's."""
    best = n
    if n.kind == NODE:
        stack = list(n.children)
        while stack:
            m = model.nodes[stack.pop()]
            if m.kind == ARRAY and (best is n or m.nbytes > best.nbytes):
                best = m
            stack.extend(m.children)
    return colours.get(groups[best.index], "#94a3b8")


def _rect(path: str, nbytes: int, x: float, y: float, w: float, h: float, fill: str, cls: str) -> str:
    return (f'<rect class="{cls}" data-path="{esc(path)}" data-bytes="{nbytes}" x="{x:.1f}" y="{y:.1f}" '
            f'width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}"><title>{esc(path or "(root)")}: '
            f"{esc(format_bytes(nbytes))}</title></rect>")
