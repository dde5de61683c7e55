"""spruce.sharding: which parameter goes where, by the dotted key paths of the tree.

Every array leaf of a pytree has a dotted name (``layers.3.attention.query_proj.weight``, as
``spruce.io.flatten_names`` gives it and ``spruce inspect`` shows it).  ``Rules`` maps those
names to ``jax.sharding.PartitionSpec``s with globs; the rest is JAX's own machinery
(``Mesh``, ``NamedSharding``, ``jax.device_put``, ``jax.lax.with_sharding_constraint``): spruce
never talks between devices or hosts itself.

- ``mesh(axes, *, devices=None, axis_types="auto")`` -> ``jax.sharding.Mesh``
- ``Rules(rules, *, strict=True, on_indivisible="error")`` and ``Rules.fsdp(axis, *, min_size=)``
- ``specs(tree, rules, *, mesh=None)`` -> tree of PartitionSpec (None for non-array leaves)
- ``shardings(tree, mesh, rules)`` -> tree of NamedSharding (None for non-array leaves)
- ``explain(tree, mesh, rules)`` -> ``Explanation`` (a table; bytes per device; unused rules)
- ``shard(tree, mesh, rules)``: place the array leaves (``device_put``, or a sharding
  constraint under ``jax.jit``)
- ``ShardingError``: a ValueError naming the key path, shape, dimension, mesh axis and size.

Patterns are globs over the dotted name: ``*`` matches within one component (``*_proj``
matches ``query_proj``), ``?`` one character of a component, ``**`` any number of whole
components (zero included); a pattern starting with ``re:`` is a Python regular expression
that must match the whole name.  The first rule that matches wins.

>>> import numpy as np
>>> from jax.sharding import PartitionSpec as P
>>> params = {'embed': np.zeros((8, 4)), 'layers': [{'w': np.zeros((4, 4)), 'b': np.zeros(4)}]}
>>> rules = Rules([('embed', P('model', None)), ('layers.*.w', P(None, 'model')), ('**.b', P())])
>>> specs(params, rules)
{'embed': P('model', None), 'layers': [{'w': P(None, 'model'), 'b': P()}]}
"""

from .._extras import require as _require

_require("spruce.sharding", "jax")  # before the imports below: a missing package names the extra to install

from .._place import ShardingError as ShardingError
from ._explain import Explanation as Explanation
from ._explain import Row as Row
from ._explain import explain as explain
from ._rules import Rules as Rules
from ._rules import mesh as mesh
from ._specs import shard as shard
from ._specs import shardings as shardings
from ._specs import specs as specs

__all__ = ["Explanation", "Row", "Rules", "ShardingError", "explain", "mesh", "shard", "shardings", "specs"]
