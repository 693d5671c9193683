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

// ---- Runs: V adjacent features of a row, read or written at once ----
//
// A lane handles its features in runs of V (RunStart). Where the rows start
// on V-element boundaries (ReduceWalk checks), a run is one vector access
// (16 bytes: float4, double2); V = 1 is the scalar case.

template <int V, typename T>
NGRA_HOST_DEVICE inline void LoadRun(const T* p, T* out) {
  struct alignas(V * sizeof(T)) Vec {
    T v[V];
  };
  const Vec vec = *reinterpret_cast<const Vec*>(p);
NGRA_UNROLL
  for (int i = 0; i < V; ++i) out[i] = vec.v[i];
}

template <int V, typename T>
NGRA_HOST_DEVICE inline void StoreRun(const T* in, T* p) {
  struct alignas(V * sizeof(T)) Vec {
    T v[V];
  };
  Vec vec;
NGRA_UNROLL
  for (int i = 0; i < V; ++i) vec.v[i] = in[i];
  *reinterpret_cast<Vec*>(p) = vec;
}

// Whether every row of [base, base + rows * width) starts on a boundary of `bytes`.
template <typename T>
inline bool RowsAligned(const T* base, int64_t width, int64_t bytes) {
  return base == nullptr ||
         (reinterpret_cast<uintptr_t>(base) % bytes == 0 && (width * static_cast<int64_t>(sizeof(T))) % bytes == 0);
}

// The operand rows a program reads for one run of an edge, copied into
// registers: the x_src parts ([a | c] for gates) and the x_dst row. The
// program then runs on them with feature i < V and width V (so that
// s[width + i] is part 1's feature i). Reads a program does not use are
// dead code and vanish.
template <typename Program, typename T, int V>
struct RunRows {
  T src[Program::kSrcParts * V];
  T dst[Program::kUsesDst ? V : 1];
  NGRA_HOST_DEVICE RunRows(const T* s, const T* t, int64_t width, int64_t first) {
NGRA_UNROLL
    for (int part = 0; part < Program::kSrcParts; ++part) LoadRun<V>(s + part * width + first, src + part * V);
    if constexpr (Program::kUsesDst) LoadRun<V>(t + first, dst);
  }
};

// The edge weight over one run: scalar and absent weights as they are; a
// weight per feature or per block of features copied into registers.
template <typename T, int V>
struct RunWeight {
  T w[V];
  NGRA_HOST_DEVICE T operator()(int64_t i) const { return w[i]; }
};
template <int V, typename T>
NGRA_HOST_DEVICE inline NoWeight<T> WeightRun(const NoWeight<T>& w, int64_t) { return w; }
template <int V, typename T>
NGRA_HOST_DEVICE inline ScalarWeight<T> WeightRun(const ScalarWeight<T>& w, int64_t) { return w; }
template <int V, typename T>
NGRA_HOST_DEVICE inline RunWeight<T, V> WeightRun(const VectorWeight<T>& w, int64_t first) {
  RunWeight<T, V> r;
  LoadRun<V>(w.row + first, r.w);
  return r;
}
template <int V, typename T>
NGRA_HOST_DEVICE inline RunWeight<T, V> WeightRun(const BlockWeight<T>& w, int64_t first) {
  RunWeight<T, V> r;
NGRA_UNROLL
  for (int i = 0; i < V; ++i) r.w[i] = w(first + i);
  return r;
}

template <WeightKind K, typename T>
bool OperandsAligned(const Operands<T>& in, int64_t bytes) {
  return RowsAligned(in.x_src, in.width, bytes) && RowsAligned(in.x_dst, in.width, bytes) &&
         (K != WeightKind::kVector || RowsAligned(in.weight, in.width, bytes));
}

// ---- Terms: what position k of a segment contributes to a run of features ----
//
// At(s, k, part) returns the per-edge view (or inactive, to skip the edge);
// Run<V>(view, part, first, out) writes the contributions to features
// first .. first + V - 1. The reduce body folds the contributions of a work
// item's positions in order. Aligned(bytes): whether all rows the term reads
// start on such boundaries (then runs may be vectors).

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
  bool Aligned(int64_t bytes) const { return OperandsAligned<K>(in, bytes); }
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const {
    const Index e = seg.Edge(k);
    const T* dst = Program::kUsesDst ? in.x_dst + static_cast<int64_t>(s) * in.width : nullptr;
    return View{true, e, in.x_src + in.template SrcOffset<Program>(seg.Row(k), e), dst, EdgeWeight<K>(in, e)};
  }
  template <int V>
  NGRA_HOST_DEVICE void Run(const View& v, int64_t, int64_t first, T* out) const {
    const RunRows<Program, T, V> rows(v.src, v.dst, in.width, first);
    const auto w = WeightRun<V>(v.weight, first);
NGRA_UNROLL
    for (int i = 0; i < V; ++i) out[i] = Program::Message(rows.src, rows.dst, w, i, V);
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
  bool Aligned(int64_t bytes) const {
    return OperandsAligned<K>(in, bytes) && RowsAligned(up.grad, in.width, bytes);
  }
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t part) const {
    const Index e = seg.Edge(k);
    const int64_t v_row = static_cast<int64_t>(seg.Row(k)) * in.width;
    const bool active = !Program::kUsesType || in.type[e] == part;
    const T* dst = Program::kUsesDst ? in.x_dst + v_row : nullptr;
    return View{active, e, v_row, in.x_src + in.template SrcOffset<Program>(s, e), dst, EdgeWeight<K>(in, e)};
  }
  template <int V>
  NGRA_HOST_DEVICE void Run(const View& v, int64_t part, int64_t first, T* out) const {
    const RunRows<Program, T, V> rows(v.src, v.dst, in.width, first);
    const auto w = WeightRun<V>(v.weight, first);
    T g[V];
    LoadRun<V>(up.grad + v.dst_row + first, g);
NGRA_UNROLL
    for (int i = 0; i < V; ++i) {
      // As on the CPU: a masked edge adds an exact zero.
      out[i] = up.Reaches(v.dst_row + first + i, v.edge)
                   ? Program::SrcGrad(static_cast<int>(part), g[i], rows.src, rows.dst, w, i, V)
                   : T(0);
    }
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
  bool Aligned(int64_t bytes) const {
    return OperandsAligned<K>(in, bytes) && RowsAligned(up.grad, in.width, bytes);
  }
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const {
    const Index e = seg.Edge(k);
    return View{true, e, static_cast<int64_t>(s) * in.width,
                in.x_src + in.template SrcOffset<Program>(seg.Row(k), e), EdgeWeight<K>(in, e)};
  }
  template <int V>
  NGRA_HOST_DEVICE void Run(const View& v, int64_t, int64_t first, T* out) const {
    const RunRows<Program, T, V> rows(v.src, in.x_dst + v.dst_row, in.width, first);
    const auto w = WeightRun<V>(v.weight, first);
    T g[V];
    LoadRun<V>(up.grad + v.dst_row + first, g);
NGRA_UNROLL
    for (int i = 0; i < V; ++i) {
      out[i] = up.Reaches(v.dst_row + first + i, v.edge) ? Program::DstGrad(g[i], rows.src, rows.dst, w, i, V)
                                                          : T(0);
    }
  }
};

// ---- The segment reduction: one (item, part, tile) per thread group ----
//
// out[s, part, f] = Reducer over the positions of segment s of term(k, part,
// f). Whole-segment items finish and write the output; the chunks of a split
// segment write their unfinished accumulators (and winners), chunk 0 into the
// output row and the others into partial rows, which CombineBody folds in
// chunk order. With init, the item that holds a segment's first edges (the
// whole segment or its chunk 0) starts from init's row, with winner kNoEdge;
// init may be out itself, since that item reads the row before it writes it
// and no other item reads it.
//
// Edges go kEdgeUnroll at a time: their indices and rows are all loaded
// before any is folded, so a thread has several gathers in flight (a long
// segment is otherwise latency-bound). The last round is masked rather than
// walked edge by edge, so that a short segment (most of a power-law graph's)
// also waits once per round, not once per edge. The fold itself stays in
// edge order. V is the run length of RunStart: 1, or a vector when the rows
// are aligned (ReduceWalk decides); the results are the same bits either way.
#ifndef NGRA_GPU_EDGE_UNROLL
#define NGRA_GPU_EDGE_UNROLL 4
#endif
constexpr int kEdgeUnroll = NGRA_GPU_EDGE_UNROLL;

template <Reduce R, typename Term, typename T, typename Index, int V = 1>
struct SegmentReduceBody {
  static_assert(kPerLane % V == 0, "a lane's registers hold whole runs");
  static constexpr int kRuns = kPerLane / V;
  Segments<Index> seg;
  Schedule<Index> schedule;
  Geometry geo;
  Term term;
  T* out;              // [num_segments, parts * width]
  Index* arg;          // same shape, for max and min
  T* partial;          // [max_slots, parts * width]
  Index* partial_arg;  // same shape, for max and min
  const T* init;       // like out, or null

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    using Red = Reducer<R>;
    using View = decltype(term.At(Index(0), Index(0), 0));
    const ThreadPlace p = Place(geo, t);
    if (p.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[p.item];
    const ItemRange<Index> range = RangeOf(seg.indptr, item, schedule.chunk);
    int64_t first[kRuns];  // each run's first feature; a run is wholly in or out of the row
    T acc[kPerLane];
    Index win[kPerLane];
NGRA_UNROLL
    for (int q = 0; q < kRuns; ++q) first[q] = RunStart<V>(geo, p, q);
    const bool from_init = init != nullptr && item.chunk == 0;
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      acc[j] = Red::template Init<T>();
      win[j] = Index(from_init ? kNoEdge : kUnset);
    }
    if (from_init) {
      const T* row = init + static_cast<int64_t>(item.segment) * geo.Row() + p.part * geo.width;
NGRA_UNROLL
      for (int q = 0; q < kRuns; ++q) {
        if (first[q] < geo.width) LoadRun<V>(row + first[q], acc + q * V);
      }
    }
    for (Index k = range.begin; k < range.end; k += kEdgeUnroll) {
      View view[kEdgeUnroll];
      T value[kEdgeUnroll][kPerLane];
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (k + u < range.end) view[u] = term.At(item.segment, k + u, p.part);
      }
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) {
NGRA_UNROLL
        for (int q = 0; q < kRuns; ++q) {
          if (k + u < range.end && first[q] < geo.width) {
            term.template Run<V>(view[u], p.part, first[q], value[u] + q * V);
          } else {
NGRA_UNROLL
            for (int i = 0; i < V; ++i) value[u][q * V + i] = T(0);
          }
        }
      }
NGRA_UNROLL
      for (int u = 0; u < kEdgeUnroll; ++u) {
        if (k + u >= range.end || !view[u].active) continue;
NGRA_UNROLL
        for (int q = 0; q < kRuns; ++q) {
          if (first[q] >= geo.width) continue;
NGRA_UNROLL
          for (int i = 0; i < V; ++i) Red::Step(acc[q * V + i], win[q * V + i], value[u][q * V + i], view[u].edge);
        }
      }
    }
    const bool into_out = item.slot < 0;
    const bool finish = item.slot == kWhole;
    const int64_t row = (into_out ? static_cast<int64_t>(item.segment) : static_cast<int64_t>(item.slot)) * geo.Row() +
                        p.part * geo.width;
    T* values = (into_out ? out : partial) + row;
    Index* args = (into_out ? arg : partial_arg) + row;
    const Index degree = seg.Degree(item.segment);
NGRA_UNROLL
    for (int q = 0; q < kRuns; ++q) {
      if (first[q] >= geo.width) continue;
      if (finish) {
NGRA_UNROLL
        for (int i = 0; i < V; ++i) Red::Finish(acc[q * V + i], win[q * V + i], degree);
      }
      StoreRun<V>(acc + q * V, values + first[q]);
      if (Red::kTracksArg) {
NGRA_UNROLL
        for (int i = 0; i < V; ++i) args[first[q] + i] = win[q * V + i];
      }
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
      win[j] = Red::kTracksArg && f < geo.width ? arg[out_row + f] : Index(kNoEdge);
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
// block by block in feature order, as the CPU kernel does. Each lane reads
// its own rows, so it reads them in runs of V (vectors where aligned): the
// group's reads of one step fall in as many rows as it has lanes.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index, int V = 1>
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
        for (int64_t first = b * block; first < (b + 1) * block; first += V) {
          const RunRows<Program, T, V> rows(src, dst, width, first);
          T g[V];
          LoadRun<V>(up.grad + v_row + first, g);
NGRA_UNROLL
          for (int i = 0; i < V; ++i) {
            if (up.Reaches(v_row + first + i, e)) sum += Program::WeightGrad(g[i], rows.src, rows.dst, i, V);
          }
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

// The max/min gradient w.r.t. init, one element per thread (the CPU's InitGrad).
template <typename T, typename Index>
struct InitGradBody {
  const T* grad;
  const Index* argedge;
  T* out;
  NGRA_HOST_DEVICE void operator()(int64_t i) const { InitGrad(grad, argedge, i, i + 1, out); }
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
