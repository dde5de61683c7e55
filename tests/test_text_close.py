"""``helpers.assert_text_close``, the comparison of printed output holding float results: it
accepts what another processor prints for the same computation (last digits, and the padding
NumPy adds around them) and rejects every other change."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import FLOAT_ATOL, FLOAT_RTOL, assert_text_close, text_difference

PRED = """\
Array([[ 0.6350196 ],
       [ 0.3767303 ],
       [-0.27681673],
       [ 1.293994  ]], dtype=float32)"""
PARAMS = """\
{'layer1': {'W': Array([[-0.11168969,  0.58439565,  1.437887  ],
         [ 0.533231  , -1.0117726 , -2.316002  ]], dtype=float32),
  'b': Array([-1.5917008, -0.9385306], dtype=float32)},
 'shape': f32[2,3], 'version': '0.12.0', 'steps': 400, 'lr': 1e-06}"""


def test_the_other_processors_output_is_accepted() -> None:
    # what an AMD EPYC with AVX-512 prints for the tutorial's prediction
    # (examples/nn_dict_params.py)
    assert_text_close(PRED.replace("-0.27681673", "-0.27681667"), PRED)
    assert_text_close(PRED, PRED)


@pytest.mark.parametrize("ulps", [1, -1, 3, -4])
def test_last_digit_differences_and_their_padding_are_accepted(ulps: int) -> None:
    values = np.array([[-0.11168969, 0.58439565, 1.437887], [0.533231, -1.0117726, -2.316002]], np.float32)
    moved = values.copy()
    for _ in range(abs(ulps)):
        moved = np.nextafter(moved, np.float32(np.inf if ulps > 0 else -np.inf), dtype=np.float32)
    assert not np.array_equal(moved, values)
    assert_text_close(repr(moved), repr(values))
    assert_text_close(str({"W": moved, "n": 3}), str({"W": values, "n": 3}))


def test_padding_changes_are_what_is_ignored() -> None:
    # NumPy pads a column to the widest number; a shorter shortest-repr changes the spaces
    assert repr(np.array([0.5, 0.25], np.float32)) != repr(np.array([0.5, 0.2500001], np.float32))
    assert_text_close(repr(np.array([0.5, 0.2500001], np.float32)), repr(np.array([0.5, 0.25], np.float32)))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("-0.27681673", "-0.27581673"),  # a real change, in the fourth digit
        ("-0.27681673", "0.27681673"),  # the sign
        ("1.293994", "1.2940001"),  # seventh digit of a value above 1: 6e-6 > 1e-6 + 1.3e-6
        ("dtype=float32", "dtype=float64"),
        ("Array([[", "array([["),
        ("],\n       [-0.2", "],\n      [-0.2"),  # indentation that touches no number
        ("[ 1.293994  ]], dtype", "[ 1.293994  ]],  dtype"),  # spacing that touches no number
        ("[ 1.293994  ]]", "[ 1.293994  ]]]"),  # the nesting
        ("\n       [ 1.293994  ]", ""),  # a row less
        ("[ 0.3767303 ]", "[ 0.3767303, 0.1 ]"),  # a number more
        ("[ 0.3767303 ]", "[ 0.3767303 0.3767303 ]"),  # numbers run together differently
    ],
)
def test_every_other_change_is_rejected(old: str, new: str) -> None:
    changed = PRED.replace(old, new)
    assert changed != PRED
    assert text_difference(changed, PRED) is not None
    with pytest.raises(AssertionError, match="expected"):
        assert_text_close(changed, PRED)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("f32[2,3]", "f32[2,4]"),  # shapes are integers: exact
        ("f32[2,3]", "f32[2, 3]"),
        ("f32[", "f16["),  # not a number inside a name
        ("'0.12.0'", "'0.12.1'"),  # nor a version string
        ("'steps': 400", "'steps': 401"),  # nor a count
        ("'layer1'", "'layer2'"),
        ("'lr': 1e-06", "'lr': 1e-05"),  # a float with an exponent
    ],
)
def test_integers_names_and_structure_are_exact(old: str, new: str) -> None:
    assert_text_close(PARAMS, PARAMS)
    changed = PARAMS.replace(old, new)
    assert changed != PARAMS
    assert text_difference(changed, PARAMS) is not None


def test_the_tolerance_is_relative_and_absolute() -> None:
    assert (FLOAT_RTOL, FLOAT_ATOL) == (1e-6, 1e-6)
    assert text_difference("x = 1000.001", "x = 1000.0") is None  # 1e-3 <= 1e-6 + 1e-3
    assert text_difference("x = 1000.0011", "x = 1000.0") is not None
    assert text_difference("x = 0.0000009", "x = 0.0") is None  # near 0: absolute 1e-6
    assert text_difference("x = 0.0000011", "x = 0.0") is not None
    assert text_difference("x = 0.5", "x = 0.5000001", rtol=0, atol=0) is not None
    assert text_difference("x = nan", "x = nan") is None and text_difference("x = nan", "x = inf") is not None
