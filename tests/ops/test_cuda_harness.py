"""The CUDA kernels' standalone harness (ops/tests/cuda_harness.cu), without TensorFlow.

Where nvcc exists, every CUDA kernel source (ops/cuda/*.cu.cc) is compiled
with it and linked into the harness, so that a compile error in any of them
fails here (CI has nvcc but no GPU); the harness itself is host C++ (nvcc -x
c++). Without nvcc its emulated half is built with g++. The emulated mode runs
the GPU algorithm (schedule, chunk splitting, combine passes, argument checks)
on the host against the CPU kernels and always runs; the GPU mode needs a GPU
and is skipped without one. The emulated mode includes the edge code checks
(random programs, every reduce and gradient: ops/tests/harness_edge_code.h).
"""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import build_cuda  # noqa: E402  (tools/ is not a package)

# One architecture is enough to catch compile errors: PTX alone without a GPU; NGRA_TF_CUDA_ARCHS overrides.
ARCHS = build_cuda.check_archs()
OUT = ROOT / "build" / "cuda"


@pytest.fixture(scope="module")
def harness():
    """(path, built with nvcc)."""
    if build_cuda.find_nvcc() is not None:
        return build_cuda.build_harness(ARCHS, str(OUT)), True
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("neither nvcc nor a C++ compiler is installed")
    return build_cuda.build_harness_without_nvcc(str(OUT), compiler), False


def run(binary, *args):
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=1800)
    output = result.stdout + result.stderr
    summary = [line for line in output.splitlines() if line.endswith("failed")]
    return result.returncode, output, summary[-1] if summary else ""


def test_emulated(harness):
    binary, _ = harness
    code, output, summary = run(binary, "--mode=emulated")
    assert code == 0 and summary.endswith(" 0 failed"), output[-6000:]


# Slow like every test of the harness fixture (tests/conftest.py SLOW): it compiles every CUDA source.
@pytest.mark.slow
def test_emulated_edge_code_checks_run(harness):
    """The random edge programs (ops/tests/harness_edge_code.h) alone: they must run, not only pass."""
    binary, _ = harness
    code, output, summary = run(binary, "--mode=emulated", "--filter=edge_code")
    passed = re.search(r"(\d+) passed", summary)
    assert code == 0 and summary.endswith(" 0 failed") and passed and int(passed.group(1)) >= 600, output[-6000:]


def test_gpu(harness):
    binary, with_nvcc = harness
    if not with_nvcc:
        pytest.skip("nvcc not found: the harness was built without its GPU half")
    if not build_cuda.gpu_visible():
        pytest.skip("no GPU (nvidia-smi -L lists none): the CUDA kernels were compiled but not run")
    code, output, summary = run(binary, "--mode=gpu")
    assert code == 0 and summary.endswith(" 0 failed"), output[-6000:]


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("--large", "--quick", "--filter=d=1 ")], ids=["default", "memcheck-set"])
def test_emulated_under_sanitizers(args):
    """The emulated half built with AddressSanitizer and UBSan (tools/build_cuda.py SANITIZER_FLAGS): every
    kernel body's reads and writes stay inside its buffers (the arena poisons the guards between them) and no
    undefined behaviour, on every check of the default run and on the set a GPU's memcheck step runs
    (tools/gpu_check.sh: the GPU half's graphs, d = 1). The CPU's stand-in for compute-sanitizer."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    binary = build_cuda.build_harness_without_nvcc(str(OUT), compiler, sanitize=True)
    code, output, summary = run(binary, "--mode=emulated", *args)
    assert code == 0 and summary.endswith(" 0 failed") and "Sanitizer" not in output, output[-6000:]


def test_bad_usage_is_refused(harness):
    binary, _ = harness
    code, _, _ = run(binary, "--mode=nonsense")
    assert code == 2


@pytest.mark.slow
def test_generated_check_builds_with_nvcc_and_runs_where_there_is_a_gpu(tmp_path):
    """ops/tests/generated_code_check.cc as CUDA (tools/build_cuda.py --generated-check, here with the gate
    alone: the full case file takes nvcc ~7 minutes): each case's generated kernels compile for the device; on
    a GPU they equal the CPU walks, elsewhere the binary says there is no device."""
    if build_cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    import generated_cases  # noqa: PLC0415  (tools/, on sys.path above)

    cases = tmp_path / "cases.inc"
    cases.write_text(generated_cases.cases([], gates=(4,)).replace("using Cases = CaseList<Gate4, Attention>",
                                                                    "using Cases = CaseList<Gate4>"))
    binary = build_cuda.build_generated_check(ARCHS, str(tmp_path), str(cases))
    code, output, summary = run(binary)
    if build_cuda.gpu_visible():
        assert code == 0 and summary.endswith(" 0 failed"), output[-6000:]
    else:
        assert code == 1 and "gpu: no CUDA device" in output, output[-6000:]
