"""spruce.io on URLs: object stores through fsspec.

Against a real S3 API (moto's server on a loopback port, s3fs as the fsspec backend) and
fsspec's in-memory filesystem; ``countmem://`` and ``counts3://`` (cloud_helpers.py) are those
same filesystems with a log of the byte ranges read and the objects written.  Nothing of
spruce is replaced.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import uuid
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import fsspec

import cloud_helpers as ch
import spruce.io as sio
from io_helpers import assert_same
from spruce.io import CheckpointError

BUCKET = "spruce-tests"


@pytest.fixture(scope="module")
def s3() -> Any:
    """storage_options reaching moto's S3 server (started once for this module)."""
    ch.register_counting_s3()
    with ch.moto_s3(BUCKET) as options:
        yield options


def _prefix() -> str:
    return uuid.uuid4().hex[:12]


def _tree() -> dict[str, Any]:
    return {
        "embed": np.arange(64 * 32, dtype=np.float32).reshape(64, 32),
        "layers": [{"w": np.full((4, 4), i, np.int16), "b": np.ones(4, np.float64)} for i in range(2)],
        "step": 12,
        "name": "tiny",
        "hole": None,
    }


def _memfs() -> Any:
    return fsspec.filesystem("memory")


# -- local paths, fsspec missing, schemes ----------------------------------------------------------


@pytest.mark.slow  # a subprocess (about 2 s)
def test_local_paths_need_no_fsspec_and_urls_say_how_to_get_it(tmp_path: Any) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["fsspec"] = None  # as if not installed
        import numpy as np, spruce.io as sio
        path = {str(tmp_path / "m.safetensors")!r}
        sio.save(path, {{"w": np.arange(3.0)}})
        sio.save_sharded({str(tmp_path / "d")!r}, {{"w": np.arange(3.0)}})
        assert sio.load(path)["w"].tolist() == [0.0, 1.0, 2.0]
        assert sio.load({str(tmp_path / "d")!r})["w"].tolist() == [0.0, 1.0, 2.0]
        for call in (lambda: sio.save("s3://b/m.safetensors", {{}}), lambda: sio.load("memory://x.npz")):
            try:
                call()
            except ImportError as e:
                print("ImportError:", e)
        """
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(__file__), "..", "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert all("needs fsspec" in line and "pip install 'spruce[cloud]'" in line for line in lines), proc.stdout


def test_unknown_scheme_is_one_clear_error() -> None:
    for call in (
        lambda: sio.save("nosuchscheme://b/m.safetensors", {"w": np.zeros(2)}),
        lambda: sio.save_sharded("nosuchscheme://b/ckpt", {"w": np.zeros(2)}),
        lambda: sio.load("nosuchscheme://b/m.safetensors"),
        lambda: sio.read_info("nosuchscheme://b/ckpt"),
    ):
        with pytest.raises(ValueError, match="URL scheme 'nosuchscheme'") as err:
            call()
        assert "index.json" not in str(err.value)
    # a scheme fsspec knows, without its backend installed
    if importlib.util.find_spec("gcsfs") is None:
        with pytest.raises(ImportError, match=r"gs:// scheme needs .*gcsfs"):
            sio.load("gs://bucket/m.safetensors")


def test_file_urls_are_local_paths(tmp_path: Any) -> None:
    path = tmp_path / "m.safetensors"
    sio.save(f"file://{path}", _tree())
    assert os.path.isfile(path) and not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert_same(sio.load(f"file://{path}"), _tree())
    sio.save_sharded(f"file://{tmp_path / 'd'}", _tree())
    assert_same(sio.load(str(tmp_path / "d")), _tree())


def test_bad_storage_options() -> None:
    with pytest.raises(TypeError, match="storage_options must be a mapping"):
        sio.save("memory://m.npz", {}, storage_options=["key"])  # type: ignore[arg-type]


# -- memory:// -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["safetensors", "npz"])
def test_memory_round_trip_file(suffix: str) -> None:
    url = f"memory://{_prefix()}/model.{suffix}"
    sio.save(url, _tree(), metadata={"run": "a"})
    assert_same(sio.load(url), _tree())
    info = sio.read_info(url)
    assert info.format == suffix and info.metadata["run"] == "a"
    assert list(info.tensors) == ["embed", "layers.0.w", "layers.0.b", "layers.1.w", "layers.1.b"]
    assert sio.read_header(url)["embed"].shape == (64, 32) and sio.read_metadata(url)["run"] == "a"


def test_memory_round_trip_sharded_and_commit_order() -> None:
    prefix = _prefix()
    url = f"countmem://{prefix}/ckpt"
    ch.clear()
    sio.save_sharded(url, _tree(), metadata={"k": "v"})
    # one piece, then the index: the index is the last object written
    assert [w.rsplit("/", 1)[-1].split("-", 1)[-1] for w in ch.WRITES] == ["00000-of-00001.safetensors", "index.json"]
    assert_same(sio.load(url), _tree())
    first = set(_memfs().ls(f"/{prefix}/ckpt", detail=False))
    # saving again replaces the checkpoint and removes the older piece, after the new index
    tree = _tree()
    tree["step"] = 13
    sio.save_sharded(url, tree)
    second = set(_memfs().ls(f"/{prefix}/ckpt", detail=False))
    assert len(second) == 2 and len(first & second) == 1  # (index.json)
    assert sio.load(url)["step"] == 13


def test_inspect_reads_urls(capsys: Any) -> None:
    from spruce.cli import main

    url = f"memory://{_prefix()}/model.safetensors"
    sio.save(url, _tree())
    assert main(["inspect", url]) == 0
    out = capsys.readouterr().out
    assert "model.safetensors" in out and "embed" in out and "5 tensors" in out
    sio.save_sharded(url[: -len("/model.safetensors")] + "/ckpt", _tree())
    assert main(["inspect", url[: -len("/model.safetensors")] + "/ckpt"]) == 0
    out = capsys.readouterr().out
    assert "(sharded)" in out and "5 tensors" in out


# -- a real S3 API (moto) ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["safetensors", "npz"])
def test_s3_round_trip_file(s3: dict[str, Any], suffix: str) -> None:
    url = f"s3://{BUCKET}/{_prefix()}/model.{suffix}"
    sio.save(url, _tree(), metadata={"run": "b"}, storage_options=s3)
    assert_same(sio.load(url, storage_options=s3), _tree())
    assert_same(sio.load(url, storage_options=s3, mmap=False), _tree())
    assert sio.read_info(url, storage_options=s3).metadata["run"] == "b"
    like = _tree()
    like["embed"] = np.zeros((64, 32), np.float32)
    assert_same(sio.load(url, like, storage_options=s3), _tree())


def test_s3_round_trip_sharded(s3: dict[str, Any]) -> None:
    url = f"s3://{BUCKET}/{_prefix()}/ckpt"
    sio.save_sharded(url, _tree(), storage_options=s3)
    assert_same(sio.load(url, storage_options=s3), _tree())
    assert sio.read_info(url, storage_options=s3).format == "sharded"
    fs = fsspec.filesystem("s3", **s3)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url, detail=False, refresh=True))
    assert len(names) == 2 and names[-1] == "index.json"


def test_s3_reads_fetch_the_header_then_only_the_tensors_asked(s3: dict[str, Any]) -> None:
    big = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)  # 2 MiB
    small = np.arange(10, dtype=np.int64)
    key = f"{BUCKET}/{_prefix()}/model.safetensors"
    sio.save(f"s3://{key}", {"big": big, "small": small}, storage_options=s3)
    ch.clear()
    assert set(sio.read_header(f"counts3://{key}", storage_options=s3)) == {"big", "small"}
    header = ch.fetched()
    assert 0 < header <= 64 << 10  # one readahead block at most, never the tensors
    ch.clear()
    res = sio.load(f"counts3://{key}", {"small": np.zeros(10, np.int64)}, strict=False, storage_options=s3)
    np.testing.assert_array_equal(res.tree["small"], small)
    assert res.unexpected == ["big"]
    assert ch.fetched() <= 2 * (64 << 10)  # the header, and the 80 bytes of 'small': not 'big'
    ch.clear()
    np.testing.assert_array_equal(sio.load(f"counts3://{key}", storage_options=s3)["big"], big)
    assert big.nbytes <= ch.fetched() <= big.nbytes + 2 * (64 << 10)


def test_s3_missing_objects(s3: dict[str, Any]) -> None:
    url = f"s3://{BUCKET}/{_prefix()}/nothing.safetensors"
    with pytest.raises(FileNotFoundError) as err:
        sio.load(url, storage_options=s3)
    assert "nothing.safetensors" in str(err.value)
    # a sharded checkpoint whose piece is gone
    ckpt = f"s3://{BUCKET}/{_prefix()}/ckpt"
    sio.save_sharded(ckpt, _tree(), storage_options=s3)
    fs = fsspec.filesystem("s3", **s3)
    piece = next(p for p in fs.ls(ckpt, detail=False, refresh=True) if p.endswith(".safetensors"))
    fs.rm(piece)
    with pytest.raises(CheckpointError, match=f"piece file '{piece.rsplit('/', 1)[-1]}' is missing"):
        sio.load(ckpt, storage_options=s3)


def test_s3_truncated_object_names_it(s3: dict[str, Any]) -> None:
    url = f"s3://{BUCKET}/{_prefix()}/model.safetensors"
    sio.save(url, _tree(), storage_options=s3)
    fs = fsspec.filesystem("s3", **s3)
    data = fs.cat_file(url)
    fs.pipe_file(url, data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated") as err:
        sio.load(url, storage_options=s3)
    assert url in str(err.value)
    # a piece of a sharded checkpoint
    ckpt = f"s3://{BUCKET}/{_prefix()}/ckpt"
    sio.save_sharded(ckpt, _tree(), storage_options=s3)
    piece = next(p for p in fs.ls(ckpt, detail=False, refresh=True) if p.endswith(".safetensors"))
    fs.pipe_file(piece, fs.cat_file(piece)[:-8])
    with pytest.raises(CheckpointError, match=f"piece file '{piece.rsplit('/', 1)[-1]}' is unreadable: .*truncated"):
        sio.read_info(ckpt, storage_options=s3)


def test_s3_failed_saves_leave_nothing(s3: dict[str, Any]) -> None:
    fs = fsspec.filesystem("s3", **s3)
    prefix = _prefix()
    # a leaf that cannot be stored: refused before anything is written
    with pytest.raises(ValueError, match="'f'"):
        sio.save(f"s3://{BUCKET}/{prefix}/m.safetensors", {"f": object()}, storage_options=s3)
    with pytest.raises(ValueError, match="'f'"):
        sio.save_sharded(f"s3://{BUCKET}/{prefix}/ckpt", {"f": object()}, storage_options=s3)
    assert not fs.exists(f"{BUCKET}/{prefix}")
    # a bucket that does not exist: the upload fails, naming the URL
    url = f"s3://no-such-bucket-{prefix}/m.safetensors"
    with pytest.raises(OSError, match=f"no-such-bucket-{prefix}"):
        sio.save(url, _tree(), storage_options=s3)
    with pytest.raises(OSError, match=f"no-such-bucket-{prefix}"):
        sio.save_sharded(f"s3://no-such-bucket-{prefix}/ckpt", _tree(), storage_options=s3)
    # an existing checkpoint stays as it was when a new save fails
    url = f"s3://{BUCKET}/{prefix}/keep.safetensors"
    sio.save(url, _tree(), storage_options=s3)
    with pytest.raises(ValueError):
        sio.save(url, {"f": object()}, storage_options=s3)
    assert_same(sio.load(url, storage_options=s3), _tree())


def test_sharded_save_whose_index_cannot_be_written_leaves_no_piece(tmp_path: Any) -> None:
    d = tmp_path / "ckpt"
    os.makedirs(d / "index.json")  # the commit cannot replace a directory
    with pytest.raises(IsADirectoryError):
        sio.save_sharded(str(d), _tree())
    assert os.listdir(d) == ["index.json"]


@pytest.mark.parametrize("store", ["memory", "s3"])
def test_remote_store_operations(s3: dict[str, Any], store: str) -> None:
    from spruce.io._storage import RemoteStore

    base = f"s3://{BUCKET}/{_prefix()}/run" if store == "s3" else f"memory://{_prefix()}/run"
    st = RemoteStore(base, s3 if store == "s3" else None)
    assert st.list(base) == [] and not st.exists(st.join(base, "step_1"))
    st.makedirs(base)
    st.write_small(st.join(base, "step_1/checkpoint.safetensors"), b"data")
    st.write_small(st.join(base, "step_1.commit"), b"{}")
    assert sorted(st.list(base)) == ["step_1", "step_1.commit"]
    assert st.is_dir(st.join(base, "step_1")) and not st.is_file(st.join(base, "step_1"))
    assert st.is_file(st.join(base, "step_1.commit")) and st.read_small(st.join(base, "step_1.commit"), 100) == b"{}"
    assert st.read_small(st.join(base, "step_1/checkpoint.safetensors"), 2) == b"da"
    st.remove_file(st.join(base, "step_1.commit"))
    st.remove_tree(st.join(base, "step_1"))
    st.remove_tree(st.join(base, "step_9"))  # (missing: nothing to do)
    assert st.list(base) == [] and not st.exists(st.join(base, "step_1"))
    with pytest.raises(FileNotFoundError, match=r"nothing\.commit"):
        st.read_small(st.join(base, "nothing.commit"), 10)


# -- CheckpointManager on a URL --------------------------------------------------------------------


def test_manager_on_memory_commits_with_the_marker_last() -> None:
    from spruce.io import CheckpointManager

    prefix = _prefix()
    url = f"countmem://{prefix}/run"
    ch.clear()
    with CheckpointManager(url, keep_last=2) as mgr:
        for step in (1, 2, 3):
            tree = _tree()
            tree["step"] = step
            mgr.save(step, tree, metrics={"loss": 1.0 / step})
        mgr.wait()
        assert mgr.steps() == [2, 3] and mgr.latest_step() == 3 and mgr.metrics(2) == {"loss": 0.5}
        assert mgr.restore()["step"] == 3 and mgr.restore(2)["step"] == 2
        assert_same(mgr.restore(3, like=_tree())["embed"], _tree()["embed"])
    # each step: its checkpoint, then its marker; no rename, no temporary name
    names = [w.removeprefix(f"/{prefix}/run/") for w in ch.WRITES]
    assert names == [f"step_{s}{part}" for s in (1, 2, 3) for part in ("/checkpoint.safetensors", ".commit")]
    assert sorted(_memfs().ls(f"/{prefix}/run", detail=False)) == [
        f"/{prefix}/run/{n}" for n in ("step_2", "step_2.commit", "step_3", "step_3.commit")
    ]
    with pytest.raises(FileNotFoundError, match=r"no committed step 1; committed steps: \[2, 3\]"):
        CheckpointManager(url).restore(1)


def test_manager_on_s3(s3: dict[str, Any]) -> None:
    from spruce.io import CheckpointManager

    url = f"s3://{BUCKET}/{_prefix()}/run"
    with CheckpointManager(url, keep_last=1, keep_best=1, metric="loss", storage_options=s3) as mgr:
        for step, loss in ((10, 0.5), (20, 0.9), (30, 0.7)):
            tree = _tree()
            tree["step"] = step
            mgr.save(step, tree, metrics={"loss": loss})
        mgr.wait()
        assert mgr.steps() == [10, 30] and mgr.best_step() == 10
    # another manager (a reader elsewhere) sees the same steps and restores them
    other = CheckpointManager(url, storage_options=s3)
    assert other.steps() == [10, 30] and other.restore()["step"] == 30
    assert_same(other.restore(10, like=_tree())["layers"], _tree()["layers"])
    fs = fsspec.filesystem("s3", **s3)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url, detail=False, refresh=True))
    assert names == ["step_10", "step_10.commit", "step_30", "step_30.commit"]


def test_manager_on_s3_leftovers_and_failures(s3: dict[str, Any]) -> None:
    from spruce.io import CheckpointManager

    url = f"s3://{BUCKET}/{_prefix()}/run"
    fs = fsspec.filesystem("s3", **s3)
    with CheckpointManager(url, storage_options=s3, blocking=True) as mgr:
        mgr.save(2, _tree())
    # an interrupted save of step 1 (older than the newest committed step) and of step 5 (newer:
    # perhaps another process's save in progress): neither is listed; a manager that starts
    # deletes only the older one
    fs.pipe_file(f"{url}/step_1/checkpoint.safetensors", b"partial")
    fs.pipe_file(f"{url}/step_5/checkpoint.safetensors", b"partial")
    fs.invalidate_cache()
    mgr = CheckpointManager(url, storage_options=s3)
    assert mgr.steps() == [2]
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url, detail=False, refresh=True))
    assert names == ["step_2", "step_2.commit", "step_5"]
    # saving step 5 replaces what an interrupted save of it left
    mgr.save(5, _tree())
    mgr.wait()
    assert mgr.steps() == [2, 5] and assert_same(mgr.restore(5), _tree()) is None
    # a save that fails (no such bucket) commits nothing, and the error comes from wait()
    bad = CheckpointManager(f"s3://no-such-bucket-{_prefix()}/run", storage_options=s3)
    pending = bad.save(1, _tree())
    assert pending is not None
    with pytest.raises(OSError, match="no-such-bucket"):
        pending.wait()
    assert bad.steps() == []
