"""spruce.jax: JAX transforms that accept any pytree (imports JAX).

``filter_jit``, ``filter_grad``, ``filter_value_and_grad`` and ``filter_vmap`` take functions
whose arguments are arbitrary pytrees — Modules holding functions, strings, Python numbers —
and treat the array leaves (``spruce.is_array``: JAX and NumPy arrays) as traced / batched /
differentiated values and everything else as static; ``filter_shard`` places the array leaves
of a tree (``device_put``, or a sharding constraint under a trace).  Semantics follow
Equinox's functions of the same names.  ``ravel_pytree`` is jax.flatten_util's, over spruce pytrees.

This package only re-exports; each job lives in its own module:

- ``_split``       the split of leaves into traced arrays and static values, and filter_jit's
                   per-call walk that makes the cache key (shared with ``filter_vmap``)
- ``_entry``       the compiled entry: one ``jax.jit`` per static key, how outputs are rebuilt
- ``_jit_errors``  JAX's errors rewritten with the user's key paths (``args[0]['w']``)
- ``_jit``         ``filter_jit`` itself and its cache of wrappers
- ``_grad``, ``_vmap``, ``_ravel``, ``_shard``   filter_grad, filter_vmap, ravel_pytree, filter_shard
- ``_aot``         ``filter_jit(f).lower(...)``: the ahead-of-time Lowered / Compiled pair
- ``_transforms``  the other filtered transforms: shapes, jaxprs, remat, jvp/vjp, Jacobians,
                   callbacks
- ``_custom``      filter_custom_jvp, filter_custom_vjp
- ``_closure``     filter_closure_convert

Importing it also connects spruce's pytree registry with ``jax.tree_util`` (normally already
done by the import hook described in ``spruce/_jax_bridge.py``).
"""

from __future__ import annotations

from .._extras import require as _require

_require("spruce.jax", "jax")  # before the imports below: a missing package names the extra to install

from .. import _jax_bridge
from ._closure import filter_closure_convert as filter_closure_convert
from ._custom import filter_custom_jvp as filter_custom_jvp
from ._custom import filter_custom_vjp as filter_custom_vjp
from ._grad import filter_grad as filter_grad
from ._grad import filter_value_and_grad as filter_value_and_grad
from ._jit import filter_jit as filter_jit
from ._ravel import ravel_pytree as ravel_pytree
from ._shard import filter_shard as filter_shard
from ._transforms import filter_checkpoint as filter_checkpoint
from ._transforms import filter_eval_shape as filter_eval_shape
from ._transforms import filter_hessian as filter_hessian
from ._transforms import filter_jacfwd as filter_jacfwd
from ._transforms import filter_jacrev as filter_jacrev
from ._transforms import filter_jvp as filter_jvp
from ._transforms import filter_make_jaxpr as filter_make_jaxpr
from ._transforms import filter_pure_callback as filter_pure_callback
from ._transforms import filter_vjp as filter_vjp
from ._vmap import filter_vmap as filter_vmap

_jax_bridge.connect()

__all__ = [
    "filter_checkpoint",
    "filter_closure_convert",
    "filter_custom_jvp",
    "filter_custom_vjp",
    "filter_eval_shape",
    "filter_grad",
    "filter_hessian",
    "filter_jacfwd",
    "filter_jacrev",
    "filter_jit",
    "filter_jvp",
    "filter_make_jaxpr",
    "filter_pure_callback",
    "filter_shard",
    "filter_value_and_grad",
    "filter_vjp",
    "filter_vmap",
    "ravel_pytree",
]
