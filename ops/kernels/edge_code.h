// Edge code: any element-wise ApplyEdge stage as straight-line code that a
// fused kernel evaluates per edge and feature, between Scatter and Gather,
// with no per-edge tensor (NGra §3.2's fused operator, for every element-wise
// stage rather than a fixed list; Seastar §5 does the same with generated
// CUDA, we interpret a tiny instruction set instead so that one compiled
// kernel serves every program).
//
// A program is a list of instructions; instruction i writes register i, and
// reads registers of earlier instructions only. Everything is evaluated at
// one message feature f at a time (a tile of them on the CPU, one per thread
// on the GPU), so broadcasting and reshapes cost nothing at run time: the
// compiler folds them into *index tables*. A load reads its operand row at
// tables[table][f] (plus type[e] * stride for a typed source load), so a
// per-head score broadcast over a head's features, or a slice of a hoisted
// row, is just a table.
//
// Operands: x_src [num_src, src_width] (the hoisted source-side tensors,
// packed), x_dst [num_dst, dst_width], edge [num_edges, edge_width], type
// [num_edges] (int32, typed source loads only), constants [num_constants].
//
// The backward runs the same code forward, then its adjoint in reverse
// (OpMath<op>::Adjoint), and adds each load's adjoint into the gradient row
// of its operand at the same table index.
#ifndef NGRA_OPS_KERNELS_EDGE_CODE_H_
#define NGRA_OPS_KERNELS_EDGE_CODE_H_

#include <cmath>
#include <cstdint>
#include <type_traits>
#ifndef __CUDACC_RTC__
#include <string>
#include <vector>
#endif

#include "ops/kernels/platform.h"

namespace ngra {

// Opcodes, in the order of OPCODES in ngra_tf/ops/edge_program.py (tests/ops/test_generated.py
// checks the two against each other; generated code names these enumerators).
enum EdgeOpcode : int32_t {
  // Loads: a = table row, b = slot stride (typed source loads), k unused.
  kLoadSrc = 0,
  kLoadDst,
  kLoadEdge,
  kLoadSrcTyped,
  kConst,  // k = constant index
  // Unary: a = operand; k = constant index of a parameter (LeakyRelu's alpha, PowConst's exponent).
  kNeg,
  kAbs,
  kSquare,
  kSqrt,
  kRsqrt,
  kExp,
  kExpm1,
  kLog,
  kLog1p,
  kReciprocal,
  kTanh,
  kSigmoid,
  kRelu,
  kLeakyRelu,
  kElu,
  kSelu,
  kSoftplus,
  kSoftsign,
  kPowConst,
  // Binary: a, b = operands.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kSquaredDifference,
  kNumOpcodes
};

constexpr int kFirstUnary = kNeg;
constexpr int kFirstBinary = kAdd;
constexpr int kInstructionInts = 4;  // op, a, b, k
constexpr int kMaxInstructions = 64;

NGRA_HOST_DEVICE constexpr bool IsLoad(int op) { return op >= kLoadSrc && op <= kLoadSrcTyped; }
NGRA_HOST_DEVICE constexpr bool IsBinary(int op) { return op >= kFirstBinary && op < kNumOpcodes; }

// ---- Scalar math for both sides ----

template <typename T>
NGRA_HOST_DEVICE inline T MathLog(T x) {
#ifdef __CUDA_ARCH__
  return ::log(x);
#else
  return std::log(x);
#endif
}
template <typename T>
NGRA_HOST_DEVICE inline T MathLog1p(T x) {
#ifdef __CUDA_ARCH__
  return ::log1p(x);
#else
  return std::log1p(x);
#endif
}
template <typename T>
NGRA_HOST_DEVICE inline T MathExpm1(T x) {
#ifdef __CUDA_ARCH__
  return ::expm1(x);
#else
  return std::expm1(x);
#endif
}
template <typename T>
NGRA_HOST_DEVICE inline T MathSqrt(T x) {
#ifdef __CUDA_ARCH__
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}
template <typename T>
NGRA_HOST_DEVICE inline T MathPow(T x, T y) {
#ifdef __CUDA_ARCH__
  return ::pow(x, y);
#else
  return std::pow(x, y);
#endif
}
template <typename T>
NGRA_HOST_DEVICE inline T MathAbs(T x) { return x < T(0) ? -x : x; }

// OpMath<op>: Value(a, b, k) and Adjoint(a, b, k, y, gy, ga, gb), which adds
// gy * dy/da into ga (and gy * dy/db into gb for binary ops). Unary ops get
// b == a and ignore it. The derivatives follow TensorFlow's registered
// gradients (Maximum's goes to a where a >= b, Relu's where a > 0, ...), so
// fused and unfused training agree.
template <int Op>
struct OpMath;

#define NGRA_UNARY(OP, VALUE, SLOPE)                                                      \
  template <>                                                                             \
  struct OpMath<OP> {                                                                     \
    template <typename T>                                                                 \
    NGRA_HOST_DEVICE static T Value(T a, T, T k) {                                        \
      (void)k;                                                                            \
      return VALUE;                                                                       \
    }                                                                                     \
    template <typename T>                                                                 \
    NGRA_HOST_DEVICE static void Adjoint(T a, T, T k, T y, T gy, T& ga, T&) {             \
      (void)k;                                                                            \
      (void)y;                                                                            \
      (void)a;                                                                            \
      ga += SLOPE;                                                                        \
    }                                                                                     \
  };

constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;

NGRA_UNARY(kNeg, -a, -gy)
// TensorFlow's gy * sign(a): NaN for an infinite gy at a = 0, and for a NaN a (a * 0 keeps it).
NGRA_UNARY(kAbs, MathAbs(a), gy * (a > T(0) ? T(1) : (a < T(0) ? T(-1) : a * T(0))))
NGRA_UNARY(kSquare, a * a, T(2) * a * gy)
NGRA_UNARY(kSqrt, MathSqrt(a), gy * T(0.5) / y)
NGRA_UNARY(kRsqrt, T(1) / MathSqrt(a), gy * T(-0.5) * y * y * y)
NGRA_UNARY(kExp, MathExp(a), gy * y)
NGRA_UNARY(kExpm1, MathExpm1(a), gy * (y + T(1)))
NGRA_UNARY(kLog, MathLog(a), gy / a)
NGRA_UNARY(kLog1p, MathLog1p(a), gy / (T(1) + a))
NGRA_UNARY(kReciprocal, T(1) / a, -gy * y * y)
NGRA_UNARY(kTanh, MathTanh(a), gy * (T(1) - y * y))
NGRA_UNARY(kSigmoid, T(1) / (T(1) + MathExp(-a)), gy * y * (T(1) - y))
// Relu's adjoint multiplies by its 0/1 slope, as TensorFlow's ReluGrad does (an
// infinite gy gives NaN where a <= 0; maximum's and minimum's are selects, as
// TensorFlow's where is). A select here also let GCC make the load of a gate's
// other factor a masked load (vmaskmovps).
NGRA_UNARY(kRelu, a > T(0) ? a : T(0), gy * T(a > T(0)))
NGRA_UNARY(kLeakyRelu, a > T(0) ? a : k * a, a > T(0) ? gy : k * gy)
NGRA_UNARY(kElu, a < T(0) ? MathExp(a) - T(1) : a, y < T(0) ? gy * (y + T(1)) : gy)
NGRA_UNARY(kSelu, a < T(0) ? T(kSeluScale * kSeluAlpha) * (MathExp(a) - T(1)) : T(kSeluScale) * a,
           y < T(0) ? gy * (y + T(kSeluScale * kSeluAlpha)) : gy * T(kSeluScale))
NGRA_UNARY(kSoftplus, (a > T(0) ? a : T(0)) + MathLog1p(MathExp(-MathAbs(a))), gy / (T(1) + MathExp(-a)))
NGRA_UNARY(kSoftsign, a / (T(1) + MathAbs(a)), gy / ((T(1) + MathAbs(a)) * (T(1) + MathAbs(a))))
NGRA_UNARY(kPowConst, MathPow(a, k), gy * k * MathPow(a, k - T(1)))
#undef NGRA_UNARY

#define NGRA_BINARY(OP, VALUE, SLOPE_A, SLOPE_B)                                          \
  template <>                                                                             \
  struct OpMath<OP> {                                                                     \
    template <typename T>                                                                 \
    NGRA_HOST_DEVICE static T Value(T a, T b, T) {                                        \
      return VALUE;                                                                       \
    }                                                                                     \
    template <typename T>                                                                 \
    NGRA_HOST_DEVICE static void Adjoint(T a, T b, T, T y, T gy, T& ga, T& gb) {          \
      (void)y;                                                                            \
      ga += SLOPE_A;                                                                      \
      gb += SLOPE_B;                                                                      \
    }                                                                                     \
  };

NGRA_BINARY(kAdd, a + b, gy, gy)
NGRA_BINARY(kSub, a - b, gy, -gy)
NGRA_BINARY(kMul, a * b, gy * b, gy * a)
NGRA_BINARY(kMaximum, a >= b ? a : b, a >= b ? gy : T(0), a >= b ? T(0) : gy)
NGRA_BINARY(kMinimum, a <= b ? a : b, a <= b ? gy : T(0), a <= b ? T(0) : gy)
NGRA_BINARY(kSquaredDifference, (a - b) * (a - b), T(2) * (a - b) * gy, T(-2) * (a - b) * gy)
#undef NGRA_BINARY

// TensorFlow's RealDiv gradient spells d/db as gy * ((-a / b) / b): three
// divisions. gy / b is d/da, and times y = a / b it is d/db, so one suffices
// (the same value to rounding; an exp/div score spends its time here).
template <>
struct OpMath<kDiv> {
  template <typename T>
  NGRA_HOST_DEVICE static T Value(T a, T b, T) {
    return a / b;
  }
  template <typename T>
  NGRA_HOST_DEVICE static void Adjoint(T, T b, T, T y, T gy, T& ga, T& gb) {
    const T over_b = gy / b;
    ga += over_b;
    gb -= over_b * y;
  }
};

template <int Op>
using OpTag = std::integral_constant<int, Op>;

// fn(OpTag<op>{}) for a unary or binary opcode (loads and kConst are the
// callers' own business).
template <typename Fn>
NGRA_HOST_DEVICE inline void WithOp(int op, Fn&& fn) {
  switch (op) {
#define NGRA_CASE(OP) \
  case OP:            \
    fn(OpTag<OP>{});  \
    return;
    NGRA_CASE(kNeg) NGRA_CASE(kAbs) NGRA_CASE(kSquare) NGRA_CASE(kSqrt) NGRA_CASE(kRsqrt) NGRA_CASE(kExp)
    NGRA_CASE(kExpm1) NGRA_CASE(kLog) NGRA_CASE(kLog1p) NGRA_CASE(kReciprocal) NGRA_CASE(kTanh)
    NGRA_CASE(kSigmoid) NGRA_CASE(kRelu) NGRA_CASE(kLeakyRelu) NGRA_CASE(kElu) NGRA_CASE(kSelu)
    NGRA_CASE(kSoftplus) NGRA_CASE(kSoftsign) NGRA_CASE(kPowConst) NGRA_CASE(kAdd) NGRA_CASE(kSub)
    NGRA_CASE(kMul) NGRA_CASE(kDiv) NGRA_CASE(kMaximum) NGRA_CASE(kMinimum) NGRA_CASE(kSquaredDifference)
#undef NGRA_CASE
    default:
      return;
  }
}

// ---- A program and its operands ----

template <typename T>
struct EdgeCode {
  const int32_t* code = nullptr;  // [num_instructions * kInstructionInts]
  int num_instructions = 0;
  const T* constants = nullptr;
  const int32_t* tables = nullptr;  // [num_tables, width]
  const int32_t* contiguous = nullptr;  // per table: its first entry when entry f is that + f, else -1 (host only)
  const uint8_t* uniform = nullptr;     // per table: whether every entry is the same (host only)
  int64_t width = 0;                    // message features
  int value = 0;                        // the register holding the message (the values, under softmax)
  int score = -1;                       // under softmax: the register holding the scores

  const T* x_src = nullptr;
  int64_t src_width = 0;
  const T* x_dst = nullptr;
  int64_t dst_width = 0;
  const T* edge = nullptr;
  int64_t edge_width = 0;
  const int32_t* type = nullptr;

  NGRA_HOST_DEVICE const int32_t* Ins(int i) const { return code + i * kInstructionInts; }
  NGRA_HOST_DEVICE T Param(int32_t k) const { return k >= 0 ? constants[k] : T(0); }

  // The row a load reads for edge e from source u to destination v (typed: at the edge's slot).
  NGRA_HOST_DEVICE const T* LoadRow(const int32_t* ins, int64_t u, int64_t v, int64_t e) const {
    switch (ins[0]) {
      case kLoadSrc: return x_src + u * src_width;
      case kLoadSrcTyped: return x_src + u * src_width + static_cast<int64_t>(type[e]) * ins[2];
      case kLoadDst: return x_dst + v * dst_width;
      default: return edge + e * edge_width;
    }
  }
};

// ---- Per feature (one thread per feature on the GPU) ----

// Runs the program at feature f for edge e (u -> v) into regs[0, n).
template <typename T>
NGRA_HOST_DEVICE inline void EvalFeature(const EdgeCode<T>& p, int64_t u, int64_t v, int64_t e, int64_t f,
                                         T* regs) {
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    const int op = ins[0];
    if (IsLoad(op)) {
      regs[i] = p.LoadRow(ins, u, v, e)[p.tables[ins[1] * p.width + f]];
    } else if (op == kConst) {
      regs[i] = p.constants[ins[3]];
    } else {
      const T a = regs[ins[1]], b = IsBinary(op) ? regs[ins[2]] : a, k = p.Param(ins[3]);
      WithOp(op, [&](auto tag) { regs[i] = OpMath<decltype(tag)::value>::Value(a, b, k); });
    }
  }
}

// Given regs from EvalFeature and adj (zeroed, with the seeds' adjoints set),
// sends the adjoints back through the program; each load's adjoint is then in
// adj at its register.
template <typename T>
NGRA_HOST_DEVICE inline void AdjointFeature(const EdgeCode<T>& p, const T* regs, T* adj) {
  for (int i = p.num_instructions - 1; i >= 0; --i) {
    const int32_t* ins = p.Ins(i);
    const int op = ins[0];
    if (IsLoad(op) || op == kConst || adj[i] == T(0)) continue;
    const T a = regs[ins[1]], b = IsBinary(op) ? regs[ins[2]] : a, k = p.Param(ins[3]);
    T ga = T(0), gb = T(0);
    WithOp(op, [&](auto tag) { OpMath<decltype(tag)::value>::Adjoint(a, b, k, regs[i], adj[i], ga, gb); });
    adj[ins[1]] += ga;
    if (IsBinary(op)) adj[ins[2]] += gb;
  }
}

#ifndef __CUDACC_RTC__
// What a program's generated code was made for: "<abi> T=float32
// Index=int32 reduce=sum code=0,0,0,-1,... value=5 score=-1", with `abi` the
// version of the calling convention ("abi=1": the CPU libraries; "cuda_abi=1":
// the GPU modules). ngra_tf/ops/generated.py writes the same strings.
template <typename T, typename Index>
std::string ProgramSignature(const std::string& abi, const std::vector<int32_t>& code, const std::string& reduce,
                             int value, int score) {
  std::string s = abi + " T=" + (sizeof(T) == 4 ? "float32" : "float64") +
                  " Index=" + (sizeof(Index) == 4 ? "int32" : "int64") + " reduce=" + reduce + " code=";
  for (size_t i = 0; i < code.size(); ++i) s += (i ? "," : "") + std::to_string(code[i]);
  return s + " value=" + std::to_string(value) + " score=" + std::to_string(score);
}
#endif  // __CUDACC_RTC__

// ---- Gradients: what seeds the adjoint of an edge's message ----

// kWhole: the whole upstream gradient (sum; mean with 1/degree folded in);
// kWinner: only where the edge won (max / min); kSoftmax: through the softmax
// weight of the edge's score under the finished state.
enum class Seed { kWhole, kWinner, kSoftmax };

// ---- Online softmax state (the `softmax` reduction) ----
//
// A destination's attention over its in-edges, carried across chunks as
// three rows per feature: acc = sum of exp(z - m) * x, sum = sum of
// exp(z - m), and m = the largest score so far. Adding an edge rescales what
// is there when m grows (FlashAttention's online softmax), so a column's
// chunks never need all of a destination's in-edges at once. The result is
// acc / sum; m only keeps the exponentials in range.
// One edge's step as coefficients: the state becomes sum * keep + add,
// acc * keep + add * x, m = top. One exponential: most steps do not raise
// the maximum. A NaN score sticks (as through a sum); a -inf one weighs
// nothing; while m is -inf (nothing yet) exp(m - z) is 0.
template <typename T>
NGRA_HOST_DEVICE inline void SoftmaxCoefficients(T z, T m, T& keep, T& add, T& top) {
  if (z != z) {
    keep = add = z;
    top = m;
  } else if (z > m) {
    keep = MathExp(m - z);
    add = T(1);
    top = z;
  } else {
    keep = T(1);
    add = z > T(-INFINITY) ? MathExp(z - m) : T(0);
    top = m;
  }
}

template <typename T>
NGRA_HOST_DEVICE inline void SoftmaxStep(T& acc, T& sum, T& m, T z, T x) {
  T keep, add, top;
  SoftmaxCoefficients(z, m, keep, add, top);
  sum = sum * keep + add;
  acc = acc * keep + add * x;
  m = top;
}

// exp(z - m) for a finished state's m: an edge's attention weight times the
// destination's sum (0 for a -inf score).
template <typename T>
NGRA_HOST_DEVICE inline T SoftmaxWeight(T z, T m) {
  return z > -INFINITY ? MathExp(z - m) : T(0);
}

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_EDGE_CODE_H_
