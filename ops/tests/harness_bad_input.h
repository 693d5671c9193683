// Bad input for the GPU ops' argument checks (ops/cuda/validate.h): each
// case expects the CPU kernel's message, word for word, and the device checks
// must not index by values that an earlier check rejected.
#ifndef NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_
#define NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/validate.h"
#include "ops/tests/harness_check.h"

namespace ngra {
namespace harness {

using gpu::FusedProblem;
using gpu::Wrt;

// ---- Bad input: the validation entry points, messages as the CPU ops' ----

template <typename Runtime>
void BadInput(Runtime& rt, Tally& tally) {
  using Index = int32_t;
  using gpu::TensorInfo;
  const std::string prefix = std::string(Runtime::kName) + " bad-input";
  auto info = [&](const std::vector<Index>& v, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    return TensorInfo{rt.Put(v), shape};
  };
  const TensorInfo values{rt.Put(std::vector<float>(8)), {4, 2}};
  const TensorInfo none{nullptr, {0}};
  auto expect = [&](const std::string& name, const std::string& got, const std::string& want) {
    tally.Record(prefix + " " + name, got == want ? "" : "got '" + got + "', want '" + want + "'");
  };
  gpu::Checked c;
  expect("indptr[0]", gpu::ValidateGather<typename Runtime::Backend, Index>(rt.backend(), values, info({1, 2, 4}), none, &c),
         "indptr[0] must be 0, got 1");
  expect("indptr decreasing",
         gpu::ValidateGather<typename Runtime::Backend, Index>(rt.backend(), values, info({0, 2, 1, 4}), none, &c),
         "indptr must be non-decreasing, but indptr[2] = 1 < indptr[1] = 2");
  expect("gather edge count",
         gpu::ValidateGather<typename Runtime::Backend, Index>(rt.backend(), values, info({0, 1, 3}), none, &c),
         "indptr[-1] = 3 must equal the number of edges, 4");
  expect("gather edge_ids range",
         gpu::ValidateGather<typename Runtime::Backend, Index>(rt.backend(), values, info({0, 2, 5}),
                                                               info({0, 9, 1, -1, 7}), &c),
         "edge_ids[1] = 9 is out of range [0, 4)");
  expect("gather ok",
         gpu::ValidateGather<typename Runtime::Backend, Index>(rt.backend(), values, info({0, 2, 5}),
                                                               info({0, 3, 1, 1, 2}), &c),
         "");
  tally.Record(prefix + " gather positions", c.num_positions == 5 ? "" : "num_positions " + std::to_string(c.num_positions));
  // init: empty means none; else shaped like the output, and never with mean.
  bool present = true;
  expect("init absent", gpu::ValidateInit(none, {2, 2}, "mean", &present), "");
  tally.Record(prefix + " init absent flag", present ? "an empty init counts as present" : "");
  expect("init shape", gpu::ValidateInit(values, {2, 2}, "max", &present),
         "init must be empty or shaped like the output [2,2], got [4,2]");
  expect("init mean", gpu::ValidateInit(values, {4, 2}, "mean", &present),
         "init cannot be used with reduce=mean: reduce with sum from init, then divide by the whole in-degree");
  expect("init ok", gpu::ValidateInit(values, {4, 2}, "sum", &present), "");
  tally.Record(prefix + " init present flag", present ? "" : "a shaped init counts as absent");
  expect("init grad argedge", gpu::ValidateInitGrad(values, TensorInfo{nullptr, {4, 3}}),
         "argedge must have the shape of grad [4,2], got [4,3]");
  const TensorInfo x{rt.Put(std::vector<float>(6)), {2, 3}};
  expect("scatter indptr length",
         gpu::ValidateScatter<typename Runtime::Backend, Index>(rt.backend(), x, info({0, 1}), none, &c),
         "indptr must have 3 entries (one per vertex, plus one), got 2");
  expect("scatter duplicate",
         gpu::ValidateScatter<typename Runtime::Backend, Index>(rt.backend(), x, info({0, 2, 4}), info({3, 1, 1, 0}), &c),
         "edge_ids must be a permutation, but 1 appears twice (again at position 2)");
  // Out of range values must stop the permutation pass (it indexes by them).
  expect("scatter range before permutation",
         gpu::ValidateScatter<typename Runtime::Backend, Index>(rt.backend(), x, info({0, 2, 4}),
                                                                info({3, 1000000, 1, -5}), &c),
         "edge_ids[1] = 1000000 is out of range [0, 4)");
  expect("scatter edge_ids count",
         gpu::ValidateScatter<typename Runtime::Backend, Index>(rt.backend(), x, info({0, 2, 4}), info({0, 1, 2}), &c),
         "edge_ids must have indptr[-1] = 4 entries, got shape [3]");
  const TensorInfo grad{rt.Put(std::vector<float>(4)), {2, 2}};
  expect("argedge owner (identity)",
         gpu::ValidateGatherGradArg<typename Runtime::Backend, Index>(rt.backend(), grad, info({0, 1, 1, -1}, {2, 2}),
                                                                      info({0, 2, 3}), none, &c),
         "argedge[2] = 1 is not an edge of segment 1");
  expect("argedge owner (edge_ids)",
         gpu::ValidateGatherGradArg<typename Runtime::Backend, Index>(rt.backend(), grad, info({2, -1, 1, 0}, {2, 2}),
                                                                      info({0, 2, 3}), info({2, 1, 0}), &c),
         "argedge[2] = 1 is not an edge of segment 1");
  expect("argedge range",
         gpu::ValidateGatherGradArg<typename Runtime::Backend, Index>(rt.backend(), grad, info({0, 3, 1, -2}, {2, 2}),
                                                                      info({0, 2, 3}), none, &c),
         "argedge[1] = 3 is out of range [-1, 3)");
  expect("argedge ok",
         gpu::ValidateGatherGradArg<typename Runtime::Backend, Index>(rt.backend(), grad, info({2, 1, 0, -1}, {2, 2}),
                                                                      info({0, 2, 3}), info({2, 1, 0}), &c),
         "");

  // fused_gather: 3 sources, 2 destinations, 3 edges.
  auto fused = [&](gpu::FusedInputs in, const std::string& program, bool check_csr = true) {
    FusedProblem<float, Index> problem;
    return gpu::ValidateFused<typename Runtime::Backend, float, Index>(rt.backend(), program, "sum", in, check_csr,
                                                                       &problem);
  };
  gpu::FusedInputs ok;
  ok.x_src = TensorInfo{rt.Put(std::vector<float>(6)), {3, 2}};
  ok.x_dst = TensorInfo{nullptr, {0}};
  ok.edge_weight = TensorInfo{rt.Put(std::vector<float>(3)), {3}};
  ok.edge_type = TensorInfo{nullptr, {0}};
  ok.csc_indptr = info({0, 1, 3});
  ok.csc_src = info({2, 0, 1});
  ok.csr_indptr = info({0, 1, 2, 3});
  ok.csr_dst = info({1, 1, 0});
  ok.csr_edge = info({1, 2, 0});
  expect("fused ok", fused(ok, "src_mul_edge"), "");
  gpu::FusedInputs bad = ok;
  bad.csc_src = info({2, 3, 1});
  expect("fused csc_src range", fused(bad, "src_mul_edge"), "csc_src[1] = 3 is out of range [0, 3)");
  bad = ok;
  bad.csc_src = info({2, 0});
  expect("fused csc_src count", fused(bad, "src_mul_edge"), "csc_src must be a vector of 3 ids, got shape [2]");
  bad = ok;
  bad.edge_weight = TensorInfo{rt.Put(std::vector<float>(2)), {2}};
  expect("fused weight shape", fused(bad, "src_mul_edge"),
         "edge_weight must be shaped [3] or [3, W] with W dividing 2 for program src_mul_edge, got [2]");
  bad = ok;
  bad.csr_edge = info({1, 2, 1});
  expect("fused csr_edge duplicate", fused(bad, "src_mul_edge"),
         "csr_edge must be a permutation, but 1 appears twice (again at position 2)");
  expect("fused csr unchecked forward", fused(bad, "src_mul_edge", false), "");
  bad = ok;
  bad.csr_indptr = info({0, 1, 3});
  expect("fused csr_indptr length", fused(bad, "src_mul_edge"),
         "csr_indptr must have 4 entries (one per vertex, plus one), got 3");
  bad = ok;
  bad.edge_weight = TensorInfo{nullptr, {0}};
  bad.x_dst = TensorInfo{rt.Put(std::vector<float>(6)), {3, 2}};
  expect("fused x_dst shape", fused(bad, "src_add_dst"), "x_dst must be shaped [2, 2] for program src_add_dst, got [3,2]");
  bad = ok;
  bad.edge_weight = TensorInfo{nullptr, {0}};
  bad.x_src = TensorInfo{rt.Put(std::vector<float>(12)), {3, 2, 2}};
  bad.edge_type = TensorInfo{rt.Put(std::vector<int32_t>{0, 2, 1}), {3}};
  expect("fused edge_type range", fused(bad, "type_select"), "edge_type[1] = 2 is out of range [0, 2)");
  {
    FusedProblem<float, Index> problem;
    Wrt wrt;
    const TensorInfo g2{rt.Put(std::vector<float>(4)), {2, 2}};
    const TensorInfo arg = info({0, 7, -1, 2}, {2, 2});
    gpu::FusedInputs mx = ok;
    expect("fused grad argedge range",
           gpu::ValidateFusedGrad<typename Runtime::Backend, float, Index>(rt.backend(), "src_mul_edge", "max", "x_src",
                                                                           g2, arg, mx, &problem, &wrt),
           "argedge[1] = 7 is out of range [-1, 3)");
    expect("fused grad wrt", gpu::ValidateFusedGrad<typename Runtime::Backend, float, Index>(
                                 rt.backend(), "copy_src", "sum", "x_dst", g2, none, [&] {
                                   gpu::FusedInputs c2 = ok;
                                   c2.edge_weight = TensorInfo{nullptr, {0}};
                                   return c2;
                                 }(), &problem, &wrt),
           "program copy_src has no operand x_dst to differentiate");
  }
  rt.Reset();
}

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_
