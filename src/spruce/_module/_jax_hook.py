"""Registering Module classes with ``jax.tree_util`` without importing JAX.

``import spruce`` must not import JAX, yet every Module class has to be a pytree node for
``jax.jit`` / ``jax.grad`` the moment JAX can see one of its instances.  The rule:

- a Module class created while JAX is already imported is registered with jax.tree_util at
  once (by the metaclass);
- classes created before that are queued, and the queue is flushed right after ``jax`` finishes
  importing: by a one-shot import hook (a ``sys.meta_path`` finder that only reacts to the
  top-level name ``jax``, defers finding to the other finders, and runs the flush after the
  ``jax`` package has executed), and, as a backstop, by ``spruce.jax`` / ``spruce.nn`` at
  import.

So ``import spruce; class M(spruce.Module): ...; import jax; jax.grad(f)(M(...))`` works, and
JAX is never imported by spruce.Module itself.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Sequence

# (cls, data field names, flatten, unflatten) of classes waiting for JAX.
_Entry = tuple[type, tuple[str, ...], Callable[[Any], Any], Callable[[Any, Any], Any]]

_lock = threading.RLock()
_pending: list[_Entry] = []
_ready: list[bool] = [False]


def _jax_fully_imported() -> bool:
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    spec = getattr(jax, "__spec__", None)
    return not getattr(spec, "_initializing", False) and hasattr(jax, "tree_util")


def _register_in_jax(entry: _Entry) -> None:
    import jax.tree_util as jtu

    cls, names, flatten, unflatten = entry
    keys = tuple(jtu.GetAttrKey(n) for n in names)

    def flatten_with_keys(x: Any) -> tuple[list[tuple[Any, Any]], Any]:
        children, aux = flatten(x)
        return list(zip(keys, children)), aux

    jtu.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)


def register(
    cls: type, data_fields: tuple[str, ...], flatten: Callable[[Any], Any], unflatten: Callable[[Any, Any], Any]
) -> None:
    """Register ``cls`` with jax.tree_util now if JAX is imported, else when it is."""
    entry: _Entry = (cls, data_fields, flatten, unflatten)
    with _lock:
        if not _ready[0] and _jax_fully_imported():
            _flush_locked()
        if _ready[0]:
            _register_in_jax(entry)
        else:
            _pending.append(entry)


def _flush_locked() -> None:
    _ready[0] = True
    while _pending:
        _register_in_jax(_pending.pop(0))


def flush() -> None:
    """Register every queued Module class with jax.tree_util (imports JAX).  Idempotent."""
    import jax  # noqa: F401  (the point of this function)

    with _lock:
        _flush_locked()


class _JaxImportHook(importlib.abc.MetaPathFinder):
    """One-shot finder: when ``jax`` is first imported, run ``flush`` after it has executed."""

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
                _flush_locked()

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec  # a loader that cannot be wrapped: spruce.jax / spruce.nn flush instead
        return spec


_hook = _JaxImportHook()


def _uninstall() -> None:
    try:
        sys.meta_path.remove(_hook)
    except ValueError:
        pass


def install() -> None:
    """Install the import hook unless JAX is already imported (then flush at once)."""
    with _lock:
        if _jax_fully_imported():
            _flush_locked()
        elif "jax" not in sys.modules and _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
