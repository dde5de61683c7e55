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
