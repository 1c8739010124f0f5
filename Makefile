# Two entry points: `make demo` (the main job on embedded models) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

# llama.cpp (the test extra's generative model; the default install has none) is compiled for a portable x86-64
# baseline: the native build (AVX-512/AMX) segfaulted on this machine's virtual CPU. The wheel is kept in a
# folder named after those flags, so the next install (a fresh clone too) reuses it instead of compiling again
# for minutes, and a wheel built with other flags (pip's own cache) is never picked up.
LLAMA_CPP := llama-cpp-python==0.3.36
LLAMA_FLAGS := -DGGML_NATIVE=OFF
WHEELS ?= $(HOME)/.cache/apdmem/wheels/llama-cpp-GGML_NATIVE-OFF

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	ls $(WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_FLAGS)" $(PY) -m pip wheel -q --no-cache-dir --no-deps -w $(WHEELS) '$(LLAMA_CPP)'
	$(PY) -m pip install -q --find-links $(WHEELS) -e '.[test]'
	touch $@

.PHONY: install demo test bench
install: $(VENV)/.installed

demo: install
	LANGSMITH_TRACING=$${LANGSMITH_TRACING:-false} $(VENV)/bin/apdmem demo

# Two test processes: most tests wait on a child process, a server or pip for part of their time, which the other
# process fills. Tests are handed out one by one, but a file marked with an xdist_group (its module fixtures start
# servers or install packages) goes whole to one process.
test: install
	LANGSMITH_TRACING=false HF_HUB_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup

bench: install
	LANGSMITH_TRACING=false $(VENV)/bin/apdmem bench retrieval ../shared/data/longmemeval/longmemeval_s_dev.json.gz --l0-mode raw
