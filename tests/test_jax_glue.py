"""Where spruce meets JAX: behaviour a JAX user relies on, checked against JAX itself.

Each test runs the same input through ``jax.tree_util`` (the oracle) and spruce where both have
the function, so a change in either shows here.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections import OrderedDict, defaultdict
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import spruce
import spruce.jax as sjax
import spruce.tree as st
import spruce.tree_util as stu


def _add3(a: Any, b: Any, c: Any = 0) -> Any:
    return a + b + c


# ------------------------------------------------------------------- Partial of a partial


@pytest.mark.parametrize("inner_kind", ["functools", "jax", "spruce"])
def test_partial_of_a_partial_keeps_it_as_func(inner_kind: str) -> None:
    make = {"functools": functools.partial, "jax": jtu.Partial, "spruce": stu.Partial}[inner_kind]
    inner = make(_add3, 1)
    ours, theirs = stu.Partial(inner, 2), jtu.Partial(inner, 2)
    # JAX's .func is a wrapper that compares and hashes as the partial; spruce's is the partial.
    assert theirs.func == inner and ours.func == inner and inner == ours.func
    assert ours.func is inner
    assert hash(ours.func) == hash(theirs.func) == hash(inner)
    assert ours.args == theirs.args == (2,)
    assert ours(3) == theirs(3) == 6
    assert st.leaves(ours) == jtu.tree_leaves(theirs) == [2]
    # node data compares through the wrapper: equal for the same inner partial only
    assert st.structure(ours) == st.structure(stu.Partial(inner, 5))
    assert st.structure(ours) != st.structure(stu.Partial(make(_add3, 1), 2))
    rebuilt = st.map(lambda v: v * 10, ours)
    assert type(rebuilt) is stu.Partial and rebuilt.func is inner and rebuilt(3) == 24


def test_partial_func_of_a_plain_function_is_unchanged() -> None:
    p = stu.Partial(_add3, 1, c=4)
    assert p.func is _add3 and p.args == (1,) and p.keywords == {"c": 4}
    assert p(2) == 7 and st.leaves(p) == jtu.tree_leaves(jtu.Partial(_add3, 1, c=4)) == [1, 4]


# ------------------------------------------------------------------------- static fields


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"default": 3},
        {"metadata": {"doc": "d"}},
        {"metadata": {"static": False}},
        {"metadata": {"static": False, "doc": "d"}, "default": 1},
        {"metadata": None},
    ],
    ids=["plain", "default", "other-metadata", "static-false", "static-false-and-more", "none"],
)
def test_static_metadata_as_jax(kwargs: dict[str, Any]) -> None:
    ours = st.static(**dict(kwargs))
    theirs = jax.tree.static(**dict(kwargs))
    assert dict(ours.metadata) == dict(theirs.metadata)
    assert ours.default == theirs.default


def test_static_false_metadata_makes_a_data_field() -> None:
    @dataclasses.dataclass
    class Box:
        a: Any
        b: Any = st.static(default=0, metadata={"static": False})
        c: Any = st.static(default="c")

    st.register_dataclass(Box)
    try:
        assert st.leaves(Box(1, 2)) == [1, 2]
        assert st.structure(Box(1, 2)).node_data()[1] == ("c",)
    finally:
        st.unregister(Box)


# -------------------------------------------- errors a JAX user's except clause must catch


@pytest.mark.parametrize("result", [5, (1, 2, 3), "ab"], ids=["int", "triple", "str"])
def test_flatten_returning_a_non_pair_is_caught_as_jax_would(result: Any) -> None:
    class PairlessJ:  # a fresh class per case: JAX has no unregister
        pass

    class PairlessS:
        pass

    jtu.register_pytree_node(PairlessJ, lambda _: result, lambda aux, children: PairlessJ())
    st.register_pytree_node(PairlessS, lambda _: result, lambda aux, children: PairlessS())
    try:
        with pytest.raises(Exception) as jax_err:
            jtu.tree_flatten(PairlessJ())
        assert jax_err.type is ValueError
        with pytest.raises(ValueError, match="PairlessS must return a pair") as ours:
            st.flatten(PairlessS())
        assert isinstance(ours.value, TypeError)  # spruce's own class for it, as before
    finally:
        st.unregister(PairlessS)


def _transpose_cases() -> list[Any]:
    return [
        ([0, 0], (0, 0), [(1, 2), (3,)]),
        ([0, 0], (0, 0), [1, 2, 3]),
        ([0, 0], (0, 0), [(1, 2), (3, 4), (5, 6)]),
    ]


@pytest.mark.parametrize("outer,inner,tree", _transpose_cases(), ids=["short-inner", "flat", "long-outer"])
def test_transpose_mismatch_is_caught_as_jax_would(outer: Any, inner: Any, tree: Any) -> None:
    with pytest.raises(Exception) as jax_err:
        jtu.tree_transpose(jtu.tree_structure(outer), jtu.tree_structure(inner), tree)
    assert jax_err.type is TypeError
    with pytest.raises(TypeError, match=r"transpose: .* does not match the structure at key path") as ours:
        stu.tree_transpose(stu.tree_structure(outer), stu.tree_structure(inner), tree)
    assert isinstance(ours.value, ValueError)  # spruce's class for a mismatch, as before


@pytest.mark.parametrize(
    "fields", [(None, None), (["a"], None), (None, ["a"])], ids=["inferred", "data-only", "meta-only"]
)
def test_register_dataclass_bad_fields_is_caught_as_jax_would(fields: tuple[Any, Any]) -> None:
    class Plain:
        pass

    with pytest.raises(Exception) as jax_err:
        jtu.register_dataclass(Plain, *fields)
    with pytest.raises(jax_err.type, match="register_dataclass") as ours:
        st.register_dataclass(Plain, *fields)
    assert isinstance(ours.value, ValueError)
    assert not st.is_tree_node(Plain)


# ------------------------------------------------------- keyword names of the user's function


def _loss(w: Any, *, x: Any, f: Any = None, fun: Any = None, args: Any = 1.0, kwargs: Any = 1.0) -> Any:
    return jnp.sum((w["a"] * x) ** 2) * args * kwargs + (0.0 if f is None else f)


KEYWORDS = {"x": jnp.array([1.0, 2.0]), "f": 0.5, "fun": "s", "args": 2.0, "kwargs": 3.0}


def test_filter_grad_passes_any_keyword_through() -> None:
    w = {"a": jnp.array(3.0), "n": 4}
    g = sjax.filter_grad(_loss)(w, **KEYWORDS)
    # d/da sum((a x)^2) * 6 = 12 a sum(x^2) = 12 * 3 * 5
    assert g["n"] is None
    np.testing.assert_allclose(g["a"], 180.0, rtol=1e-6)
    (value, g2) = sjax.filter_value_and_grad(_loss)(w, **KEYWORDS)
    np.testing.assert_allclose(value, 9.0 * 5 * 6 + 0.5, rtol=1e-6)
    np.testing.assert_allclose(g2["a"], 180.0, rtol=1e-6)


def test_filter_grad_needs_a_positional_argument() -> None:
    with pytest.raises(TypeError, match=r"filter_grad: .* first positional argument; none was given"):
        sjax.filter_grad(_loss)(w={"a": jnp.ones(())}, x=jnp.ones(2))


class _Scale(spruce.Module):
    s: jax.Array

    def __call__(self, y: Any, *, f: Any, x: Any) -> Any:
        return self.s * y + f + x


def test_filter_jit_passes_any_keyword_through() -> None:
    jitted = sjax.filter_jit(_loss)
    w = {"a": jnp.array(3.0), "n": 4}
    np.testing.assert_allclose(jitted(w, **KEYWORDS), 9.0 * 5 * 6 + 0.5, rtol=1e-6)
    # a Module as the function: its own call receives keywords named like filter_jit's helpers
    m = sjax.filter_jit(_Scale(jnp.array(2.0)))
    np.testing.assert_allclose(m(jnp.array(1.0), f=jnp.array(10.0), x=100.0), 112.0, rtol=1e-6)


# ---------------------------------------------------------------------------- donation


@pytest.mark.parametrize(
    "option",
    ["static_argnums", "static_argnames", "donate_argnums", "donate_argnames"],
)
def test_filter_jit_refuses_options_that_count_positions(option: str) -> None:
    with pytest.raises(TypeError, match=f"filter_jit does not take {option}=: jax.jit would apply it"):
        sjax.filter_jit(_loss, **{option: 0})
    with pytest.raises(TypeError, match=f"does not take {option}="):
        sjax.filter_jit(**{option: 0})  # as a decorator factory: refused at once


def test_filter_jit_donate_must_be_one_of_three() -> None:
    with pytest.raises(ValueError, match="donate must be one of 'none', 'all', 'all-except-first', got 'first'"):
        sjax.filter_jit(_loss, donate="first")


def _step(params: Any, grads: Any, lr: float) -> Any:
    # one output per input array, of the same shape: XLA can reuse every donated buffer (it
    # keeps the ones it cannot reuse alive, so a test with fewer outputs would not see them go)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), jax.tree.map(lambda g: g * lr, grads)


def _fresh() -> tuple[Any, Any]:
    params = {"w": jnp.arange(4.0), "b": jnp.ones(3)}
    grads = {"w": jnp.full(4, 2.0), "b": jnp.full(3, 4.0)}
    return params, grads


@pytest.mark.parametrize(
    "donate,params_deleted,grads_deleted",
    [("none", False, False), ("all", True, True), ("all-except-first", False, True)],
)
def test_filter_jit_donates_by_argument(donate: str, params_deleted: bool, grads_deleted: bool) -> None:
    step = sjax.filter_jit(_step, donate=donate)
    params, grads = _fresh()
    out, half = step(params, grads, 0.5)  # warnings are errors here: JAX's is hidden
    np.testing.assert_allclose(out["w"], [-1.0, 0.0, 1.0, 2.0])
    np.testing.assert_allclose(out["b"], [-1.0, -1.0, -1.0])
    np.testing.assert_allclose(half["b"], [2.0, 2.0, 2.0])
    assert [a.is_deleted() for a in st.leaves(params)] == [params_deleted] * 2
    assert [a.is_deleted() for a in st.leaves(grads)] == [grads_deleted] * 2
    # a second call with fresh arrays (the cached entry) donates the same way
    params, grads = _fresh()
    step(params, grads, 0.5)
    assert [a.is_deleted() for a in st.leaves((params, grads))] == [params_deleted] * 2 + [grads_deleted] * 2


def test_filter_jit_donation_with_a_module_as_the_function() -> None:
    class Shift(spruce.Module):
        s: jax.Array

        def __call__(self, a: Any, b: Any) -> Any:
            return a + self.s, b - self.s, self.s * 2

    for donate, deleted in [("all", [True, True, True]), ("all-except-first", [False, False, True])]:
        m = Shift(jnp.ones(2))
        a, b = jnp.zeros(2), jnp.zeros(2)
        out = sjax.filter_jit(m, donate=donate)(a, b)
        np.testing.assert_allclose(out[0], [1.0, 1.0])
        assert [m.s.is_deleted(), a.is_deleted(), b.is_deleted()] == deleted


def test_reusing_a_donated_argument_prints_only_spruces_error() -> None:
    """The donated array is refused before dispatch: XLA's own 'Buffer has been deleted or
    donated' line (logged to stderr by the runtime) never appears, only spruce's error."""
    import subprocess
    import textwrap

    code = textwrap.dedent(
        """
        import jax.numpy as jnp
        import spruce.jax as sj
        step = sj.filter_jit(lambda p, g: p - g, donate="all")
        p, g = jnp.ones(3), jnp.ones(3)
        step(p, g)
        try:
            step(p, jnp.ones(3))
        except RuntimeError as e:
            print(e)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "argument args[0] (a float32[3] array) has been deleted" in proc.stdout
    assert "deleted or donated" not in proc.stderr and "Execute()" not in proc.stderr, proc.stderr


def test_reusing_a_donated_argument_names_it() -> None:
    step = sjax.filter_jit(_step, donate="all-except-first")
    params, grads = _fresh()
    out, _ = step(params, grads, 0.5)
    with pytest.raises(RuntimeError, match=r"filter_jit: argument args\[1\]\['b'\] \(a float32\[3\] array\) has been "
                       r"deleted: it was donated to an earlier call .* Pass that call's output instead"):
        step(out, grads, 0.5)
    assert not any(a.is_deleted() for a in st.leaves(out))  # the failed call donated nothing
    # a keyword argument, and a plain array argument (JAX's direct path is not taken with donation)
    kw = sjax.filter_jit(lambda p, *, g: (p + g, g * 2), donate="all")  # (an output per buffer)
    p, g = jnp.ones(2), jnp.ones(2)
    np.testing.assert_allclose(kw(p, g=g)[0], [2.0, 2.0])
    assert p.is_deleted() and g.is_deleted()
    with pytest.raises(RuntimeError, match=r"keyword argument g \(a float32\[2\] array\) has been deleted"):
        kw(jnp.ones(2), g=g)
    with pytest.raises(RuntimeError, match=r"argument args\[0\] \(a float32\[2\] array\) has been deleted"):
        kw(p, g=jnp.ones(2))
    # an array deleted by hand, without donation, on the direct path (all arguments arrays)
    plain = sjax.filter_jit(lambda a, b: a * b)
    a = jnp.arange(3.0)
    np.testing.assert_allclose(plain(a, a), [0.0, 1.0, 4.0])
    a.delete()
    with pytest.raises(RuntimeError, match=r"argument args\[0\] \(a float32\[3\] array\) has been deleted"):
        plain(a, jnp.ones(3))
    # the function's own Module, donated with donate='all'
    class Shift(spruce.Module):
        s: jax.Array

        def __call__(self, a: Any) -> Any:
            return a + self.s

    m = Shift(jnp.ones(2))
    f = sjax.filter_jit(m, donate="all")
    f(jnp.zeros(2))
    with pytest.raises(RuntimeError, match=r"the array at \.s of the function's own Module \(a float32\[2\] array\)"):
        f(jnp.zeros(2))


def test_one_donated_array_given_twice_names_both_places() -> None:
    f = sjax.filter_jit(lambda p, x: p["w"] + x, donate="all")
    p = {"w": jnp.ones(3)}
    with pytest.raises(ValueError, match=r"^filter_jit: argument args\[0\]\['w'\] and argument args\[1\] are the same "
                       r"array, and its buffer is donated"):
        f(p, p["w"])
    assert not p["w"].is_deleted()  # nothing was lost
    np.testing.assert_allclose(f(p, jnp.ones(3)), [2.0, 2.0, 2.0])


def test_filter_shard_on_one_device() -> None:
    from jax.sharding import PartitionSpec, SingleDeviceSharding

    dev = jax.devices()[0]
    tree = {"w": np.arange(6.0, dtype=np.float32).reshape(2, 3), "cfg": ("relu", 3), "b": [jnp.ones(2)]}
    out = sjax.filter_shard(tree, dev)
    assert isinstance(out["w"], jax.Array) and out["w"].sharding == SingleDeviceSharding(dev)
    np.testing.assert_array_equal(np.asarray(out["w"]), tree["w"])
    assert out["cfg"] == ("relu", 3)
    part = sjax.filter_shard(tree, {"w": None, "cfg": None, "b": SingleDeviceSharding(dev)})
    assert part["w"] is tree["w"] and part["b"][0].sharding == SingleDeviceSharding(dev)
    abstract = sjax.filter_shard({"w": jax.ShapeDtypeStruct((2, 3), jnp.float32), "n": 1}, dev)
    assert abstract["w"].sharding == SingleDeviceSharding(dev) and abstract["w"].shape == (2, 3) and abstract["n"] == 1
    traced = jax.jit(lambda t: sjax.filter_shard(t, SingleDeviceSharding(dev)))({"w": tree["w"]})
    np.testing.assert_array_equal(np.asarray(traced["w"]), tree["w"])
    with pytest.raises(
        ValueError, match=r"^filter_shard: the shardings must be .*; at key path \['b'\]: expected a tuple of length 2, got a "
                          r"list of length 1"
    ):
        sjax.filter_shard(tree, {"w": None, "cfg": None, "b": (dev, dev)})
    with pytest.raises(
        TypeError, match=r"^filter_shard: the sharding at key path \['w'\] must be a jax.sharding.Sharding, a jax.Device or "
                         r"None, got P"
    ):
        sjax.filter_shard(tree, {"w": PartitionSpec(), "cfg": None, "b": None})
    with pytest.raises(TypeError, match=r"the sharding at key path <root> must be .* got str"):
        sjax.filter_shard(tree, "cpu")
    # filter_jit on one device: a decorator factory, a list of per-argument entries
    one = SingleDeviceSharding(dev)

    @sjax.filter_jit(in_shardings=[{"w": one, "cfg": None, "b": None}, None], out_shardings=one)
    def scaled(t: Any, n: int) -> Any:
        return t["w"] * n + t["b"][0].sum()

    y = scaled(tree, 2)
    assert y.sharding == one
    np.testing.assert_array_equal(np.asarray(y), tree["w"] * 2 + 2.0)
    with pytest.raises(
        ValueError, match=r"^filter_jit\(_loss\): in_shardings: the shardings must be .*at key path args: expected a tuple of "
                          r"length 3, got a tuple of length 2"
    ):
        sjax.filter_jit(_loss, in_shardings=(dev, dev, dev))(jnp.ones(2), jnp.ones(2))


def test_other_errors_at_the_call_pass_through() -> None:
    def bad(x: Any) -> Any:
        raise ValueError("from the function")

    with pytest.raises(ValueError, match="from the function"):
        sjax.filter_jit(bad)(jnp.ones(2))
    with pytest.raises(ValueError, match="from the function"):
        sjax.filter_jit(bad, donate="all")({"x": jnp.ones(2)})


# ----------------------------------------------- tree_at: static fields and the frozen advice


class _Cell(spruce.Module):
    weight: Any
    size: int = spruce.field(static=True)
    act: str = spruce.field(static=True, default="relu")


class _Stack(spruce.Module):
    cells: list[Any]
    n: int = spruce.field(static=True)


def _stack() -> _Stack:
    return _Stack([_Cell(jnp.ones(2), 2), _Cell(jnp.zeros(3), 3, "tanh")], 2)


def _advice(assign: Any) -> str:
    with pytest.raises(AttributeError) as info:
        assign()
    message = str(info.value)
    assert "spruce.tree_at(lambda m: m." in message
    return message


@pytest.mark.parametrize("name,value", [("size", 7), ("act", "gelu"), ("weight", jnp.full(2, 5.0))])
def test_frozen_module_advice_works(name: str, value: Any) -> None:
    cell = _Cell(jnp.ones(2), 2)
    message = _advice(lambda: setattr(cell, name, value))
    assert f"spruce.tree_at(lambda m: m.{name}, module, new_value)" in message
    # follow the advice as written
    new = spruce.tree_at(lambda m: getattr(m, name), cell, value)
    assert getattr(new, name) is value and type(new) is _Cell
    assert getattr(cell, name) is not value  # the original is unchanged
    other = {"size": 2, "act": "relu", "weight": cell.weight}
    for n, v in other.items():
        if n != name:
            assert getattr(new, n) is v
    assert _advice(lambda: delattr(cell, name))


def test_tree_at_replaces_static_fields_in_nested_modules() -> None:
    s = _stack()
    new = spruce.tree_at(lambda t: (t.cells[1].act, t.cells[0].weight, t.n), s, ("gelu", jnp.ones(2) * 4, 9))
    assert (new.n, new.cells[1].act, new.cells[1].size, new.cells[0].size) == (9, "gelu", 3, 2)
    np.testing.assert_array_equal(new.cells[0].weight, [4.0, 4.0])
    assert new.cells[1].weight is s.cells[1].weight and s.cells[1].act == "tanh" and s.n == 2
    # the static values are node data: the structure shows them, the leaves do not change
    assert st.leaves(new)[1] is s.cells[1].weight and len(st.leaves(new)) == 2
    assert "gelu" in repr(st.structure(new)) and "gelu" not in repr(st.structure(s))
    assert spruce.tree_at(lambda t: t.cells[0].size, s, replace_fn=lambda v: v * 10).cells[0].size == 20


def test_tree_at_where_may_still_compute_with_static_fields() -> None:
    s = _stack()
    new = spruce.tree_at(lambda t: t.cells[t.n - 1].weight, s, jnp.ones(3))
    np.testing.assert_array_equal(new.cells[1].weight, np.ones(3))


def test_tree_at_static_field_errors() -> None:
    s = _stack()
    with pytest.raises(TypeError, match=r"_Cell\.size is a static field but its value of type list is not hashable"):
        spruce.tree_at(lambda t: t.cells[0].size, s, [1, 2])
    with pytest.raises(ValueError, match="lies inside another selected place"):
        spruce.tree_at(lambda t: (t.cells[0], t.cells[0].size), s, (1, 2))
    with pytest.raises(ValueError, match="not a node or leaf of the tree"):
        spruce.tree_at(lambda t: t.n * 2, s, 1)  # computed from a static field


class _Counted(spruce.Module):
    w: jax.Array
    n: int = spruce.field(static=True)


def test_tree_at_static_field_selected_through_a_computation_says_why() -> None:
    m = _Counted(jnp.ones(2), 3)
    # First run: m.n is the value 3, so where returns an int (not a place); second run: m.n is a
    # placeholder and `m.n > 2` raises TypeError. The field cannot be selected that way.
    with pytest.raises(ValueError) as info:
        spruce.tree_at(lambda m: m.n if m.n > 2 else m.w, m, 5)
    message = str(info.value)
    assert "type int that is not a node or leaf" in message and "first run" in message
    assert "second run" in message and "where raised TypeError" in message and "without computing with it" in message
    assert isinstance(info.value.__cause__, TypeError)
    # Selected directly (or when the computation picks a data field) it works.
    assert spruce.tree_at(lambda m: m.n, m, 5).n == 5
    np.testing.assert_array_equal(spruce.tree_at(lambda m: m.n if m.n > 5 else m.w, m, jnp.zeros(2)).w, [0.0, 0.0])


def test_tree_at_where_raising_on_its_second_run_is_chained() -> None:
    runs: list[Any] = []

    def where(m: Any) -> Any:
        runs.append(m.n)
        if len(runs) == 2:
            raise RuntimeError("boom on run 2")
        return m.n + 1  # a computed value: not a place

    with pytest.raises(ValueError, match="where raised RuntimeError: boom on run 2") as info:
        spruce.tree_at(where, _Counted(jnp.ones(2), 3), 5)
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == "boom on run 2"
    assert runs[0] == 3 and len(runs) == 2
    # Returning no place on both runs: both are said, the first run's error is the cause.
    with pytest.raises(ValueError, match=r"first run of where.*second run.*not a node or leaf") as info2:
        spruce.tree_at(lambda m: (m.w, 7), _Counted(jnp.ones(2), 3), (5, 5))
    assert isinstance(info2.value.__cause__, ValueError) and "not a node or leaf" in str(info2.value.__cause__)
    # A where that raises on its first run raises that exception itself (with a note).
    with pytest.raises(RuntimeError, match="first"):
        spruce.tree_at(lambda m: (_ for _ in ()).throw(RuntimeError("first")), _Counted(jnp.ones(2), 3), 5)


# ---------------------------------------------------------------- tree_at: linear in places


def _calls_during(fn: Any) -> int:
    """Python function calls made while ``fn()`` runs (a work count, machine-independent)."""
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


@pytest.mark.parametrize("where", ["leaves", "comprehension"])
def test_tree_at_work_is_linear_in_the_number_of_places(where: str) -> None:
    def work(n: int) -> int:
        tree = [[float(i), (i, "s")] for i in range(n)]  # n parents, 2n leaves
        if where == "leaves":
            select: Any = st.leaves
        else:
            select = lambda t: [t[i][1][0] for i in range(n)]
        return _calls_during(lambda: spruce.tree_at(select, tree, replace_fn=lambda v: v))

    small, large = work(500), work(2000)
    # 4x the places: 4x the calls, plus slack for constant costs (quadratic would be 16x)
    assert 3.5 * small < large < 4.5 * small, (small, large)


# ------------------------------------------------------------------------- PyTreeDef.walk


class _Pt(NamedTuple):
    x: Any
    y: Any


WALK_TREES = [
    {"b": (1, [2, None]), "a": OrderedDict(z=3, y=4)},
    _Pt(1, (2, 3)),
    defaultdict(list, {"z": 1, "a": [2]}),
    [(), None, [[]], 5],
    7,
    None,
]


def _walk_both(tree: Any, f_node: Any, f_leaf: Any) -> tuple[Any, Any]:
    leaves = [f"leaf{i}" for i in range(len(jtu.tree_leaves(tree)))]
    theirs = jtu.tree_structure(tree).walk(f_node, f_leaf, leaves)
    ours = st.structure(tree).walk(f_node, f_leaf, iter(leaves))
    return ours, theirs


@pytest.mark.parametrize("tree", WALK_TREES, ids=["dicts", "namedtuple", "defaultdict", "empties", "leaf", "none"])
def test_walk_as_jax(tree: Any) -> None:
    ours, theirs = _walk_both(tree, lambda results, data: ("node", results, data), lambda x: ("leaf", x))
    assert ours == theirs
    # and node_data agrees for every node kind that walk shows
    assert st.structure(tree).node_data() == jtu.tree_structure(tree).node_data()


def test_walk_rebuilds_and_counts() -> None:
    tree = {"b": (1, [2, None]), "a": 3}
    td = st.structure(tree)
    assert td.walk(lambda r, d: sum(r) + 1, lambda x: 0, range(3)) == 4  # nodes: dict, tuple, list, None
    assert td.walk(lambda r, d: max(r, default=0) + 1, lambda x: 0, [0, 0, 0]) == 4  # depth
    assert td.walk(lambda r, d: list(r), None, "xyz") == ["x", ["y", ["z", []]]]
    deep: Any = 0
    for _ in range(5000):
        deep = [deep]
    assert st.structure(deep).walk(lambda r, d: r[0] + 1, None, [0]) == 5000  # iterative


@pytest.mark.parametrize("leaves,word", [([1, 2], "too few"), ([1, 2, 3, 4], "too many")])
def test_walk_wrong_number_of_leaves(leaves: list[int], word: str) -> None:
    td = st.structure([0, 0, 0])
    with pytest.raises(ValueError, match=f"walk: {word} leaves: the PyTreeDef has 3 leaves"):
        td.walk(lambda r, d: r, None, leaves)
    with pytest.raises(ValueError):  # JAX's class too
        jtu.tree_structure([0, 0, 0]).walk(lambda r, d: r, lambda x: x, leaves)


def test_walk_is_reachable_as_jax_names_it() -> None:
    assert stu.PyTreeDef.walk is st.PyTreeDef.walk


# --------------------------------------------------------------------------- ravel_pytree


RAVEL_TREES = {
    "empty-dict": {},
    "empty-list": [],
    "none": None,
    "mixed-int-float": {"a": jnp.ones((2, 3)), "b": jnp.arange(3)},
    "python-scalars": [1.0, 2],
    "numpy-float64": [np.zeros(2, np.float64), jnp.ones(2, jnp.float32)],
    "bf16-f32": [jnp.ones(2, jnp.bfloat16), jnp.ones(1, jnp.float32)],
    "bf16-weak": [jnp.ones(2, jnp.bfloat16), 1.0],
    "bool-int": [True, 1],
    "int8-uint8": (jnp.int8(3), jnp.uint8(4)),
    "zero-size": [jnp.ones((0, 3))],
    "complex-real": [jnp.ones(2, jnp.complex64), 1.0],
    "none-hole-weak": [None, 2.0],
    "scalar-root": 3.0,
    "one-dtype": {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(2)},
}


def _same_arrays(a: Any, b: Any) -> None:
    assert jtu.tree_structure(a) == jtu.tree_structure(b)
    for x, y in zip(jtu.tree_leaves(a), jtu.tree_leaves(b)):
        assert (x.dtype, x.shape, x.weak_type) == (y.dtype, y.shape, y.weak_type)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("tree", list(RAVEL_TREES.values()), ids=list(RAVEL_TREES))
def test_ravel_pytree_as_jax(tree: Any) -> None:
    flat, unravel = sjax.ravel_pytree(tree)
    jflat, junravel = ravel_pytree(tree)
    _same_arrays(flat, jflat)
    _same_arrays(unravel(flat), junravel(jflat))
    # an unravel of another dtype: kept when the leaves had one dtype, refused otherwise
    other = jnp.arange(flat.shape[0], dtype=jnp.int8)
    try:
        expected = junravel(other)
    except TypeError:
        with pytest.raises(TypeError, match=f"unravel: given an array of dtype int8, but expected dtype {jflat.dtype}"):
            unravel(other)
    else:
        _same_arrays(unravel(other), expected)


def test_ravel_pytree_under_jit_and_unravel_equality() -> None:
    tree = {"a": 1.0, "b": jnp.ones(2)}
    np.testing.assert_array_equal(jax.jit(lambda t: sjax.ravel_pytree(t)[0])(tree), [1.0, 1.0, 1.0])
    flat, unravel = sjax.ravel_pytree([1.0, 2])
    assert unravel == sjax.ravel_pytree([3.0, 5])[1] and hash(unravel) == hash(sjax.ravel_pytree([3.0, 5])[1])
    assert unravel != sjax.ravel_pytree([3.0, 5.0])[1]  # other dtypes: another function
    out = jax.jit(unravel)(flat)
    assert [x.dtype for x in out] == [jnp.float32, jnp.int32]
    assert sjax.ravel_pytree([])[1](jnp.ones(3)) == []  # the empty tree ignores the vector


def test_ravel_pytree_errors() -> None:
    with pytest.raises(TypeError, match=r"ravel_pytree: the leaf at key path \['x'\]\[1\] of type str"):
        sjax.ravel_pytree({"x": [1.0, "b"]})
    _, unravel = sjax.ravel_pytree({"a": jnp.ones(2)})
    with pytest.raises(ValueError, match=r"unravel: expected a 1-D array of 2 elements .* got shape \(3,\)"):
        unravel(jnp.ones(3))
    with pytest.raises(ValueError):  # JAX's class for it too
        ravel_pytree({"a": jnp.ones(2)})[1](jnp.ones(3))


def test_walk_calls_in_jax_order() -> None:
    tree = {"b": (2, [3, None]), "a": 1, "c": {"y": 5, "x": 4}}
    calls: list[Any] = []

    def runs(mod: Any) -> list[Any]:
        calls.clear()
        leaves = mod.tree_leaves(tree)
        mod.tree_structure(tree).walk(
            lambda r, d: calls.append(("node", r, d)) or len(calls), lambda x: calls.append(("leaf", x)) or x, leaves
        )
        return list(calls)

    assert runs(stu) == runs(jtu)
