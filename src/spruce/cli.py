"""The ``spruce`` command: ``spruce inspect FILE``, ``spruce diff A B``, ``spruce demo``.

``main(argv)`` returns the exit code (the console script and ``python -m spruce`` pass it to
``sys.exit``): 0 on success, 1 when ``diff`` finds differences, 2 for a usage error (an unknown
flag, a missing argument: the error and the usage) or an error reading a file — printed as
one red line on stderr, never a traceback.

Output is printed with rich; when stdout is not a terminal it is plain text, ``COLUMNS``
wide if set (160 otherwise).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import Any, Callable, NamedTuple, NoReturn, Sequence

__all__ = ["main"]

_DESCRIPTION = "Inspect and compare pytree checkpoints (.safetensors, .npz, PyTorch .pt/.pth/.bin)."


class _UsageError(Exception):
    """A command line argparse refused (the message is one line, with the usage)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised as one-line _UsageErrors instead of printing the
    usage and exiting (the subcommands' parsers are of this class too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # filled by _parser

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())
        usage = usage[len("usage: "):] if usage.startswith("usage: ") else usage
        command = self.prog.partition(" ")[2]
        raise _UsageError(f"{command + ': ' if command else ''}{message} (usage: {usage})")

    def parser_of(self, command: str | None) -> argparse.ArgumentParser:
        """The parser of a subcommand (this parser for None or an unknown name)."""
        return self.commands.get(command or "", self)


def _parser() -> _Parser:
    p = _Parser(prog="spruce", description=_DESCRIPTION)
    # Not required=True: argparse would then report a missing COMMAND before an unknown flag
    # (`spruce --bogus`); main checks for both itself, unknown flags first.
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ins = sub.add_parser(
        "inspect",
        help="show a checkpoint as a tree: shape, dtype, parameters and bytes per subtree",
        description=(
            "Show the tensors of a .safetensors or .npz checkpoint as a tree of their dotted "
            "names, with shape, dtype, parameter count and bytes for every tensor and subtree, "
            "totals first.  Reads only the file's header."
        ),
    )
    ins.add_argument("file", help="a .safetensors or .npz file")
    ins.add_argument("--depth", type=int, default=None, metavar="N",
                     help="show N levels of the tree (deeper subtrees are summed); default: all")
    ins.add_argument("--filter", action="append", default=None, metavar="GLOB",
                     help="only tensors whose dotted name (or a prefix of it ending at a dot) "
                          "matches the glob, e.g. 'encoder.layer.0' or '*.bias'; repeatable")
    ins.set_defaults(func=_inspect)

    dif = sub.add_parser(
        "diff",
        help="compare the tensors of two checkpoints by name, shape and dtype",
        description=(
            "List the tensors only in A, only in B, and those whose shape or dtype differ.  "
            "Exit code 0 if A and B have the same structure, 1 if not, 2 on error."
        ),
    )
    dif.add_argument("a", metavar="A", help="a .safetensors or .npz file")
    dif.add_argument("b", metavar="B", help="a .safetensors or .npz file")
    dif.set_defaults(func=_diff)

    demo = sub.add_parser(
        "demo",
        help="run the main demo: the pretrained all-MiniLM-L6-v2 transformer as a spruce Module",
    )
    demo.add_argument("model", nargs="?", choices=("minilm", "crepe"), default="minilm",
                      help="minilm (default), or crepe: the CREPE pitch tracker on a synthesised melody")
    demo.set_defaults(func=_demo)
    p.commands = {"inspect": ins, "diff": dif, "demo": demo}
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the ``spruce`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
      The exit code: 0 success, 1 ``diff`` found differences, 2 error (usage, a missing,
      unreadable or corrupted file), 130 interrupted.

    >>> main(['--help'])  # doctest: +ELLIPSIS
    usage: spruce [-h] COMMAND ...
    ...
    0
    """
    parser = _parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            # the usage of the command whose flags they are not (spruce inspect FILE --bogus)
            parser.parser_of(args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
        if args.command is None:
            parser.error("a command is required: inspect, diff or demo")
    except SystemExit as e:  # argparse exits for --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except _UsageError as e:
        _error(str(e))
        return 2
    try:
        code: int = args.func(args, _console())
        return code
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError, ImportError) as e:
        _error(_describe(e))
        return 2


def _console() -> Any:
    from rich.console import Console

    width = None
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        width = 160
    return Console(file=sys.stdout, highlight=False, width=width)


def _describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        where = f"{e.filename}: " if e.filename is not None else ""
        return f"{where}{e.strerror}"
    if isinstance(e, ImportError) and e.name:
        return f"{e} (is the package installed?)"
    return str(e) or type(e).__name__


def _error(message: str) -> None:
    line = "spruce: error: " + " ".join(message.split())
    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError:  # rich is what is missing: plain text still gives the one line
        print(line, file=sys.stderr)
        return
    Console(file=sys.stderr, highlight=False).print(Text(line, style="bold red"), soft_wrap=True)


# -- formatting ----------------------------------------------------------------------------------


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # unreachable


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class _Leaf(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    size: int
    nbytes: int


class _Node:
    """A subtree of dotted names, with the totals of its tensors."""

    __slots__ = ("children", "leaf", "size", "nbytes", "count", "dtypes")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.leaf: _Leaf | None = None
        self.size = 0
        self.nbytes = 0
        self.count = 0
        self.dtypes: set[str] = set()


def _sort_key(name: str) -> tuple[tuple[int, int, str], ...]:
    return tuple((0, int(c), "") if c.isdecimal() and c.isascii() else (1, 0, c) for c in name.split("."))


def _build(tensors: dict[str, Any], ordered: bool) -> _Node:
    root = _Node()
    names = list(tensors) if ordered else sorted(tensors, key=_sort_key)
    paths: list[list[_Node]] = []
    for name in names:
        node = root
        path = [root]
        for part in name.split("."):
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Node()
            node = child
            path.append(node)
        paths.append(path)
    for name, path in zip(names, paths):
        info = tensors[name]
        if path[-1].children:
            # a name that is also a prefix of other names ('a' and 'a.b'): its own row ''
            path.append(path[-1].children.setdefault("", _Node()))
        path[-1].leaf = _Leaf(info.dtype, tuple(info.shape), info.size, info.nbytes)
        for n in path:
            n.size += info.size
            n.nbytes += info.nbytes
            n.count += 1
            n.dtypes.add(info.dtype)
    return root


def _collapse(label: str, node: _Node) -> tuple[str, _Node]:
    """Merge chains of single-child subtrees into one row (``pooler.dense``)."""
    while node.leaf is None and len(node.children) == 1:
        (part, child), = node.children.items()
        label = f"{label}.{part}" if label and part else (label or part)
        node = child
    return label, node


def _rows(root: _Node, depth: int | None) -> list[tuple[str, _Node, bool]]:
    """``(tree-drawn label, node, collapsed)`` rows, depth-first, without recursion."""
    rows: list[tuple[str, _Node, bool]] = []
    stack: list[tuple[str, str, _Node, bool, int]] = []

    def push(node: _Node, prefix: str, level: int) -> None:
        kids = list(node.children.items())
        for i in range(len(kids) - 1, -1, -1):
            stack.append((kids[i][0], prefix, kids[i][1], i == len(kids) - 1, level))

    push(root, "", 1)
    while stack:
        part, prefix, node, last, level = stack.pop()
        label, node = _collapse(part, node)
        deeper = bool(node.children)
        collapsed = deeper and depth is not None and level >= depth
        rows.append((prefix + ("└── " if last else "├── ") + (label or "''"), node, collapsed))
        if deeper and not collapsed:
            push(node, prefix + ("    " if last else "│   "), level + 1)
    return rows


def _matches(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(name, g + ".*") for g in globs)


# -- commands ------------------------------------------------------------------------------------


def _header(path: str) -> tuple[dict[str, Any], str]:
    import spruce.io

    tensors = spruce.io.read_header(path)
    low = path.lower()
    fmt = "npz" if low.endswith(".npz") else "safetensors"
    if not low.endswith((".npz", ".safetensors")):
        from spruce.io._api import _parse

        fmt = _parse(path).format  # sniffed: safetensors, npz or pytorch (torch.save)
    return tensors, fmt


def _inspect(args: argparse.Namespace, out: Any) -> int:
    from rich.table import Table
    from rich.text import Text

    import spruce.io

    if args.depth is not None and args.depth < 1:
        raise ValueError("--depth must be at least 1")
    all_tensors, fmt = _header(args.file)
    meta = spruce.io.read_metadata(args.file)
    ordered = "spruce.treedef" in meta
    tensors = all_tensors
    if args.filter:
        tensors = {n: t for n, t in all_tensors.items() if _matches(n, args.filter)}
    root = _build(tensors, ordered)

    title = Text()
    title.append(os.path.basename(args.file), style="bold")
    title.append(f"  ({fmt})  ")
    title.append(f"{_count(root.count, 'tensor')}, {root.size:,} parameters, {_human(root.nbytes)} ({root.nbytes:,} bytes)")
    if args.filter:
        title.append(f"  — {root.count} of {len(all_tensors)} tensors match {' or '.join(args.filter)}")
    out.print(title)
    by_dtype: dict[str, list[int]] = {}
    for t in tensors.values():
        acc = by_dtype.setdefault(t.dtype, [0, 0, 0])
        acc[0] += 1
        acc[1] += t.size
        acc[2] += t.nbytes
    if by_dtype:
        out.print(Text("dtypes: " + "; ".join(
            f"{d} {_count(c, 'tensor')}, {s:,} params, {_human(b)}" for d, (c, s, b) in by_dtype.items()
        )))
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("shape", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    for label, node, collapsed in _rows(root, args.depth):
        if not node.children:
            assert node.leaf is not None
            shape = _shape(node.leaf.shape)
            dtype = node.leaf.dtype
        else:
            shape = f"({_count(node.count, 'tensor')})" if collapsed else ""
            dtype = next(iter(node.dtypes)) if len(node.dtypes) == 1 else "mixed"
            if not collapsed:
                dtype = ""
        table.add_row(Text(label), shape, dtype, f"{node.size:,}", _human(node.nbytes))
    if root.count:
        out.print(table)
    return 0


def _diff(args: argparse.Namespace, out: Any) -> int:
    from rich.text import Text

    a, _ = _header(args.a)
    b, _ = _header(args.b)
    only_a = [n for n in sorted(a, key=_sort_key) if n not in b]
    only_b = [n for n in sorted(b, key=_sort_key) if n not in a]
    changed = [n for n in sorted(a, key=_sort_key) if n in b and (a[n].shape != b[n].shape or a[n].dtype != b[n].dtype)]

    def spec(t: Any) -> str:
        return f"{t.dtype}{_shape(t.shape)}"

    for label, path, tensors in (("A", args.a, a), ("B", args.b, b)):
        size = sum(t.size for t in tensors.values())
        out.print(Text(f"{label}: {path}  ({_count(len(tensors), 'tensor')}, {size:,} parameters)"))
    if not (only_a or only_b or changed):
        out.print(Text(f"same structure: {_count(len(a), 'tensor')} with the same names, shapes and dtypes", style="green"))
        return 0
    sections: list[tuple[str, list[str], str, Callable[[str], str]]] = [
        ("only in A", only_a, "red", lambda n: f"- {n}  {spec(a[n])}"),
        ("only in B", only_b, "green", lambda n: f"+ {n}  {spec(b[n])}"),
        ("different shape or dtype", changed, "yellow", lambda n: f"~ {n}  {spec(a[n])} -> {spec(b[n])}"),
    ]
    for title, names, style, line in sections:
        if not names:
            continue
        out.print(Text(f"{title} ({len(names)}):", style="bold"))
        for n in names:
            out.print(Text("  " + line(n), style=style), soft_wrap=True)
    return 1


def _demo(args: argparse.Namespace, out: Any) -> int:
    if args.model == "crepe":
        from spruce._demo_crepe import demo as crepe_demo

        crepe_demo(out)
        return 0
    from spruce.models import minilm

    minilm.demo()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
