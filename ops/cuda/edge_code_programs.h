// How the GPU bodies of edge code (edge_code_bodies.h) evaluate a program:
// two policies with one interface, passed to the bodies as a type.
//
//  - InterpretedCode<T>: the instruction list read at run time (EvalFeature,
//    AdjointFeature): one compiled kernel serves every program, with its
//    registers in a per-thread array (local memory) and one opcode switch per
//    instruction, edge and feature.
//  - FixedCode<Code, T>: the instruction list known at compile time (`Code`,
//    as ngra_tf/ops/generated.py writes it): the same instructions unrolled
//    into straight-line code, every opcode switch resolved by the compiler and
//    every register a scalar, so they live in machine registers. This is the
//    program's generated kernel (Seastar's and FeatGraph's approach); only
//    the index tables, constants and operands stay run-time data. Where every
//    table a load reads holds adjacent columns (CodeRunsOf), its forward
//    reads V adjacent features of each row in one vector, with no table
//    lookup, as the templates read their rows (MessageRun).
//
// Both compute the same operations in the same order, so they agree to the
// bit where the compiler contracts neither (tests/ops/test_generated_cuda.py).
//
// The interface, for thread-local use by one (edge, feature):
//   T Message(u, v, e, f, T* score): the message (and under softmax the
//     score) of edge e (u -> v) at feature f;
//   MessageRun<V>(u, v, e, first, column, T* out): the messages at features
//     first .. first + V - 1, load i reading from column[i] + first (V > 1
//     only where kScalarRuns is false);
//   Adjoint(u, v, e, f, seeds, Adjoints* a): the program and its adjoint at
//     (e, f); seeds(value, score, &d_value, &d_score) adds the seeds' adjoints
//     (d_score only under softmax); a->Load(i) is then load i's adjoint.
#ifndef NGRA_OPS_CUDA_EDGE_CODE_PROGRAMS_H_
#define NGRA_OPS_CUDA_EDGE_CODE_PROGRAMS_H_

#include <cstdint>

#include "ops/cuda/bodies.h"
#include "ops/kernels/edge_code.h"

// The interpreter is large, and the segment walk calls a term from a loop it
// unrolls 16-fold: inlined, that takes ptxas many minutes per instantiation.
// It is called instead, once per edge and feature, which costs little next to
// the interpretation itself. Fixed programs are the opposite: everything
// inlines, or the registers could not be scalars.
#ifdef __CUDACC__
#define NGRA_NOINLINE __noinline__
#define NGRA_INLINE __forceinline__
#else
#define NGRA_NOINLINE __attribute__((noinline))
#define NGRA_INLINE __attribute__((always_inline)) inline
#endif

namespace ngra {
namespace gpu {

template <typename T>
struct InterpretedCode {
  using Value = T;
  static constexpr bool kScalarRuns = true;  // its loads take one feature at a time
  EdgeCode<T> p;  // device pointers

  struct Adjoints {
    T regs[kMaxInstructions];
    T adj[kMaxInstructions];
    NGRA_HOST_DEVICE T Load(int i) const { return adj[i]; }
  };

  NGRA_HOST_DEVICE NGRA_NOINLINE T Message(int64_t u, int64_t v, int64_t e, int64_t f, T* score) const {
    T regs[kMaxInstructions];
    EvalFeature(p, u, v, e, f, regs);
    if (score != nullptr) *score = regs[p.score];
    return regs[p.value];
  }

  template <typename Seeds>
  NGRA_HOST_DEVICE NGRA_NOINLINE void Adjoint(int64_t u, int64_t v, int64_t e, int64_t f, const Seeds& seeds,
                                              Adjoints* a) const {
    EvalFeature(p, u, v, e, f, a->regs);
    for (int i = 0; i < p.num_instructions; ++i) a->adj[i] = T(0);
    T unused = T(0);
    seeds(a->regs[p.value], p.score >= 0 ? a->regs[p.score] : T(0), &a->adj[p.value],
          p.score >= 0 ? &a->adj[p.score] : &unused);
    AdjointFeature(p, a->regs, a->adj);
  }
};

// Code: a type with static constexpr int32_t kCode[] (kInstructionInts per
// instruction, as EdgeCode::code) and static constexpr int kInstructions,
// kValue and kScore (-1 without softmax).
template <typename Code, typename T>
struct FixedCode {
  using Value = T;
  static constexpr int kN = Code::kInstructions;
  static_assert(kN > 0 && kN <= kMaxInstructions, "a program has 1 to kMaxInstructions instructions");
  EdgeCode<T> p;  // device pointers; p.code is not read

  static constexpr bool kScalarRuns = false;  // its forward reads runs where CodeRunsOf allows (MessageRun)
  template <int I, int J>
  static constexpr int32_t kField = Code::kCode[I * kInstructionInts + J];

  struct Adjoints {
    T g[kN];
    NGRA_HOST_DEVICE T Load(int i) const { return Pick<0>(i); }
    // g[i] through compile-time indices only: a run-time index would put g in local memory.
    template <int I>
    NGRA_HOST_DEVICE NGRA_INLINE T Pick(int i) const {
      if constexpr (I < kN) {
        if constexpr (IsLoad(kField<I, 0>)) {
          if (i == I) return g[I];
        }
        return Pick<I + 1>(i);
      } else {
        return T(0);
      }
    }
  };

  NGRA_HOST_DEVICE NGRA_INLINE T Message(int64_t u, int64_t v, int64_t e, int64_t f, T* score) const {
    T r[kN];
    Eval<0>(FromMemory{this, u, v, e, f}, r);
    if constexpr (Code::kScore >= 0) {
      if (score != nullptr) *score = r[Code::kScore];
    }
    return r[Code::kValue];
  }

  // Each load's V columns in one vector, from column[i] + first on (the
  // launch checked that its table holds adjacent columns from column[i] and
  // that the vectors are aligned), then the program once per feature, in
  // registers.
  template <int V>
  NGRA_HOST_DEVICE NGRA_INLINE void MessageRun(int64_t u, int64_t v, int64_t e, int64_t first,
                                               const int32_t (&column)[kMaxInstructions], T* out) const {
    T loaded[kN][V];
    LoadRuns<0, V>(u, v, e, first, column, loaded);
NGRA_UNROLL
    for (int i = 0; i < V; ++i) {
      T r[kN];
      Eval<0>(FromRuns<V>{loaded, i}, r);
      out[i] = r[Code::kValue];
    }
  }

  template <typename Seeds>
  NGRA_HOST_DEVICE NGRA_INLINE void Adjoint(int64_t u, int64_t v, int64_t e, int64_t f, const Seeds& seeds,
                                            Adjoints* a) const {
    T r[kN];
    Eval<0>(FromMemory{this, u, v, e, f}, r);
    T* g = a->g;
    for (int i = 0; i < kN; ++i) g[i] = T(0);
    T unused = T(0);
    if constexpr (Code::kScore >= 0) {
      seeds(r[Code::kValue], r[Code::kScore], &g[Code::kValue], &g[Code::kScore]);
    } else {
      seeds(r[Code::kValue], T(0), &g[Code::kValue], &unused);
    }
    Back<kN - 1>(r, g);
  }

 private:
  // The row load instruction I reads for edge e (u -> v).
  template <int I>
  NGRA_HOST_DEVICE NGRA_INLINE const T* RowOf(int64_t u, int64_t v, int64_t e) const {
    constexpr int op = kField<I, 0>, b = kField<I, 2>;
    if constexpr (op == kLoadSrc) {
      return p.x_src + u * p.src_width;
    } else if constexpr (op == kLoadSrcTyped) {
      return p.x_src + u * p.src_width + static_cast<int64_t>(p.type[e]) * b;
    } else if constexpr (op == kLoadDst) {
      return p.x_dst + v * p.dst_width;
    } else {
      return p.edge + e * p.edge_width;
    }
  }

  // Where Eval's loads come from: the operands at one feature, or the runs LoadRuns read.
  struct FromMemory {
    const FixedCode* code;
    int64_t u, v, e, f;
    template <int I>
    NGRA_HOST_DEVICE NGRA_INLINE T Get() const {
      return code->template RowOf<I>(u, v, e)[code->p.tables[kField<I, 1> * code->p.width + f]];
    }
  };
  template <int V>
  struct FromRuns {
    T (*loaded)[V];
    int i;
    template <int I>
    NGRA_HOST_DEVICE NGRA_INLINE T Get() const { return loaded[I][i]; }
  };

  template <int I, int V>
  NGRA_HOST_DEVICE NGRA_INLINE void LoadRuns(int64_t u, int64_t v, int64_t e, int64_t first,
                                             const int32_t (&column)[kMaxInstructions], T (*loaded)[V]) const {
    if constexpr (IsLoad(kField<I, 0>)) LoadRun<V>(RowOf<I>(u, v, e) + column[I] + first, loaded[I]);
    if constexpr (I + 1 < kN) LoadRuns<I + 1, V>(u, v, e, first, column, loaded);
  }

  // Instruction I into r[I], then the rest (as EvalFeature).
  template <int I, typename Source>
  NGRA_HOST_DEVICE NGRA_INLINE void Eval(const Source& source, T* r) const {
    constexpr int op = kField<I, 0>, a = kField<I, 1>, b = kField<I, 2>, k = kField<I, 3>;
    if constexpr (IsLoad(op)) {
      r[I] = source.template Get<I>();
    } else if constexpr (op == kConst) {
      r[I] = p.constants[k];
    } else {
      static_assert(a < I && (!IsBinary(op) || b < I), "an instruction reads earlier registers only");
      r[I] = OpMath<op>::Value(r[a], IsBinary(op) ? r[b] : r[a], Param<op, k>());
    }
    if constexpr (I + 1 < kN) Eval<I + 1>(source, r);
  }

  // Instruction I's adjoint sent to its operands, then the earlier ones' (as AdjointFeature).
  template <int I>
  NGRA_HOST_DEVICE NGRA_INLINE void Back(const T* r, T* g) const {
    constexpr int op = kField<I, 0>, a = kField<I, 1>, b = kField<I, 2>, k = kField<I, 3>;
    if constexpr (!IsLoad(op) && op != kConst) {
      if (g[I] != T(0)) {
        T ga = T(0), gb = T(0);
        OpMath<op>::Adjoint(r[a], IsBinary(op) ? r[b] : r[a], Param<op, k>(), r[I], g[I], ga, gb);
        g[a] += ga;
        if constexpr (IsBinary(op)) g[b] += gb;
      }
    }
    if constexpr (I > 0) Back<I - 1>(r, g);
  }

  // The parameter an op reads (LeakyRelu's alpha, PowConst's exponent), else 0 (as UploadProgram leaves it).
  template <int op, int k>
  NGRA_HOST_DEVICE NGRA_INLINE T Param() const {
    if constexpr ((op == kLeakyRelu || op == kPowConst) && k >= 0) {
      return p.constants[k];
    } else {
      return T(0);
    }
  }
};

// On the host, a program whose kernels were generated and compiled apart
// (NVRTC; GeneratedKernels in api.h): nothing to evaluate here, only the
// operands, laid out as FixedCode's, so that a body holding it is the bytes
// the generated kernel takes for the body holding FixedCode.
template <typename T>
struct GeneratedCode {
  using Value = T;
  static constexpr bool kScalarRuns = false;  // as FixedCode
  struct Adjoints {};
  EdgeCode<T> p;
};

namespace layout_check {
struct OneLoad {
  static constexpr int32_t kCode[] = {kLoadSrc, 0, 0, -1};
  static constexpr int kInstructions = 1, kValue = 0, kScore = -1;
};
static_assert(sizeof(GeneratedCode<float>) == sizeof(FixedCode<OneLoad, float>) &&
                  sizeof(GeneratedCode<double>) == sizeof(FixedCode<OneLoad, double>),
              "a generated kernel takes the bytes of the host's body");
}  // namespace layout_check

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_EDGE_CODE_PROGRAMS_H_
