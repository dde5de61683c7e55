"""Ahead-of-time compilation through ``filter_jit``: ``filter_jit(f).lower(*args, **kwargs)``
returns a ``Lowered``, whose ``compile()`` returns a ``Compiled`` called with arguments like
those of the ``lower`` call (imports JAX).

Both wrap JAX's ``jax.stages`` objects of the function of the array leaves that filter_jit
compiles, and translate at the edges: the arguments are walked as a filter_jit call walks them
(the structure and static leaves must be those of the ``lower`` call), and the output is rebuilt
as the call rebuilds it.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

from .. import tree as _tree
from ._jit_errors import _shown
from ._split import _DYN, _is_dynamic, _walk_call

_DONATION_WARNING = "Some donated buffers were not usable"


@contextlib.contextmanager
def _quiet(donating: bool) -> Iterator[None]:
    """JAX's warning about donated buffers it could not reuse, hidden when filter_jit donates
    (as its calls hide it)."""
    if not donating:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DONATION_WARNING)
        yield


class _Stage:
    """What ``Lowered`` and ``Compiled`` share: the compiled entry (its traced output
    description), the key of the ``lower`` call's arguments, the leading arguments filter_jit
    adds (a Module used as the function, or a bound method's instance)."""

    __slots__ = ("_entry", "_key", "_lead", "_donating")

    def __init__(self, entry: Any, key: list[Any], lead: tuple[Any, ...], donating: bool) -> None:
        self._entry = entry
        self._key = key
        self._lead = lead
        self._donating = donating


class Lowered(_Stage):
    """``filter_jit(f).lower(*args, **kwargs)``: the function traced and lowered for those
    arguments, not yet compiled.

    ``compile()`` gives a ``Compiled``; ``lowered`` is JAX's ``jax.stages.Lowered`` of the
    function of the array leaves, and its other attributes (``as_text()``,
    ``cost_analysis()``, ``compiler_ir()``, ...) are available here too.  Follows the object
    ``equinox.filter_jit(f).lower(...)`` returns.
    """

    __slots__ = ("lowered",)

    def __init__(self, lowered: Any, entry: Any, key: list[Any], lead: tuple[Any, ...], donating: bool) -> None:
        super().__init__(entry, key, lead, donating)
        self.lowered = lowered

    def compile(self, compiler_options: dict[str, Any] | None = None) -> Compiled:
        """Compile (``jax.stages.Lowered.compile``, with its ``compiler_options``)."""
        with _quiet(self._donating):
            compiled = self.lowered.compile(compiler_options=compiler_options)
        return Compiled(compiled, self._entry, self._key, self._lead, self._donating)

    def as_text(self, *args: Any, **kwargs: Any) -> str:
        """The lowered module's text (``jax.stages.Lowered.as_text``)."""
        return str(self.lowered.as_text(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "lowered":  # (not JAX's: copy, pickle, an unset slot)
            raise AttributeError(name)
        return getattr(self.lowered, name)


class Compiled(_Stage):
    """``filter_jit(f).lower(*args, **kwargs).compile()``: called with arguments of the same
    structure and static (non-array) leaves as the ``lower`` call, and arrays of the same
    shapes and dtypes; returns what ``f`` returns (arrays computed by the compiled code, other
    leaves as the trace produced them).

    ``compiled`` is JAX's ``jax.stages.Compiled`` (of the array leaves, in
    ``spruce.tree.flatten`` order of ``(args, kwargs)``); its other attributes
    (``input_shardings``, ``cost_analysis()``, ``as_text()``...) are available here too.

    Raises:
      TypeError: called with another structure or other static leaves than the ``lower``
        call (naming the first difference); arrays of other shapes or dtypes (from JAX).

    Follows the object ``equinox.filter_jit(f).lower(...).compile()`` returns, except that the
    static leaves are checked (Equinox uses the lowered ones whatever is passed).
    """

    __slots__ = ("compiled",)

    def __init__(self, compiled: Any, entry: Any, key: list[Any], lead: tuple[Any, ...], donating: bool) -> None:
        super().__init__(entry, key, lead, donating)
        self.compiled = compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        full = self._lead + args
        key, dyn = _walk_call(full, kwargs)
        try:
            same = key == self._key
        except Exception:  # a static leaf whose == raises: compare leaf by leaf
            same = False
        if not same:
            raise TypeError(self._difference(full, kwargs))
        with _quiet(self._donating):
            raw = self.compiled(*dyn)
        return self._entry.rebuild(raw)

    def _difference(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        entry, kept = self._entry, len(self._lead)
        name = f"filter_jit({entry.name}).lower(...).compile()"
        leaves_with_path = _tree.leaves_with_path((args, kwargs))
        treedef = _tree.structure((args, kwargs))
        if treedef != entry.treedef:
            return (
                f"{name}: called with arguments of structure {treedef}, but lowered for arguments of "
                f"structure {entry.treedef}; call it with arguments like those given to lower()"
            )
        for (path, x), want in zip(leaves_with_path, entry.static):
            if want is _DYN and not _is_dynamic(x):
                return f"{name}: {_shown(path, kept)} is {x!r}, but was an array in the lower() call"
            if want is not _DYN and (_is_dynamic(x) or type(x) is not type(want) or not _equal(x, want)):
                shown = "an array" if _is_dynamic(x) else repr(x)
                return (
                    f"{name}: {_shown(path, kept)} is {shown}, but was {want!r} in the lower() call; "
                    "non-array leaves are compiled in: lower again for other values"
                )
        return f"{name}: called with arguments that differ from those given to lower()"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "compiled":  # (not JAX's: copy, pickle, an unset slot)
            raise AttributeError(name)
        return getattr(self.compiled, name)


def _equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # a value whose == raises: not equal
        return False
