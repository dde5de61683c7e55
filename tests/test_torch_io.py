"""spruce.io reading PyTorch checkpoints (``torch.save`` files) without PyTorch.

Files written by real torch (test-only dependency; those tests skip without it) are read back
and compared with torch's own tensors: dtypes, strides and storage offsets, shared storages,
nested dicts, the legacy (non-zip) layout.  Hostile pickles — written by hand, so they run
without torch — are refused without running anything, and truncated or tampered archives raise
CheckpointError.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import zipfile
import zlib
from collections import OrderedDict
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import spruce
import spruce.io as sio
from spruce.io import CheckpointError


def _torch() -> Any:
    return pytest.importorskip(
        "torch",
        reason="torch is not installed: the PyTorch checkpoint tests need it (a test-only dependency; "
        "`make test` installs a CPU build under Python 3.11, the only interpreter with one)",
    )


# -- helpers: archives written by hand --------------------------------------------------------------


def write_archive(path: pathlib.Path, pkl: bytes, storages: dict[str, bytes], *, prefix: str = "archive") -> None:
    """A zip laid out as torch.save writes one (stored members)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/data.pkl", pkl)
        zf.writestr(f"{prefix}/byteorder", b"little")
        for key, data in storages.items():
            zf.writestr(f"{prefix}/data/{key}", data)
        zf.writestr(f"{prefix}/version", b"3\n")


def tensor_pickle(storage: str = "FloatStorage", key: str = "0", numel: int = 3, offset: int = 0,
                  size: tuple[int, ...] = (3,), stride: tuple[int, ...] = (1,)) -> bytes:
    """The pickle torch.save writes for {'w': tensor} (protocol 2), built from opcodes."""
    p = io.BytesIO()
    p.write(b"\x80\x02}(X\x01\x00\x00\x00w")
    p.write(b"ctorch._utils\n_rebuild_tensor_v2\n(")
    p.write(b"(X\x07\x00\x00\x00storage" + f"ctorch\n{storage}\n".encode())
    p.write(pickle.dumps(key, 2)[2:-1] + pickle.dumps("cpu", 2)[2:-1] + pickle.dumps(numel, 2)[2:-1] + b"tQ")
    p.write(pickle.dumps(offset, 2)[2:-1] + pickle.dumps(size, 2)[2:-1] + pickle.dumps(stride, 2)[2:-1])
    p.write(b"\x89ccollections\nOrderedDict\n)RtRu.")
    return p.getvalue()


def floats(*xs: float) -> bytes:
    return np.array(xs, "<f4").tobytes()


# -- without torch: hand-written archives ---------------------------------------------------------


def test_handwritten_archive(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "w.pt"
    write_archive(f, tensor_pickle(), {"0": floats(1, 2, 3)})
    out = sio.load(f)
    assert list(out) == ["w"]
    np.testing.assert_array_equal(out["w"], np.array([1, 2, 3], np.float32))
    assert out["w"].dtype == np.float32
    assert sio.read_header(f) == {"w": sio.TensorInfo("float32", (3,), 3, 12)}
    assert sio.read_metadata(f) == {}


def test_strided_view_of_handwritten_storage(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "w.pth"
    # a (2, 2) view with stride (1, 3) at offset 1 of a 6-element storage: the transpose of
    # rows 0..1 of [[., 1, 2], [., 4, 5]] shifted by one element
    write_archive(f, tensor_pickle(numel=6, offset=1, size=(2, 2), stride=(1, 3)), {"0": floats(0, 1, 2, 3, 4, 5)})
    w = sio.load(f)["w"]
    np.testing.assert_array_equal(w, np.array([[1, 4], [2, 5]], np.float32))
    assert not w.flags.owndata


MALICIOUS = {
    # REDUCE of os.system (protocol 0 GLOBAL)
    "os.system": b"cos\nsystem\n(S'touch MARKER'\ntR.",
    "posix.system": b"cposix\nsystem\n(S'touch MARKER'\ntR.",
    # GLOBAL of builtins.eval, also under its Python 2 name
    "builtins.eval": b"cbuiltins\neval\n(S'open(\"MARKER\", \"w\")'\ntR.",
    "__builtin__.eval": b"c__builtin__\neval\n(S'open(\"MARKER\", \"w\")'\ntR.",
    # STACK_GLOBAL (protocol 4) of builtins.exec
    "builtins.exec": b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c\x17open('MARKER', 'w')\x85R.",
    # INST opcode (class instantiation by name)
    "subprocess.Popen": b"(S'touch'\nS'MARKER'\nisubprocess\nPopen\n.",
    # a tensor rebuilt through a function that is not allowed
    "torch.load": b"\x80\x02}X\x01\x00\x00\x00wctorch\nload\nS'MARKER'\n\x85Rs.",
    # getattr chains to reach anything
    "builtins.getattr": b"cbuiltins\ngetattr\n(ccollections\nOrderedDict\nS'__init__'\ntR.",
}


@pytest.mark.parametrize("name", sorted(MALICIOUS))
def test_malicious_pickle_refused_without_running(tmp_path: pathlib.Path, monkeypatch: Any, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "evil.pt"
    write_archive(f, MALICIOUS[name], {})
    with pytest.raises(CheckpointError, match=f"the global {name.replace('.', '[.]')}, which a state dict does not need"):
        sio.load(f)
    with pytest.raises(CheckpointError, match="refused"):
        sio.read_header(f)
    assert not (tmp_path / "MARKER").exists()
    assert os.listdir(tmp_path) == ["evil.pt"]


def test_malicious_legacy_pickle_refused(tmp_path: pathlib.Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "evil.pt"
    f.write_bytes(b"\x80\x02cos\nsystem\n(S'touch MARKER'\ntR.")
    with pytest.raises(CheckpointError, match=r"the global os\.system"):
        sio.load(f)
    assert not (tmp_path / "MARKER").exists()


def test_build_cannot_change_a_stand_in(tmp_path: pathlib.Path) -> None:
    # BUILD on the allowed rebuild function, trying to set its attributes
    pkl = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}X\x04\x00\x00\x00nameX\x01\x00\x00\x00xsb."
    f = tmp_path / "b.pt"
    write_archive(f, pkl, {})
    with pytest.raises(CheckpointError, match=r"change the state of torch\._utils\._rebuild_tensor_v2"):
        sio.load(f)
    write_archive(f, tensor_pickle(), {"0": floats(1, 2, 3)})
    np.testing.assert_array_equal(sio.load(f)["w"], [1, 2, 3])  # the stand-in still works


@pytest.mark.parametrize(
    "pkl, match",
    [
        (tensor_pickle(numel=3, offset=1, size=(3,), stride=(1,)), "reaches past the end of its storage"),
        (tensor_pickle(numel=3, size=(2, 2), stride=(2, 1)), "reaches past the end of its storage"),
        (tensor_pickle(numel=3, size=(3,), stride=(1, 1)), "differ in length"),
        (tensor_pickle(numel=3, offset=-1), "not an int >= 0"),
        (tensor_pickle(numel=100), "should hold 400 bytes but the file has 12"),
        (tensor_pickle(key="9"), "storage member archive/data/9 is missing"),
        (tensor_pickle(storage="QInt8Storage"), r"the global torch\.QInt8Storage"),
        (tensor_pickle()[:-5], "corrupted or truncated pickle"),
        (b"\x80\x02]q\x00h\x00a.", "contains itself"),
        (b"\x80\x02(K\x01K\x02\x8f.", "is a set"),
    ],
)
def test_tampered_pickle(tmp_path: pathlib.Path, pkl: bytes, match: str) -> None:
    f = tmp_path / "t.pt"
    write_archive(f, pkl, {"0": floats(1, 2, 3)})
    with pytest.raises(CheckpointError, match=match):
        sio.load(f)


def test_pickle_dag_expanding_to_too_many_nodes(tmp_path: pathlib.Path) -> None:
    """A few hundred bytes of pickle whose lists share references (x = [x, x], 60 times) would
    expand to 2**60 nodes: refused after a bounded number of nodes, naming the file."""
    x: Any = [None]
    for _ in range(60):
        x = [x, x]
    pkl = pickle.dumps({"a": x}, protocol=2)
    assert len(pkl) < 1000
    f = tmp_path / "dag.pt"
    write_archive(f, pkl, {})
    for function in (sio.load, sio.read_header):
        with pytest.raises(CheckpointError, match="expands to too many nodes through shared references") as info:
            function(f)
        assert str(info.value).startswith(f"{f}: ")


def test_shared_references_are_kept(tmp_path: pathlib.Path) -> None:
    """A moderately shared structure (the same list referenced at a few places) still loads."""
    x: Any = [1.5]
    for _ in range(5):
        x = [x, x]
    f = tmp_path / "shared.pt"
    write_archive(f, pickle.dumps({"a": x, "b": x}, protocol=2), {})
    tree = sio.load(f)
    leaf = tree["b"]
    for _ in range(5):
        leaf = leaf[1]
    assert leaf == [1.5] and tree["a"][0][1][0][1][0] == [1.5]


def test_dotted_keys_nest_only_within_the_depth_limit(tmp_path: pathlib.Path) -> None:
    """Keys with more components than the structure depth allows stay flat instead of failing;
    keys that fit nest (plain pickles written by hand, no torch needed)."""
    deep = ".".join(["a"] * 150)
    f = tmp_path / "deep.pt"
    write_archive(f, pickle.dumps({deep: 1.5, "b.c": 2}, protocol=2), {})
    assert sio.load(f) == {deep: 1.5, "b.c": 2}
    f2 = tmp_path / "fits.pt"
    write_archive(f2, pickle.dumps({"x": {"a.b.c": 1.5, "a.d": [1, 2]}}, protocol=2), {})
    assert sio.load(f2) == {"x": {"a": {"b": {"c": 1.5}, "d": [1, 2]}}}


def test_not_a_checkpoint(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "x.pt"
    f.write_bytes(b"hello")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        sio.load(f)
    with zipfile.ZipFile(f, "w") as zf:
        zf.writestr("a/data.pkl", tensor_pickle())
        zf.writestr("b/data.pkl", tensor_pickle())
    with pytest.raises(CheckpointError, match=r"2 '<name>/data\.pkl' members"):
        sio.load(f)
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a/data.pkl", tensor_pickle())
    with pytest.raises(CheckpointError, match="is compressed"):
        sio.load(f)


def test_big_endian_refused(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "x.pt"
    with zipfile.ZipFile(f, "w") as zf:
        zf.writestr("a/data.pkl", tensor_pickle())
        zf.writestr("a/byteorder", b"big")
        zf.writestr("a/data/0", np.array([1, 2, 3], ">f4").tobytes())
    with pytest.raises(CheckpointError, match="'big'-endian"):
        sio.load(f)


# -- files written by torch ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_file(tmp_path_factory: Any) -> tuple[pathlib.Path, dict[str, Any]]:
    torch = _torch()
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    lin = torch.nn.Linear(3, 2)
    sd: dict[str, Any] = {
        "f32": torch.randn(2, 3, generator=g),
        "f16": torch.randn(5, generator=g).half(),
        "bf16": torch.randn(2, 2, generator=g).bfloat16(),
        "i64": torch.arange(-3, 4, dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "transposed": base.t(),
        "column": base[:, 2],
        "sliced": base[1:3, ::2],
        "shared_a": base,
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "nested": {"lin": lin.state_dict(), "more": [torch.ones(2), {"deep": torch.full((1,), 7.0)}]},
        "param": torch.nn.Parameter(torch.ones(3)),
        "epoch": 3,
        "lr": 0.5,
        "name": "run",
        "flag": True,
        "nothing": None,
        "shape": torch.Size([2, 3]),
        "opt": {"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
    }
    d = tmp_path_factory.mktemp("torch")
    path = d / "ckpt.pt"
    torch.save(sd, path)
    return path, sd


def _np(t: Any) -> np.ndarray:
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.detach().numpy()


def test_torch_file_values(torch_file: tuple[pathlib.Path, dict[str, Any]]) -> None:
    path, sd = torch_file
    out = sio.load(path)
    assert list(out) == list(sd)
    dtypes = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64", "bool": "bool", "u8": "uint8"}
    for k, dt in dtypes.items():
        assert out[k].dtype == np.dtype(dt), k
        assert out[k].shape == tuple(sd[k].shape)
        np.testing.assert_array_equal(out[k], _np(sd[k]))
    for k in ("transposed", "column", "sliced", "shared_a", "scalar", "empty", "param"):
        assert out[k].shape == tuple(sd[k].shape), k
        np.testing.assert_array_equal(out[k], _np(sd[k]))
    assert out["scalar"].shape == ()
    assert out["epoch"] == 3 and type(out["epoch"]) is int
    assert out["lr"] == 0.5 and out["name"] == "run" and out["flag"] is True and out["nothing"] is None
    assert out["shape"] == (2, 3)
    assert type(out["nested"]["lin"]) is OrderedDict
    np.testing.assert_array_equal(out["nested"]["lin"]["weight"], _np(sd["nested"]["lin"]["weight"]))
    np.testing.assert_array_equal(out["nested"]["more"][1]["deep"], [7.0])
    assert out["opt"]["state"][0]["step"] == 1.0
    assert out["opt"]["param_groups"] == [{"lr": 0.1, "params": [0]}]


def test_torch_views_share_the_mapped_storage(torch_file: tuple[pathlib.Path, dict[str, Any]]) -> None:
    path, _ = torch_file
    out = sio.load(path)
    for k in ("transposed", "column", "sliced"):
        assert np.shares_memory(out[k], out["shared_a"]), k
        assert not out[k].flags.owndata
    assert out["transposed"].strides == (4, 24)
    # copy-on-write: writing to an array changes neither the file nor the next load
    before = path.read_bytes()
    out["shared_a"][0, 0] = 1e6
    assert out["transposed"][0, 0] == 1e6  # the same storage, as in torch
    assert path.read_bytes() == before
    assert sio.load(path)["shared_a"][0, 0] != 1e6


def test_torch_names_and_header(torch_file: tuple[pathlib.Path, dict[str, Any]]) -> None:
    path, _ = torch_file
    h = sio.read_header(path)
    assert list(h)[:6] == ["f32", "f16", "bf16", "i64", "bool", "u8"]
    assert h["nested.lin.weight"] == sio.TensorInfo("float32", (2, 3), 6, 24)
    assert h["nested.more.1.deep"] == sio.TensorInfo("float32", (1,), 1, 4)
    assert h["opt.state.0.step"] == sio.TensorInfo("float32", (), 1, 4)
    assert h["bf16"].dtype == "bfloat16" and h["bf16"].nbytes == 8
    assert "epoch" not in h


def test_torch_state_dict_into_module(tmp_path: pathlib.Path) -> None:
    torch = _torch()
    import jax.numpy as jnp

    import spruce.nn as nn

    seq = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    path = tmp_path / "pytorch_model.bin"
    torch.save(seq.state_dict(), path)

    class Net(spruce.Module):
        first: nn.Linear
        second: nn.Linear

    import jax

    k1, k2 = jax.random.split(jax.random.key(0))
    like = Net(nn.Linear(4, 3, key=k1), nn.Linear(3, 2, key=k2))
    model = sio.load(path, like, rename={"0.weight": "first.weight", "0.bias": "first.bias",
                                         "2.weight": "second.weight", "2.bias": "second.bias"})
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    got = model.second(jax.nn.relu(model.first(jnp.asarray(x))))
    want = seq(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def _sequential(torch: Any) -> Any:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.ReLU(),
        torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()),
    )


def test_state_dict_loads_nested_and_saves_names_torch_loads(tmp_path: pathlib.Path) -> None:
    """A state dict's dotted keys load nested, as a safetensors file of those names does, so
    that saving the tree writes the same names: .pth -> spruce -> .safetensors -> torch."""
    torch = _torch()
    from safetensors.numpy import save_file
    from safetensors.torch import load_file

    import spruce.view

    torch.manual_seed(0)
    model = _sequential(torch)
    model.train()
    model(torch.randn(8, 4))  # running statistics that are not the initial ones
    model.eval()
    sd = model.state_dict()
    pth = tmp_path / "m.pth"
    torch.save(sd, pth)

    tree = sio.load(pth)
    assert type(tree) is dict and list(tree) == ["0", "1", "3"]
    assert list(tree["0"]) == ["weight", "bias"]
    assert list(tree["1"]) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert type(tree["3"]) is list and len(tree["3"]) == 1 and list(tree["3"][0]) == ["weight", "bias"]
    assert list(sio.read_header(pth)) == list(sd)  # the tensor names are unchanged
    flat = sio.flatten_names(tree)
    assert sorted(flat) == sorted(sd)  # (flatten_names visits dict keys sorted)
    for k, t in sd.items():
        np.testing.assert_array_equal(flat[k], t.numpy())
        assert flat[k].dtype == t.numpy().dtype and flat[k].shape == tuple(t.shape)
    # nested as the same names in a safetensors file without spruce metadata are
    plain = tmp_path / "plain.safetensors"
    save_file({k: t.numpy() for k, t in sd.items()}, str(plain))
    other = sio.load(plain)
    assert sorted(other) == ["0", "1", "3"] and type(other["3"]) is list  # (in the file's order)
    assert sio.flatten_names(other).keys() == flat.keys()

    out = tmp_path / "m.safetensors"
    sio.save(out, tree)
    assert list(sio.read_header(out)) == list(sd)  # not 0%2Eweight
    loaded = load_file(str(out))
    again = _sequential(torch)
    again.load_state_dict(loaded, strict=True)
    again.eval()
    x = torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))  # the same weights, the same CPU kernels
    assert all(torch.equal(loaded[k], sd[k]) and loaded[k].dtype == sd[k].dtype for k in sd)
    entries = spruce.view.diff(pth, out)  # read as the spruce diff command reads them
    assert [e.status for e in entries] == ["same"] * len(sd)
    assert sorted(e.name for e in entries) == sorted(sd)


def test_dotted_keys_inside_a_checkpoint(tmp_path: pathlib.Path) -> None:
    """A dict with dotted keys anywhere nests; the rest of the pickled structure is kept (int
    keys, tuples, None, OrderedDicts without dotted keys); keys that cannot nest stay flat."""
    torch = _torch()
    lin = torch.nn.Linear(2, 2)
    seq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    ckpt = {
        "model": seq.state_dict(),
        "head": lin.state_dict(),
        "opt": {"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"lr": 0.1, "params": (0, 1)}]},
        "epoch": 3,
        "none": None,
        "clash": {"a": torch.ones(1), "a.b": torch.zeros(1)},
        "escaped": {"x%2Ey.w": torch.ones(2), "v": torch.zeros(1)},
    }
    path = tmp_path / "ckpt.pt"
    torch.save(ckpt, path)
    tree = sio.load(path)
    assert type(tree["model"]) is list and [list(m) for m in tree["model"]] == [["weight", "bias"]] * 2
    np.testing.assert_array_equal(tree["model"][1]["bias"], seq[1].bias.detach().numpy())
    assert type(tree["head"]) is OrderedDict and list(tree["head"]) == ["weight", "bias"]
    assert list(tree["opt"]["state"]) == [0] and tree["opt"]["param_groups"] == [{"lr": 0.1, "params": (0, 1)}]
    assert tree["epoch"] == 3 and tree["none"] is None
    assert list(tree["clash"]) == ["a", "a.b"]  # 'a' is a tensor and a prefix: kept as pickled
    assert list(tree["escaped"]) == ["x.y", "v"] and list(tree["escaped"]["x.y"]) == ["w"]
    names = list(sio.read_header(path))
    assert names[:4] == ["model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias"]
    assert "clash.a.b" in names and "escaped.x%2Ey.w" in names
    out = tmp_path / "ckpt.safetensors"
    sio.save(out, tree)
    saved = list(sio.read_header(out))
    assert saved[:4] == names[:4] and "escaped.x%2Ey.w" in saved
    assert "clash.a%2Eb" in saved  # the key that could not nest is escaped, as any such key


def test_torch_legacy_format(tmp_path: pathlib.Path) -> None:
    torch = _torch()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sd = {"a": base, "b": base.t(), "c": torch.arange(5, dtype=torch.int64), "h": torch.ones(2).bfloat16()}
    path = tmp_path / "legacy.pth"
    torch.save(sd, path, _use_new_zipfile_serialization=False)
    out = sio.load(path)
    for k in sd:
        np.testing.assert_array_equal(out[k], _np(sd[k]))
        assert out[k].dtype == _np(sd[k]).dtype
    assert np.shares_memory(out["a"], out["b"])
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) - 30, len(data) // 2, 40, 3):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError):
            sio.load(path)
    path.write_bytes(data + b"\0")
    with pytest.raises(CheckpointError, match="follow the last storage"):
        sio.load(path)


def test_torch_truncated_everywhere(torch_file: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path) -> None:
    path, _ = torch_file
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    for n in sorted({*range(0, len(data), max(1, len(data) // 97)), len(data) - 1, len(data) - 22}):
        cut.write_bytes(data[:n])
        with pytest.raises(CheckpointError):
            sio.load(cut)


def test_torch_tampered_bytes(torch_file: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path) -> None:
    path, _ = torch_file
    data = bytearray(path.read_bytes())
    bad = tmp_path / "bad.pt"
    rng = np.random.default_rng(0)
    outcomes = set()
    for i in rng.choice(len(data), 150, replace=False):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        bad.write_bytes(bytes(flipped))
        try:
            tree = sio.load(bad)  # a flip inside tensor data is not detectable: it loads
            spruce.tree.leaves(tree)
            outcomes.add("loaded")
        except CheckpointError:
            outcomes.add("refused")
    assert outcomes == {"loaded", "refused"}


def test_torch_checksum_of_pickle(torch_file: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path) -> None:
    path, _ = torch_file
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        info = zf.getinfo(name)
    data = bytearray(path.read_bytes())
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    start = info.header_offset + 30 + n + m
    pkl = bytes(data[start : start + info.file_size])
    assert zlib.crc32(pkl) == info.CRC
    i = pkl.index(b"f16") + 1  # rename a key: still a valid pickle, but the checksum fails
    data[start + i] = ord("X")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        sio.load(bad)


def test_torch_tensor_subclass_and_model_refused(tmp_path: pathlib.Path) -> None:
    torch = _torch()
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2), path)  # a whole module, not a state dict
    with pytest.raises(CheckpointError, match=r"the global torch\.nn\.modules\.linear\.Linear"):
        sio.load(path)


def test_torch_file_suffixes_and_cli(
    torch_file: tuple[pathlib.Path, dict[str, Any]], tmp_path: pathlib.Path, capsys: Any
) -> None:
    path, _ = torch_file
    for suffix in (".bin", ".pth", ".ckpt", ""):
        other = tmp_path / f"copy{suffix}"
        other.write_bytes(path.read_bytes())
        assert list(sio.read_header(other)) == list(sio.read_header(path))
    from spruce.cli import main

    assert main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "(pytorch)" in shown and "bf16" in shown and "deep" in shown
    other = tmp_path / "other.pt"
    other.write_bytes(path.read_bytes())
    assert main(["diff", str(path), str(other)]) == 0
