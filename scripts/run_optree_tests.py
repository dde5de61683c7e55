"""Run optree's own test suite against ``spruce.optree`` and count and classify the results.

The test files are optree's, not ours: they are never copied into this repository.  The script
reads optree's ``tests/`` directory from a clone of https://github.com/metaopt/optree (a working
tree or a bare git directory) at the tag pinned in the Makefile, into a temporary directory::

    git clone https://github.com/metaopt/optree /tmp/optree
    PYTHONPATH=src python scripts/run_optree_tests.py --optree /tmp/optree [--ref v0.20.0] \\
        [--files test_ops.py test_treespec.py ...] [-k EXPR] [--minutes 30] [-v]

(``--ref ''`` reads the working tree's files.)  Needs pytest; not part of ``make test``.  The
default files are optree's tests of its public surface (``DEFAULT_FILES``); ``concurrent/...``,
``integrations/...`` and ``test_shortcut.py`` run only when named in ``--files``.
``test_ops.py`` is the big one (about 57,000 cases, several minutes).

How the tests are run: each file runs in its own pytest process (``-q -p no:cacheprovider``, a
junit XML report to read the outcome of every case, ``--minutes`` as its time limit) in the
temporary directory, beside a conftest.py of ours (which does what optree's does: a fixed hash
seed for subprocesses, ``random.seed(0)``) and a pytest.ini with optree's warning filter (every
warning is an error).  The conftest puts a fake ``optree`` package in ``sys.modules``, so that
``import optree`` gives ``spruce.optree`` (the installed optree is never imported):

- each optree module maps to the spruce module of the same meaning (``MODULES``: ``optree`` ->
  ``spruce.optree``, ``optree.typing`` -> ``spruce.optree.typing``, ``optree.treespec.leaf`` ->
  ``spruce.optree.treespec_leaf`` ...); only public names are looked up there;
- optree internals that the tests' ``helpers.py`` and a few tests import (``optree._C``'s
  build constants and ``get_registry_size``, ``optree.registry.__GLOBAL_NAMESPACE`` and
  ``_NODETYPE_REGISTRY``, ``optree.ops.STANDARD_DICT_TYPES``, ``optree.utils``' helpers) are
  stand-ins written here (``STAND_INS``), counting spruce's own registrations; spruce itself
  fakes no optree internals;
- a name spruce does not have stays missing: using it raises ``AttributeError: ... (name not
  in spruce: optree.x.y)`` (a ``from optree.x import y`` gives a placeholder that raises so
  when used, so that one missing name does not stop a whole file from loading);
- the scripts that tests run in a fresh interpreter (``helpers.check_script_in_subprocess``)
  install the same fake package first (``patch_subprocess``).

Every failure is put in a class: a test listed in ``KNOWN`` (a deliberate difference, with where
it is documented, or an open one, with where it lives) is reported under its reason; the others
by their exception, message and failing line (``classify``: name not in spruce, message wording,
exception class, repr, C-extension internals, ...); the rest are printed as UNCLASSIFIED with the first
line of their message.  Tests of optree's own helpers (``NOT_APPLICABLE``) are run but counted
apart.  The last line is a summary a README can quote.  ``--target optree`` checks the harness
itself: the same run with the fake package bound to the installed optree (everything should pass).

Prints the counts and the classified failures; exits 0 whatever they are (it is a report).
"""

from __future__ import annotations

import argparse
import collections
import dis
import importlib
import importlib.util
import io
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import types
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from typing import Any

PINNED_REF = "v0.20.0"
DEFAULT_FILES = (
    "test_ops.py", "test_accessors.py", "test_treespec.py", "test_registry.py", "test_dataclasses.py",
    "test_typing.py", "test_prefix_errors.py", "test_functools.py", "test_utils.py",
)
MISSING = "name not in spruce"
_REAL = "_real_optree"  # where the installed optree's modules are moved for ``--target optree``

# optree module -> where its names are looked up, in order: "{T}.x" is the target package's
# module (spruce.optree's, or the real optree's for --target optree), "{T}:prefix_" the target's
# top-level names with that prefix (``optree.treespec.leaf`` -> ``treespec_leaf``).  A module that
# does not exist is passed over.
MODULES: dict[str, tuple[str, ...]] = {
    "optree": ("{T}",),
    "optree.accessors": ("{T}.accessors", "{T}._accessors"),
    "optree.dataclasses": ("{T}.dataclasses",),
    "optree.functools": ("{T}.functools",),
    "optree.typing": ("{T}.typing", "{T}._types"),
    "optree.treespec": ("{T}.treespec", "{T}:treespec_", "{T}._treespec"),
    "optree.ops": ("{T}.ops", "{T}._ops"),
    "optree.registry": ("{T}.registry", "{T}._registry"),
    "optree.pytree": ("{T}.pytree", "{T}:tree_", "{T}"),
    "optree.utils": ("{T}.utils",),
    "optree.version": ("{T}.version",),
    "optree._C": ("{T}._C",),
    "optree.integrations": ("{T}.integrations",),
    **{f"optree.integrations.{m}": (f"{{T}}.integrations.{m}",) for m in ("attrs", "jax", "numpy", "torch")},
}
# optree.pytree's renamed registration functions.
RENAMES = {"register_node": "register_pytree_node", "register_node_class": "register_pytree_node_class",
           "unregister_node": "unregister_pytree_node"}


# ----------------------------------------------------------------------------------------------
# Stand-ins for optree internals that the tests import.  Each is a function of no arguments that
# returns the value (called once, on first use).


def _engine_registrations() -> tuple[set[type], dict[str, set[type]]]:
    """The classes registered with spruce's engine now: the global ones and those per namespace."""
    from spruce._tree import _registry as engine

    return set(engine._registry), {ns: set(nodes) for ns, nodes in engine._ns_registry.items()}


_BASELINE: list[tuple[set[type], dict[str, set[type]]]] = []
_OPTREE_BUILTIN_NODES = 8  # optree's C registry at import: 7 built-in kinds and functools.partial


def _new_registrations() -> tuple[list[type], list[tuple[str, type]]]:
    """Registrations made since the fake package was installed (global; per namespace)."""
    now_global, now_ns = _engine_registrations()
    base_global, base_ns = _BASELINE[0] if _BASELINE else (now_global, now_ns)
    spaced = [(ns, t) for ns, nodes in now_ns.items() for t in nodes if t not in base_ns.get(ns, set())]
    return [t for t in now_global if t not in base_global], spaced


def get_registry_size(namespace: str | None = None) -> int:
    """Stand-in for ``optree._C.get_registry_size``: optree's initial count plus the classes
    registered with spruce since the start (in every namespace for None, else in the global one
    and ``namespace``)."""
    new_global, new_spaced = _new_registrations()
    ns = None if namespace is None else str(namespace)
    return _OPTREE_BUILTIN_NODES + len(new_global) + sum(1 for where, _ in new_spaced if ns is None or where == ns)


class NodeTypeRegistry(Mapping[Any, Any]):
    """Stand-in for ``optree.registry._NODETYPE_REGISTRY``: optree's ten initial keys, then a
    key per class registered with spruce since the start (``cls``, or ``(namespace, cls)``);
    values are ``spruce.optree.register_pytree_node.get``'s entries (the class alone if none)."""

    def _keys(self) -> list[Any]:
        import collections as c
        import functools

        new_global, new_spaced = _new_registrations()
        initial = [type(None), tuple, list, dict, c.namedtuple, c.OrderedDict, c.defaultdict, c.deque,
                   "StructSequence", functools.partial]
        return initial + new_global + list(new_spaced)

    def __getitem__(self, key: Any) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        ns, cls = key if isinstance(key, tuple) else ("", key)
        try:
            entry = sys.modules["optree"].register_pytree_node.get(cls, namespace=ns)
        except Exception:  # the stand-in must not fail where optree's dict would not
            entry = None
        return entry if entry is not None else types.SimpleNamespace(type=cls)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


def total_order_sorted(iterable: Any, /, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> list[Any]:
    """Stand-in for ``optree.utils.total_order_sorted``: sorted if the keys compare; else by
    (the key's class's qualified name, key); else in the given order.  ``key`` runs once each."""
    items = list(iterable)
    keyed = [(x if key is None else key(x), x) for x in items]
    try:
        return [x for _, x in sorted(keyed, key=lambda p: p[0], reverse=reverse)]
    except TypeError:
        pass
    try:
        by_type = sorted(keyed, key=lambda p: (f"{type(p[0]).__module__}.{type(p[0]).__qualname__}", p[0]), reverse=reverse)
        return [x for _, x in by_type]
    except TypeError:
        return items


def safe_zip(*iterables: Any) -> zip[Any]:
    """Stand-in for ``optree.utils.safe_zip``: ``zip`` that raises ValueError on unequal lengths."""
    seqs = [list(it) for it in iterables]
    if len({len(s) for s in seqs}) > 1:
        raise ValueError(f"length mismatch: {[len(s) for s in seqs]}")
    return zip(*seqs)


def unzip2(pairs: Any, /) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Stand-in for ``optree.utils.unzip2``: a sequence of pairs as two tuples."""
    both: list[tuple[Any, Any]] = [(a, b) for a, b in pairs]
    return tuple(a for a, _ in both), tuple(b for _, b in both)


def _is_dict_insertion_ordered(namespace: str = "", inherit_global_namespace: bool = True) -> bool:
    from spruce._tree._registry import is_dict_insertion_ordered

    return bool(is_dict_insertion_ordered(str(namespace), inherit_global_namespace=inherit_global_namespace))


def _global_namespace() -> Any:
    return importlib.import_module("spruce.optree._registry").GLOBAL_NAMESPACE


STAND_INS: dict[str, dict[str, Callable[[], Any]]] = {
    "optree._C": {
        "Py_DEBUG": lambda: hasattr(sys, "gettotalrefcount"),
        "Py_GIL_DISABLED": lambda: bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        **dict.fromkeys(("OPTREE_HAS_FROZENDICT", "OPTREE_HAS_SUBINTERPRETER_SUPPORT", "PYBIND11_HAS_NATIVE_ENUM",
                         "PYBIND11_HAS_SUBINTERPRETER_SUPPORT"), lambda: False),
        "get_registry_size": lambda: get_registry_size,
        "is_dict_insertion_ordered": lambda: _is_dict_insertion_ordered,
    },
    "optree.registry": {"__GLOBAL_NAMESPACE": _global_namespace, "_NODETYPE_REGISTRY": NodeTypeRegistry},
    "optree.ops": {"STANDARD_DICT_TYPES": lambda: frozenset({dict, collections.OrderedDict, collections.defaultdict})},
    "optree.utils": {"total_order_sorted": lambda: total_order_sorted, "safe_zip": lambda: safe_zip, "unzip2": lambda: unzip2},
}


# ----------------------------------------------------------------------------------------------
# The fake package.


class _MissingMeta(type):
    """The class of the placeholders that ``from optree.x import missing`` gives: any use raises."""

    _creating = False

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not _MissingMeta._creating:
            raise AttributeError(f"cannot subclass {bases[0]!r}")
        return super().__new__(mcs, name, bases, namespace)

    def _raise(cls, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"{cls.__qualname__!r} is not defined ({MISSING}: {cls.__qualname__})")

    __call__ = __getattr__ = __instancecheck__ = __subclasscheck__ = _raise

    def __repr__(cls) -> str:
        return f"<placeholder {cls.__qualname__} ({MISSING}: {cls.__qualname__})>"


def _placeholder(qualname: str) -> Any:
    _MissingMeta._creating = True
    try:
        cls = _MissingMeta(qualname.rpartition(".")[2], (), {"__qualname__": qualname})
    finally:
        _MissingMeta._creating = False
    return cls


_IMPORT_FROM = dis.opmap.get("IMPORT_FROM", -1)


def _from_import(frame: Any) -> bool:
    """Whether ``frame`` is running a ``from module import name`` that asks for the name."""
    try:
        return frame.f_code.co_code[frame.f_lasti] == _IMPORT_FROM
    except (AttributeError, IndexError):
        return False


class _Shim(types.ModuleType):
    """A fake optree module: each attribute is looked up in the modules of ``MODULES[name]``,
    then in ``STAND_INS[name]``; a missing one says so."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name)
        self._candidates = [c.replace("{T}", target) for c in MODULES.get(name, ())]
        self._check = target != "spruce.optree"  # --target optree: private names come from optree too

    def _modules(self) -> Iterator[tuple[types.ModuleType, str]]:
        for candidate in self._candidates:
            modname, _, prefix = candidate.partition(":")
            try:
                module = importlib.import_module(modname)
            except ModuleNotFoundError as e:
                if e.name and (modname == e.name or modname.startswith(e.name + ".")):
                    continue
                raise
            yield module, prefix

    def _find(self, attr: str) -> Any:
        if attr == "__all__":
            for module, prefix in self._modules():
                if hasattr(module, "__all__"):
                    return [n[len(prefix):] for n in module.__all__ if n.startswith(prefix)]
            raise AttributeError(attr)
        name = RENAMES.get(attr, attr) if self.__name__ == "optree.pytree" else attr
        if not name.startswith("_") or name == "__version__" or self._check:
            for module, prefix in self._modules():
                value = getattr(module, prefix + name, self)
                if value is not self and not (isinstance(value, types.ModuleType) and prefix):
                    return value
        if attr in STAND_INS.get(self.__name__, {}):
            return STAND_INS[self.__name__][attr]()
        raise AttributeError(attr)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr not in ("__all__", "__version__", "__GLOBAL_NAMESPACE"):
            raise AttributeError(attr)
        try:
            value = self._find(attr)
        except AttributeError:
            where = f"{self.__name__}.{attr}"
            if _from_import(sys._getframe(1)):
                value = _placeholder(where)
            else:
                raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r} ({MISSING}: {where})") from None
        setattr(self, attr, value)
        return value


def install_shim(target: str = "spruce.optree") -> None:
    """Put the fake ``optree`` package and its submodules in ``sys.modules``; ``target`` is
    "spruce.optree" or "optree" (the installed optree, moved aside first, to check the harness)."""
    if isinstance(sys.modules.get("optree"), _Shim):
        return
    if target == "optree":
        importlib.import_module("optree")
        for name in [n for n in sys.modules if n == "optree" or n.startswith("optree.")]:
            sys.modules[_REAL + name[len("optree"):]] = sys.modules.pop(name)
        target = _REAL
    else:
        for sub in ("", ".dataclasses", ".functools"):  # registrations made on import come first
            try:
                importlib.import_module(target + sub)
            except ModuleNotFoundError:
                pass
        try:
            _BASELINE[:] = [_engine_registrations()]
        except ImportError:
            pass
    shims = {name: _Shim(name, target) for name in MODULES}
    for name, shim in shims.items():
        shim.__path__ = []  # type: ignore[attr-defined]  # a package, so `import optree.x` works
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(shims[parent], child, shim)
        sys.modules[name] = shim


def _subprocess_bootstrap(paths: list[str], target: str) -> str:
    return (
        f"import sys; sys.path[:0] = {paths!r}; import run_optree_tests; "
        f"run_optree_tests.install_shim({target!r})\n"
    )


def patch_subprocess(paths: list[str], target: str) -> None:
    """Make the fresh interpreters that optree's tests start (``helpers.check_script_in_subprocess``
    runs ``python -c SCRIPT`` through ``subprocess.check_output``) install the fake package before
    a script that uses optree runs (they would import the real optree)."""
    original = subprocess.check_output
    boot = _subprocess_bootstrap(paths, target)

    def check_output(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(cmd, list) and cmd and cmd[0] == sys.executable and "-c" in cmd[:-1]:
            i = cmd.index("-c") + 1
            if "optree" in cmd[i]:
                cmd = [*cmd[:i], boot + cmd[i], *cmd[i + 1:]]
        return original(cmd, *args, **kwargs)

    subprocess.check_output = check_output  # type: ignore[assignment]


CONFTEST = '''
import os
import random
import sys

sys.path[:0] = {paths!r}
import run_optree_tests

# As optree's tests/conftest.py: fixed hash seed for subprocesses, fixed random seed.
os.environ["PYTHONHASHSEED"] = "0"
random.seed(0)
run_optree_tests.install_shim({target!r})
run_optree_tests.patch_subprocess({paths!r}, {target!r})
'''
PYTEST_INI = "[pytest]\nfilterwarnings =\n    always\n    error\n"


# ----------------------------------------------------------------------------------------------
# Classification.

# The classes of failures (besides MISSING, and the KNOWN reasons).
C_INTERNALS = "C-extension internals (refcounts, _C, sys.getrefcount, gc)"
KEPT_ALIVE = "object kept alive (a weakref that optree lets die)"
WORDING = "error message wording differs (same exception class)"
WARNING_WORDING = "warning message wording differs (same warning class)"
EXC_CLASS = "exception class differs"
NO_RAISE = "no exception where optree raises"
NO_WARN = "no warning where optree warns"
XPASS = "passes where optree's test expects a failure (strict xfail)"
DICT_MATCH = "dicts not matched by keys across dict types / key orders (optree: dict, OrderedDict, defaultdict)"
UNHASHABLE = "unhashable node data refused (spruce's rule: node data must hash and compare)"
ATTRIBUTE = "attribute missing on a spruce object"
REPR = "repr differs"
PICKLE_STATE = "optree's pickled state layout (a test of PyTreeSpec.__getstate__ / __setstate__ tuples)"
SIGNATURE = "arguments not taken (signature differs)"
SUBPROCESS = "script in a fresh interpreter fails"
COLLECTION = "file does not load"
UNCLASSIFIED = "UNCLASSIFIED"

# Tests that check optree's own helpers or build, not the library's behaviour: run, shown, and
# counted apart.  Test id (``file.py::test_name``, covering its parametrized cases; a trailing
# ``*`` makes it a prefix) -> why.
_STAND_IN_TESTED = "tests optree.utils' helper, for which the harness's stand-in runs (not spruce)"
NOT_APPLICABLE: dict[str, str] = {
    "test_utils.py::test_relpath_from_project_root": "optree._C's docstring (the C extension's build path)",
    "test_utils.py::test_total_order_sorted*": _STAND_IN_TESTED,
    "test_utils.py::test_safe_zip": _STAND_IN_TESTED,
    "test_utils.py::test_unzip2": _STAND_IN_TESTED,
}

# Failures that are understood: test id (as above) -> reason.  "deliberate" names the documented
# difference (and where it is documented); "open" names what still has to change, and where; a
# class name puts the test in that class (when its message does not show it).
_DOC = "spruce.optree's docstring, 'What differs from optree, on purpose'"
_NO_C_STACK = (
    f"deliberate: spruce's walks do not use the C stack, so a tree deeper than MAX_RECURSION_DEPTH raises no "
    f"RecursionError ({_DOC})"
)
KNOWN: dict[str, str] = {
    "test_ops.py::test_max_depth": _NO_C_STACK,
    "test_treespec.py::test_treespec_deep_walk_raises_recursion_error_not_segfault": _NO_C_STACK,
    # optree's C type caches and their atexit callbacks, counted from before `import optree`
    # (which the harness's bootstrap has done by then)
    "test_typing.py::test_type_caches_register_interpreter_cleanup": C_INTERNALS,
    "test_typing.py::test_type_cache_insert_failure_*": C_INTERNALS,
}


_C_SOURCE = re.compile(
    r"getrefcount|weakrefcount|getweakrefs|gc_collect|gc\.(get_referr|is_tracked)|_C\.|"
    r"__cxx_implementation__|__python_implementation__"
)
_RAISES = re.compile(r"pytest\.(raises|warns)\(")
_KEPT_ALIVE_SOURCE = re.compile(r"\b(wr|ref|weakref)\w*\(\) is None")
_REPR_SOURCE = re.compile(r"\brepr\(|\bstr\(|__repr__|__str__|\bpformat|\bformat\(|f['\"].*\{")
_SIGNATURE_MESSAGE = re.compile(
    r"^TypeError: .*(unexpected keyword argument|positional argument|takes \d+ positional|missing \d+ required|"
    r"takes no arguments|takes no keyword arguments)"
)
_ATTRIBUTE_MESSAGE = re.compile(
    r"^AttributeError: (?:'(\w+)' object|type object '(\w+)') has no attribute '(\w+)'|^AttributeError: (\w+)$"
)


def _match(test_id: str, table: dict[str, str]) -> str | None:
    for key, why in table.items():
        if test_id == key or test_id.startswith(key + "[") or (key.endswith("*") and test_id.startswith(key[:-1])):
            return why
    return None


def _failing_line(text: str, test_file: str) -> int | None:
    """The line of ``test_file`` where the failure was raised (innermost frame in that file)."""
    found = None
    for m in re.finditer(r"^(\S+?\.py):(\d+): in ", text, flags=re.MULTILINE):
        if m.group(1) == test_file:
            found = int(m.group(2))
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _raises_block(lines: list[str], lineno: int) -> str | None:
    """The ``with pytest.raises(...)`` (or ``pytest.warns``) statement, joined into one line, at
    line ``lineno`` or whose block holds it, if any."""
    if not 0 < lineno <= len(lines):
        return None
    start = None
    if lines[lineno - 1].strip().startswith("with") and _RAISES.search(lines[lineno - 1]):
        start = lineno - 1
    level = _indent(lines[lineno - 1])
    for i in range(lineno - 2, -1, -1) if start is None else ():
        stripped = lines[i].strip()
        if not stripped or stripped.startswith(("#", ")", "]", "}")) or _indent(lines[i]) >= level:
            continue
        if stripped.startswith("with") and _RAISES.search(stripped):
            start = i
            break
        if stripped.startswith(("def ", "class ", "async def ")):
            return None
        level = _indent(lines[i])
    if start is None:
        return None
    statement = [lines[start].strip()]
    for more in lines[start + 1 : start + 12]:
        if statement[-1].endswith(":"):
            break
        statement.append(more.strip())
    return " ".join(statement)


def _body(lines: list[str], function: str) -> str:
    """The source of test function ``function`` (empty if not found)."""
    for i, line in enumerate(lines):
        if line.startswith(f"def {function}("):
            end = next((j for j in range(i + 1, len(lines)) if lines[j][:1] not in ("", " ", "\t", ")")), len(lines))
            return "\n".join(lines[i:end])
    return ""


def classify(test_id: str, message: str, text: str, sources: dict[str, list[str]]) -> tuple[str, str]:
    """(class, detail) of a failure: its KNOWN reason, else by its message and failing line."""
    known = _match(test_id, KNOWN)
    if known is not None:
        return known, ""
    first = message.strip().splitlines()[0] if message.strip() else ""
    test = test_id.split("[")[0]
    test_file = test_id.split("::", 1)[0]
    lines = sources.get(test_file, [])
    lineno = _failing_line(text, test_file)
    source = lines[lineno - 1].strip() if lineno and 0 < lineno <= len(lines) else ""
    missing = re.search(MISSING + r": ([\w.]+)", message) or re.search(MISSING + r": ([\w.]+)", text)
    if missing and missing.group(1).startswith("optree._C."):
        return C_INTERNALS, missing.group(1)
    if _C_SOURCE.search(source) or "optree._C" in first:
        return C_INTERNALS, f"{test}: {source[:120]}"
    if missing:
        return MISSING, missing.group(1)
    if re.search(r"__(get|set)state__", _body(lines, test.split("::")[-1])):
        return PICKLE_STATE, f"{test}: {first[:120]}"
    if "Regex pattern did not match" in first:
        regex = re.search(r"Expected regex: (.*)", message)
        return WORDING, f"{test}: optree's {regex.group(1)[:150] if regex else '?'}"
    if "DID NOT RAISE" in first:
        return NO_RAISE, f"{test}: {first}"
    if first.startswith("[XPASS(strict)]"):
        return XPASS, f"{test}: {first[:150]}"
    if "DID NOT WARN" in first:
        return (WARNING_WORDING if "matching the regex" in first else NO_WARN), test
    if "must be hashable" in first:
        return UNHASHABLE, test
    if re.search(r"expected an? (dict|OrderedDict|defaultdict)\b.*, got an? (dict|OrderedDict|defaultdict)\b", first):
        return DICT_MATCH, f"{test}: {first[:150]}"
    raises = _raises_block(lines, lineno) if lineno else None
    got = first.split(":", 1)[0]
    if raises is not None and re.fullmatch(r"[\w.]+", got) and got not in ("AssertionError", "Failed"):
        expected = re.search(r"pytest\.(?:raises|warns)\(\s*(\(?[\w., ]+?\)?)\s*(,|\))", raises)
        expected_class = expected.group(1) if expected else "?"
        if "pytest.warns(" in raises and got == expected_class:
            return WARNING_WORDING, test
        return EXC_CLASS, f"{got} where optree raises {expected_class} ({test})"
    attribute = _ATTRIBUTE_MESSAGE.search(first)
    if attribute:
        attr = attribute.group(3) or attribute.group(4)
        in_source = re.search(r"([\w.]+)\." + attr + r"\b", source)
        owner = attribute.group(1) or attribute.group(2) or (in_source.group(1) if in_source else "?")
        return ATTRIBUTE, f"{owner}.{attr}"
    if _SIGNATURE_MESSAGE.search(first):
        return SIGNATURE, first[:160]
    if "CalledProcessError" in first or "check_script_in_subprocess" in source:
        output = [line[1:].strip() for line in text.splitlines() if line.startswith("E ") and line[1:].strip()]
        return SUBPROCESS, f"{test}: {output[-1][:150] if output else first[:150]}"
    if first.startswith(("AssertionError", "assert ")):
        if _KEPT_ALIVE_SOURCE.search(source):
            return KEPT_ALIVE, test
        if _REPR_SOURCE.search(source) or re.search(r"PyTree(Def|Spec)\(", first):
            return REPR, test
    return UNCLASSIFIED, f"{test}: {first[:200]}"


# ----------------------------------------------------------------------------------------------
# Running.


def _collection_detail(text: str) -> str:
    """Where a test file failed to load, and the error: "file.py:LINE: error line"."""
    frames = re.findall(r"^(\S+?\.py:\d+): in ", text, flags=re.MULTILINE)
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return f"{frames[-1] if frames else '?'}: {errors[-1] if errors else text.strip()[-200:]}"[:240]


def read_tests(source: pathlib.Path, ref: str, dest: pathlib.Path) -> None:
    """Write optree's ``tests/`` directory (at ``ref``; the working tree's for '') under ``dest``."""
    if not ref:
        shutil.copytree(source / "tests", dest / "tests")
        return
    git_dir = source / ".git" if (source / ".git").exists() else source
    data = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", "--format=tar", ref, "tests"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _test_id(case: ET.Element) -> str:
    file = case.get("file") or (case.get("classname", "").replace(".", "/") + ".py")
    depth = len(pathlib.PurePosixPath(file).with_suffix("").parts)
    classes = case.get("classname", "").split(".")[depth:]
    return "::".join([file, *classes, case.get("name", "")])


def read_junit(xml: pathlib.Path) -> list[tuple[str, str, str, str]]:
    """The cases of a junit XML report: (test id, outcome, message, traceback text)."""
    cases = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        outcome, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message, text = "failed", child.get("message", ""), child.text or ""
                break
            if child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        cases.append((_test_id(case), outcome, message, text))
    return cases


def run_file(root: pathlib.Path, name: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Run one test file in its own pytest process; its cases' outcomes and how the run ended."""
    xml = root / f"{name.replace('/', '_')}.xml"
    log = root / f"{name.replace('/', '_')}.log"
    cmd = [
        sys.executable, "-m", "pytest", name, "-q", "-p", "no:cacheprovider", "--rootdir", str(root / "tests"),
        "-o", "junit_family=xunit1", "-o", "junit_logging=no", "--junitxml", str(xml), "--tb=short", "--no-header",
    ]
    if args.k:
        cmd += ["-k", args.k]
    start = time.monotonic()
    status = ""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=root / "tests", env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=args.minutes * 60)
        except subprocess.TimeoutExpired:
            status = f"stopped after {args.minutes:g} minutes (the counts are of the cases run until then)"
            os.killpg(proc.pid, signal.SIGINT)  # pytest still writes the report on an interrupt
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.monotonic() - start
    cases = read_junit(xml) if xml.exists() else []
    tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:] or [""]
    if not xml.exists() or (proc.returncode not in (0, 1, 2, 5) and not status):
        status = status or f"pytest ended with code {proc.returncode}: {tail[0][:200]}"
    return {"cases": cases, "seconds": seconds, "status": status, "tail": tail[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--optree", type=pathlib.Path, required=True, help="a clone of optree's repository (work tree or bare)")
    parser.add_argument("--ref", default=PINNED_REF, help=f"git ref of the tests (default {PINNED_REF}; '' for the work tree)")
    parser.add_argument("--files", nargs="+", default=list(DEFAULT_FILES), help="test files under tests/ (default: %(default)s)")
    parser.add_argument("-k", default=None, help="pytest's -k expression")
    parser.add_argument("--minutes", type=float, default=30.0, help="time limit per file (default %(default)s)")
    parser.add_argument("--target", choices=("spruce.optree", "optree"), default="spruce.optree",
                        help="what the fake package binds to; 'optree' (the installed one) checks the harness")
    parser.add_argument("--workdir", type=pathlib.Path, help="run in this (new) directory and keep it (reports, logs)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every failure")
    args = parser.parse_args()

    scripts = str(pathlib.Path(__file__).resolve().parent)
    paths = [scripts]
    spec = importlib.util.find_spec("spruce")
    if spec is not None and spec.submodule_search_locations:
        paths.insert(0, str(pathlib.Path(next(iter(spec.submodule_search_locations))).parent))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env.pop("PYTEST_ADDOPTS", None)
    label = f"optree {args.ref or 'working tree'} tests"
    print(f"{label} against {args.target} ({paths[0] if args.target == 'spruce.optree' else 'the installed optree'})")

    check = subprocess.run(  # the fake package loads (else every file would fail the same way)
        [sys.executable, "-c", _subprocess_bootstrap(paths, args.target) + "import optree, optree.typing"],
        env=env, capture_output=True, text=True,
    )
    if check.returncode != 0:
        lines = check.stderr.strip().splitlines()
        print(f"{label}: not run: `import optree` through the fake package fails: {lines[-1] if lines else check.returncode}")
        return 0

    results: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="optree-tests-") as tmp:
        root = args.workdir.resolve() if args.workdir else pathlib.Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        read_tests(args.optree, args.ref, root)
        tests = root / "tests"
        (tests / "conftest.py").write_text(CONFTEST.format(paths=paths, target=args.target))
        (tests / "pytest.ini").write_text(PYTEST_INI)
        for name in (f if f.endswith(".py") else f + ".py" for f in args.files):
            if not (tests / name).exists():
                print(f"  {name}: not in optree's tests/ at {args.ref or 'the working tree'}")
                continue
            sources[name] = (tests / name).read_text().splitlines()
            results[name] = run_file(root, name, args, env)
            r = results[name]
            print(f"  {name}: ran in {r['seconds']:.0f} s: {r['tail']}" + (f"  [{r['status']}]" if r["status"] else ""))
    return report(label, results, sources, args.verbose)


def report(label: str, results: dict[str, dict[str, Any]], sources: dict[str, list[str]], verbose: bool) -> int:
    """Print the per-file and per-class counts, the unclassified failures and the summary line."""
    groups: dict[str, dict[str, list[str]]] = {}  # class -> detail -> test ids
    firsts: dict[str, str] = {}  # an UNCLASSIFIED group -> its first failure's test and message
    totals: collections.Counter[str] = collections.Counter()
    not_applicable: list[tuple[str, str, str]] = []
    print("\nper file (passed / failed / skipped / not applicable):")
    for name, r in results.items():
        counts: collections.Counter[str] = collections.Counter()
        for test_id, outcome, message, text in r["cases"]:
            if _match(test_id, NOT_APPLICABLE) is not None:
                not_applicable.append((test_id, outcome, _match(test_id, NOT_APPLICABLE) or ""))
                counts["not applicable"] += 1
                continue
            counts[outcome] += 1
            if outcome == "failed":
                if message == "collection failure":
                    cls, detail = COLLECTION, _collection_detail(text)
                else:
                    cls, detail = classify(test_id, message, text, sources)
                if cls == UNCLASSIFIED:  # one line per test and message start; the first in full
                    key = detail[: detail.find(": ") + 110]
                    firsts.setdefault(key, detail)
                    detail = key
                groups.setdefault(cls, {}).setdefault(detail, []).append(test_id)
        totals.update(counts)
        status = f"  [{r['status']}]" if r["status"] else ""
        print(
            f"  {name:24s} {counts['passed']:6d} / {counts['failed']:5d} / {counts['skipped']:4d} / "
            f"{counts['not applicable']:2d}  ({sum(counts.values())} cases, {r['seconds']:.0f} s){status}"
        )

    def size(cls: str) -> int:
        return sum(len(v) for v in groups.get(cls, {}).values())

    order = sorted(groups, key=lambda c: (c == UNCLASSIFIED, -size(c)))
    print(f"\nfailed, by class ({totals['failed']}):")
    for cls in order:
        print(f"  {size(cls):6d}  {cls}")
        if cls == UNCLASSIFIED:
            continue
        details = sorted(groups[cls].items(), key=lambda kv: -len(kv[1]))
        for detail, ids in details if verbose else details[:8]:
            if detail:
                print(f"          {len(ids):5d}  {detail}")
                print(f"                 e.g. {ids[0][:200]}")
            if verbose:
                for t in ids[1:]:
                    print(f"                      {t[:200]}")
        if not verbose and len(details) > 8:
            print(f"          ... {len(details) - 8} more (-v lists all)")
    if UNCLASSIFIED in groups:
        print(f"\nUNCLASSIFIED failures ({size(UNCLASSIFIED)}), by test and first line of the message:")
        for detail, ids in sorted(groups[UNCLASSIFIED].items(), key=lambda kv: (kv[1][0], -len(kv[1]))):
            print(f"  {len(ids):5d}  {firsts[detail]}")
            print(f"         e.g. {ids[0][:200]}")
    if not_applicable:
        print(f"\nnot applicable ({len(not_applicable)}, not counted):")
        for test_id, outcome, why in not_applicable:
            print(f"  {test_id} [{outcome}]: {why}")
    summary: collections.Counter[str] = collections.Counter()
    for cls in order:  # the KNOWN reasons are summed as "deliberate" / "open"
        summary[cls.split(":")[0] if cls.startswith(("deliberate", "open")) else cls.split(" (")[0]] += size(cls)
    classes = ", ".join(f"{n} {c}" for c, n in summary.items())
    total = totals["passed"] + totals["failed"] + totals["skipped"]
    print(
        f"\n{label}: {totals['passed']} passed, {totals['failed']} failed ({classes or 'none'}), "
        f"{totals['skipped']} skipped of {total}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
