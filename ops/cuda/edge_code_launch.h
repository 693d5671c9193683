// The definitions behind api.h's edge code entry points (RunEdgeCode,
// RunEdgeCodeGrad), generic over the Backend as launch.h is: the program and
// its tables go to the device (and, for a gradient, the tables inverted into
// LoadUses), then the bodies of edge_code_bodies.h run over the schedules of
// launch.h. The entry points run the problem's generated kernels where it
// has them (GPU), else the interpreter; RunEdgeCodeWith and
// RunEdgeCodeGradWith take the program policy (edge_code_programs.h) from
// `make`, which turns the program on the device into one, so that every
// policy runs the same walks. Include the backend header
// first, then this one.
#ifndef NGRA_OPS_CUDA_EDGE_CODE_LAUNCH_H_
#define NGRA_OPS_CUDA_EDGE_CODE_LAUNCH_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/cuda/api.h"
#include "ops/cuda/edge_code_bodies.h"
#include "ops/cuda/launch.h"

namespace ngra {
namespace gpu {

// ---- Which generated kernel runs a body (api.h) ----
// The bodies that evaluate a generated program, each the instance
// ngra_tf/ops/generated.py's cuda_module compiles (the forward once per run
// length V; the gradients and softmax read one feature at a time).

template <Reduce R, typename T, typename Index, int V>
struct GeneratedEntry<SegmentReduceBody<R, CodeMessageTerm<GeneratedCode<T>, Index>, T, Index, V>> {
  static constexpr int kKernel = V == 1 ? kGeneratedForward : V == 2 ? kGeneratedForward2 : kGeneratedForward4;
};
template <typename T, typename Index>
struct GeneratedEntry<CodeSoftmaxBody<GeneratedCode<T>, Index>> {
  static constexpr int kKernel = kGeneratedForward;
};
template <Seed S, typename T, typename Index>
struct GeneratedEntry<SegmentReduceBody<Reduce::kSum, CodeGradTerm<true, S, GeneratedCode<T>, Index>, T, Index, 1>> {
  static constexpr int kKernel = kGeneratedGradSrc;
};
template <Seed S, typename T, typename Index>
struct GeneratedEntry<SegmentReduceBody<Reduce::kSum, CodeGradTerm<false, S, GeneratedCode<T>, Index>, T, Index, 1>> {
  static constexpr int kKernel = kGeneratedGradDst;
};
template <Seed S, typename T, typename Index>
struct GeneratedEntry<CodeEdgeGradBody<S, GeneratedCode<T>, Index>> {
  static constexpr int kKernel = kGeneratedGradEdge;
};

// ---- The program on the device ----

// count elements of a host array into scratch on the device (null when empty).
template <typename U, typename Backend>
U* Upload(const Backend& backend, Scratch<Backend>& scratch, const U* data, int64_t count, std::string* error) {
  U* p = scratch.template Get<U>(count);
  if (p != nullptr && error->empty()) *error = CopyToDevice(backend, p, data, count * sizeof(U));
  return p;
}

// *device: `host` (code and tables on the host) with its code and tables
// copied to the device. A parameter index that the opcode does not read is
// cleared in the copy, so that Param never reads past the constants for it.
template <typename Backend, typename T>
std::string UploadProgram(const Backend& backend, Scratch<Backend>& scratch, const EdgeCode<T>& host,
                          int64_t num_tables, EdgeCode<T>* device) {
  std::vector<int32_t> code(host.code, host.code + host.num_instructions * kInstructionInts);
  for (int i = 0; i < host.num_instructions; ++i) {
    int32_t* ins = code.data() + i * kInstructionInts;
    if (ins[0] != kConst && ins[0] != kLeakyRelu && ins[0] != kPowConst) ins[3] = -1;
  }
  std::string error;
  *device = host;
  device->code = Upload(backend, scratch, code.data(), static_cast<int64_t>(code.size()), &error);
  device->tables = Upload(backend, scratch, host.tables, num_tables * host.width, &error);
  device->contiguous = nullptr;  // host-only facts of the CPU walks
  device->uniform = nullptr;
  NGRA_GPU_RETURN_IF_ERROR(scratch.error());
  return error;
}

// LoadUses on the host: for each column of an operand row, the (feature,
// instruction) pairs of the loads with opcode `op` that read it, features
// ascending (then instructions).
struct HostLoadUses {
  std::vector<int64_t> start;
  std::vector<LoadUse> uses;
};

template <typename T>
HostLoadUses InvertTables(const EdgeCode<T>& p, int op, int64_t columns) {
  HostLoadUses h;
  h.start.assign(columns + 1, 0);
  auto each = [&](auto&& fn) {
    for (int64_t f = 0; f < p.width; ++f) {
      for (int i = 0; i < p.num_instructions; ++i) {
        if (p.Ins(i)[0] == op) fn(f, i, p.tables[static_cast<int64_t>(p.Ins(i)[1]) * p.width + f]);
      }
    }
  };
  each([&](int64_t, int, int32_t c) { ++h.start[c + 1]; });
  for (int64_t c = 0; c < columns; ++c) h.start[c + 1] += h.start[c];
  h.uses.resize(h.start[columns]);
  std::vector<int64_t> next(h.start.begin(), h.start.end() - 1);
  each([&](int64_t f, int i, int32_t c) {
    h.uses[next[c]++] = LoadUse{static_cast<int32_t>(f), i};
  });
  return h;
}

template <typename Backend>
LoadUses UploadUses(const Backend& backend, Scratch<Backend>& scratch, const HostLoadUses& h, std::string* error) {
  LoadUses d;
  if (h.uses.empty()) return d;
  d.columns = static_cast<int64_t>(h.start.size()) - 1;
  d.start = Upload(backend, scratch, h.start.data(), static_cast<int64_t>(h.start.size()), error);
  d.uses = Upload(backend, scratch, h.uses.data(), static_cast<int64_t>(h.uses.size()), error);
  return d;
}

// ---- Forward ----

// The widest vector run, in bytes, in which a generated program's forward may
// read its operands (FixedCode::MessageRun), and where each load's runs
// start: every table a load reads holds adjacent columns (entry f is entry 0
// + f) from a multiple of the run on, and every row it reads, a typed load's
// slot too, starts on a run boundary. bytes is sizeof(T) where some load
// cannot: runs of one feature. `host`'s code and tables are on the host, its
// operands anywhere.
template <typename T>
CodeRuns CodeRunsOf(const EdgeCode<T>& host) {
  CodeRuns runs;
  for (int64_t bytes = 16; bytes > static_cast<int64_t>(sizeof(T)); bytes /= 2) {
    const int64_t run = bytes / static_cast<int64_t>(sizeof(T));
    bool ok = true;
    for (int i = 0; i < host.num_instructions && ok; ++i) {
      const int32_t* ins = host.Ins(i);
      if (!IsLoad(ins[0])) continue;
      const int32_t* table = host.tables + static_cast<int64_t>(ins[1]) * host.width;
      ok = table[0] % run == 0 && (ins[0] != kLoadSrcTyped || ins[2] % run == 0);
      for (int64_t f = 1; f < host.width && ok; ++f) ok = table[f] == table[0] + f;
      ok = ok && (ins[0] == kLoadDst    ? RowsAligned(host.x_dst, host.dst_width, bytes)
                  : ins[0] == kLoadEdge ? RowsAligned(host.edge, host.edge_width, bytes)
                                        : RowsAligned(host.x_src, host.src_width, bytes));
      runs.column[i] = table[0];
    }
    if (ok) {
      runs.bytes = bytes;
      return runs;
    }
  }
  runs.bytes = sizeof(T);
  return runs;
}

// RunEdgeCode over a prebuilt schedule of problem.csc with `program` (its
// operands already on the device: for benchmarks, nothing is copied or
// synchronised); runs: CodeRunsOf the program on the host.
template <typename Backend, typename Program, typename T, typename Index>
std::string RunEdgeCodeScheduled(const Backend& backend, const EdgeCodeProblem<T, Index>& problem,
                                 const Program& program, const CodeRuns& runs, const Schedule<Index>& schedule, T* out,
                                 Index* argedge) {
  const EdgeCode<T>& p = program.p;
  if (problem.num_dst == 0 || p.width == 0) return "";
  const Geometry geo = GeometryFor(p.width, 1);
  if (!problem.softmax) {
    return WithReduce(problem.reduce, [&](auto r) {
      return ReduceWalk<decltype(r)::value>(backend, problem.csc, schedule, geo,
                                            CodeMessageTerm<Program, Index>{problem.csc, program, runs}, out,
                                            argedge, problem.init);
    });
  }
  Scratch<Backend> scratch(backend);
  T* partial = scratch.template Get<T>(schedule.max_slots * 3 * p.width);
  NGRA_GPU_RETURN_IF_ERROR(scratch.error());
  const int64_t threads = schedule.max_items * geo.UnitsPerItem() * geo.Lanes();
  NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
  Launch(backend, CodeSoftmaxBody<Program, Index>{problem.csc, schedule, geo, program, out, partial, problem.init},
         threads);
  if (schedule.max_split > 0) {
    Launch(backend, CodeSoftmaxCombineBody<T, Index>{schedule, problem.csc.indptr, geo, partial, out},
           schedule.max_split * geo.UnitsPerItem() * geo.Lanes());
  }
  return LastError(backend);
}

template <typename T>
struct Interpreted {
  InterpretedCode<T> operator()(const EdgeCode<T>& p) const { return InterpretedCode<T>{p}; }
};

template <typename Backend, typename T, typename Index, typename Make>
std::string RunEdgeCodeWith(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, T* out, Index* argedge,
                            const WalkConfig& config, const Make& make) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (problem.num_dst == 0 || problem.program.width == 0) return "";
  Scratch<Backend> scratch(backend);
  EdgeCode<T> p;
  NGRA_GPU_RETURN_IF_ERROR(UploadProgram(backend, scratch, problem.program, problem.num_tables, &p));
  Schedule<Index> schedule;
  NGRA_GPU_RETURN_IF_ERROR(WalkSchedule(backend, problem.plan.present() ? &problem.plan.forward : nullptr,
                                        problem.csc, problem.num_edges, config, &schedule));
  return RunEdgeCodeScheduled(backend, problem, make(p), CodeRunsOf(problem.program), schedule, out, argedge);
}

template <typename T>
struct Generated {
  GeneratedCode<T> operator()(const EdgeCode<T>& p) const { return GeneratedCode<T>{p}; }
};

// run(backend, make) with the problem's generated kernels where it has them
// and the backend launches them, else with the interpreter.
template <typename Backend, typename T, typename Index, typename Run>
std::string WithProgram(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, const Run& run) {
  if constexpr (GeneratedBackend<Backend>::kAvailable) {
    if (problem.generated != nullptr) {
      return run(typename GeneratedBackend<Backend>::Stream{backend, problem.generated}, Generated<T>{});
    }
  }
  return run(backend, Interpreted<T>{});
}

template <typename Backend, typename T, typename Index>
std::string RunEdgeCode(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, T* out, Index* argedge,
                        const WalkConfig& config) {
  return WithProgram(backend, problem, [&](const auto& stream, const auto& make) {
    return RunEdgeCodeWith(stream, problem, out, argedge, config, make);
  });
}

// ---- Gradients ----

template <typename Backend, typename T, typename Index, typename Make>
std::string RunEdgeCodeGradWith(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, Wrt wrt,
                                const T* grad, const Index* argedge, const T* state, T* out,
                                const WalkConfig& config, const Make& make) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  const EdgeCode<T>& host = problem.program;
  const int side = wrt == Wrt::kXSrc ? kLoadSrc : wrt == Wrt::kXDst ? kLoadDst : kLoadEdge;
  const int64_t rows = side == kLoadSrc ? problem.num_src : side == kLoadDst ? problem.num_dst : problem.num_edges;
  const int64_t columns = side == kLoadSrc ? host.src_width : side == kLoadDst ? host.dst_width : host.edge_width;
  if (rows == 0 || columns == 0) return "";
  const HostLoadUses plain = InvertTables(host, side, columns);
  const HostLoadUses typed = side == kLoadSrc ? InvertTables(host, kLoadSrcTyped, columns) : HostLoadUses{};
  if (plain.uses.empty() && typed.uses.empty()) {  // no load reads the operand at any feature
    Memset(backend, out, 0, static_cast<size_t>(rows * columns) * sizeof(T));
    return LastError(backend);
  }
  int64_t typed_stride = 0;
  for (int i = 0; i < host.num_instructions; ++i) {
    if (host.Ins(i)[0] == kLoadSrcTyped) typed_stride = host.Ins(i)[2];
  }
  Scratch<Backend> scratch(backend);
  EdgeCode<T> p;
  NGRA_GPU_RETURN_IF_ERROR(UploadProgram(backend, scratch, host, problem.num_tables, &p));
  std::string error;
  const LoadUses plain_d = UploadUses(backend, scratch, plain, &error);
  const LoadUses typed_d = UploadUses(backend, scratch, typed, &error);
  NGRA_GPU_RETURN_IF_ERROR(scratch.error());
  NGRA_GPU_RETURN_IF_ERROR(error);

  // Mean spreads each result's gradient evenly over the in-edges: fold 1/degree in once.
  const T* g = grad;
  if (!problem.softmax && problem.reduce == Reduce::kMean && problem.num_dst > 0) {
    T* scaled = scratch.template Get<T>(problem.num_dst * host.width);
    NGRA_GPU_RETURN_IF_ERROR(scratch.error());
    Launch(backend, ScaleByDegreeBody<T, Index>{problem.csc.indptr, host.width, grad, scaled},
           problem.num_dst * host.width);
    g = scaled;
  }
  const Segments<Index>& walked = side == kLoadSrc ? problem.csr : problem.csc;
  Schedule<Index> schedule;
  const WalkConfig walk = side == kLoadEdge ? PerEdgeWalk(config) : config;
  NGRA_GPU_RETURN_IF_ERROR(WalkSchedule(backend, PlannedWalk(problem.plan, wrt), walked, problem.num_edges, walk,
                                        &schedule));
  const Geometry geo = GeometryFor(columns, 1);

  const auto program = make(p);
  using Program = std::decay_t<decltype(program)>;
  auto run = [&](auto seed_tag) -> std::string {
    constexpr Seed S = decltype(seed_tag)::value;
    const CodeAdjoint<S, Program, Index> adjoint{program, g, argedge, state};
    if (side == kLoadSrc) {
      return ReduceWalk<Reduce::kSum>(
          backend, walked, schedule, geo,
          CodeGradTerm<true, S, Program, Index>{walked, adjoint, plain_d, typed_d, typed_stride}, out,
          static_cast<Index*>(nullptr));
    }
    if (side == kLoadDst) {
      return ReduceWalk<Reduce::kSum>(backend, walked, schedule, geo,
                                      CodeGradTerm<false, S, Program, Index>{walked, adjoint, plain_d, LoadUses{}, 0},
                                      out, static_cast<Index*>(nullptr));
    }
    const int64_t threads = schedule.max_items * geo.UnitsPerItem() * geo.Lanes();
    NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
    Launch(backend, CodeEdgeGradBody<S, Program, Index>{walked, schedule, geo, adjoint, plain_d, out}, threads);
    return LastError(backend);
  };
  if (problem.softmax) return run(std::integral_constant<Seed, Seed::kSoftmax>{});
  if (problem.reduce == Reduce::kMax || problem.reduce == Reduce::kMin) {
    return run(std::integral_constant<Seed, Seed::kWinner>{});
  }
  return run(std::integral_constant<Seed, Seed::kWhole>{});
}

template <typename Backend, typename T, typename Index>
std::string RunEdgeCodeGrad(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, Wrt wrt,
                            const T* grad, const Index* argedge, const T* state, T* out, const WalkConfig& config) {
  return WithProgram(backend, problem, [&](const auto& stream, const auto& make) {
    return RunEdgeCodeGradWith(stream, problem, wrt, grad, argedge, state, out, config, make);
  });
}

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_EDGE_CODE_LAUNCH_H_
