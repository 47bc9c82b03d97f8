# fa4mlir: `make demo` and `make test` set everything up on first use (a .venv in the repo).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BUNDLE ?= bundle
PYTEST_WORKERS ?= 2

.PHONY: demo test ruff pytest lit gpu-bundle gpu-test bench bench-attention bench-gemm sanitize plot clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)            ## compile the default kernels (sm_90a, sm_100a), print resources, run on a GPU if any
	$(PY) -m fa4mlir

test: ruff pytest lit     ## ruff, deviceless tests + lit (GPU tests skip without a GPU)

ruff: $(STAMP)
	$(VENV)/bin/ruff check .

# One BLAS / OpenMP thread per process: the workers (and the sweep's process pool) already keep every
# core busy; numpy's and torch's own threads only oversubscribe them and spin (an sm_100a interpreter
# run took 10-40% less CPU with one; same outputs).
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

pytest: $(STAMP)          ## two workers (pytest-xdist), one test file each at a time: module fixtures compile once
	$(ONE_THREAD) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=25 tests

lit: $(STAMP)
	$(VENV)/bin/lit -sv lit_tests

gpu-bundle: $(STAMP)      ## here: compile what the GPU tests and the benchmark need into $(BUNDLE)/
	$(PY) -m fa4mlir bundle --out $(BUNDLE) --set gpu-tests --set bench --set decode-fp8-variants --set decode-bf16-variants \
		--set prefill-softcap-variants --set prefill-poly0 --jobs $(PYTEST_WORKERS)
	PYTHONPATH=$(CURDIR) $(PY) -m tests.interpret_sm90 --out $(BUNDLE)/interpret   # the interpreter's outputs the H200 is compared with

# On the GPU machine (no MLIR, no venv: its python3 has torch, pytest, cuda-bindings):
gpu-test:                 ## there: run the GPU tests from $(BUNDLE)/ and the front end's tests on CPU torch
	FA4MLIR_BUNDLE=$(CURDIR)/$(BUNDLE) PYTHONPATH=$(CURDIR) python3 -m pytest -q -m gpu tests/gpu
	PYTHONPATH=$(CURDIR) python3 -m pytest -q tests/test_attention_torch_cpu.py

bench: bench-attention bench-gemm  ## there: both benchmarks (or `bash bench/device_run.sh`: tests + both)

.PHONY: bench-decode
bench-decode:             ## there: flash_attn_with_kvcache on the serving anchors' decode workloads vs FA4 CuTe, cuDNN, FA2
	PYTHONPATH=$(CURDIR) python3 -m fa4mlir bench decode --bundle $(BUNDLE) --out decode-bench.json $(BENCH_ARGS)

.PHONY: bench-prefill
bench-prefill:            ## there: serving prefill (varlen, chunked, window, softcap, sink, ALiBi) vs FA4 CuTe, Flex, cuDNN, FA2
	PYTHONPATH=$(CURDIR) python3 -m fa4mlir bench prefill --bundle $(BUNDLE) --out prefill-bench.json $(BENCH_ARGS)

.PHONY: bench-mla
bench-mla:                ## there: MLA prefill (qk 192, v 128, causal) vs FA4 CuTe and cuDNN
	PYTHONPATH=$(CURDIR) python3 -m fa4mlir bench mla --bundle $(BUNDLE) --out mla-bench.json $(BENCH_ARGS)

bench-attention:          ## there: attention vs cuDNN, FA2, FA4 on the FA3 grid (BENCH_ARGS=--quick for 2 points)
	PYTHONPATH=$(CURDIR) python3 -m fa4mlir bench attention --bundle $(BUNDLE) --out attention-bench.json --png attention-bench.png $(BENCH_ARGS)

bench-gemm:               ## there: time the bundle's GEMMs against torch.matmul
	PYTHONPATH=$(CURDIR) python3 -m fa4mlir bench gemm --bundle $(BUNDLE) --out gemm-bench.json

sanitize:                 ## there: compute-sanitizer (memcheck, racecheck, synccheck) over every kernel family (SANITIZE_ARGS=--quick)
	PYTHONPATH=$(CURDIR) python3 bench/sanitize.py --bundle $(BUNDLE) --out sanitize.json $(SANITIZE_ARGS)

plot: $(STAMP)            ## here: draw attention-bench.png from attention-bench.json (installs matplotlib)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m fa4mlir.bench.plot_attention attention-bench.json attention-bench.png

clean:
	rm -rf $(VENV) $(BUNDLE) .pytest_cache
