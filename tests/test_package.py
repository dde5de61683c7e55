"""The package as Python users expect it: subpackages reachable as attributes of ``spruce``
without importing them first (PEP 562), while ``import spruce`` alone never imports JAX."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_spruce_imports_no_jax_and_no_subpackage() -> None:
    out = _run(
        "import sys, spruce\n"
        "print(sorted(m for m in ('jax', 'numpy', 'spruce.io', 'spruce.nn', 'spruce.jax', 'spruce.view') if m in sys.modules))"
    )
    assert out == "[]"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("spruce.io.load.__name__", "load"),
        ("spruce.nn.Linear.__name__", "Linear"),
        ("spruce.jax.filter_jit.__name__", "filter_jit"),
        ("spruce.sharding.Rules.__name__", "Rules"),
        ("spruce.view.html.__name__", "html"),
        ("spruce.models.minilm.__name__", "spruce.models.minilm"),
        ("spruce.cli.main.__name__", "main"),
    ],
)
@pytest.mark.slow
def test_subpackages_load_on_first_use(expr: str, expected: str) -> None:
    assert _run(f"import spruce\nprint({expr})") == expected


def test_io_on_first_use_imports_no_jax() -> None:
    """Reaching ``spruce.io`` (NumPy only) does not pull in JAX."""
    assert _run("import sys, spruce\nspruce.io.save\nprint('jax' in sys.modules)") == "False"


def test_unknown_attribute_is_an_attribute_error() -> None:
    import spruce

    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        spruce.nope  # noqa: B018
    assert {"io", "nn", "jax", "sharding", "view", "models", "cli"} <= set(dir(spruce))


PUBLIC_MODULES = [
    "spruce",
    "spruce.tree",
    "spruce.tree_util",
    "spruce.jax",
    "spruce.nn",
    "spruce.io",
    "spruce.sharding",
    "spruce.view",
    "spruce.models",
]


def _public_callables() -> list[tuple[str, object]]:
    import importlib
    import typing

    out = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if isinstance(obj, (typing._GenericAlias, type(tuple[int]))) or not callable(obj):  # type aliases
                continue
            if getattr(obj, "__module__", "").split(".")[0] not in ("spruce",):
                continue  # re-exported from JAX (activations in spruce.nn)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                continue  # exceptions take BaseException's arguments
            out.append((f"{name}.{attr}", obj))
            if isinstance(obj, type):
                for meth, f in vars(obj).items():
                    if not meth.startswith("_") and callable(f) and not isinstance(f, type):
                        out.append((f"{name}.{attr}.{meth}", getattr(obj, meth)))
    return out


def test_every_public_function_has_a_signature() -> None:
    """``inspect.signature`` (what ``help()`` and editors show) works on every public function and
    method, compiled builtins of the engine included."""
    import inspect

    bad = []
    for name, obj in _public_callables():
        try:
            inspect.signature(obj)
        except (ValueError, TypeError) as e:
            bad.append(f"{name}: {e}")
    assert bad == []
    assert len(_public_callables()) > 200
