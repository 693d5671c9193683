// CPU walks of edge code (edge_code.h): the fused forward, the online softmax
// and the gradients, over the same segments and with the same threading rules
// as propagate.h (a row is written by one thread, edges in stored order, so
// results are deterministic).
//
// The walks take the program's evaluation as a policy (`Code`):
//  - Interpreted<T> runs the instructions a tile of features at a time: each
//    is one loop over kTile values in L1, which the compiler vectorises (the
//    switch on the opcode runs once per instruction and edge, not per feature).
//  - A generated policy (ngra_tf/ops/generated.py writes one per program and
//    compiles it into a library the op loads) runs the whole program as one
//    loop over the tile with every register in a CPU register, evaluates what
//    depends only on the edge once per edge, and differentiates in the same
//    loop. The walks, seeds and reductions are these, for both.
// A policy has Forward(u, v, e, f0, n, regs), which leaves the message's (and
// score's) tile in regs->value[p.value] (regs->value[p.score]); Messages(...,
// sink), which hands the message at each feature j to sink(j, message);
// Reaches(side); and Backward(side, u, v, e, f0, n, ...), which sends the
// seeds back to the loads of `side` and adds their adjoints into `row`. With
// kSeedsItself it takes the seed (CodeSeed::AtEdge) and computes everything
// in its loop; else the walk runs Forward and seeds regs->adjoints first.
// A generated policy whose side's feature adjoints add into one or two
// contiguous runs of the row has kTileRuns[side] > 0 (side kLoadSrc or
// kLoadDst), TileStart<side>(run) (a run's first column) and Sum<side>(u, v,
// e, f0, n, acc, row, seed), which adds them into run r's tile at acc + r *
// kTile instead: the walk then sums a segment's edges tile by tile in CPU
// registers, as the template kernels' ReduceTile does, instead of reading and
// writing the row in memory at every edge.
#ifndef NGRA_OPS_KERNELS_EDGE_CODE_WALKS_H_
#define NGRA_OPS_KERNELS_EDGE_CODE_WALKS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/kernels/edge_code.h"
#include "ops/kernels/propagate.h"
#include "ops/kernels/reducers.h"
#include "ops/kernels/segments.h"

namespace ngra {

template <typename T>
constexpr int64_t CodeTile() { return kTileBytes / sizeof(T); }

// Registers of one tile: instruction i's values are at value[i], which points
// into `values` (i * kTile on) or, for a load of a contiguous run of its row,
// straight at the row (nothing is copied).
template <typename T>
struct CodeRegisters {
  alignas(64) T values[kMaxInstructions * CodeTile<T>()];
  alignas(64) T adjoints[kMaxInstructions * CodeTile<T>()];
  const T* value[kMaxInstructions];
};

// Runs the program for edge e (u -> v) at features [f0, f0 + count) into r.
template <typename T>
inline void EvalTile(const EdgeCode<T>& p, int64_t u, int64_t v, int64_t e, int64_t f0, int64_t count,
                     CodeRegisters<T>* r) {
  constexpr int64_t kTile = CodeTile<T>();
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    T* __restrict out = r->values + i * kTile;
    const int op = ins[0];
    if (IsLoad(op)) {
      const T* __restrict row = p.LoadRow(ins, u, v, e);
      const int32_t start = p.contiguous[ins[1]];
      if (start >= 0) {
        r->value[i] = row + start + f0;
        continue;
      }
      const int32_t* __restrict index = p.tables + ins[1] * p.width + f0;
      if (p.uniform[ins[1]]) {
        const T x = row[index[0]];
        for (int64_t j = 0; j < count; ++j) out[j] = x;
      } else {
        for (int64_t j = 0; j < count; ++j) out[j] = row[index[j]];
      }
    } else if (op == kConst) {
      const T c = p.constants[ins[3]];
      for (int64_t j = 0; j < count; ++j) out[j] = c;
    } else {
      const T* __restrict a = r->value[ins[1]];
      const T* __restrict b = r->value[IsBinary(op) ? ins[2] : ins[1]];
      const T k = p.Param(ins[3]);
      WithOp(op, [&](auto tag) {
        using M = OpMath<decltype(tag)::value>;
        for (int64_t j = 0; j < count; ++j) out[j] = M::Value(a[j], b[j], k);
      });
    }
    r->value[i] = out;
  }
}

// needed[i]: whether register i depends on a load of `side` (kLoadSrc also
// takes typed loads), so that its adjoint reaches that side's gradient.
template <typename T>
inline void NeededFor(const EdgeCode<T>& p, int side, bool* needed) {
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    const int op = ins[0] == kLoadSrcTyped ? kLoadSrc : ins[0];
    if (IsLoad(ins[0]) || op == kConst) {
      needed[i] = op == side;
    } else {
      needed[i] = needed[ins[1]] || (IsBinary(op) && needed[ins[2]]);
    }
  }
}

// Sends the adjoints in r->adjoints (seeded by the caller, zero elsewhere) back to the loads whose
// registers are `needed`; nothing is computed for the others.
template <typename T>
inline void AdjointTile(const EdgeCode<T>& p, CodeRegisters<T>* r, int64_t count, const bool* needed) {
  constexpr int64_t kTile = CodeTile<T>();
  T* adj = r->adjoints;
  for (int i = p.num_instructions - 1; i >= 0; --i) {
    const int32_t* ins = p.Ins(i);
    const int op = ins[0];
    if (IsLoad(op) || op == kConst || !needed[i]) continue;
    const bool binary = IsBinary(op);
    const T* a = r->value[ins[1]];
    const T* b = r->value[binary ? ins[2] : ins[1]];
    const T* y = r->value[i];
    const T* gy = adj + i * kTile;
    T* ga = adj + ins[1] * kTile;
    T* gb = adj + (binary ? ins[2] : ins[1]) * kTile;
    const T k = p.Param(ins[3]);
    // Three loops, so that each vectorises: the compiler must otherwise assume ga and gb alias.
    WithOp(op, [&](auto tag) {
      using M = OpMath<decltype(tag)::value>;
      if (!binary) {
        T* __restrict da = ga;
        for (int64_t j = 0; j < count; ++j) {
          T unused = T(0);
          M::Adjoint(a[j], a[j], k, y[j], gy[j], da[j], unused);
        }
      } else if (ins[1] != ins[2]) {
        T* __restrict da = ga;
        T* __restrict db = gb;
        for (int64_t j = 0; j < count; ++j) M::Adjoint(a[j], b[j], k, y[j], gy[j], da[j], db[j]);
      } else {
        for (int64_t j = 0; j < count; ++j) {
          T da = T(0), db = T(0);
          M::Adjoint(a[j], b[j], k, y[j], gy[j], da, db);
          ga[j] += da + db;
        }
      }
    });
  }
}

// ---- Gradients ----

// The side of a walk over sources (CSR) that also computes, for each edge, the adjoints of the destination's
// loads into a row of its own (CodeCall::dst_terms, dst_width wide, in CSR order from terms_first); the op adds
// them into the destinations' rows after each block of sources (AddDstTerms). One walk for both operands
// instead of a second that evaluates the program for every edge again.
constexpr int kLoadSrcAndDst = kLoadSrcTyped + 1;

// What reaches one edge's message from d (the result): `grad` rows are
// [num_dst, width] (sum, mean with 1/degree folded in; max / min with the
// winners in `arg`), or [num_dst, 3 * width] d (the softmax state) with the
// finished state in `state`.
template <Seed S, typename T, typename Index>
struct CodeSeed {
  const T* grad;
  const Index* arg;   // kWinner
  const T* state;     // kSoftmax
  int64_t width;

  // What reaches edge e into v at features f0 on, for code that computes its seeds in its own loop (generated):
  // Value(j, z, x) is d message at feature f0 + j, Score(j, z, x) d score, given the score z and message x there.
  struct AtEdge {
    const T* g;      // the gradient's row (softmax: d acc), from f0
    const T* d_sum;  // softmax
    const T* m;      // softmax: the finished maximum
    const Index* arg;  // max / min: the winners' row, from f0
    Index e;
    T Value(int64_t j, T z, T x) const {
      (void)z;
      (void)x;
      if constexpr (S == Seed::kSoftmax) {
        return SoftmaxWeight(z, m[j]) * g[j];
      } else if constexpr (S == Seed::kWinner) {
        return arg[j] == e ? g[j] : T(0);
      } else {
        return g[j];
      }
    }
    T Score(int64_t j, T z, T x) const { return SoftmaxWeight(z, m[j]) * (g[j] * x + d_sum[j]); }
    // Softmax, with the edge's weight w = Weight(j, z) computed once for both seeds (once per edge when the
    // score is: then the maximum is the same at every feature too).
    T Weight(int64_t j, T z) const { return SoftmaxWeight(z, m[j]); }
    T WeightedValue(int64_t j, T w) const { return w * g[j]; }
    T WeightedScore(int64_t j, T w, T x) const { return w * (g[j] * x + d_sum[j]); }
  };
  AtEdge At(int64_t v, Index e, int64_t f0) const {
    if constexpr (S == Seed::kSoftmax) {
      const T* d_acc = grad + v * 3 * width + f0;
      return {d_acc, d_acc + width, state + v * 3 * width + 2 * width + f0, nullptr, e};
    } else {
      return {grad + v * width + f0, nullptr, nullptr, S == Seed::kWinner ? arg + v * width + f0 : nullptr, e};
    }
  }

  // Seeds the adjoints of edge e into destination v for features [f0, f0 + n) at the message's (and score's)
  // register in r->adjoints; false when none reaches it. Under softmax, r holds the forward's score and message.
  bool Apply(const EdgeCode<T>& p, int64_t v, Index e, int64_t f0, int64_t n, CodeRegisters<T>* r) const {
    constexpr int64_t kTile = CodeTile<T>();
    T* adj = r->adjoints;
    if constexpr (S == Seed::kSoftmax) {
      const T* d_acc = grad + v * 3 * width + f0;
      const T* d_sum = d_acc + width;
      const T* m = state + v * 3 * width + 2 * width + f0;
      const T* z = r->value[p.score];
      const T* x = r->value[p.value];
      T* dx = adj + p.value * kTile;
      T* dz = adj + p.score * kTile;
      std::memset(dx, 0, sizeof(T) * n);
      std::memset(dz, 0, sizeof(T) * n);
      T last_z = T(NAN), last_m = T(NAN), w = T(0);
      for (int64_t j = 0; j < n; ++j) {
        if (!(z[j] == last_z && m[j] == last_m)) {  // one exponential per head, as in CodeSoftmax
          last_z = z[j];
          last_m = m[j];
          w = SoftmaxWeight(z[j], m[j]);
        }
        dx[j] += w * d_acc[j];
        dz[j] += w * (d_acc[j] * x[j] + d_sum[j]);
      }
    } else {
      const T* g = grad + v * width + f0;
      T* dm = adj + p.value * kTile;
      bool any = S == Seed::kWhole;
      for (int64_t j = 0; j < n; ++j) {
        if constexpr (S == Seed::kWinner) {
          const bool won = arg[v * width + f0 + j] == e;
          dm[j] = won ? g[j] : T(0);
          any = any || won;
        } else {
          dm[j] = g[j];
        }
      }
      return any;
    }
    return true;
  }
};

// Adds the adjoints of the loads of `side` (kLoadSrc also takes typed loads)
// into `row`, the gradient row of their operand for edge e.
template <typename T>
inline void AddLoadAdjoints(const EdgeCode<T>& p, int side, const T* adj, int64_t e, int64_t f0, int64_t n,
                            T* row) {
  constexpr int64_t kTile = CodeTile<T>();
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    const int op = ins[0] == kLoadSrcTyped ? kLoadSrc : ins[0];
    if (op != side) continue;
    T* base = row + (ins[0] == kLoadSrcTyped ? static_cast<int64_t>(p.type[e]) * ins[2] : 0);
    const T* a = adj + i * kTile;
    const int32_t start = p.contiguous[ins[1]];
    if (start >= 0) {
      T* __restrict out = base + start + f0;
      for (int64_t j = 0; j < n; ++j) out[j] += a[j];
    } else {
      const int32_t* index = p.tables + ins[1] * p.width + f0;
      for (int64_t j = 0; j < n; ++j) base[index[j]] += a[j];
    }
  }
}

// ---- The interpreter (the policy when no generated code is loaded) ----

template <typename T>
class Interpreted {
 public:
  static constexpr bool kSeedsItself = false;
  static constexpr int kTileRuns[2] = {0, 0};

  explicit Interpreted(const EdgeCode<T>& p) : p_(p) {
    for (int side = kLoadSrc; side <= kLoadEdge; ++side) NeededFor(p, side, needed_[side]);
    for (int i = 0; i < p.num_instructions; ++i) {
      needed_[kLoadSrcAndDst][i] = needed_[kLoadSrc][i] || needed_[kLoadDst][i];
    }
  }
  void Forward(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, CodeRegisters<T>* r) const {
    EvalTile(p_, u, v, e, f0, n, r);
  }
  template <typename Sink>
  void Messages(int64_t u, int64_t v, int64_t e, int64_t f0, int64_t n, CodeRegisters<T>* r, Sink&& sink) const {
    EvalTile(p_, u, v, e, f0, n, r);
    const T* __restrict message = r->value[p_.value];
    for (int64_t j = 0; j < n; ++j) sink(j, message[j]);
  }
  bool Reaches(int side) const { return needed_[side][p_.value] || (p_.score >= 0 && needed_[side][p_.score]); }
  void Backward(int side, int64_t, int64_t, int64_t e, int64_t f0, int64_t n, CodeRegisters<T>* r, T* row,
                T* dst_row) const {
    constexpr int64_t kTile = CodeTile<T>();
    const bool* needed = needed_[side];
    for (int i = 0; i < p_.num_instructions; ++i) {  // the seeds' registers hold the seeds
      if (needed[i] && i != p_.value && i != p_.score) std::memset(r->adjoints + i * kTile, 0, sizeof(T) * n);
    }
    AdjointTile(p_, r, n, needed);
    AddLoadAdjoints(p_, side == kLoadSrcAndDst ? kLoadSrc : side, r->adjoints, e, f0, n, row);
    if (side == kLoadSrcAndDst) AddLoadAdjoints(p_, kLoadDst, r->adjoints, e, f0, n, dst_row);
  }

 private:
  const EdgeCode<T>& p_;
  bool needed_[kLoadSrcAndDst + 1][kMaxInstructions];
};

// ---- Forward: sum / mean / max / min ----

// Where the forward's source loads read a row: each distinct load's offset into it (a contiguous table's first
// entry) and its typed slot's stride (0 untyped), for prefetching exactly the tiles the program reads, as the
// templates' walks do (a gate's a and c; a typed edge's own slot, not all of them). Unknown (prefetch the
// tile's place in every width-wide part of the row) when a table is not contiguous or there are many loads.
struct SourceReads {
  static constexpr int kMax = 4;
  int count = -1;  // -1: unknown
  int64_t offset[kMax] = {};
  int64_t typed_stride[kMax] = {};

  template <typename T>
  static SourceReads Of(const EdgeCode<T>& p) {
    SourceReads reads;
    if (p.contiguous == nullptr) return reads;
    reads.count = 0;
    for (int i = 0; i < p.num_instructions; ++i) {
      const int32_t* ins = p.Ins(i);
      if (ins[0] != kLoadSrc && ins[0] != kLoadSrcTyped) continue;
      const int64_t offset = p.contiguous[ins[1]];
      const int64_t stride = ins[0] == kLoadSrcTyped ? ins[2] : 0;
      if (offset < 0) return SourceReads();
      bool seen = false;
      for (int r = 0; r < reads.count; ++r) seen |= reads.offset[r] == offset && reads.typed_stride[r] == stride;
      if (seen) continue;
      if (reads.count == kMax) return SourceReads();
      reads.offset[reads.count] = offset;
      reads.typed_stride[reads.count++] = stride;
    }
    return reads;
  }
};

template <typename T, typename Index, typename Code>
struct CodeForwardWalk {
  const Segments<Index>& csc;
  const EdgeCode<T>& p;
  const Code& code;
  int64_t gathered_rows;
  int64_t gathered_per_row;
  SourceReads reads;
  CodeRegisters<T>* regs;  // this thread's
  static constexpr int kParts = 1;

  // The walk over x_src's num_src rows (read in order when csc has no indices), with this thread's registers.
  static CodeForwardWalk Of(const Segments<Index>& csc, const EdgeCode<T>& p, const Code& code, int64_t num_src,
                            CodeRegisters<T>* regs) {
    const int64_t per_row = std::max<int64_t>(1, (p.src_width + p.width - 1) / std::max<int64_t>(p.width, 1));
    return {csc, p, code, csc.indices ? num_src : 0, per_row, SourceReads::Of(p), regs};
  }

  NGRA_PREFETCH_INLINE void Prefetch(Index k, int64_t f0, int64_t n) const {
    const T* row = p.x_src + static_cast<int64_t>(csc.Row(k)) * p.src_width + f0;
    if (reads.count < 0) {
      for (int64_t part = 0; part < gathered_per_row; ++part) PrefetchBytes(row + part * p.width, n * sizeof(T));
      return;
    }
    const int64_t type = p.type != nullptr ? p.type[csc.Edge(k)] : 0;
    for (int r = 0; r < reads.count; ++r) {
      PrefetchBytes(row + reads.offset[r] + type * reads.typed_stride[r], n * sizeof(T));
    }
  }
  template <typename Red, int64_t kStride>
  void Accumulate(int64_t v, Index k, int, int64_t f0, int64_t count, T* __restrict acc,
                  Index* __restrict win) const {
    static_assert(kStride == CodeTile<T>(), "edge code tiles are the walk's tiles");
    const Index e = csc.Edge(k);
    code.Messages(csc.Row(k), v, e, f0, count, regs, [&](int64_t j, T message) { Red::Step(acc[j], win[j], message, e); });
  }
};

// out[v] = reduce over the segment's edges of the program's message; init and
// arg as in FusedGather.
template <Reduce R, typename T, typename Index, typename Code = Interpreted<T>>
void CodeGather(const Segments<Index>& csc, const EdgeCode<T>& p, int64_t num_src, int64_t first, int64_t last,
                T* out, Index* arg, const T* init) {
  // Registers live on the heap, once per block: a 64 KiB stack array per edge costs page probes.
  auto* regs = new CodeRegisters<T>;
  const Code code(p);
  const auto walk = CodeForwardWalk<T, Index, Code>::Of(csc, p, code, num_src, regs);
  ReduceSegments<R>(walk, csc, 1, p.width, first, last, out, arg, init);
  delete regs;
}

// ---- Forward: the online softmax (state rows [acc | sum | m], 3 * width) ----

// SoftmaxStep at n features, without branches so that it vectorises: an exponential per feature (as cheap, in
// vector lanes, as finding the runs of a score per head), the same coefficients as SoftmaxCoefficients.
template <typename T>
inline void SoftmaxSteps(const T* __restrict z, const T* __restrict x, int64_t n, T* __restrict acc,
                         T* __restrict sum, T* __restrict m) {
  for (int64_t j = 0; j < n; ++j) {
    const T zj = z[j], mj = m[j];
    const bool up = zj > mj;
    const T e = MathExp(up ? mj - zj : zj - mj);  // NaN where both are -inf: `add` is then 0
    const bool nan = zj != zj;
    const T keep = nan ? zj : (up ? e : T(1));
    const T add = nan ? zj : (up ? T(1) : (zj > T(-INFINITY) ? e : T(0)));
    sum[j] = sum[j] * keep + add;
    acc[j] = acc[j] * keep + add * x[j];
    m[j] = up ? zj : mj;
  }
}

// Rows a few edges ahead are prefetched, as CodeGather's walk does, where the gathered rows outgrow a core's
// L2 (GAT on reddit-small, hidden 128: 24 MiB of rows).
template <typename T, typename Index, typename Code = Interpreted<T>>
void CodeSoftmax(const Segments<Index>& csc, const EdgeCode<T>& p, int64_t num_src, int64_t first, int64_t last,
                 T* out, const T* init) {
  constexpr int64_t kTile = CodeTile<T>();
  const int64_t width = p.width;
  auto* regs = new CodeRegisters<T>;
  const Code code(p);
  const auto walk = CodeForwardWalk<T, Index, Code>::Of(csc, p, code, num_src, regs);
  const bool prefetch = walk.gathered_rows * p.src_width * static_cast<int64_t>(sizeof(T)) > kBlockBytes;
  const Index prefetch_end = prefetch && last > first ? csc.Begin(last) : Index(0);  // the thread's range end
  for (int64_t v = first; v < last; ++v) {
    T* row = out + v * 3 * width;
    const T* start = init != nullptr ? init + v * 3 * width : nullptr;
    for (int64_t f0 = 0; f0 < width; f0 += kTile) {
      const int64_t n = std::min(kTile, width - f0);
      T acc[kTile], sum[kTile], m[kTile];
      for (int64_t j = 0; j < n; ++j) {
        acc[j] = start ? start[f0 + j] : T(0);
        sum[j] = start ? start[width + f0 + j] : T(0);
        m[j] = start ? start[2 * width + f0 + j] : T(-INFINITY);
      }
      for (Index k = csc.Begin(v), end = csc.End(v); k < end; ++k) {
        if (k + kPrefetchDistance < prefetch_end) walk.Prefetch(k + kPrefetchDistance, f0, n);
        code.Forward(csc.Row(k), v, csc.Edge(k), f0, n, regs);
        SoftmaxSteps(regs->value[p.score], regs->value[p.value], n, acc, sum, m);
      }
      for (int64_t j = 0; j < n; ++j) {
        row[f0 + j] = acc[j];
        row[width + f0 + j] = sum[j];
        row[2 * width + f0 + j] = m[j];
      }
    }
  }
  delete regs;
}

// One edge's share of a gradient walk: seed, then send the adjoints back into `row`.
template <Seed S, typename T, typename Index, typename Code>
inline void CodeEdgeGrad(const Code& code, const EdgeCode<T>& p, const CodeSeed<S, T, Index>& seed, int side,
                         int64_t u, int64_t v, Index e, CodeRegisters<T>* regs, T* row, T* dst_row = nullptr) {
  constexpr int64_t kTile = CodeTile<T>();
  for (int64_t f0 = 0; f0 < p.width; f0 += kTile) {
    const int64_t n = std::min(kTile, p.width - f0);
    if constexpr (Code::kSeedsItself) {
      code.Backward(side, u, v, e, f0, n, row, dst_row, seed.At(v, e, f0));
    } else {
      code.Forward(u, v, e, f0, n, regs);
      if (!seed.Apply(p, v, e, f0, n, regs)) continue;
      code.Backward(side, u, v, e, f0, n, regs, row, dst_row);
    }
  }
}

// What a gradient walk reads at random, a few edges ahead (the forward's walk prefetches the same way):
// walking sources (CSR), the destination's seed rows (softmax: d acc, d sum and the finished maximum), its
// loaded row and the edge's own row (edge rows are in CSC order); walking destinations (CSC), the source's row.
constexpr int64_t kPrefetchMax = 1024;

template <Seed S, typename T, typename Index>
NGRA_PREFETCH_INLINE void PrefetchDestination(const EdgeCode<T>& p, const CodeSeed<S, T, Index>& seed, int64_t v) {
  const int64_t row = p.width * sizeof(T);
  if constexpr (S == Seed::kSoftmax) {
    PrefetchBytes(seed.grad + v * 3 * p.width, std::min(2 * row, kPrefetchMax));
    PrefetchBytes(seed.state + v * 3 * p.width + 2 * p.width, std::min(row, kPrefetchMax));
  } else {
    PrefetchBytes(seed.grad + v * p.width, std::min(row, kPrefetchMax));
  }
  if (p.x_dst != nullptr) PrefetchBytes(p.x_dst + v * p.dst_width, std::min<int64_t>(p.dst_width * sizeof(T), kPrefetchMax));
}

template <typename T>
NGRA_PREFETCH_INLINE void PrefetchEdge(const EdgeCode<T>& p, int64_t e) {
  if (p.edge != nullptr) PrefetchBytes(p.edge + e * p.edge_width, std::min<int64_t>(p.edge_width * sizeof(T), kPrefetchMax));
  if (p.type != nullptr) __builtin_prefetch(p.type + e);
}

// Segment s's share of the gradient row `row` of side kSide (kLoadSrc: s is a source, seg is CSR; kLoadDst: a
// destination, CSC), features [f0, f0 + n) of each of the code's runs (TileStart): summed over the segment's
// edges in `acc`, which the compiler keeps in registers when kFull makes n the constant kTile, then added
// into the row once. Edges are summed in stored order, as the walk per edge does. `ahead` prefetches the
// rows that edge k + kPrefetchDistance reads while that is below prefetch_end.
template <int kSide, bool kFull, Seed S, typename T, typename Index, typename Code, typename Ahead>
inline void CodeSumTile(const Code& code, const Segments<Index>& seg, const CodeSeed<S, T, Index>& seed, int64_t s,
                        int64_t f0, int64_t n, Index prefetch_end, const Ahead& ahead, T* row) {
  constexpr int64_t kTile = CodeTile<T>();
  constexpr int kRuns = Code::kTileRuns[kSide];
  const int64_t count = kFull ? kTile : n;
  T acc[kRuns * kTile];
  for (int r = 0; r < kRuns; ++r) {
    for (int64_t j = 0; j < count; ++j) acc[r * kTile + j] = T(0);
  }
  for (Index k = seg.Begin(s), end = seg.End(s); k < end; ++k) {
    if (k + kPrefetchDistance < prefetch_end) ahead(k + kPrefetchDistance);
    const int64_t other = seg.Row(k);
    const Index e = seg.Edge(k);
    const int64_t v = kSide == kLoadSrc ? other : s;
    code.template Sum<kSide>(kSide == kLoadSrc ? s : other, v, e, f0, count, acc, row, seed.At(v, e, f0));
  }
  for (int r = 0; r < kRuns; ++r) {  // runs may overlap: one after the other
    T* __restrict out = row + code.template TileStart<kSide>(r) + f0;
    for (int64_t j = 0; j < count; ++j) out[j] += acc[r * kTile + j];
  }
}

// Segment s's whole gradient row by CodeSumTile, a tile at a time (zeroed first).
template <int kSide, Seed S, typename T, typename Index, typename Code, typename Ahead>
void CodeSumRow(const Code& code, const EdgeCode<T>& p, const Segments<Index>& seg, const CodeSeed<S, T, Index>& seed,
                int64_t s, Index prefetch_end, const Ahead& ahead, T* row, int64_t row_width) {
  constexpr int64_t kTile = CodeTile<T>();
  std::memset(row, 0, sizeof(T) * row_width);
  for (int64_t f0 = 0; f0 < p.width; f0 += kTile) {
    const int64_t n = std::min(kTile, p.width - f0);
    if (n == kTile) {
      CodeSumTile<kSide, true>(code, seg, seed, s, f0, n, prefetch_end, ahead, row);
    } else {
      CodeSumTile<kSide, false>(code, seg, seed, s, f0, n, prefetch_end, ahead, row);
    }
  }
}

// d x_src: walks the source-grouped (CSR) segments [first, last); d_src rows are src_width wide. With
// dst_terms (side kLoadSrcAndDst), also each edge's adjoints of the destination's loads, into its row there:
// the row of CSR position k is k - terms_first.
template <Seed S, typename T, typename Index, typename Code = Interpreted<T>>
void CodeGradSrc(const Segments<Index>& csr, const EdgeCode<T>& p, const CodeSeed<S, T, Index>& seed,
                 int64_t first, int64_t last, T* d_src, T* dst_terms = nullptr, int64_t terms_first = 0) {
  const Code code(p);
  const Index prefetch_end = csr.End(last - 1);
  if constexpr (Code::kTileRuns[kLoadSrc] > 0) {
    if (dst_terms == nullptr) {
      const auto ahead = [&](Index k) NGRA_PREFETCH_LAMBDA {
        PrefetchDestination(p, seed, csr.Row(k));
        PrefetchEdge(p, csr.Edge(k));
      };
      for (int64_t u = first; u < last; ++u) {
        CodeSumRow<kLoadSrc>(code, p, csr, seed, u, prefetch_end, ahead, d_src + u * p.src_width, p.src_width);
      }
      return;
    }
  }
  auto* regs = new CodeRegisters<T>;
  const int side = dst_terms != nullptr ? kLoadSrcAndDst : kLoadSrc;
  const bool reaches = code.Reaches(side);
  for (int64_t u = first; u < last; ++u) {
    T* row = d_src + u * p.src_width;
    std::memset(row, 0, sizeof(T) * p.src_width);
    for (Index k = csr.Begin(u), end = csr.End(u); k < end; ++k) {
      const Index e = csr.Edge(k);
      T* terms = dst_terms != nullptr ? dst_terms + (static_cast<int64_t>(k) - terms_first) * p.dst_width : nullptr;
      if (terms != nullptr) std::memset(terms, 0, sizeof(T) * p.dst_width);
      if (!reaches) continue;
      if (k + kPrefetchDistance < prefetch_end) {
        PrefetchDestination(p, seed, csr.Row(k + kPrefetchDistance));
        PrefetchEdge(p, csr.Edge(k + kPrefetchDistance));
      }
      CodeEdgeGrad(code, p, seed, side, u, csr.Row(k), e, regs, row, terms);
    }
  }
  delete regs;
}

// Adds the destination terms of CSR positions [k0, k1) (rows of `terms` from k0) into the rows of d_dst of
// the destinations [first, last) among them. A thread owns a range of destinations and reads every position's
// destination, so that each row adds its terms in CSR order, whatever the threads and blocks.
template <typename T, typename Index>
void AddDstTerms(const Segments<Index>& csr, const T* terms, int64_t width, int64_t k0, int64_t k1,
                 int64_t first, int64_t last, T* d_dst) {
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t v = csr.Row(static_cast<Index>(k));
    if (k + kPrefetchDistance < k1) {
      const int64_t ahead = csr.Row(static_cast<Index>(k + kPrefetchDistance));
      if (ahead >= first && ahead < last) {
        PrefetchBytes(d_dst + ahead * width, std::min<int64_t>(width * sizeof(T), kPrefetchMax));
      }
    }
    if (v < first || v >= last) continue;
    const T* __restrict term = terms + (k - k0) * width;
    T* __restrict row = d_dst + v * width;
    for (int64_t j = 0; j < width; ++j) row[j] += term[j];
  }
}

// d x_dst (side kLoadDst: rows per destination) or d edge (kLoadEdge: rows per
// edge): walks the destination-grouped (CSC) segments [first, last).
template <Seed S, typename T, typename Index, typename Code = Interpreted<T>>
void CodeGradDstOrEdge(const Segments<Index>& csc, const EdgeCode<T>& p, const CodeSeed<S, T, Index>& seed,
                       int side, int64_t first, int64_t last, T* out) {
  const Code code(p);
  const int64_t out_width = side == kLoadDst ? p.dst_width : p.edge_width;
  const Index prefetch_end = csc.End(last - 1);
  const auto ahead = [&](Index k) NGRA_PREFETCH_LAMBDA {
    PrefetchBytes(p.x_src + csc.Row(k) * p.src_width, std::min<int64_t>(p.src_width * sizeof(T), kPrefetchMax));
  };
  if constexpr (Code::kTileRuns[kLoadDst] > 0) {
    if (side == kLoadDst) {
      for (int64_t v = first; v < last; ++v) {
        CodeSumRow<kLoadDst>(code, p, csc, seed, v, prefetch_end, ahead, out + v * out_width, out_width);
      }
      return;
    }
  }
  auto* regs = new CodeRegisters<T>;
  const bool reaches = code.Reaches(side);
  for (int64_t v = first; v < last; ++v) {
    if (side == kLoadDst) std::memset(out + v * out_width, 0, sizeof(T) * out_width);
    for (Index k = csc.Begin(v), end = csc.End(v); k < end; ++k) {
      const Index e = csc.Edge(k);
      T* row = out + (side == kLoadDst ? v : static_cast<int64_t>(e)) * out_width;
      if (side == kLoadEdge) std::memset(row, 0, sizeof(T) * out_width);
      if (!reaches) continue;
      if (k + kPrefetchDistance < prefetch_end) ahead(k + kPrefetchDistance);
      CodeEdgeGrad(code, p, seed, side, csc.Row(k), v, e, regs, row);
    }
  }
  delete regs;
}

// ---- One op call: what the CPU kernels hand to a policy's walks ----
//
// The same entry points serve the interpreter (the op kernels instantiate
// them) and generated code (each generated library instantiates them for its
// one program and reduce, and exports them as plain C functions that take a
// CodeCall; its layout is kCodeCallAbi, which the library's signature names).

constexpr int kCodeCallAbi = 3;

// Reduce codes: the order of the op's reduce attribute.
enum CodeReduce : int { kCodeSum = 0, kCodeMean, kCodeMax, kCodeMin, kCodeSoftmax };

template <typename T, typename Index>
struct CodeCall {
  Segments<Index> csc, csr;
  EdgeCode<T> p;
  int64_t num_src = 0;
  T* out = nullptr;            // the forward's result, or the gradient
  Index* arg = nullptr;        // forward, max / min: the winners
  const T* init = nullptr;     // forward: the accumulator to start from (may be out), or null
  const T* grad = nullptr;     // gradient: d result (mean: 1/degree folded in)
  const Index* winners = nullptr;  // gradient, max / min: the forward's arg
  const T* state = nullptr;        // gradient, softmax: the forward's finished state
  T* dst_terms = nullptr;          // gradient, kLoadSrcAndDst: a row per edge (dst_width wide, CSR order)
  int64_t terms_first = 0;         // gradient, kLoadSrcAndDst: the CSR position of dst_terms' first row
};

// The forward over segments [first, last) of c.csc.
template <int kReduce, typename Code, typename T, typename Index>
void RunCodeForward(const CodeCall<T, Index>& c, int64_t first, int64_t last) {
  if constexpr (kReduce == kCodeSoftmax) {
    CodeSoftmax<T, Index, Code>(c.csc, c.p, c.num_src, first, last, c.out, c.init);
  } else {
    constexpr Reduce R = kReduce == kCodeSum ? Reduce::kSum : kReduce == kCodeMean ? Reduce::kMean
                         : kReduce == kCodeMax ? Reduce::kMax : Reduce::kMin;
    CodeGather<R, T, Index, Code>(c.csc, c.p, c.num_src, first, last, c.out, c.arg, c.init);
  }
}

// The gradient w.r.t. the operand that loads of `side` read: segments [first, last) of c.csr (kLoadSrc, and
// kLoadSrcAndDst, which also fills c.dst_terms) or c.csc (kLoadDst, kLoadEdge).
template <int kReduce, typename Code, typename T, typename Index>
void RunCodeGrad(const CodeCall<T, Index>& c, int side, int64_t first, int64_t last) {
  constexpr Seed S = kReduce == kCodeSoftmax ? Seed::kSoftmax
                     : (kReduce == kCodeMax || kReduce == kCodeMin) ? Seed::kWinner : Seed::kWhole;
  const CodeSeed<S, T, Index> seed{c.grad, c.winners, c.state, c.p.width};
  if (side == kLoadSrc || side == kLoadSrcAndDst) {
    CodeGradSrc<S, T, Index, Code>(c.csr, c.p, seed, first, last, c.out,
                                   side == kLoadSrcAndDst ? c.dst_terms : nullptr, c.terms_first);
  } else {
    CodeGradDstOrEdge<S, T, Index, Code>(c.csc, c.p, seed, side, first, last, c.out);
  }
}

// fn(std::integral_constant<int, code>{}) for a reduce code.
template <typename Fn>
void WithCodeReduce(int reduce, Fn&& fn) {
  switch (reduce) {
    case kCodeSum: return fn(std::integral_constant<int, kCodeSum>{});
    case kCodeMean: return fn(std::integral_constant<int, kCodeMean>{});
    case kCodeMax: return fn(std::integral_constant<int, kCodeMax>{});
    case kCodeMin: return fn(std::integral_constant<int, kCodeMin>{});
    default: return fn(std::integral_constant<int, kCodeSoftmax>{});
  }
}

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_EDGE_CODE_WALKS_H_
