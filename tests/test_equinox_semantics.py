"""spruce.jax's transforms that share a name with Equinox's give Equinox's results: each case
runs both libraries' function on the same inputs and compares (equinox is a test dependency),
then checks what spruce adds (errors naming key paths).  Covered: filter_jvp (symbolic-zero
tangents are None, nested), filter_vjp, filter_custom_jvp / filter_custom_vjp (keyword
arguments, the deprecated defjvp / defvjp, arguments that are not differentiated),
filter_vmap (per-leaf callables, keyword in_axes, out_axes), filter_jit with Python ints and
ahead of time (lower / compile), filter_closure_convert."""

from __future__ import annotations

from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import spruce
import spruce.jax as sj
import spruce.nn as nn


def _is_none(x: Any) -> bool:
    return x is None


def same(ours: Any, theirs: Any) -> None:
    """Equal trees: the same structure (None leaves included), arrays of the same shape and
    dtype and close values, other leaves of the same type and equal (or identical)."""
    la, ta = jax.tree_util.tree_flatten(ours, is_leaf=_is_none)
    lb, tb = jax.tree_util.tree_flatten(theirs, is_leaf=_is_none)
    assert ta == tb, (ta, tb)
    for a, b in zip(la, lb):
        if isinstance(b, (jax.Array, np.ndarray)):
            assert isinstance(a, (jax.Array, np.ndarray)), (a, b)
            assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
        else:
            assert type(a) is type(b) and (a is b or a == b), (a, b)


def both(run: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``run`` given spruce.jax, then equinox."""
    return run(sj), run(eqx)


# Every array leaf: axis 0; every other leaf: not mapped (Equinox's if_array(0)).
def axis0_if_array(x: Any) -> int | None:
    return 0 if spruce.is_array(x) else None


def axis0_if_inexact(x: Any) -> int | None:
    return 0 if spruce.is_inexact_array(x) else None


# -- filter_jvp ----------------------------------------------------------------------------------

OBJ = object()
JVP_PRIMALS = (jnp.array(1.0), jnp.array(1), 1.0, 1, jnp.array(1.0), OBJ)


def jvp_fn(*x: Any) -> Any:
    # differentiable, int array, Python float, Python int, unused-by-tangent, object
    return (1 + x[0] ** 2, 2 + x[1] * 3, 3 + x[2] * 4, 4 + x[3] * 5, 5 + x[4] * 6, x[5], jnp.ones(2), "tag")


@pytest.mark.parametrize(
    "tangents",
    [
        (jnp.array(5.0), None, None, None, None, None),
        (jnp.array(5.0), None, jnp.array(3.0), None, None, None),
        (None, None, None, None, jnp.array(2.0), None),
        (None,) * 6,
    ],
)
@pytest.mark.parametrize("jit", [False, True])
def test_filter_jvp_tangent_is_none_wherever_it_is_a_symbolic_zero(tangents: Any, jit: bool) -> None:
    def run(m: Any) -> Any:
        jvp = m.filter_jit(m.filter_jvp) if jit else m.filter_jvp
        return jvp(jvp_fn, JVP_PRIMALS, tangents)

    (out, t_out), (want_out, want_t) = both(run)
    same(out, want_out)
    same(t_out, want_t)
    # an output that does not depend on a differentiated input has a None tangent, not zeros
    assert t_out[1] is None and t_out[3] is None and t_out[5] is None and t_out[6] is None
    assert (t_out[0] is None) == (tangents[0] is None)
    assert (t_out[4] is None) == (tangents[4] is None)


def test_filter_jvp_python_float_primal() -> None:
    (out, t), (want_out, want_t) = both(lambda m: m.filter_jvp(lambda x: x + 1, (1.0,), (1.0,)))
    same((out, t), (want_out, want_t))
    assert float(t) == 1.0


def test_filter_jvp_nested_closed_over_value_has_no_inner_tangent() -> None:
    seen: dict[str, Any] = {}

    def outer(m: Any) -> Callable[[Any], Any]:
        def f(x: Any) -> Any:
            (a, b), (ta, tb) = m.filter_jvp(lambda y: (y, x), (x,), (1.0,))
            seen[m.__name__] = (ta is None, tb is None)
            return a

        return f

    for m in (sj, eqx):
        m.filter_jvp(outer(m), (1.0,), (1.0,))
    # x carries the outer trace's tangent only: for the inner filter_jvp it is a constant
    assert seen["spruce.jax"] == seen["equinox"] == (False, True)


def test_filter_jvp_of_filter_jvp_is_the_second_derivative() -> None:
    x = jnp.array([0.3, -1.2])

    def second(m: Any) -> Any:
        def first_derivative(y: Any) -> Any:
            return m.filter_jvp(lambda z: (jnp.sin(z), "label"), (y,), (jnp.ones(2),))[1]

        return m.filter_jvp(first_derivative, (x,), (jnp.ones(2),))

    (d1, d2), (want1, want2) = both(second)
    same((d1, d2), (want1, want2))
    np.testing.assert_allclose(np.asarray(d2[0]), -np.sin(np.asarray(x)), rtol=1e-6, atol=1e-6)
    assert d1[1] is None and d2[1] is None


@pytest.mark.parametrize(
    "tangents",
    [
        (jnp.array(5), None, None, None, None, None),  # an int tangent for a float primal
        (None, None, None, None, None, object()),  # a tangent for an object
        (None, jnp.array(1.0), None, None, None, None),  # a tangent for an int array
    ],
)
def test_filter_jvp_bad_tangents_are_type_errors(tangents: Any) -> None:
    for m in (sj, eqx):
        with pytest.raises(TypeError):
            m.filter_jvp(jvp_fn, JVP_PRIMALS, tangents)


# -- filter_vjp ----------------------------------------------------------------------------------


def test_filter_vjp_matches_equinox() -> None:
    w = {"w": jnp.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]]), "n": jnp.array(2), "act": jnp.tanh}
    x, y, marker, marker2 = jnp.array(1), 1.0, object(), object()

    def f(p: Any, x: Any, y: Any, s: Any) -> Any:
        return p["act"](p["w"] @ jnp.array([1.0, 2.0])) * p["n"] + x + y, 2.0, marker2, p["n"] + 1

    def g(*args: Any) -> Any:
        return f(*args), (args[3], args[0]["w"].sum())

    ct = (jnp.array([1.0, 2.0, 3.0]), None, None, None)
    (out, vjp), (want_out, want_vjp) = both(lambda m: m.filter_vjp(f, w, x, y, marker))
    same(out, want_out)
    same(vjp(ct), want_vjp(ct))
    grads = vjp(ct)
    assert grads[0]["n"] is None and grads[0]["act"] is None and grads[1:] == (None, None, None)
    (out, vjp, aux), (want_out, want_vjp, want_aux) = both(lambda m: m.filter_vjp(g, w, x, y, marker, has_aux=True))
    assert aux[0] is marker and want_aux[0] is marker
    same(aux[1], want_aux[1])
    same(out, want_out)
    same(vjp(ct), want_vjp(ct))
    _, plain = jax.vjp(lambda a: jnp.tanh(a @ jnp.array([1.0, 2.0])) * 2 + 1 + 1.0, w["w"])
    np.testing.assert_allclose(vjp(ct)[0]["w"], plain(ct[0])[0], rtol=1e-6, atol=1e-6)


def test_filter_vjp_of_a_module_gives_the_arrays_structure() -> None:
    mlp = nn.MLP(2, 3, 2, 2, key=jax.random.key(0))
    out, vjp = sj.filter_vjp(lambda m, x: m(jnp.array([1.0, 2.0])) + x, mlp, jnp.array(1))
    grads, gx = vjp(jnp.ones(3))
    want = spruce.filter(mlp, spruce.is_array)
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(want)
    assert gx is None
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want)):
        assert a.shape == b.shape and a.dtype == b.dtype


# -- filter_custom_jvp ---------------------------------------------------------------------------


def test_filter_custom_jvp_without_keyword_arguments() -> None:
    def run(m: Any) -> Any:
        @m.filter_custom_jvp
        def call(fn: Any, x: Any) -> Any:
            return fn(x)

        @call.def_jvp
        def call_jvp(primals: Any, tangents: Any) -> Any:
            (fn, x), (t_fn, tx) = primals, tangents
            assert t_fn is None
            return call(fn, x), tx**2

        f = lambda a: a**2 + 1
        plain = [call(f, 1), call(f, 1.0), call(f, jnp.array(1)), call(f, jnp.array(1.0))]
        return plain, jax.jvp(lambda x: call(f, x), (2.0,), (3.0,))

    ours, theirs = both(run)
    same(ours, theirs)
    np.testing.assert_allclose(np.asarray(ours[1]), [5.0, 9.0])


def test_filter_custom_jvp_with_keyword_arguments() -> None:
    def run(m: Any) -> Any:
        @m.filter_custom_jvp
        def call(x: Any, y: Any, *, fn: Any) -> Any:
            return fn(x, y)

        @call.def_jvp
        def call_jvp(primals: Any, tangents: Any, *, fn: Any) -> Any:
            (x, y), (tx, ty) = primals, tangents
            return call(x, y, fn=fn), tx**2 + ty

        f = lambda a, b: a**2 + b
        plain = [call(1, 2, fn=f), call(1.0, 2.0, fn=f), call(jnp.array(1), 2, fn=f), call(jnp.array(1.0), 2, fn=f)]
        return plain, jax.jvp(lambda x, y: call(x, y, fn=f), (2.0, 1.5), (3.0, 4.0))

    ours, theirs = both(run)
    same(ours, theirs)
    np.testing.assert_allclose(np.asarray(ours[1]), [5.5, 13.0])


def test_filter_custom_jvp_defjvp_is_deprecated_and_gives_zero_arrays() -> None:
    def run(m: Any, warning: type[Warning]) -> Any:
        @m.filter_custom_jvp
        def f(x: Any, y: Any) -> Any:
            return x * y

        seen: list[Any] = []

        def f_jvp(primals: Any, tangents: Any) -> Any:
            (x, y), (tx, ty) = primals, tangents
            seen.append(ty)
            return x * y, 3.0 * tx * y + ty * x

        with pytest.warns(warning, match="defjvp"):
            f.defjvp(f_jvp)
        out = jax.jvp(lambda x: f(x, jnp.array(2.0)), (jnp.array(1.0),), (jnp.array(1.0),))
        return out, seen[0]

    (out, ty), (want, want_ty) = run(sj, DeprecationWarning), run(eqx, UserWarning)
    same(out, want)
    np.testing.assert_allclose(np.asarray(out), [2.0, 6.0])
    assert isinstance(ty, jax.Array) and float(ty) == 0.0  # not None: the older rule got zeros
    assert isinstance(want_ty, jax.Array)


# -- filter_custom_vjp ---------------------------------------------------------------------------


def test_filter_custom_vjp_with_keyword_arguments_and_symbolic_zeros() -> None:
    def run(m: Any) -> Any:
        calls: list[Any] = []

        @m.filter_custom_vjp
        def f(xy: Any, *, foo: Any) -> Any:
            x, y = xy
            return x + y + foo, x, y, foo

        @f.def_fwd
        def f_fwd(perturbed: Any, xy: Any, *, foo: Any) -> Any:
            calls.append(("fwd", perturbed))
            return f(xy, foo=foo), None

        @f.def_bwd
        def f_bwd(res: Any, ct: Any, perturbed: Any, xy: Any, *, foo: Any) -> Any:
            calls.append(("bwd", [c is None for c in ct], perturbed))
            return ct[0] * 2.0, ct[2]

        grad = jax.grad(lambda x, y: (lambda o: o[0] + o[2])(f((x, jnp.array(1.0)), foo=y)))(jnp.array(1.0), 2.0)
        return grad, calls

    (grad, calls), (want_grad, want_calls) = both(run)
    same(grad, want_grad)
    assert float(grad) == 2.0
    assert calls == want_calls == [("fwd", (True, False)), ("bwd", [False, True, False, True], (True, False))]


def test_filter_custom_vjp_without_keyword_arguments() -> None:
    def run(m: Any) -> Any:
        @m.filter_custom_vjp
        def f(x: Any, scale: Any) -> Any:
            return jnp.sin(x) * scale, "label"

        @f.def_fwd
        def f_fwd(perturbed: Any, x: Any, scale: Any) -> Any:
            return f(x, scale), (jnp.cos(x), object())  # a residual that is not an array

        @f.def_bwd
        def f_bwd(res: Any, ct: Any, perturbed: Any, x: Any, scale: Any) -> Any:
            assert ct[1] is None
            return 2.0 * ct[0] * res[0] * scale

        x = jnp.array([0.1, 0.7])
        return f(x, 3), jax.grad(lambda x: jnp.sum(f(x, 3)[0]))(x)

    ours, theirs = both(run)
    same(ours, theirs)
    np.testing.assert_allclose(np.asarray(ours[1]), 6.0 * np.cos([0.1, 0.7]), rtol=1e-6)


def test_filter_custom_vjp_defvjp_is_deprecated() -> None:
    def run(m: Any, warning: type[Warning]) -> Any:
        @m.filter_custom_vjp
        def f(x: Any) -> Any:
            a, b = x
            return a + 1, b + 2, b + 3, jnp.array(1)

        seen: list[Any] = []

        def f_fwd(x: Any) -> Any:
            return f(x), "residual"

        def f_bwd(res: Any, g: Any, x: Any) -> Any:
            seen.append((res, g))
            return g[0] + g[1], g[2] * 5.0

        with pytest.warns(warning, match="defvjp"):
            f.defvjp(f_fwd, f_bwd)
        return jax.grad(lambda x: f(x)[0] + f(x)[2])((jnp.array(1.0), jnp.array(1.0))), seen

    (grad, seen), (want, want_seen) = run(sj, DeprecationWarning), run(eqx, UserWarning)
    same(grad, want)
    np.testing.assert_allclose(np.asarray(grad), [1.0, 5.0])
    res, g = seen[0]
    assert res == "residual" and g[3] is None
    # the older rule gets an array of zeros for a floating-point output with no cotangent
    assert isinstance(g[1], jax.Array) and float(g[1]) == 0.0
    same(g, want_seen[0][1])


def _custom_vjp_sum(m: Any) -> Any:
    @m.filter_custom_vjp
    def f(x: Any, y: Any, *, z: Any = None) -> Any:
        return x + y + (0.0 if z is None else z["w"])

    @f.def_fwd
    def f_fwd(perturbed: Any, x: Any, y: Any, *, z: Any = None) -> Any:
        return f(x, y, z=z), None

    @f.def_bwd
    def f_bwd(res: Any, ct: Any, perturbed: Any, x: Any, y: Any, *, z: Any = None) -> Any:
        return ct

    return f


def test_filter_custom_vjp_refuses_to_differentiate_its_other_arguments() -> None:
    for m in (sj, eqx):
        f = _custom_vjp_sum(m)
        with pytest.raises(RuntimeError):
            jax.grad(lambda x, f=f: f(x, x))(1.0)
    f = _custom_vjp_sum(sj)
    with pytest.raises(RuntimeError, match=r"filter_custom_vjp\(f\): a tangent reached the array at args\[1\]"):
        jax.grad(lambda x: f(x, x))(jnp.array(1.0))
    with pytest.raises(RuntimeError, match=r"at kwargs\['z'\]\['w'\]"):
        jax.grad(lambda x: f(x, 1.0, z={"w": x, "s": "tag"}))(jnp.array(1.0))
    # not differentiated through them: fine, and the gradient is the rule's
    assert float(jax.grad(lambda x: f(x, jnp.array(2.0), z={"w": jnp.array(3.0)}))(jnp.array(1.0))) == 1.0
    assert float(jax.grad(lambda x: f(x, jax.lax.stop_gradient(x)))(jnp.array(1.0))) == 1.0


# -- filter_vmap ---------------------------------------------------------------------------------


VMAP_CASES: dict[str, Callable[[Any], Any]] = {
    "callables per leaf and per argument": lambda m: m.filter_vmap(
        lambda a, b, c, d: a + b[0]["a"] + c + d, in_axes=(axis0_if_inexact, [{"a": None}], 0, axis0_if_array)
    )(jnp.array([1.0]), [{"a": jnp.array([2.0])}], jnp.array([3.0]), 4),
    "one callable for every argument": lambda m: m.filter_vmap(lambda a, b: a + b, in_axes=axis0_if_inexact)(
        jnp.array(3), jnp.array([3.0, 4.0])
    ),
    "in_axes by parameter name": lambda m: m.filter_vmap(lambda x, y: x + y, in_axes=dict(y=1))(
        jnp.ones((3, 4)), jnp.arange(3.0)[None]
    ),
    "in_axes by name, others default": lambda m: m.filter_vmap(lambda x, s, y=1: x * s + y, in_axes=dict(s=None))(
        jnp.ones((3, 4)), jnp.arange(4.0)
    ),
    "ensemble": lambda m: m.filter_vmap(lambda p, x: p["w"] @ x + p["b"], in_axes=(axis0_if_array, None))(
        {"w": jnp.arange(24.0).reshape(2, 3, 4), "b": jnp.ones((2, 3)), "act": "relu"}, jnp.ones(4)
    ),
    "out_axes None, nothing mapped": lambda m: m.filter_vmap(lambda x: x, out_axes=None, axis_size=5)(1),
    "out_axes None on an unmapped array": lambda m: m.filter_vmap(
        lambda x: x, in_axes=None, out_axes=None, axis_size=5
    )(jnp.array([3, 4])),
    "out_axes 0 broadcasts a Python int": lambda m: m.filter_vmap(lambda x: x, out_axes=0, axis_size=5)(1),
    "out_axes 0 broadcasts an unmapped array": lambda m: m.filter_vmap(
        lambda x: x, in_axes=None, out_axes=0, axis_size=5
    )(jnp.array([3, 4])),
    "out_axes callable, nothing mapped": lambda m: m.filter_vmap(lambda x: x, out_axes=axis0_if_inexact, axis_size=5)(1),
    "out_axes a prefix": lambda m: m.filter_vmap(lambda x: (x, {"a": 2 * x, "s": "tag"}), out_axes=(0, {"a": 1, "s": None}))(
        jnp.ones((3, 2))
    ),
    "negative out_axes": lambda m: m.filter_vmap(lambda x: x, out_axes=-1)(jnp.arange(6.0).reshape(3, 2)),
    "out_axes callable per leaf": lambda m: m.filter_vmap(
        lambda x: (x, jnp.ones(()), "s"), out_axes=lambda v: 1 if spruce.is_array(v) and v.ndim else None
    )(jnp.ones((3, 2, 4))),
    "non-array outputs": lambda m: m.filter_vmap(lambda x: (x, "a", jnp.tanh))(jnp.ones(3)),
    "axis_name": lambda m: m.filter_vmap(lambda x: jax.lax.psum(x + 1, axis_name="d"), axis_name="d")(jnp.zeros(2)),
}


@pytest.mark.parametrize("case", list(VMAP_CASES))
def test_filter_vmap_matches_equinox(case: str) -> None:
    ours, theirs = both(VMAP_CASES[case])
    same(ours, theirs)


def test_filter_vmap_values() -> None:
    out = VMAP_CASES["out_axes 0 broadcasts a Python int"](sj)
    assert out.tolist() == [1] * 5 and out.dtype == jnp.int32
    assert VMAP_CASES["out_axes None, nothing mapped"](sj) == 1
    np.testing.assert_allclose(VMAP_CASES["in_axes by parameter name"](sj), np.ones((3, 4)) + np.arange(3.0)[:, None])
    a, d = VMAP_CASES["out_axes a prefix"](sj)
    assert a.shape == (3, 2) and d["a"].shape == (2, 3) and d["s"] == "tag"
    assert VMAP_CASES["one callable for every argument"](sj).tolist() == [6.0, 7.0]


@pytest.mark.parametrize(
    "make, exc",
    [
        (lambda m: m.filter_vmap(lambda x, y=1: x, in_axes=dict(y=0))(jnp.ones(3)), ValueError),  # y not passed
        (lambda m: m.filter_vmap(lambda x: x, in_axes=dict(z=0))(jnp.ones(3)), ValueError),  # no such parameter
        (lambda m: m.filter_vmap(lambda a, b: a + b, in_axes=axis0_if_inexact)(jnp.array(3.0), jnp.ones(2)), ValueError),
        (lambda m: m.filter_vmap(lambda: jnp.ones(2))(), ValueError),  # nothing mapped, no axis_size
        (lambda m: m.filter_vmap(lambda x: x, in_axes="a")(jnp.ones(2)), ValueError),
        (lambda m: m.filter_vmap(lambda x: x, out_axes=None)(jnp.ones(2)), ValueError),  # mapped output, axis None
    ],
)
def test_filter_vmap_errors_match_equinox(make: Callable[[Any], Any], exc: type[Exception]) -> None:
    for m in (sj, eqx):
        with pytest.raises(exc):
            make(m)


def test_filter_vmap_error_messages() -> None:
    with pytest.raises(ValueError, match=r"in_axes names \['y'\], which are not positional parameters given"):
        sj.filter_vmap(lambda x, y=1: x, in_axes=dict(y=0))(jnp.ones(3))
    with pytest.raises(ValueError, match=r"in_axes\[1\]\['b'\] is a str; an axis specification holds ints"):
        sj.filter_vmap(lambda x, d: x, in_axes=(0, {"b": "zero"}))(jnp.ones(3), {"b": jnp.ones(3)})
    with pytest.raises(ValueError, match=r"the callable at in_axes\[0\] returned 'x' for the leaf at \['w'\]"):
        sj.filter_vmap(lambda d: d, in_axes=(lambda _: "x",))({"w": jnp.ones(3)})
    with pytest.raises(ValueError, match="out_axes is not a prefix"):
        sj.filter_vmap(lambda x: x, out_axes=(0, 1))(jnp.ones(2))
    with pytest.raises(ValueError, match="axis_size"):
        sj.filter_vmap(lambda: jnp.ones(2))()
    with pytest.raises(TypeError, match=r"positional arguments only, got keyword argument\(s\) \['x'\]"):
        sj.filter_vmap(lambda x: x)(x=jnp.ones(2))


def test_filter_vmap_never_maps_a_non_array_leaf() -> None:
    # (deliberate: Equinox hands a Python number with an int axis to jax.vmap, which refuses it)
    out = sj.filter_vmap(lambda x, y: x * y, in_axes=lambda _: 0)(jnp.ones(3), 2.0)
    assert out.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        eqx.filter_vmap(lambda x, y: x * y, in_axes=lambda _: 0)(jnp.ones(3), 2.0)


# -- filter_jit ----------------------------------------------------------------------------------


INT_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "identity": lambda x: x,
    "plus one": lambda x: x + 1,
    "as array": lambda x: jnp.asarray(x),
    "times array": lambda x: x * jnp.ones(()),
    "container": lambda x: ({"a": x}, [x, None]),
    "shape": lambda x: jnp.zeros(x).shape,
    "NumPy": lambda x: np.asarray(x),
}


def outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except Exception as e:  # the kind of failure is what is compared
        return ("raised", type(e))


@pytest.mark.parametrize("value", [0, 1, -3, True, 2**40, np.int32(3)], ids=repr)
@pytest.mark.parametrize("name", list(INT_FUNCTIONS))
@pytest.mark.parametrize("donate", ["none", "all"])
def test_filter_jit_of_a_python_int_matches_equinox(name: str, value: Any, donate: str) -> None:
    fn = INT_FUNCTIONS[name]

    def run(m: Any) -> Any:
        # a new function each time: Equinox's compilation cache (keyed by the function) would
        # otherwise hand True the output traced for 1, as 1 == True
        single = outcome(lambda: m.filter_jit(lambda x: fn(x), donate=donate)(value))
        mixed = outcome(lambda: m.filter_jit(lambda x, n: (2 * x + n, n), donate=donate)(jnp.array(3), value))
        return single, mixed

    ours, theirs = both(run)
    same(ours, theirs)


@pytest.mark.parametrize("donate", ["none", "all", "all-except-first"])
def test_filter_jit_ahead_of_time_is_called_like_the_function(donate: str) -> None:
    def f(x: Any, y: Any, **kwargs: Any) -> Any:
        return 2 * x + y, kwargs

    def run(m: Any, args: Any, kwargs: Any) -> Any:
        lowered = m.filter_jit(f, donate=donate).lower(*args, **kwargs)
        assert "func.func public @main" in lowered.as_text()
        return lowered.compile()(*args, **kwargs)

    for args, kwargs in [((jnp.array(3), 4), {}), ((jnp.array(3), 4), {"test": 123}), ((1, 2), {}),
                         ((jnp.array([1.0, 2.0]), jnp.array(0.5)), {"w": jnp.ones(2), "s": "t"})]:
        copy = lambda t: jax.tree_util.tree_map(lambda v: jnp.copy(v) if isinstance(v, jax.Array) else v, t)
        same(run(sj, copy(args), copy(kwargs)), run(eqx, copy(args), copy(kwargs)))


def test_filter_jit_ahead_of_time_checks_its_arguments() -> None:
    f = sj.filter_jit(lambda x, n, *, tag: (x * n, tag))
    compiled = f.lower(jnp.ones(3), 2, tag="a").compile()
    out, tag = compiled(jnp.full(3, 2.0), 2, tag="a")
    assert out.tolist() == [4.0, 4.0, 4.0] and tag == "a"
    assert compiled.cost_analysis() is not None and len(compiled.input_shardings[0]) == 1  # JAX's, passed through
    with pytest.raises(TypeError, match=r"compile\(\): argument args\[1\] is 3, but was 2 in the lower\(\) call"):
        compiled(jnp.ones(3), 3, tag="a")
    with pytest.raises(TypeError, match=r"keyword argument tag is 'b', but was 'a'"):
        compiled(jnp.ones(3), 2, tag="b")
    with pytest.raises(TypeError, match=r"argument args\[1\] is an array, but was 2"):
        compiled(jnp.ones(3), jnp.array(2), tag="a")
    with pytest.raises(TypeError, match="structure"):
        compiled(jnp.ones(3), 2)
    with pytest.raises(TypeError):  # another shape: JAX's own check
        compiled(jnp.ones(4), 2, tag="a")

    class Scale(spruce.Module):
        w: jax.Array

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.w * x

    m = Scale(jnp.array([2.0, 3.0]))
    np.testing.assert_allclose(sj.filter_jit(m).lower(jnp.ones(2)).compile()(jnp.array([1.0, 2.0])), [2.0, 6.0])


# -- filter_closure_convert ----------------------------------------------------------------------


def test_filter_closure_convert_hoists_closed_over_tracers() -> None:
    def run(m: Any) -> Any:
        seen: list[bool] = []

        @jax.grad
        def f(x: Any, y: Any) -> Any:
            z = x * y
            g = m.filter_closure_convert(lambda a: z * a, 3)
            seen.append([id(c) for c in g.consts] == [id(z)])
            return g(3)  # 3 x y, differentiated through the constant

        return f(2.0, 5.0), seen

    (grad, seen), (want, want_seen) = both(run)
    same(grad, want)
    assert float(grad) == 15.0 and seen == want_seen == [True]


def test_filter_closure_convert_crosses_a_custom_jvp() -> None:
    def run(m: Any) -> Any:
        @m.filter_custom_jvp
        def call(f: Any, x: Any) -> Any:
            return f(x)

        @call.def_jvp
        def call_jvp(primals: Any, tangents: Any) -> Any:
            (f, x), (tf, tx) = primals, tangents
            out = call(f, x)
            total = sum(jnp.sum(t) for t in jax.tree_util.tree_leaves((tf, tx)))
            return out, jnp.full(out.shape, total, out.dtype)

        @jax.grad
        def grad(x: Any) -> Any:
            x1, x2 = x
            f = m.filter_closure_convert(lambda y: x1 * y + x2, 3.0)
            return call(f, 3.0)

        return grad((2.0, 4.0))

    ours, theirs = both(run)
    same(ours, theirs)
    assert [float(g) for g in ours] == [1.0, 1.0]


def test_filter_closure_convert_structures_and_errors() -> None:
    w = jnp.arange(3.0)

    def run(m: Any) -> Any:
        g = m.filter_closure_convert(lambda a, s, *, k: {"o": w * a * k, "s": s}, jnp.ones(3), "tag", k=2.0)
        return g(jnp.full(3, 2.0), "tag", k=2.0), g.in_struct, g.out_struct

    ours, theirs = both(run)
    same(ours, theirs)
    g = sj.filter_closure_convert(lambda a, s, *, k: {"o": w * a * k, "s": s}, jnp.ones(3), "tag", k=2.0)
    assert len(jax.tree_util.tree_leaves(g)) == 1 and jax.tree_util.tree_leaves(g)[0] is w  # the constant
    assert spruce.tree.leaves_with_path(g)[0][0] == (spruce.tree.GetAttrKey("consts"), spruce.tree.SequenceKey(0))
    np.testing.assert_allclose(sj.filter_jit(lambda g, a: g(a, "tag", k=2.0)["o"])(g, jnp.ones(3)), [0.0, 2.0, 4.0])
    assert g.jaxpr is not None and "filter_closure_convert" in repr(g)
    with pytest.raises(ValueError, match=r"args\[0\] is float32\[4\], but the function was converted for an array float32\[3\]"):
        g(jnp.ones(4), "tag", k=2.0)
    with pytest.raises(ValueError, match=r"args\[0\] is int32\[3\]"):
        g(jnp.ones(3, jnp.int32), "tag", k=2.0)
    with pytest.raises(ValueError, match=r"args\[1\] is 'x', but the function was converted for 'tag' there"):
        g(jnp.ones(3), "x", k=2.0)
    with pytest.raises(ValueError, match=r"kwargs\['k'\] is 3.0"):
        g(jnp.ones(3), "tag", k=3.0)
    with pytest.raises(ValueError, match="structure"):
        g(jnp.ones(3), k=2.0)
    for m in (sj, eqx):  # (Equinox raises ValueError for each of these too)
        h = m.filter_closure_convert(lambda a: w * a, jnp.ones(3))
        with pytest.raises(ValueError):
            h(jnp.ones(4))


TRACED: list[int] = []


def _no_closure(a: Any, n: int) -> Any:
    TRACED.append(1)
    return a * n


def test_filter_closure_convert_of_a_function_without_closure_is_not_traced() -> None:
    TRACED.clear()
    g = sj.filter_closure_convert(_no_closure, jnp.ones(2), 3)
    assert TRACED == [] and g.consts == [] and g.jaxpr is None
    assert g(jnp.full(2, 2.0), 3).tolist() == [6.0, 6.0]
    assert g.out_struct == jax.ShapeDtypeStruct((2,), jnp.float32)
    same(sj.filter_closure_convert(lambda a: a + 1, 1).out_struct, eqx.filter_closure_convert(lambda a: a + 1, 1).out_struct)
