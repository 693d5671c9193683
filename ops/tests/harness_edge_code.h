// Edge code (ops/kernels/edge_code.h) in the CUDA harness: random programs
// on random graphs, the GPU entry points (RunEdgeCode, RunEdgeCodeGrad, fed
// by ValidateEdgeCode*) against the CPU walks of edge_code_walks.h.
//
// A program draws 2 to 6 loads (source rows through identity, reversed,
// broadcast, per-head, modulo and random tables; typed source loads whose
// slots overlap the plain loads' columns; destination and edge rows;
// constants), then 4 to 9 random operations of every opcode. Operations with a
// restricted domain come in safe forms (sqrt(softplus(x) + c), log(sigmoid(x)
// + c), pow(sigmoid(x) + c, k), a / (softplus(b) + c), ...), and a program
// whose reference values or gradients leave [-1e3, 1e3] is drawn again, so
// that every comparison is between finite numbers. The message is the last
// register plus the product of the two before it; under softmax the score is
// another random register (sometimes the message itself).
//
// Each program runs with every reduce: the forward pass plain and (not mean)
// from an init accumulator, in place (softmax: a state [acc | sum | m] with
// empty rows), and its gradients w.r.t. every operand it reads (max/min with
// the CPU's winners, softmax with the CPU's finished state, as both ops are
// fed by the forward in training). Sums, means, softmax states and gradients
// are compared per row as in the rest of the harness (float64 decides float
// disagreements); max/min values and winners must be identical under
// emulation, where the messages are the same host code, and on a GPU within
// the tolerance (exp/log/tanh/pow differ by ulps there).
#ifndef NGRA_OPS_TESTS_HARNESS_EDGE_CODE_H_
#define NGRA_OPS_TESTS_HARNESS_EDGE_CODE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/cuda/api.h"
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/validate.h"
#include "ops/kernels/edge_code_walks.h"
#include "ops/tests/harness_check.h"
#include "ops/tests/harness_graph.h"

namespace ngra {
namespace harness {

const char* const kCodeReduceNames[] = {"sum", "mean", "max", "min", "softmax"};

// ---- A random program ----

struct RandomCode {
  std::vector<int32_t> code;  // kInstructionInts per instruction
  std::vector<double> constants;
  std::vector<int32_t> tables;  // [num_tables, width]
  int64_t width = 0, num_tables = 0;
  int value = 0, score = -1;
  int64_t src_width = 0, dst_width = 0, edge_width = 0;
  int num_types = 3;
  bool reads[4] = {false, false, false, false};

  int num_instructions() const { return static_cast<int>(code.size() / kInstructionInts); }
  std::vector<int64_t> Attr() const { return std::vector<int64_t>(code.begin(), code.end()); }
  std::string Describe() const {
    std::string s = "[";
    for (int i = 0; i < num_instructions(); ++i) s += (i ? " " : "") + std::to_string(code[i * kInstructionInts]);
    return s + "] value " + std::to_string(value) + " score " + std::to_string(score);
  }
};

class CodeBuilder {
 public:
  CodeBuilder(std::mt19937_64* rng, int64_t width) : rng_(*rng) {
    c_.width = width;
    const int64_t slot = width + 2;  // typed loads: 3 slots of `slot` columns at the row's start
    c_.src_width = std::max<int64_t>(3 * slot, 2 * width + 3) + Uniform(0, 2);
    c_.dst_width = width + Uniform(0, 3);
    c_.edge_width = Uniform(1, 3);
    slot_ = slot;
    // 0.5: the offset of the safe forms; 0.2: leaky_relu's alpha; 1.5, 0.5: exponents; -0.75, 2: plain constants.
    c_.constants = {0.5, 0.2, 1.5, 0.5, -0.75, 2.0};
  }

  RandomCode Build(bool softmax) {
    const bool typed = Chance(0.35), dst = Chance(0.75), edge = Chance(0.6);
    LoadSrc();
    const int loads = static_cast<int>(Uniform(1, 4));
    for (int i = 0; i < loads; ++i) {
      const double r = Uniform01();
      if (typed && r < 0.3) {
        LoadTyped();
      } else if (dst && r < 0.55) {
        Load(kLoadDst, c_.dst_width);
      } else if (edge && r < 0.75) {
        Load(kLoadEdge, c_.edge_width);
      } else if (r < 0.85) {
        Emit(kConst, 0, 0, static_cast<int32_t>(Uniform(4, 5)));
      } else {
        LoadSrc();
      }
    }
    if (typed && !c_.reads[kLoadSrcTyped]) LoadTyped();
    const int ops = static_cast<int>(Uniform(4, 9));
    for (int i = 0; i < ops; ++i) Operation();
    const int n = Count();
    const int last = Emit(kAdd, n - 1, Emit(kMul, n - 2, n - 3, -1), -1);
    c_.value = last;
    if (softmax) c_.score = Chance(0.1) ? last : static_cast<int>(Uniform(n / 2, last - 1));
    c_.num_tables = static_cast<int64_t>(c_.tables.size()) / std::max<int64_t>(c_.width, 1);
    return c_;
  }

 private:
  int64_t Uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  double Uniform01() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  bool Chance(double p) { return Uniform01() < p; }
  int Count() const { return c_.num_instructions(); }

  int Emit(int op, int a, int b, int k) {
    c_.code.insert(c_.code.end(), {op, a, b, k});
    return Count() - 1;
  }
  // A register from the recent ones more often than from the first ones.
  int Pick() {
    const int n = Count();
    return static_cast<int>(Chance(0.6) ? Uniform(std::max(0, n - 3), n - 1) : Uniform(0, n - 1));
  }

  // A new table row over an operand row of `columns` columns: which column each feature reads.
  int32_t Table(int64_t columns) {
    const int64_t w = c_.width;
    std::vector<int32_t> row(w);
    const int kind = static_cast<int>(Uniform(0, 5));
    const int64_t heads = w % 2 == 0 ? 2 : 1, per_head = std::max<int64_t>(1, w / heads);
    for (int64_t f = 0; f < w; ++f) row[f] = 0;
    if (kind <= 1 && columns >= w) {  // identity or reversed, at an offset
      const int64_t o = Uniform(0, columns - w);
      for (int64_t f = 0; f < w; ++f) row[f] = static_cast<int32_t>(o + (kind == 0 ? f : w - 1 - f));
    } else if (kind == 2) {  // every feature reads one column (a broadcast scalar)
      const int64_t c = Uniform(0, columns - 1);
      for (int64_t f = 0; f < w; ++f) row[f] = static_cast<int32_t>(c);
    } else if (kind == 3 && columns >= heads) {  // a per-head scalar, broadcast over the head's features
      const int64_t o = Uniform(0, columns - heads);
      for (int64_t f = 0; f < w; ++f) row[f] = static_cast<int32_t>(o + std::min(f / per_head, heads - 1));
    } else if (kind == 4) {  // a short row repeated
      const int64_t m = std::min<int64_t>(columns, Uniform(1, 3)), o = Uniform(0, columns - m);
      for (int64_t f = 0; f < w; ++f) row[f] = static_cast<int32_t>(o + f % m);
    } else {
      for (int64_t f = 0; f < w; ++f) row[f] = static_cast<int32_t>(Uniform(0, columns - 1));
    }
    c_.tables.insert(c_.tables.end(), row.begin(), row.end());
    return static_cast<int32_t>(c_.tables.size() / std::max<int64_t>(w, 1) - 1);
  }

  int Load(int op, int64_t columns) {
    c_.reads[op] = true;
    return Emit(op, Table(columns), 0, -1);
  }
  int LoadSrc() { return Load(kLoadSrc, c_.src_width); }
  int LoadTyped() {
    c_.reads[kLoadSrcTyped] = true;
    return Emit(kLoadSrcTyped, Table(slot_), static_cast<int32_t>(slot_), -1);
  }
  int Const(int k) { return Emit(kConst, 0, 0, k); }
  // softplus(x) + 0.5 and sigmoid(x) + 0.5: positive arguments.
  int Positive(int x, bool sigmoid) {
    const int y = Emit(sigmoid ? kSigmoid : kSoftplus, x, 0, -1);
    return Emit(kAdd, y, Const(0), -1);
  }

  void Operation() {
    const int x = Pick();
    switch (Uniform(0, 11)) {
      case 0: case 1: case 2: {  // a unary op that takes any argument
        static const int kAny[] = {kNeg, kAbs, kSquare, kTanh, kSigmoid, kRelu, kElu, kSelu, kSoftplus, kSoftsign};
        Emit(kAny[Uniform(0, 9)], x, 0, -1);
        break;
      }
      case 3: Emit(kLeakyRelu, x, 0, 1); break;
      case 4: Emit(Chance(0.5) ? kSqrt : kRsqrt, Positive(x, false), 0, -1); break;
      case 5: Emit(Chance(0.5) ? kLog : kReciprocal, Positive(x, Chance(0.5)), 0, -1); break;
      case 6: Emit(kPowConst, Positive(x, true), 0, static_cast<int32_t>(Uniform(2, 3))); break;
      case 7: {
        const int r = static_cast<int>(Uniform(0, 2));
        if (r == 0) Emit(kExpm1, Emit(kTanh, x, 0, -1), 0, -1);
        if (r == 1) Emit(kLog1p, Emit(kSigmoid, x, 0, -1), 0, -1);
        if (r == 2) Emit(kExp, Emit(kNeg, Emit(kSquare, x, 0, -1), 0, -1), 0, -1);
        break;
      }
      case 8: Emit(kDiv, x, Positive(Pick(), false), -1); break;
      default: {  // a binary op that takes any arguments
        static const int kAny[] = {kAdd, kSub, kMul, kMaximum, kMinimum, kSquaredDifference};
        Emit(kAny[Uniform(0, 5)], x, Pick(), -1);
        break;
      }
    }
  }

  std::mt19937_64& rng_;
  RandomCode c_;
  int64_t slot_ = 1;
};

// ---- The operands, the CPU reference and the checks ----

template <typename U>
struct CodeData {
  std::vector<U> x_src, x_dst, edge, constants;
  std::vector<int32_t> type;
  std::vector<U> grad, init;  // shaped like the output of the reduce at hand

  template <typename V>
  CodeData<V> Cast() const {
    auto cast = [](const std::vector<U>& v) { return std::vector<V>(v.begin(), v.end()); };
    return CodeData<V>{cast(x_src), cast(x_dst), cast(edge), cast(constants), type, cast(grad), cast(init)};
  }
};

// A program's operands for one reduce and its CPU results on them: what the
// checks of that reduce compare with, computed once (when the program is
// drawn, to see that it is tame) and kept for them.
template <typename T, typename Index>
struct CodeReference {
  CodeData<T> d;
  std::vector<Index> arg;               // max/min: the winners
  std::vector<T> out;                   // the forward without init (softmax: its state)
  std::vector<T> grads[kLoadEdge + 1];  // by the side the loads read; empty where none
};

// The program over host data, for the CPU walks, with the per-table facts
// they read (contiguous, uniform) derived as the CPU kernel derives them.
template <typename U>
struct HostCode {
  EdgeCode<U> p;
  std::vector<int32_t> contiguous;
  std::vector<uint8_t> uniform;

  HostCode(const RandomCode& c, const CodeData<U>& d) {
    p.code = c.code.data();
    p.num_instructions = c.num_instructions();
    p.constants = d.constants.data();
    p.tables = c.tables.data();
    p.width = c.width;
    p.value = c.value;
    p.score = c.score;
    p.x_src = d.x_src.data();
    p.src_width = c.src_width;
    p.x_dst = c.reads[kLoadDst] ? d.x_dst.data() : nullptr;
    p.dst_width = c.reads[kLoadDst] ? c.dst_width : 0;
    p.edge = c.reads[kLoadEdge] ? d.edge.data() : nullptr;
    p.edge_width = c.reads[kLoadEdge] ? c.edge_width : 0;
    p.type = c.reads[kLoadSrcTyped] ? d.type.data() : nullptr;
    contiguous.assign(c.num_tables, -1);
    uniform.assign(c.num_tables, 0);
    for (int64_t t = 0; t < c.num_tables; ++t) {
      const int32_t* row = c.tables.data() + t * c.width;
      bool run = true, same = true;
      for (int64_t f = 0; f < c.width; ++f) {
        run = run && row[f] == row[0] + f;
        same = same && row[f] == row[0];
      }
      if (run && c.width > 0) contiguous[t] = row[0];
      uniform[t] = same && !run;
    }
    p.contiguous = contiguous.data();
    p.uniform = uniform.data();
  }
};

template <typename Runtime, typename T, typename Index>
struct CodeSetting {
  Runtime& rt;
  const Graph<Index>& g;
  gpu::WalkConfig config;
  Tally& tally;
  Segments<Index> csc_h, csr_h;
  int64_t max_degree = 1;  // of either side, at least 1 (Tame's bound)
  const Index *csc_indptr_d = nullptr, *csc_src_d = nullptr, *csr_indptr_d = nullptr, *csr_dst_d = nullptr,
              *csr_edge_d = nullptr;
  // The graph prepared once per chunk size (PrepareGraph); every other case
  // runs over it, and on a GPU the second run of each check takes the other path.
  std::map<int64_t, gpu::GraphPlan<Index>> plans;
  int cases = 0;

  bool Emulated() const { return std::strcmp(Runtime::kName, "emulated") == 0; }

  void Upload(const std::vector<int64_t>& chunks) {
    const int64_t E = g.num_edges;
    csc_h = Segments<Index>{g.csc_indptr.data(), E ? g.csc_src.data() : nullptr, nullptr, g.num_dst};
    csr_h = Segments<Index>{g.csr_indptr.data(), E ? g.csr_dst.data() : nullptr, E ? g.csr_edge.data() : nullptr,
                            g.num_src};
    for (const Segments<Index>* seg : {&csc_h, &csr_h}) {
      for (int64_t s = 0; s < seg->num_segments; ++s) max_degree = std::max<int64_t>(max_degree, seg->Degree(s));
    }
    csc_indptr_d = rt.Put(g.csc_indptr);
    csc_src_d = rt.Put(g.csc_src);
    csr_indptr_d = rt.Put(g.csr_indptr);
    csr_dst_d = rt.Put(g.csr_dst);
    csr_edge_d = rt.Put(g.csr_edge);
    const Segments<Index> csc_d{csc_indptr_d, E ? csc_src_d : nullptr, nullptr, g.num_dst};
    const Segments<Index> csr_d{csr_indptr_d, E ? csr_dst_d : nullptr, E ? csr_edge_d : nullptr, g.num_src};
    for (int64_t chunk : chunks) {
      const gpu::WalkConfig walk{chunk};
      Index* block = rt.template Garbage<Index>(gpu::PlanBytes<Index>(g.num_src, g.num_dst, E, walk) /
                                                static_cast<int64_t>(sizeof(Index)));
      std::string error = gpu::PrepareGraph(rt.backend(), csc_d, csr_d, E, block, walk);
      if (error.empty()) error = rt.Sync();
      tally.Record(std::string(Runtime::kName) + " edge code prepare graph chunk=" + std::to_string(chunk), error);
      plans[chunk] = gpu::PlanOf<Index>(block, g.num_src, g.num_dst, E, walk);
    }
  }

  template <typename Problem>
  Problem OtherPath(Problem problem) const {
    problem.plan = problem.plan.present() ? gpu::GraphPlan<Index>{} : plans.at(config.max_chunk);
    return problem;
  }

  // The operands of program c: values in [-1, 1], types of 3 slots; grad and
  // init shaped for `softmax` (init: a state with some empty rows) or not
  // (init on a 1/16 grid with a few NaNs, which must stick in max/min).
  CodeData<T> Data(const RandomCode& c, bool softmax, uint64_t seed) const {
    std::mt19937_64 engine(seed), *rng = &engine;
    CodeData<T> d;
    const int64_t rows = softmax ? 3 * c.width : c.width;
    d.x_src = RandomValues<T>(g.num_src * c.src_width, rng);
    d.x_dst = RandomValues<T>(g.num_dst * c.dst_width, rng);
    d.edge = RandomValues<T>(g.num_edges * c.edge_width, rng);
    d.constants.assign(c.constants.begin(), c.constants.end());
    std::uniform_int_distribution<int32_t> types(0, c.num_types - 1);
    d.type.resize(g.num_edges);
    for (int32_t& t : d.type) t = types(*rng);
    d.grad = RandomValues<T>(g.num_dst * rows, rng);
    if (softmax) {
      d.init.resize(g.num_dst * rows);
      std::uniform_real_distribution<double> acc(-2, 2), sum(0.5, 3), m(-1, 1);
      for (int64_t v = 0; v < g.num_dst; ++v) {
        const bool empty = v % 7 == 3;
        for (int64_t f = 0; f < c.width; ++f) {
          T* row = d.init.data() + v * rows;
          row[f] = empty ? T(0) : static_cast<T>(acc(*rng));
          row[c.width + f] = empty ? T(0) : static_cast<T>(sum(*rng));
          row[2 * c.width + f] = empty ? T(-INFINITY) : static_cast<T>(m(*rng));
        }
      }
    } else {
      d.init = GridValues<T>(g.num_dst * rows, rng);
      for (size_t i = 5; i < d.init.size(); i += 89) d.init[i] = T(NAN);
    }
    return d;
  }

  // The CPU forward pass (r: index into kCodeReduceNames), from d.init in place when with_init.
  template <typename U>
  std::vector<U> CpuForward(const RandomCode& c, const CodeData<U>& d, int r, bool with_init,
                            std::vector<Index>* arg) const {
    const HostCode<U> host(c, d);
    const int64_t n = g.num_dst * c.width * (r == 4 ? 3 : 1);
    std::vector<U> out = with_init ? d.init : std::vector<U>(n);
    U* init = with_init ? out.data() : nullptr;
    if (r == 4) {
      CpuRun(csc_h, [&](int64_t first, int64_t last) { CodeSoftmax<U, Index>(csc_h, host.p, g.num_src, first, last, out.data(), init); });
      return out;
    }
    arg->assign(r >= 2 ? n : 0, Index(0));
    gpu::WithReduce(static_cast<Reduce>(r), [&](auto red) {
      CpuRun(csc_h, [&](int64_t first, int64_t last) {
        CodeGather<decltype(red)::value, U, Index>(csc_h, host.p, g.num_src, first, last, out.data(),
                                                   r >= 2 ? arg->data() : nullptr, init);
      });
      return std::string();
    });
    return out;
  }

  // The CPU gradient w.r.t. the operand read by loads `side`, given the
  // forward's winners (max/min) or state (softmax).
  template <typename U>
  std::vector<U> CpuGrad(const RandomCode& c, const CodeData<U>& d, int r, int side, const std::vector<Index>& arg,
                         const std::vector<U>& state) const {
    const HostCode<U> host(c, d);
    const int64_t width = c.width;
    std::vector<U> g_up = d.grad;
    if (r == 1) {
      for (int64_t v = 0; v < g.num_dst; ++v) {
        const U scale = csc_h.Degree(v) > 0 ? U(1) / static_cast<U>(csc_h.Degree(v)) : U(0);
        for (int64_t f = 0; f < width; ++f) g_up[v * width + f] = d.grad[v * width + f] * scale;
      }
    }
    const int64_t rows = side == kLoadSrc ? g.num_src : side == kLoadDst ? g.num_dst : g.num_edges;
    const int64_t columns = side == kLoadSrc ? c.src_width : side == kLoadDst ? c.dst_width : c.edge_width;
    std::vector<U> out(rows * columns, U(0));
    auto run = [&](auto seed_tag) {
      constexpr Seed S = decltype(seed_tag)::value;
      const CodeSeed<S, U, Index> seed{g_up.data(), arg.empty() ? nullptr : arg.data(), state.empty() ? nullptr : state.data(),
                                       width};
      if (side == kLoadSrc) {
        CpuRun(csr_h, [&](int64_t first, int64_t last) {
          CodeGradSrc<S, U, Index>(csr_h, host.p, seed, first, last, out.data());
        });
      } else {
        CpuRun(csc_h, [&](int64_t first, int64_t last) {
          CodeGradDstOrEdge<S, U, Index>(csc_h, host.p, seed, side, first, last, out.data());
        });
      }
    };
    if (r == 4) {
      run(std::integral_constant<Seed, Seed::kSoftmax>{});
    } else if (r >= 2) {
      run(std::integral_constant<Seed, Seed::kWinner>{});
    } else {
      run(std::integral_constant<Seed, Seed::kWhole>{});
    }
    return out;
  }

  // Finite and at most 1e3 times the graph's largest degree in magnitude (a
  // hub's sum grows with its edges: a fixed bound refused every program on
  // the GPU's graphs, whose hubs have thousands); m = -inf (an empty softmax
  // row) when `empty` may be.
  bool Tame(const std::vector<T>& v, bool empty = false) const {
    const double bound = 1e3 * static_cast<double>(max_degree);
    for (T x : v) {
      if (!(std::fabs(static_cast<double>(x)) <= bound) && !(empty && x == T(-INFINITY))) return false;
    }
    return true;
  }

  // Whether every reference value and gradient (without init) is finite and moderate.
  bool Tame(const CodeReference<T, Index>& ref, int r) const {
    if (!Tame(ref.out, r == 4)) return false;
    for (const std::vector<T>& grad : ref.grads) {
      if (!Tame(grad)) return false;
    }
    return true;
  }

  // Program c's operands for reduce r (drawn from seed + r) and its CPU
  // forward and gradients on them (x_src's always, the others where c reads them).
  CodeReference<T, Index> Reference(const RandomCode& c, int r, uint64_t seed) const {
    CodeReference<T, Index> ref;
    ref.d = Data(c, r == 4, seed + r);
    ref.out = CpuForward(c, ref.d, r, false, &ref.arg);
    for (int side : {kLoadSrc, kLoadDst, kLoadEdge}) {
      if (side != kLoadSrc && !c.reads[side]) continue;
      ref.grads[side] = CpuGrad(c, ref.d, r, side, ref.arg, r == 4 ? ref.out : std::vector<T>());
    }
    return ref;
  }

  gpu::EdgeCodeInputs Inputs(const RandomCode& c, const CodeData<T>& d) {
    using gpu::TensorInfo;
    const int64_t E = g.num_edges;
    gpu::EdgeCodeInputs in;
    in.x_src = TensorInfo{rt.Put(d.x_src), {g.num_src, c.src_width}};
    in.x_dst = c.reads[kLoadDst] ? TensorInfo{rt.Put(d.x_dst), {g.num_dst, c.dst_width}} : TensorInfo{nullptr, {0, 0}};
    in.edge_data = c.reads[kLoadEdge] ? TensorInfo{rt.Put(d.edge), {E, c.edge_width}} : TensorInfo{nullptr, {0, 0}};
    in.edge_type = c.reads[kLoadSrcTyped] ? TensorInfo{rt.Put(d.type), {E}} : TensorInfo{nullptr, {0}};
    in.constants = TensorInfo{rt.Put(d.constants), {static_cast<int64_t>(d.constants.size())}};
    in.tables = TensorInfo{c.tables.data(), {c.num_tables, c.width}};  // on the host
    in.csc_indptr = TensorInfo{csc_indptr_d, {g.num_dst + 1}};
    in.csc_src = TensorInfo{csc_src_d, {E}};
    in.csr_indptr = TensorInfo{csr_indptr_d, {g.num_src + 1}};
    in.csr_dst = TensorInfo{csr_dst_d, {E}};
    in.csr_edge = TensorInfo{csr_edge_d, {E}};
    return in;
  }

  // Max/min on a GPU: where a winner differs from the CPU's, it must be an
  // edge of the element's segment whose message is within tolerance of the
  // CPU's extreme (or, with init, no edge).
  std::string CheckWinners(const RandomCode& c, const CodeData<T>& d, const std::vector<Index>& got,
                           const std::vector<Index>& want, const std::vector<T>& extreme, bool with_init) const {
    Timed timed(&g_phases.compare);
    std::unique_ptr<const CodeData<double>> exact;  // made at the first winner that differs
    std::unique_ptr<const HostCode<double>> host;
    std::vector<double> regs(kMaxInstructions);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      if (!host) {
        exact = std::make_unique<const CodeData<double>>(d.template Cast<double>());
        host = std::make_unique<const HostCode<double>>(c, *exact);
      }
      const int64_t v = static_cast<int64_t>(i) / c.width, f = static_cast<int64_t>(i) % c.width;
      const Index e = got[i];
      if (e == Index(kNoEdge) && with_init) continue;
      if (e < csc_h.Begin(v) || e >= csc_h.End(v)) {
        return "winner " + std::to_string(e) + " of element " + std::to_string(i) + " is not an edge of its segment";
      }
      EvalFeature(host->p, csc_h.Row(e), v, e, f, regs.data());
      const double message = regs[c.value], best = extreme[i];
      if (!(std::fabs(message - best) <= Tolerance<T>() * std::max(1.0, std::fabs(best)))) {
        return "winner " + std::to_string(e) + " of element " + std::to_string(i) + " is not an extreme";
      }
    }
    return "";
  }

  // Runs `run(got, other_path)`, twice on a GPU, the second time over the
  // other schedule path: it must agree bit for bit.
  template <typename U, typename Run>
  std::string Twice(Run&& run, std::vector<U>* got) {
    std::string error = run(got, false);
    if (error.empty() && !Emulated()) {
      std::vector<U> again;
      error = run(&again, true);
      if (error.empty()) error = CompareExact(again, *got);
      if (!error.empty()) error = "second run (other schedule path) differs: " + error;
    }
    return error;
  }

  // The entry points with the interpreter (on a GPU, the nvcc-built instances
  // linked in), or with another program policy (instantiated here: the
  // emulated half only, as this file is host C++).
  template <typename Make>
  std::string Forward(const gpu::EdgeCodeProblem<T, Index>& problem, T* out, Index* arg, const Make& make) {
    if constexpr (std::is_same_v<Make, gpu::Interpreted<T>>) {
      return gpu::RunEdgeCode(rt.backend(), problem, out, arg, config);
    } else {
      return gpu::RunEdgeCodeWith(rt.backend(), problem, out, arg, config, make);
    }
  }
  template <typename Make>
  std::string Grad(const gpu::EdgeCodeProblem<T, Index>& problem, gpu::Wrt which, const T* grad, const Index* arg,
                   const T* state, T* out, const Make& make) {
    if constexpr (std::is_same_v<Make, gpu::Interpreted<T>>) {
      return gpu::RunEdgeCodeGrad(rt.backend(), problem, which, grad, arg, state, out, config);
    } else {
      return gpu::RunEdgeCodeGradWith(rt.backend(), problem, which, grad, arg, state, out, config, make);
    }
  }

  // One program with reduce r: forward, forward from init, and the gradients,
  // with the program policy `make` gives (edge_code_programs.h), against
  // ref = Reference(c, r, ...).
  template <typename Make = gpu::Interpreted<T>>
  void Case(const RandomCode& c, int r, const std::string& base, const CodeReference<T, Index>& ref,
            const Make& make = Make{}) {
    const std::string name = base + " " + kCodeReduceNames[r];
    if (!Selected(name)) return;
    const size_t mark = rt.Mark();
    const bool softmax = r == 4, extreme = r == 2 || r == 3;
    const CodeData<T>& d = ref.d;
    const int64_t row = softmax ? 3 * c.width : c.width;
    const int64_t n = g.num_dst * row;
    gpu::EdgeCodeAttrs attrs;
    std::string error = gpu::ParseEdgeCodeAttrs(c.Attr(), c.value, c.score, kCodeReduceNames[r], &attrs);
    const gpu::EdgeCodeInputs inputs = Inputs(c, d);
    gpu::EdgeCodeProblem<T, Index> problem;
    if (error.empty()) {
      error = gpu::ValidateEdgeCode<typename Runtime::Backend, T, Index>(rt.backend(), attrs, inputs, false, &problem);
    }
    if (!error.empty()) {
      tally.Record(name + " validate", error + " for " + c.Describe());
      rt.Release(mark);
      return;
    }
    const bool planned = cases++ % 2 == 1;
    if (planned) problem.plan = plans.at(config.max_chunk);
    const std::string what = " (" + c.Describe() + ")";
    const std::vector<Index>& arg = ref.arg;
    const std::vector<T>& out = ref.out;
    for (int with_init = 0; with_init < (r == 1 ? 1 : 2); ++with_init) {
      std::vector<Index> want_arg;
      const std::vector<T> want = with_init ? CpuForward(c, d, r, true, &want_arg) : out;
      if (!with_init) want_arg = arg;
      std::vector<Index> got_arg;
      auto forward = [&](std::vector<T>* got, bool other_path) {
        T* o = with_init ? rt.Put(d.init) : rt.template Garbage<T>(n);
        Index* a = extreme ? rt.template Garbage<Index>(n) : nullptr;
        gpu::EdgeCodeProblem<T, Index> at = other_path ? OtherPath(problem) : problem;
        at.init = with_init ? o : nullptr;
        std::string e = Forward(at, o, a, make);
        if (e.empty()) e = rt.Sync();
        *got = rt.Get(o, n);
        if (extreme) got_arg = rt.Get(a, n);
        return e;
      };
      std::vector<T> got;
      std::string e = Twice<T>(forward, &got);
      if (e.empty() && extreme && Emulated()) {
        e = CompareExact(got, want);
        if (e.empty()) e = CompareExact(got_arg, want_arg);
        if (!e.empty()) e = "(max/min must be exact) " + e;
      } else if (e.empty() && extreme) {
        e = CompareClose(got, want, row);
        if (e.empty()) e = CheckWinners(c, d, got_arg, want_arg, want, with_init);
      } else if (e.empty()) {
        e = CompareSums(got, want, row, tally, [&] {
          std::vector<Index> unused;
          return CpuForward(c, d.template Cast<double>(), r, with_init, &unused);
        });
      }
      tally.Record(name + (with_init ? " init forward" : " forward"), e.empty() ? e : e + what);
    }

    // Gradients, fed the CPU's winners or state.
    const Index* arg_d = extreme ? rt.Put(arg) : nullptr;
    const T* state_d = softmax ? rt.Put(out) : nullptr;
    const T* grad_d = rt.Put(d.grad);
    const gpu::TensorInfo grad_info{grad_d, {g.num_dst, row}};
    const gpu::TensorInfo aux_info = extreme ? gpu::TensorInfo{arg_d, {g.num_dst, row}} : gpu::TensorInfo{nullptr, {0}};
    const gpu::TensorInfo state_info = softmax ? gpu::TensorInfo{state_d, {g.num_dst, row}} : gpu::TensorInfo{nullptr, {0}};
    for (int side : {kLoadSrc, kLoadDst, kLoadEdge}) {
      if (side != kLoadSrc && !c.reads[side]) continue;
      const char* wrt = side == kLoadSrc ? "x_src" : side == kLoadDst ? "x_dst" : "edge_data";
      const std::string grad_name = name + " d/d" + wrt;
      gpu::Wrt which = gpu::Wrt::kXSrc;
      gpu::EdgeCodeProblem<T, Index> gp;
      std::string e = gpu::ValidateEdgeCodeGrad<typename Runtime::Backend, T, Index>(
          rt.backend(), attrs, wrt, grad_info, aux_info, state_info, inputs, &gp, &which);
      if (planned) gp.plan = plans.at(config.max_chunk);
      const std::vector<T>& want = ref.grads[side];
      const int64_t columns = side == kLoadSrc ? c.src_width : side == kLoadDst ? c.dst_width : c.edge_width;
      auto grad = [&](std::vector<T>* got, bool other_path) {
        T* o = rt.template Garbage<T>(static_cast<int64_t>(want.size()));
        std::string e2 = Grad(other_path ? OtherPath(gp) : gp, which, grad_d, arg_d, state_d, o, make);
        if (e2.empty()) e2 = rt.Sync();
        *got = rt.Get(o, static_cast<int64_t>(want.size()));
        return e2;
      };
      std::vector<T> got;
      if (e.empty()) e = Twice<T>(grad, &got);
      if (e.empty()) {
        e = CompareSums(got, want, columns, tally, [&] {
          const CodeData<double> exact = d.template Cast<double>();
          const std::vector<double> exact_state = softmax ? std::vector<double>(out.begin(), out.end())
                                                          : std::vector<double>();
          return CpuGrad(c, exact, r, side, arg, exact_state);
        });
      }
      tally.Record(grad_name, e.empty() ? e : e + what);
    }
    rt.Release(mark);
  }
};

// c as reduce r runs it: programs without softmax read no score (-1).
inline RandomCode ForReduce(RandomCode c, int r) {
  if (r != 4) c.score = -1;
  return c;
}

// `programs` random programs on graph g, each with every reduce; chunks
// alternate between the given ones (the first splits the hubs).
template <typename Runtime, typename T, typename Index>
void EdgeCodeChecks(Runtime& rt, const Graph<Index>& g, int programs, const std::vector<int64_t>& widths,
                    const std::vector<int64_t>& chunks, uint64_t seed, const std::string& prefix, Tally& tally) {
  CodeSetting<Runtime, T, Index> s{rt, g, gpu::WalkConfig{}, tally};
  s.Upload(chunks);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < programs; ++i) {
    const int64_t width = widths[i % widths.size()];
    s.config = gpu::WalkConfig{chunks[i % chunks.size()]};
    // Drawn again while its values or gradients on its data (seeded by
    // data_seed, the same in the checks) are out of range.
    RandomCode c;
    std::vector<CodeReference<T, Index>> refs;  // by reduce
    for (int attempt = 0;; ++attempt) {
      CodeBuilder builder(&rng, width);
      c = builder.Build(true);
      const uint64_t data_seed = rng();
      const bool last = attempt == 20;  // then checked however wild
      bool tame = true;
      refs.clear();
      for (int r = 0; r < 5 && (tame || last); ++r) {
        refs.push_back(s.Reference(ForReduce(c, r), r, data_seed));
        tame = tame && s.Tame(refs.back(), r);
      }
      if (tame || last) break;
    }
    const std::string base = prefix + " edge_code #" + std::to_string(i) + " d=" + std::to_string(width) +
                             " chunk=" + std::to_string(s.config.max_chunk);
    for (int r = 0; r < 5; ++r) s.Case(ForReduce(c, r), r, base, refs[r]);
  }
  rt.Reset();
}

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_EDGE_CODE_H_
