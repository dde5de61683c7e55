"""The ``spruce`` command: ``spruce inspect FILE``, ``spruce diff A B``, ``spruce treemap FILE``,
``spruce demo``.

``main(argv)`` returns the exit code (the console script and ``python -m spruce`` pass it to
``sys.exit``): 0 on success, 1 when ``diff`` finds differences, 2 for a usage error (an unknown
flag, a missing argument: the error and the usage) or an error reading a file — printed as
one red line on stderr, never a traceback.

The demos live beside it: ``_demo_minilm`` (``spruce demo``), ``_demo_crepe`` (``spruce demo
crepe``), ``_demo_chat`` (``spruce demo chat``) and ``_demo_train`` (``spruce demo train``).  Output is printed with rich; when
stdout is not a terminal it is plain text, ``COLUMNS`` wide if set (160 otherwise).
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import os
import sys
from typing import Any, Callable, NamedTuple, NoReturn, Sequence

from .._arrays import format_bytes

__all__ = ["main"]

_DESCRIPTION = "Inspect, compare and draw pytree checkpoints (.safetensors, .npz, sharded directories, PyTorch .pt/.pth/.bin)."


_EPILOG = """\
usage of each command (spruce COMMAND --help for details):
  spruce inspect FILE [--depth N] [--filter GLOB]... [--html OUT.html [--stats]]
  spruce diff A B [--values] [--html OUT.html]
  spruce treemap FILE -o OUT.svg [--color-by {type,dtype}]
  spruce demo [minilm|crepe] [--out DIR]
  spruce demo chat [PROMPT] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
  spruce demo train [--dir DIR] [--steps N] [--save-every N] [--kill-at STEP] [--resume]"""


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


def version_text() -> str:
    """The line ``spruce --version`` prints: the version and which build of the engine is loaded.

    ``compiled`` (the mypyc-compiled engine) or ``pure Python``, with the reason when a source
    install fell back to pure Python because the C compiler failed (``setup.py`` records it).

    >>> import spruce
    >>> version_text().startswith(f"spruce {spruce.__version__} (")
    True
    """
    import importlib.resources

    import spruce

    if spruce.__compiled__:
        build = "compiled engine (mypyc)"
    else:
        build = "pure-Python engine"
        try:
            note = importlib.resources.files("spruce._tree").joinpath("_build.txt").read_text().strip()
        except (OSError, ValueError):
            note = ""
        if note.startswith("pure: "):
            build += f"; {note[len('pure: '):]}"
    return f"spruce {spruce.__version__} ({build}, Python {sys.version.split()[0]})"


def _parser() -> _Parser:
    p = _Parser(prog="spruce", description=_DESCRIPTION, epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=version_text(),
                   help="print spruce's version and which build of the engine is loaded, and exit")
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
    ins.add_argument("file", help="a .safetensors or .npz file, or a sharded checkpoint directory")
    ins.add_argument("--depth", type=int, default=None, metavar="N",
                     help="show N levels of the tree (deeper subtrees are summed); default: all")
    ins.add_argument("--filter", action="append", default=None, metavar="GLOB",
                     help="only tensors whose dotted name (or a prefix of it ending at a dot) "
                          "matches the glob, e.g. 'encoder.layer.0' or '*.bias'; repeatable")
    ins.add_argument("--html", metavar="OUT.html", default=None,
                     help="also write the tree as a self-contained HTML page (spruce.view.html)")
    ins.add_argument("--stats", action="store_true",
                     help="read the tensors' data for the page: mean, std, min, max, NaN/Inf "
                          "counts and a histogram per tensor (default: the header alone)")
    ins.set_defaults(func=_inspect)

    dif = sub.add_parser(
        "diff",
        help="compare the tensors of two checkpoints by name, shape and dtype (and values)",
        description=(
            "List the tensors only in A, only in B, and those whose shape or dtype differ; "
            "with --values also those whose values differ, with the max abs difference and "
            "the relative L2 change, the largest change first.  Exit code 0 if nothing "
            "compared differs, 1 if something does, 2 on error."
        ),
    )
    dif.add_argument("a", metavar="A", help="a .safetensors or .npz file, or a sharded checkpoint directory")
    dif.add_argument("b", metavar="B", help="a .safetensors or .npz file, or a sharded checkpoint directory")
    dif.add_argument("--values", action="store_true",
                     help="also compare the values of tensors of the same shape and dtype")
    dif.add_argument("--html", metavar="OUT.html", default=None,
                     help="also write a side-by-side HTML page of the differences (spruce.view.diff_html)")
    dif.set_defaults(func=_diff)

    tm = sub.add_parser(
        "treemap",
        help="draw a checkpoint's tensors as a treemap SVG, area proportional to bytes",
        description=(
            "Write a squarified treemap of the tensors of a checkpoint (from its header alone): "
            "one rectangle per tensor, area proportional to bytes, nested by dotted name, "
            "coloured by module name or dtype; each rectangle has data-path and data-bytes."
        ),
    )
    tm.add_argument("file", help="a .safetensors or .npz file")
    tm.add_argument("-o", "--output", required=True, metavar="OUT.svg", help="the SVG file to write")
    tm.add_argument("--color-by", choices=("type", "dtype"), default="type",
                    help="colour by module name (default) or by dtype")
    tm.set_defaults(func=_treemap)

    demo = sub.add_parser(
        "demo",
        help="run the main demo: the pretrained all-MiniLM-L6-v2 transformer as a spruce Module",
        description=(
            "Load all-MiniLM-L6-v2 as a spruce Module, embed sentences, save and reload it, and "
            "write its HTML page and treemap beside the saved checkpoint."
        ),
    )
    demo.add_argument("model", nargs="?", choices=("minilm", "crepe", "chat", "train"), default="minilm",
                      help="minilm (default), or crepe: the CREPE pitch tracker on a synthesised melody, "
                           "or chat: the SmolLM2-135M-Instruct language model answering PROMPT, streamed, "
                           "or train: a CNN trained on 8x8 digits over 8 host devices, checkpointed "
                           "asynchronously, killed and resumed (docs/guides/training.md)")
    demo.add_argument("prompt", nargs="?", default=None, metavar="PROMPT",
                      help="chat: the question (default: 'What is the capital of France?')")
    demo.add_argument("--out", metavar="DIR", default=None,
                      help="minilm: the folder for the saved checkpoint, page and treemap, kept "
                           "(default: a temporary folder, removed at the end)")
    demo.add_argument("--dir", metavar="DIR", default="spruce-train",
                      help="train: the folder of the checkpoints, history.json and curve.svg "
                           "(default: spruce-train)")
    demo.add_argument("--steps", type=int, default=300, metavar="N", help="train: training steps (default 300)")
    demo.add_argument("--save-every", type=int, default=50, metavar="N",
                      help="train: a checkpoint every N steps, saved asynchronously (default 50)")
    demo.add_argument("--kill-at", type=int, default=None, metavar="STEP",
                      help="train: start saving STEP, then kill the process with SIGKILL mid-save")
    demo.add_argument("--resume", action="store_true",
                      help="train: continue from the latest committed step in --dir")
    demo.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                      help="chat: the most tokens to generate (default 256)")
    demo.add_argument("--temperature", type=float, default=0.0, metavar="T",
                      help="chat: 0 (default) is greedy decoding; above 0, sampling")
    demo.add_argument("--top-k", type=int, default=None, metavar="K",
                      help="chat: sample among the K most likely tokens only")
    demo.add_argument("--top-p", type=float, default=None, metavar="P",
                      help="chat: sample among the most likely tokens whose probabilities reach P, in (0, 1]")
    demo.add_argument("--seed", type=int, default=0, metavar="S", help="chat: the sampling's seed (default 0)")
    demo.set_defaults(func=_demo)
    p.commands = {"inspect": ins, "diff": dif, "treemap": tm, "demo": demo}
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the ``spruce`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
      The exit code: 0 success, 1 ``diff`` found differences, 2 error (usage, a missing,
      unreadable or corrupted file), 130 interrupted.

    >>> main(['--help'])  # doctest: +ELLIPSIS
    usage: spruce [-h] [--version] COMMAND ...
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
            parser.error("a command is required: inspect, diff, treemap or demo")
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


def _read_info(path: str) -> Any:
    """The checkpoint's header, read once: ``spruce.io.CheckpointInfo(format, tensors, metadata)``."""
    import spruce.io

    return spruce.io.read_info(path)


def _load_named(path: str) -> Any:
    """The checkpoint's entries nested by their dotted names (memory-mapped, nothing read until
    used): the tree ``spruce.io.unflatten_names`` gives, with arrays for leaves."""
    import spruce.io

    return spruce.io.load(path, rename={})


def _write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (``spruce.io``'s atomic writer: a
    symlink's target is written, a FIFO, device or directory is refused)."""
    from spruce.io._files import atomic_write_text

    atomic_write_text(path, text)


def _inspect(args: argparse.Namespace, out: Any) -> int:
    from rich.table import Table
    from rich.text import Text

    import spruce.io

    if args.depth is not None and args.depth < 1:
        raise ValueError("--depth must be at least 1")
    if args.stats and args.html is None:
        raise ValueError("--stats reads the tensors for the page's statistics: give --html OUT.html too")
    info = _read_info(args.file)
    all_tensors, fmt = info.tensors, info.format
    ordered = "spruce.treedef" in info.metadata
    tensors = all_tensors
    if args.filter:
        tensors = {n: t for n, t in all_tensors.items() if _matches(n, args.filter)}
    root = _build(tensors, ordered)

    title = Text()
    title.append(os.path.basename(args.file), style="bold")
    title.append(f"  ({fmt})  ")
    title.append(f"{_count(root.count, 'tensor')}, {root.size:,} parameters, {format_bytes(root.nbytes)} ({root.nbytes:,} bytes)")
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
            f"{d} {_count(c, 'tensor')}, {s:,} params, {format_bytes(b)}" for d, (c, s, b) in by_dtype.items()
        )))
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("shape", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("share of bytes", no_wrap=True)
    split = _split(args.file, root) if fmt == "sharded" else None
    if split is not None:
        table.add_column("split", no_wrap=True)
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
        share = node.nbytes / root.nbytes if root.nbytes else 0.0
        cells: list[Any] = [Text(label), shape, dtype, f"{node.size:,}", format_bytes(node.nbytes), _bar(share)]
        if split is not None:
            cells.append(split.get(id(node), "") if not node.children else "")
        table.add_row(*cells)
    if root.count:
        out.print(table)
    if args.html is not None:
        import spruce.view

        tree = _load_named(args.file) if args.stats else spruce.io.unflatten_names(all_tensors)
        if args.stats and args.filter:
            kept = spruce.io.flatten_names(tree)
            tree = spruce.io.unflatten_names({n: x for n, x in kept.items() if n in tensors})
        elif args.filter:
            tree = spruce.io.unflatten_names(tensors)
        page = spruce.view.html(tree, title=os.path.basename(args.file), stats=args.stats)
        _write_text(args.html, page)
        out.print(Text(f"wrote {args.html} ({format_bytes(len(page.encode()))})"))
    return 0


def _split(path: str, root: _Node) -> dict[int, str]:
    """How each tensor of a sharded checkpoint directory is split into blocks, by the id of
    its row's node in ``root``."""
    from spruce.io import _sharded

    out: dict[int, str] = {}
    for name, text in _sharded.layout(_sharded.parse_dir(path)).items():
        node: _Node | None = root
        for part in name.split("."):
            node = None if node is None else node.children.get(part)
        if node is not None and node.children:
            node = node.children.get("")
        if node is not None:
            out[id(node)] = text
    return out
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(share: float, width: int = 12) -> Any:
    """A bar of ``width`` cells filled to ``share`` (0..1) in eighths of a cell, then the percent.

    >>> _bar(0.5, 4).plain, _bar(0.0, 4).plain
    ('██   50.0%', '      0.0%')
    """
    from rich.text import Text

    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, part = divmod(eighths, 8)
    cells = "█" * full + (_EIGHTHS[part] if part else "")
    text = Text(cells.ljust(width), style="blue")
    text.append(f" {share * 100:4.1f}%", style="dim")
    return text


def _diff(args: argparse.Namespace, out: Any) -> int:
    from rich.text import Text

    import spruce.view

    info_a, info_b = _read_info(args.a), _read_info(args.b)
    a, b = info_a.tensors, info_b.tensors
    # the headers, or with --values the files' entries (read by spruce.view.diff), by their names
    entries = spruce.view.diff(args.a if args.values else info_a, args.b if args.values else info_b, values=args.values)
    by_status: dict[str, list[Any]] = {}
    for e in entries:
        by_status.setdefault(e.status, []).append(e)

    for label, path, tensors in (("A", args.a, a), ("B", args.b, b)):
        size = sum(t.size for t in tensors.values())
        out.print(Text(f"{label}: {path}  ({_count(len(tensors), 'tensor')}, {size:,} parameters)"))
    removed = sorted(by_status.get("removed", []), key=lambda e: _sort_key(e.name))
    added = sorted(by_status.get("added", []), key=lambda e: _sort_key(e.name))
    reshaped = sorted(by_status.get("reshaped", []), key=lambda e: _sort_key(e.name))
    changed = by_status.get("changed", [])
    if not (removed or added or reshaped):
        out.print(Text(f"same structure: {_count(len(a), 'tensor')} with the same names, shapes and dtypes", style="green"))
    sections: list[tuple[str, list[Any], str, Callable[[Any], str]]] = [
        ("only in A", removed, "red", lambda e: f"- {e.name}  {e.a}"),
        ("only in B", added, "green", lambda e: f"+ {e.name}  {e.b}"),
        ("different shape or dtype", reshaped, "yellow", lambda e: f"~ {e.name}  {e.a} -> {e.b}"),
    ]
    if args.values:
        sections.append(("different values, largest relative change first", changed, "magenta",
                         lambda e: f"~ {e.name}  " + ("values differ (not numbers)" if math.isnan(e.max_abs) else
                                                      f"max abs diff {e.max_abs:.4g}, relative L2 change {e.rel_l2:.4g}")))
        sections.append(("values not readable", by_status.get("unreadable", []), "red", lambda e: f"! {e.name}  {e.note}"))
    for title, items, style, line in sections:
        if not items:
            continue
        out.print(Text(f"{title} ({len(items)}):", style="bold"))
        for e in items:
            out.print(Text("  " + line(e), style=style), soft_wrap=True)
    if args.values:
        same = len(by_status.get("same", []))
        out.print(Text(f"values: {len(changed)} of {len(changed) + same} comparable tensors differ",
                       style="magenta" if changed else "green"))
    if args.html is not None:
        page = spruce.view.diff_html(None, None, entries=entries, values=args.values,
                                     names=(os.path.basename(args.a), os.path.basename(args.b)))
        _write_text(args.html, page)
        out.print(Text(f"wrote {args.html} ({format_bytes(len(page.encode()))})"))
    return 1 if (removed or added or reshaped or changed) else 0


def _treemap(args: argparse.Namespace, out: Any) -> int:
    from rich.text import Text

    import spruce.io
    import spruce.view

    info = _read_info(args.file)
    svg = spruce.view.treemap(spruce.io.unflatten_names(info.tensors), color_by=args.color_by,
                              title=os.path.basename(args.file))
    _write_text(args.output, svg)
    out.print(Text(f"wrote {args.output} ({format_bytes(len(svg.encode()))}, {_count(len(info.tensors), 'tensor')})"))
    return 0


def _demo(args: argparse.Namespace, out: Any) -> int:
    if args.prompt is not None and args.model != "chat":
        raise ValueError(f"demo {args.model}: unexpected argument {args.prompt!r} (a PROMPT is for `spruce demo chat`)")
    if args.model == "chat":
        from spruce.cli import _demo_chat

        prompt = _demo_chat.DEFAULT_PROMPT if args.prompt is None else args.prompt
        _demo_chat.run(out, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                       top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        return 0
    if args.model == "train":
        from spruce.cli import _demo_train

        argv = ["--dir", args.dir, "--steps", str(args.steps), "--save-every", str(args.save_every)]
        argv += (["--kill-at", str(args.kill_at)] if args.kill_at is not None else []) + (["--resume"] if args.resume else [])
        return _demo_train.run(out, directory=args.dir, steps=args.steps, save_every=args.save_every,
                               kill_at=args.kill_at, resume=args.resume, argv=argv)
    if args.model == "crepe":
        from spruce.cli._demo_crepe import demo as crepe_demo

        crepe_demo(out)
        return 0
    from spruce.cli import _demo_minilm as demo

    demo.run(out, out_dir=args.out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
