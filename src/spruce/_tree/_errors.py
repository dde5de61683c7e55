"""Error messages that say where (the key path) and what (both sides).

Only error paths come here, so nothing in this module is performance sensitive.  The tree
walkers keep no ancestors: a cycle or a mismatch found by one is named by walking again
(``cycle_error``, ``mismatch_error``).  The node-table walks (``flatten_up_to``) rebuild the key
path from their frame stacks (``path_of``).
"""

from __future__ import annotations

from typing import Any, Callable, Final

from ._depth import check_depth
from ._expand import expand, expand_with_keys, match_children, ns_expand, ns_expand_with_keys, ns_match_children
from ._keys import keystr
from ._kinds import (
    CUSTOM,
    DEFAULTDICT,
    DEQUE,
    DICT,
    LEAF,
    LIST,
    MASK,
    NAMEDTUPLE,
    NONE,
    ORDEREDDICT,
    SHIFT,
    STRUCTSEQ,
    TUPLE,
)
from ._nodes import CustomData, DictData
from ._registry import Namespace
from ._text import clip, qualified_name, short_repr

MAX_KEYS_SHOWN: Final = 8


def keys_text(keys: Any) -> str:
    ks = list(keys)
    shown = ", ".join(short_repr(k, 40) for k in ks[:MAX_KEYS_SHOWN])
    if len(ks) > MAX_KEYS_SHOWN:
        shown += f", ... ({len(ks) - MAX_KEYS_SHOWN} more)"
    return "[" + shown + "]"


def child_key(node: Any, index: int, none_is_leaf: bool, ns: Namespace | None = None) -> Any:
    """The key entry of child ``index`` of ``node`` (error paths only; -1: not known)."""
    if index < 0:
        return "[<unknown child>]"
    try:
        if ns is None:
            keys = expand_with_keys(node, none_is_leaf)[3]
        else:
            keys = ns_expand_with_keys(node, none_is_leaf, ns)[3]
        return keys[index]
    except Exception:
        return f"[<child {index}>]"


def path_of(nodes: list[Any], positions: list[int], none_is_leaf: bool, ns: Namespace | None = None) -> tuple[Any, ...]:
    """Key path of ``nodes[-1]`` from a walker's frame stack.

    ``nodes[i]`` is the node entered at depth i (``nodes[0]`` the root) and ``positions[i]`` is
    one past its index among its parent's children (``positions[0]`` is ignored).
    """
    path = []
    for i in range(1, len(nodes)):
        path.append(child_key(nodes[i - 1], positions[i] - 1, none_is_leaf, ns))
    return tuple(path)


MAX_PATH_TEXT: Final = 240


def path_text(path: tuple[Any, ...]) -> str:
    """``keystr`` of a path, shortened in the middle when long (deep trees)."""
    if not path:
        return "<root>"
    s = keystr(path)
    if len(s) <= MAX_PATH_TEXT:
        return s
    return f"{s[:80]}...({len(path)} keys in all)...{s[-140:]}"


def _type_name(t: Any) -> str:
    return str(getattr(t, "__name__", t))


def describe(code: int, data: Any, x: Any, other_type: Any = None) -> str:
    """Human description of one node (or leaf) for mismatch messages."""
    kind = code & MASK
    n = code >> SHIFT
    if kind == LEAF:
        return f"a leaf of type {type(x).__name__}" if x is not None else "a leaf (None)"
    if kind == NONE:
        return "None"
    if kind == TUPLE:
        return f"a tuple of length {n}"
    if kind == LIST:
        return f"a list of length {n}"
    if kind == DEQUE:
        return f"a deque of length {n} (maxlen={data!r})"
    if kind == DICT or kind == ORDEREDDICT or kind == DEFAULTDICT:
        dd: DictData = data
        label = {DICT: "a dict", ORDEREDDICT: "an OrderedDict", DEFAULTDICT: "a defaultdict"}[kind]
        extra = f" (default_factory={short_repr(dd.factory, 60)})" if kind == DEFAULTDICT else ""
        return f"{label} with keys {keys_text(dd.keys)}{extra}"
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        return f"a {'namedtuple' if kind == NAMEDTUPLE else 'struct sequence'} {_named(data, other_type)}"
    if kind == CUSTOM:
        cd: CustomData = data
        return (
            f"a {_named(cd.info.nodetype, other_type)} node with {n} children and node data "
            f"{short_repr(cd.aux_text())}"
        )
    return f"a node of code {code}"


def _named(t: Any, other: Any) -> str:
    if other is not None and other is not t and _type_name(other) == _type_name(t):
        return f"{_type_name(t)} ({qualified_name(t)}; distinct classes with the same name)"
    return _type_name(t)


def _node_type(code: int, data: Any) -> Any:
    kind = code & MASK
    if kind == NAMEDTUPLE or kind == STRUCTSEQ:
        return data
    if kind == CUSTOM:
        return data.info.nodetype
    return None


def _where_texts_differ(a: str, b: str) -> str:
    """``"; the node data first differ at character i: ...a... vs ...b..."`` (or ``""`` when
    the texts are equal)."""
    if a == b:
        return ""
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    lo = max(0, i - 30)
    return (
        f"; the node data first differ at character {i}: "
        f"...{clip(a[lo:], 90)!r} vs ...{clip(b[lo:], 90)!r}"
    )


def mismatch_detail(code: int, data: Any, ycode: int, ydata: Any, y: Any) -> str:
    """What differs between an expected node (code, data) and the node ``y`` found."""
    t1 = _node_type(code, data)
    t2 = _node_type(ycode, ydata)
    kind, ykind = code & MASK, ycode & MASK
    expected = describe(code, data, None, t2)
    got = describe(ycode, ydata, y, t1)
    if ykind == LEAF and kind != LEAF:
        got = f"a leaf of type {qualified_name(type(y))}"
    msg = f"expected {expected}, got {got}"
    if kind == CUSTOM and ykind == CUSTOM and expected == got:
        # Both node data print alike once clipped: show where their full texts part.
        msg += _where_texts_differ(data.aux_text(), ydata.aux_text())
    if kind == ykind and kind in (DICT, ORDEREDDICT, DEFAULTDICT):
        a: DictData = data
        b: DictData = ydata
        a_keys = set(a.keys)
        b_keys = set(b.keys)
        missing = [k for k in a.keys if k not in b_keys]
        extra = [k for k in b.keys if k not in a_keys]
        if missing:
            msg += f"; missing key(s) {keys_text(missing)}"
        if extra:
            msg += f"; extra key(s) {keys_text(extra)}"
        if not missing and not extra and a.keys != b.keys:
            msg += "; the same keys in a different order"
    return msg


# ---------------------------------------------------------------------------------------------
# Errors found by walking again.  The walkers keep no ancestors: when one meets a cycle or a
# mismatch it raises ``_depth.CycleFound`` / ``MismatchFound``, and the public function walks the
# tree(s) again with the functions below, which keep the key path (as jax.tree_util reports a
# prefix mismatch by walking again).  Callbacks (``is_leaf``, flatten functions) run again.


def _leaf_test(is_leaf: Callable[..., Any] | None, path_leaf: bool, path: list[Any], k: Any, depth: int, x: Any) -> bool:
    """``is_leaf`` of ``x``, the item at ``depth`` whose key is ``k`` below the keys ``path``;
    the key path is made only when ``is_leaf`` takes it."""
    if is_leaf is None:
        return False
    return bool(is_leaf(_key_path(path, k, depth), x) if path_leaf else is_leaf(x))


def _key_path(path: list[Any], k: Any, depth: int) -> tuple[Any, ...]:
    """The key path of the item at ``depth`` whose key is ``k`` below the keys ``path``."""
    return tuple(path + [k]) if depth else ()


def cycle_error(
    tree: Any, is_leaf: Callable[..., Any] | None, path_leaf: bool, none_is_leaf: bool, ns: Namespace | None = None
) -> Exception:
    """The ValueError for a tree that contains itself, naming the key path where the cycle
    first closes (in walk order) and that of the ancestor it closes on."""
    found = _walk_again("", tree, [], is_leaf, path_leaf, none_is_leaf, ns)
    return found if found is not None else ValueError("cycle in pytree: a container contains itself")


def mismatch_error(
    what: str,
    tree: Any,
    rest: list[Any],
    is_leaf: Callable[..., Any] | None,
    path_leaf: bool,
    none_is_leaf: bool,
    ns: Namespace | None = None,
) -> Exception:
    """The ValueError for trees in ``rest`` that do not have ``tree``'s structure as a prefix,
    naming the key path of the first mismatch (in walk order) and both sides (or the cycle in
    ``tree`` met first)."""
    found = _walk_again(what, tree, rest, is_leaf, path_leaf, none_is_leaf, ns)
    return found if found is not None else ValueError(f"{what}: the trees do not match (they changed while being walked)")


def _walk_again(
    what: str,
    tree: Any,
    rest: list[Any],
    is_leaf: Callable[..., Any] | None,
    path_leaf: bool,
    none_is_leaf: bool,
    ns: Namespace | None,
) -> Exception | None:
    """Walk ``tree`` (and ``rest`` beside it) keeping the key path, and return the error for
    the first node, in walk order, where a tree of ``rest`` does not match or ``tree`` closes a
    cycle; None if there is neither."""
    on_path: dict[int, int] = {}  # id of each node on the root-to-node path -> its depth
    nodes: list[Any] = []  # that path (kept, so the ids stay valid)
    path: list[Any] = []  # the keys of nodes[1:]
    st: list[tuple[list[Any], list[list[Any]], list[Any], int]] = []
    seq: list[Any] = [tree]
    rseqs: list[list[Any]] = [[r] for r in rest]
    keys: list[Any] = [None]
    pos = 0
    # The path of an item is made only for is_leaf (when it takes paths) or for the error:
    # making it for every item cost time quadratic in the depth.
    while True:
        if pos < len(seq):
            x = seq[pos]
            k = keys[pos]
            ys = [r[pos] if pos < len(r) else None for r in rseqs]
            pos += 1
            depth = len(nodes)
            if _leaf_test(is_leaf, path_leaf, path, k, depth, x):
                continue
            if ns is None:
                code, d, ch, ckeys = expand_with_keys(x, none_is_leaf)
            else:
                code, d, ch, ckeys = ns_expand_with_keys(x, none_is_leaf, ns)
            if code == LEAF:
                continue
            children: list[list[Any]] = []
            for j in range(len(ys)):
                y = ys[j]
                ych = match_children(code, d, y, none_is_leaf) if ns is None else ns_match_children(code, d, y, none_is_leaf, ns)
                if ych is None:
                    ycode, ydata, _ = expand(y, none_is_leaf) if ns is None else ns_expand(y, none_is_leaf, ns)
                    detail = mismatch_detail(code, d, ycode, ydata, y)
                    return ValueError(
                        f"{what}: tree #{j + 2} (rest[{j}]) does not match at key path "
                        f"{path_text(_key_path(path, k, depth))}: {detail}"
                    )
                children.append(ych)
            if not ch:
                continue
            at = on_path.get(id(x))
            if at is not None:
                return ValueError(
                    f"cycle in pytree: the {type(x).__name__} at key path {path_text(_key_path(path, k, depth))} is "
                    f"the same object as its ancestor at key path {path_text(tuple(path[:at]))}, "
                    "so the tree would be infinitely deep; a pytree must not contain itself"
                )
            on_path[id(x)] = depth
            nodes.append(x)
            if depth:
                path.append(k)
            if depth & (depth - 1) == 0:
                check_depth(depth)
            st.append((seq, rseqs, keys, pos))
            seq = ch
            rseqs = children
            keys = ckeys
            pos = 0
        elif st:
            seq, rseqs, keys, pos = st.pop()
            del on_path[id(nodes.pop())]
            if nodes:
                path.pop()
        else:
            return None


def changed_size(seq: list[Any], n: int) -> RuntimeError:
    """A list shrank while it was being walked (a callback removed items from it)."""
    return RuntimeError(
        f"a list of the pytree changed size while it was being walked (it had {n} items, now "
        f"{len(seq)}); callbacks (f, is_leaf, flatten functions) must not remove items from "
        "the tree they are walking"
    )


def nodes_of(st_seq: list[list[Any]], st_pos: list[int]) -> list[Any]:
    """The nodes on a table walk's current root-to-node path, from its frame stack."""
    return [st_seq[i][st_pos[i] - 1] for i in range(len(st_seq))]
