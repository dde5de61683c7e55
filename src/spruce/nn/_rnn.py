"""LSTMCell and GRUCell (PyTorch's parameter names, layouts and gate order)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._module import Module, field
from ._common import check_key, check_shape, check_size, compute_dtype, default_float_dtype


def _init_cell(key: jax.Array, gates: int, input_size: int, hidden_size: int, use_bias: bool, dtype: Any) -> tuple[Any, ...]:
    """PyTorch's RNN initialisation: every parameter ~ ``uniform(-1/sqrt(H), 1/sqrt(H))``."""
    lim = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    k1, k2, k3, k4 = jax.random.split(key, 4)
    g = gates * hidden_size
    w_ih = jax.random.uniform(k1, (g, input_size), dtype, minval=-lim, maxval=lim)
    w_hh = jax.random.uniform(k2, (g, hidden_size), dtype, minval=-lim, maxval=lim)
    b_ih = jax.random.uniform(k3, (g,), dtype, minval=-lim, maxval=lim) if use_bias else None
    b_hh = jax.random.uniform(k4, (g,), dtype, minval=-lim, maxval=lim) if use_bias else None
    return w_ih, w_hh, b_ih, b_hh


class _Cell(Module):
    weight_ih: jax.Array
    weight_hh: jax.Array
    bias_ih: jax.Array | None
    bias_hh: jax.Array | None
    input_size: int = field(static=True)
    hidden_size: int = field(static=True)
    use_bias: bool = field(static=True)

    _gates = 0

    def __init__(self, input_size: int, hidden_size: int, use_bias: bool = True, dtype: Any = None, *, key: jax.Array) -> None:
        name = type(self).__name__
        check_size(input_size, "input_size", name)
        check_size(hidden_size, "hidden_size", name)
        key = check_key(key, name)
        self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh = _init_cell(
            key, self._gates, input_size, hidden_size, use_bias, default_float_dtype(dtype)
        )
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.use_bias = bool(use_bias)

    def _projections(self, x: Any, h: Any, hidden_dtypes: list[Any]) -> tuple[jax.Array, jax.Array, jax.Array, Any]:
        """``(W_ih x + b_ih, W_hh h + b_hh, h)`` in the compute dtype."""
        name = type(self).__name__
        x = jnp.asarray(x)
        check_shape(x, (self.input_size,), name)
        dtype = compute_dtype(x.dtype, self.weight_ih.dtype, *hidden_dtypes)
        h = h.astype(dtype)
        gi = self.weight_ih.astype(dtype) @ x.astype(dtype)
        gh = self.weight_hh.astype(dtype) @ h
        if self.bias_ih is not None and self.bias_hh is not None:
            gi = gi + self.bias_ih.astype(dtype)
            gh = gh + self.bias_hh.astype(dtype)
        return gi, gh, h, dtype

    def _hidden(self, h: Any, what: str) -> jax.Array:
        h = jnp.asarray(h)
        assert isinstance(h, jax.Array)
        if h.shape != (self.hidden_size,):
            raise ValueError(
                f"{type(self).__name__}: {what} must have shape ({self.hidden_size},) "
                f"(one example; use jax.vmap for a batch), got {h.shape}"
            )
        return h


class LSTMCell(_Cell, init=False):
    """One step of a long short-term memory cell, as ``torch.nn.LSTMCell``.

    Args:
      input_size, hidden_size: sizes of the input ``x`` and of the states ``h`` and ``c``.
      use_bias: whether to add ``bias_ih`` and ``bias_hh`` (PyTorch's ``bias``).
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only, required), split into four (weight_ih, weight_hh, bias_ih,
        bias_hh).

    Fields (PyTorch's names and layouts): ``weight_ih`` ``(4H, input_size)``, ``weight_hh``
    ``(4H, H)``, ``bias_ih`` and ``bias_hh`` ``(4H,)`` or None; the four row blocks are the
    input, forget, cell and output gates, in that order (PyTorch's).  Initialisation:
    PyTorch's, every parameter ~ ``uniform(-1/sqrt(H), 1/sqrt(H))``.

    Call: ``lstm(x, hidden=None, *, key=None) -> (h, c)`` with ``x`` of shape
    ``(input_size,)`` and ``hidden = (h, c)``, each ``(hidden_size,)`` (None: zeros, as
    PyTorch): ``i, f, g, o = split(W_ih x + b_ih + W_hh h + b_hh)``, ``c' = sigmoid(f) * c +
    sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``.  Scan over a sequence with
    ``jax.lax.scan``.  Raises ValueError for wrong shapes.

    >>> import jax, jax.numpy as jnp
    >>> lstm = LSTMCell(3, 4, key=jax.random.key(0))
    >>> h, c = lstm(jnp.ones(3))
    >>> lstm.weight_ih.shape, h.shape, c.shape
    ((16, 3), (4,), (4,))
    """

    _gates = 4

    def __call__(
        self, x: jax.Array, hidden: tuple[jax.Array, jax.Array] | None = None, *, key: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        if hidden is None:
            z = jnp.zeros((self.hidden_size,), self.weight_hh.dtype)
            hidden = (z, z)
        if not isinstance(hidden, (tuple, list)) or len(hidden) != 2:
            raise ValueError(f"LSTMCell: hidden must be a pair (h, c), got {type(hidden).__name__}")
        h, c = self._hidden(hidden[0], "h"), self._hidden(hidden[1], "c")
        gi, gh, h, dtype = self._projections(x, h, [h.dtype, c.dtype])
        i, f, g, o = jnp.split(gi + gh, 4)
        c = jax.nn.sigmoid(f) * c.astype(dtype) + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, c


class GRUCell(_Cell, init=False):
    """One step of a gated recurrent unit, as ``torch.nn.GRUCell``.

    Args:
      input_size, hidden_size: sizes of the input ``x`` and the state ``h``.
      use_bias: whether to add ``bias_ih`` and ``bias_hh`` (PyTorch's ``bias``).
      dtype: parameter dtype (default float32).
      key: PRNG key (keyword-only, required), split into four as LSTMCell.

    Fields (PyTorch's names and layouts): ``weight_ih`` ``(3H, input_size)``, ``weight_hh``
    ``(3H, H)``, ``bias_ih`` and ``bias_hh`` ``(3H,)`` or None; the row blocks are the reset,
    update and new gates, in that order (PyTorch's).  Initialisation as LSTMCell.

    Call: ``gru(x, h=None, *, key=None) -> h'`` with ``x`` ``(input_size,)`` and ``h``
    ``(hidden_size,)`` (None: zeros): ``r = sigmoid(x_r + h_r)``, ``z = sigmoid(x_z + h_z)``,
    ``n = tanh(x_n + r * h_n)``, ``h' = (1 - z) * n + z * h``, where ``x_* = W_i* x + b_i*``
    and ``h_* = W_h* h + b_h*`` (the reset gate multiplies ``W_hn h + b_hn``, as PyTorch and
    cuDNN).  Raises ValueError for wrong shapes.

    >>> import jax, jax.numpy as jnp
    >>> gru = GRUCell(3, 4, key=jax.random.key(0))
    >>> gru.weight_hh.shape, gru(jnp.ones(3), jnp.zeros(4)).shape
    ((12, 4), (4,))
    """

    _gates = 3

    def __call__(self, x: jax.Array, h: jax.Array | None = None, *, key: jax.Array | None = None) -> jax.Array:
        h = jnp.zeros((self.hidden_size,), self.weight_hh.dtype) if h is None else self._hidden(h, "h")
        gi, gh, h, _ = self._projections(x, h, [h.dtype])
        xr, xz, xn = jnp.split(gi, 3)
        hr, hz, hn = jnp.split(gh, 3)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        return (1 - z) * n + z * h
