"""Key-path entries and ``keystr``.

A key path is a tuple of key entries, one per level from the root to a leaf.  The entry classes
follow jax.tree_util's (same names, fields, ``str`` and ``repr``), so paths print the same way.

Each entry also compares and hashes equal to JAX's entry of the same kind and field
(``DictKey('a') == jax.tree_util.DictKey('a')``), so paths from either library can be mixed:
the hashes are JAX's (the field's hash; an index plus a per-class salt), and JAX's classes are
recognised through ``JAX_KEY_KINDS``, which spruce's JAX bridge fills when JAX is imported (the
engine never imports JAX).
"""

from __future__ import annotations

import threading
from typing import Any, Final

# Entry kinds, and JAX's entry classes by kind (filled by spruce's JAX bridge; empty without JAX).
DICT_ENTRY: Final = 1
SEQUENCE_ENTRY: Final = 2
ATTR_ENTRY: Final = 3
FLAT_INDEX_ENTRY: Final = 4
JAX_KEY_KINDS: Final[dict[type, int]] = {}
# JAX hashes an index entry as ``index + salt`` (SequenceKey 1, FlattenedIndexKey 42): the same
# values here keep a spruce entry and a JAX entry in one dict slot.
_SEQUENCE_SALT: Final = 1
_FLAT_INDEX_SALT: Final = 42


class DictKey:
    """Entry for a child of a dict, OrderedDict or defaultdict.

    ``key`` is the dict key.  ``str`` gives ``['a']`` (the key's repr in brackets), ``repr`` gives
    ``DictKey(key='a')``, as in jax.tree_util.
    """

    __match_args__: Final = ("key",)
    _key: Any

    def __init__(self, key: Any) -> None:
        self._key = key

    @property
    def key(self) -> Any:
        """Read-only: entries are shared between paths (cached), so they never change."""
        return self._key

    def __str__(self) -> str:
        return f"[{self.key!r}]"

    def __repr__(self) -> str:
        return f"DictKey(key={self.key!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DictKey) or JAX_KEY_KINDS.get(type(other)) == DICT_ENTRY:
            return bool(self.key == other.key)  # type: ignore[attr-defined]  # a DictKey of either library
        return False

    def __hash__(self) -> int:
        return hash(self.key)

    def __reduce__(self) -> Any:
        return (DictKey, (self.key,))


class SequenceKey:
    """Entry for a child of a list, tuple or deque: ``idx`` is its position (an int).

    ``str`` gives ``[0]``, ``repr`` gives ``SequenceKey(idx=0)``, as in jax.tree_util.
    """

    __match_args__: Final = ("idx",)
    _idx: int

    def __init__(self, idx: int) -> None:
        self._idx = idx

    @property
    def idx(self) -> int:
        """Read-only: entries are shared between paths (cached), so they never change."""
        return self._idx

    def __str__(self) -> str:
        return f"[{self.idx!r}]"

    def __repr__(self) -> str:
        return f"SequenceKey(idx={self.idx!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SequenceKey) or JAX_KEY_KINDS.get(type(other)) == SEQUENCE_ENTRY:
            return bool(self.idx == other.idx)  # type: ignore[attr-defined]  # of either library
        return False

    def __hash__(self) -> int:
        return hash(self.idx + _SEQUENCE_SALT)

    def __reduce__(self) -> Any:
        return (SequenceKey, (self.idx,))


class GetAttrKey:
    """Entry for an attribute child (namedtuple, struct sequence, dataclass, Module field).

    ``name`` is the attribute name.  ``str`` gives ``.name``, ``repr`` gives
    ``GetAttrKey(name='name')``, as in jax.tree_util.
    """

    __match_args__: Final = ("name",)
    _name: str

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        """Read-only: entries are shared between paths (cached), so they never change."""
        return self._name

    def __str__(self) -> str:
        return f".{self.name}"

    def __repr__(self) -> str:
        return f"GetAttrKey(name={self.name!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GetAttrKey) or JAX_KEY_KINDS.get(type(other)) == ATTR_ENTRY:
            return bool(self.name == other.name)  # type: ignore[attr-defined]  # of either library
        return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> Any:
        return (GetAttrKey, (self.name,))


class FlattenedIndexKey:
    """Entry for the ``key``-th child of a custom node registered without key names.

    ``str`` gives ``[<flat index 0>]``, ``repr`` gives ``FlattenedIndexKey(key=0)``, as in
    jax.tree_util.
    """

    __match_args__: Final = ("key",)
    _key: int

    def __init__(self, key: int) -> None:
        self._key = key

    @property
    def key(self) -> int:
        """Read-only: entries are shared between paths (cached), so they never change."""
        return self._key

    def __str__(self) -> str:
        return f"[<flat index {self.key}>]"

    def __repr__(self) -> str:
        return f"FlattenedIndexKey(key={self.key!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FlattenedIndexKey) or JAX_KEY_KINDS.get(type(other)) == FLAT_INDEX_ENTRY:
            return bool(self.key == other.key)  # type: ignore[attr-defined]  # of either library
        return False

    def __hash__(self) -> int:
        return hash(self.key + _FLAT_INDEX_SALT)

    def __reduce__(self) -> Any:
        return (FlattenedIndexKey, (self.key,))


# Key entries are immutable, so the common small ones are shared instead of allocated per leaf.
# SEQUENCE_KEYS starts with 1024 entries and grows (only ever by appending, under a lock, so
# entry i is always SequenceKey(i)) to the longest sequence walked with paths, up to 65,536
# entries (about 4 MB).
_NUM_CACHED: Final = 1024
_MAX_SEQUENCE_KEYS: Final = 1 << 16
SEQUENCE_KEYS: Final[list[Any]] = [SequenceKey(i) for i in range(_NUM_CACHED)]
FLAT_INDEX_KEYS: Final[list[Any]] = [FlattenedIndexKey(i) for i in range(_NUM_CACHED)]
_grow_lock: Final = threading.Lock()


def sequence_keys(n: int) -> list[Any]:
    """``[SequenceKey(0), ..., SequenceKey(n - 1)]``, sharing the cached entries."""
    have = len(SEQUENCE_KEYS)
    if n > have and have < _MAX_SEQUENCE_KEYS:
        with _grow_lock:
            have = len(SEQUENCE_KEYS)
            want = min(n, _MAX_SEQUENCE_KEYS)
            if want > have:
                SEQUENCE_KEYS.extend([SequenceKey(i) for i in range(have, want)])
        have = len(SEQUENCE_KEYS)
    if n <= have:
        return SEQUENCE_KEYS[:n]
    return SEQUENCE_KEYS + [SequenceKey(i) for i in range(have, n)]


# DictKey entries of str keys, shared like the SequenceKey entries above (a model's dicts
# repeat the same few names); bounded so that a stream of distinct keys cannot grow it forever.
_DICT_KEYS: Final[dict[str, DictKey]] = {}
_MAX_DICT_KEYS: Final = 1 << 16


def dict_keys(keys: list[Any]) -> list[Any]:
    """``[DictKey(k) for k in keys]``, sharing one entry per str key."""
    out: list[Any] = []
    for k in keys:
        if type(k) is str:
            dk = _DICT_KEYS.get(k)
            if dk is None:
                dk = DictKey(k)
                if len(_DICT_KEYS) < _MAX_DICT_KEYS:
                    _DICT_KEYS[k] = dk
            out.append(dk)
        else:
            out.append(DictKey(k))
    return out


def flat_index_keys(n: int) -> list[Any]:
    """``[FlattenedIndexKey(0), ..., FlattenedIndexKey(n - 1)]``, sharing the cached entries."""
    if n <= _NUM_CACHED:
        return FLAT_INDEX_KEYS[:n]
    return FLAT_INDEX_KEYS + [FlattenedIndexKey(i) for i in range(_NUM_CACHED, n)]


def native_key(entry: Any) -> Any:
    """``entry`` as spruce's entry class when it is one of JAX's (DictKey, SequenceKey,
    GetAttrKey, FlattenedIndexKey), else ``entry`` itself."""
    kind = JAX_KEY_KINDS.get(type(entry))
    if kind is None:
        return entry
    if kind == DICT_ENTRY:
        k = entry.key
        if type(k) is str:
            return dict_keys([k])[0]
        return DictKey(k)
    if kind == SEQUENCE_ENTRY:
        i = entry.idx
        return SEQUENCE_KEYS[i] if 0 <= i < len(SEQUENCE_KEYS) else SequenceKey(i)
    if kind == ATTR_ENTRY:
        return GetAttrKey(entry.name)
    return FlattenedIndexKey(entry.key)


def _simple(entry: Any) -> str:
    entry = native_key(entry)
    if isinstance(entry, DictKey):
        return str(entry.key)
    if isinstance(entry, SequenceKey):
        return str(entry.idx)
    if isinstance(entry, GetAttrKey):
        return entry.name
    if isinstance(entry, FlattenedIndexKey):
        return str(entry.key)
    return str(entry)


def keystr(keys: Any, *, simple: bool = False, separator: str = "") -> str:
    """Join a key path into one string, as jax.tree_util.keystr.

    Args:
      keys: a key path (a tuple of key entries; other objects are converted with ``str``).
      simple: if True, each entry is shown by its bare key (``a``, ``0``, ``name``) instead of
        its bracketed form (``['a']``, ``[0]``, ``.name``).  Shorter, but ``0`` may then mean a
        list index or the dict key ``0``.
      separator: put between the entries.

    Returns:
      The joined string; the empty path gives ``''``.

    >>> keystr((DictKey('a'), SequenceKey(0), GetAttrKey('w')))
    "['a'][0].w"
    >>> keystr((DictKey('a'), SequenceKey(0), GetAttrKey('w')), simple=True, separator='/')
    'a/0/w'
    """
    if simple:
        return separator.join([_simple(k) for k in keys])
    return separator.join([str(k) for k in keys])
