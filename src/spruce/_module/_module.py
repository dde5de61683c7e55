"""``spruce.Module``: dataclass-style classes whose instances are immutable pytrees."""

from __future__ import annotations

import abc
import dataclasses
import inspect
import operator
import types
import warnings
from typing import Any, Callable, ClassVar, TypeVar, dataclass_transform

from .. import tree as _tree
from .._arrays import array_summary, is_array, is_array_like, jax_if_imported
from .._tree._registry import register_with_fixed_keys as _register_with_fixed_keys
from ._field import CONVERTER, STATIC, field
from ._pretty import pformat

# ids of the Module instances whose __init__ is running: only they accept attribute assignment.
# (Thread-safe under the GIL: set.add / discard / membership are atomic, and an id is unique
# among live objects; the object stays alive while it is in the set.)
_building: set[int] = set()


class _ModuleAux(tuple):  # type: ignore[type-arg]  # (dynamic names, static names, static values)
    """Node data of a Module: the tuple ``(dynamic, static, values)`` (field names of the
    children, field names and values of the static fields).

    A tuple subclass, so that making, hashing and comparing one runs no Python code: spruce
    hashes node data when it flattens, and jax.jit compares it on every call.  (A plain tuple
    subclass, not a namedtuple: it is a leaf, never a pytree node.)  Equal when names and
    values are equal; hashable when the values are (checked when the module is built).  Prints
    as ``('weight', 'bias'), ('in_features',), (3,)`` so that a PyTreeDef reads
    ``CustomNode(Linear[('weight', 'bias'), ('in_features',), (3,)], [*, *])``, the layout of
    equinox's.
    """

    __slots__ = ()

    @property
    def dynamic(self) -> tuple[str, ...]:
        return self[0]  # type: ignore[no-any-return]

    @property
    def static(self) -> tuple[str, ...]:
        return self[1]  # type: ignore[no-any-return]

    @property
    def values(self) -> tuple[Any, ...]:
        return self[2]  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return repr(tuple(self))[1:-1]

    __str__ = __repr__


class UnsetFieldError(ValueError, TypeError):
    """A Module's ``__init__`` left a field without a default unassigned.  A ValueError; also a
    TypeError, which is what Equinox raises for the same mistake."""


def _class_provided(cls: type, name: str) -> bool:
    """True if the field ``name`` of ``cls`` is overridden by the class itself: a property (or
    other descriptor that is not a dataclass default) where the field is declared, or any class
    attribute set by a subclass of the declaring class without re-declaring the field (an
    abstract field made concrete by ``@property`` or ``name = value``).  Such a field is not
    instance data: it is neither a child nor static, and ``__init__`` need not set it."""
    owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
    declarer = next((k for k in cls.__mro__ if name in k.__dict__.get("__annotations__", {})), None)
    if owner is None or declarer is None:
        return False
    if owner is not declarer:
        return cls.__mro__.index(owner) < cls.__mro__.index(declarer)
    value = owner.__dict__[name]
    return isinstance(value, property)


class _Fields:
    """What the metaclass computes once per Module class."""

    __slots__ = ("names", "dynamic", "static", "converters", "fill", "provided")

    def __init__(self, cls: type) -> None:
        all_fields = dataclasses.fields(cls)
        self.names = frozenset(f.name for f in all_fields)
        # fields the class itself provides (see _class_provided): not instance data
        self.provided = frozenset(f.name for f in all_fields if _class_provided(cls, f.name))
        fields = [f for f in all_fields if f.name not in self.provided]
        self.dynamic = tuple(f.name for f in fields if not f.metadata.get(STATIC, False))
        self.static = tuple(f.name for f in fields if f.metadata.get(STATIC, False))
        self.converters: dict[str, Callable[[Any], Any]] = {
            f.name: f.metadata[CONVERTER] for f in fields if CONVERTER in f.metadata
        }
        # (name, default, default_factory) in declaration order, for fields a custom __init__
        # leaves unassigned.
        self.fill: list[tuple[str, Any, Any]] = [(f.name, f.default, f.default_factory) for f in fields]


def _fields_getter(names: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A function from an instance ``__dict__`` to the tuple of its values at ``names``."""
    if not names:
        return lambda d: ()
    if len(names) == 1:
        name = names[0]
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


def _make_node_functions(cls: type, info: _Fields) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any], tuple[Any, ...]]:
    """``(flatten, unflatten, keys)`` of a Module class: the keys are the GetAttrKeys of its
    dynamic fields, the same for every instance (``_registry.register_with_fixed_keys``)."""
    dynamic = info.dynamic
    static = info.static
    spruce_keys = tuple(_tree.GetAttrKey(n) for n in dynamic)
    new = object.__new__

    # The fields are read with itemgetters (one C call each, a tuple out) rather than list
    # comprehensions, which Python 3.11 runs as a function call apiece (the gain is measured in
    # docs/performance.md, "Registered nodes").  An itemgetter of one name returns the item
    # itself, so those wrap it.
    get_dynamic = _fields_getter(dynamic)
    get_static = _fields_getter(static)

    def flatten(x: Any) -> tuple[Any, _ModuleAux]:
        d = x.__dict__
        try:
            return get_dynamic(d), _ModuleAux((dynamic, static, get_static(d)))
        except KeyError as e:
            raise AttributeError(
                f"{cls.__qualname__}.{e.args[0]} is not set (deleted from the instance, or not "
                f"assigned yet in __init__), so it cannot be flattened (a {cls.__qualname__} has the fields "
                f"{', '.join(dynamic + static)})"
            ) from None

    def unflatten(aux: _ModuleAux, children: Any) -> Any:
        # Never runs __init__, converters or __check_init__: transforms rebuild modules with
        # placeholder leaves (object(), tracers, None).
        obj: Any = new(cls)
        od = obj.__dict__
        for n, c in zip(dynamic, children):
            od[n] = c
        for n, v in zip(aux[1], aux[2]):  # the static names and values
            od[n] = v
        return obj

    return flatten, unflatten, spruce_keys


def _check_static(obj: Any, info: _Fields) -> None:
    d = obj.__dict__
    cls = type(obj).__name__
    for name in info.static:
        value = d[name]
        try:
            hash(value)
            hashable = True
        except TypeError:
            hashable = False
        if is_array(value):
            if not hashable:
                raise TypeError(
                    f"{cls}.{name} is a static field but holds an array ({array_summary(value)}); "
                    "static values are stored in the PyTreeDef and must be hashable, and arrays "
                    f"are not. Declare {name!r} without static=True so it is a leaf (traced by "
                    "JAX), or store a tuple / Python scalar."
                )
            warnings.warn(
                f"{cls}.{name} is a static field holding an array ({array_summary(value)}): it "
                "becomes part of the PyTreeDef (a new value recompiles jitted functions) and is "
                "never traced or differentiated. Declare it without static=True unless that is "
                "what you want.",
                UserWarning,
                stacklevel=3,
            )
        elif not hashable:
            raise TypeError(
                f"{cls}.{name} is a static field but its value of type {type(value).__name__} is "
                "not hashable; static values are stored in the PyTreeDef, which jax.jit hashes "
                "and compares. Use a hashable value (a tuple instead of a list, a frozenset "
                "instead of a set), or declare the field without static=True."
            )


# The types of what JAX's function transforms return (a jax.jit wrapper, a custom_jvp /
# custom_vjp object, and plain functions for jax.grad, jax.vmap and the others), found by applying
# each transform once.  Computed when first needed after JAX is imported (nothing can be
# transformed before); None until then.
_transform_types: frozenset[type] | None = None


def _jax_transform_types() -> frozenset[type]:
    global _transform_types
    if _transform_types is not None:
        return _transform_types
    jax = jax_if_imported()
    if jax is None:
        return frozenset()
    try:
        transforms = (
            jax.jit, jax.grad, jax.vmap, jax.value_and_grad, jax.jacfwd, jax.jacrev, jax.hessian,
            jax.custom_jvp, jax.custom_vjp, jax.checkpoint, jax.pmap,
        )
    except AttributeError:  # JAX is still being imported (its module exists, half filled)
        return frozenset()
    _transform_types = frozenset(type(t(lambda x: x)) for t in transforms)
    return _transform_types


def _hides_arrays(value: Any, kinds: frozenset[type]) -> bool:
    """True if ``value`` is what a JAX transform returned (its type is one of ``kinds``) and an
    object it wraps — following ``__wrapped__`` — has array-like leaves: parameters that the
    wrapper, a leaf, hides from the tree."""
    if type(value) not in kinds:  # the exact type, as Equinox
        return False
    met: set[int] = set()
    while id(value) not in met:
        met.add(id(value))
        try:
            value = value.__wrapped__
        except AttributeError:
            return False
        if any(is_array_like(leaf) for leaf in _tree.leaves(value)):
            return True
    return False  # a __wrapped__ chain that loops


def _warn_transformed(obj: Any, name: str, value: Any) -> None:
    """The UserWarning of Equinox for a field assigned a JAX-transformed callable that wraps
    arrays (``jax.vmap(linear)``): checked on the value, or on the leaves of a list / tuple /
    dict value, Modules inside it left out (each checked its own fields when it was built; and
    entering them would make building a deep chain of Modules quadratic)."""
    kinds = _jax_transform_types()
    if not kinds:
        return
    if type(value) in kinds:
        candidates: Any = (value,)
    elif isinstance(value, (list, tuple, dict)):
        candidates = _tree.leaves(value, is_leaf=lambda x: isinstance(x, Module))
    else:
        return
    for leaf in candidates:
        if _hides_arrays(leaf, kinds):
            cls = type(obj)
            warnings.warn(
                # The first words are Equinox's, which code and tests match on.
                f"Possibly assigning a JAX-transformed callable as an attribute on "
                f"{cls.__module__}.{cls.__qualname__}: field {name!r} holds a "
                f"{type(leaf).__name__} made by a JAX transform (jax.jit, jax.vmap, jax.grad, ...) "
                "around an object with arrays.  The wrapper is a leaf of the tree, so those arrays "
                "are hidden from it: gradients, optimizers, tree_at and checkpoints never see "
                "them.  Store the module itself and apply the transform when calling it "
                f"(`jax.vmap(self.{name})(x)` in __call__).",
                UserWarning,
                # this function, __setattr__, __init__ (the assignment in a hand-written one),
                # then for a generated __init__ the metaclass's __call__ and the caller
                stacklevel=3 if cls._spruce_custom_init else 5,
            )
            return


_FROZEN_HELP = (
    "modules are immutable after __init__; make an updated copy with "
    "spruce.tree_at(lambda m: m.{name}, module, new_value)"
)


def _has_custom_init(cls: type) -> bool:
    """Whether ``cls`` keeps a hand-written ``__init__``: its own, or the first one met in the
    MRO — a Module's (custom unless dataclasses generated it) or a plain class's (always
    custom).  So ``class C(A, B)`` with a plain ``A`` defining ``__init__`` and a Module ``B``
    runs ``A.__init__``, as in Equinox."""
    if "__init__" in cls.__dict__:
        return True
    for kls in cls.__mro__[1:]:
        if kls is object:
            return False
        if isinstance(kls, _ModuleMeta):
            return bool(kls.__dict__.get("_spruce_custom_init", False))
        if "__init__" in kls.__dict__:
            return True
    return False


def _warn_post_init_not_run(cls: type) -> None:
    """A UserWarning when a class keeps a hand-written ``__init__`` and has a ``__post_init__``:
    only a generated ``__init__`` calls ``__post_init__`` (as with dataclasses), so it would
    silently never run.  Equinox warns the same way."""
    for kls in cls.__mro__:
        if kls is object:
            return
        if "__post_init__" in kls.__dict__:
            where = "" if kls is cls else f" (inherited from {kls.__qualname__})"
            warnings.warn(
                f"{cls.__module__}.{cls.__qualname__} has a hand-written `__init__` method and a "
                f"`__post_init__`{where}, which will not run: only a generated __init__ calls "
                f"__post_init__.  Call it from __init__, or validate in __check_init__.",
                UserWarning,
                stacklevel=3,
            )
            return


_M = TypeVar("_M")


@dataclass_transform(field_specifiers=(field, dataclasses.field))
class _ModuleMeta(abc.ABCMeta):
    """Turns every subclass of Module into a dataclass, registers it as a pytree node (in
    spruce.tree now, in jax.tree_util as soon as JAX is imported) and runs the construction
    protocol in ``__call__``."""

    _spruce_fields: _Fields
    _spruce_custom_init: bool

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], *, init: bool = True, **kwargs: Any
    ) -> Any:
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        custom_init = _has_custom_init(cls)
        # A class with its own __init__ (or inheriting a user-written one, from a Module or from
        # a plain class before any Module in the MRO) keeps it; otherwise dataclasses generates
        # one from the fields, as equinox does, unless the class says ``init=False`` (the class
        # keyword of PEP 681 that type checkers read too: a subclass inheriting a hand-written
        # __init__ says it so that they do not make one from the fields either).
        dataclasses.dataclass(init=init and not custom_init, repr=False, eq=False)(cls)  # type: ignore[arg-type]  # cls is a metaclass instance, mypy cannot see it is a class
        cls._spruce_custom_init = custom_init
        if custom_init:
            _warn_post_init_not_run(cls)
        else:  # a generated __init__ keeps the docstring a parent's __init__ was given
            own = cls.__dict__.get("__init__")
            if own is not None and own.__doc__ is None:
                parents = (b.__dict__.get("__init__") for b in cls.__mro__[1:] if isinstance(b, _ModuleMeta))
                own.__doc__ = next((f.__doc__ for f in parents if f is not None and f.__doc__), None)
        # Fields named in the class's own __slots__: the slot descriptors would hide the
        # instance __dict__ that Modules store fields in, so they are removed.
        slots = namespace.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if isinstance(cls.__dict__.get(slot), types.MemberDescriptorType) and slot in {
                f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            }:
                delattr(cls, slot)
        info = _Fields(cls)
        cls._spruce_fields = info
        flatten, unflatten, keys = _make_node_functions(cls, info)
        _register_with_fixed_keys(cls, flatten, unflatten, keys)  # and with JAX: _jax_bridge
        return cls

    @property
    def __signature__(cls) -> inspect.Signature:
        """The signature of the class's ``__init__`` without ``self`` (what calling the class
        takes), for ``inspect.signature`` and ``help``: the metaclass's own ``__call__`` would
        show ``(*args, **kwargs)``.  A property of the metaclass, so instances are not
        affected (``inspect.signature(module)`` is that of ``__call__``)."""
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
        return sig.replace(parameters=list(sig.parameters.values())[1:])

    # Typed ``type[M] -> M`` (not ``-> Any``): type checkers then take it as type.__call__ and
    # check the arguments against __init__ (a metaclass __call__ returning Any hides __init__).
    def __call__(cls: type[_M], *args: Any, **kwargs: Any) -> _M:
        kls: Any = cls  # typed as Any: mypy would read the calls below as the metaclass's own
        obj = kls.__new__(kls)
        info = kls._spruce_fields
        key = id(obj)
        _building.add(key)
        try:
            kls.__init__(obj, *args, **kwargs)
            d = obj.__dict__
            for name, default, factory in info.fill:
                if name in d or name in info.provided:
                    continue
                if factory is not dataclasses.MISSING:
                    setattr(obj, name, factory())
                elif default is not dataclasses.MISSING:
                    setattr(obj, name, default)
                else:
                    raise UnsetFieldError(
                        f"{cls.__name__}.__init__ did not set the field {name!r}, which has no "
                        f"default; assign self.{name} = ... in __init__ or give it a default"
                    )
        finally:
            _building.discard(key)
        _check_static(obj, info)
        for kls in cls.__mro__:
            check = kls.__dict__.get("__check_init__")
            if check is not None:
                check(obj)
        built: _M = obj
        return built


class Module(metaclass=_ModuleMeta):
    """Base class of models: a dataclass whose instances are immutable pytrees.

    Subclass it with annotated fields.  Either let it generate ``__init__`` from the fields
    (as ``@dataclass``), or write ``__init__`` and assign ``self.field = value`` for each field
    (fields left unassigned take their ``default`` / ``default_factory``; a field with neither
    raises ``UnsetFieldError``, both a ValueError and a TypeError).  A field the class itself
    provides — a property, or a class attribute set in a subclass — is not instance data (how
    an abstract field is made concrete).  Fields are inherited as with dataclasses; a subclass without its own
    ``__init__`` inherits a parent's hand-written one.  ``class C(Base, init=False)`` generates
    no ``__init__`` for ``C`` (as ``@dataclass(init=False)``: it keeps the inherited one); type
    checkers read that keyword too (PEP 681), and otherwise check a call of a subclass that
    inherits a hand-written ``__init__`` against one made from its fields.  As with dataclasses, only a generated
    ``__init__`` calls ``__post_init__``: a class with a hand-written ``__init__`` and a
    ``__post_init__`` gets a UserWarning when it is defined (as in Equinox).

    Construction, in order: ``__init__`` (every assigned value goes through the field's
    ``converter``; assigning a name that is not a field raises AttributeError, and assigning
    the module's own bound method, which would keep the half-built instance inside the tree,
    raises ValueError), defaults for
    unassigned fields, a check that static fields are hashable (TypeError), then
    ``__check_init__(self)`` of every class in the MRO that defines one (derived first) — a
    validation hook that cannot assign.  After that, assigning or deleting an attribute raises
    ``dataclasses.FrozenInstanceError`` (an AttributeError) naming the field; use
    ``spruce.tree_at`` for modified copies.

    A field assigned a callable returned by a JAX transform (``jax.jit``, ``jax.vmap``,
    ``jax.grad``, ...) around an object with array-like leaves (``jax.vmap(linear)``), or a
    list / tuple / dict holding one, gets a UserWarning, as in Equinox: the wrapper is a leaf,
    so the arrays inside it are hidden from the tree.  (Equinox checks the leaves of a generated
    ``__init__``'s arguments and the value a hand-written one assigns; spruce checks the value
    and the leaves of a list / tuple / dict value, for either kind of ``__init__``.)

    As a pytree: the children are the non-static fields, in declaration order, with key paths
    ``GetAttrKey(name)`` (``jax.tree_util.keystr`` gives ``.layers[0].weight``); the node data
    holds the static field names and values, printed as
    ``CustomNode(Linear[('weight', 'bias'), ('in_features', 'out_features', 'use_bias'), (3, 2, True)], [*, *])``.
    Rebuilding from leaves (unflatten) never runs ``__init__``, converters or
    ``__check_init__``.  Every subclass is registered with ``spruce.tree`` when it is created
    and with ``jax.tree_util`` as soon as JAX is imported (see ``spruce/_jax_bridge.py``), so
    ``jax.jit``, ``jax.grad`` and ``jax.vmap`` accept modules; ``import spruce`` never imports
    JAX.

    ``repr`` is ``spruce.pformat(self)``: arrays as ``f32[2,3]``, one field per line when the
    module does not fit in 80 columns.  Equality and hashing are by identity (compare contents
    with ``spruce.tree_equal``).

    Semantics follow ``equinox.Module`` (fields, ``field(static=..., converter=...)``,
    ``__check_init__``, frozen instances).

    >>> class Affine(Module):
    ...     scale: float
    ...     shift: float = 0.0
    ...     name: str = field(static=True, default='affine')
    >>> a = Affine(2.0)
    >>> a
    Affine(scale=2.0, shift=0.0, name='affine')
    >>> _tree.leaves(a), _tree.structure(a)
    ([2.0, 0.0], PyTreeDef(CustomNode(Affine[('scale', 'shift'), ('name',), ('affine',)], [*, *])))
    """

    # The marker of spruce.typing.PyTreeNode: a checker sees every Module as a pytree node.
    __spruce_pytree__: ClassVar[bool] = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "__orig_class__":
            # Set by typing on ``SomeModule[int](...)`` after construction: not a field, and
            # kept by the instance as typing intends (unflatten does not carry it over).
            object.__setattr__(self, name, value)
            return
        if id(self) in _building:
            info = type(self)._spruce_fields
            if name in info.provided:
                field_default = type(self).__dataclass_fields__[name].default
                if value is field_default:  # (the generated __init__ passing a class-level value on)
                    return
                raise AttributeError(
                    f"cannot set {type(self).__name__}.{name}: the class provides {name!r} "
                    f"(a property or class attribute overriding the field)"
                )
            if name in info.names:
                if isinstance(value, types.MethodType) and value.__self__ is self:
                    raise ValueError(
                        f"cannot set {type(self).__name__}.{name} to the module's own method "
                        f"{value.__func__.__name__!r}: a bound method would keep this half-built "
                        f"instance inside the tree (a copy made by a transform would still call "
                        f"the original); call the method from __call__, or store a function"
                    )
                _warn_transformed(self, name, value)
                conv = info.converters.get(name)
                if conv is not None:
                    value = conv(value)
                object.__setattr__(self, name, value)
                return
            raise AttributeError(
                f"cannot set {type(self).__name__}.{name}: {name!r} is not a field; declare it "
                f"in the class body (`{name}: <type>`) before assigning it in __init__"
            )
        raise dataclasses.FrozenInstanceError(
            f"cannot assign to field {name!r} of {type(self).__name__}: " + _FROZEN_HELP.format(name=name)
        )

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(
            f"cannot delete field {name!r} of {type(self).__name__}: " + _FROZEN_HELP.format(name=name)
        )

    def __repr__(self) -> str:
        return pformat(self)
