"""spruce.Module: fields, construction protocol, immutability, pytree registration (spruce and
jax.tree_util), repr, and the Equinox example of the English tutorial (examples/README.md: its last section,
"Equinox - How to actually do this in practice")."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import time
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.random as random
import jax.tree_util as jtu
import numpy as np
import pytest

import spruce
import spruce.nn as nn
import spruce.tree as st
from helpers import run_python

# ------------------------------------------------------------- the tutorial's SimpleNN


class SimpleNN(spruce.Module):
    layers: list[Any]

    def __init__(self, n_inputs: int, n_hidden: int, n_outputs: int, key: jax.Array) -> None:
        key1, key2 = random.split(key)
        self.layers = [
            nn.Linear(n_inputs, n_hidden, key=key1),
            nn.Linear(n_hidden, n_outputs, key=key2),
        ]

    @partial(jax.vmap, in_axes=(None, 0))
    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)  # type: ignore[no-any-return]


SEED_REPR = """\
SimpleNN(
  layers=[
    Linear(
      weight=f32[2,3],
      bias=f32[2],
      in_features=3,
      out_features=2,
      use_bias=True
    ),
    Linear(
      weight=f32[1,2],
      bias=f32[1],
      in_features=2,
      out_features=1,
      use_bias=True
    )
  ]
)"""

SEED_STRUCTURE = (
    "PyTreeDef(CustomNode(SimpleNN[('layers',), (), ()], [[CustomNode(Linear[('weight', 'bias'), "
    "('in_features', 'out_features', 'use_bias'), (3, 2, True)], [*, *]), CustomNode(Linear"
    "[('weight', 'bias'), ('in_features', 'out_features', 'use_bias'), (2, 1, True)], [*, *])]]))"
)


@pytest.fixture
def model() -> SimpleNN:
    return SimpleNN(3, 2, 1, random.PRNGKey(314))


def test_seed_repr(model: SimpleNN) -> None:
    assert repr(model) == SEED_REPR


def test_seed_structure_jax_and_spruce(model: SimpleNN) -> None:
    assert str(jtu.tree_structure(model)) == SEED_STRUCTURE
    assert str(st.structure(model)) == SEED_STRUCTURE


def test_seed_flatten_one_level(model: SimpleNN) -> None:
    children, treedef = st.flatten_one_level(model)
    assert children == [model.layers]
    assert str(treedef) == "PyTreeDef(CustomNode(SimpleNN[('layers',), (), ()], [*]))"


def test_key_paths_read_like_attributes(model: SimpleNN) -> None:
    jax_paths = [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(model)[0]]
    spruce_paths = [st.keystr(p) for p, _ in st.flatten_with_path(model)[0]]
    expected = [".layers[0].weight", ".layers[0].bias", ".layers[1].weight", ".layers[1].bias"]
    assert jax_paths == expected
    assert spruce_paths == expected


def test_leaves_are_the_parameters_in_field_order(model: SimpleNN) -> None:
    leaves = jtu.tree_leaves(model)
    assert [leaf.shape for leaf in leaves] == [(2, 3), (2,), (1, 2), (1,)]
    assert all(a is b for a, b in zip(leaves, st.leaves(model)))


@pytest.mark.slow
def test_jit_grad_vmap_accept_modules(model: SimpleNN) -> None:
    xs = jnp.arange(30.0).reshape(10, 3) / 10

    @jax.jit
    @jax.value_and_grad
    def loss(m: SimpleNN, xs: jax.Array) -> jax.Array:
        return jnp.mean(m(xs) ** 2)

    v, g = loss(model, xs)
    assert type(g) is SimpleNN
    assert st.structure(g) == st.structure(model)
    # Gradient checked against a finite difference on one weight entry.
    eps = 1e-3
    bumped = spruce.tree_at(lambda m: m.layers[0].weight, model, replace_fn=lambda w: w.at[0, 0].add(eps))
    fd = (loss(bumped, xs)[0] - v) / eps
    np.testing.assert_allclose(float(g.layers[0].weight[0, 0]), float(fd), rtol=2e-2, atol=1e-4)
    # An SGD step as in the tutorials keeps the structure and changes the values.
    new = st.map(lambda p, d: p - 0.1 * d, model, g)
    assert st.structure(new) == st.structure(model)
    assert float(loss(new, xs)[0]) < float(v)
    # vmap over a stacked batch of modules (in_axes=0 on the module).
    stacked = st.map(lambda *xs: jnp.stack(xs), model, new)
    out = jax.vmap(lambda m: m(xs))(stacked)
    assert out.shape == (2, 10, 1)
    np.testing.assert_allclose(out[0], model(xs), rtol=1e-6)


def test_method_as_jit_argument(model: SimpleNN) -> None:
    f = jax.jit(lambda m, x: m.layers[0](x))
    x = jnp.ones(3)
    np.testing.assert_allclose(f(model, x), model.layers[0].weight @ x + model.layers[0].bias, rtol=1e-6)


# ------------------------------------------------------------------ fields & construction


class Point(spruce.Module):
    x: float
    y: float = 0.0
    tag: str = spruce.field(static=True, default="p")


def test_generated_init_defaults_and_keywords() -> None:
    p = Point(1.0, tag="q")
    assert (p.x, p.y, p.tag) == (1.0, 0.0, "q")
    assert st.leaves(p) == [1.0, 0.0]
    assert repr(p) == "Point(x=1.0, y=0.0, tag='q')"
    assert dataclasses.is_dataclass(p)


def test_frozen_after_init() -> None:
    p = Point(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"cannot assign to field 'x' of Point.*tree_at"):
        p.x = 2.0  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'y'"):
        del p.y
    with pytest.raises(AttributeError, match="cannot assign to field 'new'"):
        p.new = 1  # type: ignore[attr-defined]
    assert p.x == 1.0


def test_custom_init_with_defaults_and_factory() -> None:
    class M(spruce.Module):
        a: int
        b: list[int] = dataclasses.field(default_factory=lambda: [7])
        c: str = spruce.field(static=True, default="c")

        def __init__(self, a: int) -> None:
            self.a = a * 2

    m = M(3)
    assert (m.a, m.b, m.c) == (6, [7], "c")
    assert M(1).b is not m.b  # a fresh factory value per instance


def test_custom_init_missing_field() -> None:
    class M(spruce.Module):
        a: int
        b: int

        def __init__(self) -> None:
            self.a = 1

    with pytest.raises(ValueError, match=r"M.__init__ did not set the field 'b'"):
        M()


def test_assigning_a_non_field_in_init() -> None:
    class M(spruce.Module):
        a: int

        def __init__(self) -> None:
            self.a = 1
            self.b = 2

    with pytest.raises(AttributeError, match=r"cannot set M.b: 'b' is not a field"):
        M()


def test_converter_runs_in_init_not_in_unflatten() -> None:
    calls: list[Any] = []

    def conv(v: Any) -> Any:
        calls.append(v)
        return jnp.asarray(v, jnp.float32)

    class M(spruce.Module):
        w: Any = spruce.field(converter=conv)

    m = M([1, 2])
    assert isinstance(m.w, jax.Array) and m.w.dtype == jnp.float32
    assert len(calls) == 1
    rebuilt = st.map(lambda _: "placeholder", m)
    assert rebuilt.w == "placeholder" and len(calls) == 1
    jtu.tree_map(lambda _: object(), m)
    assert len(calls) == 1


def test_converter_applies_to_custom_init_and_defaults() -> None:
    class M(spruce.Module):
        a: Any = spruce.field(converter=str, default=5)
        b: Any = spruce.field(converter=tuple)

        def __init__(self) -> None:
            self.b = [3]

    m = M()
    assert m.a == "5" and m.b == (3,)


def test_check_init_runs_after_init_in_mro_order_and_not_on_unflatten() -> None:
    seen: list[str] = []

    class Base(spruce.Module):
        n: int

        def __check_init__(self) -> None:
            seen.append("base")
            if self.n < 0:
                raise ValueError("n must be >= 0")

    class Child(Base):
        m: int = 0

        def __check_init__(self) -> None:
            seen.append("child")

    Child(1)
    assert seen == ["child", "base"]
    with pytest.raises(ValueError, match="n must be >= 0"):
        Child(-1)
    seen.clear()
    st.map(lambda _: -5, Child(1, 2))
    assert seen == ["child", "base"]  # only the construction, not the map


def test_check_init_cannot_assign() -> None:
    class M(spruce.Module):
        a: int

        def __check_init__(self) -> None:
            self.a = 2

    with pytest.raises(dataclasses.FrozenInstanceError):
        M(1)


def test_post_init_may_assign() -> None:
    class M(spruce.Module):
        a: int
        b: int = dataclasses.field(init=False)

        def __post_init__(self) -> None:
            self.b = self.a + 1

    assert M(1).b == 2


def test_inheritance_of_fields_and_custom_init() -> None:
    class Base(spruce.Module):
        a: int
        s: str = spruce.field(static=True, default="s")

    class Child(Base):
        b: int = 5

    c = Child(1, "t", 2)
    assert (c.a, c.s, c.b) == (1, "t", 2)
    assert str(st.structure(c)) == "PyTreeDef(CustomNode(Child[('a', 'b'), ('s',), ('t',)], [*, *]))"

    class WithInit(spruce.Module):
        a: int

        def __init__(self, v: int) -> None:
            self.a = v + 100

    class Inherits(WithInit):
        pass

    assert Inherits(1).a == 101  # the parent's hand-written __init__ is kept


def test_init_false_class_keyword_keeps_the_inherited_init() -> None:
    """``class C(Base, init=False)`` (PEP 681's keyword, which type checkers read): no __init__
    is generated for C, as ``@dataclass(init=False)``; C's new fields take their defaults."""

    class WithInit(spruce.Module):
        a: int

        def __init__(self, v: int) -> None:
            self.a = v + 100

    class Inherits(WithInit, init=False):
        b: int = 7

    m = Inherits(1)
    assert (m.a, m.b) == (101, 7) and "__init__" not in Inherits.__dict__
    assert str(inspect.signature(Inherits)) == "(v: 'int') -> 'None'"

    class Generated(spruce.Module):
        a: int

    class Keeps(Generated, init=False):
        b: int = 3

    assert (Keeps(5).a, Keeps(5).b) == (5, 3) and Keeps.__init__ is Generated.__init__
    with pytest.raises(TypeError):
        Keeps(5, 6)  # type: ignore[call-arg]  # (Generated's __init__ takes only a)

    class Made(Generated):  # without the keyword: generated from all the fields
        b: int = 3

    assert Made(5, 6).b == 6


def test_static_field_unhashable_error() -> None:
    class M(spruce.Module):
        sizes: Any = spruce.field(static=True)

    with pytest.raises(TypeError, match=r"M.sizes is a static field but its value of type list is not hashable"):
        M([1, 2])
    assert str(st.structure(M((1, 2)))) == "PyTreeDef(CustomNode(M[(), ('sizes',), ((1, 2),)], []))"


def test_static_array_error_and_warning() -> None:
    class M(spruce.Module):
        w: Any = spruce.field(static=True)

    with pytest.raises(TypeError, match=r"M.w is a static field but holds an array \(f32\[2\]\)"):
        M(jnp.zeros(2))
    with pytest.warns(UserWarning, match=r"M.w is a static field holding an array \(f32\[\]\(numpy\)\)"):
        M(np.float32(1.0))


def test_tree_static_marker_is_understood() -> None:
    class M(spruce.Module):
        a: int
        b: int = st.static(default=3)

    assert st.leaves(M(1)) == [1]


def test_function_valued_fields() -> None:
    class Act(spruce.Module):
        w: jax.Array
        fn: Callable[[jax.Array], jax.Array] = spruce.field(static=True)
        fn2: Callable[[jax.Array], jax.Array] = jax.nn.relu  # a leaf (not static)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.fn(self.w * x)

    m = Act(jnp.array(2.0), jnp.tanh)
    y = jax.jit(lambda w, x: Act(w, jnp.tanh)(x))(m.w, 0.5)
    np.testing.assert_allclose(y, np.tanh(1.0), rtol=1e-6)
    assert repr(m) == "Act(w=f32[], fn=<function tanh>, fn2=<function relu>)"


def test_unflatten_does_not_call_init() -> None:
    class Strict(spruce.Module):
        w: Any

        def __init__(self, w: Any) -> None:
            if not isinstance(w, jax.Array):
                raise TypeError("w must be an array")
            self.w = w

    s = Strict(jnp.ones(2))
    leaves, td = jtu.tree_flatten(s)
    rebuilt = jtu.tree_unflatten(td, [None])
    assert type(rebuilt) is Strict and rebuilt.w is None
    assert st.unflatten(st.structure(s), ["x"]).w == "x"


def test_modules_are_equal_by_identity_and_hashable() -> None:
    a, b = Point(1.0), Point(1.0)
    assert a == a and a != b
    assert spruce.tree_equal(a, b)
    hash(a)


def test_pickle_and_copy_roundtrip() -> None:
    import copy

    p = Point(1.5, 2.5, tag="z")
    for q in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert type(q) is Point and (q.x, q.y, q.tag) == (1.5, 2.5, "z")


def test_repr_options() -> None:
    class Box(spruce.Module):
        a: Any
        b: Any

    box = Box(jnp.arange(3.0), Box(1, [2, 3]))
    assert repr(box) == "Box(a=f32[3], b=Box(a=1, b=[2, 3]))"
    assert spruce.pformat(box, max_depth=1) == "Box(a=f32[3], b=Box(...))"
    assert spruce.pformat(box, short_arrays=False) == "Box(a=Array([0., 1., 2.], dtype=float32), b=Box(a=1, b=[2, 3]))"
    assert spruce.pformat(box, width=24) == "Box(\n  a=f32[3],\n  b=Box(a=1, b=[2, 3])\n)"
    assert spruce.pformat(box, width=21) == "Box(\n  a=f32[3],\n  b=Box(\n    a=1,\n    b=[2, 3]\n  )\n)"
    assert spruce.pformat((1,)) == "(1,)"
    with pytest.raises(ValueError):
        spruce.pformat(box, max_depth=-1)


class Chain(spruce.Module):
    child: Any


DEPTH_CUT = 100  # pformat's nesting limit when max_depth is None
DEEP_KINDS: dict[str, tuple[Callable[[Any], Any], str, str, str]] = {
    # wrap one level, its one-line opening, the cut-off marker, its one-line closing
    "list": (lambda x: [x], "[", "[...]", "]"),
    "dict": (lambda x: {"k": x}, "{'k': ", "{...}", "}"),
    "tuple": (lambda x: (x,), "(", "(...)", ",)"),
    "Module": (Chain, "Chain(child=", "Chain(...)", ")"),
}


@pytest.mark.parametrize(
    ("kind", "depth"),
    # (a million Modules take seconds to build; 100,000 show the same)
    [
        pytest.param(k, d, marks=[pytest.mark.slow] if d == 1_000_000 else [])
        for k in DEEP_KINDS for d in (100_000, 1_000_000) if k != "Module" or d == 100_000
    ],
)
def test_pformat_of_a_deep_tree_is_cut_at_100_levels(kind: str, depth: int) -> None:
    # Every spruce.tree function handles 1,000,000 levels; pformat (and repr) must not raise
    # RecursionError there either, and must stay fast and bounded: it prints 100 levels.
    wrap, opening, marker, closing = DEEP_KINDS[kind]
    tree: Any = []
    for _ in range(depth):
        tree = wrap(tree)
    start = time.perf_counter()
    text = spruce.pformat(tree)
    assert time.perf_counter() - start < 1.0
    assert spruce.pformat(tree, width=10**9) == opening * DEPTH_CUT + marker + closing * DEPTH_CUT
    lines = text.split("\n")  # broken over one line per level: 100 openings, the marker, 100 closings
    assert len(lines) == 2 * DEPTH_CUT + 1 and marker in lines[DEPTH_CUT]
    assert spruce.pformat(tree, max_depth=3) == opening * 3 + marker + closing * 3
    if kind == "Module":
        assert repr(tree) == text


def test_pformat_honours_a_max_depth_beyond_the_default_cut() -> None:
    tree: Any = []
    for _ in range(2_000):
        tree = [tree]
    assert spruce.pformat(tree, width=10**9, max_depth=1_500) == "[" * 1_500 + "[...]" + "]" * 1_500
    assert spruce.pformat(tree, width=10**9, max_depth=5_000) == "[" * 2_001 + "]" * 2_001
    broken = spruce.pformat(tree, max_depth=1_500)  # no RecursionError at any explicit depth
    assert broken.count("\n") == 3_000


def test_pformat_of_a_deep_tuple_dict_key() -> None:
    # repr of a 100,000-deep tuple recurses; as a dict key it is printed by the same cut.
    key: Any = ()
    for _ in range(100_000):
        key = (key,)
    text = spruce.pformat({key: 1}, width=10**9)
    assert text == "{" + "(" * (DEPTH_CUT - 1) + "(...)" + ",)" * (DEPTH_CUT - 1) + ": 1}"
    assert spruce.pformat({(1, ("a", None)): 2}, max_depth=0) == "{...}"
    assert spruce.pformat({(1, ("a", None)): 2}, max_depth=1) == "{(1, ('a', None)): 2}"  # keys not cut


def test_pformat_of_cycles_is_finite() -> None:
    # Python's repr prints a container inside itself as [...]; pformat prints <cycle>.
    lst: list[Any] = [1]
    lst.append(lst)
    assert spruce.pformat(lst) == "[1, <cycle>]"
    dct: dict[str, Any] = {"a": 1}
    dct["self"] = dct
    assert spruce.pformat(dct) == "{'a': 1, 'self': <cycle>}"
    outer: list[Any] = []
    outer.append({"inner": (outer, 2)})  # a cycle through a dict and a tuple
    assert spruce.pformat(outer) == "[{'inner': (<cycle>, 2)}]"
    assert spruce.pformat(outer, width=10) == "[\n  {\n    'inner': (\n      <cycle>,\n      2\n    )\n  }\n]"
    module = Chain([])
    module.child.append(module)
    assert repr(module) == "Chain(child=[<cycle>])"
    shared = [1]
    assert spruce.pformat([shared, shared]) == "[[1], [1]]"  # shared, not a cycle


def test_repr_under_jit_shows_tracer_shapes() -> None:
    seen: list[str] = []

    def f(p: Point) -> jax.Array:
        seen.append(repr(p))
        return p.x

    jax.jit(f)(Point(jnp.ones((2, 2)), jnp.zeros(3)))
    assert seen == ["Point(x=f32[2,2], y=f32[3], tag='p')"]


def test_abstract_methods_are_enforced() -> None:
    import abc

    class Base(spruce.Module):
        @abc.abstractmethod
        def f(self) -> int: ...

    with pytest.raises(TypeError, match="abstract"):
        Base()


# ------------------------------------------------------------------ import hygiene


@pytest.mark.subprocess
def test_import_spruce_does_not_import_jax() -> None:
    proc = run_python(
        """
        import sys
        import spruce
        class M(spruce.Module):
            a: object
        m = M(1)
        print(sorted(k for k in ('jax', 'jaxlib', 'numpy') if k in sys.modules))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.subprocess
@pytest.mark.slow
def test_class_defined_before_jax_import_is_registered_with_jax() -> None:
    proc = run_python(
        """
        import spruce
        class M(spruce.Module):
            w: object
            n: int = spruce.field(static=True, default=2)
        m = M(1.0)
        import jax
        print(jax.tree_util.tree_structure(m))
        print(jax.grad(lambda m: m.w * 3.0)(m).w)
        class Later(spruce.Module):
            v: object
        print(jax.tree_util.tree_leaves(Later(5)))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "PyTreeDef(CustomNode(M[('w',), ('n',), (2,)], [*]))",
        "3.0",
        "[5]",
    ]


def test_a_module_field_deleted_from_the_instance_is_named_when_flattening() -> None:
    class M(spruce.Module):
        a: Any
        b: Any

    m = M(1, 2)
    object.__delattr__(m, "b")
    for walk in (st.flatten, st.flatten_with_path, lambda t: st.map(lambda x: x, t)):
        with pytest.raises(
            AttributeError, match=r"M\.b is not set \(deleted from the instance, or not assigned yet in __init__\)"
        ):
            walk({"layers": [0, m]})
