"""spruce.io against hostile input: files that lie, are truncated, pickled or huge in their
headers (never unpickled, nothing declared allocated), and paths that are not regular files
(OSErrors name the file)."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from typing import Any, Callable

import numpy as np
import pytest

import spruce.io as sio
import test_io  # noqa: F401  (its Block and Point classes, named by the stored structures below)
from helpers import SRC_DIR, fifo
from io_helpers import assert_same, read_bytes, write_bytes
from spruce.io import CheckpointError, MismatchError

# ================================================================================================
# Hostile files: never unpickle, never allocate what a header declares
# ================================================================================================


def st_bytes(header: Any, data: bytes = b"", raw: bytes | None = None) -> bytes:
    text = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}

SAFETENSORS_BAD: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "less than the 8-byte header length"),
    "short": (b"\x01\x02", "less than the 8-byte header length"),
    "huge_header_length": (struct.pack("<Q", 2**60) + b"{}", "header length field says 1152921504606846976 bytes"),
    "header_past_end": (struct.pack("<Q", 1000) + b"{}", "more than the 2 bytes that follow"),
    "not_utf8": (st_bytes(None, raw=b"\xff\xfe"), "corrupted header"),
    "not_json": (st_bytes(None, raw=b"{nope"), "corrupted header"),
    "not_object": (st_bytes([1, 2]), "not a JSON object"),
    "deep_json": (st_bytes(None, raw=b"[" * 100000 + b"]" * 100000), "corrupted header"),
    "duplicate_name": (st_bytes(None, raw=b'{"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
                                          b'"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'), "appears twice"),
    "truncated_data": (st_bytes(GOOD, b"\0" * 4), "data ends at byte 8 of a data section of 4 bytes"),
    "size_lies": (st_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "says shape"),
    "huge_shape": (st_bytes({"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}}, b"\0" * 8), "says shape"),
    "huge_offsets": (st_bytes({"a": {"dtype": "U8", "shape": [2**62], "data_offsets": [0, 2**62]}}, b"\0" * 8),
                     "data ends at byte"),
    "negative_offset": (st_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, b"\0" * 8),
                        "malformed data_offsets"),
    "overlap": (st_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "overlaps"),
    "gap": (st_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "gap of 4 bytes"),
    "trailing_bytes": (st_bytes(GOOD, b"\0" * 12), "cover 8 bytes but the data section has 12"),
    "unknown_dtype": (st_bytes({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\0"),
                      "unknown or unsupported dtype"),
    "bad_shape": (st_bytes({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}), "malformed shape"),
    "bool_shape": (st_bytes({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4), "malformed shape"),
    "extra_field": (st_bytes({"a": {**GOOD["a"], "x": 1}}, b"\0" * 8), "not a {dtype, shape, data_offsets}"),
    "bad_metadata": (st_bytes({"__metadata__": {"a": 1}}), "__metadata__ is not a str -> str"),
    "text_file": (b"# spruce\n\nPytrees are nested containers\n", "not a safetensors file"),
}


@pytest.mark.parametrize("case", list(SAFETENSORS_BAD), ids=list(SAFETENSORS_BAD))
def test_bad_safetensors(case: str, tmp_path: Any) -> None:
    data, match = SAFETENSORS_BAD[case]
    p = str(tmp_path / "bad.safetensors")
    with open(p, "wb") as f:
        f.write(data)
    tracemalloc.start()
    try:
        for fn in (sio.read_header, sio.load, sio.read_metadata):
            with pytest.raises(CheckpointError, match=match) as info:
                fn(p)
            assert info.value.path == p and str(info.value).startswith(p + ": ")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000 + 4 * len(data)  # the declared sizes were never allocated


def test_truncated_copies_of_a_real_file(tmp_path: Any, fmt: str) -> None:
    p = str(tmp_path / f"a.{fmt}")
    sio.save(p, {"w": np.arange(100, dtype=np.float32), "b": [np.ones(3)], "n": 1})
    data = read_bytes(p)
    q = str(tmp_path / f"t.{fmt}")
    for cut in sorted({0, 1, 7, 8, 9, 30, len(data) // 3, len(data) // 2, len(data) - 100, len(data) - 1}):
        with open(q, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(CheckpointError):
            sio.load(q)


def test_flipped_bytes_never_crash(tmp_path: Any, fmt: str) -> None:
    """Corrupting any byte gives CheckpointError, MismatchError or (the data bytes) a different
    value — never another exception."""
    p = str(tmp_path / f"a.{fmt}")
    tree = {"w": np.arange(6, dtype=np.float32), "t": (1, "s")}
    sio.save(p, tree)
    data = bytearray(read_bytes(p))
    q = str(tmp_path / f"c.{fmt}")
    rng = np.random.default_rng(1)
    for i in sorted(set(rng.integers(0, len(data), 150).tolist()) | set(range(0, min(64, len(data))))):
        bad = bytearray(data)
        bad[i] ^= 0x5A
        with open(q, "wb") as f:
            f.write(bad)
        try:
            sio.load(q)
        except (CheckpointError, MismatchError):
            pass


def _write_zip(path: str, members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compress) as z:
        for name, data in members.items():
            z.writestr(name, data)


def _npy(arr: np.ndarray[Any, Any]) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, allow_pickle=False)
    return b.getvalue()


def _npy_with_header(header: str, data: bytes) -> bytes:
    h = header.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


class _Boom:
    def __reduce__(self) -> Any:
        return (os.system, ("echo PWNED",))


def test_npz_pickled_array_is_refused_not_unpickled(tmp_path: Any) -> None:
    p = str(tmp_path / "evil.npz")
    b = io.BytesIO()
    np.lib.format.write_array(b, np.array([_Boom()], dtype=object), allow_pickle=True)
    _write_zip(p, {"x.npy": b.getvalue()})
    with pytest.raises(CheckpointError, match=r"Python objects .* never unpickles"):
        sio.load(p)


@pytest.mark.parametrize(
    "members, match",
    [
        ({"x.npy": b"not npy"}, "is not a .npy array"),
        ({"x.txt": _npy(np.ones(2))}, "is not a .npy array"),
        ({"x.npy": _npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
                                    b"\0" * 8)}, "says shape"),
        ({"x.npy": _npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", b"\0" * 8)}, "says shape"),
        ({"x.npy": _npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", b"")}, "corrupted .npy header"),
        ({"x.npy": _npy_with_header("{'descr': '<f4', 'shape': (2,)}", b"\0" * 8)}, "corrupted .npy header"),
        ({"x.npy": _npy_with_header("__import__('os').system('echo PWNED')", b"")}, "corrupted .npy header"),
        ({"x.npy": _npy_with_header("{'descr': 'nonsense', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8)},
         "unreadable dtype"),
        ({"x.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + b"{}"}, "header of 2147483648 bytes"),
        ({"x.npy": b"\x93NUMPY\x09\x00\x00\x00"}, "unknown .npy version"),
        ({"__metadata__.npy": _npy(np.frombuffer(b"{not json", np.uint8))}, "corrupted __metadata__.npy"),
        ({"__metadata__.npy": _npy(np.ones(2))}, "not a uint8 vector"),
    ],
)
def test_bad_npz(members: dict[str, bytes], match: str, tmp_path: Any) -> None:
    for compress in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        p = str(tmp_path / "bad.npz")
        _write_zip(p, members, compress)
        tracemalloc.start()
        try:
            with pytest.raises(CheckpointError, match=match):
                sio.load(p)
            with pytest.raises(CheckpointError, match=match):
                sio.read_header(p)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 2_000_000


def test_npz_zip_level_corruption(tmp_path: Any) -> None:
    p = str(tmp_path / "a.npz")
    np.savez_compressed(p, x=np.arange(1000.0))
    data = bytearray(read_bytes(p))
    # a compressed member declaring far more bytes than deflate can produce (a zip bomb)
    z = zipfile.ZipFile(p)
    info = z.infolist()[0]
    z.close()
    cd = data.rindex(b"PK\x01\x02")
    bomb = bytearray(data)
    bomb[cd + 24 : cd + 28] = struct.pack("<I", 0xFFFFFFF0)
    q = str(tmp_path / "bomb.npz")
    write_bytes(q, bytes(bomb))
    with pytest.raises(CheckpointError, match="more than deflate can produce"):
        sio.load(q)
    # a CRC error in a compressed member's data
    crc = bytearray(data)
    crc[cd + 16 : cd + 20] = struct.pack("<I", (info.CRC ^ 1))
    write_bytes(q, bytes(crc))
    with pytest.raises(CheckpointError, match="corrupted member"):
        sio.load(q)
    # a member whose local header offset points past the end
    off = bytearray(data)
    off[cd + 42 : cd + 46] = struct.pack("<I", len(data) + 10)
    write_bytes(q, bytes(off))
    with pytest.raises(CheckpointError):
        sio.load(q)
    # not a zip at all, and an empty file, with an .npz suffix
    for junk in (b"", b"hello world" * 10):
        write_bytes(q, junk)
        with pytest.raises(CheckpointError, match=r"not an \.npz file"):
            sio.read_header(q)


# -- corrupted or hostile spruce metadata --------------------------------------------------------------


def _rewrite_doc(path: str, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Rewrite the spruce.treedef document of a safetensors file (same tensors)."""
    from safetensors.numpy import load_file, save_file

    meta = sio.read_metadata(path)
    doc = json.loads(meta["spruce.treedef"])
    new = edit(doc)
    meta["spruce.treedef"] = new if isinstance(new, str) else json.dumps(doc)
    save_file(load_file(path), path, metadata=meta)


def _set_root(doc: dict[str, Any], node: Any) -> None:
    doc["tree"] = node


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: "{not json", "corrupted spruce.treedef metadata"),
        (lambda d: d.pop("version"), "no version and tree"),
        (lambda d: d.update(version=99), "format version 99; this spruce reads version 2 and older: upgrade spruce"),
        (lambda d: _set_root(d, {"dict": [["a", {"tensor": "nope"}]]}), "names a tensor 'nope' that the file does not have"),
        (lambda d: _set_root(d, {"list": [{"tensor": "a"}, {"tensor": "a"}]}), "uses the tensor 'a' twice"),
        (lambda d: _set_root(d, {"bogus": []}), "a node has no kind or several"),
        (lambda d: _set_root(d, {"tuple": {"x": 1}}), "tuple body is not a list"),
        (lambda d: _set_root(d, {"dict": [[["list", "key"], {"tensor": "a"}]]}), "not hashable"),
        (lambda d: _set_root(d, {"dict": [[{"$tuple": 5}, {"tensor": "a"}]]}), "not a stored value"),
        (lambda d: _set_root(d, {"tensor": "a", "scalar": True}), "is a scalar but its tensor has shape"),
        (lambda d: _set_root(d, {"class": "builtins:object.__subclasses__", "fields": [], "static": []}), "malformed class name"),
        (lambda d: _set_root(d, {"class": "test_io:Block", "fields": [["weight", {"tensor": "a"}]], "static": [["gone", 1]]}),
         r"has no fields \['gone'\]"),
        (lambda d: _set_root(d, {"class": "test_io:Block", "fields": [["weight", {"tensor": "a"}]], "static": []}),
         "cannot be flattened from the stored fields"),
        (lambda d: _set_root(d,
                             {"class": "test_io:Block", "fields": [["bias", {"tensor": "a"}], ["weight", None]],
                              "static": [["name", "n"], ["sizes", {"$tuple": []}]]}), "now has the children"),
        (lambda d: _set_root(d, {"namedtuple": "test_io:Point", "fields": [["x", {"tensor": "a"}]]}),
         "not a namedtuple with fields"),
        (lambda d: _set_root(d, {"defaultdict": [], "factory": "os.system"}), "unknown defaultdict factory"),
        (lambda d: _set_root(d, {"deque": [{"tensor": "a"}], "maxlen": 0}), "bad deque maxlen"),
        (lambda d: _set_root(d, {"value": {"$ref": "os:system"}, "name": "v"}), "not a stored value"),
    ],
)
def test_bad_structure_metadata(edit: Callable[[dict[str, Any]], Any], match: str, tmp_path: Any) -> None:
    p = str(tmp_path / "a.safetensors")
    sio.save(p, {"a": np.ones(2)})
    _rewrite_doc(p, edit)
    with pytest.raises(CheckpointError, match=match):
        sio.load(p)
    assert "a" in sio.read_header(p)  # the header itself is fine: inspect still works


@pytest.mark.parametrize("ref", ["tests_no_such_pkg.mod:Dense", "antigravity:Dense", "os:system"])
def test_class_not_found_loads_as_a_stand_in(ref: str, tmp_path: Any) -> None:
    """A class that cannot be found where the file is read (module not imported, not a class):
    dataclass nodes become StoredNode, namedtuples a namedtuple of the stored name and fields;
    nothing is imported or called."""
    p = str(tmp_path / "a.safetensors")
    sio.save(p, {"a": np.ones(2), "b": np.zeros(1)})
    node = {"class": ref, "fields": [["weight", {"tensor": "a"}]], "static": [["features", 2]]}
    _rewrite_doc(p, lambda d: _set_root(d, {"list": [node, {"namedtuple": ref, "fields": [["x", {"tensor": "b"}]]}]}))
    dense, pair = sio.load(p)
    assert "antigravity" not in sys.modules
    assert isinstance(dense, sio.StoredNode) and dense.class_name == ref
    assert np.array_equal(dense.weight, np.ones(2)) and dense.features == 2 and dense.static == {"features": 2}
    assert type(pair).__name__ == ref.rsplit(":", 1)[1] and pair._fields == ("x",) and pair.x.shape == (1,)
    assert sio.flatten_names([dense, pair]).keys() == {"0.weight", "1.x"}
    again = str(tmp_path / "again.safetensors")
    sio.save(again, [dense, pair])  # a stand-in saves as the original class node
    assert json.loads(sio.read_metadata(again)["spruce.treedef"])["tree"]["list"][0]["class"] == ref
    assert isinstance(sio.load(again)[0], sio.StoredNode)


def test_deeply_nested_structure_metadata(tmp_path: Any) -> None:
    p = str(tmp_path / "a.safetensors")
    sio.save(p, {"a": np.ones(2)})
    _rewrite_doc(p, lambda d: '{"version": 1, "tree": ' + '{"list": [' * 5000 + "null" + "]}" * 5000 + "}")
    with pytest.raises(CheckpointError, match=r"corrupted spruce\.treedef metadata"):
        sio.load(p)
    sio.save(p, {"a": np.ones(2)})
    _rewrite_doc(p, lambda d: '{"version": 1, "tree": ' + '{"list": [' * 300 + "null" + "]}" * 300 + "}")
    with pytest.raises(CheckpointError, match="more than 100 levels deep"):
        sio.load(p)


# ================================================================================================
# Only regular files are read; OSErrors name the file
# ================================================================================================


def test_a_fifo_is_refused_without_waiting(tmp_path: Any, fmt: str) -> None:
    with fifo(str(tmp_path / f"pipe.{fmt}")) as p:
        start = time.monotonic()
        for function in (sio.load, sio.read_header, sio.read_metadata, lambda x: sio.load(x, like={})):
            with pytest.raises(CheckpointError) as info:
                function(p)
            assert str(info.value) == (
                f"{p}: not a regular file but a named pipe (FIFO); checkpoints are read from "
                "regular files only"
            )
        assert time.monotonic() - start < 5


def test_devices_and_directories_are_refused(tmp_path: Any) -> None:
    if os.path.exists("/dev/null"):
        with pytest.raises(CheckpointError, match=r"^/dev/null: not a regular file but a character device"):
            sio.read_header("/dev/null")
    with pytest.raises(IsADirectoryError) as info:
        sio.load(str(tmp_path))
    assert info.value.filename == str(tmp_path)


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="Linux /proc")
def test_read_errors_name_the_file() -> None:
    """/proc/self/mem is a regular file whose first bytes cannot be read (EIO): the OSError
    from read() names no file by itself."""
    for function in (sio.read_header, sio.load, sio.read_metadata):
        with pytest.raises(OSError) as info:
            function("/proc/self/mem")
        assert info.value.errno == errno.EIO and info.value.filename == "/proc/self/mem"


_KILL_CHILD = """
import os, sys, time
import numpy as np
import spruce.io as sio
from spruce.io import _npz, _safetensors

path, stage = sys.argv[1], sys.argv[2]
module = _safetensors if path.endswith(".safetensors") else _npz
real = module.write

def block(msg):
    print(msg, flush=True)
    time.sleep(120)

if stage == "mid-write":
    def write(tmp, *args):
        real(tmp, *args)
        with open(tmp, "r+b") as f:  # as if killed with half of the bytes on disk
            f.truncate(os.path.getsize(tmp) // 2)
        block("WRITING")
    module.write = write
else:
    os.fsync = lambda fd: block("WRITTEN")  # all written, not yet renamed
sio.save(path, {"w": np.full(1_000_000, 7.0, np.float32), "step": 2})
print("SAVED", flush=True)
"""


@pytest.mark.parametrize("stage", ["mid-write", "before-rename"])
def test_save_killed_in_a_subprocess_leaves_the_old_file(tmp_path: Any, fmt: str, stage: str) -> None:
    path = str(tmp_path / f"ckpt.{fmt}")
    old = {"w": np.arange(5, dtype=np.float32), "step": 1}
    sio.save(path, old)
    before = read_bytes(path)
    env = dict(os.environ, PYTHONPATH=SRC_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILL_CHILD), path, stage],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = child.stdout.readline().strip() if child.stdout else ""
        assert line in ("WRITING", "WRITTEN"), child.stderr.read() if child.stderr else line
        temps = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].startswith(".spruce-") and len(temps[0]) == 24
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream:
                stream.close()
    assert child.returncode == -signal.SIGKILL
    assert read_bytes(path) == before
    assert_same(sio.load(path), old)
