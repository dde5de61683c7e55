"""Module behaviours that Equinox users rely on (found by running Equinox's own tests against
spruce): signatures, which ``__init__`` runs under multiple inheritance, fields a subclass
provides as a property or class attribute, ``__slots__``, error classes, bfloat16 under strict
dtype promotion, and the call forms of the filtered transforms."""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import gc
import inspect
import weakref
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.jax as sj
import spruce.nn as nn

# -- signatures --------------------------------------------------------------------------------


def test_signature_shows_the_fields() -> None:
    @dataclasses.dataclass
    class Plain:
        a: int
        b: str = "x"

    class Mod(spruce.Module):
        a: int
        b: str = "x"

    assert inspect.signature(Mod) == inspect.signature(Plain)
    params = inspect.signature(Mod).parameters
    assert list(params) == ["a", "b"] and params["b"].default == "x"

    class Custom(spruce.Module):
        a: int

        def __init__(self, a: int, *, scale: float = 1.0) -> None:
            self.a = int(a * scale)

    params = inspect.signature(Custom).parameters
    assert list(params) == ["a", "scale"]
    assert params["scale"].kind is inspect.Parameter.KEYWORD_ONLY and params["scale"].default == 1.0


def test_signature_of_a_callable_instance_is_its_call() -> None:
    class CallMe(spruce.Module):
        a: int

        def __call__(self, b: int) -> int:
            return self.a + b

    @dataclasses.dataclass
    class PlainCall:
        a: int

        def __call__(self, b: int) -> int:
            return self.a + b

    assert inspect.signature(CallMe(1)) == inspect.signature(PlainCall(1))
    assert list(inspect.signature(CallMe(1)).parameters) == ["b"]


# -- which __init__ runs -----------------------------------------------------------------------


def test_plain_base_init_runs_before_generated_one() -> None:
    calls: list[int] = []

    class A:
        def __init__(self, x: int) -> None:
            calls.append(x)
            self.x = x * 10

    class B(spruce.Module):
        x: int

    class C(A, B):
        pass

    c = C(1)
    assert calls == [1] and c.x == 10
    assert list(inspect.signature(C).parameters) == ["x"]

    class D(B, A):  # the Module first: its generated __init__ wins, as in Equinox
        pass

    d = D(2)
    assert calls == [1] and d.x == 2


# -- fields provided by the class --------------------------------------------------------------


def test_init_false_field_overridden_by_a_property() -> None:
    class Abstract(spruce.Module):
        foo: int = spruce.field(init=False)

    class Concrete(Abstract):
        @property
        def foo(self) -> int:
            return 1

    x = Concrete()
    assert x.foo == 1
    leaves, treedef = jax.tree_util.tree_flatten(x)
    assert leaves == []
    assert jax.tree_util.tree_unflatten(treedef, leaves).foo == 1
    with pytest.raises((ValueError, TypeError), match="did not set the field 'foo'"):
        Abstract()  # the abstract one still needs it


def test_static_field_as_abstract_property_given_a_class_value() -> None:
    class AbstractBase(spruce.Module):
        config: tuple[str, ...] = spruce.field(static=True)

        @property  # type: ignore[no-redef]
        @abc.abstractmethod
        def config(self) -> tuple[str, ...]:  # noqa: F811
            ...

    class ConcreteChild(AbstractBase):
        config = ("a", "b")  # type: ignore[assignment]

        def __init__(self) -> None:
            pass

    model = ConcreteChild()
    assert model.config == ("a", "b")
    assert jax.tree_util.tree_leaves(model) == []
    assert spruce.tree.leaves(model) == []

    def f(m: Any) -> int:
        return len(m.config) if len(m.config) == 2 else 37

    assert jax.jit(f)(model) == 2
    assert sj.filter_jit(f)(model) == 2


def test_slots_for_fields_see_the_assignments() -> None:
    class A(spruce.Module):
        __slots__ = ("x",)
        x: int

        def __init__(self) -> None:
            self.x = 3
            self.x = 4

    a = A()
    assert a.x == 4
    assert spruce.tree.leaves(a) == [4]
    assert jax.tree_util.tree_leaves(a) == [4]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 5  # type: ignore[misc]

    class B(spruce.Module):
        __slots__ = "y"
        y: int

    assert B(2).y == 2


# -- error classes -----------------------------------------------------------------------------


def test_unset_field_is_value_and_type_error() -> None:
    class M(spruce.Module):
        a: int
        b: int

        def __init__(self) -> None:
            self.a = 1

    for cls in (ValueError, TypeError):
        with pytest.raises(cls, match="did not set the field 'b'"):
            M()


def test_tree_at_count_mismatch_is_value_and_type_error() -> None:
    tree = {"a": 1, "b": 2}
    for cls in (ValueError, TypeError):
        with pytest.raises(cls, match="selected 2 places but replace has 3 values"):
            spruce.tree_at(lambda t: (t["a"], t["b"]), tree, (1, 2, 3))


def test_tree_at_single_value_for_several_places_is_value_and_type_error() -> None:
    tree = {"a": 1, "b": 2}
    for cls in (ValueError, TypeError):
        with pytest.raises(cls, match="selected 2 places, so replace must be a sequence of 2 values, got int"):
            spruce.tree_at(lambda t: (t["a"], t["b"]), tree, 4)
    assert tree == {"a": 1, "b": 2}


# -- __post_init__ beside a hand-written __init__ ---------------------------------------------------


def test_hand_written_init_beside_post_init_warns_that_it_will_not_run() -> None:
    calls = []

    class A(spruce.Module):
        x: int

        def __post_init__(self) -> None:
            calls.append(self.x)

    with pytest.warns(
        UserWarning, match=r"B has a hand-written `__init__` method and a `__post_init__` \(inherited from .*A\), which will "
                           r"not run"
    ):

        class B(A):
            def __init__(self) -> None:
                self.x = 2

    with pytest.warns(UserWarning, match=r"\.C has a hand-written `__init__`"):  # inherits B's __init__

        class C(B):
            pass

    with pytest.warns(UserWarning, match=r"\.D has a hand-written `__init__` method and a `__post_init__`, which"):

        class D(spruce.Module):
            y: int

            def __init__(self) -> None:
                self.y = 0

            def __post_init__(self) -> None:
                calls.append(-1)

    assert (A(1).x, B().x, C().x, D().y) == (1, 2, 2, 0)
    assert calls == [1]  # only the generated __init__ ran __post_init__


def test_assigning_the_modules_own_method_is_refused() -> None:
    class A(spruce.Module):
        f: Any
        x: int

        def __init__(self, x: int) -> None:
            self.f = self.g
            self.x = x

        def g(self) -> int:
            return self.x

    with pytest.raises(ValueError, match=r"cannot set A.f to the module's own method 'g'"):
        A(1)

    class Other(spruce.Module):
        def g(self) -> int:
            return 5

    class B(spruce.Module):
        f: Any

    other = Other()
    assert B(other.g).f() == 5  # another module's method is a plain (static-free) leaf value
    assert B(len).f([1]) == 1


def test_generated_init_keeps_a_parents_init_docstring() -> None:
    class A(spruce.Module):
        x: int = 0

    A.__init__.__doc__ = "Build an A."

    class B(A):
        y: int = 1

    assert B.__init__.__doc__ == "Build an A." and B().y == 1


# -- generics ------------------------------------------------------------------------------------


def test_generic_module_keeps_orig_class() -> None:
    T = TypeVar("T")

    class Box(spruce.Module, Generic[T]):
        x: Any

    box = Box[int](3)
    assert box.__orig_class__ == Box[int]
    assert box.x == 3
    assert spruce.tree.leaves(box) == [3]
    with pytest.raises(dataclasses.FrozenInstanceError):
        box.x = 4  # type: ignore[misc]


# -- dtypes --------------------------------------------------------------------------------------


@pytest.fixture
def strict_promotion() -> Any:
    with jax.numpy_dtype_promotion("strict"):
        yield


@pytest.mark.usefixtures("strict_promotion")
def test_layernorm_bfloat16_under_strict_promotion() -> None:
    x = jnp.array([0.0, 1.0, 2.0, 3.0], jnp.bfloat16)
    for layer in (nn.LayerNorm(4, dtype=jnp.bfloat16), nn.RMSNorm(4, dtype=jnp.bfloat16)):
        y = layer(x)
        assert y.dtype == jnp.bfloat16
        xf = np.arange(4.0)
        if isinstance(layer, nn.LayerNorm):
            want = (xf - xf.mean()) / np.sqrt(xf.var() + 1e-5)
        else:
            want = xf / np.sqrt((xf**2).mean() + 1e-6)
        np.testing.assert_allclose(np.asarray(y, np.float32), want, rtol=1e-2, atol=1e-2)
    y32 = nn.LayerNorm(4)(x.astype(jnp.float32))
    assert y32.dtype == jnp.float32


# -- call forms of the filtered transforms ---------------------------------------------------------


def test_filter_jit_lower() -> None:
    f = sj.filter_jit(lambda x, n: x * n)
    lowered = f.lower(jnp.ones(3), 2)
    assert "mul" in lowered.as_text()
    np.testing.assert_allclose(lowered.compile()(jnp.ones(3), 2), 2 * np.ones(3))


def test_filter_grad_decorator_factory() -> None:
    @sj.filter_grad(has_aux=True)
    def loss(x: jax.Array) -> Any:
        return jnp.sum(x**2), "aux"

    g, aux = loss(jnp.array([1.0, 2.0]))
    assert aux == "aux"
    np.testing.assert_allclose(g, [2.0, 4.0])


def test_filter_vmap_axis_size_and_dict_in_axes() -> None:
    def f(d: dict[str, Any]) -> Any:
        return d["x"] * 2 + d["y"]

    out = sj.filter_vmap(f, in_axes=(dict(x=0, y=None),))({"x": jnp.arange(3.0), "y": jnp.ones(())})
    np.testing.assert_allclose(out, [1.0, 3.0, 5.0])
    const = sj.filter_vmap(lambda: jnp.ones(2), axis_size=4)()
    assert const.shape == (4, 2)


def test_filter_jit_rewrapping_reuses_the_compiled_function() -> None:
    traces: list[int] = []

    def f(x: jax.Array) -> jax.Array:
        traces.append(1)
        return x + 1

    sj.filter_jit(f)(jnp.ones(2))
    sj.filter_jit(f)(jnp.ones(2))  # a new wrapper of the same function: no new trace
    assert len(traces) == 1

    class M(spruce.Module):
        w: jax.Array

        def apply(self, x: jax.Array) -> jax.Array:
            traces.append(2)
            return self.w * x

    m = M(jnp.ones(2))
    sj.filter_jit(m.apply)(jnp.ones(2))
    sj.filter_jit(m.apply)(jnp.ones(2))  # a new bound method each time
    assert traces.count(2) == 1


def test_filter_grad_call_forms_agree() -> None:
    def loss(x: jax.Array, scale: float) -> Any:
        return scale * jnp.sum(x**2), x.shape

    x = jnp.array([1.0, -3.0])
    for g_fn in (sj.filter_grad(loss, has_aux=True), sj.filter_grad(has_aux=True)(loss)):
        g, aux = g_fn(x, 0.5)
        np.testing.assert_allclose(g, [1.0, -3.0])
        assert aux == (2,)
    plain = sj.filter_grad()(lambda x: jnp.sum(x**3))
    np.testing.assert_allclose(plain(x), [3.0, 27.0])
    for vg_fn in (sj.filter_value_and_grad(loss, has_aux=True), sj.filter_value_and_grad(has_aux=True)(loss)):
        (value, aux), g = vg_fn(x, 2.0)
        np.testing.assert_allclose(value, 20.0)
        np.testing.assert_allclose(g, [4.0, -12.0])
        assert aux == (2,)


def test_filter_grad_bad_call_forms() -> None:
    with pytest.raises(TypeError, match="has_aux"):
        sj.filter_grad(has_auxx=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword"):
        sj.filter_value_and_grad(lambda x: x, argnums=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="filter_grad: expected a function, got int"):
        sj.filter_grad(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="filter_value_and_grad: expected a function, got str"):
        sj.filter_value_and_grad(has_aux=True)("loss")


def test_filter_vmap_call_forms_and_axis_size_errors() -> None:
    @sj.filter_vmap(in_axes=(None, {"w": 0, "tag": None}))
    def f(scale: float, p: dict[str, Any]) -> Any:
        return scale * p["w"], p["tag"]

    out, tag = f(2.0, {"w": jnp.arange(3.0), "tag": "t"})
    np.testing.assert_allclose(out, [0.0, 2.0, 4.0])
    assert tag == "t"
    mapped = sj.filter_vmap(lambda x: x + 1, axis_size=3)(jnp.arange(3.0))  # size given and agreeing
    np.testing.assert_allclose(mapped, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="axis_size"):
        sj.filter_vmap(lambda x: x, axis_size=4)(jnp.arange(3.0))
    with pytest.raises(ValueError, match="axis_size"):
        sj.filter_vmap(lambda: jnp.ones(2))()  # nothing mapped and no size
    with pytest.raises(TypeError, match="filter_vmap: expected a function"):
        sj.filter_vmap(in_axes=0)(3)


def test_filter_jit_lower_forms() -> None:
    traces: list[int] = []

    def f(x: jax.Array, *, y: jax.Array, name: str) -> Any:
        traces.append(1)
        return {"sum": x + y, "name": name}

    jf = sj.filter_jit(f)
    lowered = jf.lower(jnp.ones(2), y=jnp.full(2, 3.0), name="a")
    assert traces == [1]  # traced once, not run
    assert "add" in lowered.as_text()
    out = lowered.compile()(jnp.ones(2), y=jnp.full(2, 3.0), name="a")  # called like the function
    assert out["name"] == "a"
    np.testing.assert_allclose(out["sum"], [4.0, 4.0])
    assert jf(jnp.ones(2), y=jnp.ones(2), name="b")["name"] == "b"  # lowering did not fill the cache wrongly

    class Lin(spruce.Module):
        w: jax.Array

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.w * x

        def apply(self, x: jax.Array) -> jax.Array:
            return self.w + x

    m = Lin(jnp.array([2.0, 3.0]))
    compiled = sj.filter_jit(m).lower(jnp.ones(2)).compile()  # the Module given at lower is used
    np.testing.assert_allclose(compiled(jnp.array([5.0, 7.0])), [10.0, 21.0])
    np.testing.assert_allclose(sj.filter_jit(m.apply).lower(jnp.ones(2)).compile()(jnp.ones(2)), [3.0, 4.0])
    donated = sj.filter_jit(lambda a, b: a * b, donate="all-except-first").lower(jnp.ones(2), jnp.ones(2))
    text = donated.as_text()  # the second argument is donated (aliased to the output), not the first
    assert "%arg0: tensor<2xf32>," in text and "%arg1: tensor<2xf32> {tf.aliasing_output = 0" in text


def test_filter_jit_sharing_between_wrappers() -> None:
    traces: list[str] = []

    def f(x: jax.Array) -> jax.Array:
        traces.append("f")
        return x * 2

    sj.filter_jit(f)(jnp.ones(2))
    sj.filter_jit(f, inline=True)(jnp.ones(2))  # other options: compiled separately
    sj.filter_jit(f, inline=True)(jnp.ones(2))
    sj.filter_jit(f, compiler_options={})(jnp.ones(2))  # unhashable options: not shared
    sj.filter_jit(f, compiler_options={})(jnp.ones(2))
    assert traces == ["f"] * 4

    # bound methods of Modules: the instance's arrays are traced, so every instance shares
    class Scale(spruce.Module):
        w: jax.Array

        def apply(self, x: jax.Array) -> jax.Array:
            traces.append("Scale")
            return self.w * x

    a, b = Scale(jnp.full(2, 2.0)), Scale(jnp.full(2, 5.0))
    np.testing.assert_allclose(sj.filter_jit(a.apply)(jnp.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(sj.filter_jit(b.apply)(jnp.ones(2)), [5.0, 5.0])
    assert traces.count("Scale") == 1

    # bound methods of other objects: the instance is static, one compilation per instance,
    # and the cache does not keep the instance alive
    class Plain:
        def __init__(self, k: float) -> None:
            self.k = k

        def apply(self, x: jax.Array) -> jax.Array:
            traces.append("Plain")
            return self.k * x

    p, q = Plain(3.0), Plain(4.0)
    np.testing.assert_allclose(sj.filter_jit(p.apply)(jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_allclose(sj.filter_jit(p.apply)(jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_allclose(sj.filter_jit(q.apply)(jnp.ones(2)), [4.0, 4.0])
    assert traces.count("Plain") == 2
    alive = weakref.ref(p)
    del p
    gc.collect()
    assert alive() is None

    class Slotted:  # not weakly referenceable: still shared, held by the bounded cache
        __slots__ = ("k",)

        def __init__(self, k: float) -> None:
            self.k = k

        def apply(self, x: jax.Array) -> jax.Array:
            traces.append("Slotted")
            return self.k + x

    s = Slotted(1.0)
    for _ in range(2):
        np.testing.assert_allclose(sj.filter_jit(s.apply)(jnp.ones(2)), [2.0, 2.0])
    assert traces.count("Slotted") == 1


def test_filter_jit_shared_cache_is_bounded_and_thread_safe() -> None:
    from spruce.jax import _jit

    def g(x: jax.Array) -> jax.Array:
        return x - 1

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        wrappers = list(pool.map(lambda _: sj.filter_jit(g), range(16)))
    assert all(w is wrappers[0] for w in wrappers)  # one compiled function for every thread

    fresh = [(lambda x, i=i: x + i) for i in range(_jit._SHARED_MAX + 10)]
    for fn in fresh:
        sj.filter_jit(fn)
    assert len(_jit._SHARED) == _jit._SHARED_MAX
    assert sj.filter_jit(fresh[-1]) is sj.filter_jit(fresh[-1])
    assert sj.filter_jit(g) is not wrappers[0]  # evicted, compiled anew
