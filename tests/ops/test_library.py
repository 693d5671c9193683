"""The op library loads; without it, or built for a CPU with instructions this one lacks, the package
warns once and falls back to the pure-TF references."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

import ngra_tf
from ngra_tf.ops import cpu, generated
from ngra_testlib import subprocess_env

WORKER = pathlib.Path(__file__).with_name("fallback_worker.py")


def test_library_loads_with_every_op():
    lib = ngra_tf.ops.library()
    assert lib is not None, "the op library did not load (see the RuntimeWarning)"
    assert ngra_tf.ops.library_path() is not None
    for op in ("gather", "scatter", "gather_grad_arg", "fused_gather", "fused_gather_grad", "copy_h2d",
               "copy_d2h", "copy_d2d", "copy_stats", "uniform_at"):
        assert callable(getattr(lib, f"ngra_{op}")), op


def test_library_is_loaded_once():
    assert ngra_tf.ops.library() is ngra_tf.ops.library()


def test_missing_library_warns_once_and_falls_back():
    result = subprocess.run([sys.executable, str(WORKER)], env=subprocess_env(NGRA_TF_OPS_LIBRARY="/nonexistent.so"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    counts = dict(item.split("=") for item in result.stdout.split()[-2:])
    assert counts["warnings"] == "1"
    assert int(counts["checked"]) == 3 * (9 * 4 + 4 + 3 * 2 + 1 + 1) + 3


# The segment walks prefetch the rows they gather at random. GCC once deleted every such prefetch in most
# instantiations (a function that only prefetches looks pure to it, so calls to it were dead code), and the
# kernels ran up to 2.4x slower with nothing to show for it but the time.
WALKS = {
    "forward": "template void FusedGather<SrcMulEdge, Reduce::kSum, WeightKind::kScalar, float, int>("
               "const Segments<int>&, const Operands<float>&, int64_t, int64_t, int64_t, float*, int*, const float*);",
    "d/dx_src": "template void FusedGatherGradSrc<Gate<Sigmoid>, false, WeightKind::kNone, float, int>("
                "const Segments<int>&, const Operands<float>&, const EdgeGrad<false, float, int>&, int64_t, int64_t,"
                " float*);",
    "d/dx_dst": "template void FusedGatherGradDst<Gate<Sigmoid>, false, WeightKind::kNone, float, int>("
                "const Segments<int>&, const Operands<float>&, int64_t, const EdgeGrad<false, float, int>&, int64_t,"
                " int64_t, float*);",
}


@pytest.mark.parametrize("walk", sorted(WALKS))
def test_the_segment_walks_keep_their_prefetches(walk, tmp_path):
    tools = generated.toolchain()
    if isinstance(tools, str):
        pytest.skip(tools)
    compiler, flags, root, _ = tools
    source = tmp_path / "walk.cc"
    source.write_text(f'#include "ops/kernels/propagate.h"\nnamespace ngra {{\n{WALKS[walk]}\n}}\n')
    result = subprocess.run([compiler, *flags, "-I", root, "-S", "-o", "-", str(source)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "prefetch" in result.stdout, f"the {walk} walk compiles without a single prefetch"


@pytest.mark.parametrize("built_for", ["this CPU", "a CPU with more"])
def test_a_library_built_for_a_cpu_with_more_instructions_is_refused_in_one_warning(tmp_path, built_for):
    """-march=native code on a CPU without its instructions would stop the process at the first one (SIGILL):
    the loader reads the instruction sets recorded beside the library and falls back to the references."""
    built = pathlib.Path(ngra_tf.ops.library_path())
    record = json.loads(built.with_suffix(".json").read_text())
    if "-march=native" not in record["flags"]:
        pytest.skip("a portable build records no CPU")
    shutil.copy(built, tmp_path / "ops.so")
    if built_for == "a CPU with more":
        record["instruction_sets"] = sorted(record["instruction_sets"] + ["avx1024_imaginary"])
    (tmp_path / "ops.json").write_text(json.dumps(record))
    script = ("import warnings; warnings.simplefilter('always'); import ngra_tf; "
              "print('LOADED', ngra_tf.ops.library() is not None)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env=subprocess_env(NGRA_TF_OPS_LIBRARY=str(tmp_path / "ops.so")))
    assert result.returncode == 0, result.stderr[-3000:]
    refused = built_for == "a CPU with more"
    assert f"LOADED {not refused}" in result.stdout, result.stdout + result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "instructions this one lacks" in line]
    assert len(warned) == int(refused), result.stderr[-3000:]
    if refused:
        assert "(avx1024_imaginary)" in warned[0] and "NGRA_TF_PORTABLE=1" in warned[0], warned[0]


def test_only_instruction_sets_count_as_what_a_cpu_can_run():
    """Flags that describe the machine (a hypervisor, a constant TSC) differ between hosts that run the same
    code: they are not instruction sets."""
    sets = cpu.instruction_sets()
    assert sets, "Linux names this CPU's instruction sets"
    assert not sets & {"hypervisor", "constant_tsc", "fpu", "xsaves", "xsaveerptr"}
