"""The type variable ``PyTreeDef`` is generic in: the type of the tree it was taken from.

A type checker reads ``S`` as PEP 696's ``TypeVar("S", default=Any)``, so a bare ``PyTreeDef``
(the engine's own annotations, a user's) means ``PyTreeDef[Any]`` and ``mypy --strict`` does not
ask for a parameter.  ``typing.TypeVar`` takes ``default`` only from Python 3.13, and the engine
needs nothing beyond the standard library, so at run time ``S`` is a plain ``TypeVar``.

Never compiled (``setup.py`` leaves it out): mypyc reads the ``TYPE_CHECKING`` branch as the
only one and would make the run-time branch unreachable code in a compiled module.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import TypeVar
else:
    from typing import TypeVar as _TypeVar

    def TypeVar(name: str, *, default: object = None) -> Any:  # stands for the class
        return _TypeVar(name)


S = TypeVar("S", default=Any)
