# `make test` and `make demo` each create the venv they need; nothing installed by hand is assumed.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_QUESTION ?= In which year was the architect of the Velmora Bridge born?
# llama.cpp compiles from source once (about 5 minutes on 2 cores); pip caches the wheel after.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: test demo install lint bench clean

# torch first, the CPU build (a local file here): else the dense extra pulls CUDA packages.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,local,es,dense]'
	touch $@

install: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest

demo: $(VENV)/.installed
	$(VENV)/bin/noterag index noterag/data/sample_corpus.jsonl --out demo-index --force
	$(VENV)/bin/noterag ask "$(DEMO_QUESTION)" --method deepnote --index demo-index --model local

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check noterag graphs nodes prompts retrievers tests

clean:
	rm -rf $(VENV) demo-index .langgraph_api
