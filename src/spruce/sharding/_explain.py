"""``explain``: the table of where each array leaf goes, with bytes per device (``Row``, ``Explanation``)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from .. import tree as _tree
from .._arrays import format_bytes
from ._rules import Rules
from ._specs import _resolve_tree


class Row(NamedTuple):
    """One array leaf in an ``Explanation``: dotted name, shape, dtype name, the pattern of the
    rule that placed it (``''`` if none did, non-strict), its spec, bytes each device holds,
    and on how many devices each element is held (replication)."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    rule: str
    spec: Any
    bytes_per_device: int
    replication: int


class Explanation:
    """What ``explain`` returns.  ``str()`` is a table (one row per array leaf, then the
    totals); the attributes hold the data.

    Attributes:
      rows: a list of ``Row``.
      bytes_per_device: ``{device id: bytes}``, exactly the array bytes placement will hold on
        each device of the mesh (an array that placement does not copy counts once however
        many key paths hold it; see ``explain``).
      unmatched: the patterns of the rules that matched no leaf.
      total_bytes: the bytes of one copy of the tree's arrays (counted as above).
      mesh: the ``jax.sharding.Mesh``.

    ``spruce.view.sharding_html(explanation)`` draws it (device grids and memory bars).
    """

    def __init__(
        self, rows: list[Row], bytes_per_device: dict[int, int], unmatched: list[str], total_bytes: int, mesh: Any = None
    ) -> None:
        self.rows = rows
        self.bytes_per_device = bytes_per_device
        self.unmatched = unmatched
        self.total_bytes = total_bytes
        self.mesh = mesh

    def __repr__(self) -> str:
        return f"<Explanation: {len(self.rows)} arrays, {len(self.bytes_per_device)} devices>"

    def __str__(self) -> str:
        head = ("path", "shape", "dtype", "rule", "spec", "per device", "replicated")
        body = [
            (r.path or "<root>", str(r.shape), r.dtype, r.rule or "-", str(r.spec), format_bytes(r.bytes_per_device),
             f"{r.replication}x")
            for r in self.rows
        ]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        right = {5, 6}

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        lines = [line(head), line(["-" * w for w in widths])]
        lines += [line(b) for b in body]
        per = sorted(self.bytes_per_device.items())
        total = sum(self.bytes_per_device.values())
        lines.append("")
        ratio = f" ({total / self.total_bytes:.2f}x one copy)" if self.total_bytes else ""
        lines.append(f"one copy: {format_bytes(self.total_bytes)}; all devices together: {format_bytes(total)}{ratio}")
        lines.append("per device: " + ", ".join(f"{d}: {format_bytes(b)}" for d, b in per))
        if self.unmatched:
            lines.append("rules that matched nothing: " + ", ".join(repr(p) for p in self.unmatched))
        return "\n".join(lines)


def _placed_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype an array of ``dtype`` has once on a device (int64 becomes int32 unless
    ``jax_enable_x64`` is set)."""
    import jax

    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _already_placed(x: Any, sharding: Any, ndim: int) -> bool:
    """Whether ``x`` is a (concrete) ``jax.Array`` laid out as ``sharding`` says."""
    import jax

    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
        return False
    return bool(x.sharding.is_equivalent_to(sharding, ndim))


def explain(tree: Any, mesh: Any, rules: Rules) -> Explanation:
    """How ``rules`` lay ``tree`` out on ``mesh``: one row per array leaf (path, shape, dtype,
    rule, spec, bytes per device, replication), the bytes each device will hold, and the
    rules that matched nothing.  Nothing is placed or copied.  Dtypes are those the devices
    will hold (int64 and float64 become 32-bit unless ``jax_enable_x64`` is set).

    The bytes are those ``shard(tree, mesh, rules)`` leaves on the devices: a ``jax.Array``
    held at several key paths (tied weights) that is already laid out as its spec says is
    not copied by placement, so it counts once, in ``bytes_per_device`` and ``total_bytes``
    (as ``spruce.view`` counts it); it still has a row per key path.  A NumPy array at several
    key paths, or a ``jax.Array`` that placement moves, is copied per key path and counts at
    each.

    Raises:
      ShardingError: as ``specs``.

    >>> import numpy as np, jax
    >>> from jax.sharding import PartitionSpec as P
    >>> from spruce.sharding import mesh
    >>> m = mesh({'model': 1})
    >>> e = explain({'w': np.zeros((4, 2), np.float32)}, m, Rules([('w', P('model')), ('b', None)]))
    >>> e.bytes_per_device[jax.devices()[0].id], e.unmatched
    (32, ['b'])
    """
    from jax.sharding import NamedSharding

    leaves, treedef = _tree.flatten(tree)
    res = _resolve_tree(leaves, treedef, tree, rules, mesh)
    per: dict[int, int] = {int(d.id): 0 for d in mesh.devices.flat}
    rows: list[Row] = []
    total = 0
    kept: set[int] = set()  # ids of the jax.Arrays counted that placement keeps where they are
    for name, x, spec, i in zip(res.names, leaves, res.specs, res.rule_of):
        if spec is None:
            continue
        shape = tuple(int(d) for d in x.shape)
        itemsize = _placed_dtype(x.dtype).itemsize
        sharding = NamedSharding(mesh, spec)
        indices = sharding.devices_indices_map(shape)
        # A jax.Array already laid out as its spec says stays where it is (device_put does not
        # copy it): held at several key paths, it is one allocation and counts once.  Anything
        # else is copied per key path (a NumPy array, an array placed otherwise).
        again = False
        if _already_placed(x, sharding, len(shape)):
            again = id(x) in kept
            kept.add(id(x))
        distinct = set()
        dev: Any
        for dev, idx in indices.items():
            if not again:
                nb = itemsize * int(np.prod([len(range(*s.indices(n))) for s, n in zip(idx, shape)], dtype=np.int64))
                per[int(dev.id)] += nb
            distinct.add(tuple((s.start, s.stop) for s in idx))
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        total += 0 if again else size * itemsize
        shard_bytes = itemsize * (int(np.prod(sharding.shard_shape(shape), dtype=np.int64)) if shape else 1)
        rule = rules.rules[i][0] if i >= 0 else ""
        replication = len(indices) // max(1, len(distinct))
        rows.append(Row(name, shape, str(_placed_dtype(x.dtype)), rule, spec, shard_bytes, replication))
    unmatched = [p for j, (p, _) in enumerate(rules.rules) if j not in res.used]
    return Explanation(rows, per, unmatched, total, mesh)

