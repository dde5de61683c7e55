"""spruce: pytrees — nested containers whose leaves are arrays — and the models built from them.

``spruce.tree`` is the engine (``jax.tree``-style short names), ``spruce.tree_util`` the same
objects under jax.tree_util's names.  The model layer lives at the top level: ``Module`` and
``field`` (dataclass-style pytree classes), the filters ``is_array`` / ``is_array_like`` /
``is_inexact_array`` / ``is_inexact_array_like`` / ``filter`` / ``partition`` / ``combine``,
``if_array`` (an axis spec for ``spruce.jax.filter_vmap``), ``tree_at``, ``tree_check``,
``apply_updates``, ``tree_equal`` / ``assert_tree_equal``, ``summary`` and ``pformat``.

The subpackages load on first use (``import spruce`` then ``spruce.io.load(...)`` works, PEP 562):
``spruce.jax`` (filtered transforms), ``spruce.nn`` (layers), ``spruce.io`` (checkpoints),
``spruce.sharding``, ``spruce.view`` (pictures), ``spruce.models``, ``spruce.cli``.  The ones
that need JAX import it then; ``import spruce`` itself never imports JAX.

The package is built in layers, each importing only from those below it: the engine
(``_tree/``); the shared vocabularies (``_arrays``, ``_names``, ``_place``, ``_jax_bridge``,
``_partial``); the model layer (``_module/``); the JAX layer (``jax/``); ``io/``,
``sharding/``, ``nn/``; ``models/``, ``view/``; the command line (``cli/``).

``spruce.__compiled__`` is True when the mypyc-compiled engine is loaded, False when the same
source runs as plain Python (``SPRUCE_PURE=1`` at build time, or running from the source tree).
"""

from typing import Any as _Any

from . import _jax_bridge
from . import tree as tree
from . import tree_util as tree_util
from ._arrays import if_array as if_array
from ._module import Module as Module
from ._module import field as field
from ._module import is_array as is_array
from ._module import is_array_like as is_array_like
from ._module import is_inexact_array as is_inexact_array
from ._module import is_inexact_array_like as is_inexact_array_like
from ._module import pformat as pformat
from ._module._check import tree_check as tree_check
from ._module._compare import assert_tree_equal as assert_tree_equal
from ._module._compare import tree_equal as tree_equal
from ._module._filters import combine as combine
from ._module._filters import filter as filter
from ._module._filters import partition as partition
from ._module._summary import Summary as Summary
from ._module._summary import SummaryRow as SummaryRow
from ._module._summary import summary as summary
from ._module._surgery import tree_at as tree_at
from ._module._updates import apply_updates as apply_updates
from ._tree._depth import COMPILED as _COMPILED

_jax_bridge.install()  # registrations reach jax.tree_util when JAX is (or becomes) imported

#: True when the mypyc-compiled engine is loaded, False when the same source runs as plain Python.
__compiled__: bool = _COMPILED
#: The version of this build, as in the package metadata.
__version__ = "0.1.0"

_SUBPACKAGES = frozenset(["cli", "io", "jax", "models", "nn", "sharding", "view"])


def __getattr__(name: str) -> _Any:
    """``spruce.io``, ``spruce.nn``, ... imported on first access (PEP 562)."""
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBPACKAGES)

__all__ = [
    "Module",
    "Summary",
    "SummaryRow",
    "__compiled__",
    "__version__",
    "apply_updates",
    "assert_tree_equal",
    "combine",
    "field",
    "filter",
    "if_array",
    "is_array",
    "is_array_like",
    "is_inexact_array",
    "is_inexact_array_like",
    "partition",
    "pformat",
    "summary",
    "tree",
    "tree_at",
    "tree_check",
    "tree_equal",
    "tree_util",
]
