"""``filter_jit``: ``jax.jit`` for functions of any pytree (imports JAX; re-exported by
``spruce.jax``).

The array leaves of the arguments are traced; everything else (structure, Python numbers,
strings, functions) is static and keys a cache of compiled entries.  The helpers that split a
leaf list into arrays and the rest (``_is_dynamic``, ``_split``, ``_merge``) are shared with
``_vmap.py``.
"""

from __future__ import annotations

import collections
import functools
import threading
import types
import weakref
from typing import Any, Callable

from .. import tree as _tree
from ._entry import _compile
from ._split import _call_first

# The compiled states shared by filter_jit wrappers of the same function and options, most
# recently used last.  Key: (kind, id of the function, id of a bound method's instance or 0,
# donate, jit options); value: (the function, the instance's weak reference or None, (call,
# lower)).  A hit also checks identity, since an id can be reused once its object is gone.
_SHARED_MAX = 256
_SHARED: collections.OrderedDict[tuple[Any, ...], tuple[Any, Any, tuple[Callable[..., Any], Callable[..., Any]]]] = (
    collections.OrderedDict()
)
_SHARED_LOCK = threading.RLock()  # (reentrant: a weak reference's callback may run inside it)


def _forget(key: tuple[Any, ...], ref: Any) -> None:
    """Callback of a bound method's instance's weak reference: drop its compiled state."""
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is not None and held[1] is ref:
            del _SHARED[key]


def _shared(
    kind: str,
    func: Callable[..., Any],
    instance: Any,
    donate: str,
    jit_kwargs: dict[str, Any],
    build: Callable[[Any], tuple[Callable[..., Any], Callable[..., Any]]],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The (call, lower) pair for ``func`` (and a bound method's ``instance``, held weakly if it
    can be), built by ``build(ref)`` on a miss; ``ref()`` returns the instance.  Options that
    are not hashable are not shared."""
    try:
        key: tuple[Any, ...] = (kind, id(func), 0 if instance is None else id(instance), donate)
        key += tuple(sorted(jit_kwargs.items()))
        hash(key)
    except TypeError:
        return build(lambda: instance)
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is not None and held[0] is func and (held[1] is None or held[1]() is instance):
            _SHARED.move_to_end(key)
            return held[2]
        ref: Any = None
        if instance is not None:
            try:
                ref = weakref.ref(instance, functools.partial(_forget, key))
            except TypeError:  # not weakly referenceable: held by the (bounded) cache
                ref = lambda: instance
        compiled = build(ref)
        _SHARED[key] = (func, ref, compiled)
        if len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
        return compiled


def _method_of(func: Callable[..., Any], ref: Any) -> Callable[..., Any]:
    """``func`` bound to the instance that ``ref()`` returns (alive whenever a wrapper runs)."""

    def method(*args: Any, **kwargs: Any) -> Any:
        return func(ref(), *args, **kwargs)

    return method


# jax.jit options whose meaning depends on argument positions or on the output's structure:
# jax.jit would see filter_jit's list of array leaves, not the user's arguments.
_POSITIONAL_JIT_OPTIONS = {
    "static_argnums": "every non-array leaf is already static; pass a Python value or mark a Module field static",
    "static_argnames": "every non-array leaf is already static; pass a Python value or mark a Module field static",
    "donate_argnums": 'use donate="all" or donate="all-except-first"',
    "donate_argnames": 'use donate="all" or donate="all-except-first"',
}
_DONATE = ("none", "all", "all-except-first")


def filter_jit(
    fun: Callable[..., Any] | None = None,
    *,
    donate: str = "none",
    in_shardings: Any = None,
    out_shardings: Any = None,
    **jit_kwargs: Any,
) -> Any:
    """Compile ``fun`` with ``jax.jit``, tracing only the array leaves of its arguments.

    Args:
      fun: any function of pytrees (positional and keyword arguments).  Usable as
        ``@filter_jit`` or ``@filter_jit(**jit_kwargs)``.  If ``fun`` is itself a pytree node
        (a Module with ``__call__``), or a bound method whose instance is one (``model.apply``
        of a Module), the array leaves of that Module are traced too rather than baked into the
        compiled code as constants.
      donate: which input buffers XLA may reuse for the outputs (``jax.jit``'s donation, by
        argument as Equinox's ``filter_jit``): ``"none"`` (default), ``"all"`` (every array
        leaf of the arguments, and of ``fun``'s own Module as above), or
        ``"all-except-first"`` (all but those of the first positional argument, and never
        ``fun``'s own).  A donated array is deleted by the call (``x.is_deleted()``); reading it
        afterwards raises.  JAX's warning about donated buffers it could not reuse is not shown.
        Passing a donated array to a later call raises a RuntimeError naming its key path
        (``args[0]['w']``) and how to avoid it.
      in_shardings: where the array leaves of the positional arguments must be, as in
        ``jax.jit``: a ``jax.sharding.Sharding`` (or ``jax.Device``) for all of them, or a
        tuple with one entry per positional argument, each a Sharding, None (unconstrained) or
        a tree of them that is a prefix of that argument (``spruce.sharding.shardings(params,
        mesh, rules)`` fits).  Only array leaves get a sharding; entries over static leaves are
        ignored; keyword arguments (and ``fun``'s own Module) are unconstrained.  As in
        ``jax.jit``, NumPy arrays and uncommitted JAX arrays are moved there, and a JAX array
        committed to another sharding is an error.
      out_shardings: where the array leaves of the output are placed: a Sharding, or a tree of
        them (None: the compiler chooses) that is a prefix of the output.  The output's
        structure is learned by tracing once before compiling.
      jit_kwargs: other ``jax.jit`` options (e.g. ``keep_unused``, ``inline``,
        ``compiler_options``), forwarded as they are.  The options that count positions
        (``static_argnums``, ``static_argnames``, ``donate_argnums``, ``donate_argnames``)
        are refused: jax.jit would apply them to filter_jit's list of array leaves, not to
        the arguments.

    Returns:
      A function with ``fun``'s signature (usable as a method: it binds like any function).
      Array leaves (JAX and NumPy arrays, NumPy scalars) of the inputs are traced; every other
      leaf (Python numbers, strings, functions, ...) and the tree structures are static: a new
      combination of them compiles anew.  Outputs: array leaves come back as JAX arrays, other
      leaves as the Python objects the trace produced.

      Its ``lower(*args, **kwargs)`` traces for those arguments without running (ahead-of-time
      compilation, as Equinox's ``filter_jit(f).lower``) and returns a ``Lowered``
      (``.as_text()``, ``.cost_analysis()``, ``.lowered``: JAX's ``jax.stages.Lowered`` of the
      function of the array leaves); its ``.compile()`` returns a ``Compiled``, called like the
      function with arguments of the same structure and static leaves as the ``lower`` call
      (arrays of the same shapes and dtypes), which returns what the function returns; other
      arguments are a TypeError naming the first difference.  (``fun``'s own Module, as above,
      is the one given at ``lower``.)

    Raises:
      TypeError: ``fun`` is not callable; a static leaf of the arguments is not hashable; one
        of the refused ``jax.jit`` options above is given (the message says what to use).
      ValueError: ``donate`` is not one of the three strings; two traces for the same arguments
        (same shapes and dtypes) returned different non-array outputs; ``in_shardings`` or
        ``out_shardings`` is not a prefix of the arguments / the output (at the call, naming the
        key path, ``args[1]['w']`` or ``output[0]``).
      RuntimeError: an array argument has been deleted (donated to an earlier call).

    Wrapping the same function again (or a bound method of the same instance, or a bound method
    of any Module instance with the same method, or any Module as the function) with the same
    options reuses the compiled code of the earlier wrapper: the functions are kept in a bounded
    cache (the 256 most recently wrapped, with a bound method's instance held by a weak
    reference when it can be) shared by all threads.  Options that are not hashable (e.g. a
    ``compiler_options`` dict) give a wrapper of its own.

    The call never waits for the computation: like ``jax.jit`` it returns as soon as the work is
    dispatched (JAX's asynchronous dispatch); block with ``jax.block_until_ready``.

    Cost per call: one walk of the arguments in Python that reads Module fields directly (no
    PyTreeDef is built), one comparison with the last call's key (or one dict lookup keyed by
    the structure and static leaves), and one call of the jitted function with the array leaves
    as positional arguments (JAX's C++ fast path); an output that is a single array is returned
    as jax.jit returns it, other outputs are rebuilt with one spruce unflatten.  A call whose
    arguments are all arrays or None goes to a ``jax.jit`` of ``fun`` itself (while its outputs
    are arrays in tuples, lists and None); ``fun`` may therefore be traced more than once.
    Static leaves are compared by type and ``==`` (so ``1``, ``1.0`` and ``True`` compile
    separately).  The walk assumes that the pytree registration of a Module class or a
    namedtuple type does not change once filter_jit has seen one of its instances
    (RuntimeError at the next compilation if it does).

    Follows equinox.filter_jit, except that it never blocks on the result (equinox's does, on
    every call), static leaves are keyed with their type, and it takes ``in_shardings`` /
    ``out_shardings`` as trees over the arguments and output (equinox has ``filter_shard``
    only; spruce has that too, in ``spruce.jax``).

    >>> import jax, jax.numpy as jnp
    >>> f = filter_jit(lambda x, n: x * n)
    >>> f(jnp.ones(2), 3).tolist()
    [3.0, 3.0]
    >>> compiled = f.lower(jnp.ones(2), 3).compile()
    >>> compiled(jnp.full(2, 2.0), 3).tolist()
    [6.0, 6.0]
    >>> one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    >>> g = filter_jit(lambda p, n: p['w'] * n, in_shardings=({'w': one}, None), out_shardings=one)
    >>> y = g({'w': jnp.ones(2)}, 3)
    >>> y.tolist(), y.sharding == one
    ([3.0, 3.0], True)
    """
    for name in jit_kwargs:
        if name in _POSITIONAL_JIT_OPTIONS:
            raise TypeError(
                f"filter_jit does not take {name}=: jax.jit would apply it to the list of array "
                f"leaves that filter_jit compiles, not to your arguments; {_POSITIONAL_JIT_OPTIONS[name]}"
            )
    if donate not in _DONATE:
        raise ValueError(f"filter_jit: donate must be one of {', '.join(map(repr, _DONATE))}, got {donate!r}")
    if fun is None:
        return lambda f: filter_jit(f, donate=donate, in_shardings=in_shardings, out_shardings=out_shardings, **jit_kwargs)
    if in_shardings is not None:
        # (one entry per positional argument: a list is taken as jax.jit takes it, as a tuple)
        jit_kwargs["in_shardings"] = tuple(in_shardings) if type(in_shardings) is list else in_shardings
    if out_shardings is not None:
        jit_kwargs["out_shardings"] = out_shardings
    if not callable(fun):
        raise TypeError(f"filter_jit: expected a function, got {type(fun).__name__}")

    lead: Any  # a Module passed as the leading argument: fun itself, or a bound method's instance
    if _tree.is_tree_node(type(fun)):
        lead = fun
        call, lower = _shared(
            "module", _call_first, None, donate, jit_kwargs, lambda _: _compile(_call_first, donate, jit_kwargs, 1, False)
        )
    elif isinstance(fun, types.MethodType) and _tree.is_tree_node(type(fun.__self__)):
        lead = fun.__self__
        func = fun.__func__
        call, lower = _shared(
            "method", func, None, donate, jit_kwargs, lambda _: _compile(func, donate, jit_kwargs, 1, False)
        )
    elif isinstance(fun, types.MethodType):  # the instance is static: compiled per instance
        func = fun.__func__
        call, lower = _shared(
            "method",
            func,
            fun.__self__,
            donate,
            jit_kwargs,
            lambda ref: _compile(_method_of(func, ref), donate, jit_kwargs, 0, True),
        )
        lead = None
    else:

        def build(_: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
            call, lower = _compile(fun, donate, jit_kwargs, 0, True)
            functools.update_wrapper(call, fun)
            call.lower = lower  # type: ignore[attr-defined]
            return call, lower

        return _shared("function", fun, None, donate, jit_kwargs, build)[0]

    if lead is None:

        def jitted(*args: Any, **kwargs: Any) -> Any:
            return call(*args, **kwargs)

        def jitted_lower(*args: Any, **kwargs: Any) -> Any:
            return lower(*args, **kwargs)

    else:

        def jitted(*args: Any, **kwargs: Any) -> Any:
            return call(lead, *args, **kwargs)

        def jitted_lower(*args: Any, **kwargs: Any) -> Any:
            return lower(lead, *args, **kwargs)

    functools.update_wrapper(jitted, fun, updated=())  # (not a Module's fields)
    jitted.lower = jitted_lower  # type: ignore[attr-defined]
    return jitted
