"""Generated GPU edge code under emulation (no GPU, no nvcc): random programs, written by
ngra_tf.ops.generated.cuda_program as compile-time instruction lists, run through the GPU bodies as their
own straight-line code (FixedCode, ops/cuda/edge_code_programs.h) with every reduce, forward and gradient,
against the CPU walks: the CUDA harness's edge-code checks (ops/tests/generated_code_check.cc).

The same structs are what a GPU compiles per program; the emulated run proves the unrolled code computes
what the interpreter does, for float/int32 with hubs split into chunks and for double/int64."""

import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from ngra_tf.ops import edge_code as ec
from ngra_tf.ops import generated
from test_generated import NUM_TYPES, Builder

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "ops" / "tests" / "generated_code_check.cc"
COMPILER = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler")


def gate(width):
    """G-GCN's gate, tanh(a[src] + b[dst]) * c[src], over source rows [a | c] (bench_cuda's gate pass)."""
    f = np.arange(width, dtype=np.int32)
    return ec.EdgeCode((("load_src", 0, 0, -1), ("load_dst", 1, 0, -1), ("add", 0, 1, -1), ("tanh", 2, 0, -1),
                        ("load_src", 2, 0, -1), ("mul", 3, 4, -1)), (), np.stack([f, f, width + f]), 5)


def attention(width, heads=2):
    """GAT: leaky_relu(s[src, head] + t[dst, head], 0.2) as the score, the source row as the value."""
    f = np.arange(width, dtype=np.int32)
    head = (f * heads // width).astype(np.int32)
    return ec.EdgeCode((("load_src", 0, 0, -1), ("load_src", 1, 0, -1), ("load_dst", 2, 0, -1), ("add", 1, 2, -1),
                        ("leaky_relu", 3, 0, 0)), (0.2,), np.stack([f, width + head, head]), 0, 4)


def case(name, code, src_width, dst_width, edge_width, slot_types=NUM_TYPES):
    """One case struct of the file generated_code_check.cc includes."""
    plain = ec.EdgeCode(code.instructions, code.constants, code.tables, code.value, -1)
    if code.score < 0:  # under softmax, the message scores itself
        code = ec.EdgeCode(code.instructions, code.constants, code.tables, code.value, code.value)
    tables = ", ".join(str(v) for v in np.asarray(code.tables, np.int32).ravel())
    constants = ", ".join(repr(float(v)) for v in code.constants) or "0.0"
    body = [generated.cuda_program(plain, "Plain"), generated.cuda_program(code, "Softmax")]
    return "\n".join([
        f"struct {name} {{",
        *("  " + line for text in body for line in text.splitlines()),
        f'  static constexpr const char* kName = "{name}";',
        f"  static constexpr int64_t kWidth = {code.width}, kSrcWidth = {src_width}, kDstWidth = {dst_width}, "
        f"kEdgeWidth = {edge_width};",
        f"  static constexpr int kSlotTypes = {slot_types}, kNumTables = {len(code.tables)};",
        f"  static constexpr int32_t kTables[] = {{{tables}}};",
        f"  static constexpr double kConstants[] = {{{constants}}};",
        "};", ""])


def cases(seeds, gates):
    out, names = [], []
    for width in gates:
        out.append(case(f"Gate{width}", gate(width), 2 * width, width, 1))
        names.append(f"Gate{width}")
    out.append(case("Attention", attention(8), 10, 2, 1))
    names.append("Attention")
    for seed in seeds:
        rng = np.random.default_rng(1000 + seed)
        builder = Builder(rng, width=[1, 5, 12, 17][seed % 4])
        code = builder.draw(attention=True)
        out.append(case(f"Random{seed}", code, builder.src_width, builder.dst_width, builder.edge_width))
        names.append(f"Random{seed}")
    return "\n".join(out) + f"\nusing Cases = CaseList<{', '.join(names)}>;\n"


def build_and_run(directory, seeds, gates=(4,)):
    cases_file = directory / "cases.inc"
    cases_file.write_text(cases(seeds, gates))
    binary = directory / "generated_code_check"
    build = subprocess.run([COMPILER, "-std=c++17", "-O1", "-pthread", "-I", str(ROOT),
                            f'-DNGRA_GENERATED_CASES="{cases_file}"', "-x", "c++", str(CHECK), "-o", str(binary)],
                           capture_output=True, text=True, timeout=1200)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=1200)
    return run.returncode, run.stdout + run.stderr


def _assert_passed(rc, output, at_least):
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    passed, failed = int(summary.group(1)), int(summary.group(2))
    assert rc == 0 and failed == 0, output[-3000:]
    assert passed >= at_least, output[-3000:]
    assert "not compared" not in output, output[-3000:]


def test_generated_programs_equal_the_cpu_walks_under_emulation(tmp_path):
    rc, output = build_and_run(tmp_path, seeds=range(3))
    # 5 programs x 2 type pairs, each with 5 reduces: forward, from init (not mean), 1 to 3 gradients
    _assert_passed(rc, output, at_least=5 * 2 * 5 * 2)


@pytest.mark.slow
def test_generated_programs_full_set(tmp_path):
    rc, output = build_and_run(tmp_path, seeds=range(3, 27), gates=(1, 16))
    _assert_passed(rc, output, at_least=26 * 2 * 5 * 2)


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
            want = {"ngra_edge_code_forward"} | {f"ngra_edge_code_grad_{side}" for side, read in reads.items()
                                                 if read}
            for dtype, index in types:
                for arch in archs:
                    image = generated.compile_cuda(generated.cuda_module(program, dtype, index, reduce), arch)
                    what = f"{name} {reduce} {dtype} {arch}"
                    assert (image[:4] == b"\x7fELF") == arch.startswith("sm_"), what
                    assert _kernels_in(image) == want, what


@needs_nvrtc
def test_generated_modules_compile_with_nvrtc():
    """Every pass's kernel, and only those of operands the program reads, as PTX and as a CUBIN."""
    _compile_all(0, ("compute_75",), types=(("float32", "int32"),))  # CUBINs: the cache test


@needs_nvrtc
@pytest.mark.slow
def test_random_modules_compile_with_nvrtc():
    _compile_all(8, ("compute_75", "sm_80", "sm_90"))


@needs_nvrtc
def test_a_module_is_cached_per_program_and_arch(monkeypatch, tmp_path):
    monkeypatch.setenv(generated.CACHE_ENV, str(tmp_path))
    generated._cuda_kernels.cache_clear()
    try:
        cubin = generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="sm_90")
        assert cubin.startswith(str(tmp_path)) and cubin.endswith(".cubin")
        with open(cubin, "rb") as f:
            assert f.read(4) == b"\x7fELF"
        ptx = generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="compute_80")
        assert ptx.endswith(".ptx") and ptx != cubin
        other = generated.cuda_kernels_for(gate(8), "float32", "int32", "max", arch="sm_90")
        assert other not in (cubin, ptx)
        generated._cuda_kernels.cache_clear()  # a new process: the file is found, not compiled again
        monkeypatch.setattr(generated, "compile_cuda", lambda *a: pytest.fail("compiled again"))
        assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum", arch="sm_90") == cubin
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".build-")]
    finally:
        generated._cuda_kernels.cache_clear()


def test_without_a_gpu_nothing_is_compiled_for_one():
    assert generated.gpu_arch() is None  # this machine; a GPU machine gets "sm_XY"
    assert generated.cuda_kernels_for(gate(8), "float32", "int32", "sum") == ""


def test_without_nvrtc_the_gpu_interprets_and_says_why(monkeypatch):
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
    want = ec.edge_code_gather(graph.adjacency, code, x2, xd)
    adjacency = graph.adjacency
    got, _ = library().ngra_edge_code(
        x2, xd, tf.zeros([0, 0]), tf.zeros([0], tf.int32), tf.constant(code.constants, tf.float32),
        tf.constant(code.tables), *adjacency.tensors(), tf.zeros([0]), ec.graph_plan(adjacency), reduce="sum",
        kernel="", cuda_kernel="/nowhere/edge_code.cubin", **code.attrs())
    np.testing.assert_array_equal(got, want)


def test_explain_says_how_edge_code_runs_on_gpus(monkeypatch):
    import tensorflow as tf

    import ngra_tf
    from ngra_tf import layers

    graph = ngra_tf.Graph.from_edges([0, 1, 2, 2, 3], [1, 2, 0, 1, 2], 4)
    graph = graph.with_edge_data(layers.relational_edge_data(graph, np.array([0, 1, 2, 0, 1])))
    layer = layers.RGCN(3, num_relations=3)
    layer(tf.ones([4, 5]), graph=graph)
    assert "kernels (CPU):" in layer.explain() and "kernels (GPU):" not in layer.explain()  # no GPU here
    monkeypatch.setattr(generated, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(generated, "nvrtc", lambda: "no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set "
                                                    "NGRA_TF_NVRTC to its path")
    assert ("kernels (GPU): interpreted: no NVRTC (libnvrtc.so): install nvidia-cuda-nvrtc, or set NGRA_TF_NVRTC "
            "to its path") in layer.explain()
