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

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/kernels/programs.h"
#include "ops/kernels/reducers.h"
#include "ops/kernels/segments.h"

namespace ngra {

enum class WeightKind { kNone, kScalar, kVector, kBlock };

// Attribute values as template arguments, for dispatch.
template <Reduce R>
using ReduceTag = std::integral_constant<Reduce, R>;
template <WeightKind K>
using WeightTag = std::integral_constant<WeightKind, K>;

// fn(WeightTag<kind>) for a program that reads weights, or missing() when
// it needs one and has none. Programs without a weight only ever see kNone,
// which keeps the number of template instantiations (and build time) down.
template <typename Program, typename Fn, typename Missing>
auto WithWeightKind(WeightKind kind, Fn&& fn, Missing&& missing) {
  if constexpr (Program::kUsesWeight) {
    switch (kind) {
      case WeightKind::kScalar: return fn(WeightTag<WeightKind::kScalar>{});
      case WeightKind::kVector: return fn(WeightTag<WeightKind::kVector>{});
      case WeightKind::kBlock: return fn(WeightTag<WeightKind::kBlock>{});
      default: return missing();
    }
  } else {
    return fn(WeightTag<WeightKind::kNone>{});
  }
}

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
  NGRA_HOST_DEVICE int64_t SrcOffset(Index u, Index e) const {
    const int64_t slot = Program::kUsesType ? type[e] : 0;
    return (static_cast<int64_t>(u) * src_slots + slot) * width;
  }
};

template <WeightKind K, typename T>
NGRA_HOST_DEVICE auto EdgeWeight(const Operands<T>& in, int64_t e) {
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

#ifndef __CUDACC_RTC__  // the CPU walks (NVRTC compiles device code only)

// Calls step(j, w) for j in [0, count), w reading the weight of edge e at
// feature f0 + j. Block weights (one per head) are read once per run of a
// head's features: `f / block` per feature is a scalar integer division that
// stops the loop from vectorising (on GAT's [edges, heads] weights it took
// most of the walk). The features are visited in the same order.
template <WeightKind K, typename T, typename Step>
inline void ForEachWeighted(const Operands<T>& in, int64_t e, int64_t f0, int64_t count, Step&& step) {
  const auto w = EdgeWeight<K>(in, e);
  if constexpr (K == WeightKind::kBlock) {
    int64_t head = f0 / w.block, j = 0, next = (head + 1) * w.block - f0;  // next: the first j of the next head
    for (; j < count; ++head, next += w.block) {
      const ScalarWeight<T> per_head{w.row[head]};
      for (const int64_t end = next < count ? next : count; j < end; ++j) step(j, per_head);
    }
  } else {
    for (int64_t j = 0; j < count; ++j) step(j, w);
  }
}

// ---- The segment walk shared by the forward pass and the gradients ----
//
// Vertex-parallel and edge-sequential: a segment's output tile stays in
// registers (or L1) while its edges stream past, in their stored order, so
// the sums are deterministic. Two cache techniques on top:
//  - Features go in tiles of kTileBytes, so a wide row (602 features) does not
//    thrash the accumulators.
//  - When the gathered matrix is larger than a core's L2, its rows are cut
//    into blocks of kBlockBytes and every segment of the thread's range is
//    walked once per block (2-D tiling, NGra's chunking applied to the cache).
//    A segment's edges are sorted by gathered row, so each block is a
//    contiguous run of them; edges are still reduced in stored order.
//    Blocking costs one extra pass over the output tile per block, so it is
//    used only when segments average kMinEdgesPerBlock or more edges per
//    block. (At 4, GCN's 41-wide second layer on reddit-small blocked at ~6
//    edges per block and ran 1.7x slower, forward and backward, than
//    prefetching from L3 on an AMD EPYC.)
// Without blocking, rows a few positions ahead (in the thread's range, past
// the segment's end) are prefetched: the gathers are random and the hardware
// prefetcher cannot guess them.
constexpr int64_t kTileBytes = 512;
constexpr int64_t kBlockBytes = 1 << 20;
constexpr int64_t kMinEdgesPerBlock = 16;
constexpr int kPrefetchDistance = 8;

NGRA_PREFETCH_INLINE void PrefetchBytes(const void* address, int64_t bytes) {
  const char* p = static_cast<const char*>(address);
  for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(p + offset);
}

// Where a tile's walk over one segment starts and stops.
template <typename Index>
struct TileSpan {
  Index begin, end;       // positions of the segment still to reduce
  Index row_limit;        // stop at the first position whose row reaches this
  bool first, last;       // the first / last block: initialise / finish
  Index prefetch_end;     // prefetch positions below this (the thread's range end; 0: none)
};

// Reduces positions [span.begin, ...) of segment s into one output tile
// [f0, f0 + n) of Walk::kParts consecutive parts from `part` on (part p's
// tile at out + p * part_stride); returns the first position not reduced.
// The first block starts from `init`'s tile (laid out like out's; it may be
// out itself) or, when init is null, from the reducer's empty accumulator.
template <Reduce R, int64_t kTile, bool kFull, typename Walk, typename T, typename Index>
inline Index ReduceTile(const Walk& walk, const Segments<Index>& seg, int64_t s, int part, int64_t f0,
                        int64_t n, const TileSpan<Index>& span, const T* init, T* out, int64_t part_stride,
                        Index* arg) {
  using Red = Reducer<R>;
  constexpr int kParts = Walk::kParts;
  const int64_t count = kFull ? kTile : n;
  T acc[kParts * kTile];
  Index win[kParts * kTile];
  const T* start = span.first ? init : out;
  const Index start_win = Index(init != nullptr ? kNoEdge : kUnset);
  for (int p = 0; p < kParts; ++p) {
    for (int64_t j = 0; j < count; ++j) {
      acc[p * kTile + j] = start != nullptr ? start[p * part_stride + j] : Red::template Init<T>();
      win[p * kTile + j] = span.first || !Red::kTracksArg ? start_win : arg[p * part_stride + j];
    }
  }
  Index k = span.begin;
  for (; k < span.end && seg.Row(k) < span.row_limit; ++k) {
    // Ahead into the next segments too: where segments hold an edge or two,
    // stopping at the segment's end would prefetch nothing.
    if (k + kPrefetchDistance < span.prefetch_end) {
      walk.Prefetch(k + kPrefetchDistance, f0, count);
    }
    walk.template Accumulate<Red, kTile>(s, k, part, f0, count, acc, win);
  }
  for (int p = 0; p < kParts; ++p) {
    if (span.last) {
      for (int64_t j = 0; j < count; ++j) Red::Finish(acc[p * kTile + j], win[p * kTile + j], seg.Degree(s));
    }
    for (int64_t j = 0; j < count; ++j) out[p * part_stride + j] = acc[p * kTile + j];
    if constexpr (Red::kTracksArg) {
      for (int64_t j = 0; j < count; ++j) arg[p * part_stride + j] = win[p * kTile + j];
    }
  }
  return k;
}

// out[s, part, f] = reduce over k in segment s of the walk's message for
// (k, part, f), for the segments [first, last); out rows hold `parts` x
// `width` values. A walk's Accumulate<Reducer, kStride>(s, k, part, f0,
// count, acc, win) folds position k's messages for features [f0, f0 +
// count) of Walk::kParts parts from `part` on into the tiles acc + p *
// kStride; its loop sees only local restrict pointers, so it vectorises. A
// walk that reduces two parts at once computes what they share (a gate's
// activation) once per edge and feature instead of once per part.
// The walk gathers `walk.gathered_rows` rows of `walk.gathered_per_row`
// features-wide tiles (0 rows: gathers are sequential, never block). Segment
// s starts from init's row s when init is given (init may be out: each row is
// read, then written, by the one thread that owns it).
template <Reduce R, typename Walk, typename T, typename Index>
void ReduceSegments(const Walk& walk, const Segments<Index>& seg, int parts, int64_t width,
                    int64_t first, int64_t last, T* out, Index* arg, const T* init = nullptr) {
  constexpr int64_t kTile = kTileBytes / sizeof(T);
  const int64_t row = parts * width;
  const int64_t segments = last - first;
  const int64_t edges = segments > 0 ? static_cast<int64_t>(seg.indptr[last] - seg.indptr[first]) : 0;
  std::vector<Index> cursor;
  for (int part = 0; part < parts; part += Walk::kParts) {
    for (int64_t f0 = 0; f0 < width; f0 += kTile) {
      const int64_t n = std::min(kTile, width - f0);
      const int64_t tile_bytes = std::max<int64_t>(1, n * sizeof(T) * walk.gathered_per_row);
      const int64_t rows_per_block = std::max<int64_t>(1, kBlockBytes / tile_bytes);
      int64_t blocks = (walk.gathered_rows + rows_per_block - 1) / rows_per_block;
      if (blocks > 1 && edges < kMinEdgesPerBlock * blocks * segments) blocks = 1;
      const bool prefetch = blocks <= 1 && walk.gathered_rows * tile_bytes > kBlockBytes;
      const Index prefetch_end = prefetch ? seg.Begin(last) : Index(0);  // the thread's range end
      if (blocks > 1) cursor.assign(seg.indptr + first, seg.indptr + last);
      for (int64_t b = 0; b < std::max<int64_t>(blocks, 1); ++b) {
        const bool last_block = b + 1 >= blocks;
        for (int64_t s = first; s < last; ++s) {
          TileSpan<Index> span;
          span.begin = blocks > 1 ? cursor[s - first] : seg.Begin(s);
          span.end = seg.End(s);
          span.row_limit = last_block ? std::numeric_limits<Index>::max()
                                      : static_cast<Index>((b + 1) * rows_per_block);
          span.first = b == 0;
          span.last = last_block;
          span.prefetch_end = prefetch_end;
          const int64_t at = s * row + part * width + f0;
          Index* a = Reducer<R>::kTracksArg ? arg + at : nullptr;
          const T* i = init != nullptr ? init + at : nullptr;
          const Index stop =
              n == kTile ? ReduceTile<R, kTile, true>(walk, seg, s, part, f0, n, span, i, out + at, width, a)
                         : ReduceTile<R, kTile, false>(walk, seg, s, part, f0, n, span, i, out + at, width, a);
          if (blocks > 1) cursor[s - first] = stop;
        }
      }
    }
  }
}

// ---- Forward: messages from source rows into destination segments ----

template <typename Program, WeightKind K, typename T, typename Index>
struct ForwardWalk {
  const Segments<Index>& csc;
  const Operands<T>& in;
  int64_t gathered_rows;  // x_src rows, or 0 when rows are read in order
  int64_t gathered_per_row;
  static constexpr int kParts = 1;

  const T* Src(Index k) const { return in.x_src + in.template SrcOffset<Program>(csc.Row(k), csc.Edge(k)); }
  NGRA_PREFETCH_INLINE void Prefetch(Index k, int64_t f0, int64_t n) const {
    const T* src = Src(k);
    PrefetchBytes(src + f0, n * sizeof(T));
    if (Program::kSrcParts == 2) PrefetchBytes(src + in.width + f0, n * sizeof(T));
  }
  // Reduces the message of position k into the tile acc[0, count) (f0 on).
  template <typename Red, int64_t>
  void Accumulate(int64_t v, Index k, int, int64_t f0, int64_t count, T* __restrict acc,
                  Index* __restrict win) const {
    const Index e = csc.Edge(k);
    const T* __restrict src = Src(k);
    const T* __restrict t = Program::kUsesDst ? in.x_dst + v * in.width : nullptr;
    const int64_t width = in.width;
    ForEachWeighted<K>(in, e, f0, count, [&](int64_t j, const auto& w) {
      Red::Step(acc[j], win[j], Program::Message(src, t, w, f0 + j, width), e);
    });
  }
};

// out[v] = reduce over k in segment v of Program::Message(src row of Row(k),
// dst row v, weight of Edge(k)), where x_src has `in_rows` rows. `arg`
// receives the winning edge per feature for max and min (ignored otherwise),
// kNoEdge where no edge won. With `init` ([num_dst, width], possibly out
// itself) the reduction starts from init[v] instead of the empty accumulator,
// so an empty segment yields init[v].
template <typename Program, Reduce R, WeightKind K, typename T, typename Index>
void FusedGather(const Segments<Index>& csc, const Operands<T>& in, int64_t in_rows, int64_t first,
                 int64_t last, T* out, Index* arg, const T* init = nullptr) {
  const int64_t rows = csc.indices ? static_cast<int64_t>(in_rows) : 0;
  const ForwardWalk<Program, K, T, Index> walk{csc, in, rows, in.src_slots};
  ReduceSegments<R>(walk, csc, 1, in.width, first, last, out, arg, init);
}

// ---- Gradients ----

// The upstream gradient that reaches edge e at feature f of destination v.
// Sum (and mean, whose 1/degree the caller folds into `grad`) send the whole
// row; max and min send it only where e won.
template <bool kArg, typename T, typename Index>
struct EdgeGrad {
  const T* grad;     // [rows, width]
  const Index* arg;  // [rows, width] when kArg
  int64_t width;
  int64_t rows;
  const T* Row(Index v) const { return grad + static_cast<int64_t>(v) * width; }
  const Index* ArgRow(Index v) const { return kArg ? arg + static_cast<int64_t>(v) * width : nullptr; }
};

// d_src: walks the source-grouped (CSR) segments, where Row(k) is the
// destination v of the edge; x_src[u] (the segment's own row) stays in L1.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct SrcGradWalk {
  const Segments<Index>& csr;
  const Operands<T>& in;
  const EdgeGrad<kArg, T, Index>& g;
  int64_t gathered_rows;  // destination rows
  int64_t gathered_per_row = Program::kUsesDst ? 2 : 1;
  // Both parts of a two-part source row at once ([a | c] of a gate: its
  // activation is computed once per edge and feature for both).
  static constexpr int kParts = Program::kSrcParts;

  NGRA_PREFETCH_INLINE void Prefetch(Index k, int64_t f0, int64_t n) const {
    const Index v = csr.Row(k);
    PrefetchBytes(g.Row(v) + f0, n * sizeof(T));
    if (Program::kUsesDst) PrefetchBytes(in.x_dst + static_cast<int64_t>(v) * in.width + f0, n * sizeof(T));
    // Weights are in CSC order: this walk reads them at random too, unless
    // FusedGatherGradOp copied them into CSR order (WeightsInCsrOrder).
    if constexpr (K == WeightKind::kScalar) __builtin_prefetch(in.weight + csr.Edge(k));
  }
  template <typename Red, int64_t kStride>
  void Accumulate(int64_t u, Index k, int, int64_t f0, int64_t count, T* __restrict acc,
                  Index* __restrict) const {
    const Index v = csr.Row(k), e = csr.Edge(k);
    const T* __restrict src = in.x_src + in.template SrcOffset<Program>(static_cast<Index>(u), e);
    const T* __restrict t = Program::kUsesDst ? in.x_dst + static_cast<int64_t>(v) * in.width : nullptr;
    const T* __restrict grad = g.Row(v);
    const Index* __restrict won = g.ArgRow(v);
    const int64_t width = in.width;
    ForEachWeighted<K>(in, e, f0, count, [&](int64_t j, const auto& w) {
      const int64_t f = f0 + j;
      const bool reaches = !kArg || won[f] == e;
      // One expression per part in one loop body: the compiler shares what
      // the parts compute alike (z and the activation of a gate).
      for (int p = 0; p < kParts; ++p) {
        acc[p * kStride + j] += reaches ? Program::SrcGrad(p, grad[f], src, t, w, f, width) : T(0);
      }
    });
  }
};

// d_src[u] = sum over edges e = (u -> v) of g(v, e) * dMessage/dsrc.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradSrc(const Segments<Index>& csr, const Operands<T>& in,
                        const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last, T* d_src) {
  const int64_t width = in.width;
  if constexpr (Program::kUsesType) {
    // Each edge feeds only its type's slot of the source row: accumulate
    // into the row directly instead of walking every slot.
    const int64_t row = in.src_slots * width;
    const SrcGradWalk<Program, kArg, K, T, Index> walk{csr, in, g, g.rows};  // for its Prefetch
    for (int64_t u = first; u < last; ++u) {
      std::memset(d_src + u * row, 0, sizeof(T) * row);
      for (Index k = csr.Begin(u), end = csr.End(u); k < end; ++k) {
        if (k + kPrefetchDistance < csr.Begin(last)) walk.Prefetch(k + kPrefetchDistance, 0, width);
        const Index v = csr.Row(k), e = csr.Edge(k);
        T* __restrict ds = d_src + in.template SrcOffset<Program>(static_cast<Index>(u), e);
        const T* grad = g.Row(v);
        const Index* win = g.ArgRow(v);
        for (int64_t f = 0; f < width; ++f) {
          if (!kArg || win[f] == e) ds[f] += grad[f];
        }
      }
    }
  } else {
    const SrcGradWalk<Program, kArg, K, T, Index> walk{csr, in, g, g.rows};
    ReduceSegments<Reduce::kSum>(walk, csr, Program::kSrcParts, width, first, last, d_src,
                                 static_cast<Index*>(nullptr));
  }
}

// d_dst: walks the destination-grouped (CSC) segments.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct DstGradWalk {
  const Segments<Index>& csc;
  const Operands<T>& in;
  const EdgeGrad<kArg, T, Index>& g;
  int64_t gathered_rows;  // source rows
  int64_t gathered_per_row;
  static constexpr int kParts = 1;

  NGRA_PREFETCH_INLINE void Prefetch(Index k, int64_t f0, int64_t n) const {
    const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), csc.Edge(k));
    PrefetchBytes(src + f0, n * sizeof(T));
    if (Program::kSrcParts == 2) PrefetchBytes(src + in.width + f0, n * sizeof(T));
  }
  template <typename Red, int64_t>
  void Accumulate(int64_t v, Index k, int, int64_t f0, int64_t count, T* __restrict acc,
                  Index* __restrict) const {
    const Index e = csc.Edge(k);
    const T* __restrict src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), e);
    const T* __restrict t = in.x_dst + v * in.width;
    const T* __restrict grad = g.Row(static_cast<Index>(v));
    const Index* __restrict won = g.ArgRow(static_cast<Index>(v));
    const int64_t width = in.width;
    ForEachWeighted<K>(in, e, f0, count, [&](int64_t j, const auto& w) {
      const int64_t f = f0 + j;
      if constexpr (kArg) {
        acc[j] += won[f] == e ? Program::DstGrad(grad[f], src, t, w, f, width) : T(0);
      } else {
        acc[j] += Program::DstGrad(grad[f], src, t, w, f, width);
      }
    });
  }
};

// d_dst[v] = sum over edges e = (u -> v) of g(v, e) * dMessage/ddst.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradDst(const Segments<Index>& csc, const Operands<T>& in, int64_t num_src,
                        const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last, T* d_dst) {
  const DstGradWalk<Program, kArg, K, T, Index> walk{csc, in, g, num_src, in.src_slots};
  ReduceSegments<Reduce::kSum>(walk, csc, 1, in.width, first, last, d_dst, static_cast<Index*>(nullptr));
}

// d_weight[e] for every edge of the CSC segments [first, last): the gradient
// of each edge's weight, summed over the features that share it.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
void FusedGatherGradWeight(const Segments<Index>& csc, const Operands<T>& in,
                           const EdgeGrad<kArg, T, Index>& g, int64_t first, int64_t last,
                           T* d_weight) {
  const int64_t width = in.width;
  const int64_t ww = in.weight_width;
  const DstGradWalk<Program, kArg, K, T, Index> walk{csc, in, g, 0, in.src_slots};  // for its Prefetch
  for (int64_t v = first; v < last; ++v) {
    const T* t = Program::kUsesDst ? in.x_dst + v * width : nullptr;
    for (Index k = csc.Begin(v), end = csc.End(v); k < end; ++k) {
      if (k + kPrefetchDistance < csc.Begin(last)) walk.Prefetch(k + kPrefetchDistance, 0, width);
      const Index e = csc.Edge(k);
      const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), e);
      T* __restrict dw = d_weight + static_cast<int64_t>(e) * ww;
      std::memset(dw, 0, sizeof(T) * ww);
      const int64_t block = width / ww;
      const T* grad = g.Row(static_cast<Index>(v));
      const Index* win = g.ArgRow(static_cast<Index>(v));
      if constexpr (K == WeightKind::kVector) {
        for (int64_t f = 0; f < width; ++f) {
          if (!kArg || win[f] == e) dw[f] = Program::WeightGrad(grad[f], src, t, f, width);
        }
      } else {  // a head's features in a run of their own, in feature order: no division per feature
        for (int64_t head = 0, f = 0; head < ww; ++head) {
          for (const int64_t end = f + block; f < end; ++f) {
            if (!kArg || win[f] == e) dw[head] += Program::WeightGrad(grad[f], src, t, f, width);
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

// The gradient of a max/min reduction w.r.t. its init: each element's
// gradient where no edge won it (kNoEdge: init held the extreme), else 0.
// Elements [begin, end); element-wise, so the GPU runs it one per thread.
template <typename T, typename Index>
NGRA_HOST_DEVICE inline void InitGrad(const T* grad, const Index* arg, int64_t begin, int64_t end, T* out) {
  for (int64_t i = begin; i < end; ++i) out[i] = arg[i] < 0 ? grad[i] : T(0);
}

#endif  // __CUDACC_RTC__

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_PROPAGATE_H_
