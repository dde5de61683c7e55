"""Node data of registered classes is shared between PyTreeDefs, never swapped for equal data.

Compiled, flattening two equal models gives PyTreeDefs whose entries for registered nodes are
the same objects (so comparing them is an identity check), but only when the aux data is made
of the very same objects: aux data that is merely equal (1, 1.0, True; an equal but distinct
object) must come back unchanged when its own PyTreeDef rebuilds the tree.  The uncompiled
build makes a new entry for every node; both must behave the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import spruce
import spruce.tree as st


@dataclasses.dataclass
class Scaled:
    w: Any
    scale: Any = dataclasses.field(metadata={"static": True})


st.register_dataclass(Scaled)


class Pair:
    """Registered with functions; its aux data is ``(tag, (a, b))``, a nested tuple."""

    def __init__(self, x: Any, tag: Any, extra: tuple[Any, ...]) -> None:
        self.x = x
        self.tag = tag
        self.extra = extra


st.register_pytree_node(Pair, lambda p: ([p.x], (p.tag, p.extra)), lambda aux, ch: Pair(ch[0], aux[0], aux[1]))


def test_equal_models_share_the_node_data_of_registered_nodes() -> None:
    a = st.structure([Scaled(1.0, "relu"), Scaled(2.0, "gelu"), Pair(0, "t", (1, 2))])
    b = st.structure([Scaled(3.0, "relu"), Scaled(4.0, "gelu"), Pair(5, "t", (1, 2))])
    assert a == b and hash(a) == hash(b)
    assert all(x is y for x, y in zip(a._data, b._data)) == spruce.__compiled__


def test_equal_but_distinct_static_values_are_rebuilt_as_given() -> None:
    for first, second in ((1, 1.0), (1, True), (0.0, -0.0), ("ab", "".join(["a", "b"]))):
        st.structure(Scaled(0, first))  # an entry for `first` is kept
        tree = Scaled(0, second)
        leaves, td = st.flatten(tree)
        rebuilt = st.unflatten(td, leaves)
        assert rebuilt.scale is second, (first, second)
        assert st.structure(Scaled(0, first)) == td  # still equal, as before sharing


def test_equal_but_distinct_nested_aux_is_rebuilt_as_given() -> None:
    big = int("1" + "0" * 30)
    st.structure(Pair(0, "t", (big, 1)))
    other = int("1" + "0" * 30)  # equal to big, another object
    assert other is not big
    leaves, td = st.flatten(Pair(0, "t", (other, 1)))
    assert st.unflatten(td, leaves).extra[0] is other
    leaves, td = st.flatten(Pair(0, "t", (1, 1)))
    assert st.unflatten(td, leaves).extra == (1, 1)


def test_unhashable_aux_is_never_shared_and_still_fails_clearly() -> None:
    a = st.structure(Pair(0, "t", ([1],)))  # type: ignore[arg-type]
    b = st.structure(Pair(0, "t", ([1],)))  # type: ignore[arg-type]
    assert a._data[0] is not b._data[0]
    try:
        a == b  # noqa: B015 - must raise
    except TypeError as e:
        assert "not hashable" in str(e)
    else:
        raise AssertionError("comparing unhashable node data must raise")


def test_modules_share_node_data_and_keep_their_static_values() -> None:
    class Lin(spruce.Module):
        w: Any
        n: Any = spruce.field(static=True)

    a = st.structure([Lin(1.0, 3), Lin(2.0, 4)])
    b = st.structure([Lin(5.0, 3), Lin(6.0, 4)])
    assert a == b and all(x is y for x, y in zip(a._data, b._data)) == spruce.__compiled__
    leaves, td = st.flatten(Lin(1.0, True))
    assert st.unflatten(td, leaves).n is True
    assert st.structure(Lin(1.0, 1)) == td


def test_the_kept_entries_of_a_type_are_bounded_and_trees_with_more_aux_values_work() -> None:
    from spruce._tree._nodes import MAX_RECENT
    from spruce._tree._registry import lookup

    tags = [f"tag{i}" for i in range(MAX_RECENT + 5)]
    tree = [Scaled(float(i), t) for i, t in enumerate(tags)]
    for _ in range(2):
        leaves, td = st.flatten(tree)
        rebuilt = st.unflatten(td, leaves)
        assert [(s.w, s.scale) for s in rebuilt] == [(s.w, s.scale) for s in tree]
        assert td == st.structure([Scaled(0.0, "".join(t)) for t in tags])
    assert len(lookup(Scaled).recent) <= MAX_RECENT


def test_dataclass_nodes_are_rebuilt_from_any_position_among_the_leaves() -> None:
    @dataclasses.dataclass(frozen=True)
    class Dropping:
        w: Any
        b: Any
        act: Any = dataclasses.field(default="relu", metadata={"static": True})
        cache: Any = None

    st.register_dataclass(Dropping, data_fields=["w", "b"], meta_fields=["act"], drop_fields=["cache"])
    tree = [0, Scaled(1, "s"), {"a": Dropping(2, 3, "gelu", cache="x"), "z": Scaled(4, "t")}, 5]
    leaves, td = st.flatten(tree)
    assert leaves == [0, 1, 2, 3, 4, 5]
    rebuilt = st.unflatten(td, [10, 11, 12, 13, 14, 15])
    assert rebuilt == [10, Scaled(11, "s"), {"a": Dropping(12, 13, "gelu", cache=None), "z": Scaled(14, "t")}, 15]
    assert rebuilt[2]["a"].cache is None  # a drop field is reset to its default
    assert st.map(lambda x: x + 1, tree)[2]["a"] == Dropping(3, 4, "gelu")


def test_dataclass_rebuild_uses_the_class_new_of_the_moment() -> None:
    @dataclasses.dataclass
    class N:
        w: Any

    st.register_dataclass(N)
    leaves, td = st.flatten(N(1))
    assert st.unflatten(td, [2]) == N(2)
    made = []

    def new(cls: Any, *args: Any, **kwargs: Any) -> Any:
        obj = object.__new__(cls)
        made.append(obj)
        return obj

    N.__new__ = new  # type: ignore[assignment,method-assign]
    rebuilt = st.unflatten(td, [3])
    assert made == [rebuilt] and rebuilt == N(3)


def test_dataclass_fields_that_are_data_descriptors_are_set_through_them() -> None:
    @dataclasses.dataclass(slots=True)
    class Base:
        a: Any
        b: Any

    class Sub(Base):  # has an instance __dict__, but a and b live in Base's slots
        pass

    st.register_dataclass(Sub, data_fields=["a", "b"], meta_fields=[])
    leaves, td = st.flatten(Sub(1.0, 2.0))
    assert leaves == [1.0, 2.0]
    y = st.unflatten(td, [10.0, 20.0])
    assert (y.a, y.b) == (10.0, 20.0) and "a" not in getattr(y, "__dict__", {})

    class Scaled:
        """A descriptor-typed field: stores twice what it is given."""

        def __set_name__(self, owner: Any, name: str) -> None:
            self.name = "_" + name

        def __get__(self, obj: Any, owner: Any = None) -> Any:
            return 1.0 if obj is None else getattr(obj, self.name)

        def __set__(self, obj: Any, value: Any) -> None:
            object.__setattr__(obj, self.name, value * 2)

    @dataclasses.dataclass
    class D:
        x: Any = Scaled()  # type: ignore[assignment]

    st.register_dataclass(D)
    d = D(5.0)
    assert d.x == 10.0 and st.leaves(d) == [10.0]
    assert st.map(lambda v: v + 1, d).x == 22.0  # set through the descriptor, as D(11.0) is
