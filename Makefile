# The two commands of the README: `make example` and `make test`. Both set up
# .venv from requirements.txt when it is missing or stale, with ngra-tf
# installed into it editable (so `import ngra_tf` works from anywhere with
# .venv/bin/python), and rebuild the op library only when its sources change.
PYTHON ?= python3
VENV := .venv
PY := $(abspath $(VENV))/bin/python
STAMP := $(VENV)/.installed
PLOT_STAMP := $(VENV)/.plot
OPS_LIB := ngra_tf/ops/_ngra_ops.so
OPS_SRCS := $(wildcard ops/cc/*.cc ops/cc/*.h ops/kernels/*.h ops/net/*.c)
export TF_CPP_MIN_LOG_LEVEL ?= 2
# Test processes (pytest-xdist; each test file runs whole in one of them): one per core of the CI machine.
TEST_WORKERS ?= 2

.PHONY: example test test-slow bench bazel test-bazel ops clean

# The main job: check propagation on Cora against scipy, then train a GCN on it.
example: $(OPS_LIB)
	$(PY) examples/propagate.py
	$(PY) examples/train.py --model=gcn --dataset=cora --verbose=0

test: $(OPS_LIB)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests

# The rest: the full matrices behind make test's representatives, fuzzers, the
# documentation's long blocks and a fresh-clone install (tests marked slow; tests/conftest.py).
test-slow: $(OPS_LIB) $(PLOT_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m slow tests

bench: $(OPS_LIB) $(PLOT_STAMP)
	$(PY) tools/bench_kernels.py

ops: $(OPS_LIB)

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -r requirements.txt
	touch $@

# matplotlib, for the benchmarks' plots: not in requirements.txt, which says why.
$(PLOT_STAMP): $(STAMP)
	$(PY) -m pip install -q "matplotlib>=3.5"
	touch $@

# An editable install builds the op library in place (ngra_tf/ops/).
$(OPS_LIB): $(STAMP) $(OPS_SRCS) setup.py
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# The same sources built by Bazel (offline); the op tests then run against
# that library. The loader would fall back to the references if the library
# did not load, so load it explicitly first: a broken build must fail here.
BAZEL_OPS_LIB := $(CURDIR)/build/bazel/_ngra_ops.so

bazel: $(STAMP)
	PYTHON=$(PY) bash tools/bazel_build.sh

test-bazel: bazel
	$(PY) -c "import sys, tensorflow as tf; tf.load_op_library(sys.argv[1])" $(BAZEL_OPS_LIB)
	NGRA_TF_OPS_LIBRARY=$(BAZEL_OPS_LIB) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests/ops

clean:
	rm -rf build $(OPS_LIB) bazel-* .pytest_cache

# ---- CUDA compile check (needs nvcc, no GPU) ---------------------------------
# Compiles every CUDA source with nvcc for CUDA_ARCHS: the TF-free kernels
# (ops/cuda/*.cu.cc), the harness, which then runs its emulated half, and the
# benchmark library. Then builds the op library with its GPU kernels into
# build/cuda/lib (beside, not over, the CPU library) and loads it into
# TensorFlow, so that a missing symbol fails here too. The default is PTX
# alone (compute_90): nothing runs on a GPU here, and ptxas would double
# nvcc's time; CUDA_ARCHS=90 adds sm_90's SASS. nvcc objects are cached in
# build/cuda and shared with tests/ops/test_cuda_harness.py (the same
# architectures where no GPU is visible); the ops/cc objects are compiled again.
CUDA_ARCHS ?= compute_90
CUDA_LIB := build/cuda/lib/ngra_tf/ops/_ngra_ops.so

.PHONY: cuda-check

cuda-check: $(STAMP)
	NGRA_TF_CUDA_ARCHS="$(CUDA_ARCHS)" $(PY) tools/build_cuda.py --harness --bench-lib
	build/cuda/cuda_harness --mode=emulated
	NGRA_TF_CUDA=1 NGRA_TF_CUDA_ARCHS="$(CUDA_ARCHS)" $(PY) setup.py -q build_ext --build-lib build/cuda/lib
	$(PY) -c "import sys, tensorflow as tf; tf.load_op_library(sys.argv[1])" $(CUDA_LIB)
