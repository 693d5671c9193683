// C entry points for tools/bench_cuda.py (ctypes; no TensorFlow): the fused
// gather src_mul_edge + sum with one scalar weight per edge, float32, int32
// indices, out = A @ X for A in CSC form (one segment per output row).
//
// Two ways to time it:
//   ngra_bench_spmm:    the kernels alone, over a schedule built once by
//                       ngra_bench_create (what a graph that is reused pays);
//   ngra_bench_spmm_op: what the TF op does per call: device-side argument
//                       checks with one synchronisation, the schedule, then
//                       the kernels, with scratch from a preallocated arena
//                       (TF's allocator is pooled too).
// Everything runs on the stream given to ngra_bench_create. Functions return
// 0 on success; ngra_bench_error() says what failed.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"

namespace {

using ngra::Operands;
using ngra::Reduce;
using ngra::Segments;
using ngra::SrcMulEdge;
using ngra::WeightKind;
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
  Segments<int32_t> csc;
  int64_t num_src = 0, num_edges = 0, chunk = 256;
  Schedule<int32_t> schedule;
  Arena persistent;  // the prebuilt schedule
  Arena scratch;     // per call
};

using Term = ngra::gpu::MessageTerm<SrcMulEdge, WeightKind::kScalar, float, int32_t>;

int Fail(const std::string& message) {
  g_error = message;
  return 1;
}

Operands<float> OperandsOf(const float* x, const float* weight, int64_t width) {
  Operands<float> in;
  in.x_src = x;
  in.weight = weight;
  in.weight_width = 1;
  in.width = width;
  return in;
}

}  // namespace

extern "C" {

const char* ngra_bench_error() { return g_error.c_str(); }

// indptr [num_dst + 1] and indices [num_edges] are device arrays that must
// outlive the handle. scratch_bytes bounds one op call's scratch.
void* ngra_bench_create(void* stream, int device, int64_t num_dst, int64_t num_src, int64_t num_edges,
                        const int32_t* indptr, const int32_t* indices, int64_t chunk, int64_t scratch_bytes) {
  auto* b = new Bench;
  b->gpu.stream = stream;
  b->gpu.device = device;
  b->csc = Segments<int32_t>{indptr, num_edges > 0 ? indices : nullptr, nullptr, num_dst};
  b->num_src = num_src;
  b->num_edges = num_edges;
  b->chunk = chunk;
  // The schedule needs a few arrays per segment and one item per chunk.
  const size_t schedule_bytes = static_cast<size_t>(64 * (num_dst + 1) + 24 * (num_dst + num_edges / chunk + 1)) +
                                (64 << 20);
  cudaError_t status = b->persistent.Reserve(schedule_bytes);
  if (status == cudaSuccess) status = b->scratch.Reserve(static_cast<size_t>(scratch_bytes));
  if (status != cudaSuccess) {
    Fail(ngra::gpu::CudaError("allocating the benchmark arenas", status));
    delete b;
    return nullptr;
  }
  b->gpu.allocate = [b](size_t bytes) { return b->persistent.Allocate(bytes); };
  ngra::gpu::DeviceScope scope(b->gpu);
  std::string error = scope.error();
  if (error.empty()) error = ngra::gpu::BuildSchedule(b->gpu, b->csc, num_edges, ngra::gpu::WalkConfig{chunk}, &b->schedule);
  if (error.empty()) error = ngra::gpu::LastError(b->gpu);
  if (!error.empty()) {
    Fail(error);
    delete b;
    return nullptr;
  }
  b->gpu.allocate = [b](size_t bytes) { return b->scratch.Allocate(bytes); };
  return b;
}

void ngra_bench_destroy(void* handle) { delete static_cast<Bench*>(handle); }

// out [num_dst, width] = sum over edges of weight[e] * x[src(e)]; x [num_src, width].
int ngra_bench_spmm(void* handle, const float* x, const float* weight, int64_t width, float* out) {
  auto* b = static_cast<Bench*>(handle);
  b->scratch.Reset();
  ngra::gpu::DeviceScope scope(b->gpu);
  std::string error = scope.error();
  if (error.empty()) {
    error = ngra::gpu::ReduceWalk<Reduce::kSum>(b->gpu, b->csc, b->schedule, ngra::gpu::GeometryFor(width, 1),
                                                Term{b->csc, OperandsOf(x, weight, width)}, out,
                                                static_cast<int32_t*>(nullptr));
  }
  return error.empty() ? 0 : Fail(error);
}

// The same through the TF op's path: checks of csc_indptr and csc_src on the
// device (one synchronisation), a fresh schedule, then the kernels.
int ngra_bench_spmm_op(void* handle, const float* x, const float* weight, int64_t width, float* out) {
  auto* b = static_cast<Bench*>(handle);
  b->scratch.Reset();
  ngra::gpu::DeviceScope scope(b->gpu);
  std::string error = scope.error();
  if (error.empty()) {
    ngra::gpu::Validator<GpuStream, int32_t> v(b->gpu);
    const int h = v.Indptr("csc_indptr", b->csc.indptr, b->csc.num_segments + 1);
    v.Host([&]() -> std::string { return v.Last(h) == b->num_edges ? "" : "csc_src must be a vector of indptr[-1] ids"; });
    v.Ids("csc_src", b->csc.indices, b->num_edges, 0, b->num_src);
    error = v.Finish();
  }
  Schedule<int32_t> schedule;
  if (error.empty()) {
    error = ngra::gpu::BuildSchedule(b->gpu, b->csc, b->num_edges, ngra::gpu::WalkConfig{b->chunk}, &schedule);
  }
  if (error.empty()) {
    error = ngra::gpu::ReduceWalk<Reduce::kSum>(b->gpu, b->csc, schedule, ngra::gpu::GeometryFor(width, 1),
                                                Term{b->csc, OperandsOf(x, weight, width)}, out,
                                                static_cast<int32_t*>(nullptr));
  }
  return error.empty() ? 0 : Fail(error);
}

// The schedule's totals {items, split segments, partial rows}, for the report.
int ngra_bench_schedule_counts(void* handle, int64_t* counts) {
  auto* b = static_cast<Bench*>(handle);
  int32_t host[3] = {0, 0, 0};
  if (cudaMemcpy(host, b->schedule.counts, sizeof(host), cudaMemcpyDeviceToHost) != cudaSuccess) {
    return Fail("reading the schedule counts");
  }
  for (int i = 0; i < 3; ++i) counts[i] = host[i];
  return 0;
}

}  // extern "C"
