// Per-thread bodies of the GPU propagation kernels.
//
// Each body is a functor called once per thread index t, with no
// communication between threads: no shared memory, no shuffles, no atomics.
// On the GPU a generic kernel calls body(t) for t = blockIdx.x * blockDim.x +
// threadIdx.x (backend_cuda.cuh); under HostEmulation a loop calls it for
// every t in order. Lanes read the same index (a broadcast within the group)
// instead of sharing it through shuffles; the gathered rows, which are the
// traffic that matters, are read coalesced either way.
//
// The walks mirror ops/kernels/propagate.h and use the same programs and
// reducers, so a message, a partial derivative and a reduction step are
// computed by the same code on both sides.
#ifndef NGRA_OPS_CUDA_BODIES_H_
#define NGRA_OPS_CUDA_BODIES_H_

#include <cstdint>

#include "ops/cuda/schedule.h"
#include "ops/kernels/platform.h"
#include "ops/kernels/programs.h"
#include "ops/kernels/propagate.h"
#include "ops/kernels/reducers.h"
#include "ops/kernels/segments.h"

// Full unrolling of the fixed-size loops keeps the accumulators in registers.
#ifdef __CUDACC__
#define NGRA_UNROLL _Pragma("unroll")
#else
#define NGRA_UNROLL
#endif

namespace ngra {
namespace gpu {

// ---- Terms: what position k of a segment contributes to feature f ----
//
// At(s, k, part) returns the per-edge view (or inactive, to skip the edge);
// Value(view, part, f) the contribution. The reduce body folds the
// contributions of a work item's positions in order.

// Forward: Program::Message(x_src row of Row(k), x_dst row s, weight of Edge(k)).
template <typename Program, WeightKind K, typename T, typename Index>
struct MessageTerm {
  Segments<Index> seg;
  Operands<T> in;

  struct View {
    bool active;
    Index edge;
    const T* src;
    const T* dst;
    decltype(EdgeWeight<K>(Operands<T>{}, 0)) weight;
  };
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const {
    const Index e = seg.Edge(k);
    const T* dst = Program::kUsesDst ? in.x_dst + static_cast<int64_t>(s) * in.width : nullptr;
    return View{true, e, in.x_src + in.template SrcOffset<Program>(seg.Row(k), e), dst, EdgeWeight<K>(in, e)};
  }
  NGRA_HOST_DEVICE T Value(const View& v, int64_t, int64_t f) const {
    return Program::Message(v.src, v.dst, v.weight, f, in.width);
  }
};

// The upstream gradient of one output element that reaches edge e: all of it
// for sum (and mean, pre-scaled), only where e won for max and min.
template <bool kArg, typename T, typename Index>
struct UpstreamGrad {
  const T* grad;     // [num_dst, width]
  const Index* arg;  // [num_dst, width] when kArg
  NGRA_HOST_DEVICE bool Reaches(int64_t at, Index e) const { return !kArg || arg[at] == e; }
};

// d/dx_src over the CSR segments: s is the source u, Row(k) the destination v.
// For type_select the part is the type slot, and only edges of that type
// contribute to it.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct SrcGradTerm {
  Segments<Index> seg;
  Operands<T> in;
  UpstreamGrad<kArg, T, Index> up;

  struct View {
    bool active;
    Index edge;
    int64_t dst_row;  // v * width
    const T* src;
    const T* dst;
    decltype(EdgeWeight<K>(Operands<T>{}, 0)) weight;
  };
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t part) const {
    const Index e = seg.Edge(k);
    const int64_t v_row = static_cast<int64_t>(seg.Row(k)) * in.width;
    const bool active = !Program::kUsesType || in.type[e] == part;
    const T* dst = Program::kUsesDst ? in.x_dst + v_row : nullptr;
    return View{active, e, v_row, in.x_src + in.template SrcOffset<Program>(s, e), dst, EdgeWeight<K>(in, e)};
  }
  NGRA_HOST_DEVICE T Value(const View& v, int64_t part, int64_t f) const {
    const int64_t at = v.dst_row + f;
    // As on the CPU: a masked edge adds an exact zero.
    return up.Reaches(at, v.edge)
               ? Program::SrcGrad(static_cast<int>(part), up.grad[at], v.src, v.dst, v.weight, f, in.width)
               : T(0);
  }
};

// d/dx_dst over the CSC segments: s is the destination v.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct DstGradTerm {
  Segments<Index> seg;
  Operands<T> in;
  UpstreamGrad<kArg, T, Index> up;

  struct View {
    bool active;
    Index edge;
    int64_t dst_row;
    const T* src;
    decltype(EdgeWeight<K>(Operands<T>{}, 0)) weight;
  };
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const {
    const Index e = seg.Edge(k);
    return View{true, e, static_cast<int64_t>(s) * in.width, in.x_src + in.template SrcOffset<Program>(seg.Row(k), e),
                EdgeWeight<K>(in, e)};
  }
  NGRA_HOST_DEVICE T Value(const View& v, int64_t, int64_t f) const {
    const int64_t at = v.dst_row + f;
    return up.Reaches(at, v.edge)
               ? Program::DstGrad(up.grad[at], v.src, in.x_dst + v.dst_row, v.weight, f, in.width)
               : T(0);
  }
};

// ---- The segment reduction: one (item, part, tile) per thread group ----
//
// out[s, part, f] = Reducer over the positions of segment s of term(k, part,
// f). Whole-segment items finish and write the output; the chunks of a split
// segment write their unfinished accumulators (and winners), chunk 0 into the
// output row and the others into partial rows, which CombineBody folds in
// chunk order.
//
// Edges go kEdgeUnroll at a time: their indices and rows are all loaded
// before any is folded, so a thread has several gathers in flight (a long
// segment is otherwise latency-bound). The fold itself stays in edge order.
constexpr int kEdgeUnroll = 4;

template <Reduce R, typename Term, typename T, typename Index>
struct SegmentReduceBody {
  Segments<Index> seg;
  Schedule<Index> schedule;
  Geometry geo;
  Term term;
  T* out;              // [num_segments, parts * width]
  Index* arg;          // same shape, for max and min
  T* partial;          // [max_slots, parts * width]
  Index* partial_arg;  // same shape, for max and min

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    using Red = Reducer<R>;
    const ThreadPlace p = Place(geo, t);
    if (p.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[p.item];
    const ItemRange<Index> range = RangeOf(seg.indptr, item, schedule.chunk);
    const int64_t lanes = geo.Lanes();
    T acc[kPerLane];
    Index win[kPerLane];
    for (int j = 0; j < kPerLane; ++j) {
      acc[j] = Red::template Init<T>();
      win[j] = Index(-1);
    }
    Index k = range.begin;
    for (; k + kEdgeUnroll <= range.end; k += kEdgeUnroll) {
      decltype(term.At(item.segment, k, p.part)) view[kEdgeUnroll];
      T value[kEdgeUnroll][kPerLane];
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) view[u] = term.At(item.segment, k + u, p.part);
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) {
NGRA_UNROLL
        for (int j = 0; j < kPerLane; ++j) {
          const int64_t f = p.feature + j * lanes;
          value[u][j] = f < geo.width ? term.Value(view[u], p.part, f) : T(0);
        }
      }
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (!view[u].active) continue;
NGRA_UNROLL
        for (int j = 0; j < kPerLane; ++j) {
          if (p.feature + j * lanes < geo.width) Red::Step(acc[j], win[j], value[u][j], view[u].edge);
        }
      }
    }
    for (; k < range.end; ++k) {
      const auto view = term.At(item.segment, k, p.part);
      if (!view.active) continue;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = p.feature + j * lanes;
        if (f < geo.width) Red::Step(acc[j], win[j], term.Value(view, p.part, f), view.edge);
      }
    }
    const bool into_out = item.slot < 0;
    const bool finish = item.slot == kWhole;
    const int64_t row = (into_out ? static_cast<int64_t>(item.segment) : static_cast<int64_t>(item.slot)) * geo.Row() +
                        p.part * geo.width;
    T* values = into_out ? out : partial;
    Index* args = into_out ? arg : partial_arg;
    const Index degree = seg.Degree(item.segment);
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = p.feature + j * lanes;
      if (f >= geo.width) continue;
      if (finish) Red::Finish(acc[j], win[j], degree);
      values[row + f] = acc[j];
      if (Red::kTracksArg) args[row + f] = win[j];
    }
  }
};

// Folds the chunks of each split segment in chunk order (chunk 0 from the
// output row, the rest from partial rows) with the reducer's own step: a sum
// of partial sums, or for max/min the first chunk holding the extreme.
// Chunks are in segment order, so the first edge in segment order still wins
// a tie, and a NaN still sticks. Then finishes the row.
template <Reduce R, typename T, typename Index>
struct CombineBody {
  const Index* indptr;
  Schedule<Index> schedule;
  Geometry geo;
  const T* partial;
  const Index* partial_arg;
  T* out;
  Index* arg;

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    using Red = Reducer<R>;
    const ThreadPlace p = Place(geo, t);  // p.item: position in the sorted order
    if (p.item >= static_cast<int64_t>(schedule.NumSplit())) return;
    const Index s = schedule.order[p.item];
    const Index degree = indptr[s + 1] - indptr[s];
    const int64_t chunks = schedule.Chunks(degree);
    const int64_t first_row = static_cast<int64_t>(schedule.slot_start[p.item]);
    const int64_t lanes = geo.Lanes();
    const int64_t offset = p.part * geo.width;
    const int64_t out_row = static_cast<int64_t>(s) * geo.Row() + offset;
    T acc[kPerLane];
    Index win[kPerLane];
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = p.feature + j * lanes;
      acc[j] = f < geo.width ? out[out_row + f] : T(0);
      win[j] = Red::kTracksArg && f < geo.width ? arg[out_row + f] : Index(-1);
    }
    for (int64_t c = 1; c < chunks; ++c) {
      const int64_t row = (first_row + c - 1) * geo.Row() + offset;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = p.feature + j * lanes;
        if (f < geo.width) Red::Step(acc[j], win[j], partial[row + f], Red::kTracksArg ? partial_arg[row + f] : Index(0));
      }
    }
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = p.feature + j * lanes;
      if (f >= geo.width) continue;
      Red::Finish(acc[j], win[j], degree);
      out[out_row + f] = acc[j];
      if (Red::kTracksArg) arg[out_row + f] = win[j];
    }
  }
};

// ---- Per-edge outputs (no reduction across edges) ----

// d/dweight, one weight per edge and feature: dw[e][f], features across lanes.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct VectorWeightGradBody {
  Segments<Index> csc;
  Schedule<Index> schedule;
  Geometry geo;
  Operands<T> in;
  UpstreamGrad<kArg, T, Index> up;
  T* d_weight;  // [num_edges, width]

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace p = Place(geo, t);
    if (p.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[p.item];
    const ItemRange<Index> range = RangeOf(csc.indptr, item, schedule.chunk);
    const int64_t v_row = static_cast<int64_t>(item.segment) * in.width;
    const T* dst = Program::kUsesDst ? in.x_dst + v_row : nullptr;
    const int64_t lanes = geo.Lanes();
    for (Index k = range.begin; k < range.end; ++k) {
      const Index e = csc.Edge(k);
      const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(k), e);
      T* dw = d_weight + static_cast<int64_t>(e) * in.width;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = p.feature + j * lanes;
        if (f < geo.width) {
          dw[f] = up.Reaches(v_row + f, e) ? Program::WeightGrad(up.grad[v_row + f], src, dst, f, in.width) : T(0);
        }
      }
    }
  }
};

// d/dweight, one weight per edge (or per block of features): the lanes of a
// group take the edges of an item in turn, and each sums its edge's features
// block by block in feature order, as the CPU kernel does.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
struct BlockWeightGradBody {
  Segments<Index> csc;
  Schedule<Index> schedule;
  int lanes_log2;
  Operands<T> in;
  UpstreamGrad<kArg, T, Index> up;
  T* d_weight;  // [num_edges, weight_width]

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const int64_t item_index = t >> lanes_log2;
    const int64_t lane = t & ((int64_t{1} << lanes_log2) - 1);
    if (item_index >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[item_index];
    const ItemRange<Index> range = RangeOf(csc.indptr, item, schedule.chunk);
    const int64_t width = in.width;
    const int64_t blocks = in.weight_width;
    const int64_t block = width / blocks;
    const int64_t v_row = static_cast<int64_t>(item.segment) * width;
    const T* dst = Program::kUsesDst ? in.x_dst + v_row : nullptr;
    for (int64_t k = range.begin + lane; k < static_cast<int64_t>(range.end); k += int64_t{1} << lanes_log2) {
      const Index e = csc.Edge(static_cast<Index>(k));
      const T* src = in.x_src + in.template SrcOffset<Program>(csc.Row(static_cast<Index>(k)), e);
      for (int64_t b = 0; b < blocks; ++b) {
        T sum = T(0);
        for (int64_t f = b * block; f < (b + 1) * block; ++f) {
          if (up.Reaches(v_row + f, e)) sum += Program::WeightGrad(up.grad[v_row + f], src, dst, f, width);
        }
        d_weight[static_cast<int64_t>(e) * blocks + b] = sum;
      }
    }
  }
};

// Scatter (broadcast): out[Edge(k)] = x[s]; the row is read once per group.
template <typename T, typename Index>
struct BroadcastBody {
  Segments<Index> seg;
  Schedule<Index> schedule;
  Geometry geo;
  const T* x;
  T* out;

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace p = Place(geo, t);
    if (p.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[p.item];
    const ItemRange<Index> range = RangeOf(seg.indptr, item, schedule.chunk);
    const int64_t lanes = geo.Lanes();
    const T* row = x + static_cast<int64_t>(item.segment) * geo.width;
    T value[kPerLane];
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = p.feature + j * lanes;
      value[j] = f < geo.width ? row[f] : T(0);
    }
    for (Index k = range.begin; k < range.end; ++k) {
      T* to = out + static_cast<int64_t>(seg.Edge(k)) * geo.width;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = p.feature + j * lanes;
        if (f < geo.width) to[f] = value[j];
      }
    }
  }
};

// The max/min gather gradient: every edge element of the segment is written
// once, with the upstream gradient where the edge won and zero elsewhere.
template <typename T, typename Index>
struct GatherGradArgBody {
  Segments<Index> seg;
  Schedule<Index> schedule;
  Geometry geo;
  const T* grad;
  const Index* argedge;
  T* out;

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace p = Place(geo, t);
    if (p.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[p.item];
    const ItemRange<Index> range = RangeOf(seg.indptr, item, schedule.chunk);
    const int64_t lanes = geo.Lanes();
    const int64_t row = static_cast<int64_t>(item.segment) * geo.width;
    T g[kPerLane];
    Index won[kPerLane];
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = p.feature + j * lanes;
      g[j] = f < geo.width ? grad[row + f] : T(0);
      won[j] = f < geo.width ? argedge[row + f] : Index(-1);
    }
    for (Index k = range.begin; k < range.end; ++k) {
      const Index e = seg.Edge(k);
      T* to = out + static_cast<int64_t>(e) * geo.width;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = p.feature + j * lanes;
        if (f < geo.width) to[f] = won[j] == e ? g[j] : T(0);
      }
    }
  }
};

// Mean's gradient: each output's gradient spread over its segment, 1/degree
// folded in once (the same expression as the CPU kernel).
template <typename T, typename Index>
struct ScaleByDegreeBody {
  const Index* indptr;
  int64_t width;
  const T* grad;
  T* out;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t v = i / width;
    const Index degree = indptr[v + 1] - indptr[v];
    const T scale = degree > 0 ? T(1) / static_cast<T>(degree) : T(0);
    out[i] = grad[i] * scale;
  }
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_BODIES_H_
