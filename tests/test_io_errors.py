"""spruce.io: what load says when a checkpoint is not what it expects.

- a directory that is not a sharded checkpoint;
- MismatchError messages: the dtype='like' hint, the names ``rename=`` produced.
"""

from __future__ import annotations

import errno
from typing import Any

import numpy as np
import pytest

import spruce.io as sio
from spruce.io import MismatchError

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
    with pytest.raises(MismatchError, match=r"\(loaded as float16 by dtype=float16\); dtype='like' would cast 'w' to like's dtype$"):
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
    with pytest.raises(MismatchError, match=r"not in like: 'ENC\.X' \(stored as 'enc\.x'\), 'ENC\.Y' \(stored as 'enc\.y'\), 'W' \(stored as 'w'\) "):
        sio.load(path, like, rename=str.upper)
    # without rename=, the advice is to pass one
    with pytest.raises(MismatchError, match=r"not in like: 'enc\.x' \(pass rename= to map names, or strict=False to load what matches\)$"):
        sio.load(path, like)


def test_many_renamed_unexpected_names_are_truncated(tmp_path: Any) -> None:
    path = str(tmp_path / "a.npz")
    sio.save(path, {f"t{i}": np.ones(1) for i in range(25)})
    with pytest.raises(MismatchError) as info:
        sio.load(path, {}, rename=lambda n: "r" + n)
    text = str(info.value)
    assert "'rt19' (stored as 't19') and 5 more (names as rename=" in text and "rt20" not in text
    assert len(info.value.unexpected) == 25
