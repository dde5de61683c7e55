"""Write docs/api.md, the API reference, from the docstrings of spruce's public modules.

    python scripts/gen_api_docs.py           # (re)write docs/api.md   (make docs)
    python scripts/gen_api_docs.py --check   # exit 1 if docs/api.md is not what this writes

Every public name (a module's ``__all__``) gets its signature and its docstring, once: a name
that is the same object as one documented earlier (``spruce.tree_util.tree_map`` is
``spruce.tree.map``) links to it instead of repeating it.  Classes list their public methods and
properties.  The docstrings are the single home of the reference text; this file only arranges
them.

The output does not depend on the build or the interpreter: the script always imports the
uncompiled source under ``src/`` (the compiled build has the same docstrings but its functions
carry no signatures), prints only values that do not vary by build, and renders signatures
from their (string) annotations.  Needs JAX (``spruce.nn``, ``spruce.jax`` and ``spruce.models``
import it).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"

#: the modules documented, in this order; submodules listed in a module's ``__all__`` (such as
#: ``spruce.models.bert``) get their own section after it
MODULES = [
    "spruce", "spruce.tree", "spruce.tree_util", "spruce.jax", "spruce.nn", "spruce.io", "spruce.sharding",
    "spruce.view", "spruce.models", "spruce.typing",
]

HEADER = """\
# spruce API reference

Generated from the docstrings by `scripts/gen_api_docs.py` (`make docs`); do not edit by hand.
A test fails when this file is out of date.  Every public name of the modules below appears
once with its signature and docstring; names that are the same object as one documented
earlier link to it.
"""


def import_source() -> ModuleType:
    """spruce from ``src/`` (never an installed build), as plain Python."""
    sys.path.insert(0, str(ROOT / "src"))
    spruce = importlib.import_module("spruce")
    if Path(spruce.__file__).resolve().parent != ROOT / "src" / "spruce" or spruce.__compiled__:
        raise SystemExit(f"expected the uncompiled source under {ROOT / 'src'}, got {spruce.__file__}")
    return spruce


def anchor(qualname: str) -> str:
    """The Markdown heading id of ``qualname`` (GitHub's rule for a heading of only that text)."""
    return re.sub(r"[^a-z0-9_-]", "", qualname.lower().replace(" ", "-"))


def _default(value: Any) -> str:
    """A default value as source would write it, without addresses that change between runs."""
    if inspect.isroutine(value) or inspect.isclass(value):
        return getattr(value, "__qualname__", getattr(value, "__name__", type(value).__name__))
    text = repr(value)
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def signature(obj: Any, *, drop_first: bool = False) -> str:
    """``(a, b: int = 1, *, c=None) -> T`` of a function, without its first parameter if asked."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    parts: list[str] = []
    star_done = False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += (" = " if p.annotation is not p.empty else "=") + _default(p.default)
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    out = "(" + ", ".join(parts) + ")"
    if sig.return_annotation is not sig.empty:
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


def _annotation(ann: Any) -> str:
    if isinstance(ann, str):
        return ann
    if hasattr(ann, "__forward_arg__"):  # typing.ForwardRef (NamedTuple fields written as strings)
        return str(ann.__forward_arg__)
    if inspect.isclass(ann):
        return ann.__qualname__ if ann.__module__ == "builtins" else f"{ann.__module__}.{ann.__qualname__}"
    return repr(ann).replace("typing.", "")


def docstring(obj: Any) -> str:
    """The object's own docstring as Markdown: doctest examples fenced as Python."""
    doc = obj.__doc__ if isinstance(obj.__doc__, str) else None
    if not doc:
        return ""
    lines = inspect.cleandoc(doc).split("\n")
    out: list[str] = []
    in_example = in_section = False
    for line in lines:
        if line.startswith(">>>") and not in_example:
            out.extend(["```python"])
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        if in_example:
            out.append(line)
        elif SECTION.match(line):
            # Google-style "Args:" / "Raises:" blocks: each "  name: text" an item of a list
            out.extend([f"**{line.strip()}**", ""])
            in_section = True
        elif in_section and line.startswith("  ") and line.strip():
            body = line.strip()
            out.append(f"- {body}" if not line.startswith("   ") else f"  {body}")
        else:
            in_section = False
            out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out).strip()


SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Attributes|Fields|Note|Notes):$")


def is_own(obj: Any, owner: str) -> bool:
    """Defined in spruce (not a name re-exported from another library)."""
    return (getattr(obj, "__module__", None) or "").split(".")[0] == owner


#: where a re-exported object of another library is looked up, by the name spruce gives it
FOREIGN_MODULES = ["jax.nn", "jax.numpy", "jax", "numpy"]


def public_name(obj: Any, attr: str) -> str:
    """The public dotted name of another library's object (``jax.nn.gelu``), not the private
    module it happens to be defined in (which changes between versions)."""
    for name in FOREIGN_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, attr, None) is obj:
            return f"{name}.{attr}"
    raise SystemExit(f"{attr!r} ({obj!r}) is re-exported from another library: add its module to FOREIGN_MODULES")


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = [HEADER]
        self.seen: dict[int, str] = {}  # id(object) -> the qualified name it is documented under
        self.modules_done: set[str] = set()

    def emit(self, *text: str) -> None:
        self.lines.extend(text)

    def module(self, name: str) -> None:
        mod = importlib.import_module(name)
        self.modules_done.add(name)
        self.emit(f"## {name}", "", docstring(mod), "")
        submodules: list[str] = []
        aliases: list[tuple[str, str]] = []  # (name here, where it is documented)
        modules: list[str] = []
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            qualname = f"{name}.{attr}"
            if inspect.ismodule(obj):
                if obj.__name__ not in MODULES and obj.__name__ not in self.modules_done:
                    submodules.append(obj.__name__)
                modules.append(obj.__name__)
            elif (inspect.isroutine(obj) or inspect.isclass(obj)) and id(obj) in self.seen:
                aliases.append((attr, self.seen[id(obj)]))
            else:
                self.member(qualname, obj, attr)
        if modules:
            self.emit("Modules: " + ", ".join(f"[`{m}`](#{anchor(m)})" for m in modules) + ".", "")
        if aliases:
            self.emit(f"### Other names in {name}", "", "| name | the same object as |", "|---|---|")
            self.emit(*(f"| `{name}.{attr}` | [`{first}`](#{anchor(first)}) |" for attr, first in aliases))
            self.emit("")
        for sub in submodules:
            self.module(sub)

    def member(self, qualname: str, obj: Any, attr: str) -> None:
        key = id(obj)
        if _is_type_alias(obj):
            self.emit(f"### {qualname}", "", f"A type alias: `{_annotation(obj)}`.", "")
        elif callable(obj) and not is_own(obj, "spruce"):
            # another library's object, re-exported: its documentation is that library's (and
            # changes with its version), so only say where it comes from
            self.emit(f"### {qualname}", "", f"Re-exported: `{public_name(obj, attr)}` (documented there).", "")
        elif inspect.isclass(obj):
            self.seen[key] = qualname
            self.klass(qualname, obj, attr)
        elif inspect.isroutine(obj):
            self.seen[key] = qualname
            self.emit(f"### {qualname}", "", "```python", f"{attr}{signature(obj)}", "```", "", docstring(obj), "")
        else:
            self.emit(f"### {qualname}", "", self.value(obj), "")

    def value(self, obj: Any) -> str:
        """A module-level value: its type, and its value when that is plain data that does not
        vary by build (a version string, a size; not ``__compiled__``)."""
        if type(obj) in (int, str, float):
            return f"`{obj!r}` ({type(obj).__name__})"
        return f"A `{type(obj).__name__}`."

    def klass(self, qualname: str, cls: type, attr: str) -> None:
        if issubclass(cls, BaseException):
            sig = ""
        elif "__init__" in _own_dict(cls) or any("__init__" in vars(b) for b in cls.__mro__[1:-1] if is_own(b, "spruce")):
            sig = signature(cls.__init__, drop_first=True)
        else:
            sig = signature(cls)
        bases = [b for b in cls.__bases__ if b is not object]
        base_text = f"({', '.join(_annotation(b) for b in bases)})" if bases else ""
        self.emit(f"### {qualname}", "", "```python", f"class {attr}{base_text}", f"{attr}{sig}" if sig else "", "```", "")
        if self.lines[-3] == "":
            del self.lines[-3]
        self.emit(docstring(cls), "")
        for name, member in _members(cls):
            member_q = f"{qualname}.{name}"
            if isinstance(member, property):
                self.emit(f"#### {member_q}", "", "*property*", "", docstring(member), "")
            else:
                func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                kind = (
                    "*classmethod* " if isinstance(member, classmethod)
                    else "*staticmethod* " if isinstance(member, staticmethod)
                    else ""
                )
                drop = not isinstance(member, staticmethod)
                self.emit(f"#### {member_q}", "", "```python", f"{name}{signature(func, drop_first=drop)}", "```", "")
                if kind:
                    self.emit(kind.strip(), "")
                self.emit(docstring(func), "")

    def text(self) -> str:
        out = "\n".join(self.lines)
        out = re.sub(r"\n{3,}", "\n\n", out)
        return out.rstrip("\n") + "\n"


def _is_type_alias(obj: Any) -> bool:
    return (
        getattr(obj, "__module__", None) == "typing"
        or type(obj).__module__ == "typing"
        or type(obj).__name__ == "GenericAlias"
    )


def _own_dict(cls: type) -> dict[str, Any]:
    return dict(vars(cls))


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties the class itself defines (``__call__`` included), in
    source order."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if isinstance(member, property) or inspect.isfunction(func):
            out.append((name, member))
    return out


def render() -> str:
    import_source()
    writer = Writer()
    for name in MODULES:
        writer.module(name)
    return writer.text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run `make docs` (python scripts/gen_api_docs.py)")
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is up to date")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
