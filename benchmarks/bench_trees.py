"""The pytrees the benchmark times, and the registration of its custom node classes.

Every tree is built by a deterministic, argument-free function, so a second call gives an
equal but distinct tree: the second input of the 2-tree ``map`` and the source of the second
PyTreeDef for ``treedef_eq`` (equal, not identical, so no identity shortcut is timed).

Leaves are small numpy arrays and Python scalars: the operations never touch leaf contents
(the mapped and reduced functions are trivial), so leaf size does not matter, only their count.

Adding a tree: append a :class:`TreeCase` to :func:`tree_cases`.  The spruce Module tree is
built from Module classes defined here (:func:`module_classes`), registered with each peer
through that peer's own API.
"""

from __future__ import annotations

import sys
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

# ---------------------------------------------------------------------------------------------
# Tree description


@dataclass(frozen=True)
class TreeCase:
    """One benchmark tree.

    Attributes:
      name: short identifier, used in tables.
      title: one-line description for the report.
      build: makes a fresh tree (deterministic; called twice for the 2-tree operations).
      custom: the tree holds registered node classes: libraries without a registration API
        (dm-tree) skip it, and optree calls pass the benchmark's registration namespace.
      deep: the tree is deeper than Python's default recursion limit allows for recursive
        flatteners; the run raises the limit and notes which libraries fail without that.
    """

    name: str
    title: str
    build: Callable[[], Any]
    custom: bool = False
    deep: bool = False


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    """A small float32 array (its values are never read by the benchmark)."""
    return np.full(shape, float(seed % 7), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# The trees of the tutorials the examples reproduce (examples/README.md)


def nn_params() -> dict[str, Any]:
    """The tutorials' two-layer network: {'layer1': {'W', 'b'}, 'layer2': {'W', 'b'}} (4 leaves)."""
    return {
        "layer1": {"W": _arr(2, 3), "b": _arr(2)},
        "layer2": {"W": _arr(1, 2), "b": _arr(1)},
    }


def transformer_block(d: int = 8) -> dict[str, Any]:
    """The Korean tutorial's transformer block parameters (10 leaves)."""
    return {
        "attention": {"W_q": _arr(d, d), "W_k": _arr(d, d), "W_v": _arr(d, d), "W_o": _arr(d, d)},
        "mlp": {"W1": _arr(d, 4 * d), "W2": _arr(4 * d, d)},
        "ln1": {"gamma": _arr(d), "beta": _arr(d)},
        "ln2": {"gamma": _arr(d), "beta": _arr(d)},
    }


# ---------------------------------------------------------------------------------------------
# Larger, realistic trees

GPT_BLOCKS = 12


def gpt_params(n_blocks: int = GPT_BLOCKS, d: int = 4) -> dict[str, Any]:
    """A GPT-style parameter dict: embeddings, ``n_blocks`` blocks, final layernorm.

    Each block has attention q/k/v/o weights and biases, a 2-matrix MLP and two layernorms
    (14 leaves), so 12 blocks give 12 * 14 + 4 = 172 leaves.  Blocks are a list of dicts.
    """
    blocks = []
    for i in range(n_blocks):
        blocks.append(
            {
                "attn": {
                    "W_q": _arr(d, d, seed=i), "b_q": _arr(d, seed=i),
                    "W_k": _arr(d, d, seed=i), "b_k": _arr(d, seed=i),
                    "W_v": _arr(d, d, seed=i), "b_v": _arr(d, seed=i),
                    "W_o": _arr(d, d, seed=i), "b_o": _arr(d, seed=i),
                },
                "mlp": {"W1": _arr(d, 4 * d, seed=i), "W2": _arr(4 * d, d, seed=i)},
                "ln1": {"gamma": _arr(d, seed=i), "beta": _arr(d, seed=i)},
                "ln2": {"gamma": _arr(d, seed=i), "beta": _arr(d, seed=i)},
            }
        )
    return {
        "wte": _arr(16, d),
        "wpe": _arr(8, d),
        "blocks": blocks,
        "ln_f": {"gamma": _arr(d), "beta": _arr(d)},
    }


OptState = namedtuple("OptState", ["count", "mu", "nu"])
OptState.__doc__ = "An Adam-like optimizer state: step count, first and second moments."


def _holes(params: Any) -> Any:
    """A copy of ``params`` where every bias and layernorm entry is None (no momentum kept)."""
    if isinstance(params, dict):
        out: dict[str, Any] = {}
        for k, v in params.items():
            if k.startswith("b_") or k in ("gamma", "beta"):
                out[k] = None
            else:
                out[k] = _holes(v)
        return out
    if isinstance(params, list):
        return [_holes(v) for v in params]
    return params


def opt_state() -> OptState:
    """``OptState(count, mu, nu)`` over the GPT params; ``mu`` has None holes (biases, norms).

    None is a leafless node in spruce, jax and optree (defaults) and a leaf in dm-tree and
    torch.utils._pytree, so those two see more leaves here.
    """
    return OptState(count=0, mu=_holes(gpt_params()), nu=gpt_params())


def wide_list(n: int = 10_000) -> list[float]:
    """A flat list of ``n`` Python floats."""
    return [float(i) for i in range(n)]


def wide_dict(n: int = 10_000) -> dict[str, int]:
    """A flat dict of ``n`` string keys (inserted in sorted order) to Python ints."""
    return {f"k{i:06d}": i for i in range(n)}


def chain(depth: int = 1_000) -> Any:
    """``depth`` nested single-element lists around one leaf: [[[...[0.0]...]]]."""
    t: Any = 0.0
    for _ in range(depth):
        t = [t]
    return t


def balanced(n_leaves: int, branching: int = 10) -> Any:
    """A balanced tree of ``n_leaves`` leaves (a power of ``branching``), depth
    log_branching(n_leaves).

    Levels alternate list and dict nodes counted from the bottom (the parents of the leaves are
    always lists, their parents dicts, ...), so every size has the same mix of node kinds near
    the leaves, where most of the nodes are.
    """
    keys = [f"k{i}" for i in range(branching)]
    counter = [0]

    def make(size: int, height: int) -> Any:
        if size <= 1:
            counter[0] += 1
            return float(counter[0])
        kids = [make(size // branching, height - 1) for _ in range(branching)]
        return kids if height % 2 == 1 else dict(zip(keys, kids))

    height = 0
    size = 1
    while size < n_leaves:
        size *= branching
        height += 1
    return make(n_leaves, height)


# ---------------------------------------------------------------------------------------------
# Registered dataclass nodes


@dataclass
class Dense:
    """A dense layer: three data fields (two arrays, a Python float) and one static field."""

    w: Any
    b: Any
    scale: Any
    act: str = "gelu"  # static (metadata): part of the structure, not a leaf


@dataclass
class Net:
    """A network of registered dataclass nodes: a list of ``Dense`` layers, a head, a step."""

    layers: list[Dense]
    head: Dense
    step: Any


DENSE_DATA = ("w", "b", "scale")
DENSE_META = ("act",)
NET_DATA = ("layers", "head", "step")

#: optree registers custom nodes in a namespace; the benchmark passes it on the custom tree.
OPTREE_NAMESPACE = "spruce-benchmarks"


def dataclass_net(n_layers: int = 16, d: int = 4) -> Net:
    """``Net`` with ``n_layers`` ``Dense`` nodes: 3 * (n_layers + 1) + 1 leaves (52 for 16)."""
    layers = [Dense(_arr(d, d, seed=i), _arr(d, seed=i), 1.0 + i, "gelu" if i % 2 else "relu") for i in range(n_layers)]
    return Net(layers=layers, head=Dense(_arr(d, 2), _arr(2), 0.5, "linear"), step=0)


def register_nodes(lib: str, mod: Any) -> None:
    """Register ``Dense``, ``Net`` and the Module classes with library ``lib`` (whose tree
    module is ``mod``), each through that library's own registration API.  dm-tree has none
    (its cases are skipped)."""
    if lib.startswith("spruce"):
        mod.register_dataclass(Dense, data_fields=list(DENSE_DATA), meta_fields=list(DENSE_META))
        mod.register_dataclass(Net, data_fields=list(NET_DATA), meta_fields=[])
    elif lib == "jax":
        mod.register_dataclass(Dense, data_fields=list(DENSE_DATA), meta_fields=list(DENSE_META))
        mod.register_dataclass(Net, data_fields=list(NET_DATA), meta_fields=[])
    elif lib == "optree":
        mod.register_pytree_node(
            Dense,
            lambda x: ((x.w, x.b, x.scale), x.act, DENSE_DATA),
            lambda act, ch: Dense(ch[0], ch[1], ch[2], act),
            namespace=OPTREE_NAMESPACE,
        )
        mod.register_pytree_node(
            Net,
            lambda x: ((x.layers, x.head, x.step), None, NET_DATA),
            lambda _, ch: Net(ch[0], ch[1], ch[2]),
            namespace=OPTREE_NAMESPACE,
        )
    elif lib == "torch":
        key = mod.GetAttrKey
        mod.register_pytree_node(
            Dense,
            lambda x: ([x.w, x.b, x.scale], x.act),
            lambda ch, act: Dense(ch[0], ch[1], ch[2], act),
            flatten_with_keys_fn=lambda x: ([(key(f), getattr(x, f)) for f in DENSE_DATA], x.act),
        )
        mod.register_pytree_node(
            Net,
            lambda x: ([x.layers, x.head, x.step], None),
            lambda ch, _: Net(ch[0], ch[1], ch[2]),
            flatten_with_keys_fn=lambda x: ([(key(f), getattr(x, f)) for f in NET_DATA], None),
        )
    else:
        raise ValueError(f"{lib} has no custom-node registration")
    _register_modules(lib, mod)


# ---------------------------------------------------------------------------------------------
# The list of cases


@lru_cache(maxsize=None)
def module_classes() -> dict[str, Any]:
    """The spruce Module classes of the Module tree, by name (defined on first use, so that
    importing this file does not import spruce).

    ``Linear(weight, bias; in_features, out_features static)``,
    ``LayerNorm(weight, bias; eps static)``, ``Block(ln1, attn_in, attn_out, ln2, fc1, fc2)`` and
    ``Model(embed, blocks, ln_f)``: a small transformer as a user of ``spruce.Module`` writes it.
    """
    import spruce

    class Linear(spruce.Module):
        weight: Any
        bias: Any
        in_features: int = spruce.field(static=True)
        out_features: int = spruce.field(static=True)

    class LayerNorm(spruce.Module):
        weight: Any
        bias: Any
        eps: float = spruce.field(static=True, default=1e-5)

    class Block(spruce.Module):
        ln1: LayerNorm
        attn_in: Linear
        attn_out: Linear
        ln2: LayerNorm
        fc1: Linear
        fc2: Linear

    class Model(spruce.Module):
        embed: Any
        blocks: tuple[Block, ...]
        ln_f: LayerNorm

    return {c.__name__: c for c in (Linear, LayerNorm, Block, Model)}


#: data (child) and static fields of each Module class, for the peers' registrations.
MODULE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Linear": (("weight", "bias"), ("in_features", "out_features")),
    "LayerNorm": (("weight", "bias"), ("eps",)),
    "Block": (("ln1", "attn_in", "attn_out", "ln2", "fc1", "fc2"), ()),
    "Model": (("embed", "blocks", "ln_f"), ()),
}

MODULE_BLOCKS = 4


def module_model(n_blocks: int = MODULE_BLOCKS, d: int = 4) -> Any:
    """``Model`` with ``n_blocks`` ``Block`` modules: 12 * n_blocks + 3 leaves (51 for 4)."""
    c = module_classes()
    lin, ln = c["Linear"], c["LayerNorm"]

    def linear(n_in: int, n_out: int, seed: int) -> Any:
        return lin(_arr(n_out, n_in, seed=seed), _arr(n_out, seed=seed), n_in, n_out)

    def norm(seed: int) -> Any:
        return ln(_arr(d, seed=seed), _arr(d, seed=seed + 1))

    blocks = tuple(
        c["Block"](
            norm(i), linear(d, 3 * d, i), linear(d, d, i + 1), norm(i + 2), linear(d, 4 * d, i + 3), linear(4 * d, d, i + 4)
        )
        for i in range(n_blocks)
    )
    return c["Model"](_arr(16, d), blocks, norm(99))


def _listed(pair: tuple[Any, Any]) -> tuple[list[Any], Any]:
    """``(children, aux)`` with the children as a list (torch's flatten functions return one)."""
    return list(pair[0]), pair[1]


def _register_modules(lib: str, mod: Any) -> None:
    """Register the Module classes with ``lib``.  spruce registers them itself when they are
    defined, and with jax.tree_util as soon as JAX is imported; the uncompiled build gets the
    very node functions Module makes for spruce; optree and torch get the same ``__dict__``
    reads and writes through their APIs."""
    classes = module_classes()
    if lib == "spruce" and mod.__name__.startswith("spruce."):
        return  # the compiled build: Module registered them
    if lib == "jax":
        return
    from spruce._module._module import _fields_getter  # the very reads Module's own flatten makes

    for name, cls in classes.items():
        data, static = MODULE_FIELDS[name]
        if lib == "spruce":
            from spruce._module._module import _make_node_functions

            flatten, unflatten, keys = _make_node_functions(cls, cls._spruce_fields)
            registry = sys.modules[mod.__name__.rsplit(".", 1)[0] + "._tree._registry"]
            registry.register_with_fixed_keys(cls, flatten, unflatten, keys)
            continue

        data_getter, static_getter = _fields_getter(data), _fields_getter(static)

        def flat(x: Any, get_data: Any = data_getter, get_static: Any = static_getter) -> tuple[Any, tuple[Any, ...]]:
            d = x.__dict__
            return get_data(d), get_static(d)

        def unflat(
            aux: tuple[Any, ...], children: Any, cls: Any = cls, data: tuple[str, ...] = data, static: tuple[str, ...] = static
        ) -> Any:
            obj = object.__new__(cls)
            od = obj.__dict__
            od.update(zip(data, children))
            od.update(zip(static, aux))
            return obj

        if lib == "optree":
            mod.register_pytree_node(
                cls,
                lambda x, flat=flat, data=data: (*flat(x), data),
                unflat,
                namespace=OPTREE_NAMESPACE,
            )
        elif lib == "torch":
            key = mod.GetAttrKey
            mod.register_pytree_node(
                cls,
                lambda x, flat=flat: _listed(flat(x)),
                lambda ch, aux, unflat=unflat: unflat(aux, ch),
                flatten_with_keys_fn=lambda x, flat=flat, data=data, key=key: (
                    [(key(n), c) for n, c in zip(data, flat(x)[0])],
                    flat(x)[1],
                ),
            )
        else:
            raise ValueError(f"{lib} has no custom-node registration")


def tree_cases() -> list[TreeCase]:
    """All trees of the (tree, op) ratio table, in report order."""
    cases = [
        TreeCase("nn_params", "tutorial 2-layer NN params dict (4 leaves)", nn_params),
        TreeCase("transformer_block", "tutorial transformer block params (10 leaves)", transformer_block),
        TreeCase("gpt12", f"GPT-style params, {GPT_BLOCKS} blocks (172 leaves)", gpt_params),
        TreeCase("opt_state", "namedtuple(count, mu, nu) over GPT params, None holes in mu", opt_state),
        TreeCase("list_10k", "flat list of 10,000 floats", wide_list),
        TreeCase("dict_10k", "flat dict of 10,000 keys", wide_dict),
        TreeCase("chain_1000", "1,000-deep chain of single-element lists", chain, deep=True),
        TreeCase(
            "dataclass", "registered dataclasses: Net(16 Dense(w, b, scale; act static)) (52 leaves)", dataclass_net, custom=True
        ),
    ]
    what = f"spruce Modules: Model(embed, {MODULE_BLOCKS} Blocks of 4 Linear + 2 LayerNorm, ln_f) (51 leaves)"
    cases.append(TreeCase("module", what, module_model, custom=True))
    return cases
