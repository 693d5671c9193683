// Generated GPU edge code under emulation: each program of a generated case
// file runs through the GPU bodies as FixedCode (its own straight-line code,
// ops/cuda/edge_code_programs.h) with every reduce, forward (plain and from
// init) and every gradient, against the CPU walks: the harness's edge code
// checks (harness_edge_code.h), with the program fixed at compile time. Then
// the same walks with the interpreter must give the same bits: the two
// policies compute the same operations in the same order (this file is
// built without FMA contraction).
//
// The case file (NGRA_GENERATED_CASES, written by
// tests/ops/test_generated_cuda.py) defines, per case, a struct with
//   struct Plain, Softmax: the program without and with its score
//     (ngra_tf.ops.generated.cuda_program);
//   kName, kWidth, kSrcWidth, kDstWidth, kEdgeWidth, kSlotTypes;
//   kTables[] (kNumTables rows of kWidth), kConstants[];
// and `using Cases = CaseList<Case0, Case1, ...>;`.
//
// Two builds (the backends cannot share a translation unit):
//   host C++ (g++ -x c++): the GPU walks emulated on the host, and the
//             same-bits checks;
//   CUDA (nvcc -x cu -DNGRA_HARNESS_GPU=1, tools/build_cuda.py
//             --generated-check): on CUDA device 0, each case's kernels
//             compiled here as NVRTC would compile them for the op, against
//             the same CPU walks, each check run twice (over the graph's
//             plan and without) and the two bit-equal.
// Usage: generated_code_check   prints "N passed, M failed"; exits 1 on any failure.
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#if NGRA_HARNESS_GPU
#include "ops/cuda/backend_cuda.cuh"
#else
#include "ops/cuda/backend_host.h"
#endif
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"
#include "ops/tests/harness_edge_code.h"
#include "ops/tests/harness_graph.h"
#include "ops/tests/harness_runtime.h"

namespace ngra {
namespace harness {

template <typename... Cases>
struct CaseList {};

template <typename Code>
struct Fixed {
  template <typename T>
  gpu::FixedCode<Code, T> operator()(const EdgeCode<T>& p) const {
    return gpu::FixedCode<Code, T>{p};
  }
};
template <typename Code>
Fixed<Code> MakeFixed() {
  return Fixed<Code>{};
}

#include NGRA_GENERATED_CASES  // inside the namespace: it holds structs only

namespace {

template <typename Case>
RandomCode CodeOf(bool softmax) {
  using Code = typename Case::Softmax;  // the instructions; Plain differs in kScore only
  RandomCode c;
  c.code.assign(Code::kCode, Code::kCode + Code::kInstructions * kInstructionInts);
  c.constants.assign(Case::kConstants, Case::kConstants + sizeof(Case::kConstants) / sizeof(Case::kConstants[0]));
  c.width = Case::kWidth;
  c.tables.assign(Case::kTables, Case::kTables + Case::kNumTables * Case::kWidth);
  c.num_tables = Case::kNumTables;
  c.value = Code::kValue;
  c.score = softmax ? Code::kScore : -1;
  c.src_width = Case::kSrcWidth;
  c.dst_width = Case::kDstWidth;
  c.edge_width = Case::kEdgeWidth;
  c.num_types = Case::kSlotTypes;
  for (int i = 0; i < c.num_instructions(); ++i) {
    const int op = c.code[i * kInstructionInts];
    if (IsLoad(op)) c.reads[op] = true;
  }
  if (c.reads[kLoadSrcTyped]) c.reads[kLoadSrc] = true;
  return c;
}

template <typename T, typename Index, typename Case, typename Runtime>
void RunCase(Runtime& rt, const Graph<Index>& g, int64_t chunk, uint64_t seed, const std::string& prefix,
             Tally& tally) {
  CodeSetting<Runtime, T, Index> s{rt, g, gpu::WalkConfig{chunk}, tally};
  s.Upload({chunk});
  const std::string base = prefix + " generated " + Case::kName + " d=" + std::to_string(Case::kWidth) +
                           " chunk=" + std::to_string(chunk);
  // Data on which every reference value and gradient is moderate (the harness draws programs again instead).
  const RandomCode plain = CodeOf<Case>(false), softmax = CodeOf<Case>(true);
  std::vector<CodeReference<T, Index>> refs;  // by reduce
  auto tame = [&](uint64_t at) {
    refs.clear();
    for (int r = 0; r < 5; ++r) {
      refs.push_back(s.Reference(r == 4 ? softmax : plain, r, at));
      if (!s.Tame(refs.back(), r)) return false;
    }
    return true;
  };
  int attempt = 0;
  for (; attempt < 16 && !tame(seed); ++attempt) seed += 1000;
  if (attempt == 16) {  // a check that compares nothing is a failure, not a pass
    tally.Record(base, "values out of range on 16 draws of data: nothing compared");
  } else {
    for (int r = 0; r < 4; ++r) s.Case(plain, r, base, refs[r], Fixed<typename Case::Plain>{});
    s.Case(softmax, 4, base, refs[4], Fixed<typename Case::Softmax>{});
  }
  rt.Reset();
}

// FixedCode against the interpreter over the same walks and data: forward
// and every gradient, bit for bit.
template <typename T, typename Index, typename Case>
void SameBits(EmuRuntime& rt, const Graph<Index>& g, int64_t chunk, uint64_t seed, const std::string& prefix,
              Tally& tally) {
  CodeSetting<EmuRuntime, T, Index> s{rt, g, gpu::WalkConfig{chunk}, tally};
  s.Upload({chunk});
  for (int r = 0; r < 5; ++r) {
    const bool softmax = r == 4, extreme = r == 2 || r == 3;
    const RandomCode c = CodeOf<Case>(softmax);
    const CodeData<T> d = s.Data(c, softmax, seed + r);
    const int64_t n = g.num_dst * c.width * (softmax ? 3 : 1);
    const std::string name = prefix + " generated " + Case::kName + " " + kCodeReduceNames[r] + " same bits as "
                             "interpreted";
    gpu::EdgeCodeAttrs attrs;
    std::string error = gpu::ParseEdgeCodeAttrs(c.Attr(), c.value, c.score, kCodeReduceNames[r], &attrs);
    const gpu::EdgeCodeInputs inputs = s.Inputs(c, d);
    gpu::EdgeCodeProblem<T, Index> problem;
    if (error.empty()) error = gpu::ValidateEdgeCode(rt.backend(), attrs, inputs, false, &problem);
    auto both = [&](auto run) {  // run(make, out) with each policy; the results must be the same bits
      std::vector<T> fixed, interpreted;
      std::string e = softmax ? run(MakeFixed<typename Case::Softmax>(), &fixed)
                              : run(MakeFixed<typename Case::Plain>(), &fixed);
      if (e.empty()) e = run(gpu::Interpreted<T>{}, &interpreted);
      return e.empty() ? CompareExact(fixed, interpreted) : e;
    };
    std::vector<Index> arg;
    if (error.empty()) {
      error = both([&](const auto& make, std::vector<T>* out) {
        T* o = rt.template Garbage<T>(n);
        Index* a = extreme ? rt.template Garbage<Index>(n) : nullptr;
        std::string e = s.Forward(problem, o, a, make);
        *out = rt.Get(o, n);
        if (extreme) arg = rt.Get(a, n);
        return e;
      });
    }
    tally.Record(name + " forward", error);
    // The gradients get the forward's winners (arg, from the runs above) or the CPU's finished state.
    std::vector<Index> unused;
    const std::vector<T> state = softmax ? s.CpuForward(c, d, r, false, &unused) : std::vector<T>();
    const T* grad = rt.Put(d.grad);
    const Index* arg_d = extreme ? rt.Put(arg) : nullptr;
    const T* state_d = softmax ? rt.Put(state) : nullptr;
    const int64_t row = softmax ? 3 * c.width : c.width;
    for (int side : {kLoadSrc, kLoadDst, kLoadEdge}) {
      if (!c.reads[side]) continue;
      const char* wrt = side == kLoadSrc ? "x_src" : side == kLoadDst ? "x_dst" : "edge_data";
      gpu::EdgeCodeProblem<T, Index> gp;
      gpu::Wrt which = gpu::Wrt::kXSrc;
      const gpu::TensorInfo aux = extreme ? gpu::TensorInfo{arg_d, {g.num_dst, row}} : gpu::TensorInfo{nullptr, {0}};
      const gpu::TensorInfo finished =
          softmax ? gpu::TensorInfo{state_d, {g.num_dst, row}} : gpu::TensorInfo{nullptr, {0}};
      std::string e = gpu::ValidateEdgeCodeGrad(rt.backend(), attrs, wrt, gpu::TensorInfo{grad, {g.num_dst, row}},
                                                aux, finished, inputs, &gp, &which);
      const int64_t rows = side == kLoadSrc ? g.num_src : side == kLoadDst ? g.num_dst : g.num_edges;
      const int64_t size = rows * (side == kLoadSrc ? c.src_width : side == kLoadDst ? c.dst_width : c.edge_width);
      if (e.empty()) {
        e = both([&](const auto& make, std::vector<T>* out) {
          T* o = rt.template Garbage<T>(size);
          std::string e2 = s.Grad(gp, which, grad, arg_d, state_d, o, make);
          *out = rt.Get(o, size);
          return e2;
        });
      }
      tally.Record(name + " d/d" + wrt, e);
    }
  }
  rt.Reset();
}

template <typename Runtime, typename... Cases>
void RunAll(Runtime& rt, CaseList<Cases...>, Tally& tally) {
  const std::string name = Runtime::kName;
  const bool gpu = name == "gpu";
  // Larger graphs on a GPU (hubs of thousands of edges, split into chunks).
  const Graph<int32_t> g32 = MakeGraph<int32_t>(gpu ? GraphSpec{3000, 2500, 30000, 5000, 4000, 0.1, 4}
                                                    : GraphSpec{60, 50, 300, 80, 60, 0.1, 4});
  const Graph<int64_t> g64 = MakeGraph<int64_t>(GraphSpec{40, 30, 200, 50, 40, 0.1, 5});
  uint64_t seed = 21;
  // float/int32 with hubs split into chunks; double/int64 with whole segments.
  (RunCase<float, int32_t, Cases>(rt, g32, gpu ? 256 : 8, seed++, name + " float/int32", tally), ...);
  (RunCase<double, int64_t, Cases>(rt, g64, 64, seed++, name + " double/int64", tally), ...);
  if constexpr (std::is_same_v<Runtime, EmuRuntime>) {  // bit for bit: host code, no FMA contraction
    (SameBits<float, int32_t, Cases>(rt, g32, 8, seed++, name + " float/int32", tally), ...);
  }
}

}  // namespace
}  // namespace harness
}  // namespace ngra

int main() {
  using namespace ngra::harness;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Tally tally;
#if NGRA_HARNESS_GPU
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu: no CUDA device\n");
    return 1;
  }
  GpuRuntime dev;
  RunAll(dev, Cases{}, tally);
#else
  EmuRuntime emu;
  RunAll(emu, Cases{}, tally);
#endif
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(tally.passed),
              static_cast<long long>(tally.failed));
  return tally.failed == 0 && tally.passed > 0 ? 0 : 1;
}
