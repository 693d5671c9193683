// Generated GPU edge code under emulation: each program of a generated case
// file runs through the GPU bodies as FixedCode (its own straight-line code,
// ops/cuda/edge_code_programs.h) with every reduce, forward (plain and from
// init) and every gradient, against the CPU walks: the harness's edge code
// checks (harness_edge_code.h), with the program fixed at compile time.
//
// The case file (NGRA_GENERATED_CASES, written by
// tests/ops/test_generated_cuda.py) defines, per case, a struct with
//   struct Plain, Softmax: the program without and with its score
//     (ngra_tf.ops.generated.cuda_program);
//   kName, kWidth, kSrcWidth, kDstWidth, kEdgeWidth, kSlotTypes;
//   kTables[] (kNumTables rows of kWidth), kConstants[];
// and `using Cases = CaseList<Case0, Case1, ...>;`.
//
// Usage: generated_code_check   prints "N passed, M failed"; exits 1 on any failure.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ops/cuda/backend_host.h"
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

template <typename T, typename Index, typename Case>
void RunCase(EmuRuntime& rt, const Graph<Index>& g, int64_t chunk, uint64_t seed, const std::string& prefix,
             Tally& tally) {
  CodeSetting<EmuRuntime, T, Index> s{rt, g, gpu::WalkConfig{chunk}, tally};
  s.Upload({chunk});
  const std::string base = prefix + " generated " + Case::kName + " d=" + std::to_string(Case::kWidth) +
                           " chunk=" + std::to_string(chunk);
  // Data on which every reference value and gradient is moderate (the harness draws programs again instead).
  auto tame = [&](uint64_t at) {
    for (int r = 0; r < 5; ++r) {
      const RandomCode c = CodeOf<Case>(r == 4);
      const CodeData<T> d = s.Data(c, r == 4, at + r);
      std::vector<Index> arg;
      const std::vector<T> out = s.CpuForward(c, d, r, false, &arg);
      if (!s.Tame(out, r == 4)) return false;
      for (int side : {kLoadSrc, kLoadDst, kLoadEdge}) {
        if (c.reads[side] && !s.Tame(s.CpuGrad(c, d, r, side, arg, r == 4 ? out : std::vector<T>()))) return false;
      }
    }
    return true;
  };
  int attempt = 0;
  for (; attempt < 16 && !tame(seed); ++attempt) seed += 1000;
  if (attempt == 16) {
    std::printf("%s: values out of range on this data, not compared\n", base.c_str());
  } else {
    for (int r = 0; r < 5; ++r) {
      if (r == 4) {
        s.Case(CodeOf<Case>(true), r, base, seed, Fixed<typename Case::Softmax>{});
      } else {
        s.Case(CodeOf<Case>(false), r, base, seed, Fixed<typename Case::Plain>{});
      }
    }
  }
  rt.Reset();
}

template <typename... Cases>
void RunAll(CaseList<Cases...>, Tally& tally) {
  EmuRuntime rt;
  const Graph<int32_t> g32 = MakeGraph<int32_t>(GraphSpec{60, 50, 300, 80, 60, 0.1, 4});
  const Graph<int64_t> g64 = MakeGraph<int64_t>(GraphSpec{40, 30, 200, 50, 40, 0.1, 5});
  uint64_t seed = 21;
  // float/int32 with hubs split into chunks of 8; double/int64 with whole segments.
  (RunCase<float, int32_t, Cases>(rt, g32, 8, seed++, "emulated float/int32", tally), ...);
  (RunCase<double, int64_t, Cases>(rt, g64, 64, seed++, "emulated double/int64", tally), ...);
}

}  // namespace
}  // namespace harness
}  // namespace ngra

int main() {
  using namespace ngra::harness;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Tally tally;
  RunAll(Cases{}, tally);
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(tally.passed),
              static_cast<long long>(tally.failed));
  return tally.failed == 0 && tally.passed > 0 ? 0 : 1;
}
