"""Sharding pictures from plain data: which block of an array each device of a mesh holds.

The layout rule is ``jax.sharding.NamedSharding``'s: the mesh's devices are numbered in
row-major order over its axes; array dimension ``i`` with spec entry ``('x', 'y')`` is cut into
``size(x) * size(y)`` equal blocks (the last one shorter when the size does not divide), and the
device at mesh coordinates ``(.., x=a, .., y=b, ..)`` holds block ``a * size(y) + b`` of that
dimension; a dimension whose entry is None is whole on every device, and the devices that differ
only along mesh axes the spec does not name hold the same block (replicas).  JAX is never
imported: ``leaf_layout`` reads ``x.sharding.spec`` and ``x.sharding.mesh.shape``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .._arrays import format_bytes
from ._style import PALETTE, bar, esc, page

Spec = tuple[tuple[str, ...], ...]


class Layout(NamedTuple):
    """A NamedSharding-style layout: one tuple of mesh axis names per array dimension (empty
    for a dimension that is not cut) and the mesh's axis sizes in order."""

    spec: Spec
    mesh: dict[str, int]

    def describe(self) -> str:
        """``"P('x', None) over x=4 y=2"``."""
        entries = []
        for axes in self.spec:
            if not axes:
                entries.append("None")
            elif len(axes) == 1:
                entries.append(repr(axes[0]))
            else:
                entries.append("(" + ", ".join(repr(a) for a in axes) + ")")
        mesh = " ".join(f"{k}={v}" for k, v in self.mesh.items())
        return f"P({', '.join(entries)}) over {mesh}"


class ShardedLeaf(NamedTuple):
    """One leaf of a sharding report: its dotted ``path``, ``shape``, ``dtype`` (a NumPy dtype
    or its name), ``spec`` (a ``PartitionSpec`` or any sequence of None / axis name / tuple of
    axis names, one per leading dimension) and ``mesh`` (axis name -> size, in the mesh's
    order; ``Mesh.shape``)."""

    path: str
    shape: tuple[int, ...]
    dtype: Any
    spec: Any
    mesh: Mapping[str, int]


def normalize(spec: Any, ndim: int, mesh: Mapping[str, int]) -> Spec:
    """``spec`` as one tuple of axis names per dimension (missing trailing entries are None).

    Raises:
      ValueError: more entries than dimensions, an axis the mesh does not have, or an axis
        used twice.
    """
    entries = list(spec) if spec is not None else []
    if len(entries) > ndim:
        raise ValueError(f"the spec {tuple(entries)!r} has {len(entries)} entries for {ndim} dimensions")
    out: list[tuple[str, ...]] = []
    used: set[str] = set()
    for e in entries + [None] * (ndim - len(entries)):
        axes: tuple[str, ...]
        if e is None:
            axes = ()
        elif isinstance(e, str):
            axes = (e,)
        elif isinstance(e, (tuple, list)):
            axes = tuple(str(a) for a in e)
        else:  # PartitionSpec.UNCONSTRAINED and the like: not known to be cut
            axes = ()
        for a in axes:
            if a not in mesh:
                raise ValueError(f"the spec names the mesh axis {a!r}; the mesh has {list(mesh)}")
            if a in used:
                raise ValueError(f"the spec uses the mesh axis {a!r} twice")
            used.add(a)
        out.append(axes)
    return tuple(out)


def leaf_layout(x: Any) -> Layout | None:
    """The layout of an array with a ``NamedSharding`` on more than one device, else None."""
    try:
        sharding = getattr(x, "sharding", None)
        spec = getattr(sharding, "spec", None)
        mesh = getattr(sharding, "mesh", None)
        shape = getattr(mesh, "shape", None)
        if spec is None or shape is None:
            return None
        sizes = {str(k): int(v) for k, v in dict(shape).items()}
        if math.prod(sizes.values()) < 2:
            return None
        return Layout(normalize(spec, len(x.shape), sizes), sizes)
    except Exception:  # an unusual sharding object: no picture, no failure
        return None


def _blocks(spec: Spec, mesh: Mapping[str, int]) -> list[int]:
    return [math.prod(mesh[a] for a in axes) for axes in spec]


def device_blocks(shape: Sequence[int], spec: Any, mesh: Mapping[str, int]) -> list[tuple[int, ...]]:
    """For each device (row-major over the mesh), the index of the block it holds along each
    dimension of an array of ``shape`` laid out by ``spec`` on ``mesh``.

    >>> device_blocks((8, 6), ('x', None), {'x': 2, 'y': 2})
    [(0, 0), (0, 0), (1, 0), (1, 0)]
    >>> device_blocks((8, 6), (('x', 'y'),), {'x': 2, 'y': 2})
    [(0, 0), (1, 0), (2, 0), (3, 0)]
    """
    norm = normalize(spec, len(shape), mesh)
    names = list(mesh)
    out = []
    for coords in np.ndindex(*[mesh[a] for a in names]) if names else [()]:
        at = dict(zip(names, coords))
        idx = []
        for axes in norm:
            b = 0
            for a in axes:
                b = b * mesh[a] + at[a]
            idx.append(b)
        out.append(tuple(idx))
    return out


def shard_shape(shape: Sequence[int], spec: Any, mesh: Mapping[str, int]) -> tuple[int, ...]:
    """The shape of the largest block one device holds.

    >>> shard_shape((30522, 384), ('x', None), {'x': 4, 'y': 2})
    (7631, 384)
    """
    norm = normalize(spec, len(shape), mesh)
    return tuple(-(-int(d) // n) for d, n in zip(shape, _blocks(norm, mesh)))


def block_slices(shape: Sequence[int], spec: Any, mesh: Mapping[str, int]) -> list[tuple[slice, ...]]:
    """For each device, the slices of the array it holds (``devices_indices_map``'s form)."""
    norm = normalize(spec, len(shape), mesh)
    counts = _blocks(norm, mesh)
    out = []
    for idx in device_blocks(shape, norm, mesh):
        sl = []
        for d, n, b in zip(shape, counts, idx):
            step = -(-int(d) // n)
            sl.append(slice(min(b * step, d), min((b + 1) * step, d)) if n > 1 else slice(None))
        out.append(tuple(sl))
    return out


def _itemsize(dtype: Any) -> int:
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        import ml_dtypes  # noqa: F401 - registers bfloat16, float8_* with NumPy

        return int(np.dtype(dtype).itemsize)


def device_memory(leaves: Iterable[Any]) -> list[int]:
    """Bytes each device holds for ``leaves`` (``ShardedLeaf``s or 5-tuples ``(path, shape,
    dtype, spec, mesh)`` on one mesh), devices in row-major mesh order; a block that does not
    divide evenly counts at the size of the largest block.

    >>> device_memory([('w', (8, 4), 'float32', ('x', None), {'x': 2, 'y': 2}),
    ...                ('b', (4,), 'float32', (None,), {'x': 2, 'y': 2})])
    [80, 80, 80, 80]
    """
    total: list[int] = []
    for leaf in leaves:
        path, shape, dtype, spec, mesh = leaf
        n = math.prod(mesh.values()) if mesh else 1
        if not total:
            total = [0] * n
        elif len(total) != n:
            raise ValueError(f"{path}: a mesh of {n} devices, the other leaves have {len(total)}")
        nbytes = math.prod(shard_shape(shape, spec, mesh)) * _itemsize(dtype)
        for i in range(n):
            total[i] += nbytes
    return total


def device_grid(shape: Sequence[int], spec: Any, mesh: Mapping[str, int], *,
                width: int = 120, height: int = 60) -> str:
    """An SVG glyph of the array cut into blocks, each filled with the colour of the first
    device holding it and labelled with the devices holding it (replicas after a comma).

    Rows are the blocks of all dimensions but the last (the first dimension of a matrix),
    columns those of the last; a 0-d or uncut array is one cell.  Each cell carries
    ``data-devices`` (the device numbers).
    """
    norm = normalize(spec, len(shape), mesh)
    counts = _blocks(norm, mesh) or [1]
    cols = counts[-1]
    rows = math.prod(counts[:-1]) if len(counts) > 1 else 1
    holders: dict[tuple[int, ...], list[int]] = {}
    for dev, idx in enumerate(device_blocks(shape, norm, mesh)):
        holders.setdefault(idx or (0,), []).append(dev)
    cw, ch = width / cols, height / rows
    parts = [f'<svg class="grid" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    for idx, devs in sorted(holders.items()):
        col = idx[-1]
        row = 0
        for b, n in zip(idx[:-1], counts[:-1]):
            row = row * n + b
        label = ",".join(str(d) for d in devs)
        x, y = col * cw, row * ch
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{cw:.1f}" height="{ch:.1f}" '
                     f'fill="{PALETTE[devs[0] % len(PALETTE)]}" data-devices="{label}"/>')
        if len(label) * 5.5 < cw - 2 and ch >= 10:
            parts.append(f'<text x="{x + cw / 2:.1f}" y="{y + ch / 2 + 3:.1f}" text-anchor="middle">{esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _from_explanation(plan: Any) -> tuple[list[ShardedLeaf], list[int] | None]:
    """The leaves and per-device bytes (row-major mesh order) of a ``spruce.sharding.explain``
    report, or ``(list(plan), None)`` for anything else."""
    rows = getattr(plan, "rows", None)
    mesh = getattr(plan, "mesh", None)
    per = getattr(plan, "bytes_per_device", None)
    if rows is None or mesh is None or per is None:
        return list(plan), None
    sizes = {str(k): int(v) for k, v in dict(mesh.shape).items()}
    leaves = [ShardedLeaf(r.path, tuple(r.shape), r.dtype, r.spec, sizes) for r in rows]
    return leaves, [int(per[int(d.id)]) for d in mesh.devices.flat]


def sharding_html(leaves: Iterable[Any], *, title: str | None = None) -> str:
    """A page for a sharding plan: per leaf its layout, block shape, bytes per device and a
    device-grid glyph (``device_grid``), then one memory bar per device (``device_memory``).

    Args:
      leaves: ``ShardedLeaf``s or 5-tuples ``(path, shape, dtype, spec, mesh)``, all on one
        mesh; ``sharding_leaves(tree)`` makes them from sharded JAX arrays.  Or the report of
        ``spruce.sharding.explain(tree, mesh, rules)``: a plan before anything is placed, one
        row per array leaf, with the report's exact bytes per device in the bars.
      title: the page title.

    Returns:
      A self-contained HTML page (str).

    Raises:
      ValueError: a spec that names an axis the mesh lacks, uses one twice, or has more
        entries than dimensions; leaves on meshes of different sizes.  The leaf's path is named.
    """
    given, exact = _from_explanation(leaves)
    items = [ShardedLeaf(str(p), tuple(int(d) for d in s), d, spec, dict(m)) for p, s, d, spec, m in given]
    rows = []
    for leaf in items:
        try:
            norm = normalize(leaf.spec, len(leaf.shape), leaf.mesh)
        except ValueError as e:
            raise ValueError(f"{leaf.path}: {e}") from None
        block = shard_shape(leaf.shape, norm, leaf.mesh)
        per_device = math.prod(block) * _itemsize(leaf.dtype)
        dtype_name = np.dtype(leaf.dtype).name if not isinstance(leaf.dtype, str) else leaf.dtype
        rows.append(
            f'<tr><td class="mono">{esc(leaf.path)}</td><td class="mono">{esc(dtype_name)}</td>'
            f'<td class="mono">{list(leaf.shape)}</td><td class="mono">{esc(Layout(norm, dict(leaf.mesh)).describe())}</td>'
            f'<td class="mono">{list(block)}</td><td class="num">{esc(format_bytes(per_device))}</td>'
            f"<td>{device_grid(leaf.shape, norm, leaf.mesh, width=96, height=40)}</td></tr>"
        )
    memory = exact if exact is not None else device_memory(items)
    top = max(memory) if memory else 0
    mesh_text = " ".join(f"{k}={v}" for k, v in items[0].mesh.items()) if items else ""
    name = title or f"sharding: {len(items)} leaves on {len(memory)} devices"
    bars = "".join(
        f'<span class="mono">device {i}</span>{bar(b / top if top else 0)}<span class="mono">{esc(format_bytes(b))}</span>'
        for i, b in enumerate(memory)
    )
    body = (
        f"<h1>{esc(name)}</h1><p class=\"sub\">mesh {esc(mesh_text)} · {len(items)} leaves · "
        f"{esc(format_bytes(sum(memory)))} on all devices together</p>"
        f"<h2>memory per device</h2><div class=\"mem\">{bars}</div>"
        "<h2>leaves</h2><table class=\"dl\"><tr><th>path</th><th>dtype</th><th>shape</th><th>layout</th>"
        f"<th>block</th><th class=\"num\">per device</th><th>devices</th></tr>{''.join(rows)}</table>"
    )
    return page(name, body)


def sharding_leaves(tree: Any) -> list[ShardedLeaf]:
    """The leaves of ``tree`` that have a ``NamedSharding`` (sharded ``jax.Array``s), as
    ``ShardedLeaf``s named by their dotted paths, in flatten order (others are skipped).  An
    array held at several paths (tied weights) is one record, under its first path: the devices
    hold it once, and ``device_memory`` of the records is what they hold."""
    from .. import tree as _tree
    from ..io import path_name

    out = []
    seen: set[int] = set()
    for path, x in _tree.leaves_with_path(tree):
        if id(x) in seen:
            continue
        seen.add(id(x))
        sharding = getattr(x, "sharding", None)
        spec = getattr(sharding, "spec", None)
        mesh = getattr(getattr(sharding, "mesh", None), "shape", None)
        if spec is None or mesh is None:
            continue
        out.append(ShardedLeaf(path_name(path), tuple(x.shape), x.dtype, tuple(spec), dict(mesh)))
    return out
