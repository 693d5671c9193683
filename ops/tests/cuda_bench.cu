// C entry points for tools/bench_cuda.py (ctypes; no TensorFlow): the fused
// gather src_mul_edge + sum with one scalar weight per edge, float32, int32
// indices, out = A @ X for A in CSC form (one segment per output row), and
// its two gradients for an upstream gradient G = d loss / d out.
//
// Three ways to time the forward:
//   ngra_bench_spmm:         the kernels alone, over the schedule of the
//                            graph's plan, prepared once by ngra_bench_create;
//   ngra_bench_spmm_op:      what the TF op does per call given the plan
//                            NgraPrepareGraph makes (the ops' own chunk,
//                            whatever the handle's): host checks of the shapes,
//                            then the kernels, with scratch from a
//                            preallocated arena (TF's allocator is pooled too);
//   ngra_bench_spmm_op_cold: the TF op without a plan: device-side argument
//                            checks with one synchronisation and a fresh
//                            schedule on every call, then the kernels.
// The gradients, kernels alone over prebuilt schedules, as the first:
//   ngra_bench_grad_src:    d/dx_src = A^T @ G, a walk over the CSR segments;
//   ngra_bench_grad_weight: d/dweight[e] = G[dst(e)] . x[src(e)], over the CSC ones.
// G-GCN's gate, out[v] = sum over edges u -> v of tanh(a[u] + b[v]) * c[u]
// (x2 = [a | c] shaped [num_src, 2, width], b = xd [num_dst, width]), over
// the forward's schedule:
//   ngra_bench_gate:      the fused gather's gate_tanh template (compiled);
//   ngra_bench_gate_code: the same stage as edge code (interpreted), its
//                         program copied to the device once per width;
//   ngra_bench_gate_generated: the same edge code as its generated kernel
//                         (FixedCode: the program unrolled at compile time,
//                         as ngra_tf.ops.generated.cuda_program writes it),
//                         built into this library by nvcc;
//   ngra_bench_gate_module: the same, as the op runs it: the kernels NVRTC
//                         compiled from ngra_tf.ops.generated.cuda_module,
//                         loaded from the file `path` (once per path).
// ngra_bench_gate_module takes (handle, path, x2, xd, width, out).
// Everything runs on the stream given to ngra_bench_create. Functions return
// 0 on success; ngra_bench_error() says what failed.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"

namespace {

using ngra::Operands;
using ngra::Reduce;
using ngra::Segments;
using ngra::SrcMulEdge;
using ngra::WeightKind;
using ngra::gpu::FusedProblem;
using ngra::gpu::GpuStream;
using ngra::gpu::Schedule;

thread_local std::string g_error;

// A bump allocator over one cudaMalloc: reset before each op call.
class Arena {
 public:
  ~Arena() {
    if (base_ != nullptr) cudaFree(base_);
  }
  cudaError_t Reserve(size_t bytes) {
    const cudaError_t status = cudaMalloc(&base_, bytes);
    if (status == cudaSuccess) size_ = bytes;
    return status;
  }
  void* Allocate(size_t bytes) {
    const size_t start = (used_ + 255) / 256 * 256;
    if (start + bytes > size_) return nullptr;
    used_ = start + bytes;
    return static_cast<char*>(base_) + start;
  }
  void Reset() { used_ = 0; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0, used_ = 0;
};

struct Bench {
  GpuStream gpu;
  Segments<int32_t> csc;  // by destination; edge ids are positions
  Segments<int32_t> csr;  // by source; edge_ids maps to the CSC positions
  int64_t num_src = 0, num_edges = 0, chunk = 256;
  void* plan_block = nullptr;  // in `persistent`: PlanBytes of it, for `chunk`
  ngra::gpu::GraphPlan<int32_t> plan;  // its schedules: forward, backward (d/dx_src), per_edge (d/dweight)
  void* op_plan_block = nullptr;  // the plan the TF op would get: NgraPrepareGraph's, for the default chunk
  int64_t op_plan_bytes = 0;
  Arena persistent;  // the plan
  Arena scratch;     // per call
  // The gate as edge code for gate_width, on the device (cudaMalloc'd).
  int64_t gate_width = -1;
  int32_t* gate_code = nullptr;
  int32_t* gate_tables = nullptr;
  std::vector<int32_t> gate_host_tables;
  ~Bench() {
    if (gate_code != nullptr) cudaFree(gate_code);
    if (gate_tables != nullptr) cudaFree(gate_tables);
  }
};

using Term = ngra::gpu::MessageTerm<SrcMulEdge, WeightKind::kScalar, float, int32_t>;
// Sum has no winners to mask the upstream gradient with (kArg = false).
using Upstream = ngra::gpu::UpstreamGrad<false, float, int32_t>;
using SrcGradTerm = ngra::gpu::SrcGradTerm<SrcMulEdge, false, WeightKind::kScalar, float, int32_t>;

int Fail(const std::string& message) {
  g_error = message;
  return 1;
}

// One timed entry point: fresh scratch, the handle's device, then fn(bench),
// which returns "" or an error message.
template <typename Fn>
int Call(void* handle, Fn&& fn) {
  auto* b = static_cast<Bench*>(handle);
  b->scratch.Reset();
  ngra::gpu::DeviceScope scope(b->gpu);
  std::string error = scope.error();
  if (error.empty()) error = fn(b);
  return error.empty() ? 0 : Fail(error);
}

Operands<float> OperandsOf(const float* x, const float* weight, int64_t width) {
  Operands<float> in;
  in.x_src = x;
  in.weight = weight;
  in.weight_width = 1;
  in.width = width;
  return in;
}

// tanh(a[f] + b[f]) * c[f], with x_src rows [a | c] and x_dst rows b.
struct GateCode {
  static constexpr int32_t kCode[] = {ngra::kLoadSrc, 0, 0, -1, ngra::kLoadDst, 1, 0, -1, ngra::kAdd, 0, 1, -1,
                                      ngra::kTanh,    2, 0, -1, ngra::kLoadSrc, 2, 0, -1, ngra::kMul, 3, 4, -1};
  static constexpr int kInstructions = sizeof(kCode) / sizeof(kCode[0]) / ngra::kInstructionInts;
  static constexpr int kValue = kInstructions - 1;
  static constexpr int kScore = -1;
};
constexpr const int32_t* kGateCode = GateCode::kCode;
constexpr int kGateInstructions = GateCode::kInstructions;

// The gate program for `width` on the device (copied once per width).
std::string GateProgram(Bench* b, int64_t width) {
  if (b->gate_width == width) return "";
  std::vector<int32_t> tables(3 * width);
  for (int64_t f = 0; f < width; ++f) {
    tables[f] = tables[width + f] = static_cast<int32_t>(f);  // a, b
    tables[2 * width + f] = static_cast<int32_t>(width + f);  // c
  }
  if (b->gate_code != nullptr) cudaFree(b->gate_code);
  if (b->gate_tables != nullptr) cudaFree(b->gate_tables);
  b->gate_code = b->gate_tables = nullptr;
  cudaError_t status = cudaMalloc(&b->gate_code, sizeof(GateCode::kCode));
  if (status == cudaSuccess) status = cudaMalloc(&b->gate_tables, tables.size() * sizeof(int32_t));
  if (status == cudaSuccess) status = cudaMemcpy(b->gate_code, kGateCode, sizeof(GateCode::kCode), cudaMemcpyHostToDevice);
  if (status == cudaSuccess) {
    status = cudaMemcpy(b->gate_tables, tables.data(), tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  }
  if (status != cudaSuccess) return ngra::gpu::CudaError("copying the gate program", status);
  b->gate_width = width;
  b->gate_host_tables = tables;
  return "";
}

// The fused op's inputs for out = A @ x with one weight per edge, as the TF
// kernel sees them; with_plan: and the graph's plan.
ngra::gpu::FusedInputs OpInputs(const Bench* b, const float* x, const float* weight, int64_t width, bool with_plan) {
  using ngra::gpu::TensorInfo;
  const int64_t num_dst = b->csc.num_segments, E = b->num_edges;
  ngra::gpu::FusedInputs in;
  in.x_src = TensorInfo{x, {b->num_src, width}};
  in.x_dst = TensorInfo{nullptr, {0}};
  in.edge_weight = TensorInfo{weight, {E}};
  in.edge_type = TensorInfo{nullptr, {0}};
  in.csc_indptr = TensorInfo{b->csc.indptr, {num_dst + 1}};
  in.csc_src = TensorInfo{b->csc.indices, {E}};
  in.csr_indptr = TensorInfo{b->csr.indptr, {b->num_src + 1}};
  in.csr_dst = TensorInfo{b->csr.indices, {E}};
  in.csr_edge = TensorInfo{b->csr.edge_ids, {E}};
  in.plan = with_plan ? TensorInfo{b->op_plan_block, {b->op_plan_bytes}} : TensorInfo{nullptr, {0}};
  return in;
}

// What NgraFusedGather's GPU kernel does per call: its checks, then RunFusedGather.
int SpmmOp(void* handle, const float* x, const float* weight, int64_t width, float* out, bool with_plan) {
  return Call(handle, [&](Bench* b) {
    FusedProblem<float, int32_t> problem;
    std::string error = ngra::gpu::ValidateFused<GpuStream, float, int32_t>(
        b->gpu, "src_mul_edge", "sum", OpInputs(b, x, weight, width, with_plan), false, &problem);
    if (error.empty()) {
      error = ngra::gpu::RunFusedGather(b->gpu, problem, out, static_cast<int32_t*>(nullptr),
                                        ngra::gpu::WalkConfig{b->chunk});
    }
    return error;
  });
}

const GpuStream& BenchStream(const Bench* b) { return b->gpu; }

// The same as edge code over the same schedule, with the program policy `make`
// gives, on the backend backend_of(bench) gives.
template <typename Make, typename BackendOf>
int GateAsEdgeCode(void* handle, const float* x2, const float* xd, int64_t width, float* out, const Make& make,
                   const BackendOf& backend_of) {
  return Call(handle, [&](Bench* b) {
    std::string error = GateProgram(b, width);
    if (!error.empty()) return error;
    ngra::gpu::EdgeCodeProblem<float, int32_t> problem;
    problem.reduce = Reduce::kSum;
    problem.csc = b->csc;
    problem.num_dst = b->csc.num_segments;
    problem.num_src = b->num_src;
    problem.num_edges = b->num_edges;
    ngra::EdgeCode<float> p;
    p.code = b->gate_code;
    p.num_instructions = kGateInstructions;
    p.tables = b->gate_tables;
    p.width = width;
    p.value = GateCode::kValue;
    p.x_src = x2;
    p.src_width = 2 * width;
    p.x_dst = xd;
    p.dst_width = width;
    ngra::EdgeCode<float> host = p;  // the program as the op holds it: code and tables on the host
    host.code = kGateCode;
    host.tables = b->gate_host_tables.data();
    return ngra::gpu::RunEdgeCodeScheduled(backend_of(b), problem, make(p), ngra::gpu::CodeRunsOf(host),
                                           b->plan.forward, out, static_cast<int32_t*>(nullptr));
  });
}

}  // namespace

extern "C" {

const char* ngra_bench_error() { return g_error.c_str(); }

// The same edges twice, as device arrays that must outlive the handle:
// grouped by destination, indptr [num_dst + 1] and indices [num_edges] (the
// sources); grouped by source, csr_indptr [num_src + 1], csr_dst
// [num_edges] and csr_edge [num_edges] (each position's edge, i.e. its
// position in the first grouping). scratch_bytes bounds one call's scratch.
void* ngra_bench_create(void* stream, int device, int64_t num_dst, int64_t num_src, int64_t num_edges,
                        const int32_t* indptr, const int32_t* indices, const int32_t* csr_indptr,
                        const int32_t* csr_dst, const int32_t* csr_edge, int64_t chunk, int64_t scratch_bytes) {
  auto* b = new Bench;
  b->gpu.stream = stream;
  b->gpu.device = device;
  b->csc = Segments<int32_t>{indptr, num_edges > 0 ? indices : nullptr, nullptr, num_dst};
  b->csr = Segments<int32_t>{csr_indptr, num_edges > 0 ? csr_dst : nullptr, num_edges > 0 ? csr_edge : nullptr,
                             num_src};
  b->num_src = num_src;
  b->num_edges = num_edges;
  b->chunk = chunk;
  // The graph's plan, and room for the temporaries of its sorts and scans.
  const ngra::gpu::WalkConfig config{chunk};
  const ngra::gpu::WalkConfig op_config;  // the ops' own
  const int64_t plan_bytes = ngra::gpu::PlanBytes<int32_t>(num_src, num_dst, num_edges, config);
  b->op_plan_bytes = ngra::gpu::PlanBytes<int32_t>(num_src, num_dst, num_edges, op_config);
  cudaError_t status = b->persistent.Reserve(static_cast<size_t>(plan_bytes + b->op_plan_bytes) + (64 << 20));
  if (status == cudaSuccess) status = b->scratch.Reserve(static_cast<size_t>(scratch_bytes));
  if (status != cudaSuccess) {
    Fail(ngra::gpu::CudaError("allocating the benchmark arenas", status));
    delete b;
    return nullptr;
  }
  b->plan_block = b->persistent.Allocate(static_cast<size_t>(plan_bytes));
  b->op_plan_block = chunk == op_config.max_chunk ? b->plan_block
                                                  : b->persistent.Allocate(static_cast<size_t>(b->op_plan_bytes));
  b->gpu.allocate = [b](size_t bytes) { return b->persistent.Allocate(bytes); };
  ngra::gpu::DeviceScope scope(b->gpu);
  std::string error = scope.error();
  if (error.empty()) error = ngra::gpu::PrepareGraph(b->gpu, b->csc, b->csr, num_edges, b->plan_block, config);
  if (error.empty() && b->op_plan_block != b->plan_block) {
    error = ngra::gpu::PrepareGraph(b->gpu, b->csc, b->csr, num_edges, b->op_plan_block, op_config);
  }
  if (error.empty()) error = ngra::gpu::LastError(b->gpu);
  if (!error.empty()) {
    Fail(error);
    delete b;
    return nullptr;
  }
  b->plan = ngra::gpu::PlanOf<int32_t>(b->plan_block, num_src, num_dst, num_edges, config);
  b->gpu.allocate = [b](size_t bytes) { return b->scratch.Allocate(bytes); };
  return b;
}

void ngra_bench_destroy(void* handle) { delete static_cast<Bench*>(handle); }

// out [num_dst, width] = sum over edges of weight[e] * x[src(e)]; x [num_src, width].
int ngra_bench_spmm(void* handle, const float* x, const float* weight, int64_t width, float* out) {
  return Call(handle, [&](Bench* b) {
    return ngra::gpu::ReduceWalk<Reduce::kSum>(b->gpu, b->csc, b->plan.forward, ngra::gpu::GeometryFor(width, 1),
                                               Term{b->csc, OperandsOf(x, weight, width)}, out,
                                               static_cast<int32_t*>(nullptr));
  });
}

// The TF op's path over the graph's plan, made for the ops' own chunk
// whatever --chunk says (the other entry points use --chunk).
int ngra_bench_spmm_op(void* handle, const float* x, const float* weight, int64_t width, float* out) {
  return SpmmOp(handle, x, weight, width, out, true);
}

// The TF op's path without a plan: device checks (one synchronisation) and a fresh schedule per call.
int ngra_bench_spmm_op_cold(void* handle, const float* x, const float* weight, int64_t width, float* out) {
  return SpmmOp(handle, x, weight, width, out, false);
}

// The d/dx_src kernels of RunFusedGatherGrad (sum, scalar weight): out
// [num_src, width] = sum over the edges u -> v of weight[e] * grad[v], grad
// [num_dst, width]. src_mul_edge's derivative does not read x_src.
int ngra_bench_grad_src(void* handle, const float* grad, const float* weight, int64_t width, float* out) {
  return Call(handle, [&](Bench* b) {
    return ngra::gpu::ReduceWalk<Reduce::kSum>(
        b->gpu, b->csr, b->plan.backward, ngra::gpu::GeometryFor(width, 1),
        SrcGradTerm{b->csr, OperandsOf(nullptr, weight, width), Upstream{grad, nullptr}}, out,
        static_cast<int32_t*>(nullptr));
  });
}

// The d/dweight kernel of RunFusedGatherGrad (sum, scalar weight): out
// [num_edges] = dot(grad[dst(e)], x[src(e)]), by CSC position; the weight
// itself is not read.
int ngra_bench_grad_weight(void* handle, const float* x, const float* grad, int64_t width, float* out) {
  return Call(handle, [&](Bench* b) {
    FusedProblem<float, int32_t> problem;  // the walk reads the CSC segments and the operands
    problem.csc = b->csc;
    problem.in = OperandsOf(x, nullptr, width);
    return ngra::gpu::WeightGradWalk<SrcMulEdge, false, WeightKind::kScalar>(b->gpu, problem, b->plan.per_edge,
                                                                             Upstream{grad, nullptr}, out);
  });
}

// out [num_dst, width] = sum over edges u -> v of tanh(a[u] + b[v]) * c[u],
// x2 [num_src, 2, width] = [a | c], xd [num_dst, width] = b: the gate_tanh template.
int ngra_bench_gate(void* handle, const float* x2, const float* xd, int64_t width, float* out) {
  return Call(handle, [&](Bench* b) {
    Operands<float> in;
    in.x_src = x2;
    in.src_slots = 2;
    in.x_dst = xd;
    in.width = width;
    using GateTerm = ngra::gpu::MessageTerm<ngra::Gate<ngra::Tanh>, WeightKind::kNone, float, int32_t>;
    return ngra::gpu::ReduceWalk<Reduce::kSum>(b->gpu, b->csc, b->plan.forward, ngra::gpu::GeometryFor(width, 1),
                                               GateTerm{b->csc, in}, out, static_cast<int32_t*>(nullptr));
  });
}

int ngra_bench_gate_code(void* handle, const float* x2, const float* xd, int64_t width, float* out) {
  return GateAsEdgeCode(handle, x2, xd, width, out, ngra::gpu::Interpreted<float>{}, BenchStream);
}

int ngra_bench_gate_generated(void* handle, const float* x2, const float* xd, int64_t width, float* out) {
  return GateAsEdgeCode(
      handle, x2, xd, width, out,
      [](const ngra::EdgeCode<float>& p) { return ngra::gpu::FixedCode<GateCode, float>{p}; }, BenchStream);
}

int ngra_bench_gate_module(void* handle, const char* path, const float* x2, const float* xd, int64_t width,
                           float* out) {
  ngra::gpu::EdgeCodeAttrs attrs;  // the module's kernels are named for the gate's signature
  attrs.code.assign(GateCode::kCode, GateCode::kCode + GateCode::kInstructions * ngra::kInstructionInts);
  attrs.value = GateCode::kValue;
  attrs.reduce = "sum";
  const ngra::gpu::GeneratedKernels* kernels = nullptr;
  const std::string error =
      ngra::gpu::LoadGeneratedKernels(path, attrs.GeneratedSignature<float, int32_t>(), &kernels);
  if (!error.empty()) {
    g_error = error;
    return 1;
  }
  return GateAsEdgeCode(handle, x2, xd, width, out, ngra::gpu::Generated<float>{},
                        [&](const Bench* b) { return ngra::gpu::GeneratedStream(b->gpu, kernels); });
}

// A schedule's totals {items, split segments, partial rows}, for the report:
// the forward's (by destination), or with csr != 0 the d/dx_src walk's.
int ngra_bench_schedule_counts(void* handle, int csr, int64_t* counts) {
  auto* b = static_cast<Bench*>(handle);
  const Schedule<int32_t>& schedule = csr ? b->plan.backward : b->plan.forward;
  int32_t host[3] = {0, 0, 0};
  if (cudaMemcpy(host, schedule.counts, sizeof(host), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return Fail("reading the schedule counts");
  }
  for (int i = 0; i < 3; ++i) counts[i] = host[i];
  return 0;
}

}  // extern "C"
