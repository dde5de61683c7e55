"""Test configuration: tests run stricter than production, so that what would only warn in a
user's program fails here:

- every warning is an error (the few ignores below are for third-party imports, each with its
  reason);
- hypothesis runs a bounded, deterministic profile and writes no example database into the repo.

Floats that XLA or BLAS computed are compared with a tolerance, never character for character:
their last digits depend on the processor (vector width, fused multiply-add, summation order),
so the same program prints ``-0.27681673`` on one machine and ``-0.27681667`` on another.  The
tolerance is ``helpers.FLOAT_RTOL`` / ``helpers.FLOAT_ATOL`` (1e-6 relative, 1e-6 absolute near
0); printed output holding such numbers is compared with ``helpers.assert_text_close``, which
parses them.  Structure, reprs, key paths, shapes, dtypes and integers are compared exactly.
Results that are exact on every processor (a copy, a gather, ``2 * ones``) stay exact.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

import hypothesis
import pytest

# ``import helpers`` from every test module, however pytest was started.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

hypothesis.settings.register_profile(
    "spruce",
    max_examples=100,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.load_profile("spruce")


# JAX's persistent compilation cache of ``spruce demo`` and of ``minilm.encode`` (when asked for
# by $SPRUCE_JAX_CACHE) goes to a folder of this test run, removed at its end, never to the
# user's ~/.cache; subprocesses inherit it.
_JAX_CACHE = tempfile.mkdtemp(prefix="spruce-tests-jax-cache-")
os.environ["SPRUCE_JAX_CACHE"] = _JAX_CACHE


# The doctests of src/spruce (run with --doctest-modules) that take more than about 2 s, marked slow
# here as a test function is with @pytest.mark.slow (a docstring cannot carry a mark): each loads a
# model or compiles layers.
SLOW_DOCTESTS = frozenset([
    "spruce.models.crepe.Crepe",
    "spruce.models.minilm.encode",
    "spruce.models.smollm.chat",
    "spruce.models.smollm.generate",
    "spruce.models.smollm.stream",
    "spruce.nn._conv.Conv2d",
    "spruce.nn._conv.ConvTranspose1d",
    "spruce.nn._conv.ConvTranspose2d",
    "spruce.nn._conv.ConvTranspose3d",
    "spruce.nn._linear.MLP",
    "spruce.nn._rnn.GRUCell",
    "spruce.nn._rope.RotaryPositionalEmbedding",
])


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    for item in items:
        if item.name in SLOW_DOCTESTS and type(item).__name__ == "DoctestItem":
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config):  # type: ignore[no-untyped-def]
    shutil.rmtree(_JAX_CACHE, ignore_errors=True)


def pytest_configure(config):  # type: ignore[no-untyped-def]
    config.addinivalue_line("filterwarnings", "error")
    # jax (an oracle for the differential and tutorial tests) may warn at import about optional
    # accelerator plugins that this CPU-only machine does not have.
    config.addinivalue_line("filterwarnings", "ignore:.*GPU/TPU.*:UserWarning")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:jax.*")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:jaxlib.*")
    config.addinivalue_line(
        "markers", "subprocess: runs a snippet in a fresh interpreter (crash-proof; slower)"
    )


# -- the spruce.io tests' fixtures: each checkpoint format, and a path of that format ------------

@pytest.fixture(params=["safetensors", "npz"])
def fmt(request: Any) -> str:
    return str(request.param)


@pytest.fixture
def path(tmp_path: Any, fmt: str) -> str:
    return str(tmp_path / f"ckpt.{fmt}")
