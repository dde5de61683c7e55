"""spruce and jax.tree_util share one world of pytrees (``spruce/_jax_bridge.py``).

- spruce -> JAX: every registration made through spruce is known to jax.tree_util, with the same
  children, node data and key paths; unregister + register again works on both sides; JAX
  refuses (clearly) a class spruce has unregistered; registrations racing JAX flattens.
- JAX -> spruce: a class registered only with JAX (every JAX registration function, Equinox,
  jax.tree_util.Partial) is a node in spruce with JAX's children, node data, key paths and
  PyTreeDef repr; a JAX registration made after spruce saw the class as a leaf is noticed.
- key entries of the two libraries compare and hash equal and print the same.
- ``import spruce`` and registering never import JAX (fresh interpreters).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import spruce
import spruce.tree as st
import spruce.tree_util as stu
from helpers import run_python


def paths_and_leaves_jax(tree: Any) -> tuple[list[str], list[Any]]:
    flat, _ = jtu.tree_flatten_with_path(tree)
    return [jtu.keystr(p) for p, _ in flat], [x for _, x in flat]


def paths_and_leaves_spruce(tree: Any) -> tuple[list[str], list[Any]]:
    flat, _ = st.flatten_with_path(tree)
    return [st.keystr(p) for p, _ in flat], [x for _, x in flat]


def assert_same_view(tree: Any, paths: list[str], structure: str) -> None:
    """spruce and JAX give ``paths`` (keystr), the same leaves (by identity) and ``structure``."""
    jp, jl = paths_and_leaves_jax(tree)
    sp, sl = paths_and_leaves_spruce(tree)
    assert jp == paths
    assert sp == paths
    assert len(jl) == len(sl) and all(a is b for a, b in zip(jl, sl))
    assert repr(jtu.tree_structure(tree)) == structure
    assert repr(st.structure(tree)) == structure


# ------------------------------------------------------------------------------- spruce -> JAX


class Lin(spruce.Module):
    w: Any
    b: Any
    act: str = spruce.field(static=True, default="relu")


@st.register_dataclass
@dataclasses.dataclass
class SpruceDC:
    alpha: Any
    beta: Any
    tag: str = st.static(default="t")


class KeyedPair:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


st.register_pytree_with_keys(
    KeyedPair,
    lambda p: ([(st.DictKey("alpha"), p.a), (st.SequenceKey(3), p.b)], "kp"),
    lambda aux, ch: KeyedPair(*ch),
)


class Plain:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


st.register_pytree_node(Plain, lambda p: ((p.a, p.b), None), lambda aux, ch: Plain(*ch))


@st.register_static
@dataclasses.dataclass(frozen=True)
class Units:
    name: str


def test_spruce_registrations_seen_by_jax() -> None:
    tree = {
        "lin": Lin(np.ones(2), np.zeros(1)),
        "dc": SpruceDC([1.0, 2.0], {"k": 3.0}),
        "kp": KeyedPair(4.0, 5.0),
        "plain": Plain(6.0, (7.0,)),
        "units": Units("m"),
        "partial": stu.Partial(divmod, 8.0),
    }
    assert_same_view(
        tree,
        [
            "['dc'].alpha[0]",
            "['dc'].alpha[1]",
            "['dc'].beta['k']",
            "['kp']['alpha']",
            "['kp'][3]",
            "['lin'].w",
            "['lin'].b",
            "['partial'][<flat index 0>][0]",
            "['plain'][<flat index 0>]",
            "['plain'][<flat index 1>][0]",
        ],
        "PyTreeDef({'dc': CustomNode(SpruceDC[('t',)], [[*, *], {'k': *}]), "
        "'kp': CustomNode(KeyedPair[kp], [*, *]), "
        "'lin': CustomNode(Lin[('w', 'b'), ('act',), ('relu',)], [*, *]), "
        "'partial': CustomNode(Partial[<built-in function divmod>], [(*,), {}]), "
        "'plain': CustomNode(Plain[None], [*, (*,)]), "
        "'units': CustomNode(Units[Units(name='m')], [])})",
    )
    # JAX's key entries are JAX's own classes
    flat, _ = jtu.tree_flatten_with_path(tree)
    assert type(flat[0][0][1]) is jtu.GetAttrKey
    assert type(flat[3][0][1]) is jtu.DictKey
    # and JAX rebuilds through spruce's unflatten (no __init__ for register_dataclass)
    out = jtu.tree_map(lambda x: x * 2, tree)
    assert type(out["dc"]) is SpruceDC and out["dc"].alpha == [2.0, 4.0] and out["dc"].tag == "t"
    assert type(out["lin"]) is Lin and out["lin"].act == "relu"
    np.testing.assert_array_equal(out["lin"].w, np.full(2, 2.0))
    assert out["partial"].args == (16.0,) and out["partial"](5.0) == (3.0, 1.0)
    assert out["units"] is tree["units"]


def test_jax_transforms_accept_spruce_nodes() -> None:
    m = Lin(jnp.array([1.0, 2.0]), jnp.array([0.5]))
    g = jax.grad(lambda m: jnp.sum(m.w * m.w) + jnp.sum(m.b))(m)
    assert type(g) is Lin
    np.testing.assert_allclose(g.w, [2.0, 4.0])
    np.testing.assert_allclose(g.b, [1.0])
    d = SpruceDC(jnp.arange(3.0), jnp.ones(3))
    out = jax.jit(lambda d: d.alpha + d.beta)(d)
    np.testing.assert_allclose(out, [1.0, 2.0, 3.0])
    batched = jax.vmap(lambda d: d.alpha * d.beta)(SpruceDC(jnp.ones((2, 3)), jnp.ones((2, 3))))
    assert batched.shape == (2, 3)


def test_registration_after_jax_is_imported_is_immediate() -> None:
    class Fresh:
        def __init__(self, x: Any) -> None:
            self.x = x

    assert jtu.treedef_is_leaf(jtu.tree_structure(Fresh(1)))  # a leaf before
    st.register_pytree_with_keys(Fresh, lambda f: ([(st.GetAttrKey("x"), f.x)], None), lambda a, c: Fresh(*c))
    assert jtu.tree_leaves([Fresh(1)]) == [1]
    assert [jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(Fresh(1))] == [".x"]


def test_unregister_then_register_again_on_both_sides() -> None:
    @dataclasses.dataclass
    class Swap:
        p: Any
        q: Any

    st.register_dataclass(Swap)
    s = Swap(1.0, 2.0)
    assert jtu.tree_leaves(s) == [1.0, 2.0]
    treedef = jtu.tree_structure(s)
    st.unregister(Swap)
    # spruce: a leaf again
    assert st.leaves(s) == [s]
    # JAX cannot forget the registration: a clear error, never zero children
    with pytest.raises(
        TypeError, match=r"Swap in jax.tree_util: its pytree registration was removed with spruce.tree.unregister"
    ):
        jtu.tree_leaves(s)
    with pytest.raises(TypeError, match="cannot rebuild"):
        treedef.unflatten([3.0, 4.0])
    assert jtu.tree_leaves([1.0, 2.0]) == [1.0, 2.0]  # everything else is untouched
    # registered again, differently: both sides follow the new registration
    st.register_dataclass(Swap, data_fields=["q"], meta_fields=["p"])
    assert jtu.tree_leaves(s) == [2.0]
    assert st.leaves(s) == [2.0]
    assert repr(jtu.tree_structure(s)) == repr(st.structure(s)) == "PyTreeDef(CustomNode(Swap[(1.0,)], [*]))"
    assert jtu.tree_map(lambda x: x + 1, s) == Swap(1.0, 3.0)


def test_type_registered_with_jax_first_keeps_jax_registration_in_jax() -> None:
    class Both:
        def __init__(self, a: Any, b: Any) -> None:
            self.a, self.b = a, b

    jtu.register_pytree_node(Both, lambda x: ((x.a,), "jax"), lambda aux, ch: Both(ch[0], None))
    st.register_pytree_node(Both, lambda x: ((x.a, x.b), "spruce"), lambda aux, ch: Both(*ch))
    assert jtu.tree_leaves(Both(1, 2)) == [1]
    assert st.leaves(Both(1, 2)) == [1, 2]
    st.unregister(Both)
    assert st.leaves(Both(1, 2)) == [1]  # now spruce sees JAX's registration


def test_concurrent_registration_while_jax_flattens() -> None:
    base = [Lin(float(i), float(-i)) for i in range(50)]
    expected = [v for i in range(50) for v in (float(i), float(-i))]
    errors: list[BaseException] = []
    made: list[type] = []
    stop = threading.Event()

    def flattener() -> None:
        try:
            while not stop.is_set():
                leaves, td = jtu.tree_flatten(base)
                assert leaves == expected
                assert jtu.tree_unflatten(td, leaves)[7].w == 7.0
        except BaseException as e:  # reported below
            errors.append(e)

    def registrar(k: int) -> None:
        try:
            for i in range(40):
                cls = type(f"Reg{k}_{i}", (), {"__init__": lambda self, v: setattr(self, "v", v)})
                st.register_pytree_with_keys(
                    cls, lambda o: ([(st.GetAttrKey("v"), o.v)], None), functools.partial(_rebuild, cls)
                )
                made.append(cls)
                obj = cls(i)
                assert jtu.tree_leaves([obj]) == [i]
                assert [jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(obj)] == [".v"]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=flattener) for _ in range(2)]
    threads += [threading.Thread(target=registrar, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads[2:]:
        t.join()
    stop.set()
    for t in threads[:2]:
        t.join()
    assert errors == []
    assert len(made) == 120
    assert all(jtu.tree_leaves(c(5)) == [5] and st.leaves(c(5)) == [5] for c in made)


def _rebuild(cls: type, aux: Any, children: Any) -> Any:
    obj = object.__new__(cls)
    obj.v = children[0]  # type: ignore[attr-defined]
    return obj


# ------------------------------------------------------------------------------- JAX -> spruce


@jtu.register_dataclass
@dataclasses.dataclass
class FlaxLike:
    """A flax.struct-style dataclass: registered with JAX only."""

    kernel: Any
    bias: Any
    features: int = dataclasses.field(default=2, metadata={"static": True})


class JaxKeyed:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


jtu.register_pytree_with_keys(
    JaxKeyed,
    lambda x: (((jtu.GetAttrKey("a"), x.a), (jtu.DictKey("bee"), x.b)), ("aux", 1)),
    lambda aux, ch: JaxKeyed(*ch),
)


class JaxPlain:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


jtu.register_pytree_node(JaxPlain, lambda x: ((x.a, x.b), None), lambda aux, ch: JaxPlain(*ch))


@jtu.register_pytree_node_class
class JaxClass:
    def __init__(self, items: Any) -> None:
        self.items = items

    def tree_flatten(self) -> Any:
        return tuple(self.items), len(self.items)

    @classmethod
    def tree_unflatten(cls, aux: Any, children: Any) -> Any:
        return cls(list(children))


@jtu.register_static
@dataclasses.dataclass(frozen=True)
class JaxStatic:
    name: str


def test_jax_registrations_seen_by_spruce() -> None:
    tree = [
        FlaxLike(np.ones((2, 2)), [np.zeros(2)]),
        JaxKeyed(1.0, {"z": 2.0}),
        JaxPlain(3.0, None),
        JaxClass([4.0, 5.0]),
        JaxStatic("s"),
        jtu.Partial(divmod, 6.0),
    ]
    assert_same_view(
        tree,
        [
            "[0].kernel",
            "[0].bias[0]",
            "[1].a",
            "[1]['bee']['z']",
            "[2][<flat index 0>]",
            "[3][<flat index 0>]",
            "[3][<flat index 1>]",
            "[5][<flat index 0>][0]",
        ],
        "PyTreeDef([CustomNode(FlaxLike[(2,)], [*, [*]]), CustomNode(JaxKeyed[('aux', 1)], [*, {'z': *}]), "
        "CustomNode(JaxPlain[None], [*, None]), CustomNode(JaxClass[2], [*, *]), "
        "CustomNode(JaxStatic[JaxStatic(name='s')], []), "
        "CustomNode(Partial[<built-in function divmod>], [(*,), {}])])",
    )
    # spruce's key paths hold spruce's entry classes
    (path, _), *_ = st.leaves_with_path(tree)
    assert type(path[1]) is st.GetAttrKey
    # spruce rebuilds with JAX's unflatten functions
    out = st.map(lambda x: x * 2, tree)
    assert type(out[0]) is FlaxLike and out[0].features == 2
    np.testing.assert_array_equal(out[0].kernel, np.full((2, 2), 2.0))
    assert type(out[1]) is JaxKeyed and out[1].b == {"z": 4.0}
    assert type(out[3]) is JaxClass and out[3].items == [8.0, 10.0]
    assert out[4] is tree[4]
    assert type(out[5]) is jtu.Partial and out[5].args == (12.0,)
    assert st.is_tree_node(FlaxLike) and st.is_tree_node(jtu.Partial)
    # a PyTreeDef spruce made rebuilds the same objects
    leaves, treedef = st.flatten(tree)
    back = treedef.unflatten(leaves)
    assert type(back[2]) is JaxPlain and back[2].a == 3.0 and back[2].b is None


def test_equinox_modules_seen_by_spruce() -> None:
    key = jax.random.PRNGKey(0)
    mlp = eqx.nn.MLP(2, 1, 3, 1, key=key)
    expected_paths, expected_leaves = paths_and_leaves_jax(mlp)
    sp, sl = paths_and_leaves_spruce(mlp)
    assert sp == expected_paths
    assert sp[:2] == [".layers[0].weight", ".layers[0].bias"]
    assert all(a is b for a, b in zip(sl, expected_leaves))
    assert repr(st.structure(mlp)) == repr(jtu.tree_structure(mlp))
    doubled = st.map(lambda x: x * 2 if eqx.is_array(x) else x, mlp)
    assert type(doubled) is eqx.nn.MLP
    np.testing.assert_allclose(doubled.layers[0].weight, mlp.layers[0].weight * 2)
    np.testing.assert_allclose(doubled(jnp.ones(2)),
                               jax.tree_util.tree_map(lambda x: x * 2 if eqx.is_array(x) else x, mlp)(jnp.ones(2)), rtol=1e-6)


def test_jax_dataclass_with_dropped_and_init_false_fields() -> None:
    @dataclasses.dataclass
    class Cached:
        a: Any
        b: Any
        scale: float = dataclasses.field(default=1.0, metadata={"static": True})
        total: Any = dataclasses.field(init=False, default=None)

        def __post_init__(self) -> None:
            self.total = ("sum", self.scale)

    jtu.register_dataclass(Cached, data_fields=["a", "b"], meta_fields=["scale"], drop_fields=["total"])
    c = Cached(1.0, [2.0], scale=3.0)
    assert_same_view(c, [".a", ".b[0]"], "PyTreeDef(CustomNode(Cached[(3.0,)], [*, [*]]))")
    ours, theirs = st.map(lambda x: x * 2, c), jtu.tree_map(lambda x: x * 2, c)
    assert ours == theirs == Cached(2.0, [4.0], scale=3.0)
    assert ours.total == theirs.total == ("sum", 3.0)  # rebuilt through __init__, as JAX does
    leaves, treedef = st.flatten(c)
    assert treedef.unflatten([5.0, 6.0]) == Cached(5.0, [6.0], scale=3.0)


def test_spruce_treedef_of_jax_dataclass_pickles_and_validates() -> None:
    import pickle

    treedef = st.structure([FlaxLike(1.0, 2.0, features=3)])
    back = pickle.loads(pickle.dumps(treedef))
    assert back == treedef and repr(back) == "PyTreeDef([CustomNode(FlaxLike[(3,)], [*, *])])"
    assert back.unflatten([4.0, 5.0]) == [FlaxLike(4.0, 5.0, features=3)]
    rebuild, (state,) = treedef.__reduce__()
    codes = list(state[1])
    codes[1] = (3 << 4) | (codes[1] & 15)  # the FlaxLike node claims three children
    codes.insert(2, 0)  # and has a third leaf
    tampered = (state[0], tuple(codes), *state[2:])
    with pytest.raises(ValueError, match="FlaxLike has 2 data fields but the node has 3 children"):
        rebuild(tampered)


def test_late_jax_registration_is_noticed() -> None:
    class Late:
        def __init__(self, a: Any) -> None:
            self.a = a

    tree = [Late(1.0), Late(2.0)]
    assert st.leaves(tree) == tree  # a leaf, cached as such
    assert st.map(lambda x: 0, tree) == [0, 0]
    jtu.register_pytree_node(Late, lambda x: ((x.a,), None), lambda aux, ch: Late(*ch))
    assert st.leaves(tree) == [1.0, 2.0]
    out = st.map(lambda x: x + 1, tree)  # the uncompiled map's leaf-type cache is cleared too
    assert [type(o) for o in out] == [Late, Late] and [o.a for o in out] == [2.0, 3.0]
    assert st.is_tree_node(Late)


def test_unregistered_spruce_class_is_not_taken_back_from_jax() -> None:
    class Gone:
        def __init__(self, a: Any) -> None:
            self.a = a

    st.register_pytree_node(Gone, lambda x: ((x.a,), None), lambda aux, ch: Gone(*ch))
    assert jtu.tree_leaves(Gone(1)) == [1]
    st.unregister(Gone)
    g = Gone(1)
    assert st.leaves(g) == [g]  # not the JAX-side registration the bridge made
    assert not st.is_tree_node(Gone)


def test_leaves_and_namedtuples_stay_spruce_kinds() -> None:
    # a leaf type JAX does not know stays a leaf; arrays stay leaves
    x = jnp.ones(2)
    assert [type(v) for v in st.leaves([x, np.ones(1), "s", 1])] == [type(x), np.ndarray, str, int]
    # namedtuples are spruce's own kind, not bridged
    from collections import namedtuple

    NT = namedtuple("NT", "a b")
    assert repr(st.structure(NT(1, 2))) == repr(jtu.tree_structure(NT(1, 2))) == "PyTreeDef(CustomNode(namedtuple[NT], [*, *]))"


# ------------------------------------------------------------------------------- key entries


JAX_AND_SPRUCE_KEYS = [
    (jtu.DictKey("a"), st.DictKey("a")),
    (jtu.DictKey(3), st.DictKey(3)),
    (jtu.SequenceKey(0), st.SequenceKey(0)),
    (jtu.SequenceKey(12), st.SequenceKey(12)),
    (jtu.GetAttrKey("w"), st.GetAttrKey("w")),
    (jtu.FlattenedIndexKey(2), st.FlattenedIndexKey(2)),
]


@pytest.mark.parametrize("jk,sk", JAX_AND_SPRUCE_KEYS, ids=[repr(k) for _, k in JAX_AND_SPRUCE_KEYS])
def test_key_entries_compare_hash_and_print_alike(jk: Any, sk: Any) -> None:
    assert sk == jk and jk == sk
    assert not (sk != jk) and not (jk != sk)
    assert hash(sk) == hash(jk)
    assert {jk: 1}[sk] == 1 and {sk: 1}[jk] == 1
    assert len({jk, sk}) == 1
    assert str(sk) == str(jk) and repr(sk) == repr(jk)
    assert st.keystr((jk,)) == st.keystr((sk,)) == jtu.keystr((jk,))
    assert st.keystr((jk,), simple=True) == st.keystr((sk,), simple=True) == jtu.keystr((jk,), simple=True)


def test_key_entries_of_different_kinds_differ() -> None:
    assert st.DictKey(0) != jtu.SequenceKey(0) and jtu.SequenceKey(0) != st.DictKey(0)
    assert st.FlattenedIndexKey(0) != jtu.SequenceKey(0)
    assert st.GetAttrKey("a") != jtu.DictKey("a") and jtu.DictKey("a") != st.GetAttrKey("a")
    assert st.DictKey("a") != jtu.DictKey("b")
    assert jtu.GetAttrKey("a") == jtu.GetAttrKey("a") and jtu.GetAttrKey("a") != "a"


def test_mixed_key_paths_in_keystr_and_errors() -> None:
    path = (jtu.DictKey("enc"), st.SequenceKey(0), jtu.GetAttrKey("w"))
    assert st.keystr(path) == "['enc'][0].w" == jtu.keystr(tuple(path))
    assert st.keystr(path, simple=True, separator=".") == "enc.0.w"
    # a path through a JAX-registered node, in spruce's structure-mismatch error
    a = {"enc": [FlaxLike(1.0, [2.0])]}
    b = {"enc": [FlaxLike(1.0, [2.0, 3.0])]}
    with pytest.raises(ValueError, match=r"\['enc'\]\[0\]\.bias"):
        st.map(lambda x, y: x, a, b)
    # a spruce path equals JAX's path, entry by entry
    sp = [p for p, _ in st.leaves_with_path(b)]
    jp = [p for p, _ in jtu.tree_leaves_with_path(b)]
    assert sp == jp and jp == sp


# ------------------------------------------------------------------------------- no JAX import


@pytest.mark.subprocess
@pytest.mark.slow
def test_import_and_registration_never_import_jax_and_reach_jax_later() -> None:
    proc = run_python(
        """
        import dataclasses, sys
        import spruce, spruce.tree as st, spruce.tree_util as stu

        class M(spruce.Module):
            w: object

        @st.register_dataclass
        @dataclasses.dataclass
        class D:
            x: object

        class P:
            def __init__(self, a): self.a = a
        st.register_pytree_node(P, lambda p: ((p.a,), None), lambda aux, ch: P(*ch))

        @st.register_static
        class S:
            pass

        p = stu.Partial(divmod, 1)
        st.leaves([M(1), D(2), P(3), S(), p])
        assert "jax" not in sys.modules, sorted(m for m in sys.modules if m.startswith("jax"))

        import jax.tree_util as jtu
        tree = [M(1), D(2), P(3), S(), p]
        print(jtu.tree_leaves(tree))
        print([jtu.keystr(k) for k, _ in jtu.tree_flatten_with_path(tree)[0]])
        print(jtu.tree_structure(tree) == jtu.tree_structure(tree))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[1, 2, 3, 1]",
        "['[0].w', '[1].x', '[2][<flat index 0>]', '[4][<flat index 0>][0]']",
        "True",
    ]


@pytest.mark.subprocess
@pytest.mark.slow
def test_spruce_imported_after_jax_and_equinox() -> None:
    proc = run_python(
        """
        import dataclasses
        import jax, jax.tree_util as jtu, equinox as eqx
        lin = eqx.nn.Linear(2, 2, key=jax.random.PRNGKey(0))
        import spruce, spruce.tree as st

        class M(spruce.Module):
            w: object

        print(jtu.tree_leaves(M(1)), len(st.leaves(lin)), st.keystr(st.leaves_with_path(lin)[0][0]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[1]", "2", ".weight"]
