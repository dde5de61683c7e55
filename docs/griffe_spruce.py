"""A griffe extension for the API reference (mkdocs.yml loads it for mkdocstrings' handler).

spruce's docstrings are written to be read with ``help()`` and run as doctests; five habits of
theirs need a translation before mkdocstrings renders them as Markdown:

- doctest blocks (``>>>`` lines and their output) stand in the text without fences, where
  Markdown would read ``[0]`` as a link and join the lines: each block is put in a ``pycon``
  fence, at its own indentation;
- an ``Args:`` entry may describe several parameters at once (``a, b: the trees compared``):
  it becomes one entry per parameter, each with the whole description;
- a ``spruce.Module`` subclass gets its ``__init__`` generated at class creation, as a dataclass
  does, which static analysis cannot see: its fields (the annotated class attributes of it and
  its Module bases, ``field(init=False)`` left out) become the parameters of an ``__init__``, so
  that the signature shows them and the ``Args:`` entries match;
- the classes of one family (``Conv1d``/``2d``/``3d``, the pooling layers) get their docstring
  from a shared template when their module is imported, which static analysis cannot see either:
  a public class of a module that has no docstring in the source takes the one it has once
  imported (a ``spruce.Module`` without one gets a ``Name(fields)`` line, which is not taken;
  spruce.nn's are why the build needs JAX);
- a constant is documented by the ``#:`` comment lines just above it (the habit of Sphinx's
  autodoc, which ``help()`` does not show either): they become its docstring; and a name a
  module re-exports from another library (``spruce.nn.gelu`` is ``jax.nn.gelu``) becomes an
  entry that says so, where it would otherwise be left out for lack of that library's source.

The docstrings themselves are left as they are; only the text griffe hands to the renderer
changes.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import griffe

_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Attributes|Other Parameters):\s*$")
_MULTI = re.compile(r"^([*\w]+(?:\s*,\s*[*\w]+)+)(\s*\([^)]*\))?:(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_MODULE = "spruce._module._module.Module"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_multi_params(text: str) -> str:
    """``a, b: text`` in a parameters section -> ``a: text`` and ``b: text`` (continuations kept)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        header = _SECTION.match(line)
        if not header:
            continue
        section_indent = len(header.group(1))
        entry_indent: int | None = None
        while i < len(lines):
            line = lines[i]
            if line.strip() and _indent(line) <= section_indent:
                break
            if line.strip() and entry_indent is None:
                entry_indent = _indent(line)
            multi = _MULTI.match(line.strip()) if line.strip() and _indent(line) == entry_indent else None
            if not multi:
                out.append(line)
                i += 1
                continue
            # the entry: its first line and the lines indented under it
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > (entry_indent or 0)):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
            rest = lines[i + 1 : j]
            names = [name.strip() for name in multi.group(1).split(",")]
            for name in names:
                out.append(" " * (entry_indent or 0) + f"{name}{multi.group(2) or ''}:{multi.group(3)}")
                out.extend(rest)
            i = j
    return "\n".join(out)


def fence_doctests(text: str) -> str:
    """Put every run of ``>>>`` lines and their output (up to a blank line or a dedent) in a
    ``pycon`` fence at its indentation; text already in a fence is left alone."""
    lines = text.split("\n")
    out: list[str] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = _indent(line)
        j = i
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) >= indent:
            j += 1
        pad = " " * indent
        if out and out[-1].strip():
            out.append("")
        out.append(pad + "```pycon")
        out.extend(lines[i:j])
        out.append(pad + "```")
        if j < len(lines) and lines[j].strip():
            out.append("")
        i = j
    return "\n".join(out)


def _is_module_class(cls: griffe.Class) -> bool:
    try:
        return any(base.path == _MODULE for base in cls.mro())
    except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False


def _has_own_init(cls: griffe.Class) -> bool:
    """Whether ``cls`` or a base below ``spruce.Module`` writes its ``__init__`` by hand."""
    return any("__init__" in klass.members for klass in [cls, *cls.mro()] if klass.path != _MODULE)


def _field_init(attr: griffe.Attribute) -> tuple[bool, str | griffe.Expr | None]:
    """(whether the field is a parameter of ``__init__``, its default) from ``= field(...)``."""
    value = attr.value
    if isinstance(value, griffe.ExprCall) and str(value.function).split(".")[-1] == "field":
        kwargs = {a.name: a.value for a in value.arguments if isinstance(a, griffe.ExprKeyword)}
        if str(kwargs.get("init", "")) == "False":
            return False, None
        if "default_factory" in kwargs:
            return True, griffe.ExprCall(function=kwargs["default_factory"], arguments=[])
        return True, kwargs.get("default")
    return True, value


def _module_fields(cls: griffe.Class) -> list[griffe.Parameter]:
    params: dict[str, griffe.Parameter] = {}
    for klass in [*reversed(cls.mro()), cls]:
        for member in klass.members.values():
            if member.is_alias or not member.is_attribute or member.annotation is None:
                continue
            if "class-attribute" in member.labels and "instance-attribute" not in member.labels:
                continue
            if str(member.annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            init, default = _field_init(member)  # type: ignore[arg-type]
            if not init:
                params.pop(member.name, None)
                continue
            params[member.name] = griffe.Parameter(
                member.name, annotation=member.annotation, kind=griffe.ParameterKind.positional_or_keyword, default=default
            )
    return list(params.values())


def _comment_doc(obj: griffe.Object) -> str | None:
    """The ``#:`` comment lines just above ``obj``'s first line, as text, or None."""
    lines = obj.module.lines
    i = (obj.lineno or 0) - 2
    found: list[str] = []
    while 0 <= i < len(lines) and lines[i].strip().startswith("#:"):
        found.append(lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(reversed(found)) or None


def _runtime_doc(obj: griffe.Object) -> str | None:
    """The docstring ``obj`` has once its module is imported, when the source has none."""
    try:
        value = griffe.dynamic_import(obj.path)
    except ImportError as e:
        raise ImportError(f"the API reference imports {obj.path} for its docstring, set at import time: {e}") from e
    doc = value.__dict__.get("__doc__")
    if not isinstance(doc, str) or doc.startswith(f"{obj.name}("):
        return None
    return inspect.cleandoc(doc)


def _document(obj: griffe.Object, text: str, like: griffe.Docstring | None) -> None:
    obj.docstring = griffe.Docstring(
        text, parent=obj, parser=like.parser if like else None, parser_options=like.parser_options if like else None
    )


def _foreign_exports(module: griffe.Module) -> None:
    """Each name of ``module.__all__`` bound to another library's object -> an entry saying so."""
    for name in [str(n) for n in module.exports or ()]:
        member = module.members.get(name)
        if member is None or not member.is_alias or member.target_path.split(".")[0] == "spruce":
            continue
        target = member.target_path
        entry = griffe.Attribute(name, value=target, lineno=member.alias_lineno, endlineno=member.alias_endlineno, parent=module)
        entry.labels.add("module-attribute")
        _document(entry, f"``{target}``, re-exported: the same object, documented by its library.", module.docstring)
        module.set_member(name, entry)


class SpruceDocstrings(griffe.Extension):
    """The translation described in this module's docstring, applied once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        todo: list[griffe.Object] = [pkg]
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, griffe.Module):
                _foreign_exports(obj)
            public = not obj.name.startswith("_") and isinstance(obj.parent, griffe.Module)
            if obj.docstring is None and isinstance(obj, griffe.Attribute) and obj.lineno:
                text = _comment_doc(obj)
                if text:
                    _document(obj, text, pkg.docstring)
            elif obj.docstring is None and public and isinstance(obj, griffe.Class):
                text = _runtime_doc(obj)
                if text:
                    _document(obj, text, pkg.docstring)
            if obj.docstring is not None:
                obj.docstring.value = fence_doctests(split_multi_params(obj.docstring.value))
            if isinstance(obj, griffe.Class) and _is_module_class(obj) and not _has_own_init(obj):
                init = griffe.Function("__init__", lineno=0, endlineno=0, parent=obj, parameters=griffe.Parameters(
                    griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword), *_module_fields(obj)
                ), returns="None")
                obj.set_member("__init__", init)
                init.labels.add("generated")
            todo.extend(m for m in obj.members.values() if not m.is_alias)  # type: ignore[misc]
