"""spruce.io: what load says when a checkpoint is not what it expects.

- a directory that is not a sharded checkpoint.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest

import spruce.io as sio

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
