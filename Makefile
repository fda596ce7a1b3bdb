# `make test` and `make demo` each create the venv they need; nothing installed by hand is assumed.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_QUESTION ?= In which year was the architect of the Velmora Bridge born?
# llama.cpp compiles from source once (about 5 minutes on 2 cores, more on a busy machine); its
# wheel is kept after (LLAMA_WHEELS).
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: test check typecheck demo install lint bench clean chromium test-pins register

# The local model's llama.cpp, built for any x86-64 CPU with AVX2 rather than for this one
# (-march=native): the native build of 0.3.36 dies with a general protection fault in
# libggml-cpu at its first generation on the AMX Xeons seen here. Built once into a folder named
# by version and flags, and installed from there: pip's own wheel cache is keyed by the source
# only, so it would hand back a native build made before.
LLAMA_VERSION := 0.3.36
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEELS ?= $(HOME)/.cache/noterag/llama-$(LLAMA_VERSION)-avx2
else
LLAMA_CMAKE :=
LLAMA_WHEELS ?= $(HOME)/.cache/noterag/llama-$(LLAMA_VERSION)-native
endif

# torch first, the CPU build (a local file here): else the dense extra pulls CUDA packages.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip wheel --quiet --no-deps --no-cache-dir \
	    'llama-cpp-python==$(LLAMA_VERSION)' -w $(LLAMA_WHEELS)
	$(PY) -m pip install --quiet --find-links $(LLAMA_WHEELS) 'llama-cpp-python[server]==$(LLAMA_VERSION)'
	$(PY) -m pip install --quiet -e '.[dev,local,es,dense,align,ray,postgres,langchain,eval]'
	touch $@

install: $(VENV)/.installed

# The browser tests (trace viewer, chat example) drive Debian's Chromium; the JS tests install
# their npm packages themselves. Without root or apt, those tests skip and say why.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null || command -v apt-get >/dev/null || exit 0; \
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; } || \
	  echo "warning: could not install chromium; the browser tests will skip"

test: $(VENV)/.installed chromium
	$(PY) -m pytest

demo: $(VENV)/.installed
	$(VENV)/bin/noterag index noterag/data/sample_corpus.jsonl --out demo-index --force
	$(VENV)/bin/noterag ask "$(DEMO_QUESTION)" --method deepnote --index demo-index --model local

# Benchmarks, each printing its table (figures also in bench/results/*.json); about 16 minutes.
bench: $(VENV)/.installed
	$(PY) bench/orchestration.py
	$(PY) bench/throughput.py
	$(PY) bench/client_cpu.py
	$(PY) bench/retrieval.py
	$(PY) bench/retrieval_quick.py
	$(PY) bench/dense_build.py --limit 256

# The one registration step after adding or changing a method (docs/methods.md, "Adding a
# method"): rewrites what is derived from the registry (langgraph.json's graphs, docs/cli.md,
# docs/methods.md's methods table), then measures the cost of every method/profile that
# noterag/data/method_costs.json lacks or measured with other prompts, and drops the methods no
# longer registered (seconds per method, against the simulated endpoint).
register: $(VENV)/.installed
	$(PY) -m noterag.cli.docs --write --root .
	$(PY) bench/method_costs.py --missing

# The package as it installs: noterag/ with graphs/, nodes/, prompts/, retrievers/, tables/ as
# its subpackages, as a tree of links in .typecheck/ (error paths read .typecheck/noterag/...).
# mypy and lint-imports analyse it there, the four folders included.
define installed_tree
	@rm -rf .typecheck && mkdir -p .typecheck/noterag
	@for f in noterag/*; do ln -s ../../$$f .typecheck/noterag/; done
	@for d in graphs nodes prompts retrievers tables; do ln -s ../../$$d .typecheck/noterag/$$d; done
endef

# lint-imports: the import layers and no circles (pyproject.toml's tool.importlinter; its
# acyclic_modules contract type is tests/import_contracts.py), run in .typecheck/ so that
# `noterag` is that tree.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check noterag graphs nodes prompts retrievers tests bench
	$(VENV)/bin/ruff format --check noterag graphs nodes prompts retrievers tests bench
	$(installed_tree)
	cd .typecheck && PYTHONPATH=../tests ../$(VENV)/bin/lint-imports --no-cache ../pyproject.toml

# mypy over the package as it installs (the tree of links above).
typecheck: $(VENV)/.installed
	$(installed_tree)
	cd .typecheck && ../$(VENV)/bin/mypy --config-file ../pyproject.toml -p noterag

# The fast tier: lint, type check and the unit tests (no langgraph dev server, browser, JS or
# local model); about 2 minutes here.
check: lint typecheck
	$(PY) -m pytest -q -m "not e2e and not server and not browser" -p no:cacheprovider

# The fast tier again in a second venv holding the lowest versions pyproject.toml allows of the
# LangGraph / LangChain packages noterag builds on (tests/pins-lowest.txt); the main venv holds
# the newest. Not part of `make test`: the second venv's install alone takes minutes.
PINS_VENV ?= .venv-pins
$(PINS_VENV)/.installed: pyproject.toml tests/pins-lowest.txt
	python3 -m venv $(PINS_VENV)
	$(PINS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PINS_VENV)/bin/python -m pip install --quiet -c tests/pins-lowest.txt -e '.[dev]'
	touch $@

test-pins: $(PINS_VENV)/.installed
	$(PINS_VENV)/bin/python -m pip freeze | grep -iE '^(langgraph|langchain-core)=='
	$(PINS_VENV)/bin/python -m pytest -q -m "not e2e and not server and not browser" -p no:cacheprovider

clean:
	rm -rf $(VENV) $(PINS_VENV) .typecheck demo-index .langgraph_api tests/js/node_modules examples/chat/node_modules examples/chat/dist
