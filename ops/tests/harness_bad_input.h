// Bad input for the GPU ops' argument checks (ops/cuda/validate.h): each
// case expects the CPU kernel's message, word for word, and the device checks
// must not index by values that an earlier check rejected.
#ifndef NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_
#define NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_

#include <cstdint>
#include <deque>
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

  // A graph prepared once (NgraPrepareGraph): the same checks and messages
  // up front; then a call given its plan checks sizes only, and runs over
  // the plan's schedules what it would have built itself.
  auto graph_of = [](const gpu::FusedInputs& in) {
    return gpu::GraphInputs{in.csc_indptr, in.csc_src, in.csr_indptr, in.csr_dst, in.csr_edge};
  };
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
  auto validate_graph = [&](const gpu::FusedInputs& in) {
    return gpu::ValidateGraph<typename Runtime::Backend, Index>(rt.backend(), graph_of(in), &num_src, &num_dst,
                                                                &num_edges);
  };
  bad = ok;
  bad.csc_src = info({2, 3, 1});
  expect("prepare csc_src range", validate_graph(bad), "csc_src[1] = 3 is out of range [0, 3)");
  bad = ok;
  bad.csr_edge = info({1, 2, 1});
  expect("prepare csr_edge duplicate", validate_graph(bad),
         "csr_edge must be a permutation, but 1 appears twice (again at position 2)");
  bad = ok;
  bad.csr_dst = info({1, 1});
  expect("prepare csr count", validate_graph(bad),
         "csr_indptr[-1], csr_dst and csr_edge must all count the 3 edges of csc_indptr; got 3, [2], [3]");
  expect("prepare ok", validate_graph(ok), "");
  tally.Record(prefix + " prepare sizes",
               num_src == 3 && num_dst == 2 && num_edges == 3 ? "" : "wrong sizes from ValidateGraph");
  const int64_t plan_bytes = gpu::PlanBytes<Index>(3, 2, 3);
  void* block = rt.template Garbage<Index>(plan_bytes / static_cast<int64_t>(sizeof(Index)));
  {
    const FusedProblem<float, Index> unchecked = [&] {
      FusedProblem<float, Index> p;
      gpu::ValidateFused<typename Runtime::Backend, float, Index>(rt.backend(), "src_mul_edge", "sum", ok, true, &p);
      return p;
    }();
    expect("prepare build", gpu::PrepareGraph(rt.backend(), unchecked.csc, unchecked.csr, 3, block), "");
    gpu::FusedInputs planned = ok;
    planned.plan = TensorInfo{block, {plan_bytes}};
    FusedProblem<float, Index> problem;
    expect("planned ok", gpu::ValidateFused<typename Runtime::Backend, float, Index>(
                             rt.backend(), "src_mul_edge", "sum", planned, true, &problem), "");
    tally.Record(prefix + " planned uses the plan", problem.plan.present() ? "" : "the plan was not taken");
    std::vector<float> got[2];
    for (int with_plan = 0; with_plan < 2; ++with_plan) {
      FusedProblem<float, Index> p = with_plan ? problem : unchecked;
      p.in.x_src = static_cast<const float*>(rt.Put(std::vector<float>{1, 2, 3, 4, 5, 6}));
      p.in.weight = static_cast<const float*>(rt.Put(std::vector<float>{0.5f, 2, -1}));
      float* out = rt.template Garbage<float>(4);
      std::string error = gpu::RunFusedGather(rt.backend(), p, out, static_cast<Index*>(nullptr));
      if (error.empty()) error = rt.Sync();
      got[with_plan] = rt.Get(out, 4);
      tally.Record(prefix + " planned run " + std::to_string(with_plan), error);
    }
    // out[0] = 0.5 x_src[2]; out[1] = 2 x_src[0] - x_src[1].
    tally.Record(prefix + " planned result", got[1] == got[0] && got[0] == std::vector<float>{2.5f, 3, -1, 0}
                                                 ? ""
                                                 : "the planned run differs from the per-call one");
    // A plan that does not fit (another graph's size, a CPU's) is ignored: every check runs.
    planned.plan = TensorInfo{block, {plan_bytes - 4}};
    FusedProblem<float, Index> ignored;
    expect("plan of another size ignored", gpu::ValidateFused<typename Runtime::Backend, float, Index>(
                                               rt.backend(), "src_mul_edge", "sum", planned, true, &ignored), "");
    tally.Record(prefix + " plan of another size not taken", ignored.plan.present() ? "it was taken" : "");
    planned.plan = TensorInfo{block, {plan_bytes}};
    planned.csr_indptr = info({0, 1, 3});
    expect("planned csr_indptr length", fused(planned, "src_mul_edge"),
           "csr_indptr must have 4 entries (one per vertex, plus one), got 3");
    // A GPU plan's size does not pin the edge count exactly (it grows by a
    // work item per chunk of edges): this one fits 2 edges too, so with it
    // csc_indptr's values are not read, and E is csc_src's length. What is
    // sized by the real count then disagrees. (A plan vouches only for the
    // arrays it was made of.)
    planned = ok;
    planned.plan = TensorInfo{block, {plan_bytes}};
    planned.csc_src = info({2, 0});
    expect("planned csc_src count", fused(planned, "src_mul_edge"),
           "edge_weight must be shaped [2] or [2, W] with W dividing 2 for program src_mul_edge, got [3]");
  }
  rt.Reset();
}

// ---- Edge code: ParseEdgeCodeAttrs and ValidateEdgeCode*, messages as the CPU kernel's ----

template <typename Runtime>
void EdgeCodeBadInput(Runtime& rt, Tally& tally) {
  using Index = int32_t;
  using Backend = typename Runtime::Backend;
  using gpu::TensorInfo;
  const std::string prefix = std::string(Runtime::kName) + " bad-input edge_code";
  auto expect = [&](const std::string& name, const std::string& got, const std::string& want) {
    tally.Record(prefix + " " + name, got == want ? "" : "got '" + got + "', want '" + want + "'");
  };
  auto ids = [&](const std::vector<Index>& v, std::vector<int64_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    return TensorInfo{rt.Put(v), shape};
  };
  auto types = [&](const std::vector<int32_t>& v) { return TensorInfo{rt.Put(v), {static_cast<int64_t>(v.size())}}; };
  auto values = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return TensorInfo{n > 0 ? rt.Put(std::vector<float>(n)) : nullptr, shape};
  };
  std::deque<std::vector<int32_t>> host_tables;  // tables live on the host
  auto tables = [&](const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    host_tables.push_back(v);
    return TensorInfo{host_tables.back().data(), shape};
  };
  struct Attrs {
    std::vector<int64_t> code{0, 0, 0, -1, 1, 1, 0, -1, 26, 0, 1, -1};  // x_src[t0] * x_dst[t1]
    int value = 2, score = -1;
    std::string reduce = "sum";
  };
  // 3 sources, 2 destinations, 3 edges; widths 2.
  gpu::EdgeCodeInputs ok;
  ok.x_src = values({3, 2});
  ok.x_dst = values({2, 2});
  ok.edge_data = values({0, 0});
  ok.edge_type = TensorInfo{nullptr, {0}};
  ok.constants = TensorInfo{rt.Put(std::vector<float>{0.5f}), {1}};
  ok.tables = tables({0, 1, 1, 0}, {2, 2});
  ok.csc_indptr = ids({0, 1, 3});
  ok.csc_src = ids({2, 0, 1});
  ok.csr_indptr = ids({0, 1, 2, 3});
  ok.csr_dst = ids({1, 1, 0});
  ok.csr_edge = ids({1, 2, 0});
  auto forward = [&](const gpu::EdgeCodeInputs& in, const Attrs& a) {
    gpu::EdgeCodeAttrs attrs;
    std::string error = gpu::ParseEdgeCodeAttrs(a.code, a.value, a.score, a.reduce, &attrs);
    gpu::EdgeCodeProblem<float, Index> problem;
    if (error.empty()) error = gpu::ValidateEdgeCode<Backend, float, Index>(rt.backend(), attrs, in, false, &problem);
    return error;
  };
  auto backward = [&](const gpu::EdgeCodeInputs& in, const Attrs& a, const std::string& wrt, const TensorInfo& grad,
                      const TensorInfo& aux, const TensorInfo& state) {
    gpu::EdgeCodeAttrs attrs;
    std::string error = gpu::ParseEdgeCodeAttrs(a.code, a.value, a.score, a.reduce, &attrs);
    gpu::EdgeCodeProblem<float, Index> problem;
    gpu::Wrt which;
    if (error.empty()) {
      error = gpu::ValidateEdgeCodeGrad<Backend, float, Index>(rt.backend(), attrs, wrt, grad, aux, state, in,
                                                               &problem, &which);
    }
    return error;
  };
  auto with_code = [](std::vector<int64_t> code, int value) {
    Attrs a;
    a.code = std::move(code);
    a.value = value;
    return a;
  };
  expect("ok", forward(ok, Attrs()), "");

  // The attributes (the kernel's construction).
  expect("operands", forward(ok, with_code({5, 3, 0, -1}, 0)), "code[0]: operands must be earlier registers, got 3, 0");
  expect("opcode", forward(ok, with_code({99, 0, 0, -1}, 0)), "code[0]: unknown opcode 99");
  expect("ints", forward(ok, with_code({0, 0, 0}, 0)), "code must hold 4 ints per instruction, got 3");
  expect("value", forward(ok, with_code({0, 0, 0, -1}, 3)), "value must be a register in [0, 1), got 3");
  Attrs a = Attrs();
  a.reduce = "softmax";
  expect("softmax score", forward(ok, a), "reduce=softmax needs a score register in [0, 3), got -1");
  a = Attrs();
  a.score = 0;
  expect("score", forward(ok, a), "score must be -1 unless reduce=softmax");
  expect("param", forward(ok, with_code({0, 0, 0, -1, 18, 0, 0, -1}, 1)), "code[1]: opcode 18 needs a constant parameter");
  expect("typed stride", forward(ok, with_code({3, 0, 0, -1}, 0)),
         "code[0]: a typed load needs a positive slot stride, got 0");

  // The inputs, in the CPU kernel's order.
  gpu::EdgeCodeInputs bad = ok;
  bad.x_src = values({3, 1, 2});
  expect("x_src rank", forward(bad, Attrs()), "x_src must be a matrix [num_src, width], got [3,1,2]");
  bad = ok;
  bad.csc_src = ids({2, 3, 1});
  expect("csc_src range", forward(bad, Attrs()), "csc_src[1] = 3 is out of range [0, 3)");
  expect("x_dst empty", forward(ok, with_code({0, 0, 0, -1}, 0)), "x_dst must be empty: the program does not read it");
  bad = ok;
  bad.x_dst = values({3, 2});
  expect("x_dst rows", forward(bad, Attrs()),
         "x_dst must be shaped [2 (one row per destination vertex), width], got [3,2]");
  // A device check that fails comes before a later host check that fails.
  bad.csc_indptr = ids({0, 2, 1});
  expect("indptr before x_dst", forward(bad, Attrs()),
         "csc_indptr must be non-decreasing, but csc_indptr[2] = 1 < csc_indptr[1] = 2");
  bad = ok;
  bad.x_dst = values({0, 0});
  bad.edge_data = values({2, 1});
  expect("edge_data rows", forward(bad, with_code({0, 0, 0, -1, 2, 0, 0, -1, 26, 0, 1, -1}, 2)),
         "edge_data must be shaped [3 (one row per edge), width], got [2,1]");
  expect("table index", forward(ok, with_code({0, 0, 0, -1, 1, 7, 0, -1, 26, 0, 1, -1}, 2)), "code[1] reads table 7 of 2");
  bad = ok;
  bad.tables = tables({0, 5, 1, 0}, {2, 2});
  expect("table entry", forward(bad, Attrs()), "tables[0, 1] = 5 is out of range [0, 2) for the load at code[0]");
  expect("constant index", forward(ok, with_code({0, 0, 0, -1, 1, 1, 0, -1, 4, 0, 0, 3}, 2)),
         "code[2] reads constant 3 of 1");
  bad = ok;
  bad.edge_type = types({0, 1, 1});
  expect("edge_type empty", forward(bad, Attrs()), "edge_type must be empty: the program has no typed load");
  bad = ok;
  bad.constants = values({1, 1});
  expect("constants shape", forward(bad, Attrs()), "constants must be a vector, got shape [1,1]");
  bad = ok;
  bad.tables = tables({0, 1}, {2});
  expect("tables shape", forward(bad, Attrs()), "tables must be a matrix [num_tables, width], got [2]");
  // Typed loads: x_src [3, 4] in slots of 2, so types 0 and 1 fit.
  gpu::EdgeCodeInputs typed = ok;
  typed.x_src = values({3, 4});
  typed.x_dst = values({0, 0});
  typed.tables = tables({0, 1}, {1, 2});
  typed.edge_type = types({0, 1, 1});
  const Attrs typed_load = with_code({3, 0, 2, -1}, 0);
  expect("typed ok", forward(typed, typed_load), "");
  bad = typed;
  bad.edge_type = types({0, 2, 1});
  expect("typed range", forward(bad, typed_load), "edge_type[1] = 2 is out of range [0, 2)");
  bad.edge_type = types({0, 1});
  expect("typed shape", forward(bad, typed_load), "edge_type must be a vector of 3 types, got shape [2]");
  expect("typed strides", forward(typed, with_code({3, 0, 2, -1, 3, 0, 1, -1, 24, 0, 1, -1}, 2)),
         "typed loads must share one slot stride");
  bad = ok;
  bad.csr_dst = ids({1, 1});
  expect("csr count", forward(bad, Attrs()),
         "csr_indptr[-1], csr_dst and csr_edge must all count the 3 edges of csc_indptr; got 3, [2], [3]");
  bad = ok;
  bad.csr_indptr = ids({0, 1, 3});
  expect("csr_indptr length", forward(bad, Attrs()), "csr_indptr must have 4 entries (one per vertex, plus one), got 3");

  // The gradient's own checks.
  const TensorInfo grad = values({2, 2}), none{nullptr, {0}};
  bad = ok;
  bad.csr_edge = ids({1, 2, 1});
  expect("grad csr_edge duplicate", backward(bad, Attrs(), "x_src", grad, none, none),
         "csr_edge must be a permutation, but 1 appears twice (again at position 2)");
  expect("grad x_dst reads no csr", backward(bad, Attrs(), "x_dst", grad, none, none), "");
  expect("grad shape", backward(ok, Attrs(), "x_src", values({2, 3}), none, none),
         "grad must be shaped [2,2], got [2,3]");
  a = Attrs();
  a.reduce = "max";
  expect("grad aux range", backward(ok, a, "x_src", grad, ids({0, 7, -1, 2}, {2, 2}), none),
         "aux[1] = 7 is out of range [-1, 3)");
  expect("grad aux shape", backward(ok, a, "x_src", grad, ids({0, 1}), none),
         "aux (argedge) must be shaped [2,2], got [2]");
  a = Attrs();
  a.reduce = "softmax";
  a.score = 2;
  expect("grad state", backward(ok, a, "x_src", values({2, 6}), none, values({2, 2})),
         "state must be the forward's softmax state [2,6], got [2,2]");
  expect("grad wrt", backward(ok, Attrs(), "edge_data", grad, none, none),
         "the program reads no edge_data to differentiate");
  rt.Reset();
}

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_BAD_INPUT_H_
