"""Node kinds: the low bits of a node's code, and how a registered (CUSTOM) node is flattened.

A node's code is ``arity << SHIFT | kind``; a leaf has code 0.  PyTreeDef node tables and the
walkers branch on these integers, never on types.
"""

from __future__ import annotations

from typing import Final

LEAF: Final = 0
NONE: Final = 1
TUPLE: Final = 2
LIST: Final = 3
DICT: Final = 4
NAMEDTUPLE: Final = 5
ORDEREDDICT: Final = 6
DEFAULTDICT: Final = 7
DEQUE: Final = 8
STRUCTSEQ: Final = 9
CUSTOM: Final = 10
NUM_KINDS: Final = 11
SHIFT: Final = 4
MASK: Final = 15

# How a CUSTOM node is flattened.
MODE_FUNCS: Final = 0  # user flatten / unflatten (and optional flatten_with_keys)
MODE_KEYS: Final = 1  # user flatten_with_keys only; plain flatten derived from it
MODE_DATACLASS: Final = 2  # register_dataclass: attributes read and set directly
MODE_STATIC: Final = 3  # register_static: no children, the object itself is the node data
# jax.tree_util.register_dataclass (seen through spruce's JAX bridge): flattened as
# MODE_DATACLASS, rebuilt as JAX rebuilds it, ``nodetype(**fields)`` (so ``__init__`` runs).
MODE_DATACLASS_INIT: Final = 4
