// What the TF kernels share: argument validation with messages that name the
// argument, the CPU thread pool as a `parallel` callable for the
// framework-free kernels, and dispatch from attribute strings to templates.
#ifndef NGRA_OPS_CC_OP_UTIL_H_
#define NGRA_OPS_CC_OP_UTIL_H_

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/kernels/propagate.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/threadpool.h"

namespace ngra {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;

// ---- Parallelism ----

// A `parallel(num_blocks, body)` over TF's intra-op pool; runs inline when
// there is too little work to be worth waking threads.
inline std::function<void(int64_t, const std::function<void(int64_t, int64_t)>&)> CpuParallel(
    OpKernelContext* ctx) {
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  return [pool](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 1) {
      body(0, n);
    } else {
      pool->TransformRangeConcurrently(1, n, body);
    }
  };
}

// How many blocks to cut a segment walk into: a few per thread so that
// uneven blocks still even out, and one when the work is tiny.
inline int64_t NumBlocks(OpKernelContext* ctx, int64_t num_positions, int64_t width) {
  const int64_t threads = ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
  const int64_t work = (num_positions + 1) * std::max<int64_t>(width, 1);
  constexpr int64_t kMinWorkPerBlock = 1 << 15;
  return std::max<int64_t>(1, std::min<int64_t>(4 * threads, work / kMinWorkPerBlock));
}

// Runs body(begin, end) over [0, n) in parallel chunks, each item costing about
// `item_cost` elements' work (a row's width, a stretch's length): the split
// into blocks is by work, so that a few wide items still use every thread.
inline void ParallelRange(OpKernelContext* ctx, int64_t n, const std::function<void(int64_t, int64_t)>& body,
                          int64_t item_cost = 1) {
  const int64_t blocks = NumBlocks(ctx, n, item_cost);
  CpuParallel(ctx)(blocks, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) body(n * b / blocks, n * (b + 1) / blocks);
  });
}

// ---- Validation ----

inline std::string ShapeOf(const Tensor& t) { return t.shape().DebugString(); }

// indptr must be [num_segments + 1] (any length when num_segments < 0),
// start at 0 and never decrease. Sets *num_positions to its last value. With
// known_last (a prepared graph's: its values were checked when it was
// prepared) only the shape is checked, and *num_positions is *known_last.
template <typename Index>
absl::Status CheckIndptr(const Tensor& indptr, const char* name, int64_t num_segments,
                         int64_t* num_positions, const int64_t* known_last = nullptr) {
  if (indptr.dims() != 1 || indptr.NumElements() < 1) {
    return InvalidArgument(name, " must be a non-empty vector, got shape ", ShapeOf(indptr));
  }
  if (num_segments >= 0 && indptr.NumElements() != num_segments + 1) {
    return InvalidArgument(name, " must have ", num_segments + 1, " entries (one per vertex, plus one), got ",
                           indptr.NumElements());
  }
  if (known_last != nullptr) {
    *num_positions = *known_last;
    return absl::OkStatus();
  }
  const auto p = indptr.flat<Index>();
  if (p(0) != 0) return InvalidArgument(name, "[0] must be 0, got ", p(0));
  for (int64_t i = 1; i < p.size(); ++i) {
    if (p(i) < p(i - 1)) {
      return InvalidArgument(name, " must be non-decreasing, but ", name, "[", i, "] = ", p(i), " < ",
                             name, "[", i - 1, "] = ", p(i - 1));
    }
  }
  *num_positions = static_cast<int64_t>(p(p.size() - 1));
  return absl::OkStatus();
}

// The shape half of CheckIds: a vector (any shape when `vector` is false) of `size` ids.
inline absl::Status CheckIdsShape(const Tensor& ids, const char* name, int64_t size, bool vector = true) {
  if ((vector && ids.dims() != 1) || ids.NumElements() != size) {
    return InvalidArgument(name, " must be a vector of ", size, " ids, got shape ", ShapeOf(ids));
  }
  return absl::OkStatus();
}

// ids must be a vector of `size` values in [lower, bound) (any shape when
// `vector` is false).
template <typename Index>
absl::Status CheckIds(OpKernelContext* ctx, const Tensor& ids, const char* name, int64_t size,
                      int64_t bound, int64_t lower = 0, bool vector = true) {
  TF_RETURN_IF_ERROR(CheckIdsShape(ids, name, size, vector));
  const Index* v = ids.flat<Index>().data();
  std::atomic<int64_t> bad{size};
  ParallelRange(ctx, size, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (v[i] < lower || v[i] >= bound) {
        int64_t seen = bad.load();
        while (i < seen && !bad.compare_exchange_weak(seen, i)) {
        }
        return;
      }
    }
  });
  if (bad.load() < size) {
    const int64_t i = bad.load();
    return InvalidArgument(name, "[", i, "] = ", static_cast<int64_t>(v[i]), " is out of range [", lower,
                           ", ", bound, ")");
  }
  return absl::OkStatus();
}

// A permutation of [0, size): in range and each value once.
template <typename Index>
absl::Status CheckPermutation(OpKernelContext* ctx, const Tensor& perm, const char* name,
                              int64_t size) {
  TF_RETURN_IF_ERROR(CheckIds<Index>(ctx, perm, name, size, size));
  std::vector<bool> seen(size, false);
  const auto v = perm.flat<Index>();
  for (int64_t i = 0; i < size; ++i) {
    if (seen[v(i)]) {
      return InvalidArgument(name, " must be a permutation, but ", static_cast<int64_t>(v(i)),
                             " appears twice (again at position ", i, ")");
    }
    seen[v(i)] = true;
  }
  return absl::OkStatus();
}

// A gather's optional initial accumulator: an empty tensor means none;
// otherwise it must be shaped like the output, and reduce must not be mean
// (a column of chunks is summed, then divided once by its whole in-degree).
// Allocates the output, taking over init's buffer when nothing else holds it
// so that the reduction runs in place; *init_data is null without init.
template <typename T>
absl::Status OutputFromInit(OpKernelContext* ctx, int init_input, const ::tensorflow::TensorShape& out_shape,
                            const std::string& reduce, Tensor** out, const T** init_data) {
  const Tensor& init = ctx->input(init_input);
  *init_data = nullptr;
  if (init.NumElements() == 0) return ctx->allocate_output(0, out_shape, out);
  if (reduce == "mean") {
    return InvalidArgument("init cannot be used with reduce=mean: reduce with sum from init, then divide by ",
                           "the whole in-degree");
  }
  if (init.shape() != out_shape) {
    return InvalidArgument("init must be empty or shaped like the output ", out_shape.DebugString(), ", got ",
                           ShapeOf(init));
  }
  // Forwarded, out is init's buffer (and the walk reads each row before
  // writing it); otherwise the walk reads init and writes a new out.
  *init_data = init.flat<T>().data();
  return ctx->forward_input_or_allocate_output({init_input}, 0, out_shape, out);
}

// ---- A graph prepared once (NgraPrepareGraph) ----
//
// On the CPU a plan is kCpuPlanBytes: a tag, then the graph's source,
// destination and edge counts. A fused op given a plan that fits its index
// arrays' sizes skips the checks of their values, which NgraPrepareGraph
// made, and checks only their shapes; any other plan (empty, a GPU's, another
// graph's) is ignored and the values are checked as without one.
constexpr int64_t kCpuPlanBytes = 32;
constexpr char kCpuPlanTag[8] = {'n', 'g', 'r', 'a', 'c', 'p', 'u', '1'};

inline void WriteCpuPlan(int64_t num_src, int64_t num_dst, int64_t num_edges, char* plan) {
  const int64_t sizes[3] = {num_src, num_dst, num_edges};
  std::memcpy(plan, kCpuPlanTag, sizeof(kCpuPlanTag));
  std::memcpy(plan + sizeof(kCpuPlanTag), sizes, sizeof(sizes));
}

inline bool CpuPlanFits(const Tensor& plan, int64_t num_src, int64_t num_dst, int64_t num_edges) {
  if (plan.dims() != 1 || plan.NumElements() != kCpuPlanBytes) return false;
  char expected[kCpuPlanBytes];
  WriteCpuPlan(num_src, num_dst, num_edges, expected);
  return std::memcmp(plan.tensor_data().data(), expected, kCpuPlanBytes) == 0;
}

// A fused op's CSC arrays: csc_indptr [num_dst + 1] and csc_src [E] with ids
// in [0, num_src); sets *num_edges. Prepared: shapes only (CpuPlanFits).
template <typename Index>
absl::Status CheckCsc(OpKernelContext* ctx, const Tensor& csc_indptr, const Tensor& csc_src, int64_t num_src,
                      bool prepared, int64_t* num_edges) {
  const int64_t known = csc_src.NumElements();
  TF_RETURN_IF_ERROR(CheckIndptr<Index>(csc_indptr, "csc_indptr", -1, num_edges, prepared ? &known : nullptr));
  if (prepared) return CheckIdsShape(csc_src, "csc_src", *num_edges);
  return CheckIds<Index>(ctx, csc_src, "csc_src", *num_edges, num_src);
}

// The CSR arrays a fused op carries for its gradient: they must count the E
// edges of its CSC arrays; checked in full only when `check_csr` (the walks
// that read them) and the graph is not prepared.
template <typename Index>
absl::Status CheckCsr(OpKernelContext* ctx, const Tensor& csr_indptr, const Tensor& csr_dst, const Tensor& csr_edge,
                      int64_t num_src, int64_t num_dst, int64_t E, bool check_csr, bool prepared = false) {
  int64_t csr_positions = 0;
  const int64_t known = csr_dst.NumElements();
  TF_RETURN_IF_ERROR(
      CheckIndptr<Index>(csr_indptr, "csr_indptr", num_src, &csr_positions, prepared ? &known : nullptr));
  if (csr_positions != E || csr_dst.dims() != 1 || csr_dst.NumElements() != E || csr_edge.dims() != 1 ||
      csr_edge.NumElements() != E) {
    return InvalidArgument("csr_indptr[-1], csr_dst and csr_edge must all count the ", E,
                           " edges of csc_indptr; got ", csr_positions, ", ", ShapeOf(csr_dst), ", ",
                           ShapeOf(csr_edge));
  }
  if (check_csr && !prepared) {
    TF_RETURN_IF_ERROR(CheckIds<Index>(ctx, csr_dst, "csr_dst", E, num_dst));
    TF_RETURN_IF_ERROR(CheckPermutation<Index>(ctx, csr_edge, "csr_edge", E));
  }
  return absl::OkStatus();
}

// The gradient rows a mean reduction sends to its edges: grad / in-degree per
// row (0 for an empty segment), into `scaled`; other reductions: grad itself.
template <typename T, typename Index>
absl::Status MeanScaled(OpKernelContext* ctx, const Tensor& grad, const Segments<Index>& csc, int64_t width,
                        const std::string& reduce, Tensor* scaled, const T** out) {
  *out = grad.flat<T>().data();
  if (reduce != "mean") return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(grad.dtype(), grad.shape(), scaled));
  const T* g = *out;
  T* sg = scaled->flat<T>().data();
  ParallelRange(ctx, csc.num_segments, [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      const T scale = csc.Degree(v) > 0 ? T(1) / static_cast<T>(csc.Degree(v)) : T(0);
      for (int64_t f = 0; f < width; ++f) sg[v * width + f] = g[v * width + f] * scale;
    }
  }, width);
  *out = sg;
  return absl::OkStatus();
}

// Segments from validated tensors; an empty ids tensor means identity.
template <typename Index>
Segments<Index> MakeSegments(const Tensor& indptr, const Tensor* indices, const Tensor* edge_ids) {
  Segments<Index> seg;
  seg.indptr = indptr.flat<Index>().data();
  seg.num_segments = indptr.NumElements() - 1;
  if (indices != nullptr && indices->NumElements() > 0) seg.indices = indices->flat<Index>().data();
  if (edge_ids != nullptr && edge_ids->NumElements() > 0) seg.edge_ids = edge_ids->flat<Index>().data();
  return seg;
}

// Runs kernel(first, last) over edge-balanced blocks of seg's segments [begin, end) (all of them by default).
template <typename Index, typename Kernel>
void RunSegments(OpKernelContext* ctx, const Segments<Index>& seg, int64_t width, Kernel&& kernel,
                 int64_t begin = 0, int64_t end = -1) {
  if (end < 0) end = seg.num_segments;
  if (end <= begin) return;
  const int64_t positions = static_cast<int64_t>(seg.indptr[end]) - static_cast<int64_t>(seg.indptr[begin]);
  const auto bounds = BalancedBlocks(seg.indptr + begin, end - begin, NumBlocks(ctx, positions, width));
  ForEachBlock(bounds, CpuParallel(ctx), [&](int64_t first, int64_t last) { kernel(begin + first, begin + last); });
}

// ---- Dispatch from attribute strings to template arguments ----

template <typename Fn>
absl::Status DispatchReduce(const std::string& name, Fn&& fn) {
  if (name == "sum") return fn(ReduceTag<Reduce::kSum>{});
  if (name == "mean") return fn(ReduceTag<Reduce::kMean>{});
  if (name == "max") return fn(ReduceTag<Reduce::kMax>{});
  if (name == "min") return fn(ReduceTag<Reduce::kMin>{});
  return InvalidArgument("reduce must be one of sum, mean, max, min; got '", name, "'");
}

inline bool IsExtremeReduce(const std::string& name) { return name == "max" || name == "min"; }

template <typename Fn>
absl::Status DispatchProgram(const std::string& name, Fn&& fn) {
  if (name == "copy_src") return fn(CopySrc{});
  if (name == "src_mul_edge") return fn(SrcMulEdge{});
  if (name == "src_add_dst") return fn(SrcAddDst{});
  if (name == "src_sub_dst") return fn(SrcSubDst{});
  if (name == "src_mul_dst") return fn(SrcMulDst{});
  if (name == "gate_sigmoid") return fn(Gate<Sigmoid>{});
  if (name == "gate_tanh") return fn(Gate<Tanh>{});
  if (name == "gate_relu") return fn(Gate<Relu>{});
  if (name == "type_select") return fn(TypeSelect{});
  return InvalidArgument(
      "program must be one of copy_src, src_mul_edge, src_add_dst, src_sub_dst, src_mul_dst, "
      "gate_sigmoid, gate_tanh, gate_relu, type_select; got '", name, "'");
}

template <typename Program, typename Fn>
absl::Status DispatchWeight(WeightKind kind, Fn&& fn) {
  return WithWeightKind<Program>(kind, fn, [] {
    return absl::Status(InvalidArgument("edge_weight is required by this program"));
  });
}

}  // namespace ngra

#endif  // NGRA_OPS_CC_OP_UTIL_H_
