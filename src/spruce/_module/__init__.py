"""The model layer: ``Module``, ``field``, the pretty printer, and the tools that work on
Modules and any pytree: ``_filters`` (filter / partition / combine), ``_surgery`` (tree_at),
``_compare`` (tree_equal), ``_check`` (tree_check), ``_summary`` (summary) and ``_updates``
(apply_updates).  The array predicates it re-exports live one layer down, in ``spruce._arrays``.

Plain Python (not compiled by mypyc: it needs a metaclass and dataclasses), built only on the
public functions of ``spruce.tree``.  JAX is never imported here; Module classes reach
``jax.tree_util`` as every spruce registration does (see ``spruce/_jax_bridge.py``).
"""

from .._arrays import is_array as is_array
from .._arrays import is_array_like as is_array_like
from .._arrays import is_inexact_array as is_inexact_array
from .._arrays import is_inexact_array_like as is_inexact_array_like
from ._check import tree_check as tree_check
from ._field import field as field
from ._module import Module as Module
from ._pretty import pformat as pformat
