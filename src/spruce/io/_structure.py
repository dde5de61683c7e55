"""The structure of a saved tree as a JSON document (the ``spruce.treedef`` metadata entry).

``encode_tree`` walks a pytree with ``spruce.tree.flatten_one_level_with_path`` and returns the
document and the arrays to store, by dotted name; ``decode_tree`` rebuilds the tree from the
document and a tensor reader; ``leaf_table`` lists the document's leaves for loading into
``like=``.  The schema (version 2) is documented in docs/io.md:

    {"version": 1 | 2, "tree": NODE}

    NODE = null                                     None (an empty node)
         | {"tensor": NAME}                         an array leaf
         | {"tensor": NAME, "scalar": true}         a NumPy scalar leaf (np.float32(1.0))
         | {"tensor": NAME, "key": IMPL}            typed PRNG keys: their key data (version 2)
         | {"skipped": WHAT, "name": NAME}          code that save(skip_code=True) left out (version 2)
         | {"value": VALUE, "name": NAME}           a Python bool/int/float/str leaf
         | {"tuple": [NODE, ...]} | {"list": [NODE, ...]}
         | {"dict": [[KEY, NODE], ...]}             insertion order; KEY is a VALUE
         | {"OrderedDict": [[KEY, NODE], ...]}
         | {"defaultdict": [[KEY, NODE], ...], "factory": "list" | ... | null}
         | {"deque": [NODE, ...], "maxlen": int | null}
         | {"namedtuple": CLASS, "fields": [[FIELD, NODE], ...]}
         | {"structseq": CLASS, "fields": [[FIELD, NODE], ...]}
         | {"class": CLASS, "fields": [[FIELD, NODE], ...], "static": [[FIELD, VALUE], ...]}
         | {"class": CLASS, "children": [NODE, ...], "opaque": REASON}

Any class node may carry ``"opaque": REASON`` when it cannot be rebuilt from the file alone
(class not importable, static data that is not plain data, custom flatten functions): its
leaves are still stored, and loading it needs ``like=``.  A document is written as version 1
unless it has a node that version 2 added, so that older readers load every file they can.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict, defaultdict, deque, namedtuple
from typing import Any, Callable, Final, NamedTuple

import numpy as np

from .. import tree as _tree
from .._arrays import jax_if_imported
from .._names import component, escaper, path_text
from .._tree._registry import is_namedtuple_type
from ._dtypes import describe, name_of
from ._errors import CheckpointError
from ._prng import is_key_dtype, key_impl_name, wrap_keys
from ._values import (
    NotData,
    class_ref,
    decode_value,
    describe_code,
    describe_leaf,
    encode_value,
    is_code,
    resolve,
)

FORMAT_VERSION: Final = 2
TREEDEF_KEY: Final = "spruce.treedef"
RESERVED_NAMES: Final = frozenset(["__metadata__"])
MAX_DEPTH: Final = 100

# defaultdict factories that are stored (by name); any other factory makes the node opaque.
_FACTORIES: Final[dict[str, Any]] = {
    "list": list, "dict": dict, "set": set, "int": int, "float": float, "str": str,
    "tuple": tuple, "frozenset": frozenset, "bool": bool,
}
_FACTORY_NAMES: Final = {v: k for k, v in _FACTORIES.items()}
_NONE_TYPE: Final = type(None)


def _is_structseq_class(t: type) -> bool:
    return issubclass(t, tuple) and isinstance(getattr(t, "n_sequence_fields", None), int)


class Encoded(NamedTuple):
    """What ``encode_tree`` returns: the JSON document and the arrays by name."""

    doc: dict[str, Any]
    arrays: dict[str, np.ndarray[Any, Any]]


class _Encoder:
    def __init__(self, allowed: frozenset[str], fmt: str, keep_jax: bool = False, skip_code: bool = False) -> None:
        self.allowed = allowed
        self.fmt = fmt
        self.keep_jax = keep_jax
        self.skip_code = skip_code
        self.version = 1  # raised to 2 by a node that version 2 added
        self.esc = escaper(".")
        self.arrays: dict[str, np.ndarray[Any, Any]] = {}
        self.where: dict[str, tuple[Any, ...]] = {}
        self.active: set[int] = set()  # ids of the containers on the current path

    def fail(self, path: tuple[Any, ...], msg: str) -> ValueError:
        return ValueError(f"save: the leaf at key path {path_text(path)} {msg}")

    def claim(self, path: tuple[Any, ...]) -> str:
        name = ".".join([component(e, self.esc) for e in path])
        if name in self.where:
            raise ValueError(
                f"save: the leaves at key paths {path_text(self.where[name])} and "
                f"{path_text(path)} both get the tensor name {name!r}; rename one of the keys"
            )
        if name in RESERVED_NAMES:
            raise ValueError(
                f"save: the leaf at key path {path_text(path)} would be named {name!r}, which "
                "the file format reserves; rename the key"
            )
        self.where[name] = path
        return name

    def array(self, path: tuple[Any, ...], arr: np.ndarray[Any, Any], what: str) -> np.ndarray[Any, Any]:
        if name_of(arr.dtype, self.allowed) is None:
            raise self.fail(
                path,
                f"is {what} of dtype {describe(arr.dtype)}, which {self.fmt} files cannot hold "
                f"(supported: {', '.join(sorted(self.allowed))})",
            )
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr if arr.flags.c_contiguous else arr.copy(order="C")

    def leaf(self, x: Any, path: tuple[Any, ...]) -> Any:
        t = type(x)
        if t is bool or t is int or t is float or t is str:
            name = self.claim(path)
            return {"value": encode_value(x), "name": name}
        if isinstance(x, np.ma.MaskedArray):
            raise self.fail(path, "is a masked array; save its data and mask as two leaves")
        if isinstance(x, np.ndarray):
            name = self.claim(path)
            self.arrays[name] = self.array(path, x, "an array")
            return {"tensor": name}
        if isinstance(x, np.generic):
            name = self.claim(path)
            self.arrays[name] = self.array(path, np.asarray(x), "a NumPy scalar")
            return {"tensor": name, "scalar": True}
        jarr = getattr(jax_if_imported(), "Array", None)
        if jarr is not None and isinstance(x, jarr) and is_key_dtype(x.dtype):
            return self.keys(x, path)
        if jarr is not None and isinstance(x, jarr) and self.keep_jax:
            if name_of(x.dtype, self.allowed) is None:
                raise self.fail(path, f"is a jax.Array of dtype {describe(x.dtype)}, which {self.fmt} files cannot hold")
            name = self.claim(path)
            self.arrays[name] = x  # kept on its devices: the caller writes it shard by shard
            return {"tensor": name}
        if jarr is not None and isinstance(x, jarr):
            try:
                host = np.asarray(x)
            except Exception as e:  # e.g. typed PRNG keys, deleted or abstract arrays
                raise self.fail(path, f"is a jax.Array that cannot be copied to the host: {e}") from e
            name = self.claim(path)
            self.arrays[name] = self.array(path, host, "a jax.Array")
            return {"tensor": name}
        if hasattr(x, "shape") and hasattr(x, "dtype") and not hasattr(t, "__array__"):
            raise self.fail(
                path,
                f"is a {t.__name__} with a shape and a dtype but no data (a placeholder such as "
                "jax.ShapeDtypeStruct); only arrays can be saved",
            )
        code = is_code(x)
        if code and self.skip_code:
            self.version = 2
            return {"skipped": describe_leaf(x), "name": self.claim(path)}
        hint = (
            " (save(..., skip_code=True) leaves code out, and load(path, like=...) takes it "
            "from like)" if code else ""
        )
        try:
            encode_value(x)
        except NotData as e:
            raise self.fail(
                path,
                f"cannot be saved: {e}. Leaves must be arrays, NumPy scalars or Python "
                f"bool/int/float/str{hint}",
            ) from None
        raise self.fail(path, f"is a {t.__name__}, which cannot be saved{hint}")

    def keys(self, x: Any, path: tuple[Any, ...]) -> Any:
        """Typed PRNG keys: their key data as a uint32 tensor, and the implementation's name."""
        import jax

        impl = key_impl_name(x)
        if impl is None:
            raise self.fail(
                path,
                f"is an array of PRNG keys ({x.dtype}) whose implementation JAX cannot find by "
                f"its name {str(jax.random.key_impl(x))!r}, so it could not be rebuilt",
            )
        data: Any = jax.random.key_data(x)  # (a jax.Array, kept as it is with keep_jax)
        name = self.claim(path)
        self.arrays[name] = data if self.keep_jax else self.array(path, np.asarray(data), "key data")
        self.version = 2
        return {"tensor": name, "key": impl}

    def node(self, x: Any, path: tuple[Any, ...], depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(
                f"save: the tree is more than {MAX_DEPTH} levels deep at key path "
                f"{path_text(path)[:300]} (or a container contains itself)"
            )
        kv, td = _tree.flatten_one_level_with_path(x)
        if td.num_nodes == 1 and td.num_leaves == 1:
            return self.leaf(x, path)
        if id(x) in self.active:
            raise ValueError(
                f"save: the tree contains itself: the container at key path {path_text(path)[:300]} "
                "is one of its own ancestors"
            )
        self.active.add(id(x))
        try:
            return self.container(x, kv, td, path, depth)
        finally:
            self.active.discard(id(x))

    def container(self, x: Any, kv: list[Any], td: Any, path: tuple[Any, ...], depth: int) -> Any:
        t, data = td.node_data()
        if t is _NONE_TYPE:
            return None

        def kids() -> list[Any]:
            return [self.node(c, path + (k,), depth + 1) for k, c in kv]

        if t is tuple:
            return {"tuple": kids()}
        if t is list:
            return {"list": kids()}
        if t is dict or t is OrderedDict or t is defaultdict:
            return self.mapping(x, t, kv, path, depth)
        if t is deque:
            return {"deque": kids(), "maxlen": data}
        if data is None and (_is_structseq_class(t) or is_namedtuple_type(t)):
            kind = "structseq" if _is_structseq_class(t) else "namedtuple"
            ref, problem = class_ref(t)
            names = [k.name if isinstance(k, _tree.GetAttrKey) else str(k) for k, _ in kv]
            out: dict[str, Any] = {kind: ref, "fields": [[n, c] for n, c in zip(names, kids())]}
            if problem is not None:
                out["opaque"] = problem
            return out
        return self.custom(x, t, kv, td, path, depth)

    def mapping(self, x: Any, t: type, kv: list[Any], path: tuple[Any, ...], depth: int) -> Any:
        by_key = {k.key: (k, c) for k, c in kv}
        items = []
        for key in x.keys():
            k, c = by_key[key]
            try:
                component(k, self.esc)
            except ValueError as e:  # repr() of an int of more than 4300 digits
                raise ValueError(
                    f"save: the dict at key path {path_text(path)} has a key (of type "
                    f"{type(key).__name__}) that cannot be written in a tensor name: {e}"
                ) from None
            try:
                ekey = encode_value(key)
            except NotData as e:
                raise ValueError(
                    f"save: the dict key {key!r:.80} at key path {path_text(path + (k,))} cannot "
                    f"be stored: {e}"
                ) from None
            items.append([ekey, self.node(c, path + (k,), depth + 1)])
        out: dict[str, Any] = {"OrderedDict" if t is OrderedDict else t.__name__: items}
        if t is defaultdict:
            factory = x.default_factory
            if factory is None:
                out["factory"] = None
            elif factory in _FACTORY_NAMES:
                out["factory"] = _FACTORY_NAMES[factory]
            else:
                out["factory"] = None
                out["opaque"] = (
                    f"the default_factory of the defaultdict is {describe_code(factory)}, not one "
                    f"of the builtin types {', '.join(_FACTORIES)}"
                )
        return out

    def custom(self, x: Any, t: type, kv: list[Any], td: Any, path: tuple[Any, ...], depth: int) -> Any:
        if t is StoredNode:
            return {
                "class": x.class_name,
                "fields": [[k.name, self.node(c, path + (k,), depth + 1)] for k, c in kv],
                "static": [[n, encode_value(v)] for n, v in x.static.items()],
            }
        ref, problem = class_ref(t)
        keys = [k for k, _ in kv]
        is_fields = (
            dataclasses.is_dataclass(t)
            and all(isinstance(k, _tree.GetAttrKey) for k in keys)
        )
        sequence = None if is_fields or not dataclasses.is_dataclass(t) else sequence_field(x, kv)
        if sequence is not None:
            return self.sequence_class(x, t, ref, problem, sequence, kv, td, path, depth)
        if not is_fields:
            return {
                "class": ref,
                "children": [self.node(c, path + (k,), depth + 1) for k, c in kv],
                "opaque": problem or (
                    f"the class {t.__qualname__} is registered with its own flatten/unflatten "
                    "functions, so its node data is not stored"
                ),
            }
        names = [k.name for k in keys]
        fields = [f.name for f in dataclasses.fields(t)]
        static: list[list[Any]] = []
        if problem is None and not set(names) <= set(fields):
            problem = f"the children {names} of {t.__qualname__} are not all its dataclass fields"
        if problem is None:
            for f in fields:
                if f in names:
                    continue
                try:
                    static.append([f, encode_value(getattr(x, f))])
                except NotData as e:
                    problem = f"static field {f!r} of {t.__qualname__} holds {e.what}, which is {e.why}"
                    static = []
                    break
                except AttributeError:
                    problem = f"field {f!r} of {t.__qualname__} is not set"
                    static = []
                    break
        if problem is None:
            # Rebuilding the node the way load will must give the same one-level structure.
            try:
                rebuilt = rebuild_fields(t, names, [c for _, c in kv], [(n, decode_value(v)) for n, v in static])
                same = _tree.flatten_one_level_with_path(rebuilt)[1] == td
            except (TypeError, ValueError, AttributeError) as e:
                same = False
                problem = f"rebuilding {t.__qualname__} from its fields failed: {e}"
            if not same and problem is None:
                problem = f"rebuilding {t.__qualname__} from its fields does not give the same node data"
        out: dict[str, Any] = {
            "class": ref,
            "fields": [[n, self.node(c, path + (k,), depth + 1)] for n, (k, c) in zip(names, kv)],
            "static": static,
        }
        if problem is not None:
            out["opaque"] = problem
        return out


    def sequence_class(self, x: Any, t: type, ref: Any, problem: str | None, field: str, kv: list[Any], td: Any,
                       path: tuple[Any, ...], depth: int) -> Any:
        """A dataclass node whose children are the items of its tuple (or list) field ``field``,
        keyed by position (``spruce.nn.Sequential``): stored as a class node with that one field,
        a tuple node whose children keep the node's own key paths (``0.weight``); every other
        dataclass field is static."""
        items = getattr(x, field)
        static: list[list[Any]] = []
        if problem is None:
            for f in dataclasses.fields(t):
                if f.name == field:
                    continue
                try:
                    static.append([f.name, encode_value(getattr(x, f.name))])
                except NotData as e:
                    problem = f"static field {f.name!r} of {t.__qualname__} holds {e.what}, which is {e.why}"
                    static = []
                    break
                except AttributeError:
                    problem = f"field {f.name!r} of {t.__qualname__} is not set"
                    static = []
                    break
        if problem is None:
            try:
                rebuilt = rebuild_fields(t, [field], [type(items)(c for _, c in kv)], [(n, decode_value(v)) for n, v in static])
                same = _tree.flatten_one_level_with_path(rebuilt)[1] == td
            except (TypeError, ValueError, AttributeError) as e:
                same = False
                problem = f"rebuilding {t.__qualname__} from its fields failed: {e}"
            if not same and problem is None:
                problem = f"rebuilding {t.__qualname__} from its fields does not give the same node data"
        kids = [self.node(c, path + (k,), depth + 1) for k, c in kv]
        if problem is not None:
            return {"class": ref, "children": kids, "opaque": problem}
        return {"class": ref, "fields": [[field, {type(items).__name__: kids}]], "static": static}


def sequence_field(x: Any, kv: list[Any]) -> str | None:
    """For a dataclass node whose children, keyed ``SequenceKey(0) ... SequenceKey(n - 1)``,
    are the items of exactly one of its tuple or list fields (``spruce.nn.Sequential`` and its
    ``layers``): that field's name; otherwise None."""
    if not all(type(k) is _tree.SequenceKey and k.idx == i for i, (k, _) in enumerate(kv)):
        return None
    found = []
    for f in dataclasses.fields(x):
        v: Any = getattr(x, f.name, None)
        if type(v) in (tuple, list) and len(v) == len(kv) and all(a is c for a, (_, c) in zip(v, kv)):
            found.append(f.name)
    return found[0] if len(found) == 1 else None


def encode_tree(tree: Any, allowed: frozenset[str], fmt: str, keep_jax: bool = False, skip_code: bool = False) -> Encoded:
    """The structure document of ``tree`` and its arrays (contiguous, little-endian) by name.
    With ``keep_jax``, jax.Array leaves are returned as they are (not copied to the host).
    With ``skip_code``, leaves that are code (``is_code``) are recorded as skipped instead of
    refused.  Typed PRNG keys are stored as their key data (a jax.Array with ``keep_jax``).

    Raises:
      ValueError: a leaf that cannot be stored (naming its key path and why), two leaves with
        the same name, a dict key that is not plain data, a tree deeper than MAX_DEPTH.
    """
    enc = _Encoder(allowed, fmt, keep_jax, skip_code)
    root = enc.node(tree, (), 0)
    return Encoded({"version": enc.version, "tree": root}, enc.arrays)


def rebuild_fields(cls: Any, names: list[str], children: list[Any], static: list[tuple[str, Any]]) -> Any:
    """A dataclass node built field by field, as spruce Modules unflatten: no ``__init__``,
    converters or checks run, and nothing of the class is called."""
    obj: Any = object.__new__(cls)
    for n, c in zip(names, children):
        object.__setattr__(obj, n, c)
    for n, v in static:
        object.__setattr__(obj, n, v)
    return obj


# -- decoding ------------------------------------------------------------------------------------


class LeafSpec(NamedTuple):
    """A leaf of a stored structure: a tensor (``scalar``: a NumPy scalar; ``key``: the key
    data of typed PRNG keys of that implementation), a stored value, or (``skipped``) code
    that ``save`` left out, ``value`` saying what it was."""

    name: str
    tensor: bool
    scalar: bool
    value: Any
    key: str | None = None
    skipped: bool = False


class _Corrupt(Exception):
    """A malformed document (turned into CheckpointError with the file and key path)."""


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise _Corrupt(what)


def _pairs(body: Any, what: str) -> list[tuple[Any, Any]]:
    _need(type(body) is list, f"{what} is not a list")
    out = []
    for item in body:
        _need(type(item) is list and len(item) == 2, f"{what} item is not a pair")
        out.append((item[0], item[1]))
    return out


def _fields(node: dict[str, Any]) -> list[tuple[str, Any]]:
    pairs = _pairs(node.get("fields"), "fields")
    for n, _ in pairs:
        _need(type(n) is str, "a field name is not a str")
    return pairs


_KINDS: Final = (
    "tuple", "list", "dict", "OrderedDict", "defaultdict", "deque", "namedtuple", "structseq", "class", "tensor", "value",
    "skipped",
)
_LEAVES: Final = ("tensor", "value", "skipped")


def _kind(node: Any) -> str:
    _need(type(node) is dict, f"a node is {type(node).__name__}, not an object")
    found = [k for k in _KINDS if k in node]
    _need(len(found) == 1, "a node has no kind or several")
    return found[0]


def _leaf_spec(node: dict[str, Any], kind: str) -> LeafSpec:
    if kind == "tensor":
        name: Any = node["tensor"]
        _need(type(name) is str, "a tensor name is not a str")
        scalar = node.get("scalar", False)
        _need(type(scalar) is bool, "'scalar' is not a bool")
        key = node.get("key")
        _need(key is None or (type(key) is str and not scalar), "'key' is not a str, or is on a scalar")
        return LeafSpec(name, True, scalar, None, key)
    name = node.get("name")
    _need(type(name) is str, f"a {kind} leaf has no name")
    if kind == "skipped":
        what = node["skipped"]
        _need(type(what) is str, "a skipped leaf's description is not a str")
        return LeafSpec(name, False, False, what, None, True)
    try:
        value = decode_value(node["value"])
    except ValueError as e:
        raise _Corrupt(str(e)) from None
    return LeafSpec(name, False, False, value)


def _children(node: dict[str, Any], kind: str) -> list[tuple[str, Any]]:
    """``(name component, child node)`` of a container node."""
    esc = escaper(".")
    body = node[kind]
    if kind in ("tuple", "list", "deque"):
        _need(type(body) is list, f"a {kind} body is not a list")
        return [(str(i), c) for i, c in enumerate(body)]
    if kind in ("dict", "OrderedDict", "defaultdict"):
        out = []
        for k, c in _pairs(body, kind):
            try:
                key = decode_value(k)
                out.append((esc.escape(key if type(key) is str else repr(key)), c))
            except ValueError as e:  # (repr() refuses ints of more than 4300 digits)
                raise _Corrupt(str(e)) from None
        return out
    if kind == "class" and "fields" not in node:
        kids: Any = node.get("children")
        _need(type(kids) is list, "a class node has neither fields nor children")
        return [(str(i), c) for i, c in enumerate(kids)]
    return [(esc.escape(n), c) for n, c in _fields(node)]


def leaf_table(doc_tree: Any, file: str) -> list[LeafSpec]:
    """The leaves of a stored structure in order (tensor names and stored values).

    Raises:
      CheckpointError: a malformed document.
    """
    out: list[LeafSpec] = []
    stack: list[tuple[Any, int, str]] = [(doc_tree, 0, "")]
    try:
        while stack:
            node, depth, where = stack.pop()
            _need(depth <= MAX_DEPTH, f"the structure is more than {MAX_DEPTH} levels deep")
            if node is None:
                continue
            kind = _kind(node)
            if kind in _LEAVES:
                out.append(_leaf_spec(node, kind))
                continue
            kids = _children(node, kind)
            for comp, child in reversed(kids):
                stack.append((child, depth + 1, f"{where}.{comp}" if where else comp))
    except _Corrupt as e:
        raise CheckpointError(f"corrupted {TREEDEF_KEY} metadata near {where or '<root>'!r}: {e}", file) from None
    return out


class StoredNode:
    """What ``spruce.io.load`` (without ``like``) gives for a dataclass pytree node — a
    ``spruce.Module``, a ``register_dataclass`` class — whose class cannot be found where the
    checkpoint is read (its module is not imported, or the class is gone).

    A plain stand-in that keeps everything the file holds: ``class_name`` (the stored
    ``'module:qualname'``), ``fields`` (name -> child, in the stored order) and ``static``
    (name -> plain value).  Fields and static fields read as attributes (``node.weight``).  It
    is a pytree node of ``spruce.tree`` whose children are the fields, keyed by attribute name,
    so the dotted names of its leaves are the original ones; saving it writes the original
    class node again.  To get the real class, import its module before loading, or pass
    ``like=``.

    >>> n = StoredNode('mypkg.layers:Dense', {'weight': 1.0}, {'features': 4})
    >>> n.weight, n.features, n
    (1.0, 4, StoredNode('mypkg.layers:Dense', weight=1.0, features=4))
    """

    __slots__ = ("class_name", "fields", "static")

    class_name: str
    fields: dict[str, Any]
    static: dict[str, Any]

    def __init__(self, class_name: str, fields: dict[str, Any], static: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "class_name", class_name)
        object.__setattr__(self, "fields", dict(fields))
        object.__setattr__(self, "static", dict(static or {}))

    def __getattr__(self, name: str) -> Any:
        for table in ("fields", "static"):
            d = object.__getattribute__(self, table)
            if name in d:
                return d[name]
        raise AttributeError(f"the stored {object.__getattribute__(self, 'class_name')} has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("StoredNode is immutable")

    def __repr__(self) -> str:
        items = [repr(self.class_name)] + [f"{k}={v!r}" for k, v in {**self.fields, **self.static}.items()]
        return f"StoredNode({', '.join(items)})"


def _stored_flatten_with_keys(n: StoredNode) -> tuple[list[tuple[Any, Any]], Any]:
    return [(_tree.GetAttrKey(k), v) for k, v in n.fields.items()], (n.class_name, tuple(n.fields), tuple(n.static.items()))


def _stored_unflatten(aux: Any, children: Any) -> StoredNode:
    name, keys, static = aux
    return StoredNode(name, dict(zip(keys, children)), dict(static))


_tree.register_pytree_with_keys(
    StoredNode,
    _stored_flatten_with_keys,
    _stored_unflatten,
    lambda n: (list(n.fields.values()), (n.class_name, tuple(n.fields), tuple(n.static.items()))),
)

_standin_lock = threading.Lock()
_standins: dict[tuple[str, tuple[str, ...]], type] = {}


def standin_namedtuple(ref: str, fields: list[str]) -> type | None:
    """A namedtuple class named as the stored ``module:qualname`` says, with the stored fields
    (one class per name and fields, so equal nodes share it); None if the names cannot make a
    namedtuple."""
    key = (ref, tuple(fields))
    with _standin_lock:
        got = _standins.get(key)
        if got is not None:
            return got
        module, _, qualname = ref.partition(":")
        typename = qualname.rsplit(".", 1)[-1]
        try:
            cls = namedtuple(typename, fields, module=module or None)  # type: ignore[misc]
        except (ValueError, TypeError):
            return None
        if len(_standins) < 1024:
            _standins[key] = cls
        return cls


class Decoder:
    """Rebuilds a tree from a structure document (see the module docstring)."""

    def __init__(self, file: str | os.PathLike[str], tensor: Callable[[str], np.ndarray[Any, Any]]) -> None:
        self.file = os.fspath(file)
        self.tensor = tensor
        self.used: set[str] = set()

    def fail(self, where: str, msg: str) -> CheckpointError:
        return CheckpointError(f"the stored structure at {where or '<root>'!r} {msg}", self.file)

    def cannot_rebuild(self, where: str, msg: str) -> CheckpointError:
        return self.fail(
            where,
            f"cannot be rebuilt without like=: {msg}. Load it into a tree of the same structure "
            "with spruce.io.load(path, like=...)",
        )

    def decode(self, doc_tree: Any) -> Any:
        try:
            return self.node(doc_tree, 0, "")
        except _Corrupt as e:
            raise CheckpointError(f"corrupted {TREEDEF_KEY} metadata: {e}", self.file) from None

    def node(self, node: Any, depth: int, where: str) -> Any:
        if depth > MAX_DEPTH:
            raise _Corrupt(f"the structure is more than {MAX_DEPTH} levels deep")
        if node is None:
            return None
        kind = _kind(node)
        if kind in _LEAVES:
            spec = _leaf_spec(node, kind)
            if spec.skipped:
                raise self.cannot_rebuild(where, f"save left out {spec.value[:200]} (skip_code=True)")
            if not spec.tensor:
                return spec.value
            if spec.name in self.used:
                raise self.fail(where, f"uses the tensor {spec.name!r} twice")
            self.used.add(spec.name)
            arr = self.tensor(spec.name)
            if spec.key is not None:
                return wrap_keys(arr, spec.key, self.file, where)
            if spec.scalar:
                if arr.shape != ():
                    raise self.fail(where, f"is a scalar but its tensor has shape {arr.shape}")
                return arr[()]
            return arr
        opaque = node.get("opaque")
        local = opaque is not None and kind in ("namedtuple", "structseq")  # fields stored: a stand-in
        if opaque is not None and not local:
            stored = node.get(kind) if kind in ("class", "namedtuple", "structseq") else None
            what = f"the {kind} {stored}" if type(stored) is str and len(stored) <= 200 else f"the {kind}"
            reason = str(opaque)
            if len(reason) > 500:
                reason = reason[:497] + "..."
            raise self.cannot_rebuild(where, f"{what} was saved without its node data because {reason}")
        kids = _children(node, kind)
        values = [self.node(c, depth + 1, f"{where}.{comp}" if where else comp) for comp, c in kids]
        if kind == "tuple":
            return tuple(values)
        if kind == "list":
            return values
        if kind in ("dict", "OrderedDict", "defaultdict"):
            keys = [decode_value(k) for k, _ in _pairs(node[kind], kind)]
            if kind == "defaultdict":
                fname = node.get("factory")
                _need(fname is None or fname in _FACTORIES, "unknown defaultdict factory")
                d: Any = defaultdict(None if fname is None else _FACTORIES[fname])
            elif kind == "OrderedDict":
                d = OrderedDict()
            else:
                d = {}
            for k, v in zip(keys, values):
                try:
                    d[k] = v
                except TypeError:
                    raise _Corrupt(f"a dict key is not hashable: {k!r:.60}") from None
            _need(len(d) == len(keys), "a dict has a repeated key")
            return d
        if kind == "deque":
            maxlen = node.get("maxlen")
            _need(maxlen is None or (type(maxlen) is int and maxlen >= len(values)), "bad deque maxlen")
            return deque(values, maxlen=maxlen)
        names = [n for n, _ in _fields(node)]
        if local and type(node[kind]) is str:
            return self.stand_in(kind, node, names, values, where)
        try:
            cls: Any = self.cls(node[kind], where)
        except CheckpointError as e:
            if type(node[kind]) is not str or "malformed class name" in str(e):
                raise
            return self.stand_in(kind, node, names, values, where)
        if kind == "namedtuple":
            if not is_namedtuple_type(cls) or list(cls._fields) != names:
                raise self.cannot_rebuild(where, f"{node[kind]} is not a namedtuple with fields {names} (the class has changed?)")
            return tuple.__new__(cls, values)
        if kind == "structseq":
            if not _is_structseq_class(cls) or cls.n_sequence_fields != len(values):
                raise self.cannot_rebuild(where, f"{node[kind]} is not a struct sequence of {len(values)} fields")
            return cls(tuple(values))
        # a dataclass node (a spruce Module, a register_dataclass class)
        if not dataclasses.is_dataclass(cls) or not _tree.is_tree_node(cls):
            raise self.cannot_rebuild(where, f"{node[kind]} is not a registered pytree dataclass")
        static_pairs = _pairs(node.get("static"), "static")
        fields = {f.name for f in dataclasses.fields(cls)}
        static = []
        for n, v in static_pairs:
            _need(type(n) is str, "a static field name is not a str")
            try:
                static.append((n, decode_value(v)))
            except ValueError as e:
                raise _Corrupt(str(e)) from None
        wanted = set(names) | {n for n, _ in static}
        if not wanted <= fields:
            raise self.cannot_rebuild(where, f"{node[kind]} has no fields {sorted(wanted - fields)} (the class has changed?)")
        try:
            obj = rebuild_fields(cls, names, values, static)
        except (TypeError, AttributeError) as e:
            raise self.cannot_rebuild(where, f"{node[kind]} cannot be built field by field: {e}") from None
        try:
            got_kv = _tree.flatten_one_level_with_path(obj)[0]
        except (KeyError, AttributeError, TypeError, ValueError) as e:
            raise self.cannot_rebuild(
                where, f"{node[kind]} cannot be flattened from the stored fields (the class has changed?): {e!r}"
            ) from None
        got = [k for k, _ in got_kv]
        # The children are the fields; or, for a node like spruce.nn.Sequential, the items of
        # its one stored tuple / list field, keyed by position.
        if got != [_tree.GetAttrKey(n) for n in names] and not (
            len(values) == 1 and type(values[0]) in (tuple, list) and sequence_field(obj, got_kv) == names[0]
        ):
            raise self.cannot_rebuild(
                where,
                f"{node[kind]} now has the children {[str(k) for k in got]}, the file "
                f"{['.' + n for n in names]} (the class has changed?)",
            )
        return obj

    def stand_in(self, kind: str, node: dict[str, Any], names: list[str], values: list[Any], where: str) -> Any:
        """The node as a plain stand-in, for a class that cannot be found here: a namedtuple
        class rebuilt from the stored name and fields, or a StoredNode."""
        ref = node[kind]
        if kind in ("namedtuple", "structseq"):
            cls = standin_namedtuple(ref, names)
            if cls is None:
                raise self.cannot_rebuild(where, f"{ref[:100]} cannot be found, and its fields {names} cannot make a namedtuple")
            return tuple.__new__(cls, values)
        static = {}
        for n, v in _pairs(node.get("static"), "static"):
            _need(type(n) is str, "a static field name is not a str")
            try:
                static[n] = decode_value(v)
            except ValueError as e:
                raise _Corrupt(str(e)) from None
        return StoredNode(ref, dict(zip(names, values)), static)

    def cls(self, ref: Any, where: str) -> Any:
        try:
            cls = resolve(ref)
        except ValueError as e:
            raise self.cannot_rebuild(where, str(e)) from None
        if not isinstance(cls, type) or not _tree.is_tree_node(cls):
            raise self.cannot_rebuild(where, f"{str(ref)[:100]} is not a pytree node class")
        return cls
