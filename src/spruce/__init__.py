"""spruce: pytrees — nested containers whose leaves are arrays — and the models built from them.

``spruce.tree`` is the engine (``jax.tree``-style short names), ``spruce.tree_util`` the same
objects under jax.tree_util's names.  ``import spruce`` never imports JAX.

``spruce.__compiled__`` is True when the mypyc-compiled engine is loaded, False when the same
source runs as plain Python (``SPRUCE_PURE=1`` at build time, or running from the source tree).
"""

from . import tree as tree
from . import tree_util as tree_util
from ._tree import _traverse

__compiled__: bool = not _traverse.__file__.endswith(".py")
__version__ = "0.1.0"

__all__ = ["__compiled__", "__version__", "tree", "tree_util"]
