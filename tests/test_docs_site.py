"""The documentation site (mkdocs.yml, docs/), built once for this module with ``mkdocs build
--strict`` into a temporary folder, then checked as a reader meets it:

- the quick-start page and the API entry of ``spruce.tree.map`` open in Debian's headless
  ``chromium`` (the helper tests/test_view.py uses) and render: the title, every code block of
  the source page highlighted and given its copy button by the theme's script, the signature and
  the docstring of ``map`` as the source writes them;
- no internal link or ``#anchor`` of any built page is broken (the HTML parsed with the standard
  library, relative links resolved against the built files);
- every name in the ``__all__`` of every public module of ``src/spruce`` has an entry (an
  ``id``) in the generated API reference.

The build needs the ``docs`` extra (``pip install 'spruce[docs]'``); ``make test`` installs it
into ``.venv``, the Python 3.11 environment, where this file runs.  Elsewhere (the other
interpreters of the matrix) it skips, naming the extra.
"""

from __future__ import annotations

import ast
import html.parser
import importlib.util
import os
import posixpath
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from helpers import browser, png_size

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "spruce"

pytestmark = pytest.mark.slow

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_LINKS = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src", "iframe": "src"}


class Node:
    """An element of a parsed page: its tag, attributes, children and text."""

    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def walk(self) -> Any:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find(self, *, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return [n for n in self.walk() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)]

    def text(self) -> str:
        """The text inside, whitespace runs collapsed to one space."""
        parts: list[str] = []
        stack: list[Node | str] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                parts.append(item)
            else:
                stack.extend(reversed(item.children))
        return " ".join("".join(parts).split())


class _TreeBuilder(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in _VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:  # an end tag with no open element is ignored
            self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def parse(text: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


@pytest.fixture(scope="module")
def site(tmp_path_factory: Any) -> Path:
    """The site, built from this checkout with ``mkdocs build --strict`` (a warning fails it)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: the site needs the docs extra (pip install 'spruce[docs]'), "
                    "which make test installs into .venv only")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert (out / "index.html").is_file()
    return Path(out)


def _pages(site: Path) -> dict[str, Node]:
    return {p.relative_to(site).as_posix(): parse(p.read_text(encoding="utf-8")) for p in sorted(site.rglob("*.html"))}


# -- in the browser --------------------------------------------------------------------------------


def _rendered(site: Path, page: str, tmp_path: Path) -> Node:
    done = browser(tmp_path, "--dump-dom", (site / page).as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = parse(done.stdout)
    (html_el,) = dom.find(tag="html")
    assert "js" in html_el.classes, "the theme's script did not run"
    return dom


def _code_blocks(dom: Node) -> list[Node]:
    return [n for n in dom.find(tag="div", cls="highlight") if "doc-signature" not in n.classes]


def _assert_highlighted(block: Node) -> None:
    (code,) = block.find(tag="code")
    tokens = [n for n in code.find(tag="span") if n.classes]
    assert len(tokens) >= 2, f"a code block without highlighted tokens: {block.text()[:200]!r}"


def test_quickstart_renders_in_chromium(site: Path, tmp_path: Path) -> None:
    source = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    fenced = sum(1 for line in source.splitlines() if re.match(r"```\w", line))
    dom = _rendered(site, "quickstart/index.html", tmp_path)
    (title,) = dom.find(tag="title")
    assert title.text() == "Quick start - spruce"
    assert [h.text().rstrip("¶").strip() for h in dom.find(tag="h1")] == ["Quick start"]
    blocks = _code_blocks(dom)
    assert fenced >= 3 and len(blocks) == fenced
    for block in blocks:
        _assert_highlighted(block)
    # the theme's script gives each code block its copy button
    assert len(dom.find(cls="md-code__button")) == fenced
    text = dom.text()
    assert "tree.map(lambda p, g: p - 0.1 * g, params, grads)" in text
    assert "class SimpleNN(spruce.Module):" in text


def _source_function(name: str) -> ast.FunctionDef:
    """The one top-level ``def name`` of the engine (src/spruce/_tree), as written."""
    found = [node for path in sorted((SRC / "_tree").glob("*.py")) for node in ast.parse(path.read_text()).body
             if isinstance(node, ast.FunctionDef) and node.name == name]
    assert len(found) == 1, [ast.dump(f)[:80] for f in found]
    return found[0]


def _signature(fn: ast.FunctionDef) -> str:
    """``name(params) -> returns``, spaces, trailing commas and quote styles ignored."""
    head = ast.FunctionDef(name=fn.name, args=fn.args, body=[ast.Pass()], decorator_list=[], returns=fn.returns,
                           type_params=[], lineno=0, col_offset=0)
    text = ast.unparse(head).split("\n")[0].removeprefix("def ").removesuffix(":")
    return _squash(text)


def _squash(text: str) -> str:
    return re.sub(r",\)", ")", re.sub(r"\s+", "", text).replace("'", '"'))


def _prose(docstring: str) -> list[str]:
    """The paragraphs of a docstring before its first section or example, as rendered text."""
    out = []
    for para in docstring.split("\n\n"):
        if para.lstrip().startswith(">>>") or re.match(r"\s*\w+( \w+)?:\s*$", para.split("\n")[0]):
            break
        out.append(" ".join(para.replace("``", "").split()))
    return out


def test_api_entry_of_tree_map_renders_in_chromium(site: Path, tmp_path: Path) -> None:
    fn = _source_function("map")
    docstring = ast.get_docstring(fn)
    assert docstring
    paragraphs = _prose(docstring)
    assert len(paragraphs) >= 2 and paragraphs[0].startswith("Apply f to the leaves of tree")
    dom = _rendered(site, "reference/tree/index.html", tmp_path)
    (title,) = dom.find(tag="title")
    assert title.text() == "spruce.tree - spruce"
    (heading,) = [n for n in dom.walk() if n.attrs.get("id") == "spruce.tree.map"]
    assert heading.tag == "h2" and heading.text().rstrip("¶").strip() == "map"
    entry = heading.parent
    assert entry is not None and "doc-object" in entry.classes
    (signature,) = entry.find(cls="doc-signature")
    _assert_highlighted(signature)
    assert _squash(signature.text()) == _signature(fn)
    contents = next(n for n in entry.children if isinstance(n, Node) and "doc-contents" in n.classes)
    text = contents.text()
    for paragraph in paragraphs:
        assert paragraph in text
    assert "Raises:" in text and "ValueError" in text
    examples = _code_blocks(contents)
    assert examples and all(">>>" in b.text() for b in examples)
    for block in examples:
        _assert_highlighted(block)
    shot = tmp_path / "map.png"
    # the virtual time budget lets the theme's script and styles settle before the picture
    done = browser(tmp_path, "--window-size=1280,900", "--virtual-time-budget=3000", f"--screenshot={shot}",
                   (site / "reference/tree/index.html").as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert png_size(shot) == (1280, 900) and shot.stat().st_size > 30_000  # drawn text, not a blank page


# -- links and the API reference -------------------------------------------------------------------


def _ids(node: Node) -> set[str]:
    return {n.attrs["id"] for n in node.walk() if "id" in n.attrs} | {
        n.attrs["name"] for n in node.walk() if n.tag == "a" and "name" in n.attrs
    }


def test_no_broken_internal_link_or_anchor(site: Path) -> None:
    pages = _pages(site)
    assert len(pages) > 30
    ids = {name: _ids(root) for name, root in pages.items()}
    broken: list[str] = []
    checked = 0
    for name, root in pages.items():
        for node in root.walk():
            attr = _LINKS.get(node.tag)
            url = node.attrs.get(attr or "")
            if not url or urllib.parse.urlsplit(url).scheme or url.startswith("//"):
                continue  # no link, or one outside the site
            parts = urllib.parse.urlsplit(url)
            path = urllib.parse.unquote(parts.path)
            # a path from the root (404.html's links: it is served at any depth) is from the site's
            base = "" if path.startswith("/") else posixpath.dirname(name)
            target = posixpath.normpath(posixpath.join(base, path.lstrip("/"))) if path else name
            if target.startswith("../") or target == "..":
                broken.append(f"{name}: {url} leaves the site")
                continue
            file = site / target
            if path.endswith("/") or file.is_dir() or target == ".":
                file, target = file / "index.html", posixpath.join(target, "index.html").removeprefix("./")
            checked += 1
            if not file.is_file():
                broken.append(f"{name}: {url} -> {target} does not exist")
            elif parts.fragment and target.endswith(".html"):
                if urllib.parse.unquote(parts.fragment) not in ids[target]:
                    broken.append(f"{name}: {url} -> no id {parts.fragment!r} in {target}")
    assert checked > 1000
    assert not broken, "\n".join(broken[:50])


def public_modules() -> dict[str, list[str]]:
    """Every module of src/spruce whose dotted name has no part starting with ``_``, and its
    ``__all__`` (read from the source: a literal list, as type checkers require)."""
    out: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(part.startswith("_") for part in parts):
            continue
        names = [ast.literal_eval(node.value) for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)]
        assert len(names) == 1, f"{path}: a public module needs one literal __all__"
        out[".".join(parts)] = names[0]
    return out


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    modules = public_modules()
    assert {"spruce", "spruce.tree", "spruce.nn", "spruce.io", "spruce.models.minilm"} <= set(modules)
    documented = set().union(*(_ids(root) for name, root in _pages(site).items() if name.startswith("reference/")))
    missing = [f"{module}.{name}" for module, names in modules.items() for name in names
               if f"{module}.{name}" not in documented]
    undocumented_modules = [module for module in modules if module not in documented]
    assert not undocumented_modules, f"public modules without a page in the API reference: {undocumented_modules}"
    assert not missing, f"public names without an entry in the API reference: {missing}"
    assert sum(len(names) for names in modules.values()) > 250
