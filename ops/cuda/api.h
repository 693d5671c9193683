// The GPU side of the propagation ops, as the TensorFlow wrappers and the
// standalone harness see it: plain C++ (no TensorFlow, no CUDA headers).
//
// Everything here is a template over a Backend, which decides where the
// per-thread kernel bodies (ops/cuda/bodies.h) run:
//  - GpuStream: on a CUDA stream. The definitions live in launch.h and are
//    compiled by nvcc once, in ops/cuda/*_gpu.cu.cc, for float/double x
//    int32/int64; callers link against those explicit instantiations.
//  - HostEmulation: every thread body in a plain host loop, in order. It runs
//    the very same index arithmetic, schedule, chunk splitting and combine
//    passes, so the harness can check the GPU algorithm on a machine without
//    a GPU (and CI does).
//
// Each entry point returns "" on success or an error message. Inputs are
// device pointers (host pointers under HostEmulation).
#ifndef NGRA_OPS_CUDA_API_H_
#define NGRA_OPS_CUDA_API_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/schedule.h"
#include "ops/kernels/edge_code.h"
#include "ops/kernels/programs.h"
#include "ops/kernels/propagate.h"
#include "ops/kernels/reducers.h"
#include "ops/kernels/segments.h"

namespace ngra {
namespace gpu {

// Scratch memory for one op call: valid until the op returns, and on the
// stream's side until the work enqueued before that point has finished (TF's
// allocate_temp and cudaMalloc-then-free-after-sync both give this).
// Returns nullptr when out of memory.
using Allocate = std::function<void*(size_t bytes)>;

struct GpuStream {
  void* stream = nullptr;  // a cudaStream_t (TF's compute stream), null: the default stream
  int device = 0;          // CUDA device ordinal the stream belongs to
  Allocate allocate;
};

struct HostEmulation {
  Allocate allocate;
};

enum class ProgramId {
  kCopySrc,
  kSrcMulEdge,
  kSrcAddDst,
  kSrcSubDst,
  kSrcMulDst,
  kGateSigmoid,
  kGateTanh,
  kGateRelu,
  kTypeSelect,
};

// From the op attribute strings; false for an unknown name.
inline bool ParseProgram(const std::string& name, ProgramId* id) {
  static const char* const kNames[] = {"copy_src",     "src_mul_edge", "src_add_dst", "src_sub_dst", "src_mul_dst",
                                       "gate_sigmoid", "gate_tanh",    "gate_relu",   "type_select"};
  for (int i = 0; i < 9; ++i) {
    if (name == kNames[i]) {
      *id = static_cast<ProgramId>(i);
      return true;
    }
  }
  return false;
}

inline bool ParseReduce(const std::string& name, Reduce* reduce) {
  if (name == "sum") *reduce = Reduce::kSum;
  else if (name == "mean") *reduce = Reduce::kMean;
  else if (name == "max") *reduce = Reduce::kMax;
  else if (name == "min") *reduce = Reduce::kMin;
  else return false;
  return true;
}

enum class Wrt { kXSrc, kXDst, kEdgeWeight };

// Tuning of the segment walks (see schedule.h).
struct WalkConfig {
  // A segment longer than this many edges is split into chunks of this size,
  // reduced by separate thread groups and combined in chunk order.
  // 1024 measured fastest of 64 / 256 / 1024 on an H100 (reddit-middle-like
  // graph, d = 128: 4.98 / 2.62 / 1.98 ms): fewer partial rows to write and
  // fold, while hubs still spread over many thread groups.
  int64_t max_chunk = 1024;
};

// The walk of a per-edge output (d/dweight): no partial rows to fold, so it
// splits segments finer, for parallelism alone. On an H100 its kernel took
// 1.43 ms with 256-edge chunks and 1.85 ms with 1024 (10,000 x 10,000 at 10%,
// d = 128), the same on the reddit-middle-like graph.
inline WalkConfig PerEdgeWalk(const WalkConfig& config) {
  constexpr int64_t kPerEdgeChunk = 256;
  return WalkConfig{config.max_chunk < kPerEdgeChunk ? config.max_chunk : kPerEdgeChunk};
}

// A graph's three walks, prepared once (PrepareGraph below); absent
// (present() false) when every call builds its own.
template <typename Index>
struct GraphPlan {
  Schedule<Index> forward;   // the CSC walk: forward and d/dx_dst
  Schedule<Index> backward;  // the CSR walk: d/dx_src
  Schedule<Index> per_edge;  // the CSC walk of per-edge outputs (d/dweight), PerEdgeWalk's chunks
  bool present() const { return forward.counts != nullptr; }
};

// ---- Validation of device-resident index arrays ----
//
// The checks are those of the CPU ops (ops/cc/op_util.h), with the same
// messages. Device checks run as kernels that record the first bad position;
// Finish() copies the results back once (one synchronisation) and returns
// the message of the first failed check, in the order the checks were added.
// Host checks (shape conditions that need a device value such as
// indptr[-1]) are interleaved in that order. A device check only runs when
// every device check added before it passed, so later checks may rely on
// earlier ones (a permutation test indexes by ids already range-checked).
template <typename Backend, typename Index>
class Validator {
 public:
  explicit Validator(const Backend& backend);
  // indptr of `length` >= 1 entries: indptr[0] == 0 and never decreasing.
  // Returns a handle for Last().
  int Indptr(const std::string& name, const Index* indptr, int64_t length);
  // An indptr checked before (a prepared graph's): no device check, and
  // Last() is `last`, known on the host.
  int KnownIndptr(const Index* indptr, int64_t length, int64_t last);
  // ids[i] in [lower, bound) for i < count. With bound_indptr >= 0 the bound
  // is Last(bound_indptr) instead (a device value).
  void Ids(const std::string& name, const Index* ids, int64_t count, int64_t lower, int64_t bound,
           int bound_indptr = -1);
  void Types(const std::string& name, const int32_t* ids, int64_t count, int64_t bound);
  // ids (already checked by Ids(name, ids, count, 0, count)) holds each value once.
  void Permutation(const std::string& name, const Index* ids, int64_t count);
  // Every argedge[i] >= 0 (already range-checked) is an edge of segment
  // i / width of (indptr, edge_ids); edge_ids null: edge k is position k.
  void Owners(const Index* argedge, int64_t count, int64_t width, int indptr, const Index* edge_ids,
              int64_t num_edges);
  // Runs at Finish(), in order; returns "" or the error message.
  void Host(std::function<std::string()> check);
  // indptr[length - 1] of an Indptr check; valid in Host checks and after Finish().
  int64_t Last(int indptr) const;
  // Waits for the device checks (none added: no wait at all), then judges
  // every check in order.
  std::string Finish();

 private:
  struct Check;
  Check* AddDeviceCheck(int kind, const std::string& name, const void* data);
  bool Status();  // allocates the device status at the first device check
  const Backend& backend_;
  int64_t* status_ = nullptr;  // device: first bad position per slot, then the indptr last values
  std::vector<int64_t> host_status_;
  std::vector<Check> checks_;
  std::vector<int64_t> lengths_;     // per Indptr handle
  std::vector<int64_t> known_last_;  // per Indptr handle: its last value if known on the host, else -1
  std::vector<const Index*> indptr_data_;
  int slots_ = 0;
  std::string error_;  // an allocation failure, reported by Finish()
};

// ---- Propagation ----

// NgraGather: out[s] = reduce(values[edge_ids[k]]) over segment s, starting
// from init[s] when init is not null (init may be out: in place);
// seg.indices == seg.edge_ids. argedge is written for max and min (kNoEdge
// where no edge won). num_positions: indptr[-1], the number of positions the
// segments cover.
template <typename Backend, typename T, typename Index>
std::string RunGather(const Backend& backend, Reduce reduce, const Segments<Index>& seg, int64_t num_positions,
                      const T* values, int64_t width, const T* init, T* out, Index* argedge,
                      const WalkConfig& config = {});

// NgraScatter: out[Edge(k)] = x[s] for every position k of segment s.
template <typename Backend, typename T, typename Index>
std::string RunScatter(const Backend& backend, const Segments<Index>& seg, int64_t num_positions, const T* x,
                       int64_t width, T* out, const WalkConfig& config = {});

// NgraGatherGradArg: out[Edge(k)][f] = grad[s][f] where argedge[s][f] ==
// Edge(k), else 0.
template <typename Backend, typename T, typename Index>
std::string RunGatherGradArg(const Backend& backend, const Segments<Index>& seg, int64_t num_positions,
                             const T* grad, const Index* argedge, int64_t width, T* out,
                             const WalkConfig& config = {});

// NgraInitGrad: out[i] = grad[i] where argedge[i] < 0 (no edge beat init),
// else 0, for the n elements of a max/min gather's output; out may be grad.
template <typename Backend, typename T, typename Index>
std::string RunInitGrad(const Backend& backend, const T* grad, const Index* argedge, int64_t n, T* out);

// The validated operands of NgraFusedGather (device pointers).
template <typename T, typename Index>
struct FusedProblem {
  ProgramId program = ProgramId::kCopySrc;
  Reduce reduce = Reduce::kSum;
  WeightKind weight_kind = WeightKind::kNone;
  Operands<T> in;
  Segments<Index> csc;  // forward walk; edge ids are positions
  Segments<Index> csr;  // backward walk; csr.edge_ids maps to edge ids
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
  const T* init = nullptr;  // [num_dst, width]: where the forward reduction starts (may be out), or null
  GraphPlan<Index> plan;    // the graph's prepared schedules, if it has them
};

// NgraFusedGather: out [num_dst, width]; argedge [num_dst, width] for max/min.
template <typename Backend, typename T, typename Index>
std::string RunFusedGather(const Backend& backend, const FusedProblem<T, Index>& problem, T* out,
                           Index* argedge, const WalkConfig& config = {});

// NgraFusedGatherGrad: out is shaped like the operand `wrt`.
template <typename Backend, typename T, typename Index>
std::string RunFusedGatherGrad(const Backend& backend, const FusedProblem<T, Index>& problem, Wrt wrt,
                               const T* grad, const Index* argedge, T* out, const WalkConfig& config = {});

// ---- Edge code (ops/kernels/edge_code.h): any element-wise edge stage ----

// ---- Generated edge code on the GPU ----
//
// The kernels ngra_tf/ops/generated.py compiles for one program with NVRTC
// (cuda_module: the program as FixedCode, edge_code_programs.h), loaded once
// per file by LoadGeneratedKernels (backend_cuda.cuh): one entry per pass,
// in the order of GeneratedKernel, null where the module has none (the
// program reads no such operand; softmax and float64 have no 4-wide forward).
// A problem that carries them runs them in place of the interpreter, over the
// same schedules and launches. kGeneratedForward2 and 4 are the forward over
// runs of 2 and 4 features (vector reads, where CodeRunsOf allows).
enum GeneratedKernel : int { kGeneratedForward = 0, kGeneratedGradSrc, kGeneratedGradDst, kGeneratedGradEdge,
                             kGeneratedForward2, kGeneratedForward4, kNumGeneratedKernels };
constexpr const char* kGeneratedKernelNames[kNumGeneratedKernels] = {
    "ngra_edge_code_forward",  "ngra_edge_code_grad_src",  "ngra_edge_code_grad_dst", "ngra_edge_code_grad_edge",
    "ngra_edge_code_forward2", "ngra_edge_code_forward4"};

struct GeneratedKernels {
  const void* kernel[kNumGeneratedKernels] = {};  // cudaKernel_t
};

// The layout of the bodies a generated kernel takes (edge_code_bodies.h):
// part of every module's signature, raised when a body changes.
constexpr int kGeneratedAbi = 2;

// "_" and the signature's 64-bit FNV-1a hash in 16 hex digits: the end of
// each kernel name in a module (generated.py's kernel_suffix computes it too).
inline std::string GeneratedKernelSuffix(const std::string& signature) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : signature) hash = (hash ^ c) * 1099511628211ull;
  static const char kHex[] = "0123456789abcdef";
  std::string suffix = "_";
  for (int shift = 60; shift >= 0; shift -= 4) suffix += kHex[(hash >> shift) & 15];
  return suffix;
}

// The kernels of a module file for the program of `signature`
// (LoadGeneratedKernels in backend_cuda.cuh, for the TF kernels, which are
// not compiled by nvcc): loaded once per file and signature for the process;
// an error names the file and what failed (a module of another program has
// no kernel of this signature's names).
std::string LoadGeneratedEdgeCode(const std::string& path, const std::string& signature,
                                  const GeneratedKernels** kernels);

// Which generated kernel runs a body (GeneratedEntry<Body>::kKernel), -1 for
// the bodies every program shares (combine passes, schedules): specialised in
// edge_code_launch.h for the bodies that evaluate the program.
template <typename Body>
struct GeneratedEntry {
  static constexpr int kKernel = -1;
};

// Whether a backend launches generated kernels: GeneratedBackend<B>::Stream
// is the backend that does, over B (backend_cuda.cuh, for GpuStream).
template <typename Backend>
struct GeneratedBackend {
  static constexpr bool kAvailable = false;
};

// The validated operands of NgraEdgeCode. program.code and program.tables
// are on the HOST (the op's code attribute and its host-memory `tables`
// input; a run copies them to the device); its constants, x_src, x_dst, edge
// and type are device pointers. The CPU walks' host-only fields
// (contiguous, uniform) are not used.
template <typename T, typename Index>
struct EdgeCodeProblem {
  EdgeCode<T> program;
  int64_t num_tables = 0;
  bool softmax = false;          // reduce=softmax: out rows are the online-softmax state [acc | sum | m]
  Reduce reduce = Reduce::kSum;  // the reduce otherwise
  Segments<Index> csc;           // forward walk; edge ids are positions
  Segments<Index> csr;           // d/dx_src walk; csr.edge_ids maps to edge ids
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
  const T* init = nullptr;  // shaped like out: where the forward starts (may be out), or null
  GraphPlan<Index> plan;    // the graph's prepared schedules, if it has them
  const GeneratedKernels* generated = nullptr;  // the program's generated kernels (GPU only), or null: interpret
};

// NgraEdgeCode: out [num_dst, width] ([num_dst, 3 * width] for softmax);
// argedge [num_dst, width] for max/min.
template <typename Backend, typename T, typename Index>
std::string RunEdgeCode(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, T* out, Index* argedge,
                        const WalkConfig& config = {});

// NgraEdgeCodeGrad w.r.t. x_src, x_dst or edge_data (Wrt::kEdgeWeight): out
// is shaped like that operand. grad is shaped like the forward's out;
// argedge (max/min) and state (softmax: the forward's finished state) are as
// the forward gave them, null otherwise.
template <typename Backend, typename T, typename Index>
std::string RunEdgeCodeGrad(const Backend& backend, const EdgeCodeProblem<T, Index>& problem, Wrt wrt,
                            const T* grad, const Index* argedge, const T* state, T* out,
                            const WalkConfig& config = {});

// ---- A graph prepared once: checked, with its schedules ----
//
// Every fused op call over the same adjacency would check its index arrays
// on the device (one synchronisation) and build the same schedules again.
// ValidateGraph (validate.h) and PrepareGraph do both once, the schedules
// into one block of device memory that the caller keeps with the graph
// (NgraPrepareGraph returns it as a tensor, as a partition keeps its CSC and
// CSR); PlanOf finds the schedules in that block from the graph's sizes, on
// the host. An op given the plan then checks only shapes, on the host, and
// launches its kernels without waiting.

// Bytes of the plan block of a graph with these sizes.
template <typename Index>
int64_t PlanBytes(int64_t num_src, int64_t num_dst, int64_t num_edges, const WalkConfig& config = {}) {
  const int64_t words = ScheduleWords(num_dst, num_edges, config.max_chunk) +
                        ScheduleWords(num_src, num_edges, config.max_chunk) +
                        ScheduleWords(num_dst, num_edges, PerEdgeWalk(config).max_chunk);
  return words * static_cast<int64_t>(sizeof(Index));
}

// The three schedules kept in `block` (PlanBytes of it), made for a graph of
// these sizes by PrepareGraph with the same config.
template <typename Index>
GraphPlan<Index> PlanOf(const void* block, int64_t num_src, int64_t num_dst, int64_t num_edges,
                        const WalkConfig& config = {}) {
  Index* words = static_cast<Index*>(const_cast<void*>(block));
  const int64_t chunk = config.max_chunk, edge_chunk = PerEdgeWalk(config).max_chunk;
  GraphPlan<Index> plan;
  plan.forward = ScheduleAt(words, num_dst, num_edges, chunk);
  words += ScheduleWords(num_dst, num_edges, chunk);
  plan.backward = ScheduleAt(words, num_src, num_edges, chunk);
  words += ScheduleWords(num_src, num_edges, chunk);
  plan.per_edge = ScheduleAt(words, num_dst, num_edges, edge_chunk);
  return plan;
}

// Builds the three schedules of a checked graph (ValidateGraph, validate.h)
// into `block` on the backend's device, without waiting for it. The caller
// keeps the block as long as the plan is used.
template <typename Backend, typename Index>
std::string PrepareGraph(const Backend& backend, const Segments<Index>& csc, const Segments<Index>& csr,
                         int64_t num_edges, void* block, const WalkConfig& config = {});

// ---- For benchmarks: the schedule built once, then only the kernel timed ----

// Builds the degree-sorted, chunked schedule of `seg` (num_positions =
// indptr[-1], already validated) on the device and without waiting for it:
// its arrays into `kept` (ScheduleWords of it), or with kept null into memory
// from backend.allocate, its temporaries always there; *schedule stays valid
// as long as that memory does. The caller selects the device (DeviceScope).
template <typename Backend, typename Index>
std::string BuildSchedule(const Backend& backend, const Segments<Index>& seg, int64_t num_positions,
                          const WalkConfig& config, Schedule<Index>* schedule, Index* kept = nullptr);

// RunFusedGather over a prebuilt schedule of problem.csc.
template <typename Backend, typename T, typename Index>
std::string RunFusedGatherScheduled(const Backend& backend, const FusedProblem<T, Index>& problem,
                                    const Schedule<Index>& schedule, T* out, Index* argedge);

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_API_H_
