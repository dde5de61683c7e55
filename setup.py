"""Build hook: compile the pytree engine with mypyc unless SPRUCE_PURE=1.

The engine modules (src/spruce/_tree/_*.py, except _pure.py, _folds.py,
_kindenum.py and _typevars.py) are typed Python; mypyc turns
them into C extensions.  With SPRUCE_PURE=1 the same files are installed as plain Python instead
(the py3-none-any wheel).  When the C compiler fails (none installed, CC=/bin/false, missing
Python headers), the build falls back to that pure-Python build with a one-line warning instead of
failing; the reason is recorded in spruce/_tree/_build.txt, which ``python -m spruce --version``
prints.
"""

import os
import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Never compiled: _pure.py, the uncompiled build's own map (recursion shaped for the interpreter),
# _folds.py, whose sentinel defaults a compiled function cannot show to inspect.signature, and
# _kindenum.py (an enum class); _typevars.py, whose run-time branch a compiled module would treat as unreachable.
INTERPRETED = ("__init__.py", "_pure.py", "_folds.py", "_kindenum.py", "_typevars.py")
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

BUILD_NOTE = "spruce/_tree/_build.txt"


def _reason(e: Exception) -> str:
    """One short line on why compiling failed (the compiler's command line is long)."""
    text = " ".join(str(e).split())
    m = re.search(r"[Cc]ommand '\[?'?([^' ]+)'?.*?(?:returned non-zero exit status|failed with exit code) (\d+)", text)
    if m:
        return f"{m.group(1)} exited with status {m.group(2)}"
    return (text[:150] + "...") if len(text) > 150 else (text or type(e).__name__)


class build_ext_or_pure(build_ext):
    """build_ext that, when compiling fails, leaves the engine as plain Python (it is the same code)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # CompileError, LinkError, DistutilsExecError, PlatformError, ...
            reason = _reason(e)
            sys.stderr.write(f"WARNING: spruce: the C compiler failed ({reason}); installing the pure-Python build\n")
            for ext in self.extensions:  # nothing half-built may shadow the .py files
                for path in (self.get_ext_fullpath(ext.name),):
                    if os.path.exists(path):
                        os.remove(path)
            self.extensions = []
            note = Path(self.build_lib) / BUILD_NOTE
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(f"pure: the C compiler failed at build time ({reason})\n")


setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext_or_pure})
