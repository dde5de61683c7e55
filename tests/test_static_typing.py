"""spruce.typing as three type checkers see it: mypy, basedpyright and pyrefly.

``tests/typing/pass/*.py`` must type-check with no error; in ``tests/typing/fail/*.py`` every
line marked ``# E: <why>`` must get an error and no other line may.  Each checker runs once per
directory (not per file), on the source tree ``src`` (each directory's configuration file says
how: ``mypy.ini``, ``pyrightconfig.json``, ``pyrefly.toml``), so the installed build does not
matter: these tests run in the uncompiled suite only, once per interpreter.

The checkers are in the ``test`` extra, at the versions the Makefile pins (their verdicts
change between versions); basedpyright brings its own Node.js and runs offline.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

HERE = pathlib.Path(__file__).resolve().parent / "typing"
SRC = HERE.parents[1] / "src"
MARK = re.compile(r"#\s*E:")
MYPY_LINE = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<line>\d+): error:")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SPRUCE_EXPECT_COMPILED") == "1",
        reason="static checks read the source tree, not the build: they run in the uncompiled suite only",
    ),
]

Errors = dict[tuple[str, int], list[str]]


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=HERE, env=env, capture_output=True, text=True, timeout=300)


def _executable(name: str) -> str | None:
    """The checker's command-line program: beside this interpreter, in its scripts directory,
    or on PATH."""
    path = os.pathsep.join([str(pathlib.Path(sys.executable).parent), sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    return shutil.which(name, path=path)


def _mypy(directory: str) -> Errors:
    env = {**os.environ, "MYPYPATH": str(SRC)}
    env.pop("PYTHONPATH", None)
    proc = _run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-site-packages", "--no-error-summary",
         "--cache-dir", os.devnull, directory],
        env,
    )  # fmt: skip
    assert proc.returncode in (0, 1), f"mypy failed to run:\n{proc.stdout}{proc.stderr}"
    errors: Errors = {}
    for line in proc.stdout.splitlines():
        m = MYPY_LINE.match(line)
        if m:
            errors.setdefault((pathlib.Path(m["file"]).as_posix(), int(m["line"])), []).append(line)
    return errors


def _basedpyright(directory: str) -> Errors:
    program = _executable("basedpyright")
    assert program is not None
    proc = _run([program, "-p", "pyrightconfig.json", "--pythonpath", sys.executable, "--outputjson", directory])
    assert proc.returncode in (0, 1), f"basedpyright failed to run:\n{proc.stdout}{proc.stderr}"
    errors: Errors = {}
    for d in json.loads(proc.stdout)["generalDiagnostics"]:
        if d["severity"] == "error":
            where = pathlib.Path(d["file"]).resolve().relative_to(HERE).as_posix()
            errors.setdefault((where, d["range"]["start"]["line"] + 1), []).append(d["message"])
    return errors


def _pyrefly(directory: str) -> Errors:
    program = _executable("pyrefly")
    assert program is not None
    proc = _run([program, "check", "-c", "pyrefly.toml", "--python-interpreter-path", sys.executable,
                 "--output-format", "json", directory])  # fmt: skip
    assert proc.returncode in (0, 1), f"pyrefly failed to run:\n{proc.stdout}{proc.stderr}"
    errors: Errors = {}
    for d in json.loads(proc.stdout)["errors"]:
        if d["severity"] == "error":
            where = (HERE / d["path"]).resolve().relative_to(HERE).as_posix()
            errors.setdefault((where, d["line"]), []).append(d["concise_description"])
    return errors


CHECKERS = {"mypy": _mypy, "basedpyright": _basedpyright, "pyrefly": _pyrefly}
INSTALLED = {
    "mypy": importlib.util.find_spec("mypy") is not None,
    "basedpyright": _executable("basedpyright") is not None,
    "pyrefly": _executable("pyrefly") is not None,
}


def _expected(directory: str) -> set[tuple[str, int]]:
    marked = set()
    for path in sorted((HERE / directory).glob("*.py")):
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            if MARK.search(text):
                marked.add((path.relative_to(HERE).as_posix(), number))
    return marked


@pytest.fixture(params=sorted(CHECKERS))
def checker(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if not INSTALLED[name]:
        pytest.skip(f"{name} is not installed (it is in the test extra: pip install -e '.[test]')")
    return name


def test_fail_files_are_marked() -> None:
    marked = _expected("fail")
    files = {path for path, _ in marked}
    assert files == {f"fail/{p.name}" for p in (HERE / "fail").glob("*.py")}, "every fail file marks its errors"
    assert not _expected("pass"), "a pass file marks an expected error"


def test_pass_files_type_check(checker: str) -> None:
    errors = CHECKERS[checker]("pass")
    assert not errors, f"{checker} rejects correct code:\n" + "\n".join(
        f"{path}:{line}: {' / '.join(msgs)}" for (path, line), msgs in sorted(errors.items())
    )


def test_fail_files_fail_where_marked(checker: str) -> None:
    errors = CHECKERS[checker]("fail")
    expected = _expected("fail")
    missed = sorted(expected - set(errors))
    extra = sorted(set(errors) - expected)
    assert not missed and not extra, (
        f"{checker}: no error on the marked lines {missed};\nerrors on unmarked lines:\n"
        + "\n".join(f"{path}:{line}: {' / '.join(errors[path, line])}" for path, line in extra)
    )
