"""``spruce.field``: dataclass fields with the extra options Modules read (static, converter)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

_MISSING: Any = dataclasses.MISSING

# Keys of ``dataclasses.Field.metadata`` read by Module.  ``static`` is the same key that
# ``spruce.tree.static()`` and ``spruce.tree.register_dataclass`` use.
STATIC: str = "static"
CONVERTER: str = "converter"


def field(
    *,
    static: bool = False,
    converter: Callable[[Any], Any] | None = None,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | Any = _MISSING,
    init: bool = True,
    repr: bool = True,
    metadata: dict[str, Any] | None = None,
    kw_only: bool | Any = _MISSING,
) -> Any:
    """A field of a ``spruce.Module`` (a ``dataclasses.field`` with two more options).

    Args:
      static: if True the field is node data, not a child: its value is stored in the
        PyTreeDef (so it must be hashable — checked when the module is built, TypeError
        otherwise), is never traced by JAX transforms and is not a leaf of ``spruce.tree``
        functions.  Use it for sizes, flags and functions; never for arrays (an array in a
        static field raises TypeError if unhashable and warns if hashable, e.g. a numpy scalar).
      converter: called on every value stored in the field while the module is being built
        (by the generated ``__init__``, a custom ``__init__`` assigning ``self.x = ...``, or a
        default), e.g. ``converter=jnp.asarray``.  Never called when a module is rebuilt from
        leaves (unflatten), so transforms may put placeholders in the field.
      default, default_factory: as ``dataclasses.field``; they also fill fields a custom
        ``__init__`` leaves unassigned.
      init, repr, metadata, kw_only: as ``dataclasses.field`` (``repr=False`` hides the field
        from ``repr(module)``).

    Returns:
      A ``dataclasses.Field`` whose ``metadata`` carries ``'static'`` and ``'converter'``.

    Semantics follow ``equinox.field``; ``static=True`` is the same marker as
    ``spruce.tree.static()``.
    """
    md: dict[str, Any] = dict(metadata) if metadata else {}
    if static:
        md[STATIC] = True
    if converter is not None:
        if not callable(converter):
            raise TypeError(f"field(converter=...) must be callable, got {type(converter).__name__}")
        md[CONVERTER] = converter
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        metadata=md,
        kw_only=kw_only,
    )
