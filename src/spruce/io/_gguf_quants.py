"""The tensor types of GGUF files (ggml's ``ggml_type``) and their dequantization to float32.

A quantized tensor is stored as blocks along its innermost dimension (the first of GGUF's
reversed shape, the last of NumPy's): each block of ``elements`` values takes ``nbytes`` bytes
holding float16 (or float32) scales and packed small integers.  ``dequantize(kind, raw)`` turns
the bytes of whole blocks into the float32 values, in NumPy array operations over all blocks at
once (no Python loop over blocks).

The formulas are ggml's (``dequantize_row_*`` in llama.cpp's ``ggml-quants.c``), as the ``gguf``
package's NumPy code evaluates them: the scales are widened from float16 to float32 and every
product and sum is one float32 operation in the same order, so the results are bit-identical
to that reference (the tests compare them on random blocks and on a real file).
"""

from __future__ import annotations

from typing import Any, Callable, Final, NamedTuple

import numpy as np

QK_K: Final = 256  # the values in one block of the K-quants


class Kind(NamedTuple):
    """One ggml tensor type: its name (``'Q4_1'``), the values per block, the bytes per block,
    and the NumPy dtype of a plain (one value per block) type, or None for a quantized one."""

    name: str
    elements: int
    nbytes: int
    plain: str | None = None


# ggml_type ids -> types (ids 4, 5 and 31-33 were removed from ggml; files never hold them).
KINDS: Final[dict[int, Kind]] = {
    0: Kind("F32", 1, 4, "<f4"),
    1: Kind("F16", 1, 2, "<f2"),
    2: Kind("Q4_0", 32, 18),
    3: Kind("Q4_1", 32, 20),
    6: Kind("Q5_0", 32, 22),
    7: Kind("Q5_1", 32, 24),
    8: Kind("Q8_0", 32, 34),
    9: Kind("Q8_1", 32, 36),  # float16 d and s (ggml's layout since 2024; float32 before, 40 bytes)
    10: Kind("Q2_K", QK_K, 84),
    11: Kind("Q3_K", QK_K, 110),
    12: Kind("Q4_K", QK_K, 144),
    13: Kind("Q5_K", QK_K, 176),
    14: Kind("Q6_K", QK_K, 210),
    15: Kind("Q8_K", QK_K, 292),
    16: Kind("IQ2_XXS", QK_K, 66),
    17: Kind("IQ2_XS", QK_K, 74),
    18: Kind("IQ3_XXS", QK_K, 98),
    19: Kind("IQ1_S", QK_K, 50),
    20: Kind("IQ4_NL", 32, 18),
    21: Kind("IQ3_S", QK_K, 110),
    22: Kind("IQ2_S", QK_K, 82),
    23: Kind("IQ4_XS", QK_K, 136),
    24: Kind("I8", 1, 1, "<i1"),
    25: Kind("I16", 1, 2, "<i2"),
    26: Kind("I32", 1, 4, "<i4"),
    27: Kind("I64", 1, 8, "<i8"),
    28: Kind("F64", 1, 8, "<f8"),
    29: Kind("IQ1_M", QK_K, 56),
    30: Kind("BF16", 1, 2),
    34: Kind("TQ1_0", QK_K, 54),
    35: Kind("TQ2_0", QK_K, 66),
    39: Kind("MXFP4", 32, 17),
    40: Kind("NVFP4", 64, 36),
    41: Kind("Q1_0", 128, 18),
}


def _f16(blocks: np.ndarray[Any, Any], start: int) -> np.ndarray[Any, Any]:
    """The float16 at byte ``start`` of each block, widened to float32, shape (n, 1)."""
    return blocks[:, start : start + 2].view("<f2").astype(np.float32)


def _nibbles(packed: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """(n, k) bytes -> (n, 2, k): the low 4 bits of each byte, then the high 4 bits."""
    out = np.empty((packed.shape[0], 2, packed.shape[1]), np.uint8)
    np.bitwise_and(packed, 0x0F, out=out[:, 0])
    np.right_shift(packed, 4, out=out[:, 1])
    return out


def _bits(packed: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any]:
    """(n, k) bytes -> (n, count): bit i of the little-endian bit string of each row (count = 8k)."""
    return np.unpackbits(packed, axis=1, count=count, bitorder="little")


# Each function below writes the float32 values of the blocks ``b`` (n, bytes per block) into
# ``out`` (n, values per block).  The last multiply / add writes into ``out`` straight from the
# small integers (uint8 / int8, converted exactly inside the float32 loop), without a float32
# copy of them: the same float32 operations in the same order, four times faster than
# converting first.
Out = np.ndarray[Any, Any]


def _affine(out: Out, q: Out, d: Out, m: Out | None = None) -> None:
    """out = d * q (+ m), each a float32 operation."""
    np.multiply(d, q, out=out)
    if m is not None:
        np.add(out, m, out=out)


def _q4_0(b: Out, out: Out) -> None:
    q = _nibbles(b[:, 2:18]).reshape(-1, 32).view(np.int8) - np.int8(8)
    _affine(out, q, _f16(b, 0))


def _q4_1(b: Out, out: Out) -> None:
    _affine(out, _nibbles(b[:, 4:20]).reshape(-1, 32), _f16(b, 0), _f16(b, 2))


def _q5(b: Out, head: int) -> Out:
    """The 5-bit values of Q5_0 (head 2) / Q5_1 (head 4) blocks: 4 low bits in nibbles, the
    fifth in a 32-bit mask."""
    q = _nibbles(b[:, head + 4 : head + 20]).reshape(-1, 32)
    q |= _bits(b[:, head : head + 4], 32) << np.uint8(4)
    return q


def _q5_0(b: Out, out: Out) -> None:
    _affine(out, _q5(b, 2).view(np.int8) - np.int8(16), _f16(b, 0))


def _q5_1(b: Out, out: Out) -> None:
    _affine(out, _q5(b, 4), _f16(b, 0), _f16(b, 2))


def _q8_0(b: Out, out: Out) -> None:
    _affine(out, b[:, 2:34].view(np.int8), _f16(b, 0))


def _q8_1(b: Out, out: Out) -> None:
    # (d, then the block's sum times d, both float16; the sum is not needed to dequantize)
    _affine(out, b[:, 4:36].view(np.int8), _f16(b, 0))


def _q8_k(b: Out, out: Out) -> None:
    # float32 d, 256 int8 values, then 16 int16 partial sums (not needed to dequantize)
    _affine(out, b[:, 4 : 4 + QK_K].view(np.int8), b[:, 0:4].view("<f4"))


def _crumbs(packed: Out) -> Out:
    """(..., k) bytes -> (..., 4, k): bits 0-1 of each byte, then bits 2-3, 4-5, 6-7."""
    out = np.empty((*packed.shape[:-1], 4, packed.shape[-1]), np.uint8)
    for j in range(4):
        np.bitwise_and(packed >> np.uint8(2 * j), 3, out=out[..., j, :])
    return out


def _q2_k(b: Out, out: Out) -> None:
    n = b.shape[0]
    scales = b[:, 0:16]
    dl = (_f16(b, 80) * (scales & 0x0F).astype(np.float32)).reshape(n, 16, 1)
    ml = (_f16(b, 82) * (scales >> 4).astype(np.float32)).reshape(n, 16, 1)
    q = _crumbs(b[:, 16:80].reshape(n, 2, 32)).reshape(n, 16, 16)
    o = out.reshape(n, 16, 16)
    np.multiply(dl, q, out=o)
    np.subtract(o, ml, out=o)


def _q3_k(b: Out, out: Out) -> None:
    n = b.shape[0]
    hmask, qs, packed = b[:, 0:32], b[:, 32:96], b[:, 96:108]
    low = _nibbles(packed[:, 0:8]).reshape(n, 16)
    high = _crumbs(packed[:, 8:12]).reshape(n, 16)
    scales = (low | (high << np.uint8(4))).view(np.int8) - np.int8(32)
    dl = (_f16(b, 108) * scales.astype(np.float32)).reshape(n, 16, 1)
    ql = _crumbs(qs.reshape(n, 2, 32)).reshape(n, 16, 16)
    # bit k of hmask byte i belongs to value 32 k + i; a clear bit subtracts 4
    qh = _bits(hmask, 256).reshape(n, 32, 8).transpose(0, 2, 1).reshape(n, 16, 16)
    q = ql.view(np.int8) - ((qh ^ np.uint8(1)) << np.uint8(2)).view(np.int8)
    np.multiply(dl, q, out=out.reshape(n, 16, 16))


def _scale_min_k4(packed: Out) -> tuple[Out, Out]:
    """The 8 6-bit scales and 8 6-bit mins of a Q4_K / Q5_K block from its 12 bytes."""
    d, m, md = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _k_affine(b: Out, q: Out, out: Out) -> None:
    """Q4_K / Q5_K: value = (d * scale) * q - (dmin * min), per 32-value sub-block."""
    n = b.shape[0]
    sc, mn = _scale_min_k4(b[:, 4:16])
    d = (_f16(b, 0) * sc.astype(np.float32)).reshape(n, 8, 1)
    dm = (_f16(b, 2) * mn.astype(np.float32)).reshape(n, 8, 1)
    o = out.reshape(n, 8, 32)
    np.multiply(d, q.reshape(n, 8, 32), out=o)
    np.subtract(o, dm, out=o)


def _q4_k(b: Out, out: Out) -> None:
    n = b.shape[0]
    # 4 chunks of 32 bytes: low nibbles are sub-block 2c, high nibbles sub-block 2c + 1
    _k_affine(b, _nibbles(b[:, 16:144].reshape(n * 4, 32)), out)


def _q5_k(b: Out, out: Out) -> None:
    n = b.shape[0]
    q = _nibbles(b[:, 48:176].reshape(n * 4, 32)).reshape(n, 8, 32)
    # bit j of qh byte i is the fifth bit of value i of sub-block j
    qh = _bits(b[:, 16:48], 256).reshape(n, 32, 8).transpose(0, 2, 1)
    q |= qh << np.uint8(4)
    _k_affine(b, q, out)


def _q6_k(b: Out, out: Out) -> None:
    n = b.shape[0]
    # per half of the block: the low nibbles of its 64 bytes are values 0-63, the high 64-127
    ql = _nibbles(b[:, 0:128].reshape(n * 2, 64)).reshape(n, 2, 4, 32)
    q = _crumbs(b[:, 128:192].reshape(n, 2, 32))
    q <<= np.uint8(4)
    q |= ql
    v = q.reshape(n, 16, 16).view(np.int8) - np.int8(32)
    d = (_f16(b, 208) * b[:, 192:208].view(np.int8).astype(np.float32)).reshape(n, 16, 1)
    np.multiply(d, v, out=out.reshape(n, 16, 16))


def _bf16(b: Out, out: Out) -> None:
    wide = out.view(np.uint32)
    np.left_shift(b.view("<u2"), 16, out=wide, dtype=np.uint32)  # the top half of a float32


def _f16_plain(b: Out, out: Out) -> None:
    np.copyto(out, b.view("<f2"))


_DEQUANTIZE: Final[dict[str, Callable[[Out, Out], None]]] = {
    "F16": _f16_plain, "BF16": _bf16, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1,
    "Q8_0": _q8_0, "Q8_1": _q8_1, "Q8_K": _q8_k, "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k,
    "Q5_K": _q5_k, "Q6_K": _q6_k,
}
# Converted to float32 (the others of KINDS: plain types read as they are, or not supported).
CONVERTED: Final = frozenset(_DEQUANTIZE)
# Blocks dequantized per step: bounds the temporaries (a few times 8k * 256 bytes) and keeps
# them in the processor's cache, while each NumPy call stays long enough that its overhead
# does not count.
_CHUNK: Final = 1 << 13


def dequantize(kind: Kind, raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The float32 values of whole blocks of ``kind``: ``raw`` is a 1-D uint8 array of
    ``n * kind.nbytes`` bytes; the result a new 1-D array of ``n * kind.elements`` values.

    Raises:
      KeyError: ``kind`` is not one of ``CONVERTED``.
    """
    f = _DEQUANTIZE[kind.name]
    blocks = raw.reshape(-1, kind.nbytes)
    n = blocks.shape[0]
    out = np.empty((n, kind.elements), np.float32)
    with np.errstate(all="ignore"):  # scales that are inf or NaN give inf / NaN, as in ggml
        for i in range(0, n, _CHUNK):
            f(blocks[i : i + _CHUNK], out[i : i + _CHUNK])
    return out.reshape(-1)
