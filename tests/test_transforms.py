"""The filtered transforms of spruce.jax._transforms (re-exported by spruce.jax) and
spruce.apply_updates: each against the plain JAX transform on a plain function, then on
pytrees holding non-array leaves (Modules with functions and strings, Python numbers)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import spruce
import spruce.jax as sj
import spruce.nn as nn


def f_plain(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.sin(x) * y + x**2


X = jnp.array([0.3, -1.2, 2.0])
Y = jnp.array([1.5, 0.5, -2.0])


class Scaled(spruce.Module):
    w: jax.Array
    act: Callable[[jax.Array], jax.Array] = spruce.field(static=True)
    count: jax.Array  # an int array: never differentiated
    name: str = "scaled"

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(self.w * x) * self.count


def model() -> Scaled:
    return Scaled(jnp.array([1.0, 2.0, -0.5]), jnp.tanh, jnp.array(2))


def close(a: Any, b: Any) -> None:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb
    for u, v in zip(la, lb):
        assert jnp.shape(u) == jnp.shape(v) and jnp.result_type(u) == jnp.result_type(v)
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-6)


# -- eval_shape / make_jaxpr -------------------------------------------------------------------


def test_filter_eval_shape_matches_jax() -> None:
    got = sj.filter_eval_shape(f_plain, X, Y)
    assert got == jax.eval_shape(f_plain, X, Y)


def test_filter_eval_shape_any_pytree() -> None:
    def f(m: Scaled, x: jax.Array, tag: str) -> Any:
        return {"y": m(x), "tag": tag + "!", "n": 3}

    got = sj.filter_eval_shape(f, model(), jax.ShapeDtypeStruct((3,), jnp.float32), "a")
    assert got == {"y": jax.ShapeDtypeStruct((3,), jnp.float32), "tag": "a!", "n": 3}
    lin = sj.filter_eval_shape(nn.Linear, 4, 5, key=jax.random.key(0))
    assert isinstance(lin, nn.Linear)
    assert lin.weight == jax.ShapeDtypeStruct((5, 4), jnp.float32)
    assert lin.in_features == 4


def test_filter_make_jaxpr() -> None:
    jaxpr, out, static = sj.filter_make_jaxpr(f_plain)(X, Y)
    assert str(jaxpr) == str(jax.make_jaxpr(f_plain)(X, Y))
    assert out == jax.ShapeDtypeStruct((3,), jnp.float32) and static is None

    def g(m: Scaled, x: jax.Array) -> Any:
        return m(x), m.name

    jaxpr, out, static = sj.filter_make_jaxpr(g)(model(), X)
    assert len(jaxpr.jaxpr.invars) == 3  # w, count, x: the function and the str are static
    assert out == (jax.ShapeDtypeStruct((3,), jnp.float32), None)
    assert static == (None, "scaled")
    close(jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, model().w, model().count, X)[0], model()(X))


# -- checkpoint ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_filter_checkpoint_matches_jax() -> None:
    loss = lambda x, y: jnp.sum(f_plain(x, y))
    close(jax.grad(sj.filter_checkpoint(loss))(X, Y), jax.grad(jax.checkpoint(loss))(X, Y))
    jaxpr = str(jax.make_jaxpr(jax.grad(sj.filter_checkpoint(loss)))(X, Y))
    assert "checkpoint" in jaxpr or "remat" in jaxpr

    @sj.filter_checkpoint(policy=jax.checkpoint_policies.nothing_saveable)
    def h(m: Scaled, x: jax.Array) -> Any:
        return jnp.sum(m(x)), "aux"

    out, tag = h(model(), X)
    assert tag == "aux"
    close(out, jnp.sum(model()(X)))
    g = sj.filter_grad(lambda m: h(m, X)[0])(model())
    close(g.w, jax.grad(lambda w: jnp.sum(jnp.tanh(w * X) * 2))(model().w))


# -- jvp / vjp -----------------------------------------------------------------------------------


def test_filter_jvp_matches_jax() -> None:
    tx, ty = jnp.ones(3), jnp.array([0.1, 0.2, 0.3])
    got = sj.filter_jvp(f_plain, (X, Y), (tx, ty))
    close(got, jax.jvp(f_plain, (X, Y), (tx, ty)))
    # a None tangent is a zero tangent
    close(sj.filter_jvp(f_plain, (X, Y), (tx, None)), jax.jvp(f_plain, (X, Y), (tx, jnp.zeros(3))))


def test_filter_jvp_any_pytree() -> None:
    m = model()
    tm = spruce.tree_at(lambda t: t.w, spruce.filter(m, lambda _: False), jnp.ones(3))

    def f(mod: Scaled, x: jax.Array, *, label: str) -> Any:
        return {"y": mod(x), "n": mod.count + 1, "label": label}

    out, t_out = sj.filter_jvp(f, (m, X), (tm, None), label="hi")
    assert out["label"] == "hi" and int(out["n"]) == 3
    close(out["y"], m(X))
    assert t_out["n"] is None and t_out["label"] is None
    _, want = jax.jvp(lambda w: jnp.tanh(w * X) * 2, (m.w,), (jnp.ones(3),))
    close(t_out["y"], want)
    with pytest.raises(ValueError, match="same structure"):
        sj.filter_jvp(f_plain, (X, Y), (X,))


def test_filter_vjp_matches_jax() -> None:
    out, vjp = sj.filter_vjp(f_plain, X, Y)
    out2, vjp2 = jax.vjp(f_plain, X, Y)
    close(out, out2)
    ct = jnp.array([1.0, -1.0, 0.5])
    close(vjp(ct), vjp2(ct))


def test_filter_vjp_any_pytree_with_aux() -> None:
    m = model()

    def f(mod: Scaled, x: jax.Array) -> Any:
        return (mod(x), mod.count), {"tag": mod.name, "mean": jnp.mean(x)}

    out, vjp, aux = sj.filter_vjp(f, m, X, has_aux=True)
    assert aux["tag"] == "scaled"
    close(aux["mean"], jnp.mean(X))
    close(out[0], m(X))
    assert int(out[1]) == 2
    gm, gx = vjp((jnp.ones(3), None))
    assert gm.count is None and gm.act is jnp.tanh and gm.name is None  # (a str child: not differentiated)
    _, plain = jax.vjp(lambda w, x: jnp.tanh(w * x) * 2, m.w, X)
    want_w, want_x = plain(jnp.ones(3))
    close(gm.w, want_w)
    close(gx, want_x)


# -- Jacobians and Hessians ------------------------------------------------------------------------


@pytest.mark.parametrize("ours, theirs", [(sj.filter_jacfwd, jax.jacfwd), (sj.filter_jacrev, jax.jacrev)])
def test_filter_jacobians_match_jax(ours: Any, theirs: Any) -> None:
    close(ours(f_plain)(X, Y), theirs(f_plain)(X, Y))
    j, aux = ours(lambda x, y: (f_plain(x, y), jnp.sum(y)), has_aux=True)(X, Y)
    close(j, theirs(f_plain)(X, Y))
    close(aux, jnp.sum(Y))
    jm = ours(lambda m, x: m(x))(model(), X)
    assert jm.count is None and jm.act is jnp.tanh
    close(jm.w, theirs(lambda w: jnp.tanh(w * X) * 2)(model().w))


@pytest.mark.slow
def test_filter_hessian_matches_jax() -> None:
    loss = lambda x, y: jnp.sum(f_plain(x, y) ** 2)
    close(sj.filter_hessian(loss)(X, Y), jax.hessian(loss)(X, Y))
    h, aux = sj.filter_hessian(lambda x: (jnp.sum(x**3), jnp.sum(x)), has_aux=True)(X)
    close(h, jnp.diag(6 * X))
    close(aux, jnp.sum(X))


# -- custom derivatives ---------------------------------------------------------------------------


def test_filter_custom_jvp_matches_jax() -> None:
    @jax.custom_jvp
    def plain(x: jax.Array, y: jax.Array) -> jax.Array:
        return x * y

    @plain.defjvp
    def plain_jvp(primals: Any, tangents: Any) -> Any:
        (x, y), (tx, ty) = primals, tangents
        return x * y, 3.0 * tx * y + x * ty

    @sj.filter_custom_jvp
    def ours(x: jax.Array, y: jax.Array, *, fn: Callable[[Any], Any]) -> jax.Array:
        return fn(x * y)

    seen: list[Any] = []

    @ours.def_jvp
    def ours_jvp(primals: Any, tangents: Any, *, fn: Callable[[Any], Any]) -> Any:
        (x, y), (tx, ty) = primals, tangents
        seen.append(ty is None)
        t = 3.0 * tx * y + (0.0 if ty is None else x * ty)
        return ours(x, y, fn=fn), t

    ident = lambda v: v
    close(ours(X, Y, fn=ident), X * Y)
    close(jax.grad(lambda x, y: jnp.sum(ours(x, y, fn=ident)), argnums=(0, 1))(X, Y),
          jax.grad(lambda x, y: jnp.sum(plain(x, y)), argnums=(0, 1))(X, Y))
    # only x differentiated: y's tangent is a symbolic zero, given as None
    seen.clear()
    close(sj.filter_grad(lambda x, y: jnp.sum(ours(x, y, fn=ident)))(X, Y), 3.0 * Y)
    assert seen == [True]


def test_filter_custom_vjp_matches_jax() -> None:
    @jax.custom_vjp
    def plain(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sin(x) * y

    plain.defvjp(lambda x, y: (jnp.sin(x) * y, (x, y)), lambda r, g: (2.0 * g * jnp.cos(r[0]) * r[1], None))

    @sj.filter_custom_vjp
    def ours(m: Any, y: jax.Array, *, tag: str) -> Any:
        return jnp.sin(m["x"]) * y, tag

    @ours.def_fwd
    def ours_fwd(perturbed: Any, m: Any, y: jax.Array, *, tag: str) -> Any:
        assert perturbed == {"x": True, "k": False, "s": False}
        return (jnp.sin(m["x"]) * y, tag), ("res", jnp.cos(m["x"]))

    @ours.def_bwd
    def ours_bwd(res: Any, g: Any, perturbed: Any, m: Any, y: jax.Array, *, tag: str) -> Any:
        assert res[0] == "res" and g[1] is None
        return {"x": 2.0 * g[0] * res[1] * y, "k": None, "s": None}

    arg = {"x": X, "k": jnp.array(3), "s": "str"}
    out, tag = ours(arg, Y, tag="t")
    assert tag == "t"
    close(out, jnp.sin(X) * Y)
    got = sj.filter_grad(lambda a: jnp.sum(ours(a, Y, tag="t")[0]))(arg)
    want = jax.grad(lambda x: jnp.sum(plain(x, Y)))(X)
    close(got["x"], want)
    assert got["k"] is None and got["s"] is None

    @sj.filter_custom_vjp
    def lonely(x: jax.Array) -> jax.Array:
        return x

    with pytest.raises(RuntimeError, match="def_fwd and def_bwd"):
        lonely(X)


# -- callbacks -----------------------------------------------------------------------------------


def test_filter_pure_callback_matches_jax() -> None:
    def host(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.sin(x) * y + x**2

    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    want = jax.jit(lambda x, y: jax.pure_callback(host, shape, x, y))(X, Y)

    @jax.jit
    def ours(x: jax.Array, y: jax.Array) -> Any:
        return sj.filter_pure_callback(host, x, y, result_shape_dtypes=shape)

    close(ours(X, Y), want)
    close(want, f_plain(X, Y))

    def host_tree(m: dict[str, Any], *, power: int) -> Any:
        assert m["x"].shape == (3,) and m["name"] == "n"  # (host arrays, as jax.pure_callback passes)
        return {"y": np.asarray(m["x"]) ** power, "name": "ignored"}

    @sj.filter_jit
    def tree_call(x: jax.Array) -> Any:
        return sj.filter_pure_callback(
            host_tree, {"x": x, "name": "n"}, power=3, result_shape_dtypes={"y": shape, "name": "kept"}
        )

    out = tree_call(X)
    assert out["name"] == "kept"
    close(out["y"], X**3)


# -- apply_updates -------------------------------------------------------------------------------


def test_apply_updates_with_optax() -> None:
    lin = nn.Linear(3, 2, key=jax.random.key(0))
    m = {"lin": lin, "count": jnp.array(5), "label": "x"}
    opt = optax.sgd(0.1)
    params = spruce.filter(m, spruce.is_inexact_array)
    state = opt.init(params)
    grads = sj.filter_grad(lambda t: jnp.sum(t["lin"](jnp.ones(3)) ** 2))(m)
    updates, state = opt.update(grads, state, params)
    new = spruce.apply_updates(m, updates)
    assert new["count"] is m["count"] and new["label"] == "x"
    assert new["lin"].in_features == 3
    close(new["lin"].weight, lin.weight - 0.1 * grads["lin"].weight)
    close(new["lin"].bias, lin.bias - 0.1 * grads["lin"].bias)
    # the same as optax.apply_updates on the arrays alone
    close(new["lin"].weight, optax.apply_updates(lin.weight, updates["lin"].weight))
    # dtype kept, as optax does
    half = {"w": jnp.ones(2, jnp.bfloat16)}
    assert spruce.apply_updates(half, {"w": jnp.full(2, 0.5, jnp.float32)})["w"].dtype == jnp.bfloat16
    with pytest.raises(ValueError):
        spruce.apply_updates({"a": 1.0}, {"b": 1.0})
