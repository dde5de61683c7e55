"""Linear, Identity, Lambda, Sequential, MLP."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Literal, Sequence, overload

import jax
import jax.numpy as jnp

from .. import tree as _tree
from .._module import Module, field, is_array
from ._common import check_key, check_shape, check_size, default_float_dtype, uniform

Features = int | Literal["scalar"]


def identity(x: Any) -> Any:
    """Return ``x`` unchanged (the default ``final_activation`` of MLP)."""
    return x


class Linear(Module):
    """An affine map ``y = weight @ x + bias`` on one example.

    Args:
      in_features: size of the input vector, or ``'scalar'`` for an input of shape ``()``.
      out_features: size of the output vector, or ``'scalar'`` for an output of shape ``()``.
      use_bias: whether to add ``bias``.
      dtype: parameter dtype (default: JAX's default float, float32).
      key: PRNG key (keyword-only, required), split in two: one for ``weight``, one for
        ``bias``.

    Fields: ``weight`` of shape ``(out, in)``, ``bias`` of shape ``(out,)`` or None (with
    ``'scalar'`` counted as size 1); ``in_features``, ``out_features``, ``use_bias`` static.

    Initialisation: both ``weight`` and ``bias`` are drawn from
    ``uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with ``fan_in = in`` (the rule of PyTorch's and
    Equinox's Linear); ``wkey, bkey = jax.random.split(key, 2)``.  A complex ``dtype`` draws
    the real and imaginary parts independently, each from that range (as Equinox).

    Call: ``layer(x, *, key=None)`` with ``x`` of shape ``(in,)`` (``()`` for ``'scalar'``),
    returns shape ``(out,)`` (``()`` for ``'scalar'``) in the promoted dtype of x and the
    parameters.  ``key`` is accepted and ignored (for Sequential).  Raises ValueError for a
    wrong input shape.
    """

    weight: jax.Array
    bias: jax.Array | None
    in_features: Features = field(static=True)
    out_features: Features = field(static=True)
    use_bias: bool = field(static=True)

    def __init__(
        self,
        in_features: Features,
        out_features: Features,
        use_bias: bool = True,
        dtype: Any = None,
        *,
        key: jax.Array,
    ) -> None:
        check_size(in_features, "in_features", "Linear", allow_scalar=True)
        check_size(out_features, "out_features", "Linear", allow_scalar=True)
        key = check_key(key, "Linear")
        dtype = default_float_dtype(dtype)
        n_in = 1 if in_features == "scalar" else int(in_features)
        n_out = 1 if out_features == "scalar" else int(out_features)
        wkey, bkey = jax.random.split(key, 2)
        lim = 1.0 / math.sqrt(n_in) if n_in > 0 else 0.0
        self.weight = uniform(wkey, (n_out, n_in), dtype, lim)
        self.bias = uniform(bkey, (n_out,), dtype, lim) if use_bias else None
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = bool(use_bias)

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        if self.in_features == "scalar":
            check_shape(x, (), "Linear('scalar' in)")
            x = jnp.reshape(x, (1,))
        else:
            check_shape(x, (self.weight.shape[1],), "Linear")
        y = self.weight @ x
        if self.bias is not None:
            y = y + self.bias
        if self.out_features == "scalar":
            y = jnp.reshape(y, ())
        return y


class Identity(Module):
    """The identity layer: ``Identity()(x) is x``.  Accepts and ignores any constructor
    arguments (so it can stand in for another layer) and the call's ``key``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs

    def __call__(self, x: Any, *, key: jax.Array | None = None) -> Any:
        return x


class Lambda(Module):
    """Wrap a function of one argument as a layer (e.g. ``Lambda(jax.nn.relu)`` in a
    Sequential).  ``fn`` is a static field (so it must be hashable, as functions are); the
    call's ``key`` is ignored.  Raises TypeError if ``fn`` is not callable."""

    fn: Callable[[Any], Any] = field(static=True)

    def __check_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Lambda(fn): fn must be callable, got {type(self.fn).__name__}")

    def __call__(self, x: Any, *, key: jax.Array | None = None) -> Any:
        return self.fn(x)


class Sequential(Module):
    """Layers applied in order: ``Sequential((a, b))(x) == b(a(x))``.

    ``layers`` is any sequence of callables taking ``(x, *, key=None)`` (the spruce.nn layers,
    or ``Lambda(f)`` for a plain function); it is stored as a tuple.  Call:
    ``seq(x, *, key=None)``; a key is split into one key per layer, None gives every layer None.
    Indexing: ``seq[i]`` is a layer, ``seq[i:j]`` a Sequential; ``len`` and iteration work.

    As a pytree, a Sequential's children are its layers, keyed by position
    (``SequenceKey(i)``), not one ``layers`` tuple: key paths read ``[0].weight`` and checkpoint
    names ``0.weight``, the names of ``torch.nn.Sequential``, so a PyTorch Sequential's
    ``state_dict`` loads by name (``spruce.io.load(path, like=seq)``, strictly) when the layers
    are at the same positions (a ``Lambda(jax.nn.relu)`` where PyTorch has its parameterless
    ``ReLU``).  ``seq.layers`` is still the tuple.  (A checkpoint that spruce wrote with the
    earlier names ``layers.0.weight`` still loads without ``like=``, and into one with
    ``rename=lambda n: n.replace("layers.", "", 1)`` for a top-level Sequential.)
    ``spruce.io`` stores a Sequential as its ``layers`` field, so it loads without ``like=``
    when its layers do.  A subclass of Sequential is an ordinary Module (``layers.0.weight``).

    >>> import jax
    >>> seq = Sequential([Linear(3, 4, key=jax.random.key(0)), Lambda(jax.nn.relu), Linear(4, 2, key=jax.random.key(1))])
    >>> [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(seq)]
    ['[0].weight', '[0].bias', '[2].weight', '[2].bias']
    """

    layers: tuple[Any, ...] = field(converter=tuple)

    def __call__(self, x: Any, *, key: jax.Array | None = None) -> Any:
        keys: Sequence[Any] = [None] * len(self.layers) if key is None else list(jax.random.split(key, len(self.layers)))
        for layer, k in zip(self.layers, keys):
            x = layer(x, key=k)
        return x

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> Sequential: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return Sequential(self.layers[i])
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.layers)


# Sequential as a pytree: its layers are its children, keyed by position as in PyTorch's
# Sequential (the Module metaclass registered it with one child, the ``layers`` tuple, keyed
# GetAttrKey('layers')).  spruce.tree.unregister then a new registration replaces that entry;
# jax.tree_util's entry defers to spruce's current one (spruce/_jax_bridge.py).
_new = object.__new__


def _sequential_flatten(seq: Sequential) -> tuple[tuple[Any, ...], None]:
    return seq.__dict__["layers"], None


def _sequential_flatten_with_keys(seq: Sequential) -> tuple[list[tuple[Any, Any]], None]:
    return [(_tree.SequenceKey(i), layer) for i, layer in enumerate(seq.__dict__["layers"])], None


def _sequential_unflatten(aux: None, children: Any) -> Sequential:
    # As a Module's unflatten: no __init__ or converter (transforms rebuild with placeholders).
    seq: Sequential = _new(Sequential)
    seq.__dict__["layers"] = tuple(children)
    return seq


_tree.unregister(Sequential)
_tree.register_pytree_with_keys(Sequential, _sequential_flatten_with_keys, _sequential_unflatten, _sequential_flatten)


class MLP(Module):
    """A multi-layer perceptron: ``depth`` hidden layers of size ``width_size``.

    Args:
      in_size, out_size: input / output vector sizes (``'scalar'`` allowed, as Linear).
      width_size: hidden size; depth: number of hidden layers (0 gives a single Linear).
      activation: applied after every hidden layer (default ``jax.nn.relu``).
      final_activation: applied to the output (default identity).  Both are static fields, so
        a layer with parameters (``PReLU``) is refused with a TypeError (its parameters would
        never be trained; use a ``Sequential``), where Equinox trains one copy per neuron.
      use_bias, use_final_bias: biases of the hidden / last Linear.
      dtype: parameter dtype (default float32).
      scan: keyword-only (default False).  If True, the ``depth - 1`` hidden-to-hidden layers
        are stored as one stacked Linear and run with ``jax.lax.scan``, so the traced program,
        and the compile time, do not grow with ``depth`` (Equinox's ``MLP(scan=True)``).
      key: PRNG key (keyword-only, required), split into ``depth + 1`` keys, one per Linear.

    Fields: ``layers``, initialised as Linear documents: without ``scan``, a tuple of
    ``depth + 1`` Linear; with ``scan`` and ``depth >= 1``, the three Linear ``(first, hidden,
    last)``, where ``hidden`` holds the ``depth - 1`` middle layers stacked along a new leading
    axis (``weight`` ``(depth - 1, width, width)``, ``bias`` ``(depth - 1, width)``; empty for
    ``depth == 1``).  For the same ``key`` both layouts hold the same numbers: layer ``i`` of
    the unscanned MLP is ``hidden`` sliced at ``i - 1``.  The sizes, both activations and
    ``scan`` are static (functions must be hashable).

    Call: ``mlp(x, *, key=None)`` with ``x`` of shape ``(in_size,)`` returns ``(out_size,)``.

    >>> import jax, jax.numpy as jnp
    >>> deep = MLP(3, 1, width_size=4, depth=6, scan=True, key=jax.random.PRNGKey(0))
    >>> [layer.weight.shape for layer in deep.layers]
    [(4, 3), (5, 4, 4), (1, 4)]
    >>> flat = MLP(3, 1, width_size=4, depth=6, key=jax.random.PRNGKey(0))
    >>> bool(jnp.allclose(deep(jnp.ones(3)), flat(jnp.ones(3)), rtol=1e-5, atol=1e-6))
    True
    """

    layers: tuple[Linear, ...]
    activation: Callable[[Any], Any] = field(static=True)
    final_activation: Callable[[Any], Any] = field(static=True)
    in_size: Features = field(static=True)
    out_size: Features = field(static=True)
    width_size: int = field(static=True)
    depth: int = field(static=True)
    scan: bool = field(static=True, default=False)

    def __init__(
        self,
        in_size: Features,
        out_size: Features,
        width_size: int,
        depth: int,
        activation: Callable[[Any], Any] = jax.nn.relu,
        final_activation: Callable[[Any], Any] = identity,
        use_bias: bool = True,
        use_final_bias: bool = True,
        dtype: Any = None,
        *,
        scan: bool = False,
        key: jax.Array,
    ) -> None:
        check_size(width_size, "width_size", "MLP")
        check_size(depth, "depth", "MLP")
        if not isinstance(scan, bool):
            raise TypeError(f"MLP: scan must be a bool, got {scan!r}")
        for name, fn in (("activation", activation), ("final_activation", final_activation)):
            if any(is_array(leaf) for leaf in _tree.leaves(fn)):
                raise TypeError(
                    f"MLP: {name} holds arrays ({type(fn).__name__}, a layer with parameters); "
                    f"MLP keeps its activations as static fields, where they would never be "
                    f"trained.  Build the network as a Sequential of Linear and {type(fn).__name__} "
                    f"layers instead"
                )
        key = check_key(key, "MLP")
        keys = jax.random.split(key, depth + 1)
        layers: list[Linear] = []
        if depth == 0:
            layers.append(Linear(in_size, out_size, use_final_bias, dtype, key=keys[0]))
        else:
            layers.append(Linear(in_size, width_size, use_bias, dtype, key=keys[0]))
            if scan:  # one Linear per key, built under vmap: the same numbers as the loop below
                layers.append(jax.vmap(lambda k: Linear(width_size, width_size, use_bias, dtype, key=k))(keys[1:depth]))
            else:
                for i in range(depth - 1):
                    layers.append(Linear(width_size, width_size, use_bias, dtype, key=keys[i + 1]))
            layers.append(Linear(width_size, out_size, use_final_bias, dtype, key=keys[-1]))
        self.layers = tuple(layers)
        self.activation = activation
        self.final_activation = final_activation
        self.in_size = in_size
        self.out_size = out_size
        self.width_size = width_size
        self.depth = depth
        self.scan = scan

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None) -> jax.Array:
        if self.scan and self.depth > 0:
            first, hidden, last = self.layers
            activation = self.activation

            def step(h: jax.Array, layer: Linear) -> tuple[jax.Array, None]:
                return activation(layer(h)), None

            x, _ = jax.lax.scan(step, self.activation(first(x)), hidden)
            return self.final_activation(last(x))  # type: ignore[no-any-return]
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.final_activation(self.layers[-1](x))  # type: ignore[no-any-return]
