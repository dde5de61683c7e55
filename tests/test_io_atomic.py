"""spruce.io writes atomically: a save killed at any point, in a subprocess, leaves the old file
whole; temporary files are named, placed and cleaned up; permissions follow the umask."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import stat
from typing import Any

import numpy as np
import pytest

import spruce.io as sio
from io_helpers import assert_same, read_bytes, umask, write_bytes
from spruce.io import CheckpointError

# ================================================================================================
# Atomic writes
# ================================================================================================


def test_failed_write_keeps_the_old_file(path: str, monkeypatch: Any, fmt: str) -> None:
    old = {"w": np.arange(10.0)}
    sio.save(path, old)
    before = read_bytes(path)
    from spruce.io import _npz, _safetensors

    module = _safetensors if fmt == "safetensors" else _npz
    real = module.write

    def half_then_fail(tmp: str, *args: Any) -> None:
        real(tmp, *args)
        with open(tmp, "r+b") as f:
            f.truncate(os.path.getsize(tmp) // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "write", half_then_fail)
    with pytest.raises(OSError, match="No space left") as info:
        sio.save(path, {"w": np.ones(1000)})
    assert info.value.errno == errno.ENOSPC and info.value.filename == path
    assert read_bytes(path) == before
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # temp file removed
    monkeypatch.undo()
    assert_same(sio.load(path), old)


def test_safetensors_package_errors_become_checkpoint_errors(tmp_path: Any, monkeypatch: Any) -> None:
    import safetensors

    p = str(tmp_path / "a.safetensors")
    sio.save(p, {"a": np.ones(1)})
    before = read_bytes(p)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise safetensors.SafetensorError("simulated refusal")

    monkeypatch.setattr(safetensors, "serialize_file", refuse)
    with pytest.raises(CheckpointError, match="could not write the file: simulated refusal") as info:
        sio.save(p, {"a": np.zeros(1)})
    assert info.value.path == p and read_bytes(p) == before
    assert os.listdir(tmp_path) == ["a.safetensors"]


def _assert_unchanged(path: str, before: bytes) -> None:
    assert read_bytes(path) == before
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temporary file


def test_disk_full_is_an_oserror_in_both_formats(path: str, fmt: str, monkeypatch: Any) -> None:
    """A full disk, as each format's writer meets it: the safetensors package reports it as a
    SafetensorError (its real message), NumPy's .npy writer as an OSError from a half-written
    member.  Both come out as OSError(ENOSPC) naming the target, the old file intact."""
    import safetensors

    sio.save(path, {"w": np.arange(3.0)})
    before = read_bytes(path)
    if fmt == "safetensors":
        def full(specs: Any, tmp: str, metadata: Any = None) -> None:
            with open(tmp, "wb") as f:
                f.write(b"partial")
            raise safetensors.SafetensorError(
                f'Error while serializing: I/O error: No space left on device (os error 28) at path "{tmp}"'
            )

        monkeypatch.setattr(safetensors, "serialize_file", full)
    else:
        real = np.lib.format.write_array

        def full(fp: Any, arr: Any, *args: Any, **kwargs: Any) -> None:
            real(fp, arr[: len(arr) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(np.lib.format, "write_array", full)
    with pytest.raises(OSError) as info:
        sio.save(path, {"w": np.ones(1000)})
    assert type(info.value) is OSError and not isinstance(info.value, ValueError)
    assert info.value.errno == errno.ENOSPC and info.value.filename == path
    assert str(info.value) == f"[Errno 28] No space left on device: {path!r}"
    _assert_unchanged(path, before)


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_real_write_error_is_an_oserror_in_both_formats(path: str) -> None:
    """A real I/O error, no mocks: a file size limit (RLIMIT_FSIZE) makes the writes of both
    writers fail with EFBIG."""
    import resource

    sio.save(path, {"w": np.arange(3.0)})
    before = read_bytes(path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        with pytest.raises(OSError) as info:
            sio.save(path, {"w": np.ones(100_000)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert info.value.errno == errno.EFBIG and info.value.filename == path
    _assert_unchanged(path, before)


def test_save_errors_name_the_target_not_the_temporary_file(tmp_path: Any, fmt: str) -> None:
    missing = str(tmp_path / "no-such-folder" / f"a.{fmt}")
    with pytest.raises(FileNotFoundError) as info:
        sio.save(missing, {"a": np.ones(1)})
    assert info.value.filename == missing and info.value.filename2 is None
    folder = tmp_path / f"folder.{fmt}"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info2:
        sio.save(str(folder), {"a": np.ones(1)})
    assert info2.value.filename == str(folder) and ".tmp" not in str(info2.value)
    assert sorted(os.listdir(tmp_path)) == [f"folder.{fmt}"] and os.listdir(folder) == []


def test_file_replaced_between_header_and_data(path: str, monkeypatch: Any) -> None:
    """The data is mapped from the very file whose header was validated: a file replaced in
    between (another process saving) is detected instead of mixing two files."""
    from spruce.io import _api

    sio.save(path, {"w": np.zeros(4)})
    real = _api._parse

    def parse_then_replace(p: Any) -> Any:
        parsed = real(p)
        sio.save(path, {"w": np.ones(4)})
        return parsed

    monkeypatch.setattr(_api, "_parse", parse_then_replace)
    with pytest.raises(CheckpointError, match="changed while being read"):
        sio.load(path)


def test_permissions_are_kept(path: str) -> None:
    sio.save(path, {"a": np.ones(1)})
    os.chmod(path, 0o640)
    sio.save(path, {"a": np.zeros(1)})
    assert os.stat(path).st_mode & 0o777 == 0o640
    with umask(0o077):
        sio.save(path, {"a": np.zeros(1)})
    assert os.stat(path).st_mode & 0o777 == 0o640  # an existing file's mode, not the umask


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_new_files_respect_the_umask(tmp_path: Any, fmt: str, mask: int) -> None:
    """A new file gets the mode open() and np.save give it, 0o666 minus the umask (the
    safetensors package itself creates 0o600 files)."""
    p = str(tmp_path / f"new.{fmt}")
    with umask(mask):
        sio.save(p, {"a": np.ones(1)})
        with open(tmp_path / "reference", "wb"):
            pass
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(os.stat(p).st_mode) == stat.S_IMODE(os.stat(tmp_path / "reference").st_mode)


def test_file_names_up_to_the_limit(tmp_path: Any, fmt: str) -> None:
    """The temporary name does not grow with the target's: a 250- and a 255-character name
    (the usual file name limit) save."""
    for length in (250, 255):
        name = "n" * (length - len(fmt) - 1) + "." + fmt
        assert len(name) == length
        p = str(tmp_path / name)
        sio.save(p, {"a": np.arange(3)})
        sio.save(p, {"a": np.arange(4)})  # over an existing file too
        assert np.array_equal(sio.load(p)["a"], np.arange(4))
        os.unlink(p)
    assert os.listdir(tmp_path) == []


def test_bytes_and_pathlike_paths(tmp_path: Any, fmt: str) -> None:
    as_str = str(tmp_path / f"ckpt-ü.{fmt}")
    for p in (os.fsencode(as_str), pathlib.Path(as_str)):
        sio.save(p, {"a": np.ones(2), "n": 1})
        assert list(sio.read_header(p)) == ["a"]
        assert "spruce.treedef" in sio.read_metadata(p)
        assert sio.load(p)["n"] == 1 and sio.load(p, like={"a": np.zeros(2), "n": 0})["n"] == 1
    with pytest.raises(CheckpointError) as info:
        write_bytes(as_str, b"junk")
        sio.load(os.fsencode(as_str))
    assert info.value.path == as_str  # errors name the decoded str path
    for function in (lambda x: sio.save(x, {}), sio.load, sio.read_header, sio.read_metadata):
        with pytest.raises(TypeError, match=r"path must be a str, bytes or os.PathLike object, not int"):
            function(3)
