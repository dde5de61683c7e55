"""Build hook: compile the pytree engine with mypyc unless SPRUCE_PURE=1.

The engine modules (src/spruce/_tree/_*.py, except _pure.py, _folds.py and _typevars.py) are typed Python; mypyc turns
them into C extensions.  With SPRUCE_PURE=1 the same files are installed as plain Python instead.
"""

import os
import sys
from pathlib import Path

from setuptools import setup

# Never compiled: _pure.py, the uncompiled build's own map (recursion shaped for the interpreter),
# _folds.py, whose sentinel defaults a compiled function cannot show to inspect.signature, and
# _typevars.py, whose run-time branch a compiled module would treat as unreachable.
INTERPRETED = ("__init__.py", "_pure.py", "_folds.py", "_typevars.py")
ENGINE = sorted(str(p) for p in Path("src/spruce/_tree").glob("_*.py") if p.name not in INTERPRETED)

# pip asks for the metadata (setup.py dist_info) before it builds the wheel (setup.py
# bdist_wheel); the metadata does not depend on the extensions, so mypyc runs once, not twice.
METADATA_ONLY = {"egg_info", "dist_info"}

ext_modules = []
if os.environ.get("SPRUCE_PURE", "") not in ("1", "true", "yes") and not METADATA_ONLY & set(sys.argv[1:]):
    from mypyc.build import mypycify

    # Only the engine is compiled; the rest of the package (imported through spruce/__init__)
    # is ordinary Python, type-checked separately, so its diagnostics must not fail the build.
    ext_modules = mypycify(["--follow-imports=silent", *ENGINE], opt_level="3", debug_level="0")

setup(ext_modules=ext_modules)
