"""The two exceptions of spruce.io (both ValueErrors, so ``except ValueError`` catches them)."""

from __future__ import annotations

import os
from typing import Sequence


class CheckpointError(ValueError):
    """A file could not be read as a checkpoint, or its structure could not be rebuilt.

    Raised for: a file that is not a .safetensors / .npz checkpoint, or not a regular file (a
    named pipe, a device), a truncated or corrupted file, a header whose sizes or offsets lie,
    a declared size larger than the file, an array stored as pickled objects (never
    unpickled), corrupted spruce metadata, and a stored structure that cannot be rebuilt
    without ``like=`` (a class that is not imported or no longer matches, a node whose static
    data is not plain data).  The message names the file and, where there is one, the key
    path.

    Attributes:
      path: the file (a ``str``), or None when the error is not about a particular file.
    """

    path: str | None

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        super().__init__(f"{self.path}: {message}" if self.path is not None else message)


class MismatchError(ValueError):
    """A readable checkpoint does not fit the structure it is loaded into (``like=``).

    Raised by ``spruce.io.load(path, like=...)`` when a leaf's shape, dtype or kind differs from
    the stored one, and in strict mode when leaves of ``like`` are missing from the file or the
    file holds tensors that ``like`` has no leaf for.  The message lists the dotted names
    (truncated for long lists); the attributes hold them all.

    Attributes:
      missing: dotted names of leaves of ``like`` that the file does not have.
      unexpected: names in the file (before ``rename``) that no leaf of ``like`` takes.
      mismatched: ``(name, expected, found)`` strings for leaves whose shape/dtype/kind differ.
    """

    missing: list[str]
    unexpected: list[str]
    mismatched: list[tuple[str, str, str]]

    def __init__(
        self,
        message: str,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
        mismatched: Sequence[tuple[str, str, str]] = (),
    ) -> None:
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = list(mismatched)
        super().__init__(message)
