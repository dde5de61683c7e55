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
first seen as a leaf becomes a node.

Key entries: spruce's DictKey / SequenceKey / GetAttrKey / FlattenedIndexKey hash like JAX's and
compare equal to them from both sides (the bridge extends the ``__eq__`` of JAX's four classes to
accept spruce's entries; everything else compares as before).

JAX internals.  Four things the bridge does are outside JAX's public API, each in one function
that says what it relies on: ``_swap_registry_dict`` (JAX's Python-side registry dict),
``_widen_key_eq`` (the ``__eq__`` of JAX's key classes), ``_hook_jax_import`` (the loader of the
``jax`` package) and ``_dataclass_fields_of_jax_registration`` (the closure of the unflatten
function ``jax.tree_util.register_dataclass`` stores).  They were checked with jax 0.10.2 and
0.12.0.1, and are checked again on the installed JAX each time the bridge connects, with the
methods of JAX's default registry that the JAX -> spruce direction calls (``_default_registry``;
they are also exported by ``jax.tree_util``).  A JAX that changed one gets a ``JaxBridgeError``
naming it, never a bridge that quietly does less: ``connect()`` raises it (so ``import
spruce.jax`` and ``import spruce.nn`` do), and the implicit connections (``import spruce`` with
JAX already imported, ``import jax`` after spruce), which must not break the import of either
library, issue it as a ``JaxBridgeWarning`` and leave the two registries unconnected.  One
exception: a changed ``register_dataclass`` closure only costs speed (such classes then go
through JAX's own functions, with the same results), so it gives a ``JaxBridgeWarning`` and the
bridge connects.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Callable, Sequence, cast

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

# The JAX releases every reach into JAX's internals below was checked with.
CHECKED_JAX_VERSIONS = ("0.10.2", "0.12.0.1")


class JaxBridgeError(RuntimeError):
    """A JAX internal that spruce's JAX bridge relies on is not what the bridge was checked with.

    The message names the internal (module and attribute), what the bridge expects of it, what
    the installed JAX has instead, and what would go wrong without it.  Raised by ``connect()``
    (so by ``import spruce.jax`` and ``import spruce.nn``); the implicit connections
    (``import spruce``, ``import jax``) issue the same text as a :class:`JaxBridgeWarning`.
    """


class JaxBridgeWarning(RuntimeWarning):
    """spruce's JAX bridge could not use a JAX internal; the message says which, and what is lost."""


def _jax_version() -> str:
    return str(getattr(sys.modules.get("jax"), "__version__", "(unknown version)"))


def _changed(internal: str, found: str, loss: str) -> str:
    """The text of a JaxBridgeError: ``internal`` is what the bridge expects, ``found`` what the
    installed JAX has, ``loss`` what goes wrong without it."""
    return (
        f"spruce's JAX bridge relies on {internal} (checked with jax "
        f"{' and '.join(CHECKED_JAX_VERSIONS)}), but the installed jax {_jax_version()} has "
        f"{found}. {loss} Use a JAX version spruce was checked with, or a spruce release that "
        "supports this one."
    )


def jax_fully_imported() -> bool:
    """True when ``jax`` is in ``sys.modules`` and has finished executing.

    Reads ``jax.__spec__._initializing`` (set by Python's import system while a module runs) and
    the ``jax.tree_util`` attribute, which ``jax/__init__.py`` binds (jax 0.10.2, 0.12.0.1).
    """
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
    if entry is None and _registry.is_namedtuple_type(t):
        return None  # JAX's built-in namedtuple handling: spruce has the same
    fields = _dataclass_fields_of_jax_registration(t, entry, _jax["dataclass_code"])
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


@dataclasses.dataclass
class _JaxDataclassProbe:
    """Registered with ``jax.tree_util.register_dataclass`` (data field ``x``, meta field ``tag``)
    the first time the bridge connects, to check on the installed JAX where such a registration
    goes (``_swap_registry_dict``) and what JAX stores for it (``_learn_dataclass_unflatten``).
    Never instantiated outside those checks."""

    x: Any
    tag: Any


def _dataclass_fields_of_jax_registration(
    t: type, entry: Any, code: Any
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(data_fields, meta_fields)`` when ``entry``, JAX's registry entry of ``t``, was made by
    ``jax.tree_util.register_dataclass``, else None.

    ``code`` is the code object of the unflatten function register_dataclass stores, learnt by
    ``_learn_dataclass_unflatten`` when the bridge connected (None when that check failed: then
    the answer is always None).  For such a class spruce flattens and rebuilds ``t`` as JAX does
    (the data fields' values as children, the tuple of the meta fields' values as node data,
    ``t(**fields)`` to rebuild), in its own compiled loops instead of calling JAX's functions
    node by node.

    JAX internals relied on (checked with jax 0.10.2 and 0.12.0.1): ``register_dataclass`` stores
    ``_RegistryEntry(flatten_func, unflatten_func)`` in ``jax._src.tree_util._registry``, whose
    ``from_iter`` is a closure (``register_dataclass.<locals>.unflatten_func`` in 0.10.2,
    ``_register_dataclass.<locals>.unflatten_func`` in 0.12.0.1; one code object for every
    registration) over the free variables ``nodetype`` (the class), ``data_fields`` and
    ``meta_fields`` (tuples of str).  A function with another code object is not
    register_dataclass's and gives None; so does a closure of that code holding something else.
    If JAX changes this, the probe check at connect fails and warns, ``code`` is None, and such
    classes take the generic path through JAX's own functions: the same results, slower.
    """
    fn: Any = getattr(entry, "from_iter", None)
    if code is None or getattr(fn, "__code__", None) is not code:
        return None
    try:
        cells = {n: cell.cell_contents for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())}
    except ValueError:  # an empty cell
        return None
    data, meta = cells.get("data_fields"), cells.get("meta_fields")
    if cells.get("nodetype") is not t or type(data) is not tuple or type(meta) is not tuple:
        return None
    if not all(type(n) is str for n in data + meta):
        return None
    return data, meta


def _learn_dataclass_unflatten(entries: dict[Any, Any], registry: Any) -> Any:
    """The code object of the unflatten function ``jax.tree_util.register_dataclass`` stores,
    read from the registration of ``_JaxDataclassProbe`` (made by ``_swap_registry_dict``) and
    checked there: its closure names the probe's fields, JAX's C++ one-level flatten gives what
    spruce's fast path gives (children ``[x]`` keyed ``GetAttrKey('x')``, node data ``(tag,)``)
    and the function rebuilds through ``__init__``.  None, with a JaxBridgeWarning, when any of
    this differs: ``_dataclass_fields_of_jax_registration`` then never applies."""
    entry = dict.get(entries, _JaxDataclassProbe)
    fn: Any = getattr(entry, "from_iter", None)
    code = getattr(fn, "__code__", None)
    found = f"the register_dataclass entry {entry!r}"
    if entry is None:
        found = "no entry for a register_dataclass class"
    try:
        fields = _dataclass_fields_of_jax_registration(_JaxDataclassProbe, entry, code)
        ok = code is not None and fields == (("x",), ("tag",))
        if ok:
            probe = _JaxDataclassProbe(1.5, "t")
            children, aux = registry.flatten_one_level(probe)
            keyed, keyed_aux = registry.flatten_one_level_with_keys(probe)
            keys = [(_keys.native_key(k), c) for k, c in keyed]
            rebuilt = fn(("u",), [2.5])
            ok = list(children) == [1.5] and aux == keyed_aux == ("t",)
            ok = ok and keys == [(_keys.GetAttrKey("x"), 1.5)]
            ok = ok and type(rebuilt) is _JaxDataclassProbe and (rebuilt.x, rebuilt.tag) == (2.5, "u")
            if not ok:
                found = "a register_dataclass node that flattens to "
                found += f"{list(children)!r}, {aux!r} and {keys!r}"
    except Exception as e:  # any failure of the check means: do not take the fast path
        ok, found = False, f"a register_dataclass registration whose check raised {e!r}"
    if ok:
        return code
    warnings.warn(
        _changed(
            "jax.tree_util.register_dataclass storing in jax._src.tree_util._registry an unflatten "
            "closure over nodetype, data_fields and meta_fields, with JAX's flatten giving the data "
            "fields as children and the meta fields' values as node data",
            found,
            "Classes registered with jax.tree_util.register_dataclass stay nodes in spruce, "
            "flattened and rebuilt through JAX's own functions (the same results, slower).",
        ),
        JaxBridgeWarning,
        stacklevel=2,
    )
    return None


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


def _default_registry(jsrc: ModuleType) -> Any:
    """JAX's default pytree registry, checked for what the JAX -> spruce direction calls.

    Relies on (jax 0.10.2, 0.12.0.1; also exported as ``jax.tree_util.default_registry`` and
    ``jax.tree_util.PyTreeDef``): ``jax._src.tree_util.default_registry`` with ``is_node(type)``,
    ``flatten_one_level(x) -> (children, aux)`` and ``flatten_one_level_with_keys(x) ->
    (key/child pairs, aux)``, and ``PyTreeDef.from_node_data_and_children`` and ``tree_structure``
    of ``jax._src.tree_util`` (for classes registered in JAX's C++ registry only).
    If one is missing: JaxBridgeError (JAX-registered classes would otherwise be leaves).
    """
    reg = getattr(jsrc, "default_registry", None)
    missing = [
        f"default_registry.{m}"
        for m in ("is_node", "flatten_one_level", "flatten_one_level_with_keys")
        if not callable(getattr(reg, m, None))
    ]
    if not callable(getattr(getattr(jsrc, "PyTreeDef", None), "from_node_data_and_children", None)):
        missing.append("PyTreeDef.from_node_data_and_children")
    if not callable(getattr(jsrc, "tree_structure", None)):
        missing.append("tree_structure")
    if missing:
        raise JaxBridgeError(
            _changed(
                "jax._src.tree_util.default_registry (is_node, flatten_one_level, "
                "flatten_one_level_with_keys), PyTreeDef.from_node_data_and_children and tree_structure",
                f"no {', '.join(missing)}",
                "Without them spruce cannot flatten classes registered only with JAX.",
            )
        )
    return reg


_REGISTRY_DICT = (
    "jax._src.tree_util._registry, a dict from each type registered through jax.tree_util to an "
    "entry with a from_iter(aux, children) function, written by every registration function"
)
_REGISTRY_LOSS = (
    "Without it, a class registered with jax.tree_util after spruce first met it would stay a "
    "leaf in spruce."
)


def _swap_registry_dict(jsrc: ModuleType, register_dataclass: Callable[..., Any]) -> dict[Any, Any]:
    """Put a ``_ReportingRegistry`` holding the same entries in place of JAX's Python-side
    registry dict, so that every later JAX registration clears spruce's type cache; return it.
    Idempotent.

    JAX internals relied on (checked with jax 0.10.2 and 0.12.0.1):
    - ``jax._src.tree_util._registry`` is a plain ``dict`` from every type registered through
      ``jax.tree_util`` (and tuple, list, dict, NoneType) to a ``_RegistryEntry(to_iter,
      from_iter)`` namedtuple; the bridge reads ``from_iter(aux, children)``, the unflatten;
    - JAX's registration functions store ``_registry[nodetype] = entry`` through that module
      global, so a dict put in its place receives every later registration.  Checked here by
      registering ``_JaxDataclassProbe`` with ``register_dataclass`` and finding its entry.
    The bridge uses the dict to notice a JAX registration made after spruce classified the type
    as a leaf, to rebuild JAX-registered classes with JAX's own unflatten, and to leave alone a
    class JAX registered before spruce did.
    Raises JaxBridgeError when the dict is missing, is not a plain dict of such entries, or does
    not receive the probe's registration.
    """
    current: Any = getattr(jsrc, "_registry", None)
    if type(current) is not _ReportingRegistry:
        if type(current) is not dict:
            found = "no such attribute" if current is None else f"a {type(current).__qualname__} there"
            raise JaxBridgeError(_changed(_REGISTRY_DICT, found, _REGISTRY_LOSS))
        old: dict[Any, Any] = current
        bad = [t for t, e in list(old.items()) if not callable(getattr(e, "from_iter", None))]
        if bad or tuple not in old:
            found = f"entries without from_iter (for {bad[:3]!r})" if bad else "no entry for tuple"
            raise JaxBridgeError(_changed(_REGISTRY_DICT, found, _REGISTRY_LOSS))
        current = _ReportingRegistry(old)
        jsrc._registry = current  # type: ignore[attr-defined]  # JAX's own module attribute
        for k in list(old):  # an entry written to the old dict between the copy and the swap
            if k not in current:
                dict.__setitem__(current, k, old[k])
    refused: ValueError | None = None
    if _JaxDataclassProbe not in current:
        try:
            register_dataclass(_JaxDataclassProbe, data_fields=["x"], meta_fields=["tag"])
        except ValueError as e:  # in JAX's C++ registry since an earlier connect attempt: see below
            refused = e
    if _JaxDataclassProbe not in current or getattr(jsrc, "_registry", None) is not current:
        found = "a register_dataclass that did not store its entry in that dict"
        if refused is not None:
            found += f" (registering a probe class raised {refused!r})"
        raise JaxBridgeError(_changed(_REGISTRY_DICT, found, _REGISTRY_LOSS))
    return cast("dict[Any, Any]", current)


# JAX's key entry classes (names in jax.tree_util), spruce's class of the same kind, the field
# both hold, the kind, a value and another value of that field (for the check).
_KEY_CLASSES: tuple[tuple[str, Any, str, int, Any, Any], ...] = (
    ("DictKey", _keys.DictKey, "key", _keys.DICT_ENTRY, "a", "b"),
    ("SequenceKey", _keys.SequenceKey, "idx", _keys.SEQUENCE_ENTRY, 5, 6),
    ("GetAttrKey", _keys.GetAttrKey, "name", _keys.ATTR_ENTRY, "w", "v"),
    ("FlattenedIndexKey", _keys.FlattenedIndexKey, "key", _keys.FLAT_INDEX_ENTRY, 2, 3),
)
_KEY_LOSS = (
    "Without it, key paths from JAX and from spruce would compare equal one way only, or be "
    "equal with different hashes, and dicts and sets mixing them would be wrong."
)


def _widen_key_eq(jtu: ModuleType) -> None:
    """Make JAX's four key entry classes compare equal to spruce's entry of the same kind and
    field, and record them in ``_keys.JAX_KEY_KINDS`` (spruce's side of the same equality).
    Idempotent.

    JAX internals relied on (checked with jax 0.10.2 and 0.12.0.1):
    - ``jax.tree_util.DictKey``, ``SequenceKey``, ``GetAttrKey``, ``FlattenedIndexKey`` are
      classes (nanobind classes of ``jaxlib._jax.pytree``) built from one value, read back as
      ``.key``, ``.idx``, ``.name``, ``.key``;
    - they hash as ``spruce._tree._keys`` does: the field's hash for DictKey and GetAttrKey, the
      index plus 1 (SequenceKey) or plus 42 (FlattenedIndexKey);
    - their ``__eq__`` returns False, not NotImplemented, for an object of another class, so
      Python never asks spruce's ``__eq__`` for ``jax_entry == spruce_entry``: the class
      attribute ``__eq__`` is replaced (nanobind classes accept it) by one that accepts
      spruce's entry of the same kind and calls JAX's own ``__eq__`` for everything else.
    Checked on one entry of each class, both ways, after the change.  Raises JaxBridgeError
    when a class is missing, holds another field, hashes differently, refuses the new
    ``__eq__``, or still compares unequal.
    """
    for name, spruce_cls, field, kind, value, other in _KEY_CLASSES:
        jax_cls: Any = getattr(jtu, name, None)
        internal = (
            f"jax.tree_util.{name}, a class whose {name}({value!r}) holds .{field} == {value!r}, "
            f"hashes as spruce's {name}({value!r}) and accepts a new __eq__"
        )
        try:
            jax_entry = jax_cls(value)
            held = getattr(jax_entry, field)
        except Exception as e:  # missing, another constructor or another field name
            found = f"{jax_cls!r}, for which that raised {e!r}"
            raise JaxBridgeError(_changed(internal, found, _KEY_LOSS)) from e
        spruce_entry = spruce_cls(value)
        if held != value or hash(jax_entry) != hash(spruce_entry):
            found = f"a {name}({value!r}) with .{field} == {held!r} and hash {hash(jax_entry)}"
            found += f" (spruce's: {hash(spruce_entry)})"
            raise JaxBridgeError(_changed(internal, found, _KEY_LOSS))
        added = jax_cls not in _keys.JAX_KEY_KINDS
        _keys.JAX_KEY_KINDS[jax_cls] = kind
        try:
            if not getattr(jax_cls, "_spruce_equality", False):
                jax_eq = jax_cls.__eq__

                def __eq__(
                    self: Any, other: Any, _eq: Any = jax_eq, _cls: Any = spruce_cls, _f: str = field
                ) -> Any:
                    if type(other) is _cls:
                        return bool(getattr(self, _f) == getattr(other, _f))
                    return _eq(self, other)

                try:
                    jax_cls.__eq__ = __eq__
                    jax_cls._spruce_equality = True
                except (AttributeError, TypeError) as e:  # an immutable class
                    found = f"a class that refuses it ({e!r})"
                    raise JaxBridgeError(_changed(internal, found, _KEY_LOSS)) from e
            unequal = spruce_cls(other)
            both_ways = jax_entry == spruce_entry and spruce_entry == jax_entry
            if not both_ways or jax_entry != spruce_entry:
                raise JaxBridgeError(_changed(internal, "entries that still compare unequal", _KEY_LOSS))
            if jax_entry == unequal or unequal == jax_entry:
                raise JaxBridgeError(_changed(internal, f"entries equal to {unequal!r}", _KEY_LOSS))
        except JaxBridgeError:
            if added:
                del _keys.JAX_KEY_KINDS[jax_cls]
            raise


# ------------------------------------------------------------------------------ connecting


def _connect_locked() -> None:
    """Check the JAX internals the bridge relies on, then connect the two registries; the caller
    holds ``_lock``.  Raises JaxBridgeError when one has changed: the registries stay unconnected
    (JAX's key classes may already compare equal to spruce's, which is harmless)."""
    if _connected[0]:
        return
    import jax.tree_util as jtu

    try:
        from jax._src import tree_util as jsrc
    except ImportError as e:
        raise JaxBridgeError(
            _changed("the module jax._src.tree_util", f"none ({e})", "Without it the bridge cannot connect.")
        ) from e
    registry = _default_registry(jsrc)
    _widen_key_eq(jtu)
    entries = _swap_registry_dict(jsrc, jtu.register_dataclass)
    _jax["dataclass_code"] = _learn_dataclass_unflatten(entries, registry)
    _jax["jtu"] = jtu
    _jax["jsrc"] = jsrc
    _jax["registry"] = registry
    _jax["entries"] = entries
    _connected[0] = True
    # The hooks go in before the snapshot of spruce's registry: a registration racing this is
    # either in the snapshot or reported through ON_REGISTER (which waits for the lock).
    _registry.FOREIGN_LOOKUP[0] = _from_jax
    _registry.ON_REGISTER[0] = _on_register
    _registry.invalidate()
    for t in _registry.registered_types():
        _register_in_jax(t)


def _connect_or_warn() -> None:
    """Connect, for the implicit connections (``import spruce``, ``import jax``), which must not
    fail the import: a JaxBridgeError becomes a JaxBridgeWarning, and the bridge stays
    unconnected (``connect()``, hence ``import spruce.jax`` / ``spruce.nn``, raises it)."""
    with _lock:
        try:
            _connect_locked()
        except JaxBridgeError as e:
            warnings.warn(
                f"{e} spruce's pytree registry is not connected with jax.tree_util; "
                "importing spruce.jax or spruce.nn raises this error.",
                JaxBridgeWarning,
                stacklevel=3,
            )


def connect() -> None:
    """Connect spruce's registry with jax.tree_util now (imports JAX).  Idempotent.

    Raises JaxBridgeError when a JAX internal the bridge relies on has changed (see the module
    docstring); nothing is connected then.
    """
    import jax  # noqa: F401  (the point of this function)

    with _lock:
        _connect_locked()


def _hook_jax_import(spec: Any) -> bool:
    """Make the import of ``jax`` that ``spec`` describes connect the bridge right after the
    ``jax`` package has executed; False when its loader cannot be wrapped.

    Relies on Python's import protocol and on how JAX is installed (checked with jax 0.10.2 and
    0.12.0.1, pip-installed: a ``SourceFileLoader``): the ``jax`` package is loaded by a loader
    with ``exec_module(module)`` that accepts an instance attribute of that name (the wrapper,
    which removes itself after the call, so the class's method is back); and once
    ``jax/__init__.py`` has run, ``jax.tree_util`` and ``jax._src.tree_util`` import (connect
    imports them).  If the loader cannot be wrapped, the caller warns (JaxBridgeWarning): failing
    would break ``import jax``, and spruce.jax / spruce.nn still connect when imported.
    """
    loader = spec.loader
    inner_exec = getattr(loader, "exec_module", None)
    if inner_exec is None:
        return False

    def exec_module(module: ModuleType) -> None:
        try:
            inner_exec(module)
        finally:
            try:
                del loader.exec_module  # back to the class's method
            except AttributeError:
                pass
        _connect_or_warn()

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):
        return False
    return True


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
        if spec is not None and not _hook_jax_import(spec):
            warnings.warn(
                f"spruce could not attach to the import of jax (its loader {spec.loader!r} has no "
                "exec_module that can be wrapped; checked with jax "
                f"{' and '.join(CHECKED_JAX_VERSIONS)}, whose loader is a SourceFileLoader): "
                "spruce's pytree registrations reach jax.tree_util only once spruce.jax or "
                "spruce.nn is imported.",
                JaxBridgeWarning,
                stacklevel=2,
            )
        return spec


_hook = _JaxImportHook()


def _uninstall() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


def install() -> None:
    """Connect now if JAX is imported (a changed JAX internal gives a JaxBridgeWarning then),
    else install the import hook (never imports JAX)."""
    with _lock:
        if jax_fully_imported():
            _connect_or_warn()
        elif "jax" not in sys.modules and _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
