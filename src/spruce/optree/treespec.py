"""optree's ``optree.treespec`` module: the structure constructors under short names
(``treespec.leaf``, ``treespec.tuple``, ``treespec.dict``, ...).  Each name is the same function
as the long one in ``spruce.optree`` (``treespec.leaf is spruce.optree.treespec_leaf``); see
``spruce.optree._treespec`` for their semantics.  The names shadow builtins only inside this
module: use it qualified, ``import spruce.optree.treespec as treespec``.

>>> import spruce.optree.treespec as treespec
>>> treespec.dict({'b': treespec.leaf(), 'a': treespec.none()})
PyTreeDef({'a': None, 'b': *})
"""

from __future__ import annotations

from ._treespec import treespec_defaultdict as defaultdict
from ._treespec import treespec_deque as deque
from ._treespec import treespec_dict as dict
from ._treespec import treespec_from_collection as from_collection
from ._treespec import treespec_frozendict as frozendict
from ._treespec import treespec_leaf as leaf
from ._treespec import treespec_list as list
from ._treespec import treespec_namedtuple as namedtuple
from ._treespec import treespec_none as none
from ._treespec import treespec_ordereddict as ordereddict
from ._treespec import treespec_structseq as structseq
from ._treespec import treespec_tuple as tuple

__all__ = [
    "leaf",
    "none",
    "tuple",
    "list",
    "dict",
    "namedtuple",
    "ordereddict",
    "defaultdict",
    "deque",
    "structseq",
    "frozendict",
    "from_collection",
]
