"""Optional dependencies: `import spruce` needs none; a part whose extra is missing names it.

Each case runs in a fresh interpreter where the named packages cannot be imported (a finder
first on sys.meta_path refuses them, as if they were not installed).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCK = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def _run(blocked: set[str], code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCK.format(blocked=sorted(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_import_spruce_needs_no_third_party_package() -> None:
    r = _run({"numpy", "jax", "jaxlib", "ml_dtypes", "safetensors", "rich", "tokenizers", "fsspec"}, """
        import spruce
        leaves, treedef = spruce.tree.flatten({"a": (1, 2.0), "b": None})
        print(leaves, spruce.tree.unflatten(treedef, leaves))
        class Pair(spruce.Module):
            x: int
        print(spruce.tree.leaves(Pair(3)))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[1, 2.0] {'a': (1, 2.0), 'b': None}", "[3]"]


NOT_INSTALLED = ", which is not installed: pip install "


@pytest.mark.parametrize(
    ("blocked", "statement", "message"),
    [
        ({"numpy"}, "import spruce.io", "spruce.io needs NumPy" + NOT_INSTALLED + "'spruce[io]'"),
        ({"numpy"}, "spruce.io.load", "spruce.io needs NumPy" + NOT_INSTALLED + "'spruce[io]'"),
        ({"jax", "jaxlib"}, "import spruce.jax", "spruce.jax needs JAX" + NOT_INSTALLED + "'spruce[jax]'"),
        ({"jax", "jaxlib"}, "import spruce.nn", "spruce.nn needs JAX" + NOT_INSTALLED + "'spruce[jax]'"),
        ({"jax", "jaxlib"}, "import spruce.sharding", "spruce.sharding needs JAX" + NOT_INSTALLED + "'spruce[jax]'"),
        ({"numpy"}, "import spruce.view", "spruce.view needs NumPy" + NOT_INSTALLED + "'spruce[view]'"),
        ({"jax", "jaxlib"}, "import spruce.models", "spruce.models needs JAX" + NOT_INSTALLED + "'spruce[models]'"),
    ],
)
def test_a_missing_extra_is_named(blocked: set[str], statement: str, message: str) -> None:
    r = _run(blocked, f"""
        import spruce
        try:
            {statement}
        except ImportError as e:
            print(type(e).__name__, isinstance(e, ImportError), e.name)
            print(e)
        else:
            print("no error")
    """)
    assert r.returncode == 0, r.stderr
    kind, text = r.stdout.splitlines()[:2]
    assert kind.split()[:2] == ["MissingDependencyError", "True"]
    assert text == message


def test_a_broken_installed_package_is_not_reported_as_missing() -> None:
    # numpy present but failing inside its own import: the original error, not "not installed"
    r = _run(set(), """
        import importlib
        from spruce._extras import require
        real = importlib.import_module
        def fake(name, package=None):
            if name == "numpy":
                raise ImportError("numpy's C extension failed to load", name="numpy.core._multiarray_umath")
            return real(name, package)
        importlib.import_module = fake
        try:
            require("spruce.io", "io")
        except ImportError as e:
            print(type(e).__name__, e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ImportError numpy's C extension failed to load"
