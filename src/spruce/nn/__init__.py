"""spruce.nn: neural-network layers as ``spruce.Module`` s (imports JAX).

Every layer acts on **one example** (no batch axis); batch with ``jax.vmap``, as in the seeds.
Parameters are created from an explicit PRNG ``key`` (keyword-only); shapes, dtypes and the
initialisation rule are in each class's docstring.  Every layer's call accepts ``key=None`` so
that layers compose in ``Sequential``.

Activations are JAX's own functions, re-exported as plain callables (store them in static
fields): relu, gelu, silu, swish, sigmoid, tanh, softplus, elu, leaky_relu, softmax,
log_softmax, and ``identity``.
"""

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
from ._linear import MLP as MLP
from ._linear import Identity as Identity
from ._linear import Lambda as Lambda
from ._linear import Linear as Linear
from ._linear import Sequential as Sequential
from ._linear import identity as identity
from ._misc import Dropout as Dropout
from ._misc import Embedding as Embedding
from ._norm import LayerNorm as LayerNorm
from ._norm import RMSNorm as RMSNorm

# spruce's registry and jax.tree_util's (normally already connected by the import hook).
_jax_bridge.connect()

__all__ = [
    "MLP",
    "Dropout",
    "Embedding",
    "Identity",
    "Lambda",
    "LayerNorm",
    "Linear",
    "MultiheadAttention",
    "RMSNorm",
    "Sequential",
    "elu",
    "gelu",
    "identity",
    "leaky_relu",
    "log_softmax",
    "relu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "swish",
    "tanh",
]
