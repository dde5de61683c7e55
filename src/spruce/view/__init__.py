"""spruce.view: pictures of pytrees and checkpoints — an HTML page, a treemap, diffs, sharding.

- ``html(tree, *, title=None, stats=True)`` -> one self-contained HTML page of collapsible rows
  (type, leaves, parameters, bytes with a share bar; per array dtype, shape, statistics,
  histogram; tied leaves, cycles, sharded layouts), light and dark.
- ``treemap(tree, *, color_by='type')`` -> a squarified treemap SVG, area proportional to bytes.
- ``diff(a, b)`` -> per-tensor comparison of two trees (added, removed, reshaped, changed: max
  abs difference and relative L2 change), and ``diff_html(a, b)`` its side-by-side page.
- ``sharding_html(leaves)``, ``device_grid``, ``device_memory``, ``sharding_leaves``: a
  NamedSharding layout as device-grid glyphs and per-device memory bars, from plain data or
  from a ``spruce.sharding.explain`` report.

Only spruce's public engine and NumPy are used; JAX is never imported here (JAX arrays are read
with ``numpy.asarray``).
"""

from .._extras import require as _require

_require("spruce.view", "view")  # before the imports below: a missing package names the extra to install

from ._diff import TensorDiff as TensorDiff
from ._diff import diff as diff
from ._diff import diff_html as diff_html
from ._html import html as html
from ._sharding import Layout as Layout
from ._sharding import ShardedLeaf as ShardedLeaf
from ._sharding import block_slices as block_slices
from ._sharding import device_blocks as device_blocks
from ._sharding import device_grid as device_grid
from ._sharding import device_memory as device_memory
from ._sharding import shard_shape as shard_shape
from ._sharding import sharding_html as sharding_html
from ._sharding import sharding_leaves as sharding_leaves
from ._treemap import squarify as squarify
from ._treemap import treemap as treemap

__all__ = [
    "Layout",
    "ShardedLeaf",
    "TensorDiff",
    "block_slices",
    "device_blocks",
    "device_grid",
    "device_memory",
    "diff",
    "diff_html",
    "html",
    "shard_shape",
    "sharding_html",
    "sharding_leaves",
    "squarify",
    "treemap",
]
