"""The optional dependencies of each part of spruce, and the error that names what to install.

``import spruce`` needs nothing beyond the standard library.  Each subpackage that needs a
third-party package checks for it when it is first imported, with :func:`require`, so a missing
package is one ImportError that says which extra of ``pip install spruce[...]`` provides it,
instead of a bare ``No module named 'numpy'`` from somewhere inside.  The extras themselves are
declared in ``pyproject.toml``; ``EXTRAS`` here names, for each, the modules it makes importable.
"""

from __future__ import annotations

import importlib

# extra -> (import name, what to call it in the message), as pyproject.toml's
# [project.optional-dependencies] declares them.
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "jax": (("numpy", "NumPy"), ("jax", "JAX")),
    "io": (("numpy", "NumPy"),),
    "cloud": (("fsspec", "fsspec"),),
    "view": (("numpy", "NumPy"),),
    "models": (("numpy", "NumPy"), ("jax", "JAX"), ("tokenizers", "tokenizers")),
}


class MissingDependencyError(ImportError):
    """An optional dependency of a part of spruce is not installed.

    An ImportError (so ``except ImportError`` code keeps working) whose message names the part,
    the missing package, and the ``pip install 'spruce[extra]'`` command that installs it;
    ``name`` is the missing module's import name, as for ImportError.
    """


def require(part: str, extra: str, *modules: str) -> None:
    """Import each of ``modules`` (default: every module of ``extra``), or raise the error naming the extra.

    Args:
      part: what needs them, for the message (``"spruce.io"``).
      extra: the key of ``EXTRAS`` / of pyproject.toml's optional dependencies (``"io"``).
      modules: import names to check; default: those ``EXTRAS[extra]`` lists.

    Raises:
      MissingDependencyError: the first module that cannot be imported, with the install
        command in the message, chained to the original ImportError.

    >>> require("spruce.io", "io")
    >>> require("spruce.example", "io", "not_a_module")
    Traceback (most recent call last):
    ...
    spruce._extras.MissingDependencyError: spruce.example needs not_a_module, which is not installed: pip install 'spruce[io]'
    """
    names = dict(EXTRAS.get(extra, ()))
    for module in modules or tuple(names):
        try:
            importlib.import_module(module)
        except ImportError as e:
            # A module that is installed but fails inside its own import is not "missing":
            # re-raise that as it is.
            if e.name is not None and e.name != module and not module.startswith(e.name + "."):
                raise
            raise MissingDependencyError(
                f"{part} needs {names.get(module, module)}, which is not installed: pip install 'spruce[{extra}]'",
                name=module,
            ) from e
