"""Generated GPU edge code, checked without a GPU.

Under emulation (a C++ compiler, no nvcc): random programs, written by ngra_tf.ops.generated.cuda_program as
compile-time instruction lists, run through the GPU bodies as their own straight-line code (FixedCode,
ops/cuda/edge_code_programs.h) with every reduce, forward and gradient, against the CPU walks (the CUDA
harness's edge-code checks), and bit for bit against the interpreter over the same walks
(ops/tests/generated_code_check.cc), for float/int32 with hubs split into chunks and for double/int64.

With NVRTC (nvidia-cuda-nvrtc): the module a GPU kernel loads (generated.cuda_module) compiles, with the
kernels of exactly the passes the program needs; it is cached per program and architecture; without NVRTC, a
GPU, or after a failed compile, the interpreter runs and says why."""

import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from ngra_tf.ops import edge_code as ec
from ngra_tf.ops import generated

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import build_cuda  # noqa: E402  (tools/ is not a package)
from generated_cases import Builder, attention, cases, gate  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPILER = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler")


def build_and_run(directory, seeds, gates=(4,), sanitize=False):
    cases_file = directory / "cases.inc"
    cases_file.write_text(cases(seeds, gates))
    binary = build_cuda.build_generated_check_without_nvcc(str(directory), str(cases_file), COMPILER,
                                                           sanitize=sanitize)
    run = subprocess.run([binary], capture_output=True, text=True, timeout=1200)
    return run.returncode, run.stdout + run.stderr


def _assert_passed(rc, output, at_least):
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    passed, failed = int(summary.group(1)), int(summary.group(2))
    assert rc == 0 and failed == 0, output[-3000:]
    assert passed >= at_least, output[-3000:]


def test_generated_programs_equal_the_cpu_walks_under_emulation(tmp_path):
    rc, output = build_and_run(tmp_path, seeds=range(3))
    # 5 programs x 2 type pairs, each with 5 reduces: forward, from init (not mean), 1 to 3 gradients
    _assert_passed(rc, output, at_least=5 * 2 * 5 * 2)


@pytest.mark.slow
def test_generated_programs_full_set(tmp_path):
    """Under AddressSanitizer and UBSan (tools/build_cuda.py SANITIZER_FLAGS): the generated code's loads stay
    inside its operands and tables."""
    rc, output = build_and_run(tmp_path, seeds=range(3, 17), gates=(1, 16), sanitize=True)
    assert "Sanitizer" not in output, output[-3000:]
    _assert_passed(rc, output, at_least=16 * 2 * 5 * 2)


def test_a_generated_program_is_its_instruction_list():
    text = generated.cuda_program(gate(4), "Gate")
    assert "static constexpr int32_t kCode[] = {0, 0, 0, -1, 1, 1, 0, -1, 24, 0, 1, -1," in text
    assert "kInstructions = 6;" in text and "kValue = 5;" in text and "kScore = -1;" in text
    assert text.startswith("// (tanh((S0 + D1)) * S2)\nstruct Gate {")


# ---- NVRTC: the module the GPU kernel loads (no GPU needed to compile one) ----

needs_nvrtc = pytest.mark.skipif(isinstance(generated.nvrtc(), str), reason="no NVRTC (pip install nvidia-cuda-nvrtc)")


def _programs(count):
    yield "gate", gate(16), ("sum", "max")
    yield "attention", attention(8), ("softmax",)
    for seed in range(count):
        rng = np.random.default_rng(2000 + seed)
        attention_code = seed % 2 == 0
        yield f"random{seed}", Builder(rng, width=12).draw(attention=attention_code), (
            ("softmax", "sum") if attention_code else ("min",))


def _kernels_in(image):
    return {name for name in generated.CUDA_KERNELS if name.encode() in image}


def _compile_all(count, archs, types=(("float32", "int32"), ("float64", "int64"))):
    for name, code, reduces in _programs(count):
        for reduce in reduces:
            program = code if reduce == "softmax" else ec.EdgeCode(code.instructions, code.constants, code.tables,
                                                                  code.value)
            reads = {"src": program.reads("src"), "dst": program.reads("dst"), "edge": program.reads("edge")}
            grads = {f"ngra_edge_code_grad_{side}" for side, read in reads.items() if read}
            for dtype, index in types:
                runs = {"float32": {"2", "4"}, "float64": {"2"}}[dtype] if reduce != "softmax" else set()
                want = {"ngra_edge_code_forward"} | {f"ngra_edge_code_forward{run}" for run in runs} | grads
                for arch in archs:
                    image = generated.compile_cuda(generated.cuda_module(program, dtype, index, reduce), arch)
                    what = f"{name} {reduce} {dtype} {arch}"
                    assert (image[:4] == b"\x7fELF") == arch.startswith("sm_"), what
                    assert _kernels_in(image) == want, what


@needs_nvrtc
@pytest.mark.slow
def test_random_modules_compile_with_nvrtc():
    """Every pass's kernel, and only those of operands the program reads, as PTX and as CUBINs."""
    # 13 compiles, 2-14 s each: float32 as PTX and as a CUBIN, float64 as PTX (36 took 8 minutes of CI's machine)
    _compile_all(1, ("compute_75", "sm_90"), types=(("float32", "int32"),))
    _compile_all(0, ("compute_75",), types=(("float64", "int64"),))


@needs_nvrtc
def test_a_module_is_cached_per_program_and_arch(monkeypatch, tmp_path):
    """PTX here (a CUBIN takes NVRTC 3x longer; tests/tools/test_bench_cuda.py loads one for sm_90)."""
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    generated._cuda_kernels.cache_clear()
    try:
        ptx = generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80")
        assert ptx.startswith(str(tmp_path)) and ptx.endswith(".ptx")
        with open(ptx, "rb") as f:
            image = f.read()
        assert b".target sm_80" in image  # the gate reads sources and destinations: their walks, no edge walk
        assert _kernels_in(image) == {"ngra_edge_code_forward", "ngra_edge_code_forward2", "ngra_edge_code_forward4",
                                      "ngra_edge_code_grad_src", "ngra_edge_code_grad_dst"}
        # An edge row loaded and never used: the op may still be asked for its (zero) gradient.
        g = gate(8)
        unused_edge = ec.EdgeCode(g.instructions + (("load_edge", 3, 0, -1),), g.constants,
                                  np.concatenate([g.tables, np.zeros((1, 8), np.int32)]), g.value)
        other_reduce = generated.cuda_kernels_for(gate(8), "float32", "int32", "max", arch="compute_80")
        other_arch = generated.cuda_kernels_for(unused_edge, "float32", "int32", "sum", arch="compute_75")
        assert len({ptx, other_reduce, other_arch}) == 3 and other_arch.endswith(".ptx")
        with open(other_arch, "rb") as f:
            image = f.read()
        assert b".target sm_75" in image and "ngra_edge_code_grad_edge" in _kernels_in(image)
        generated._cuda_kernels.cache_clear()  # a new process: the file is found, not compiled again
        monkeypatch.setattr(generated, "compile_cuda", lambda *a: pytest.fail("compiled again"))
        assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80") == ptx
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".build-")]
    finally:
        generated._cuda_kernels.cache_clear()


@needs_nvrtc
@pytest.mark.parametrize("damage", ["cut short", pytest.param("overwritten", marks=pytest.mark.slow),
                                    pytest.param("another program's", marks=pytest.mark.slow)])
def test_a_damaged_module_in_the_cache_is_compiled_again_with_a_warning(monkeypatch, tmp_path, damage):
    """A cached GPU module that would not serve (cut short, overwritten, another program's) is compiled again,
    with one warning that names it, instead of failing to load and interpreting on every run."""
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    generated._cuda_kernels.cache_clear()
    try:
        path = pathlib.Path(generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80"))
        good = path.read_bytes()
        bad = {"cut short": lambda: good[:len(good) // 2], "overwritten": lambda: b"junk",
               "another program's": lambda: pathlib.Path(generated.cuda_kernels_for(
                   gate(8), "float32", "int32", "max", arch="compute_80")).read_bytes()}[damage]()
        path.write_bytes(bad)
        generated._cuda_kernels.cache_clear()
        with pytest.warns(RuntimeWarning, match="compiling it again") as caught:
            assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80") == str(path)
        messages = [str(w.message) for w in caught if "compiling it again" in str(w.message)]
        reason = "is cut short" if damage == "cut short" else "has no kernel"
        assert len(messages) == 1 and messages[0].startswith(f"ngra_tf: generated GPU code {path} {reason}"), messages
        generated._cuda_kernels.cache_clear()  # the new file serves: found, not compiled again, no warning
        monkeypatch.setattr(generated, "compile_cuda", lambda *a: pytest.fail("compiled again"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80") == str(path)
    finally:
        generated._cuda_kernels.cache_clear()


@needs_nvrtc
@pytest.mark.slow
def test_a_cubin_cut_anywhere_is_refused():
    """A CUBIN's section headers are at its end, so any cut loses them; one of another program says so too."""
    module = generated.cuda_module(gate(8), "float32", "int32", "sum")
    kernel = "ngra_edge_code_forward" + generated.kernel_suffix(generated.cuda_signature(gate(8), "float32",
                                                                                        "int32", "sum"))
    image = generated.compile_cuda(module, "sm_90")
    assert generated.module_problem(image, kernel) == ""
    for size in (len(image) - 1, len(image) - 100, len(image) // 2, 4096):
        assert "is cut short" in generated.module_problem(image[:size], kernel), size
    assert "has no kernel" in generated.module_problem(image, kernel[:-1] + "x")


def test_without_a_gpu_nothing_is_compiled_for_one():
    assert generated.gpu_arch() is None  # this machine; a GPU machine gets "sm_XY"
    assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum") == ""


@pytest.mark.parametrize("built_with_cuda, capabilities, want", [
    (True, [(9, 0), (9, 0)], "sm_90"),  # one architecture: its CUBIN
    (True, [(9, 0), (8, 0)], "compute_80"),  # several: PTX for the oldest, finished by the driver
    (True, [], None),  # no GPU
    (False, [(9, 0)], None),  # GPUs, but the op library has no GPU kernels: its ops run on the CPU
])
def test_the_architecture_compiled_for(monkeypatch, built_with_cuda, capabilities, want):
    import tensorflow as tf

    monkeypatch.setattr(generated, "_has_gpu_kernels", lambda: built_with_cuda)
    monkeypatch.setattr(generated, "gpus_visible", lambda: bool(capabilities))
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: list(range(len(capabilities))))
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda gpu: {"compute_capability": capabilities[gpu]})
    generated.gpu_arch.cache_clear()
    try:
        assert generated.gpu_arch() == want
    finally:
        generated.gpu_arch.cache_clear()


def test_the_build_records_whether_the_library_has_gpu_kernels():
    import json

    with open(pathlib.Path(generated.__file__).with_name("_ngra_ops.json")) as f:
        assert json.load(f)["cuda"] is False  # make ops: the CPU build (NGRA_TF_CUDA=1 records true)
    assert generated._has_gpu_kernels() is False


def test_without_nvrtc_the_gpu_interprets_and_says_why(monkeypatch):
    monkeypatch.setattr(generated, "_has_gpu_kernels", lambda: True)
    monkeypatch.setattr(generated, "nvrtc", lambda: "no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set "
                                                    "NGRA_TF_NVRTC to its path")
    generated._cuda_kernels.cache_clear()
    try:
        assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="sm_90") == ""
        assert generated.cuda_status() == ("interpreted: no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set "
                                           "NGRA_TF_NVRTC to its path")
    finally:
        generated._cuda_kernels.cache_clear()


@needs_nvrtc
def test_a_failed_nvrtc_compile_warns_and_interprets(monkeypatch, tmp_path):
    def broken(source, arch):
        raise RuntimeError("NVRTC failed on generated edge code: x.cu(1): error: broken")

    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(generated, "_has_gpu_kernels", lambda: True)
    monkeypatch.setattr(generated, "compile_cuda", broken)
    monkeypatch.setattr(generated, "_cuda_failure", None)
    generated._cuda_kernels.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="NVRTC failed.*interpreter runs on the GPU instead"):
            assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="sm_90") == ""
        assert generated.cuda_status() == "interpreted: NVRTC failed on generated edge code: x.cu(1): error: broken"
        assert list(tmp_path.iterdir()) == []  # nothing half-written
    finally:
        generated._cuda_kernels.cache_clear()


def test_the_cpu_kernel_ignores_gpu_kernels():
    """A graph traced on a GPU machine carries its kernels' path: on the CPU the op runs as without it."""
    import tensorflow as tf

    import ngra_tf
    from ngra_tf.ops._loader import library

    graph = ngra_tf.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 1], 3)
    code = gate(4)
    x2 = tf.constant(np.random.default_rng(0).normal(size=(3, 8)), tf.float32)
    xd = tf.constant(np.random.default_rng(1).normal(size=(3, 4)), tf.float32)
    adjacency = graph.adjacency

    def run(cuda_kernel):
        return library().ngra_edge_code(
            x2, xd, tf.zeros([0, 0]), tf.zeros([0], tf.int32), tf.constant(code.constants, tf.float32),
            tf.constant(code.tables), *adjacency.tensors(), tf.zeros([0]), ec.graph_plan(adjacency), reduce="sum",
            kernel="", cuda_kernel=cuda_kernel, **code.attrs())[0]

    got = run("/nowhere/edge_code.cubin")
    np.testing.assert_array_equal(got, run(""))
    np.testing.assert_allclose(got, ec.edge_code_gather(adjacency, code, x2, xd), rtol=1e-6, atol=1e-6)


def test_explain_says_how_edge_code_runs_on_gpus(monkeypatch):
    import tensorflow as tf

    import ngra_tf
    from ngra_tf import layers

    graph = ngra_tf.Graph.from_edges([0, 1, 2, 2, 3], [1, 2, 0, 1, 2], 4)
    graph = graph.with_edge_data(layers.relational_edge_data(graph, np.array([0, 1, 2, 0, 1])))
    layer = layers.RGCN(3, num_relations=3)
    layer(tf.ones([4, 5]), graph=graph)
    assert "kernels (CPU):" in layer.explain() and "kernels (GPU):" not in layer.explain()  # no GPU here
    monkeypatch.setattr(generated, "gpus_visible", lambda: True)
    assert ("kernels (GPU): not at all: the op library was built without its GPU kernels (NGRA_TF_CUDA=1 builds "
            "them)") in layer.explain()
    monkeypatch.setattr(generated, "_has_gpu_kernels", lambda: True)
    monkeypatch.setattr(generated, "nvrtc", lambda: "no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set "
                                                    "NGRA_TF_NVRTC to its path")
    assert ("kernels (GPU): interpreted: no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set NGRA_TF_NVRTC "
            "to its path") in layer.explain()


def _host_program(path, lines):
    """The lines of a C++ program (the repository on its include path) compiled for the host at path and run:
    what it printed, line by line."""
    source = path.with_suffix(".cc")
    source.write_text("\n".join(lines))
    build = subprocess.run([COMPILER, "-std=c++17", "-I", str(ROOT), str(source), "-o", str(path)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_gpu_kernel_looks_up_the_kernels_python_names(tmp_path):
    """The op's GPU kernel finds a module's kernels by its program's signature (EdgeCodeAttrs::
    GeneratedSignature and GeneratedKernelSuffix, ops/cuda): the same string and hash as generated.py's, so a
    module of another program, dtype or reduce does not load."""
    programs = [(gate(8), "float", "int32_t", "float32", "int32", "sum"),
                (attention(8), "double", "int64_t", "float64", "int64", "softmax")]
    body = ["#include <cstdio>", '#include "ops/cuda/validate.h"', "int main() {", "  ngra::gpu::EdgeCodeAttrs a;",
            "  std::string s;"]
    for code, t, index, *_, reduce in programs:
        ints = ", ".join(str(v) for v in code.attrs()["code"])
        body += [f"  a.code = {{{ints}}};", f"  a.value = {code.value};", f"  a.score = {code.score};",
                 f'  a.reduce = "{reduce}";', f"  s = a.GeneratedSignature<{t}, {index}>();",
                 '  std::printf("%s\\n%s\\n", s.c_str(), ngra::gpu::GeneratedKernelSuffix(s).c_str());']
    body.append('  for (const char* name : ngra::gpu::kGeneratedKernelNames) std::printf("%s\\n", name);')
    printed = _host_program(tmp_path / "signature", body + ["}", ""])
    want = []
    for code, *_, dtype, index, reduce in programs:
        signed = generated.cuda_signature(code, dtype, index, reduce)
        want += [signed, generated.kernel_suffix(signed)]
        assert f"ngra_edge_code_forward{want[-1]}(" in generated.cuda_module(code, dtype, index, reduce)
    assert printed == want + list(generated.CUDA_KERNELS)  # and the passes' names, in the order of the entries


def test_a_wrong_nvrtc_path_is_named_not_replaced(monkeypatch, tmp_path):
    monkeypatch.setenv(generated.NVRTC_ENV, str(tmp_path / "libnvrtc.so"))
    generated.nvrtc.cache_clear()
    try:
        found = generated.nvrtc()
        assert isinstance(found, str) and found.startswith(f"NGRA_TF_NVRTC={tmp_path / 'libnvrtc.so'} is not an NVRTC")
    finally:
        monkeypatch.delenv(generated.NVRTC_ENV)
        generated.nvrtc.cache_clear()


def test_the_generated_forward_reads_vectors_where_its_tables_allow(tmp_path):
    """CodeRunsOf (ops/cuda/edge_code_launch.h) decides whether a generated forward reads runs of 4 (16
    bytes), 2 or 1 features per load: G-GCN's gate, whose tables hold adjacent columns, reads 16-byte runs
    from each load's first column; rows 8 bytes apart allow 8; a broadcast table (attention's per-head
    scores) or a first column off the run keeps one feature. The emulated checks above would pass with
    scalar runs too, so this is what keeps the vectors."""
    code = gate(8)
    ints = ", ".join(str(v) for v in code.attrs()["code"])
    broadcast = np.array(code.tables, np.int32)
    broadcast[0] = 0  # every feature reads column 0
    shifted = np.array(code.tables, np.int32)
    shifted[2] += 1  # c's columns start at 9, off a run boundary

    def tables(t):
        return ", ".join(str(v) for v in np.asarray(t, np.int32).ravel())

    cases = [("gate", tables(code.tables), 16), ("gate, rows 8 bytes apart", tables(code.tables), 18),
             ("broadcast", tables(broadcast), 16), ("shifted", tables(shifted), 18)]
    body = ["#include <cstdio>", '#include "ops/cuda/backend_host.h"', '#include "ops/cuda/edge_code_launch.h"',
            "alignas(16) static float rows[64];", "int main() {",
            f"  const int32_t code[] = {{{ints}}};"]
    for i, (name, t, src_width) in enumerate(cases):
        body += [f"  const int32_t tables{i}[] = {{{t}}};", "  {", "    ngra::EdgeCode<float> p;",
                 f"    p.code = code; p.num_instructions = {len(code.instructions)}; p.tables = tables{i};",
                 f"    p.width = 8; p.x_src = rows; p.src_width = {src_width}; p.x_dst = rows; p.dst_width = 8;",
                 "    const ngra::gpu::CodeRuns runs = ngra::gpu::CodeRunsOf(p);",
                 f'    std::printf("{name}: %lld", static_cast<long long>(runs.bytes));',
                 f"    for (int k = 0; k < {len(code.instructions)}; ++k) {{",
                 '      if (ngra::IsLoad(code[k * ngra::kInstructionInts])) std::printf(" %d", runs.column[k]);',
                 "    }", '    std::printf("\\n");', "  }"]
    printed = _host_program(tmp_path / "runs", body + ["}", ""])
    assert printed[0] == "gate: 16 0 0 8"  # a and c from x_src's columns 0 and 8, b from x_dst's column 0
    assert printed[1].startswith("gate, rows 8 bytes apart: 8 ")
    assert printed[2].startswith("broadcast: 4")
    assert printed[3].startswith("shifted: 4")
