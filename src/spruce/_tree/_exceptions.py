"""Exception classes for bad input that JAX reports with a different built-in class.

spruce raises the built-in class that fits the mistake; where ``jax.tree_util`` raises another
one for the same input, the error derives from both, so that an ``except`` clause written for
either library catches it.  Each class is made with ``type()`` at import (mypyc cannot compile
a class body that inherits from two built-in exceptions); this module imports nothing else of
the engine, so any engine module may import it.
"""

from __future__ import annotations

from typing import Final


def _error_class(name: str, bases: tuple[type[Exception], ...], doc: str) -> type[Exception]:
    cls: type[Exception] = type(name, bases, {"__doc__": doc, "__module__": __name__, "__qualname__": name})
    return cls


FlattenResultError: Final = _error_class(
    "FlattenResultError",
    (TypeError, ValueError),
    "A registered flatten function returned something other than a (children, aux_data) pair, "
    "or children that are not iterable.  A TypeError; also a ValueError, which is what "
    "jax.tree_util raises for the same mistake.",
)

TransposeError: Final = _error_class(
    "TransposeError",
    (ValueError, TypeError),
    "The tree given to transpose is not outer_treedef composed with inner_treedef.  A "
    "ValueError, as spruce's other structure mismatches; also a TypeError, which is what "
    "jax.tree_util.tree_transpose raises for the same mistake.",
)

RegisterDataclassError: Final = _error_class(
    "RegisterDataclassError",
    (ValueError, TypeError),
    "register_dataclass was given only one of data_fields and meta_fields, or neither for a "
    "class that is not a dataclass.  A ValueError; also a TypeError, which is what "
    "jax.tree_util.register_dataclass raises for the same mistake.",
)
