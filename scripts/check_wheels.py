"""Check what `make wheels` put in dist/, as a user installing it would: `make test-wheels`.

For each interpreter given (``--python`` once per interpreter, as ``X.Y=/path/to/python``):

1. pip, offline (``--no-index --find-links dist``), installs spruce into a fresh virtual
   environment; the wheel it picked must be the compiled one for that interpreter (a
   ``cpXY-cpXY-manylinux_*`` tag), and ``spruce.__compiled__`` must be True;
2. a small import-and-use check runs there (flatten, map, unflatten, a Module, the version line).

Then, with the first interpreter:

3. pip's resolver, asked for a platform no compiled wheel matches (macOS on ARM), picks the
   pure ``py3-none-any`` wheel; that wheel, installed into a fresh environment, loads the
   pure-Python engine (``spruce.__compiled__`` False) and passes the same check;
4. the sdist, installed with the C compiler disabled (``CC=/bin/false``), falls back to the
   pure-Python build instead of failing, and says why in ``spruce --version``.

Exit status 0 when every check passes; each failure is printed with what pip or Python said.
The build tools the sdist needs (setuptools, wheel, mypy) are installed into its environment
from the package index first, then spruce itself only from dist/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# What `import spruce` must do with only the standard library: the engine, a Module, the CLI.
USE_CHECK = r"""
import json, sys
import spruce
from spruce import tree
leaves, treedef = tree.flatten({"b": (1, 2), "a": [3, None]})
assert leaves == [3, 1, 2], leaves
assert tree.unflatten(treedef, [x * 10 for x in leaves]) == {"a": [30, None], "b": (10, 20)}
assert tree.map(lambda x: x + 1, [1, (2,)]) == [2, (3,)]

class Pair(spruce.Module):
    left: int
    right: int

assert tree.leaves(Pair(1, 2)) == [1, 2]
from spruce.cli import version_text
print(json.dumps({"compiled": spruce.__compiled__, "version": version_text(), "file": spruce.__file__}))
"""


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def _venv(where: Path, python: str) -> Path:
    """A fresh virtual environment made by ``python``; returns its interpreter."""
    r = _run([python, "-m", "venv", str(where)])
    if r.returncode:
        raise SystemExit(f"{python} -m venv failed:\n{r.stderr}")
    return where / "bin" / "python"


def _pip(py: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _run([str(py), "-m", "pip", "--disable-pip-version-check", *args], env=env)


def _use(py: Path) -> dict[str, object]:
    r = _run([str(py), "-c", USE_CHECK], cwd=tempfile.gettempdir())  # not the source tree's src/
    if r.returncode:
        raise AssertionError(f"the import-and-use check failed:\n{r.stdout}{r.stderr}")
    result: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def _installed_wheel(report: Path) -> str:
    data = json.loads(report.read_text())
    urls = [item["download_info"]["url"] for item in data["install"] if item["metadata"]["name"] == "spruce"]
    if len(urls) != 1:
        raise AssertionError(f"pip's report names {len(urls)} spruce distributions: {urls}")
    return urls[0].rsplit("/", 1)[-1]


def check_compiled(dist: Path, version: str, python: str, tmp: Path) -> str:
    py = _venv(tmp / f"venv-{version}", python)
    report = tmp / f"report-{version}.json"
    r = _pip(py, "install", "-q", "--no-index", "--find-links", str(dist), "--report", str(report), "spruce")
    if r.returncode:
        raise AssertionError(f"pip install --no-index --find-links dist spruce failed on Python {version}:\n{r.stderr}")
    wheel = _installed_wheel(report)
    tag = "cp" + version.replace(".", "")
    if f"-{tag}-{tag}-" not in wheel or "manylinux" not in wheel:
        raise AssertionError(f"on Python {version} pip picked {wheel}, not the compiled {tag} manylinux wheel")
    use = _use(py)
    if use["compiled"] is not True:
        raise AssertionError(f"{wheel} installed, but spruce.__compiled__ is {use['compiled']}")
    return f"Python {version}: pip picked {wheel}; compiled engine loaded; {use['version']}"


def check_pure(dist: Path, python: str, tmp: Path) -> str:
    report = tmp / "report-other-platform.json"
    r = _run([python, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--dry-run", "--ignore-installed",
              "--no-index", "--find-links", str(dist), "--only-binary=:all:", "--platform", "macosx_11_0_arm64",
              "--target", str(tmp / "unused-target"), "--report", str(report), "spruce"])
    if r.returncode:
        raise AssertionError(f"pip could not resolve spruce for another platform:\n{r.stderr}")
    wheel = _installed_wheel(report)
    if not wheel.endswith("-py3-none-any.whl"):
        raise AssertionError(f"for a platform without a compiled wheel pip picked {wheel}, not the pure wheel")
    py = _venv(tmp / "venv-pure", python)
    r = _pip(py, "install", "-q", "--no-index", str(dist / wheel))
    if r.returncode:
        raise AssertionError(f"installing {wheel} failed:\n{r.stderr}")
    use = _use(py)
    if use["compiled"] is not False:
        raise AssertionError(f"{wheel} installed, but spruce.__compiled__ is {use['compiled']}")
    return f"another platform (macOS arm64): pip picks {wheel}; installed here, the pure engine loads"


def check_sdist(dist: Path, python: str, tmp: Path) -> str:
    sdists = sorted(dist.glob("spruce-*.tar.gz"))
    if len(sdists) != 1:
        raise AssertionError(f"expected one sdist in {dist}, found {[p.name for p in sdists]}")
    py = _venv(tmp / "venv-sdist", python)
    r = _pip(py, "install", "-q", "setuptools>=77", "wheel", "mypy==2.4.1")
    if r.returncode:
        raise AssertionError(f"installing the build tools failed:\n{r.stderr}")
    env = dict(os.environ, CC="/bin/false", LDSHARED="/bin/false")
    r = _pip(py, "install", "-v", "--no-index", "--no-build-isolation", str(sdists[0]), env=env)
    if r.returncode:
        raise AssertionError(f"installing the sdist with the compiler disabled failed:\n{r.stdout[-3000:]}{r.stderr}")
    warnings = [line.strip() for line in (r.stdout + r.stderr).splitlines() if "installing the pure-Python build" in line]
    if not warnings:
        raise AssertionError("the sdist installed without a compiler, but the build printed no fallback warning")
    use = _use(py)
    if use["compiled"] is not False or "C compiler failed" not in str(use["version"]):
        raise AssertionError(f"after the fallback: compiled={use['compiled']}, version line {use['version']!r}")
    return f"sdist with CC=/bin/false: {warnings[0]}; {use['version']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="the folder make wheels filled")
    parser.add_argument("--python", action="append", required=True, metavar="X.Y=PATH",
                        help="an interpreter to check the compiled wheel with (repeat)")
    args = parser.parse_args(argv)
    dist = args.dist.resolve()
    pythons = [tuple(p.split("=", 1)) for p in args.python]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="spruce-wheels-") as d:
        tmp = Path(d)
        checks = [(f"compiled wheel, Python {v}", lambda v=v, p=p: check_compiled(dist, v, p, tmp)) for v, p in pythons]
        checks += [("pure wheel", lambda: check_pure(dist, pythons[0][1], tmp)),
                   ("sdist fallback", lambda: check_sdist(dist, pythons[0][1], tmp))]
        for name, check in checks:
            try:
                print(f"ok   {check()}", flush=True)
            except AssertionError as e:
                failures += 1
                print(f"FAIL {name}: {e}", flush=True)
    print(f"{len(checks) - failures} of {len(checks)} wheel checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
