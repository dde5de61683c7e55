"""One pytree world with JAX: spruce's registry and ``jax.tree_util``'s, kept in step both ways.

``import spruce`` never imports JAX, and neither does registering a class.  The bridge connects
the two registries the moment JAX is imported (or at once, when it already is): a one-shot
``sys.meta_path`` finder reacts only to the top-level name ``jax``, lets the other finders find
it, and connects right after the ``jax`` package has executed; ``spruce.jax`` and ``spruce.nn``
connect at import as a backstop.

spruce -> JAX.  Every type registered through spruce (``spruce.tree.register_*``,
``register_static``, ``spruce.tree_util.Partial``, every ``spruce.Module`` class) is registered
with ``jax.tree_util`` once, with functions that defer to spruce's *current* registration of the
type: the same children, node data and key paths (spruce's key entries given to JAX as JAX's
classes, so ``jax.tree_util.keystr`` prints what ``spruce.tree.keystr`` prints).  JAX cannot
forget a registration, so after ``spruce.tree.unregister(T)`` JAX still sees ``T`` as a node,
and flattening or rebuilding one raises a TypeError that says so (rather than silently giving
it no children); registering ``T`` with spruce again makes it work on both sides.  A type
that JAX already had its own registration for keeps JAX's registration on the JAX side.

JAX -> spruce.  A type spruce does not know but JAX's default registry does (registered with
``jax.tree_util.register_pytree_node`` / ``_with_keys`` / ``register_dataclass`` /
``register_static``, by Equinox, optax, flax, chex, or ``jax.tree_util.Partial``) is a node in
spruce, flattened by JAX's own C++ one-level flatten and rebuilt by the unflatten function JAX
holds for it, so children, node data (hence the printed ``CustomNode(Name[aux], ...)``) and key
paths are JAX's; key entries come back as spruce's classes.  The engine asks the bridge once per
unknown type (``_registry.FOREIGN_LOOKUP``) and caches the answer; a JAX registration made later
clears spruce's cache (the bridge replaces JAX's Python-side registry dict,
``jax._src.tree_util._registry``, with a dict subclass that reports new entries), so a type
first seen as a leaf becomes a node.  Without that dict (another JAX layout), new JAX
registrations are seen only by types spruce has not classified yet.

Key entries: spruce's DictKey / SequenceKey / GetAttrKey / FlattenedIndexKey hash like JAX's and
compare equal to them from both sides (the bridge extends the ``__eq__`` of JAX's four classes to
accept spruce's entries; everything else compares as before).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Sequence

from ._tree import _keys, _registry
from ._tree._kinds import CUSTOM, MODE_DATACLASS_INIT, MODE_FUNCS
from ._tree._nodes import NodeInfo
from ._tree._text import qualified_name

_lock = threading.RLock()
_connected: list[bool] = [False]
# Types this bridge registered with JAX (their JAX-side functions defer to spruce's registry).
_in_jax: set[type] = set()
# Set when connected: JAX's modules and registry.
_jax: dict[str, Any] = {}

_MAX_KEYS = 1 << 16
_jax_key_of: dict[Any, Any] = {}  # spruce key entry -> JAX's entry of the same kind and field


def jax_fully_imported() -> bool:
    """True when ``jax`` is in ``sys.modules`` and has finished executing."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    spec = getattr(jax, "__spec__", None)
    return not getattr(spec, "_initializing", False) and hasattr(jax, "tree_util")


# ------------------------------------------------------------------------------ spruce -> JAX


def _unregistered(t: type, what: str) -> TypeError:
    return TypeError(
        f"cannot {what} a {qualified_name(t)} in jax.tree_util: its pytree registration was "
        "removed with spruce.tree.unregister, and JAX cannot forget a registration (it still "
        "treats the class as a node). Register the class with spruce.tree again to make it a "
        "node on both sides, or convert its instances before passing them to JAX."
    )


def _to_jax_key(k: Any) -> Any:
    try:
        out = _jax_key_of.get(k)
    except TypeError:  # an unhashable custom key entry: JAX gets it as it is
        return k
    if out is not None:
        return out
    jtu = _jax["jtu"]
    t = type(k)
    if t is _keys.DictKey:
        out = jtu.DictKey(k.key)
    elif t is _keys.GetAttrKey:
        out = jtu.GetAttrKey(k.name)
    elif t is _keys.SequenceKey and -(1 << 31) <= k.idx < (1 << 31):
        out = jtu.SequenceKey(k.idx)
    elif t is _keys.FlattenedIndexKey and -(1 << 31) <= k.key < (1 << 31):
        out = jtu.FlattenedIndexKey(k.key)
    else:
        return k
    if len(_jax_key_of) < _MAX_KEYS:
        _jax_key_of[k] = out
    return out


def _jax_functions(t: type) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """``(flatten_with_keys, unflatten, flatten)`` for JAX, deferring to spruce's entry of ``t``."""
    current = _registry.registered
    # The key list of the last node and its JAX version: a Module or dataclass gives the same
    # list object for every node (its fixed keys), converted once.  One tuple, replaced whole.
    last_keys: list[tuple[Any, Any]] = [(None, None)]

    def flatten(x: Any) -> Any:
        info = current(t)
        if info is None:
            raise _unregistered(t, "flatten")
        if info.mode == MODE_FUNCS and info.flatten is not None:
            return info.flatten(x)  # the registered function itself (JAX checks its result)
        return info.flatten_node(x)

    def flatten_with_keys(x: Any) -> Any:
        info = current(t)
        if info is None:
            raise _unregistered(t, "flatten")
        keys = info.fixed_keys
        fn = info.flatten
        if keys is not None and fn is not None and info.flatten_with_keys is None:
            children, aux = fn(x)  # a Module: its flatten and its fixed keys
            if len(children) != len(keys):
                children, keys, aux = info.flatten_node_with_keys(x)  # (raises, naming the class)
        else:
            children, keys, aux = info.flatten_node_with_keys(x)
        seen, jax_keys = last_keys[0]
        if seen is not keys:
            jax_keys = [_to_jax_key(k) for k in keys]
            last_keys[0] = (keys, jax_keys)
        return list(zip(jax_keys, children)), aux

    def unflatten(aux: Any, children: Any) -> Any:
        info = current(t)
        if info is None:
            raise _unregistered(t, "rebuild")
        if info.mode == MODE_FUNCS:
            fn = info.unflatten
            assert fn is not None
            return fn(aux, children if type(children) is tuple else tuple(children))
        return info.unflatten_node(aux, list(children))

    return flatten_with_keys, unflatten, flatten


def _register_in_jax(t: type) -> None:
    """Register ``t`` with jax.tree_util (once); the caller holds ``_lock``."""
    if t in _in_jax:
        return
    if t in _jax["entries"]:
        return  # JAX has its own registration of t (made before spruce's): it stays
    _in_jax.add(t)
    flatten_with_keys, unflatten, flatten = _jax_functions(t)
    try:
        _jax["jtu"].register_pytree_with_keys(t, flatten_with_keys, unflatten, flatten)
    except ValueError:  # registered with JAX in a way the check above did not see
        _in_jax.discard(t)


def _on_register(t: type) -> None:
    with _lock:
        _register_in_jax(t)


# ------------------------------------------------------------------------------ JAX -> spruce


def _is_namedtuple_type(t: type) -> bool:
    return issubclass(t, tuple) and hasattr(t, "_fields")


def _from_jax(t: type) -> NodeInfo | None:
    """How JAX flattens ``t`` (a type spruce has no registration for), or None for a leaf."""
    if t in _in_jax:
        return None  # spruce's own registration, unregistered since: a leaf in spruce
    reg = _jax["registry"]
    try:
        if not reg.is_node(t):
            return None
    except Exception:  # not something JAX can classify: a leaf
        return None
    entry = _jax["entries"].get(t)
    if entry is None and _is_namedtuple_type(t):
        return None  # JAX's built-in namedtuple handling: spruce has the same
    fields = _dataclass_fields(t, entry)
    if fields is not None:  # read and rebuilt as JAX does, by spruce's own (compiled) loops
        return NodeInfo(t, CUSTOM, MODE_DATACLASS_INIT, data_fields=fields[0], meta_fields=fields[1])
    native = _keys.native_key
    flatten_keys = reg.flatten_one_level_with_keys

    def flatten_with_keys(x: Any) -> tuple[list[tuple[Any, Any]], Any]:
        keyed, aux = flatten_keys(x)
        return [(native(k), c) for k, c in keyed], aux

    if entry is not None:
        unflatten = entry.from_iter
    else:
        unflatten = _rebuild_through_treedef(t)
    return NodeInfo(t, CUSTOM, MODE_FUNCS, reg.flatten_one_level, unflatten, flatten_with_keys)


_DATACLASS_UNFLATTEN_NAMES = (
    "register_dataclass.<locals>.unflatten_func",
    "_register_dataclass.<locals>.unflatten_func",
)


def _dataclass_fields(t: type, entry: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(data_fields, meta_fields)`` when ``entry`` is jax.tree_util.register_dataclass's
    registration of ``t`` (its unflatten function closes over them), else None.

    JAX flattens such a class in C++ by reading those attributes, and rebuilds it with
    ``t(**fields)``; spruce then does the same in its compiled loops instead of calling JAX's
    functions node by node.  Anything unexpected (another JAX layout) gives None: the generic
    path, through JAX's own functions.
    """
    fn: Any = getattr(entry, "from_iter", None)
    code = getattr(fn, "__code__", None)
    # jax 0.10 names it register_dataclass.<locals>.unflatten_func, jax 0.12 _register_dataclass.<locals>...
    if code is None or getattr(fn, "__qualname__", "") not in _DATACLASS_UNFLATTEN_NAMES:
        return None
    try:
        cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, fn.__closure__ or ())}
    except ValueError:  # an empty cell
        return None
    data, meta = cells.get("data_fields"), cells.get("meta_fields")
    if cells.get("nodetype") is not t or type(data) is not tuple or type(meta) is not tuple:
        return None
    if not all(type(n) is str for n in data + meta):
        return None
    return data, meta


def _rebuild_through_treedef(t: type) -> Callable[[Any, Any], Any]:
    """An unflatten for a type registered directly in JAX's C++ registry (no Python entry)."""
    jsrc = _jax["jsrc"]
    leaf = jsrc.tree_structure(0)

    def unflatten(aux: Any, children: Any) -> Any:
        ch = list(children)
        td = jsrc.PyTreeDef.from_node_data_and_children(_jax["registry"], (t, aux), [leaf] * len(ch))
        return td.unflatten(ch)

    return unflatten


class _ReportingRegistry(dict):  # type: ignore[type-arg]  # holds JAX's entries, whatever their type
    """JAX's Python-side registry dict, reporting each new entry to spruce's type cache."""

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        if key not in _in_jax:
            _registry.invalidate()


def _watch_jax_registry(jsrc: ModuleType) -> dict[Any, Any]:
    old = getattr(jsrc, "_registry", None)
    if type(old) is _ReportingRegistry:
        return old
    if type(old) is not dict:
        return old if isinstance(old, dict) else {}
    new = _ReportingRegistry(old)
    jsrc._registry = new  # type: ignore[attr-defined]  # JAX's own module attribute
    for k in list(old):  # an entry written to the old dict between the copy and the swap
        if k not in new:
            dict.__setitem__(new, k, old[k])
    return new


def _extend_jax_key_equality(jtu: ModuleType) -> None:
    pairs = (
        (jtu.DictKey, _keys.DictKey, "key", _keys.DICT_ENTRY),
        (jtu.SequenceKey, _keys.SequenceKey, "idx", _keys.SEQUENCE_ENTRY),
        (jtu.GetAttrKey, _keys.GetAttrKey, "name", _keys.ATTR_ENTRY),
        (jtu.FlattenedIndexKey, _keys.FlattenedIndexKey, "key", _keys.FLAT_INDEX_ENTRY),
    )
    for jax_cls, spruce_cls, field, kind in pairs:
        _keys.JAX_KEY_KINDS[jax_cls] = kind
        if getattr(jax_cls, "_spruce_equality", False):
            continue
        jax_eq = jax_cls.__eq__

        def __eq__(self: Any, other: Any, _eq: Any = jax_eq, _cls: Any = spruce_cls, _f: str = field) -> Any:
            if type(other) is _cls:
                return bool(getattr(self, _f) == getattr(other, _f))
            return _eq(self, other)

        try:
            jax_cls.__eq__ = __eq__
            jax_cls._spruce_equality = True
        except (AttributeError, TypeError):  # a JAX whose classes are immutable: one-sided
            pass


# ------------------------------------------------------------------------------ connecting


def _connect_locked() -> None:
    if _connected[0]:
        return
    import jax.tree_util as jtu
    from jax._src import tree_util as jsrc

    _jax["jtu"] = jtu
    _jax["jsrc"] = jsrc
    _jax["registry"] = jsrc.default_registry
    _extend_jax_key_equality(jtu)
    _jax["entries"] = _watch_jax_registry(jsrc)
    _connected[0] = True
    # The hooks go in before the snapshot of spruce's registry: a registration racing this is
    # either in the snapshot or reported through ON_REGISTER (which waits for the lock).
    _registry.FOREIGN_LOOKUP[0] = _from_jax
    _registry.ON_REGISTER[0] = _on_register
    _registry.invalidate()
    for t in _registry.registered_types():
        _register_in_jax(t)


def connect() -> None:
    """Connect spruce's registry with jax.tree_util now (imports JAX).  Idempotent."""
    import jax  # noqa: F401  (the point of this function)

    with _lock:
        _connect_locked()


class _JaxImportHook(importlib.abc.MetaPathFinder):
    """One-shot finder: when ``jax`` is first imported, connect after it has executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != "jax":
            return None
        _uninstall()
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        inner_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                inner_exec(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
            with _lock:
                _connect_locked()

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec  # a loader that cannot be wrapped: spruce.jax / spruce.nn connect instead
        return spec


_hook = _JaxImportHook()


def _uninstall() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


def install() -> None:
    """Connect now if JAX is imported, else install the import hook (never imports JAX)."""
    with _lock:
        if jax_fully_imported():
            _connect_locked()
        elif "jax" not in sys.modules and _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
