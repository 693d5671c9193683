// Propagation kernels over Segments: fused gather (Scatter -> ApplyEdge ->
// Gather in one pass), its gradients, and the broadcast (scatter) kernel.
//
// Vertex-parallel, edge-sequential (NGra §3.3, Seastar §6.3): one segment's
// output row is accumulated in place while its edges stream past, so no
// per-edge tensor is ever written and no atomics are needed. Each function
// processes the segments [first, last); the caller parallelises over blocks
// from BalancedBlocks.
#ifndef NGRA_OPS_KERNELS_PROPAGATE_H_
#define NGRA_OPS_KERNELS_PROPAGATE_H_

#include <cstdint>
#include <cstring>

#include "ops/kernels/programs.h"
#include "ops/kernels/reducers.h"
#include "ops/kernels/segments.h"

namespace ngra {

enum class WeightKind { kNone, kScalar, kVector, kBlock };

// The dense operands of a fused gather. Row-major, no padding.
template <typename T>
struct Operands {
  const T* x_src = nullptr;     // [num_src, src_slots, width]
  int64_t src_slots = 1;        // 1; 2 for gates ([a | c]); num_types for type_select
  const T* x_dst = nullptr;     // [num_dst, width], or null when unused
  const T* weight = nullptr;    // [num_edges, weight_width], or null
  int64_t weight_width = 0;     // 1, width, or a divisor of width (one per block)
  const int32_t* type = nullptr;  // [num_edges] for type_select
  int64_t width = 0;            // features per message

  template <typename Program, typename Index>
  int64_t SrcOffset(Index u, Index e) const {
    const int64_t slot = Program::kUsesType ? type[e] : 0;
    return (static_cast<int64_t>(u) * src_slots + slot) * width;
  }
};

template <WeightKind K, typename T>
auto EdgeWeight(const Operands<T>& in, int64_t e) {
  if constexpr (K == WeightKind::kScalar) {
    return ScalarWeight<T>{in.weight[e]};
  } else if constexpr (K == WeightKind::kVector) {
    return VectorWeight<T>{in.weight + e * in.width};
  } else if constexpr (K == WeightKind::kBlock) {
    return BlockWeight<T>{in.weight + e * in.weight_width, in.width / in.weight_width};
  } else {
    return NoWeight<T>{};
  }
}

// out[s] = reduce over k in segment s of Program::Message(src row of Row(k),
// dst row s, weight of Edge(k)). `arg` receives the winning edge per feature
// for max and min (ignored otherwise).
template <typename Program, Reduce R, WeightKind K, typename T, typename Index>
void FusedGather(const Segments<Index>& seg, const Operands<T>& in, int64_t first,
                 int64_t last, T* out, Index* arg) {
  using Red = Reducer<R>;
  const int64_t width = in.width;
  for (int64_t s = first; s < last; ++s) {
    T* __restrict o = out + s * width;
    Index* __restrict a = Red::kTracksArg ? arg + s * width : nullptr;
    for (int64_t f = 0; f < width; ++f) o[f] = Red::template Init<T>();
    if constexpr (Red::kTracksArg) {
      for (int64_t f = 0; f < width; ++f) a[f] = Index(-1);
    }
    const T* t = Program::kUsesDst ? in.x_dst + s * width : nullptr;
    for (Index k = seg.Begin(s), end = seg.End(s); k < end; ++k) {
      const Index e = seg.Edge(k);
      const T* __restrict src = in.x_src + in.template SrcOffset<Program>(seg.Row(k), e);
      const auto w = EdgeWeight<K>(in, e);
      if constexpr (Red::kTracksArg) {
        for (int64_t f = 0; f < width; ++f) {
          Red::Step(o[f], a[f], Program::Message(src, t, w, f, width), e);
        }
      } else {
        for (int64_t f = 0; f < width; ++f) o[f] += Program::Message(src, t, w, f, width);
      }
    }
    const Index degree = seg.Degree(s);
    for (int64_t f = 0; f < width; ++f) Red::Finish(o[f], a ? a[f] : Index(-1), degree);
  }
}

// The upstream gradient that reaches edge e at feature f of destination v.
// Sum (and mean, whose 1/degree the caller folds into `grad`) send the whole
// row; max and min send it only where e won.
template <bool kArg, typename T, typename Index>
struct EdgeGrad {
  const T* grad;     // [num_dst, width]
  const Index* arg;  // [num_dst, width] when kArg
  int64_t width;
  bool Reaches(Index v, Index e, int64_t f) const {
    return !kArg || arg[static_cast<int64_t>(v) * width + f] == e;
  }
  T At(Index v, int64_t f) const { return grad[static_cast<int64_t>(v) * width + f]; }
};

// d_src[u] = sum over edges e = (u -> v) of g(v, e) * dMessage/dsrc, walking
// the source-grouped (CSR) segments: Row(k) is the destination v.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradSrc(const Segments<Index>& csr, const Operands<T>& in,
                        const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last,
                        T* d_src) {
  const int64_t width = in.width;
  const int64_t row = in.src_slots * width;
  for (int64_t u = first; u < last; ++u) {
    std::memset(d_src + u * row, 0, sizeof(T) * row);
    for (Index k = csr.Begin(u), end = csr.End(u); k < end; ++k) {
      const Index v = csr.Row(k), e = csr.Edge(k);
      const int64_t offset = in.template SrcOffset<Program>(static_cast<Index>(u), e);
      const T* src = in.x_src + offset;
      T* __restrict ds = d_src + offset;
      const T* t = Program::kUsesDst ? in.x_dst + static_cast<int64_t>(v) * width : nullptr;
      const auto w = EdgeWeight<K>(in, e);
      for (int64_t f = 0; f < width; ++f) {
        if (g.Reaches(v, e, f)) Program::SrcGrad(ds, g.At(v, f), src, t, w, f, width);
      }
    }
  }
}

// d_dst[v] = sum over edges e = (u -> v) of g(v, e) * dMessage/ddst, walking
// the destination-grouped (CSC) segments.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradDst(const Segments<Index>& csc, const Operands<T>& in,
                        const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last,
                        T* d_dst) {
  const int64_t width = in.width;
  for (int64_t v = first; v < last; ++v) {
    T* __restrict dt = d_dst + v * width;
    std::memset(dt, 0, sizeof(T) * width);
    const T* t = in.x_dst + v * width;
    for (Index k = csc.Begin(v), end = csc.End(v); k < end; ++k) {
      const Index e = csc.Edge(k);
      const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), e);
      const auto w = EdgeWeight<K>(in, e);
      for (int64_t f = 0; f < width; ++f) {
        if (g.Reaches(static_cast<Index>(v), e, f)) {
          dt[f] += Program::DstGrad(g.At(static_cast<Index>(v), f), src, t, w, f, width);
        }
      }
    }
  }
}

// d_weight[e] for every edge of the CSC segments [first, last): the gradient
// of each edge's weight, summed over the features that share it.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradWeight(const Segments<Index>& csc, const Operands<T>& in,
                           const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last,
                           T* d_weight) {
  const int64_t width = in.width;
  const int64_t ww = in.weight_width;
  for (int64_t v = first; v < last; ++v) {
    const T* t = Program::kUsesDst ? in.x_dst + v * width : nullptr;
    for (Index k = csc.Begin(v), end = csc.End(v); k < end; ++k) {
      const Index e = csc.Edge(k);
      const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), e);
      T* __restrict dw = d_weight + static_cast<int64_t>(e) * ww;
      std::memset(dw, 0, sizeof(T) * ww);
      const int64_t block = width / ww;
      for (int64_t f = 0; f < width; ++f) {
        if (g.Reaches(static_cast<Index>(v), e, f)) {
          const T x = Program::WeightGrad(g.At(static_cast<Index>(v), f), src, t, f, width);
          if constexpr (K == WeightKind::kVector) {
            dw[f] = x;
          } else {
            dw[f / block] += x;
          }
        }
      }
    }
  }
}

// Broadcast: out[Edge(k)] = x[s] for every k of segment s. Scatter of
// vertex rows to edges, and the adjoint of a sum gather on the same segments.
template <typename T, typename Index>
void Broadcast(const Segments<Index>& seg, const T* x, int64_t width, int64_t first,
               int64_t last, T* out) {
  for (int64_t s = first; s < last; ++s) {
    const T* row = x + s * width;
    for (Index k = seg.Begin(s), end = seg.End(s); k < end; ++k) {
      std::memcpy(out + static_cast<int64_t>(seg.Edge(k)) * width, row, sizeof(T) * width);
    }
  }
}

// The gradient of a max/min gather: each output element's gradient goes to
// the one edge that won it; every other edge element gets zero.
template <typename T, typename Index>
void GatherGradArg(const Segments<Index>& seg, const T* grad, const Index* arg,
                   int64_t width, int64_t first, int64_t last, T* out) {
  for (int64_t s = first; s < last; ++s) {
    for (Index k = seg.Begin(s), end = seg.End(s); k < end; ++k) {
      std::memset(out + static_cast<int64_t>(seg.Edge(k)) * width, 0, sizeof(T) * width);
    }
    for (int64_t f = 0; f < width; ++f) {
      const Index e = arg[s * width + f];
      if (e >= 0) out[static_cast<int64_t>(e) * width + f] = grad[s * width + f];
    }
  }
}

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_PROPAGATE_H_
