// Per-thread bodies of edge code (ops/kernels/edge_code.h) on the GPU, under
// the rules of bodies.h: one functor call per thread, no shared memory, no
// shuffles, no atomics, every output element written by one thread in a
// fixed order.
//
// A thread runs the program for one (edge, feature) at a time through a
// program policy (edge_code_programs.h): the interpreter, or the program's
// own straight-line code (generated). Either way the program is the same for
// every thread, so it never diverges within a warp.
//
//  - sum / mean / max / min: CodeMessageTerm, a term of the generic segment
//    reduction (SegmentReduceBody and CombineBody, with init and split
//    segments), the forward of fused_gather with the program as the message.
//  - softmax: CodeSoftmaxBody walks a work item's edges with the online
//    softmax step of the CPU (SoftmaxStep) into the state [acc | sum | m];
//    the chunks of a split segment are merged in chunk order by
//    CodeSoftmaxCombineBody (SoftmaxMerge).
//  - gradients: a load's adjoint goes to its operand row at tables[..][f],
//    and several features f (and several loads) may read the same element
//    (broadcast tables). So a thread owns one OUTPUT element, column c of an
//    operand row, and sums over the (feature, load) pairs that read c, found
//    in LoadUses (the tables inverted on the host), re-running the program
//    and its adjoint (AdjointFeature) per edge and feature. d/dx_src and
//    d/dx_dst are segment sums (CodeGradTerm over the CSR and CSC segments);
//    d/dedge_data has one row per edge (CodeEdgeGradBody).
#ifndef NGRA_OPS_CUDA_EDGE_CODE_BODIES_H_
#define NGRA_OPS_CUDA_EDGE_CODE_BODIES_H_

#include <cstdint>

#include "ops/cuda/bodies.h"
#include "ops/cuda/edge_code_programs.h"
#include "ops/cuda/schedule.h"
#include "ops/kernels/edge_code.h"
#include "ops/kernels/segments.h"

namespace ngra {
namespace gpu {

// ---- Forward: sum / mean / max / min ----

// Where a generated program's forward may read runs of V features
// (CodeRunsOf, edge_code_launch.h): the widest run in bytes, and the first
// column of each load's table (instruction i's at column[i]). Held in the
// body, so the kernel reads them from its parameters, not from memory.
struct CodeRuns {
  int64_t bytes = 0;
  int32_t column[kMaxInstructions] = {};
};

// The message of position k of destination segment s: the program at each
// feature of the run. An interpreted program reads one feature at a time; a
// generated one reads runs of V features (vectors) where runs allow.
template <typename Program, typename Index>
struct CodeMessageTerm {
  using T = typename Program::Value;
  Segments<Index> seg;  // CSC: s is the destination, Row(k) the source
  Program program;
  CodeRuns runs;
  static constexpr bool kScalarRuns = Program::kScalarRuns;

  struct View {
    bool active;
    Index edge;
    Index src;
    Index dst;
  };
  bool Aligned(int64_t bytes) const { return bytes <= runs.bytes; }
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const { return View{true, seg.Edge(k), seg.Row(k), s}; }
  template <int V>
  NGRA_HOST_DEVICE void Run(const View& v, int64_t, int64_t first, T* out) const {
    if constexpr (V == 1) {
      out[0] = program.Message(v.src, v.dst, v.edge, first, nullptr);
    } else {
      program.template MessageRun<V>(v.src, v.dst, v.edge, first, runs.column, out);
    }
  }
};

// ---- Forward: the online softmax ----

// Folds the state (acc2, sum2, m2) of later edges into (acc, sum, m): the
// same result as stepping through those edges (up to rounding), and NaN sticks.
template <typename T>
NGRA_HOST_DEVICE inline void SoftmaxMerge(T& acc, T& sum, T& m, T acc2, T sum2, T m2) {
  if (m2 > m) {
    const T scale = MathExp(m - m2);  // 0 while m is -inf (nothing yet)
    acc = acc * scale + acc2;
    sum = sum * scale + sum2;
    m = m2;
  } else if (m2 > -INFINITY) {
    const T scale = MathExp(m2 - m);
    acc += acc2 * scale;
    sum += sum2 * scale;
  } else {  // nothing but -inf scores weighed in later (acc2 and sum2 are 0), or NaN
    acc += acc2;
    sum += sum2;
  }
}

// One (item, tile) per thread group, lanes interleaved over the features:
// each lane steps its kPerLane features through the item's edges. Rows are
// [acc | sum | m] (3 * width); a whole item writes the finished state, chunk
// 0 of a split segment its state into out, the other chunks theirs into
// partial rows (as SegmentReduceBody). Chunk 0 starts from init (which may
// be out) when init is given, else from (0, 0, -inf).
template <typename Program, typename Index>
struct CodeSoftmaxBody {
  using T = typename Program::Value;
  Segments<Index> seg;
  Schedule<Index> schedule;
  Geometry geo;  // width: the message width
  Program program;
  T* out;          // [num_dst, 3 * width]
  T* partial;      // [max_slots, 3 * width]
  const T* init;   // like out, or null

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace place = Place(geo, t);
    if (place.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[place.item];
    const ItemRange<Index> range = RangeOf(seg.indptr, item, schedule.chunk);
    const int64_t lanes = geo.Lanes(), width = geo.width;
    const T* start = init != nullptr && item.chunk == 0 ? init + static_cast<int64_t>(item.segment) * 3 * width
                                                         : nullptr;
    T acc[kPerLane], sum[kPerLane], m[kPerLane];
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = place.feature + j * lanes;
      const bool load = start != nullptr && f < width;
      acc[j] = load ? start[f] : T(0);
      sum[j] = load ? start[width + f] : T(0);
      m[j] = load ? start[2 * width + f] : T(-INFINITY);
    }
    for (Index k = range.begin; k < range.end; ++k) {
      const Index e = seg.Edge(k), u = seg.Row(k);
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t f = place.feature + j * lanes;
        if (f >= width) continue;
        T z;
        const T x = program.Message(u, item.segment, e, f, &z);
        SoftmaxStep(acc[j], sum[j], m[j], z, x);
      }
    }
    const bool into_out = item.slot < 0;
    T* row = (into_out ? out : partial) +
             (into_out ? static_cast<int64_t>(item.segment) : static_cast<int64_t>(item.slot)) * 3 * width;
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = place.feature + j * lanes;
      if (f >= width) continue;
      row[f] = acc[j];
      row[width + f] = sum[j];
      row[2 * width + f] = m[j];
    }
  }
};

// Merges the chunks of each split segment in chunk order into its out row
// (chunk 0's state, written there by CodeSoftmaxBody).
template <typename T, typename Index>
struct CodeSoftmaxCombineBody {
  Schedule<Index> schedule;
  const Index* indptr;
  Geometry geo;
  const T* partial;
  T* out;

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace place = Place(geo, t);  // place.item: position in the sorted order
    if (place.item >= static_cast<int64_t>(schedule.NumSplit())) return;
    const Index s = schedule.order[place.item];
    const int64_t chunks = schedule.Chunks(indptr[s + 1] - indptr[s]);
    const int64_t first_row = static_cast<int64_t>(schedule.slot_start[place.item]);
    const int64_t lanes = geo.Lanes(), width = geo.width;
    T* row = out + static_cast<int64_t>(s) * 3 * width;
NGRA_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t f = place.feature + j * lanes;
      if (f >= width) continue;
      T acc = row[f], sum = row[width + f], m = row[2 * width + f];
      for (int64_t c = 1; c < chunks; ++c) {
        const T* part = partial + (first_row + c - 1) * 3 * width;
        SoftmaxMerge(acc, sum, m, part[f], part[width + f], part[2 * width + f]);
      }
      row[f] = acc;
      row[width + f] = sum;
      row[2 * width + f] = m;
    }
  }
};

// ---- Gradients ----

// The (feature, instruction) pairs whose load reads each column of an
// operand row: column c's are uses[start[c], start[c + 1]), sorted by
// feature, so that consecutive pairs at one feature share one run of the
// program. For typed source loads the column is the table entry, before the
// edge's slot offset.
struct LoadUse {
  int32_t feature;
  int32_t instruction;
};

struct LoadUses {
  const int64_t* start = nullptr;  // [columns + 1]; null: no load of this kind
  const LoadUse* uses = nullptr;
  int64_t columns = 0;
};

// The program and its adjoint for one edge and feature, seeded as the CPU's
// CodeSeed: the whole upstream gradient (sum; mean with 1/degree folded in),
// only where the edge won (max / min), or through the softmax weight of the
// edge's score under the finished state.
template <Seed S, typename Program, typename Index>
struct CodeAdjoint {
  using T = typename Program::Value;
  using Adjoints = typename Program::Adjoints;
  Program program;
  const T* grad;     // [num_dst, width], or [num_dst, 3 * width] for softmax
  const Index* arg;  // kWinner: [num_dst, width]
  const T* state;    // kSoftmax: [num_dst, 3 * width]

  // The adjoints of edge e (u -> v) at feature f into *a; false (a untouched)
  // when no gradient reaches the edge there.
  NGRA_HOST_DEVICE bool Run(int64_t u, int64_t v, int64_t e, int64_t f, Adjoints* a) const {
    const int64_t width = program.p.width;
    if constexpr (S == Seed::kWinner) {
      if (static_cast<int64_t>(arg[v * width + f]) != e) return false;
    }
    if constexpr (S == Seed::kSoftmax) {
      const T* row = grad + v * 3 * width;
      const T d_acc = row[f], d_sum = row[width + f], m = state[v * 3 * width + 2 * width + f];
      program.Adjoint(u, v, e, f, [&](T x, T z, T* d_x, T* d_z) {
        const T w = SoftmaxWeight(z, m);
        *d_x += w * d_acc;
        *d_z += w * (d_acc * x + d_sum);
      }, a);
    } else {
      const T d_out = grad[v * width + f];
      program.Adjoint(u, v, e, f, [&](T, T, T* d_x, T*) { *d_x = d_out; }, a);
    }
    return true;
  }

  // The sum over column c's pairs in `uses` of their loads' adjoints. *at is
  // the feature whose adjoints a holds (-1: none yet), *reached whether a
  // gradient reached it; both carry over to the next call for the same edge.
  NGRA_HOST_DEVICE T Sum(const LoadUses& uses, int64_t c, int64_t u, int64_t v, int64_t e, Adjoints* a, int64_t* at,
                         bool* reached) const {
    T total = T(0);
    if (uses.start == nullptr || c < 0 || c >= uses.columns) return total;
    for (int64_t i = uses.start[c], end = uses.start[c + 1]; i < end; ++i) {
      const LoadUse use = uses.uses[i];
      if (use.feature != *at) {
        *at = use.feature;
        *reached = Run(u, v, e, use.feature, a);
      }
      if (*reached) total += a->Load(use.instruction);
    }
    return total;
  }
};

// d/dx_src over the CSR segments (kBySource: s is the source u, Row(k) the
// destination v) or d/dx_dst over the CSC ones (s is v, Row(k) is u): the
// term of column c of row s for position k, reduced by SegmentReduceBody
// with Reduce::kSum. `typed` (x_src only): the typed loads, by table entry;
// edge e's reads sit type[e] * typed_stride further on.
template <bool kBySource, Seed S, typename Program, typename Index>
struct CodeGradTerm {
  using T = typename Program::Value;
  Segments<Index> seg;
  CodeAdjoint<S, Program, Index> adjoint;
  LoadUses plain, typed;
  int64_t typed_stride = 0;
  static constexpr bool kScalarRuns = true;

  struct View {
    bool active;
    Index edge;
    Index src, dst;
    int64_t slot;  // the typed loads' offset for this edge
  };
  bool Aligned(int64_t) const { return false; }
  NGRA_HOST_DEVICE View At(Index s, Index k, int64_t) const {
    const Index e = seg.Edge(k);
    const int64_t slot = typed.start != nullptr ? static_cast<int64_t>(adjoint.program.p.type[e]) * typed_stride : 0;
    return kBySource ? View{true, e, s, seg.Row(k), slot} : View{true, e, seg.Row(k), s, slot};
  }
  template <int V>
  NGRA_HOST_DEVICE void Run(const View& v, int64_t, int64_t first, T* out) const {
    typename Program::Adjoints a;
    for (int i = 0; i < V; ++i) {
      const int64_t c = first + i;
      int64_t at = -1;
      bool reached = false;
      T total = adjoint.Sum(plain, c, v.src, v.dst, v.edge, &a, &at, &reached);
      if (typed.start != nullptr) total += adjoint.Sum(typed, c - v.slot, v.src, v.dst, v.edge, &a, &at, &reached);
      out[i] = total;
    }
  }
};

// d/dedge_data: one row per edge, so no reduction. A thread group per work
// item of the CSC schedule, lanes interleaved over the row's columns; every
// edge is in exactly one segment, so every element is written once.
template <Seed S, typename Program, typename Index>
struct CodeEdgeGradBody {
  using T = typename Program::Value;
  Segments<Index> csc;
  Schedule<Index> schedule;
  Geometry geo;  // width: edge_width
  CodeAdjoint<S, Program, Index> adjoint;
  LoadUses uses;
  T* out;  // [num_edges, edge_width]

  NGRA_HOST_DEVICE void operator()(int64_t t) const {
    const ThreadPlace place = Place(geo, t);
    if (place.item >= static_cast<int64_t>(schedule.NumItems())) return;
    const WorkItem<Index> item = schedule.items[place.item];
    const ItemRange<Index> range = RangeOf(csc.indptr, item, schedule.chunk);
    const int64_t lanes = geo.Lanes();
    typename Program::Adjoints a;
    for (Index k = range.begin; k < range.end; ++k) {
      const Index e = csc.Edge(k), u = csc.Row(k);
      T* row = out + static_cast<int64_t>(e) * geo.width;
NGRA_UNROLL
      for (int j = 0; j < kPerLane; ++j) {
        const int64_t c = place.feature + j * lanes;
        if (c >= geo.width) continue;
        int64_t at = -1;
        bool reached = false;
        row[c] = adjoint.Sum(uses, c, u, item.segment, e, &a, &at, &reached);
      }
    }
  }
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_EDGE_CODE_BODIES_H_
