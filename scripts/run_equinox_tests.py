"""Run Equinox's own tests of its Module layer, layers, filters and tree tools against spruce.

The test files are Equinox's, not ours: they are never copied into this repository, and the
``equinox`` sdist on PyPI does not ship them, so the script needs a clone of
https://github.com/patrick-kidger/equinox (a working tree or a bare git directory) and reads
``tests/test_nn.py``, ``test_module.py``, ``test_filters.py``, ``test_tree.py`` and
``helpers.py`` at a pinned tag::

    git clone https://github.com/patrick-kidger/equinox /tmp/equinox
    PYTHONPATH=src python scripts/run_equinox_tests.py --equinox /tmp/equinox [--ref v0.13.8] [-v]

(``--ref ''`` reads the files as they are in the working tree; ``--equinox`` may also be a
directory that holds the five files under ``tests/``.)  Needs pytest and jaxtyping (which
Equinox's test_module.py imports); not part of ``make test``.

How the tests are run: the files are written to a temporary directory beside a conftest.py of
ours, which sets JAX's configuration as Equinox's conftest does (strict dtype promotion, rank
promotion raising, two CPU devices), gives the ``getkey`` fixture, and puts a fake ``equinox``
package in ``sys.modules`` (the real one, if installed, is never imported).  The fake package
binds each Equinox name to the spruce object of the same meaning (``NAMES`` below: the same name
in ``spruce``, ``spruce.jax`` or ``spruce.nn``, or a listed rename such as ``tree_pformat`` ->
``spruce.pformat``).  A name spruce does not have stays missing: using it raises
``AttributeError: ... (name not in spruce)``, and the test is counted under "name not in spruce".
Every other failure is either listed in ``KNOWN`` (a deliberate difference, with where it is
documented, or an open bug, with where it lives) or printed as UNCLASSIFIED.

Prints the counts and the classified failures; exits 0 whatever they are (it is a report).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile
import types
from typing import Any

PINNED_REF = "v0.13.8"
FILES = ("__init__.py", "helpers.py", "test_nn.py", "test_module.py", "test_filters.py", "test_tree.py")
MISSING = "name not in spruce"

# Equinox names bound to spruce objects: equinox name -> "module:attribute".  Names equal in both
# libraries are found automatically (``_lookup``); this lists only renames.
RENAMES: dict[str, str] = {
    "tree_pformat": "spruce:pformat",
    "tree_flatten_one_level": "spruce.tree:flatten_one_level",
}
_TOP_MODULES = ("spruce", "spruce.jax")
_NN_MODULES = ("spruce.nn",)

# Failures that are understood: test id (``file.py::test_name``, which also covers its
# parametrized cases; a trailing ``*`` makes it a prefix) -> classification.  "deliberate" names
# the documented difference; "open" names what still has to change, and where; a label starting
# with MISSING counts as a name spruce does not have.
_TORCH = "deliberate: spruce.nn follows PyTorch (spruce.nn docstring; each layer tested against torch.nn): "
_TORCH_PADDING = _TORCH + "padding 'same' / padding_mode 'circular' in lower case (Equinox: 'SAME', 'CIRCULAR')"
_EQ = (
    "deliberate: Module equality and hashing are by identity (spruce.Module docstring; compare "
    "contents with spruce.tree_equal), where Equinox's __eq__ compares the trees"
)
_CONVERT = (
    "deliberate: a converter runs when the field is assigned (spruce.Module docstring), so "
    "__init__ / __post_init__ see the converted value; Equinox converts after them"
)
_TREE_EQUAL = (
    "deliberate: spruce.tree_equal returns a Python bool and compares an array with a number by "
    "value unless typematch=True (its docstring); Equinox returns a JAX bool array"
)
_LEARNT_ACTIVATION = (
    "deliberate: MLP's activations are static fields, so one with parameters (a PReLU) is refused "
    "with a TypeError (MLP docstring; use a Sequential), where Equinox trains one copy per neuron"
)
KNOWN: dict[str, str] = {
    # test_filters.py
    "test_filters.py::test_filter": _EQ,
    "test_filters.py::test_partition_and_combine": _EQ,
    "test_filters.py::test_is_leaf": _EQ,
    # test_module.py
    "test_module.py::test_another_classes_classmethod": _EQ,
    "test_module.py::test_eq_method": _EQ + " (a bound method compares its __self__)",
    "test_module.py::test_wrap_method": (
        "open: a Module's methods are plain bound methods; Equinox makes m.f a Module holding m "
        "(spruce.jax.filter_jit and friends accept bound methods instead)"
    ),
    "test_module.py::test_converter": _CONVERT,
    "test_module.py::test_converter_monkeypatched_postinit": _CONVERT,
    "test_module.py::test_converter_subclass_post_init": _CONVERT,
    "test_module.py::test_static_field": f"{MISSING}: equinox.static_field (deprecated in Equinox; spruce.field(static=True))",
    "test_module.py::test_converter_annotations": (
        "open: a generated __init__ keeps the field's annotation; Equinox annotates a converted "
        "field with the converter's parameter type (_module/_module.py)"
    ),
    "test_module.py::test_no_jax_array_static": (
        "deliberate: an unhashable static value (here a tuple holding a JAX array) is a TypeError "
        "(spruce.Module docstring), where Equinox only warns"
    ),
    "test_module.py::test_method_assignment*": (
        "deliberate: message text only (assigning the module's own bound method to a field is "
        "refused with a ValueError, as Equinox's, in spruce's words)"
    ),
    "test_module.py::test_init_fields": (
        "deliberate: message text only (UnsetFieldError is a TypeError as Equinox's; spruce's "
        "message says which __init__ and how to fix it)"
    ),
    # test_nn.py
    "test_nn.py::test_identity": _EQ,
    "test_nn.py::test_dropout_deterministic": (
        "deliberate: `deterministic=` is Equinox's deprecated spelling of `inference=`, which "
        "spruce takes"
    ),
    "test_nn.py::test_multihead_attention_deterministic": (
        "deliberate: `deterministic=` is Equinox's deprecated spelling of `inference=`, which "
        "spruce takes"
    ),
    "test_nn.py::test_sequential": _TORCH + "BatchNorm(num_features, eps, momentum, ...), no Equinox `mode=`",
    "test_nn.py::test_nested_sequential": _TORCH + "BatchNorm(num_features, eps, momentum, ...), no Equinox `mode=`",
    "test_nn.py::test_batch_norm*": _TORCH + "BatchNorm(num_features, eps, momentum, ...), no Equinox `mode=` / `input_size=`",
    "test_nn.py::test_mlp_learnt_activation": _LEARNT_ACTIVATION,
    "test_nn.py::test_scan_over_mlp_learnt_activation": _LEARNT_ACTIVATION,
    "test_nn.py::test_prelu": _TORCH + "PReLU(num_parameters, init), not Equinox's PReLU(init_alpha)",
    "test_nn.py::test_conv1d": _TORCH + "a convolution's bias has shape (out_channels,), Equinox's (out_channels, 1, ...)",
    "test_nn.py::test_conv2d": _TORCH + "a convolution's bias has shape (out_channels,), Equinox's (out_channels, 1, ...)",
    "test_nn.py::test_conv3d": _TORCH + "a convolution's bias has shape (out_channels,), Equinox's (out_channels, 1, ...)",
    "test_nn.py::test_convtranspose1d": _TORCH + "transposed weight (in, out/groups, *k) and bias (out,)",
    "test_nn.py::test_convtranspose2d": _TORCH + "transposed weight (in, out/groups, *k) and bias (out,)",
    "test_nn.py::test_convtranspose3d": _TORCH + "transposed weight (in, out/groups, *k) and bias (out,)",
    "test_nn.py::test_conv_circular": _TORCH_PADDING,
    "test_nn.py::test_convtranspose_same_padding": _TORCH_PADDING,
    "test_nn.py::test_convtranspose_circular": _TORCH_PADDING,
    "test_nn.py::test_group_norm": _TORCH + "GroupNorm(num_groups, num_channels), not Equinox's (groups, channels)",
    "test_nn.py::test_maxpool*": _TORCH + "`ceil_mode=`, not Equinox's `use_ceil=`",
    "test_nn.py::test_adaptive_*": _TORCH
    + "adaptive pooling's bins [floor(i*L/n), ceil((i+1)*L/n)), which differ from Equinox's",
    "test_nn.py::test_poolpadding": _TORCH + "a pool's padding is symmetric per axis; Equinox's per-side pairs are not taken",
    "test_nn.py::test_poolbackprop": _TORCH + "a pool's padding is symmetric per axis; Equinox's per-side pairs are not taken",
    "test_nn.py::test_rope_embeddings_freqs_cis": f"{MISSING}: equinox.nn.RotaryPositionalEmbedding.precompute_freqs_cis",
    "test_nn.py::test_rope_embeddings_values": (
        "deliberate: RotaryPositionalEmbedding always computes its angles in at least float32 "
        "(its docstring), so it takes no dtype="
    ),
    # test_tree.py
    "test_tree.py::test_tree_at_none_leaf": "deliberate: tree_at selects a None by position (tree_at docstring); Equinox refuses",
    "test_tree.py::test_tree_equal*": _TREE_EQUAL,
    "test_tree.py::test_tree_allclose": _TREE_EQUAL,
    "test_tree.py::test_tree_flatten_one_level": (
        "deliberate: flatten_one_level returns spruce's PyTreeDef, which is not equal to JAX's "
        "(docs/from/jax-tree-util.md, 'Where spruce differs from jax.tree_util')"
    ),
    "test_tree.py::test_tree_flatten_one_level_special": _EQ,
}


def _lookup(name: str, modules: tuple[str, ...]) -> Any:
    import importlib

    for mod in modules:
        m = importlib.import_module(mod)
        if hasattr(m, name) and not name.startswith("_"):
            obj = getattr(m, name)
            if not isinstance(obj, types.ModuleType):
                return obj
    raise AttributeError(name)


class _Shim(types.ModuleType):
    """A module whose attributes are looked up in spruce; a missing one says so."""

    def __init__(self, name: str, modules: tuple[str, ...], renames: dict[str, str]) -> None:
        super().__init__(name)
        self._modules = modules
        self._renames = renames

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        import importlib

        try:
            if attr in self._renames:
                mod, _, obj = self._renames[attr].partition(":")
                value = getattr(importlib.import_module(mod), obj)
            else:
                value = _lookup(attr, self._modules)
        except AttributeError:
            raise AttributeError(
                f"module {self.__name__!r} has no attribute {attr!r} ({MISSING}: {self.__name__}.{attr})"
            ) from None
        setattr(self, attr, value)
        return value


class GetKey:
    """The ``getkey`` fixture's key source: a fresh PRNG key per call (seeded, so runs repeat)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.calls = 0

    def __call__(self) -> Any:
        import jax

        self.calls += 1
        return jax.random.fold_in(jax.random.PRNGKey(self.seed), self.calls)


def install_shim() -> None:
    """Put the fake ``equinox``, ``equinox.nn`` and ``equinox.internal`` in ``sys.modules``."""
    eqx = _Shim("equinox", _TOP_MODULES, RENAMES)
    nn = _Shim("equinox.nn", _NN_MODULES, {})
    internal = _Shim("equinox.internal", (), {})
    internal.GetKey = GetKey  # type: ignore[attr-defined]
    eqx.nn = nn  # type: ignore[attr-defined]
    eqx.internal = internal  # type: ignore[attr-defined]
    eqx.__path__ = []  # a package, so `import equinox.nn` works
    sys.modules["equinox"] = eqx
    sys.modules["equinox.nn"] = nn
    sys.modules["equinox.internal"] = internal


CONFTEST = '''
import sys
import jax
import pytest

sys.path.insert(0, {scripts!r})
import run_equinox_tests

# As Equinox's tests/conftest.py.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_num_cpu_devices", 2)
run_equinox_tests.install_shim()


@pytest.fixture
def getkey():
    return run_equinox_tests.GetKey()
'''


def _read(source: pathlib.Path, ref: str, name: str) -> str:
    if not ref:
        return (source / "tests" / name).read_text()
    git_dir = source / ".git" if (source / ".git").exists() else source
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{ref}:tests/{name}"], check=True, capture_output=True, text=True
    ).stdout


class _Collector:
    def __init__(self) -> None:
        self.outcomes: dict[str, tuple[str, str]] = {}  # nodeid -> (outcome, first error line)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            line = ""
            if report.outcome == "failed":
                crash = getattr(report.longrepr, "reprcrash", None)
                text = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
                line = " ".join(text.split())[:240]
            elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
                line = str(report.longrepr[2])
            if report.nodeid not in self.outcomes or self.outcomes[report.nodeid][0] == "passed":
                self.outcomes[report.nodeid] = (report.outcome, line)

    def pytest_collectreport(self, report: Any) -> None:
        if report.outcome == "failed":
            self.outcomes[report.nodeid] = ("failed", str(report.longrepr).strip().splitlines()[-1][:240])


def _classify(test_id: str, line: str) -> str:
    short = test_id.split("tests/", 1)[-1]
    for key, why in KNOWN.items():
        if short == key or short.startswith(key + "[") or (key.endswith("*") and short.startswith(key[:-1])):
            return why
    m = re.search(MISSING + r": ([\w.]+)", line)
    if m:
        return f"{MISSING}: {m.group(1)}"
    return f"UNCLASSIFIED: {line}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--equinox", type=pathlib.Path, required=True, help="a clone of Equinox's repository")
    parser.add_argument("--ref", default=PINNED_REF, help=f"git ref to read the tests at (default {PINNED_REF})")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every test")
    parser.add_argument("-k", default=None, help="pytest's -k expression")
    args = parser.parse_args()
    import pytest

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "tests").mkdir()
        for name in FILES:
            (root / "tests" / name).write_text(_read(args.equinox, args.ref, name))
        scripts = str(pathlib.Path(__file__).resolve().parent)
        (root / "conftest.py").write_text(CONFTEST.format(scripts=scripts))
        collector = _Collector()
        pytest_args = [
            str(root / "tests"), "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
            "-o", "addopts=", "--no-header", "-rN", "--tb=short",
        ]
        if args.k:
            pytest_args += ["-k", args.k]
        pytest.main(pytest_args, plugins=[collector])

    outcomes = {k.split("tests/", 1)[-1]: v for k, v in collector.outcomes.items()}
    passed = [k for k, (o, _) in outcomes.items() if o == "passed"]
    skipped = [k for k, (o, _) in outcomes.items() if o == "skipped"]
    failed = [(k, line) for k, (o, line) in outcomes.items() if o == "failed"]
    groups: dict[str, list[str]] = {}
    for test_id, line in failed:
        groups.setdefault(_classify(test_id, line), []).append(test_id)
    n_missing = sum(len(v) for k, v in groups.items() if k.startswith(MISSING))
    n_deliberate = sum(len(v) for k, v in groups.items() if k.startswith("deliberate"))
    n_open = sum(len(v) for k, v in groups.items() if k.startswith("open"))
    print()
    print(f"Equinox's tests ({args.ref or 'working tree'}) against spruce:")
    print(f"  passed {len(passed)}, failed {len(failed)}, skipped by Equinox {len(skipped)}")
    print(
        f"failed, by cause ({n_missing} {MISSING}, {n_deliberate} deliberate, {n_open} open, "
        f"{len(failed) - n_missing - n_deliberate - n_open} unclassified):"
    )
    if args.verbose:
        for t in passed:
            print(f"  passed  {t}")
    for label, tests in sorted(groups.items()):
        print(f"  {len(tests):3d}  {label}")
        for t in tests if args.verbose else tests[:3]:
            print(f"         {t}")
        if not args.verbose and len(tests) > 3:
            print(f"         ... {len(tests) - 3} more (-v lists all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
