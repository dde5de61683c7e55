"""spruce.nn: neural-network layers as ``spruce.Module`` s (imports JAX).

Every layer acts on **one example** (no batch axis); batch with ``jax.vmap``, as the
tutorials reproduced in examples/ do.  Parameters are created from an explicit PRNG ``key``
(keyword-only); shapes, dtypes and the initialisation rule are in each class's docstring.
Every layer's call accepts ``key=None`` so that layers compose in ``Sequential``.

Layers:

- dense and sequence: Linear, Identity, Lambda, Sequential, MLP, Embedding,
  MultiheadAttention, RotaryPositionalEmbedding, LSTMCell, GRUCell;
- convolution: Conv1d/2d/3d, ConvTranspose1d/2d/3d;
- pooling: MaxPool1d/2d/3d, AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d;
- normalisation: LayerNorm, RMSNorm, GroupNorm, BatchNorm;
- reparametrisation of a layer's weight: WeightNorm, SpectralNorm (whose power-iteration
  vectors are state, as BatchNorm's running statistics);
- other: Dropout, PReLU, Shared (tied weights).

Layers with a PyTorch counterpart take PyTorch's arguments (``use_bias`` for ``bias`` where
``bias`` names the bias array itself; MultiheadAttention, which has none of that name, takes
``bias``) and use its parameter names, layouts, initialisation and semantics, so a PyTorch
``state_dict`` loads by name (``spruce.io.load(path, like=model)``); inputs are channels first,
as PyTorch's without the batch axis; a ``Sequential``'s layers are its children ``0``, ``1``,
..., as in ``torch.nn.Sequential``.  Every such layer is tested against torch.nn.

Parameters may be JAX or NumPy arrays (``spruce.io.load`` returns NumPy ones): every layer
gives the same values with either, eagerly and under ``jax.jit`` (the model closed over or
passed as an argument), ``jax.vmap``, ``jax.grad`` and ``spruce.jax.filter_jit``.

Layer state that is not a parameter: ``State``, ``make_with_state`` and ``update_state`` carry
BatchNorm's running statistics through a training step, and ``inference_mode(tree, value=True)``
switches every layer with an ``inference`` field (Dropout, BatchNorm, and Equinox's layers in a
mixed model; ``equinox.nn.inference_mode`` switches spruce's layers too).  BatchNorm keeps its
running statistics as its own leaves (PyTorch's names; inference needs nothing else) and
returns updated ones in a ``State`` during training; the reasons are in ``State``'s docstring.

Activations are JAX's own functions, re-exported as plain callables (store them in static
fields): relu, gelu, silu, swish, sigmoid, tanh, softplus, elu, leaky_relu, softmax,
log_softmax, and ``identity``.
"""

from .._extras import require as _require

_require("spruce.nn", "jax")  # before the imports below: a missing package names the extra to install

from jax.nn import elu as elu
from jax.nn import gelu as gelu
from jax.nn import leaky_relu as leaky_relu
from jax.nn import log_softmax as log_softmax
from jax.nn import relu as relu
from jax.nn import sigmoid as sigmoid
from jax.nn import silu as silu
from jax.nn import softmax as softmax
from jax.nn import softplus as softplus
from jax.nn import swish as swish
from jax.numpy import tanh as tanh

from .. import _jax_bridge
from ._attention import MultiheadAttention as MultiheadAttention
from ._batchnorm import BatchNorm as BatchNorm
from ._conv import Conv1d as Conv1d
from ._conv import Conv2d as Conv2d
from ._conv import Conv3d as Conv3d
from ._conv import ConvTranspose1d as ConvTranspose1d
from ._conv import ConvTranspose2d as ConvTranspose2d
from ._conv import ConvTranspose3d as ConvTranspose3d
from ._linear import MLP as MLP
from ._linear import Identity as Identity
from ._linear import Lambda as Lambda
from ._linear import Linear as Linear
from ._linear import Sequential as Sequential
from ._linear import identity as identity
from ._misc import Dropout as Dropout
from ._misc import Embedding as Embedding
from ._misc import PReLU as PReLU
from ._norm import GroupNorm as GroupNorm
from ._norm import LayerNorm as LayerNorm
from ._norm import RMSNorm as RMSNorm
from ._pool import AdaptiveAvgPool1d as AdaptiveAvgPool1d
from ._pool import AdaptiveAvgPool2d as AdaptiveAvgPool2d
from ._pool import AdaptiveAvgPool3d as AdaptiveAvgPool3d
from ._pool import AdaptiveMaxPool1d as AdaptiveMaxPool1d
from ._pool import AdaptiveMaxPool2d as AdaptiveMaxPool2d
from ._pool import AdaptiveMaxPool3d as AdaptiveMaxPool3d
from ._pool import AvgPool1d as AvgPool1d
from ._pool import AvgPool2d as AvgPool2d
from ._pool import AvgPool3d as AvgPool3d
from ._pool import MaxPool1d as MaxPool1d
from ._pool import MaxPool2d as MaxPool2d
from ._pool import MaxPool3d as MaxPool3d
from ._reparam import SpectralNorm as SpectralNorm
from ._reparam import WeightNorm as WeightNorm
from ._rnn import GRUCell as GRUCell
from ._rnn import LSTMCell as LSTMCell
from ._rope import RotaryPositionalEmbedding as RotaryPositionalEmbedding
from ._shared import Shared as Shared
from ._state import State as State
from ._state import inference_mode as inference_mode
from ._state import make_with_state as make_with_state
from ._state import update_state as update_state

# spruce's registry and jax.tree_util's (normally already connected by the import hook).
_jax_bridge.connect()

__all__ = [
    "MLP",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Dropout",
    "Embedding",
    "GRUCell",
    "GroupNorm",
    "Identity",
    "LSTMCell",
    "Lambda",
    "LayerNorm",
    "Linear",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MultiheadAttention",
    "PReLU",
    "RMSNorm",
    "RotaryPositionalEmbedding",
    "Sequential",
    "Shared",
    "SpectralNorm",
    "State",
    "WeightNorm",
    "elu",
    "gelu",
    "identity",
    "inference_mode",
    "leaky_relu",
    "log_softmax",
    "make_with_state",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "swish",
    "tanh",
    "update_state",
]
