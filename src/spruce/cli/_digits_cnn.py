"""The model of ``spruce demo train``: a small CNN for scikit-learn's 8x8 digits.

A module of its own, imported only once ``spruce demo train`` has set up JAX's 8 host devices,
and at module level so that a checkpoint of it rebuilds without ``like=``
(``CheckpointManager(...).restore()`` finds ``spruce.cli._digits_cnn:DigitsCNN`` by name).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import spruce
import spruce.nn as nn

__all__ = ["DigitsCNN"]


class DigitsCNN(spruce.Module):
    """conv 3x3 (1 -> 16) - BatchNorm - ReLU - max pool 2 - conv 3x3 (16 -> 32) - BatchNorm -
    ReLU - max pool 2 - dropout 0.1 - linear (128 -> 10), on one ``(1, 8, 8)`` float image.

    Args:
      key: a PRNG key for the initial weights (PyTorch's default initialisation of each layer).

    Call: ``model(x, state=None, key=None)`` with ``x`` of shape ``(1, 8, 8)`` returns the
    logits ``(10,)`` (float32) when ``state`` is None — BatchNorm then uses its running
    statistics, and needs ``spruce.nn.inference_mode`` — or ``(logits, new_state)`` with a
    ``spruce.nn.State`` (training: batch statistics over the vmapped axis named ``'batch'``,
    dropout with ``key``).

    >>> import jax
    >>> model = DigitsCNN(key=jax.random.key(0))
    >>> model.conv1.weight.shape, model.conv2.weight.shape, model.head.weight.shape
    ((16, 1, 3, 3), (32, 16, 3, 3), (10, 128))
    """

    conv1: nn.Conv2d
    bn1: nn.BatchNorm
    conv2: nn.Conv2d
    bn2: nn.BatchNorm
    pool: nn.MaxPool2d
    drop: nn.Dropout
    head: nn.Linear

    def __init__(self, *, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1, key=k1)
        self.bn1 = nn.BatchNorm(16, axis_name="batch")
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, key=k2)
        self.bn2 = nn.BatchNorm(32, axis_name="batch")
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(32 * 2 * 2, 10, key=k3)

    def __call__(self, x: jax.Array, state: Any = None, key: jax.Array | None = None) -> Any:
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2)):
            x = conv(x)
            if state is None:
                x = bn(x)
            else:
                x, state = bn(x, state)
            x = self.pool(jax.nn.relu(x))
        logits = self.head(self.drop(jnp.ravel(x), key=key))
        return logits if state is None else (logits, state)
