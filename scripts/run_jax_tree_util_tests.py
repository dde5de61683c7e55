"""Run JAX's own ``tests/tree_util_test.py`` against ``spruce.tree_util`` and count the results.

The file is JAX's, not ours: it is never copied into this repository.  Take the one matching the
installed jax (``python -c 'import jax; print(jax.__version__)'``) from the jax repository, e.g.::

    git -C <a jax clone> show jax-v0.10.2:tests/tree_util_test.py > /tmp/tree_util_test.py
    PYTHONPATH=src python scripts/run_jax_tree_util_tests.py /tmp/tree_util_test.py [-v]

Needs ``absl-py`` (installed with jax).  How the file is run: its text is rewritten in a
temporary directory so that the names it tests come from spruce,

- ``from jax import tree_util``     -> ``spruce.tree_util``
- ``jax.tree.<name>``               -> ``spruce.tree.<name>``
- ``jax.tree_util.<name>``          -> ``spruce.tree_util.<name>``
- ``from jax import flatten_util``  -> ``spruce.jax`` (for ``ravel_pytree``)

while everything else (``jax.numpy``, ``jax.jit``, JAX's test base classes and the private
``jax._src.tree_util`` helpers a few tests import) stays JAX's.  The tests are then loaded with
``unittest`` and each result is put in one of three groups:

- passed;
- not applicable: the test is listed in ``NOT_APPLICABLE`` below (with the reason: it tests
  JAX internals or jaxlib's C++ registry rather than tree_util's public behaviour); it is run,
  and its outcome is shown but not counted as passed or failed;
- failed (failures and errors), each listed with its first error line; ``KNOWN`` below says,
  for each failure that is understood, whether it is a deliberate spruce difference (and where
  it is documented) or a disagreement still to fix.

Prints the counts and the classified failures; exits 0 whatever they are (it is a report).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import sys
import tempfile
import traceback
import unittest
from typing import Any

# Tests (by "Class.method" prefix) that do not test tree_util's public behaviour.
NOT_APPLICABLE: dict[str, str] = {
    "TreePrefixErrorsTest.": "JAX internals: jax._src.tree_util.prefix_errors, which walks JAX's own registry",
    "StaticTest.test_serialize_treedef": "jaxlib's protobuf serialization of PyTreeDef (spruce's pickle instead)",
    "StaticTest.test_compare_pytreedef_with_registries": "jaxlib's C++ registries (default_registry, dispatch_registry)",
}

# Failures that are understood: "Class.method" prefix -> classification.  "deliberate" points
# at the section "Where spruce differs from jax.tree_util, on purpose" of
# docs/from/jax-tree-util.md (named "docs/from" below) or a docstring; "open" names what still
# has to change, and where.
_WORDING = "deliberate: message text only (the exception class agrees; spruce names the key path and both sides: docs/from)"
_UNHASHABLE = "deliberate: unhashable node data (a list aux, a dict subclass) cannot be compared: docs/from, last item"
_DICT_ORDER = "deliberate: a rebuilt dict keeps the input's insertion order: docs/from, first item"
_IS_LEAF_TAKES_PATH = (
    "open (a regression: these passed): is_leaf_takes_path= of the *_with_path functions "
    "(_tree/_traverse.py, _tree/_walker.py)"
)
_TO_JAX = (
    "open (a regression: these passed): a spruce registration is unknown to jax.jit (spruce -> JAX "
    "registration: _tree/_registry.py and src/spruce/_jax_bridge.py)"
)
KNOWN: dict[str, str] = {
    "TreeTest.testFlattenUpToErrors": _WORDING,
    "TreeTest.testBroadcastError": _WORDING,
    "TreeTest.testBadFlatten": _WORDING,
    "TreeTest.testTransposeMismatchInner": _WORDING,
    "TreeTest.testTransposeMismatchOuter": _WORDING,
    "RegistrationTest.test_register_dataclass_field_errors": _WORDING,
    "RegistrationTest.test_register_dataclass_overlapping_fields": _WORDING,
    "RegistrationTest.test_register_dataclass_unexpected_fields": _WORDING,
    "RegistrationTest.test_register_dataclass_missing_fields": (
        "deliberate: spruce's register_dataclass rebuilds without calling __init__ (its docstring), "
        "so a field declared init=False, which JAX's __init__ would recompute, must be listed too"
    ),
    "TreeTest.testBroadcast": _UNHASHABLE,
    "TreeTest.testRoundtripWithFlattenUpTo": _UNHASHABLE,
    "TreeTest.testPickleRoundTrip": _UNHASHABLE,
    "TreeTest.testTransposeInferInnerTreedef": _UNHASHABLE,
    "TreeTest.testTransposeWithCustomObject": (
        "deliberate: transpose checks node by node and this class changes its node data when "
        "rebuilt (spruce.tree.transpose docstring; docs/from)"
    ),
    "TreeTest.testTranspose":
        "deliberate: unhashable node data (AnObject), or node data that changes when rebuilt (FlatCache): docs/from",
    "TreeTest.testDictKeysSortable": "deliberate: keys that do not compare are ordered by (type, key): docs/from, first item",
    "TreeTest.testFlattenDictKeyOrder": _DICT_ORDER,
    "TreeTest.testFlattenDefaultDictKeyOrder": _DICT_ORDER,
    "TreeTest.testFlattenWithPathDefaultDict": _DICT_ORDER,
    "TreeTest.testFlattenOneLevel": "deliberate: flatten_one_level returns a PyTreeDef and accepts leaves (Equinox's): docs/from",
    "TreeTest.testFlattenWithPathWithIsLeafArgument": _IS_LEAF_TAKES_PATH,
    "TreeTest.testTreeFlattenWithPathWithIsLeafWithPathArgument": _IS_LEAF_TAKES_PATH,
    "TreeTest.testTreeMapWithPathWithIsLeaf": _IS_LEAF_TAKES_PATH,
    "TreeAliasTest.test_tree_flatten_with_path_is_leaf": _IS_LEAF_TAKES_PATH,
    "TreeAliasTest.test_tree_leaves_with_path_is_leaf": _IS_LEAF_TAKES_PATH,
    "TreeAliasTest.test_tree_map_with_path_is_leaf": _IS_LEAF_TAKES_PATH,
    "StaticTest.test_trace_": _TO_JAX,
    "TreeKeyTest.testEqualityErrorWithArrayAsStaticArg": _TO_JAX,
}

REWRITES: list[tuple[str, str]] = [
    (r"^from jax import tree_util$", "import spruce.tree_util as tree_util"),
    (r"^from jax import flatten_util$", "from spruce import jax as flatten_util"),
    (r"\bjax\.tree\.", "_spruce_tree."),
    (r"\bjax\.tree_util\.", "tree_util."),
]


def _rewrite(text: str) -> str:
    for pattern, replacement in REWRITES:
        text, n = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        if n == 0:
            print(f"note: no match for {pattern!r} (a newer test file?)", file=sys.stderr)
    return "import spruce.tree as _spruce_tree\n" + text


def _match(test_id: str, table: dict[str, str]) -> str | None:
    name = ".".join(test_id.split(".")[1:])  # "Class.method..." without the module
    for prefix, why in table.items():
        if name.startswith(prefix):
            return why
    return None


class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[tuple[str, str, str]] = []  # (test id, outcome, first error line)

    def addSuccess(self, test: Any) -> None:
        self.outcomes.append((test.id(), "passed", ""))

    def _bad(self, test: Any, err: Any, outcome: str) -> None:
        text = "".join(traceback.format_exception(*err)).strip().splitlines()
        last = next((line for line in reversed(text) if line and not line.startswith(" ")), "")
        self.outcomes.append((test.id(), outcome, last[:200]))

    def addFailure(self, test: Any, err: Any) -> None:
        self._bad(test, err, "failed")

    def addError(self, test: Any, err: Any) -> None:
        self._bad(test, err, "error")

    def addSkip(self, test: Any, reason: str) -> None:
        self.outcomes.append((test.id(), "skipped", reason))

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self.outcomes.append((test.id(), "passed", "expected failure"))

    def addUnexpectedSuccess(self, test: Any) -> None:
        self.outcomes.append((test.id(), "failed", "unexpected success"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", type=pathlib.Path, help="JAX's tests/tree_util_test.py")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every test")
    args = parser.parse_args()
    text = _rewrite(args.test_file.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "spruce_tree_util_test.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("spruce_tree_util_test", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        result = _Result()
        suite.run(result)
    passed = [o for o in result.outcomes if o[1] == "passed" and not _match(o[0], NOT_APPLICABLE)]
    na = [o for o in result.outcomes if _match(o[0], NOT_APPLICABLE)]
    skipped = [o for o in result.outcomes if o[1] == "skipped" and not _match(o[0], NOT_APPLICABLE)]
    failed = [o for o in result.outcomes if o[1] in ("failed", "error") and not _match(o[0], NOT_APPLICABLE)]
    print(f"JAX tree_util tests against spruce.tree_util ({args.test_file}):")
    print(f"  passed {len(passed)}, failed {len(failed)}, not applicable {len(na)}, skipped by JAX {len(skipped)}")
    if args.verbose:
        for test_id, _, _ in passed:
            print(f"  passed  {test_id}")
    print("not applicable:")
    for test_id, outcome, _ in na:
        print(f"  {test_id} [{outcome}]: {_match(test_id, NOT_APPLICABLE)}")
    groups: dict[str, list[str]] = {}
    for test_id, _, line in failed:
        why = _match(test_id, KNOWN)
        label = why or f"UNCLASSIFIED: {line}"
        groups.setdefault(label, []).append(test_id.split(".", 1)[1])
    deliberate = sum(len(v) for k, v in groups.items() if k.startswith("deliberate"))
    still_open = sum(len(v) for k, v in groups.items() if k.startswith("open"))
    print(f"failed, by cause ({deliberate} deliberate, {still_open} open, {len(failed) - deliberate - still_open} unclassified):")
    for label, tests in sorted(groups.items()):
        print(f"  {len(tests):3d}  {label}")
        for t in tests if args.verbose else tests[:3]:
            print(f"         {t}")
        if not args.verbose and len(tests) > 3:
            print(f"         ... {len(tests) - 3} more (-v lists all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
