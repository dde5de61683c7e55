"""MkDocs hooks (mkdocs.yml ``hooks:``): the pictures of the pictures guide, drawn by spruce.view
at build time from the source under ``src/`` (so the page always shows what the code draws).

``view-example.html`` is ``spruce.view.html`` of a small two-layer network whose arrays are made
from a fixed NumPy seed, and ``view-example.svg`` its ``spruce.view.treemap``; both are added to
the site beside ``guides/pictures.md``, which links to them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _example_tree() -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "embed": {"weight": rng.standard_normal((64, 16), dtype=np.float32)},
        "layers": [
            {"weight": rng.standard_normal((16, 16), dtype=np.float32) / 4, "bias": np.zeros(16, np.float32)},
            {"weight": rng.standard_normal((16, 4), dtype=np.float32) / 4, "bias": np.zeros(4, np.float32)},
        ],
        "step": np.array(1000, dtype=np.int64),
    }


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    import spruce.view

    tree = _example_tree()
    page = spruce.view.html(tree, title="a small network (spruce.view.html)")
    svg = spruce.view.treemap(tree)
    files.append(File.generated(config, "guides/view-example.html", content=page))
    files.append(File.generated(config, "guides/view-example.svg", content=svg))
    return files
