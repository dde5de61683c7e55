"""spruce.io: what load says when a checkpoint is not what it expects, and files changed under it.

- a directory that is not a sharded checkpoint;
- MismatchError messages: the dtype='like' hint, the names ``rename=`` produced;
- a file truncated in place by another process: read into memory (files up to
  ``COPY_BELOW`` bytes, or ``mmap=False``) it cannot disturb the arrays; mapped (larger files)
  touching the lost pages is SIGBUS, which the tests run in a fresh interpreter.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import spruce.io as sio
from helpers import run_python
from spruce.io import CheckpointError, MismatchError, _files

# -- a directory that is not a sharded checkpoint ----------------------------------------------------


@pytest.mark.parametrize("name", ["plain", "looks.safetensors", "looks.npz"])
def test_directory_without_index_says_so(tmp_path: Any, name: str) -> None:
    d = tmp_path / name
    d.mkdir()
    (d / "piece.safetensors").write_bytes(b"")
    for function in (sio.load, sio.read_header, sio.read_metadata, sio.read_info):
        with pytest.raises(IsADirectoryError) as info:
            function(str(d))
        assert info.value.errno == errno.EISDIR and info.value.filename == str(d)
        assert info.value.strerror == "Is a directory but not a sharded checkpoint (no index.json)"


# -- MismatchError messages ------------------------------------------------------------------------


def test_dtype_mismatch_suggests_dtype_like(tmp_path: Any) -> None:
    path = str(tmp_path / "a.safetensors")
    sio.save(path, {"w": np.ones(3, np.float32), "b": np.ones(2, np.float16), "s": np.ones(4, np.float32)})
    like = {"w": np.zeros(3, np.float64), "b": np.zeros(2, np.float32), "s": np.zeros(5, np.float64)}
    with pytest.raises(MismatchError) as info:
        sio.load(path, like)
    assert str(info.value) == (
        f"load: {path} does not fit like: b: like has float32[2], the file float16[2]; "
        "s: like has float64[5], the file float32[4]; w: like has float64[3], the file float32[3]; "
        "dtype='like' would cast 'b', 'w' to like's dtypes"  # not s: its shape differs too
    )
    assert [m[0] for m in info.value.mismatched] == ["b", "s", "w"]  # like's (sorted) order
    # one leaf: singular; a shape mismatch alone: no hint
    with pytest.raises(MismatchError, match=r"float32\[3\]; dtype='like' would cast 'w' to like's dtype$"):
        sio.load(path, {**like, "b": np.zeros(2, np.float16), "s": np.zeros(4, np.float32)})
    with pytest.raises(MismatchError) as info:
        sio.load(path, {"w": np.zeros(3, np.float32), "b": np.zeros(2, np.float16), "s": np.zeros(5, np.float32)})
    assert str(info.value).endswith("s: like has float32[5], the file float32[4]")
    # with dtype='like' the hint is not repeated; with another dtype= it is
    with pytest.raises(MismatchError) as info:
        sio.load(path, like, dtype="like")
    assert "would cast" not in str(info.value) and "s: like has float64[5]" in str(info.value)
    with pytest.raises(
        MismatchError, match=r"\(loaded as float16 by dtype=float16\); dtype='like' would cast 'w' to like's dtype$"
    ):
        sio.load(path, {"w": np.zeros(3, np.float32)}, dtype=np.float16, strict=False)
    # and the hint is right: dtype='like' loads what it names
    got = sio.load(path, {**like, "s": np.zeros(4, np.float64)}, dtype="like")
    assert got["w"].dtype == np.float64 and got["b"].dtype == np.float32


def test_name_mismatch_after_rename_lists_the_renamed_names(tmp_path: Any) -> None:
    path = str(tmp_path / "a.safetensors")
    sio.save(path, {"enc": {"x": np.ones(2), "y": np.ones(1)}, "w": np.ones(3)})
    like = {"enc": {"z": np.zeros(2), "y": np.zeros(1)}, "w": np.zeros(3)}
    with pytest.raises(MismatchError) as info:
        sio.load(path, like, rename={"enc.x": "enc.q"})
    assert str(info.value) == (
        f"load: {path} does not match like: missing from the file: 'enc.z'; in the file but not in "
        "like: 'enc.q' (stored as 'enc.x') (names as rename= gave them; strict=False loads what matches)"
    )
    # the attributes keep the file's names, as LoadResult does
    assert info.value.missing == ["enc.z"] and info.value.unexpected == ["enc.x"]
    assert sio.load(path, like, rename={"enc.x": "enc.q"}, strict=False).unexpected == ["enc.x"]
    # a name rename kept is shown once; a function's results too
    with pytest.raises(MismatchError, match=r"not in like: 'enc\.x' \(names as rename= gave them;"):
        sio.load(path, like, rename={"w": "w"})
    with pytest.raises(
        MismatchError, match=r"not in like: 'ENC\.X' \(stored as 'enc\.x'\), 'ENC\.Y' \(stored as 'enc\.y'\), 'W' \(stored as "
                             r"'w'\) "
    ):
        sio.load(path, like, rename=str.upper)
    # without rename=, the advice is to pass one
    with pytest.raises(
        MismatchError, match=r"not in like: 'enc\.x' \(pass rename= to map names, or strict=False to load what matches\)$"
    ):
        sio.load(path, like)


def test_many_renamed_unexpected_names_are_truncated(tmp_path: Any) -> None:
    path = str(tmp_path / "a.npz")
    sio.save(path, {f"t{i}": np.ones(1) for i in range(25)})
    with pytest.raises(MismatchError) as info:
        sio.load(path, {}, rename=lambda n: "r" + n)
    text = str(info.value)
    assert "'rt19' (stored as 't19') and 5 more (names as rename=" in text and "rt20" not in text
    assert len(info.value.unexpected) == 25


# -- files truncated in place ------------------------------------------------------------------------

_TRUNCATED = """
    import os, sys
    import numpy as np
    import spruce.io as sio
    from spruce.io import _files

    folder, threshold, mmap = sys.argv[1], sys.argv[2], sys.argv[3] == "mmap"
    if threshold != "default":
        _files.COPY_BELOW = int(threshold)
    w = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    for name in ("a.safetensors", "a.npz", "sharded"):
        path = os.path.join(folder, name)
        (sio.save_sharded if name == "sharded" else sio.save)(path, {"w": w})
        got = sio.load(path, mmap=mmap)["w"]
        for root, _, files in os.walk(path) if name == "sharded" else [("", [], [path])]:
            for f in files:
                if not f.endswith(".json"):
                    os.truncate(os.path.join(root, f), 0)  # as another process writing in place
        print(name, bool((got == w).all()), flush=True)
"""


def _truncate_after_load(folder: Any, threshold: str, mode: str) -> Any:
    argv = f"import sys; sys.argv = ['-', {str(folder)!r}, {threshold!r}, {mode!r}]\n"
    return run_python(argv + textwrap.dedent(_TRUNCATED))


@pytest.mark.skipif(sys.platform == "win32", reason="a mapped file cannot be truncated on Windows")
def test_small_files_are_read_into_memory_and_survive_truncation(tmp_path: Any) -> None:
    """Files of at most COPY_BELOW bytes are copied whole (default mmap=True), and mmap=False
    reads every array: truncating the file after load leaves the arrays intact."""
    assert _files.COPY_BELOW == 64 << 20
    for threshold, mode in (("default", "mmap"), ("0", "copy")):
        proc = _truncate_after_load(tmp_path, threshold, mode)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split("\n") == ["a.safetensors True", "a.npz True", "sharded True", ""]


@pytest.mark.skipif(sys.platform == "win32", reason="a mapped file cannot be truncated on Windows")
def test_mapped_file_truncated_in_place_is_sigbus(tmp_path: Any) -> None:
    """The documented hazard of files above COPY_BELOW loaded with mmap=True: touching pages a
    truncation cut off kills the process with SIGBUS (here with the threshold lowered to 0)."""
    proc = _truncate_after_load(tmp_path, "0", "mmap")
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""


@pytest.mark.parametrize("mmap", [True, False])
def test_file_truncated_while_being_read(tmp_path: Any, monkeypatch: Any, mmap: bool) -> None:
    """A file cut short after its header was read and the file opened again for the data: a
    CheckpointError naming the file and how much is missing, not a short array."""
    path = str(tmp_path / "a.safetensors")
    sio.save(path, {"w": np.arange(1000, dtype=np.float32)})
    size = os.path.getsize(path)
    real = _files.open_same

    def cut(parsed: Any) -> Any:
        f = real(parsed)
        os.truncate(parsed.path, size - 100)
        return f

    monkeypatch.setattr(_files, "open_same", cut)
    with pytest.raises(CheckpointError) as info:
        sio.load(path, mmap=mmap)
    # (mmap=True: the whole small file is read; mmap=False: w, whose data ends the file)
    assert str(info.value) == (
        f"{path}: the file was truncated while being read ({size - 100} of the {size} bytes needed "
        "are there); load it again"
    )
    assert info.value.path == path
