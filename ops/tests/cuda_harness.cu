// Standalone harness for the GPU kernels (no TensorFlow): runs every GPU
// entry point (ops/cuda/api.h) and the CPU kernels (ops/kernels) on the same
// random graphs and compares them. Edge code (NgraEdgeCode and its
// gradients) is checked on random programs: harness_edge_code.h.
//
//   emulated: the GPU algorithm through HostEmulation (any machine; CI runs it)
//   gpu:      on CUDA device 0 (builds with NGRA_HARNESS_GPU=1, linked with the
//             nvcc-compiled kernels, and a GPU present); also checks that two
//             runs agree bit for bit and that the device-built schedule equals
//             the host-built one
//
// Each width's data is drawn once and each case's CPU reference computed
// once, then compared with the GPU's result on every walk (chunk size) in
// turn; an edge program's references are the ones that showed it tame. The
// comparisons run on all cores: on a GPU the host's work is the slow side.
// Device buffers come from an arena whose guards every Sync checks
// (harness_runtime.h); the first groups check the comparisons and the arena.
//
// The harness itself is host C++: build it with tools/build_cuda.py --harness
// (or, emulated half only, with any C++17 compiler: g++ -x c++).
//
// Tolerances: sums, means and gradients may differ by float reassociation
// (split segments are summed in chunks) and FMA contraction, so they are
// compared per row, relative to the row's largest magnitude (1e-4 float,
// 1e-10 double). Max/min values and winning edge ids must be identical,
// except for gate_sigmoid and gate_tanh, whose exp/tanh differ by an ulp
// between the host's libm and CUDA's: there the winner must be an edge of
// the segment whose message is within tolerance of the CPU's extreme.
//
// Usage: cuda_harness [--mode=emulated|gpu|all] [--filter=SUBSTRING] [--quick] [--large] [--exact-buffers]
//   --large: the emulated half on the GPU half's graphs (hubs of 40,000
//            edges), to reproduce a GPU result on a machine without one (slow:
//            narrow it with --filter).
//   --exact-buffers: each device buffer its own allocation of its size (for
//            compute-sanitizer's memcheck), not carved from the arena's slabs.
// Prints "N passed, M failed"; exits 1 on any failure, 2 on bad usage.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/backend_host.h"
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/instances.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"
#include "ops/kernels/propagate.h"
#include "ops/tests/harness_bad_input.h"
#include "ops/tests/harness_check.h"
#include "ops/tests/harness_edge_code.h"
#include "ops/tests/harness_graph.h"
#include "ops/tests/harness_runtime.h"

namespace ngra {
#if NGRA_HARNESS_GPU
namespace gpu {
// The GPU instances are compiled in ops/cuda/*_gpu.cu.cc and linked in; the
// emulated ones are instantiated here, where they are used.
NGRA_GPU_INSTANCES_ALL(extern, GpuStream)
}  // namespace gpu
#endif

namespace harness {
namespace {

using gpu::FusedProblem;
using gpu::ProgramId;
using gpu::WalkConfig;
using gpu::Wrt;

const char* const kProgramNames[] = {"copy_src",     "src_mul_edge", "src_add_dst", "src_sub_dst", "src_mul_dst",
                                     "gate_sigmoid", "gate_tanh",    "gate_relu",   "type_select"};
const char* const kReduceNames[] = {"sum", "mean", "max", "min"};
const char* const kWeightNames[] = {"none", "scalar", "vector", "block"};

// Messages are bit-identical on host and device unless they go through exp or tanh.
bool ExactMessages(ProgramId p) { return p != ProgramId::kGateSigmoid && p != ProgramId::kGateTanh; }

// ---- One test setting: a graph and its data on the host and the device ----

// The operand values of a setting on the host, in one value type.
template <typename U>
struct HostData {
  std::vector<U> x_src[4];  // by slot count 1..3
  std::vector<U> x_dst, w_scalar, w_vector, w_block, grad;
  std::vector<U> init;  // [num_dst, width]: an initial accumulator
  std::vector<int32_t> type;

  template <typename V>
  HostData<V> Cast() const {
    auto cast = [](const std::vector<U>& v) { return std::vector<V>(v.begin(), v.end()); };
    HostData<V> h;
    for (int i = 0; i < 4; ++i) h.x_src[i] = cast(x_src[i]);
    h.x_dst = cast(x_dst);
    h.w_scalar = cast(w_scalar);
    h.w_vector = cast(w_vector);
    h.w_block = cast(w_block);
    h.grad = cast(grad);
    h.init = cast(init);
    h.type = type;
    return h;
  }

  template <typename P, WeightKind K>
  Operands<U> OperandsOf(int slots, int64_t width, int64_t heads) const {
    Operands<U> in;
    in.x_src = x_src[slots].data();
    in.src_slots = slots;
    in.width = width;
    if (P::kUsesDst) in.x_dst = x_dst.data();
    if (K == WeightKind::kScalar) {
      in.weight = w_scalar.data();
      in.weight_width = 1;
    } else if (K == WeightKind::kVector) {
      in.weight = w_vector.data();
      in.weight_width = width;
    } else if (K == WeightKind::kBlock) {
      in.weight = w_block.data();
      in.weight_width = heads;
    }
    if (P::kUsesType) in.type = type.data();
    return in;
  }
};


// One way the GPU walks a graph: its configuration (the largest chunk a hub
// is split into), the graph prepared for it, and the prefix that names its
// checks ("gpu float/int32 d=128 chunk=16", what --filter matches).
template <typename Index>
struct Walk {
  WalkConfig config;
  std::string prefix;
  gpu::GraphPlan<Index> plan;
};

// A setting checks every op at one width against every walk: each case's CPU
// reference is computed once and compared with each walk's result.
template <typename Runtime, typename T, typename Index>
struct Setting {
  Runtime& rt;
  const Graph<Index>& g;
  int64_t width;
  std::vector<Walk<Index>> walks;
  Tally& tally;
  std::mt19937_64 rng;

  // Host data (the CPU kernels read these), its float64 copy (made when a
  // float comparison needs the exact answer), and device copies.
  HostData<T> host;
  std::unique_ptr<HostData<double>> exact;
  int64_t heads = 1;
  Segments<Index> csc_h, csr_h, csc_d, csr_d;
  const T* x_src_d[4] = {};
  const T *x_dst_d = nullptr, *w_scalar_d = nullptr, *w_vector_d = nullptr, *w_block_d = nullptr, *grad_d = nullptr;
  const T* init_d = nullptr;
  const int32_t* type_d = nullptr;
  // Each walk's graph is prepared once (PrepareGraph, Walk::plan); a case
  // runs over the plan on every other walk, and on a GPU the second run of
  // each check takes the other path.
  int programs = 0;

  void Upload() {
    const int64_t E = g.num_edges;
    HostData<T>& h = host;
    for (int slots = 1; slots <= 3; ++slots) {
      h.x_src[slots] = GridValues<T>(g.num_src * slots * width, &rng);
      x_src_d[slots] = rt.Put(h.x_src[slots]);
    }
    h.x_dst = GridValues<T>(g.num_dst * width, &rng);
    h.w_scalar = RandomValues<T>(E, &rng, 0.25, 2.0);
    h.w_vector = RandomValues<T>(E * width, &rng, -1.0, 1.0);
    heads = width % 4 == 0 ? 4 : width % 2 == 0 ? 2 : 1;
    h.w_block = RandomValues<T>(E * heads, &rng, -1.0, 1.0);
    h.grad = RandomValues<T>(g.num_dst * width, &rng);
    // On the messages' grid, so that init ties with them and often wins
    // (always in empty segments); a few NaNs, which must stick.
    h.init = GridValues<T>(g.num_dst * width, &rng);
    for (size_t i = 5; i < h.init.size(); i += 89) h.init[i] = T(NAN);
    std::uniform_int_distribution<int32_t> t3(0, 2);
    h.type.resize(E);
    for (int32_t& t : h.type) t = t3(rng);
    x_dst_d = rt.Put(h.x_dst);
    w_scalar_d = rt.Put(h.w_scalar);
    w_vector_d = rt.Put(h.w_vector);
    w_block_d = rt.Put(h.w_block);
    grad_d = rt.Put(h.grad);
    init_d = rt.Put(h.init);
    type_d = rt.Put(h.type);
    exact.reset();
    csc_h = Segments<Index>{g.csc_indptr.data(), E ? g.csc_src.data() : nullptr, nullptr, g.num_dst};
    csr_h = Segments<Index>{g.csr_indptr.data(), E ? g.csr_dst.data() : nullptr, E ? g.csr_edge.data() : nullptr,
                            g.num_src};
    csc_d = Segments<Index>{rt.Put(g.csc_indptr), E ? rt.Put(g.csc_src) : nullptr, nullptr, g.num_dst};
    csr_d = Segments<Index>{rt.Put(g.csr_indptr), E ? rt.Put(g.csr_dst) : nullptr, E ? rt.Put(g.csr_edge) : nullptr,
                            g.num_src};
    for (Walk<Index>& walk : walks) {
      Index* block = rt.template Garbage<Index>(gpu::PlanBytes<Index>(g.num_src, g.num_dst, E, walk.config) /
                                                static_cast<int64_t>(sizeof(Index)));
      std::string error = gpu::PrepareGraph(rt.backend(), csc_d, csr_d, E, block, walk.config);
      if (error.empty()) error = rt.Sync();
      tally.Record(walk.prefix + " prepare graph", error);
      walk.plan = gpu::PlanOf<Index>(block, g.num_src, g.num_dst, E, walk.config);
    }
  }

  // The walks that run the check named by `what` after their prefix.
  std::vector<const Walk<Index>*> WalksFor(const std::string& what) const {
    std::vector<const Walk<Index>*> chosen;
    for (const Walk<Index>& walk : walks) {
      if (Selected(walk.prefix + what)) chosen.push_back(&walk);
    }
    return chosen;
  }

  // problem over the other path of `walk`: the plan's schedules, or its own.
  template <typename Problem>
  Problem OtherPath(Problem problem, const Walk<Index>& walk) const {
    problem.plan = problem.plan.present() ? gpu::GraphPlan<Index>{} : walk.plan;
    return problem;
  }

  const HostData<double>& Exact() {
    if (!exact) exact = std::make_unique<HostData<double>>(host.template Cast<double>());
    return *exact;
  }

  // The operands of a program with weight kind K, on the host or the device.
  template <typename P, WeightKind K, typename U>
  Operands<U> HostOperands(const HostData<U>& h) const {
    const int slots = P::kUsesType ? 3 : P::kSrcParts;
    return h.template OperandsOf<P, K>(slots, width, heads);
  }
  template <typename P, WeightKind K>
  Operands<T> DeviceOperands() const {
    const int slots = P::kUsesType ? 3 : P::kSrcParts;
    Operands<T> in;
    in.x_src = x_src_d[slots];
    in.src_slots = slots;
    in.width = width;
    if (P::kUsesDst) in.x_dst = x_dst_d;
    if (K == WeightKind::kScalar) {
      in.weight = w_scalar_d;
      in.weight_width = 1;
    } else if (K == WeightKind::kVector) {
      in.weight = w_vector_d;
      in.weight_width = width;
    } else if (K == WeightKind::kBlock) {
      in.weight = w_block_d;
      in.weight_width = heads;
    }
    if (P::kUsesType) in.type = type_d;
    return in;
  }

  // ---- The CPU reference, in T or in float64 ----

  // with_init: starting from h.init, into a copy of it (in place, as TF runs
  // it when the output takes over init's buffer).
  template <typename P, Reduce R, WeightKind K, typename U>
  std::vector<U> CpuForward(const HostData<U>& h, std::vector<Index>* arg, bool with_init = false) const {
    constexpr bool kExtreme = Reducer<R>::kTracksArg;
    const int64_t n = g.num_dst * width;
    const Operands<U> in = HostOperands<P, K>(h);
    std::vector<U> out = with_init ? h.init : std::vector<U>(n);
    if (kExtreme) arg->resize(n);
    CpuRun(csc_h, [&](int64_t first, int64_t last) {
      FusedGather<P, R, K>(csc_h, in, g.num_src, first, last, out.data(), kExtreme ? arg->data() : nullptr,
                           with_init ? out.data() : nullptr);
    });
    return out;
  }

  // The gradient w.r.t. `wrt` given the winners `arg` (max/min); *row is the
  // length of one row of the result (for the per-row tolerance).
  template <typename P, Reduce R, WeightKind K, typename U>
  std::vector<U> CpuGrad(const HostData<U>& h, Wrt wrt, const std::vector<Index>& arg, int64_t* row) const {
    constexpr bool kArg = Reducer<R>::kTracksArg;
    const Operands<U> in = HostOperands<P, K>(h);
    // Mean spreads each output's gradient over its segment (as the CPU op does).
    std::vector<U> up = h.grad;
    if (R == Reduce::kMean) {
      for (int64_t v = 0; v < g.num_dst; ++v) {
        const U scale = csc_h.Degree(v) > 0 ? U(1) / static_cast<U>(csc_h.Degree(v)) : U(0);
        for (int64_t f = 0; f < width; ++f) up[v * width + f] = h.grad[v * width + f] * scale;
      }
    }
    const EdgeGrad<kArg, U, Index> eg{up.data(), kArg ? arg.data() : nullptr, width, g.num_dst};
    std::vector<U> want;
    if (wrt == Wrt::kXSrc) {
      *row = in.src_slots * width;
      want.assign(g.num_src * *row, U(0));
      CpuRun(csr_h, [&](int64_t first, int64_t last) {
        FusedGatherGradSrc<P, kArg, K>(csr_h, in, eg, first, last, want.data());
      });
    } else if (wrt == Wrt::kXDst) {
      *row = width;
      want.assign(g.num_dst * width, U(0));
      if constexpr (P::kUsesDst) {
        CpuRun(csc_h, [&](int64_t first, int64_t last) {
          FusedGatherGradDst<P, kArg, K>(csc_h, in, g.num_src, eg, first, last, want.data());
        });
      }
    } else {
      *row = in.weight_width;
      want.assign(g.num_edges * *row, U(0));
      if constexpr (P::kUsesWeight) {
        CpuRun(csc_h, [&](int64_t first, int64_t last) {
          FusedGatherGradWeight<P, kArg, K>(csc_h, in, eg, first, last, want.data());
        });
      }
    }
    return want;
  }

  bool Deterministic() const { return std::strcmp(Runtime::kName, "gpu") == 0; }

  // ---- fused_gather, forward and gradients ----

  template <typename P, Reduce R, WeightKind K>
  void Fused(ProgramId id) {
    const std::string what = std::string(" fused ") + kProgramNames[static_cast<int>(id)] + " " +
                             kReduceNames[static_cast<int>(R)] + " " + kWeightNames[static_cast<int>(K)];
    const std::vector<const Walk<Index>*> chosen = WalksFor(what);
    if (chosen.empty()) return;
    const size_t mark = rt.Mark();  // this case's device buffers go at the end
    struct Release {
      Runtime& rt;
      size_t mark;
      ~Release() { rt.Release(mark); }
    } release{rt, mark};
    constexpr bool kExtreme = Reducer<R>::kTracksArg;
    const Operands<T> in = HostOperands<P, K>(host);

    FusedProblem<T, Index> problem;
    problem.program = id;
    problem.reduce = R;
    problem.weight_kind = K;
    problem.in = DeviceOperands<P, K>();
    problem.csc = csc_d;
    problem.csr = csr_d;
    problem.num_src = g.num_src;
    problem.num_dst = g.num_dst;
    problem.num_edges = g.num_edges;
    // What each walk runs: the problem, over the walk's plan on every other walk.
    std::vector<FusedProblem<T, Index>> problems(chosen.size(), problem);
    for (size_t w = 0; w < chosen.size(); ++w) {
      if ((programs + w) % 2 == 1) problems[w].plan = chosen[w]->plan;
    }
    ++programs;

    std::vector<Index> arg;
    const std::vector<T> out = CpuForward<P, R, K>(host, &arg);
    for (size_t w = 0; w < chosen.size(); ++w) {
      tally.Record(chosen[w]->prefix + what + " forward",
                   FusedForward<P, R, K>(id, problems[w], *chosen[w], in, out, arg, false));
    }

    // Gradients, with the CPU's winners for max/min on both sides.
    const Index* arg_d = kExtreme ? rt.Put(arg) : nullptr;
    FusedGrad<P, R, K>(what, Wrt::kXSrc, chosen, problems, arg, arg_d);
    if constexpr (P::kUsesDst) FusedGrad<P, R, K>(what, Wrt::kXDst, chosen, problems, arg, arg_d);
    if constexpr (P::kUsesWeight) FusedGrad<P, R, K>(what, Wrt::kEdgeWeight, chosen, problems, arg, arg_d);

    // From an initial accumulator (not with mean), in place on both sides.
    // The gradients do not read init: the ones above cover them.
    if constexpr (R != Reduce::kMean) {
      std::vector<Index> init_arg;
      const std::vector<T> init_out = CpuForward<P, R, K>(host, &init_arg, true);
      for (size_t w = 0; w < chosen.size(); ++w) {
        tally.Record(chosen[w]->prefix + what + " init forward",
                     FusedForward<P, R, K>(id, problems[w], *chosen[w], in, init_out, init_arg, true));
      }
    }
  }

  // Runs the GPU forward pass of `problem` on `walk` (from init, in place,
  // when with_init) and compares it with the CPU's out / arg.
  template <typename P, Reduce R, WeightKind K>
  std::string FusedForward(ProgramId id, const FusedProblem<T, Index>& problem, const Walk<Index>& walk,
                           const Operands<T>& in, const std::vector<T>& out, const std::vector<Index>& arg,
                           bool with_init) {
    constexpr bool kExtreme = Reducer<R>::kTracksArg;
    const int64_t n = g.num_dst * width;
    auto forward = [&](std::vector<T>* got, std::vector<Index>* got_arg, bool other_path = false) {
      T* o = with_init ? rt.Put(host.init) : rt.template Garbage<T>(n);
      FusedProblem<T, Index> p = other_path ? OtherPath(problem, walk) : problem;
      p.init = with_init ? o : nullptr;
      Index* a = kExtreme ? rt.template Garbage<Index>(n) : nullptr;
      std::string error = gpu::RunFusedGather(rt.backend(), p, o, a, walk.config);
      if (error.empty()) error = rt.Sync();
      *got = rt.Get(o, n);
      if (kExtreme) *got_arg = rt.Get(a, n);
      return error;
    };
    std::vector<T> got;
    std::vector<Index> got_arg;
    std::string error = forward(&got, &got_arg);
    if (error.empty()) {
      if (!kExtreme) {
        error = CompareSums(got, out, width, tally, [&] {
          std::vector<Index> unused;
          return CpuForward<P, R, K>(Exact(), &unused, with_init);
        });
      } else if (ExactMessages(id)) {
        error = CompareExact(got, out);
        if (error.empty()) error = CompareExact(got_arg, arg);
        if (!error.empty()) error = "(max/min must be exact) " + error;
      } else {
        error = CompareClose(got, out, width);
        if (error.empty()) error = CheckWinners<P, K>(in, got_arg, out, with_init ? host.init.data() : nullptr);
      }
    }
    if (error.empty() && Deterministic()) {
      std::vector<T> again;
      std::vector<Index> again_arg;
      error = forward(&again, &again_arg, true);
      if (error.empty()) error = CompareExact(again, got);
      if (error.empty() && kExtreme) error = CompareExact(again_arg, got_arg);
      if (!error.empty()) error = "second run (other schedule path) differs: " + error;
    }
    return error;
  }

  // For inexact programs: each winner is an edge of its segment whose CPU
  // message is within tolerance of the CPU's extreme, or kNoEdge where init
  // (when given) is, or for an empty segment without init.
  template <typename P, WeightKind K>
  std::string CheckWinners(const Operands<T>& in, const std::vector<Index>& got_arg, const std::vector<T>& want,
                           const T* init) {
    Timed timed(&g_phases.compare);
    auto close = [&](T m, int64_t i) {
      return SameValue(m, want[i]) ||
             std::fabs(double(m) - double(want[i])) <= Tolerance<T>() * std::max(1.0, std::fabs(double(want[i])));
    };
    return FirstError(g.num_dst, width, [&](int64_t v) -> std::string {
      for (int64_t f = 0; f < width; ++f) {
        const int64_t i = v * width + f;
        const Index e = got_arg[i];
        if (e == kNoEdge) {
          if (init != nullptr ? !close(init[i], i) : csc_h.Degree(v) != 0) {
            return "element " + std::to_string(i) + " has no winning edge but is not init's value or empty";
          }
          continue;
        }
        if (e < csc_h.Begin(v) || e >= csc_h.End(v)) return "winner " + std::to_string(e) + " is not an edge of " + std::to_string(v);
        const T* src = in.x_src + in.template SrcOffset<P>(csc_h.Row(e), e);
        const T* t = P::kUsesDst ? in.x_dst + v * width : nullptr;
        const T m = P::Message(src, t, EdgeWeight<K>(in, e), f, width);
        if (!close(m, i)) {
          return "winner " + std::to_string(e) + " of element " + std::to_string(i) + " is not an extreme";
        }
      }
      return "";
    });
  }

  // The gradient w.r.t. `wrt` on each chosen walk against one CPU reference.
  template <typename P, Reduce R, WeightKind K>
  void FusedGrad(const std::string& what, Wrt wrt, const std::vector<const Walk<Index>*>& chosen,
                 const std::vector<FusedProblem<T, Index>>& problems, const std::vector<Index>& arg,
                 const Index* arg_d) {
    const char* wrt_name = wrt == Wrt::kXSrc ? "x_src" : wrt == Wrt::kXDst ? "x_dst" : "edge_weight";
    int64_t row = width;
    const std::vector<T> want = CpuGrad<P, R, K>(host, wrt, arg, &row);
    const int64_t n = static_cast<int64_t>(want.size());
    std::vector<double> exact;  // the float64 reference, made when a comparison first needs it
    for (size_t w = 0; w < chosen.size(); ++w) {
      const Walk<Index>& walk = *chosen[w];
      auto run = [&](std::vector<T>* got, bool other_path = false) {
        T* o = rt.template Garbage<T>(n);
        std::string error = gpu::RunFusedGatherGrad(
            rt.backend(), other_path ? OtherPath(problems[w], walk) : problems[w], wrt, grad_d, arg_d, o, walk.config);
        if (error.empty()) error = rt.Sync();
        *got = rt.Get(o, n);
        return error;
      };
      std::vector<T> got;
      std::string error = run(&got);
      if (error.empty()) {
        error = CompareSums(got, want, row, tally, [&]() -> const std::vector<double>& {
          int64_t unused = 0;
          if (exact.empty() && n > 0) exact = CpuGrad<P, R, K>(Exact(), wrt, arg, &unused);
          return exact;
        });
      }
      if (error.empty() && Deterministic()) {
        std::vector<T> again;
        error = run(&again, true);
        if (error.empty()) error = CompareExact(again, got);
        if (!error.empty()) error = "second run (other schedule path) differs: " + error;
      }
      tally.Record(walk.prefix + what + " d/d" + wrt_name, error);
    }
  }

  void AllFused() {
    for (int id = 0; id < 9; ++id) {
      gpu::WithProgram(static_cast<ProgramId>(id), [&](auto p) {
        using P = decltype(p);
        for (int r = 0; r < 4; ++r) {
          gpu::WithReduce(static_cast<Reduce>(r), [&](auto red) {
            constexpr Reduce R = decltype(red)::value;
            if constexpr (P::kUsesWeight) {
              Fused<P, R, WeightKind::kScalar>(static_cast<ProgramId>(id));
              Fused<P, R, WeightKind::kVector>(static_cast<ProgramId>(id));
              if (heads > 1) Fused<P, R, WeightKind::kBlock>(static_cast<ProgramId>(id));
            } else {
              Fused<P, R, WeightKind::kNone>(static_cast<ProgramId>(id));
            }
            return std::string();
          });
        }
        return std::string();
      });
    }
  }

  // ---- gather, scatter, gather_grad_arg ----

  // One gather (and for max its gradient, fed the CPU's winners) on each
  // chosen walk against the CPU kernel. With init, the CPU runs both out of
  // place and in place (into a copy of init), which must agree bit for bit,
  // and the GPU in place.
  void GatherCase(Reduce reduce, bool with_init, const Segments<Index>& seg_h, const Segments<Index>& seg_d,
                  const std::vector<T>& values, const T* values_d, const std::string& what,
                  const std::vector<const Walk<Index>*>& chosen) {
    const int64_t E = g.num_edges, n = g.num_dst * width;
    const bool extreme = reduce == Reduce::kMax || reduce == Reduce::kMin;
    Operands<T> in;
    in.x_src = values.data();
    in.width = width;
    auto cpu = [&](T* out, Index* arg, const T* init) {
      gpu::WithReduce(reduce, [&](auto red) {
        CpuRun(seg_h, [&](int64_t first, int64_t last) {
          FusedGather<CopySrc, decltype(red)::value, WeightKind::kNone>(seg_h, in, E, first, last, out, arg, init);
        });
        return std::string();
      });
    };
    std::vector<T> want(n);
    std::vector<Index> want_arg(extreme ? n : 0);
    cpu(want.data(), want_arg.data(), with_init ? host.init.data() : nullptr);
    std::string cpu_error;
    if (with_init) {
      std::vector<T> in_place = host.init;
      std::vector<Index> in_place_arg(want_arg.size());
      cpu(in_place.data(), in_place_arg.data(), in_place.data());
      cpu_error = CompareExact(in_place, want);
      if (cpu_error.empty()) cpu_error = CompareExact(in_place_arg, want_arg);
      if (!cpu_error.empty()) cpu_error = "CPU in place differs: " + cpu_error;
    }
    const Index* want_arg_d = extreme ? rt.Put(want_arg) : nullptr;
    for (const Walk<Index>* walk : chosen) {
      T* o = with_init ? rt.Put(host.init) : rt.template Garbage<T>(n);
      Index* a = extreme ? rt.template Garbage<Index>(n) : nullptr;
      std::string error = cpu_error;
      if (error.empty()) {
        error = gpu::RunGather(rt.backend(), reduce, seg_d, E, values_d, width, with_init ? o : nullptr, o, a,
                               walk->config);
      }
      if (error.empty()) error = rt.Sync();
      if (error.empty()) error = extreme ? CompareExact(rt.Get(o, n), want) : CompareClose(rt.Get(o, n), want, width);
      if (error.empty() && extreme) error = CompareExact(rt.Get(a, n), want_arg);
      tally.Record(walk->prefix + what, error);
    }

    const char* ids_name = seg_h.edge_ids ? " edge_ids" : " identity";
    if (with_init && extreme) {  // d/d init: the gradient where init won, in place (walks do not enter)
      const std::string init_what = std::string(" init_grad ") + kReduceNames[static_cast<int>(reduce)] + ids_name;
      const std::vector<const Walk<Index>*> init_walks = WalksFor(init_what);
      if (!init_walks.empty()) {
        std::vector<T> want_init(n);
        InitGrad(host.grad.data(), want_arg.data(), 0, n, want_init.data());
        T* gi = rt.Put(host.grad);
        std::string error = gpu::RunInitGrad(rt.backend(), gi, want_arg_d, n, gi);
        if (error.empty()) error = rt.Sync();
        if (error.empty()) error = CompareExact(rt.Get(gi, n), want_init);
        tally.Record(init_walks[0]->prefix + init_what, error);
      }
    }
    if (reduce == Reduce::kMax) {  // elements init won get no edge gradient
      const std::string grad_what = std::string(" gather_grad_arg") + ids_name + (with_init ? " init" : "");
      const std::vector<const Walk<Index>*> grad_walks = WalksFor(grad_what);
      if (grad_walks.empty()) return;
      std::vector<T> want_grad(E * width, T(0));
      const Segments<Index> by_edge{g.csc_indptr.data(), nullptr, seg_h.edge_ids, g.num_dst};
      CpuRun(by_edge, [&](int64_t first, int64_t last) {
        GatherGradArg(by_edge, host.grad.data(), want_arg.data(), width, first, last, want_grad.data());
      });
      for (const Walk<Index>* walk : grad_walks) {
        T* go = rt.template Garbage<T>(E * width);
        std::string error =
            gpu::RunGatherGradArg(rt.backend(), Segments<Index>{seg_d.indptr, nullptr, seg_d.edge_ids, g.num_dst}, E,
                                  grad_d, want_arg_d, width, go, walk->config);
        if (error.empty()) error = rt.Sync();
        if (error.empty()) error = CompareExact(rt.Get(go, E * width), want_grad);
        tally.Record(walk->prefix + grad_what, error);
      }
    }
  }

  void Gathers() {
    const int64_t E = g.num_edges;
    // Values per edge, with a few NaNs: they must win max/min and stick.
    std::vector<T> values = RandomValues<T>(E * width, &rng);
    for (int64_t i = 0; i < E * width; i += 97) values[i] = T(NAN);
    const T* values_d = rt.Put(values);
    for (int with_ids = 0; with_ids < 2; ++with_ids) {
      // By destination; edge ids either the CSC positions (identity) or the
      // CSR order's ids (a permutation), which makes the gathered rows random.
      const std::vector<Index>& ids = g.csr_edge;
      const Index* ids_h = with_ids && E ? ids.data() : nullptr;
      const Index* ids_d = with_ids && E ? rt.Put(ids) : nullptr;
      const Segments<Index> seg_h{g.csc_indptr.data(), ids_h, ids_h, g.num_dst};
      const Segments<Index> seg_d{csc_d.indptr, ids_d, ids_d, g.num_dst};
      const std::string ids_name = with_ids ? " edge_ids" : " identity";
      // Each reduce plain and (not mean) from init, in place on the GPU.
      for (int r = 0; r < 4; ++r) {
        for (int with_init = 0; with_init < (r == 1 ? 1 : 2); ++with_init) {
          const std::string what = std::string(" gather ") + kReduceNames[r] + ids_name + (with_init ? " init" : "");
          const std::vector<const Walk<Index>*> chosen = WalksFor(what);
          if (!chosen.empty()) {
            GatherCase(static_cast<Reduce>(r), with_init, seg_h, seg_d, values, values_d, what, chosen);
          }
        }
      }
      // Scatter by source: out[edge id] = x[source row].
      const std::string what = " scatter" + ids_name;
      const std::vector<const Walk<Index>*> chosen = WalksFor(what);
      if (chosen.empty()) continue;
      const Index* sids_h = with_ids && E ? g.csr_edge.data() : nullptr;
      const Segments<Index> seg_sh{g.csr_indptr.data(), nullptr, sids_h, g.num_src};
      const Segments<Index> seg_sd{csr_d.indptr, nullptr, with_ids ? csr_d.edge_ids : nullptr, g.num_src};
      std::vector<T> want(E * width, T(0));
      CpuRun(seg_sh, [&](int64_t first, int64_t last) {
        Broadcast(seg_sh, host.x_src[1].data(), width, first, last, want.data());
      });
      for (const Walk<Index>* walk : chosen) {
        T* o = rt.template Garbage<T>(E * width);
        std::string error = gpu::RunScatter(rt.backend(), seg_sd, E, x_src_d[1], width, o, walk->config);
        if (error.empty()) error = rt.Sync();
        if (error.empty()) error = CompareExact(rt.Get(o, E * width), want);
        tally.Record(walk->prefix + what, error);
      }
    }
  }
};

// The schedule the GPU builds (CUB radix sort and scans) must equal the
// host-built one item for item.
#if NGRA_HARNESS_GPU
template <typename Index>
void CompareSchedules(const Graph<Index>& g, int64_t chunk, const std::string& prefix, Tally& tally) {
  const std::string name = prefix + " schedule";
  if (!Selected(name)) return;
  EmuRuntime emu;
  GpuRuntime dev;
  gpu::Schedule<Index> se, sd;
  const WalkConfig config{chunk};
  std::string error = gpu::BuildSchedule(emu.backend(), Segments<Index>{emu.Put(g.csc_indptr), nullptr, nullptr,
                                                                         g.num_dst}, g.num_edges, config, &se);
  if (error.empty()) {
    error = gpu::BuildSchedule(dev.backend(), Segments<Index>{dev.Put(g.csc_indptr), nullptr, nullptr, g.num_dst},
                               g.num_edges, config, &sd);
  }
  if (error.empty()) error = dev.Sync();
  if (error.empty()) {
    const std::vector<Index> ce = emu.Get(se.counts, 3), cd = dev.Get(sd.counts, 3);
    error = CompareExact(cd, ce);
    if (error.empty()) error = CompareExact(dev.Get(sd.order, g.num_dst), emu.Get(se.order, g.num_dst));
    if (error.empty()) error = CompareExact(dev.Get(sd.slot_start, g.num_dst), emu.Get(se.slot_start, g.num_dst));
    if (error.empty()) {
      const auto ie = emu.Get(se.items, ce[0]);
      const auto id = dev.Get(sd.items, ce[0]);
      for (int64_t i = 0; i < ce[0] && error.empty(); ++i) {
        if (ie[i].segment != id[i].segment || ie[i].chunk != id[i].chunk || ie[i].slot != id[i].slot) {
          error = "item " + std::to_string(i) + " differs";
        }
      }
    }
  }
  tally.Record(name, error);
}
#endif

// ---- Settings ----

struct Size {
  GraphSpec spec;
  GraphSpec wide_spec;  // for widths above 128: per-edge tensors (vector weights) grow with the width
  std::vector<int64_t> widths;
  std::vector<int64_t> chunks;
};

// One line per group of checks as it ends (count, seconds, and where they
// went: g_phases), and one per setting of a group, so that a run stopped by
// a time limit still shows where its time went.
class Progress {
 public:
  Progress(const char* runtime, const Tally& tally, const char* indent = "  ")
      : runtime_(runtime), indent_(indent), tally_(tally), last_(tally.passed + tally.failed), phases_(g_phases) {}
  void Done(const std::string& group) {
    const auto now = std::chrono::steady_clock::now();
    const int64_t count = tally_.passed + tally_.failed;
    const auto spent = [&](double Phases::*phase) { return g_phases.*phase - phases_.*phase; };
    std::printf("%s%s %-34s %6lld checks %8.2f s (CPU reference %.2f s; device allocations %.2f s, copies %.2f s, "
                "waits %.2f s; comparing %.2f s, drawing %.2f s)\n",
                indent_, runtime_, group.c_str(), static_cast<long long>(count - last_),
                std::chrono::duration<double>(now - start_).count(), spent(&Phases::reference),
                spent(&Phases::allocate), spent(&Phases::copy), spent(&Phases::wait), spent(&Phases::compare),
                spent(&Phases::draw));
    start_ = now;
    last_ = count;
    phases_ = g_phases;
  }

 private:
  const char* runtime_;
  const char* indent_;
  const Tally& tally_;
  int64_t last_;
  Phases phases_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

template <typename Runtime, typename T, typename Index>
void RunSetting(Runtime& rt, const Size& size, const char* type_name, Tally& tally) {
  const Graph<Index> narrow = MakeGraph<Index>(size.spec), wide = MakeGraph<Index>(size.wide_spec);
  Progress setting(Runtime::kName, tally, "    ");
#if NGRA_HARNESS_GPU
  if (std::strcmp(Runtime::kName, "gpu") == 0) {
    for (int64_t chunk : size.chunks) {
      CompareSchedules(narrow, chunk, std::string("gpu ") + type_name + " chunk=" + std::to_string(chunk), tally);
    }
  }
#endif
  for (int64_t width : size.widths) {
    const Graph<Index>& g = width > 128 ? wide : narrow;
    const std::string setting_name = std::string(type_name) + " d=" + std::to_string(width);
    std::vector<Walk<Index>> walks;
    for (int64_t chunk : size.chunks) {
      walks.push_back({WalkConfig{chunk}, std::string(Runtime::kName) + " " + setting_name + " chunk=" +
                                              std::to_string(chunk)});
    }
    Setting<Runtime, T, Index> s{rt, g, width, std::move(walks), tally,
                                 std::mt19937_64(size.spec.seed * 1000 + width)};
    s.Upload();
    s.AllFused();
    s.Gathers();
    rt.Reset();
    setting.Done(setting_name);
  }
}

template <typename Runtime>
void RunAll(Runtime& rt, bool large, bool quick, Tally& tally) {
  Progress progress(Runtime::kName, tally);
  BadInput(rt, tally);
  progress.Done("bad input");
  Size full, reduced;
  if (large) {
    full.spec = GraphSpec{20000, 25000, 250000, 40000, 30000, 0.1, 1};
    full.wide_spec = GraphSpec{8000, 10000, 50000, 15000, 10000, 0.1, 1};
    full.widths = quick ? std::vector<int64_t>{1, 32, 128} : std::vector<int64_t>{1, 16, 32, 100, 128, 602};
    full.chunks = {16, 256};
  } else {
    full.spec = GraphSpec{150, 120, 900, 300, 200, 0.1, 1};
    full.wide_spec = full.spec;
    full.widths = quick ? std::vector<int64_t>{1, 100} : std::vector<int64_t>{1, 16, 32, 100, 128, 602};
    full.chunks = {8, 256};
  }
  reduced = full;
  reduced.spec.seed = reduced.wide_spec.seed = 2;
  reduced.widths = {1, 100};
  reduced.chunks = {full.chunks[0]};
  // Both value types and both index types; the other two pairings are the
  // same code with the other type (and cost compile time here).
  RunSetting<Runtime, float, int32_t>(rt, full, "float/int32", tally);
  progress.Done("ops, float/int32");
  RunSetting<Runtime, double, int64_t>(rt, reduced, "double/int64", tally);
  progress.Done("ops, double/int64");
  // Degenerate shapes: no edges at all, and no destinations.
  Size empty = reduced;
  empty.spec = empty.wide_spec = GraphSpec{5, 4, 0, 0, 0, 0.0, 3};
  empty.widths = {3};
  RunSetting<Runtime, float, int32_t>(rt, empty, "float/int32 no-edges", tally);
  progress.Done("ops, no edges");

  // Edge code: random programs with every reduce and gradient (harness_edge_code.h).
  EdgeCodeBadInput(rt, tally);
  progress.Done("edge code, bad input");
  const std::string name = Runtime::kName;
  const GraphSpec code_spec = large ? GraphSpec{4000, 3000, 40000, 6000, 4000, 0.1, 4}
                                    : GraphSpec{60, 50, 300, 80, 60, 0.1, 4};
  const std::vector<int64_t> code_widths =
      large ? std::vector<int64_t>{1, 16, 33, 128} : std::vector<int64_t>{1, 5, 8, 17};
  const std::vector<int64_t> code_chunks = large ? std::vector<int64_t>{16, 256} : std::vector<int64_t>{8, 64};
  const int programs = quick ? 8 : large ? 12 : 24;
  EdgeCodeChecks<Runtime, float>(rt, MakeGraph<int32_t>(code_spec), programs, code_widths, code_chunks, 11,
                                 name + " float/int32", tally);
  progress.Done("edge code, float/int32");
  GraphSpec double_spec = code_spec;
  double_spec.seed = 5;
  EdgeCodeChecks<Runtime, double>(rt, MakeGraph<int64_t>(double_spec), quick ? 3 : 8, {3, 8}, {16}, 12,
                                  name + " double/int64", tally);
  progress.Done("edge code, double/int64");
  EdgeCodeChecks<Runtime, float>(rt, MakeGraph<int32_t>(empty.spec), 2, {3}, {8}, 13, name + " float/int32 no-edges",
                                 tally);
  progress.Done("edge code, no edges");
}

}  // namespace
}  // namespace harness
}  // namespace ngra

int main(int argc, char** argv) {
  using namespace ngra::harness;
  std::string mode = "all";
  bool quick = false, large = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mode=", 0) == 0) {
      mode = a.substr(7);
    } else if (a.rfind("--filter=", 0) == 0) {
      g_filter = a.substr(9);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--large") {
      large = true;
    } else if (a == "--exact-buffers") {
      g_exact_buffers = true;
    } else {
      std::fprintf(stderr, "usage: %s [--mode=emulated|gpu|all] [--filter=SUBSTRING] [--quick] [--large] [--exact-buffers]\n",
                   argv[0]);
      return 2;
    }
  }
  if (mode != "emulated" && mode != "gpu" && mode != "all") {
    std::fprintf(stderr, "--mode must be emulated, gpu or all\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress reaches a log even if the run is stopped
#ifdef __GLIBC__
  // Freed results stay in the heap for the next check's: glibc would map
  // each large vector afresh and fault in every page of it again.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
  Tally tally;
  if (Selected("comparisons")) CheckComparisons(tally);
  if (mode != "gpu") {
    if (Selected("arena")) CheckArena(HostMemory{}, "emulated", tally);
    EmuRuntime emu;
    RunAll(emu, large, quick, tally);
    std::printf("emulated: %lld passed (%lld by the float64 reference), %lld failed\n",
                static_cast<long long>(tally.passed), static_cast<long long>(tally.decided_by_exact),
                static_cast<long long>(tally.failed));
  }
  if (mode != "emulated") {
#if NGRA_HARNESS_GPU
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("gpu: no CUDA device%s\n", mode == "gpu" ? "" : " (skipped)");
      if (mode == "gpu") return 1;
    } else {
      cudaDeviceProp prop;
      cudaGetDeviceProperties(&prop, 0);
      std::printf("gpu: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
      const Tally before = tally;
      if (Selected("arena")) CheckArena(DeviceMemory{}, "gpu", tally);
      GpuRuntime dev;
      RunAll(dev, true, quick, tally);
      std::printf("gpu: %lld passed (%lld by the float64 reference), %lld failed\n",
                  static_cast<long long>(tally.passed - before.passed),
                  static_cast<long long>(tally.decided_by_exact - before.decided_by_exact),
                  static_cast<long long>(tally.failed - before.failed));
    }
#else
    std::printf("gpu: built without the GPU kernels%s\n", mode == "gpu" ? "" : " (skipped)");
    if (mode == "gpu") return 1;
#endif
  }
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(tally.passed), static_cast<long long>(tally.failed));
  return tally.failed == 0 ? 0 : 1;
}
