"""The layers of spruce.nn that inherit a parent's hand-written ``__init__`` (convolutions,
pooling, recurrent cells) take that ``__init__``'s arguments, as in PyTorch, not the
dataclass-style fields a checker would otherwise make their ``__init__`` from."""

from __future__ import annotations

from typing import Any, assert_type

import spruce.nn as nn


def build(key: Any) -> None:
    assert_type(nn.Conv1d(2, 4, 3, stride=2, key=key), nn.Conv1d)
    assert_type(nn.Conv2d(1, 16, 3, padding=1, key=key), nn.Conv2d)
    assert_type(nn.Conv3d(1, 2, (1, 2, 3), padding="same", key=key), nn.Conv3d)
    assert_type(nn.ConvTranspose1d(4, 2, 3, stride=2, key=key), nn.ConvTranspose1d)
    assert_type(nn.ConvTranspose2d(4, 2, 3, output_padding=1, stride=2, key=key), nn.ConvTranspose2d)
    assert_type(nn.ConvTranspose3d(4, 2, 2, key=key), nn.ConvTranspose3d)
    assert_type(nn.MaxPool1d(2), nn.MaxPool1d)
    assert_type(nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), nn.MaxPool2d)
    assert_type(nn.MaxPool3d((2, 2, 1), dilation=2), nn.MaxPool3d)
    assert_type(nn.AvgPool1d(3, count_include_pad=False), nn.AvgPool1d)
    assert_type(nn.AvgPool2d(2), nn.AvgPool2d)
    assert_type(nn.AvgPool3d(2, divisor_override=3), nn.AvgPool3d)
    assert_type(nn.AdaptiveAvgPool1d(4), nn.AdaptiveAvgPool1d)
    assert_type(nn.AdaptiveAvgPool2d((2, None)), nn.AdaptiveAvgPool2d)
    assert_type(nn.AdaptiveAvgPool3d(1), nn.AdaptiveAvgPool3d)
    assert_type(nn.AdaptiveMaxPool1d(4), nn.AdaptiveMaxPool1d)
    assert_type(nn.AdaptiveMaxPool2d(2), nn.AdaptiveMaxPool2d)
    assert_type(nn.AdaptiveMaxPool3d((1, 2, 3)), nn.AdaptiveMaxPool3d)
    assert_type(nn.LSTMCell(3, 5, key=key), nn.LSTMCell)
    assert_type(nn.GRUCell(3, 5, use_bias=False, key=key), nn.GRUCell)
