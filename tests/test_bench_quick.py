"""The benchmark suite runs: ``benchmarks/run.py --quick`` exits 0 and prints its ratio table.

Timings are reported, never asserted: this test fails only if the suite itself breaks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

OPS = (
    "flatten",
    "unflatten",
    "leaves",
    "structure",
    "map",
    "map2",
    "flatten_with_path",
    "treedef_eq",
    "treedef_hash",
    "reduce",
)


@pytest.mark.slow
def test_quick_benchmark_runs_and_prints_the_table(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--outdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"run.py --quick exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    out = proc.stdout
    header = next((line for line in out.splitlines() if line.startswith("| tree | op |")), None)
    assert header is not None, f"no (tree, op) ratio table in the output:\n{out[-3000:]}"
    assert "/ jax" in header, f"jax is not among the peers: {header}"
    for op in OPS:
        assert f"| `{op}` |" in out, f"op {op} missing from the table"
    assert (tmp_path / "benchmarks.md").is_file()
