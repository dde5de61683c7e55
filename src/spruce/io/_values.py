"""Plain data in JSON, and classes by name, for the structure metadata.

Values (non-array leaves, dict keys, static fields) are stored only when they are *data*:
``None``, ``bool``, ``int``, ``float``, ``str`` (exact types), lists, tuples and dicts of data,
and NumPy dtypes.  JSON has no tuple, no non-finite float and only str object keys, so those
are tagged: ``{"$tuple": [...]}``, ``{"$float": "nan"}``, ``{"$dict": [[key, value], ...]}``,
``{"$dtype": "bfloat16"}``.  Ints of up to ``PLAIN_INT_BITS`` bits are JSON numbers; bigger ones
are ``{"$int": "0x..."}`` (``hex(x)``): Python limits int <-> decimal str conversions (4300
digits by default, at least 640 whatever the setting), hexadecimal is not limited, so ints of
any size are stored and every Python reads them back.  Functions and other objects are never
stored: a checkpoint holds data, never code.

Classes (namedtuples, struct sequences, dataclass nodes such as spruce Modules) are stored as
``"module:qualname"`` and looked up on load under these rules: the module must already be
imported, or belong to a top-level package that is (``spruce.nn`` once ``spruce`` is);
qualname parts are identifiers, none of them ``<locals>`` or a dunder; nothing is called while
resolving.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from typing import Any, Final

import numpy as np

from ._dtypes import NPZ_NAMES, dtype_of, name_of

MAX_VALUE_DEPTH: Final = 64
# 2**2048 has 617 decimal digits, below the smallest int-str limit Python allows (640).
PLAIN_INT_BITS: Final = 2048
_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX_INT: Final = re.compile(r"-?0x[0-9a-f]+")


class NotData(Exception):
    """Raised by encode_value for a value that is not plain data.

    Attributes:
      what: the value, described without its repr (``'the function relu (custom_jvp)'``,
        ``'a mypkg.Thing'``).
      why: why it is refused (``'code, not data'``).
    """

    def __init__(self, what: str, why: str) -> None:
        self.what = what
        self.why = why
        super().__init__(f"{what} is {why}")


def _type_name(x: Any) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def describe_code(x: Any) -> str:
    """A callable described by its name and type, never its repr (which may be long and end
    in a memory address): ``'the function relu (custom_jvp)'``, ``'the class Linear'``."""
    if isinstance(x, type):
        return f"the class {x.__qualname__}"
    name = getattr(x, "__qualname__", None)
    if not isinstance(name, str):
        name = getattr(x, "__name__", None)
    kind = type(x).__name__
    if not isinstance(name, str) or not name:
        return f"a callable {kind} object"
    if len(name) > 80:
        name = name[:77] + "..."
    return f"the function {name}" if kind == "function" else f"the function {name} ({kind})"


# Builtin types whose instances are data, even where a checkpoint cannot hold them (complex,
# bytes, sets): ``is_code`` is False for them, so ``save(..., skip_code=True)`` still refuses them.
_DATA_TYPES: Final = (
    bool, int, float, complex, str, bytes, bytearray, memoryview, type(None), list, tuple, dict,
    set, frozenset, range, slice, np.dtype, np.ndarray, np.generic,
)


def is_code(x: Any) -> bool:
    """True for a leaf that is code or an object rather than data: any callable that is not an
    array (a function, an activation such as ``jax.nn.relu``, a class, a bound method, a
    ``functools.partial``), or an object that is neither array-like (a ``shape`` and a
    ``dtype``, or ``__array__``) nor an instance of a builtin data type (numbers, str, bytes,
    containers, ``None``, NumPy dtypes).  What ``save(..., skip_code=True)`` leaves out.

    >>> import math
    >>> is_code(math.sqrt), is_code(object()), is_code(dict), is_code(1j), is_code(b'x')
    (True, True, True, False, False)
    """
    if isinstance(x, type):
        return True
    if hasattr(x, "__array__") or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return False
    return callable(x) or not isinstance(x, _DATA_TYPES)


def describe_leaf(x: Any) -> str:
    """A leaf for messages, without its repr: ``describe_code`` for a callable, else its type
    (``'a mypkg.Thing'``)."""
    if callable(x):
        return describe_code(x)
    name = _type_name(x)
    return f"{'an' if name[:1] in 'aeiouAEIOU' else 'a'} {name}"


def encode_value(x: Any, depth: int = 0) -> Any:
    """``x`` as JSON (see the module docstring).

    Raises:
      NotData: ``x`` (or something inside it) is not plain data, or is nested too deeply.
    """
    if depth > MAX_VALUE_DEPTH:
        raise NotData("a value", f"nested more than {MAX_VALUE_DEPTH} levels deep (or a cycle)")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if x.bit_length() <= PLAIN_INT_BITS else {"$int": hex(x)}
    if t is float:
        if math.isfinite(x):
            return x
        return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if t is list:
        return [encode_value(v, depth + 1) for v in x]
    if t is tuple:
        return {"$tuple": [encode_value(v, depth + 1) for v in x]}
    if t is dict:
        return {"$dict": [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in x.items()]}
    if isinstance(x, np.dtype):
        name = name_of(x, NPZ_NAMES)
        if name is not None:
            return {"$dtype": name}
        raise NotData(f"the NumPy dtype {x}", "not one spruce.io stores")
    if callable(x):
        raise NotData(describe_code(x), "code, not data; checkpoints hold only data")
    raise NotData(f"a {_type_name(x)}", "not plain data (JSON-safe: None, bool, int, float, str, list, tuple, dict)")


def decode_value(j: Any, depth: int = 0) -> Any:
    """The inverse of encode_value.

    Raises:
      ValueError: ``j`` is not something encode_value writes.
    """
    if depth > MAX_VALUE_DEPTH:
        raise ValueError(f"a value nested more than {MAX_VALUE_DEPTH} levels deep")
    t = type(j)
    if j is None or t is bool or t is int or t is str or t is float:
        return j
    if t is list:
        return [decode_value(v, depth + 1) for v in j]
    if t is dict and len(j) == 1:
        (tag, body), = j.items()
        if tag == "$tuple" and type(body) is list:
            return tuple([decode_value(v, depth + 1) for v in body])
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$int" and type(body) is str and _HEX_INT.fullmatch(body):
            return int(body, 16)
        if tag == "$dict" and type(body) is list:
            out: dict[Any, Any] = {}
            for item in body:
                if type(item) is not list or len(item) != 2:
                    raise ValueError("a $dict item is not a [key, value] pair")
                key = decode_value(item[0], depth + 1)
                try:
                    out[key] = decode_value(item[1], depth + 1)
                except TypeError as e:
                    raise ValueError(f"a $dict key is not hashable: {e}") from None
            return out
        if tag == "$dtype" and type(body) is str and body in NPZ_NAMES:
            return dtype_of(body)
    raise ValueError(f"not a stored value: {str(j)[:80]}")


# -- classes by name ---------------------------------------------------------------------------


def class_ref(cls: type) -> tuple[str, str | None]:
    """``("module:qualname", problem)``: the name to store for ``cls`` and, if resolving that
    name would not give ``cls`` back, why (else None)."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return repr(cls), f"the class {cls!r} has no module and qualified name"
    ref = f"{module}:{qualname}"
    if "<locals>" in qualname:
        return ref, f"the class {module}.{qualname} is defined inside a function and cannot be imported"
    try:
        found = resolve(ref)
    except ValueError as e:
        return ref, str(e)
    if found is not cls:
        return ref, f"the name {module}.{qualname} does not refer to this class (a class defined twice?)"
    return ref, None


def resolve(ref: Any) -> Any:
    """The object named ``"module:qualname"`` under the rules of the module docstring.

    Raises:
      ValueError: a malformed name, a module that is not imported (and whose top-level
        package is not either), or a missing attribute.
    """
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise ValueError(f"malformed class name {str(ref)[:100]!r}")
    module_name, qualname = ref.split(":")
    mparts = module_name.split(".")
    qparts = qualname.split(".")
    for p in mparts + qparts:
        if not _IDENT.fullmatch(p) or (p.startswith("__") and p.endswith("__") and p != "__main__"):
            raise ValueError(f"malformed class name {ref[:100]!r}")
    if "__main__" in qparts:
        raise ValueError(f"malformed class name {ref[:100]!r}")
    module = sys.modules.get(module_name)
    if module is None:
        if mparts[0] not in sys.modules:
            raise ValueError(
                f"the class {module_name}.{qualname} is in module {module_name}, which is not "
                f"imported (spruce.io.load never imports a package by itself): import "
                f"{module_name} first"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"the module {module_name} of class {qualname} cannot be imported: {e}") from None
    obj: Any = module
    for p in qparts:
        try:
            obj = getattr(obj, p)
        except AttributeError:
            raise ValueError(f"the module {module_name} has no class {qualname}") from None
    return obj
