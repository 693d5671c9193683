// Edge programs: the element-wise ApplyEdge stages that fused_gather runs
// between Scatter and Gather without ever materialising a per-edge tensor.
//
// A program sees, for one edge and feature f: the source row s (its typed
// slot for type_select; [a | c] for gates), the destination row t and the
// edge weight w(f). It defines the message and its partial derivatives:
// SrcGrad(part, g, ...) is g * dMessage/d(x_src part), DstGrad is
// g * dMessage/dx_dst and WeightGrad is g * dMessage/dw. The kernels in
// propagate.h do the traversal, reduction and parallelism.
#ifndef NGRA_OPS_KERNELS_PROGRAMS_H_
#define NGRA_OPS_KERNELS_PROGRAMS_H_

#include <cmath>
#include <cstdint>

#include "ops/kernels/platform.h"

namespace ngra {

// ---- Edge weight accessors: how w(f) is read for one edge. ----
template <typename T>
struct NoWeight {
  NGRA_HOST_DEVICE T operator()(int64_t) const { return T(1); }
};
template <typename T>
struct ScalarWeight {  // one weight per edge
  T value;
  NGRA_HOST_DEVICE T operator()(int64_t) const { return value; }
};
template <typename T>
struct VectorWeight {  // one weight per edge and feature
  const T* row;
  NGRA_HOST_DEVICE T operator()(int64_t f) const { return row[f]; }
};
template <typename T>
struct BlockWeight {  // one weight per edge and block of features (attention heads)
  const T* row;
  int64_t block;
  NGRA_HOST_DEVICE T operator()(int64_t f) const { return row[f / block]; }
};

// Flags shared by every program; each program overrides what it uses.
struct ProgramBase {
  static constexpr int kSrcParts = 1;  // rows of x_src per vertex the program reads
  static constexpr bool kUsesDst = false;
  static constexpr bool kUsesWeight = false;
  static constexpr bool kUsesType = false;
};

struct CopySrc : ProgramBase {
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T*, const W&, int64_t f, int64_t) { return s[f]; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int, T g, const T*, const T*, const W&, int64_t, int64_t) { return g; }
};

struct SrcMulEdge : ProgramBase {
  static constexpr bool kUsesWeight = true;
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T*, const W& w, int64_t f, int64_t) { return s[f] * w(f); }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int, T g, const T*, const T*, const W& w, int64_t f, int64_t) { return g * w(f); }
  template <typename T>
  NGRA_HOST_DEVICE static T WeightGrad(T g, const T* s, const T*, int64_t f, int64_t) { return g * s[f]; }
};

struct SrcAddDst : ProgramBase {
  static constexpr bool kUsesDst = true;
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T* t, const W&, int64_t f, int64_t) { return s[f] + t[f]; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int, T g, const T*, const T*, const W&, int64_t, int64_t) { return g; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T DstGrad(T g, const T*, const T*, const W&, int64_t, int64_t) { return g; }
};

struct SrcSubDst : ProgramBase {
  static constexpr bool kUsesDst = true;
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T* t, const W&, int64_t f, int64_t) { return s[f] - t[f]; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int, T g, const T*, const T*, const W&, int64_t, int64_t) { return g; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T DstGrad(T g, const T*, const T*, const W&, int64_t, int64_t) { return -g; }
};

struct SrcMulDst : ProgramBase {
  static constexpr bool kUsesDst = true;
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T* t, const W&, int64_t f, int64_t) { return s[f] * t[f]; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int, T g, const T*, const T* t, const W&, int64_t f, int64_t) { return g * t[f]; }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T DstGrad(T g, const T* s, const T*, const W&, int64_t f, int64_t) { return g * s[f]; }
};

// ---- Gates: act(a_src + b_dst) * c_src, the G-GCN edge after hoisting. ----
// The source row holds [a | c] (x_src shaped [V, 2, F]); the destination row
// holds b. Act supplies y = act(z) and dy/dz expressed through z and y.
struct Sigmoid {
  template <typename T>
  NGRA_HOST_DEVICE static T Value(T z) { return T(1) / (T(1) + MathExp(-z)); }
  template <typename T>
  NGRA_HOST_DEVICE static T Slope(T, T y) { return y * (T(1) - y); }
};
struct Tanh {
  template <typename T>
  NGRA_HOST_DEVICE static T Value(T z) { return MathTanh(z); }
  template <typename T>
  NGRA_HOST_DEVICE static T Slope(T, T y) { return T(1) - y * y; }
};
struct Relu {
  template <typename T>
  NGRA_HOST_DEVICE static T Value(T z) { return z > T(0) ? z : T(0); }
  template <typename T>
  NGRA_HOST_DEVICE static T Slope(T z, T) { return z > T(0) ? T(1) : T(0); }
};

template <typename Act>
struct Gate : ProgramBase {
  static constexpr int kSrcParts = 2;
  static constexpr bool kUsesDst = true;
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T Message(const T* s, const T* t, const W&, int64_t f, int64_t width) {
    return Act::Value(s[f] + t[f]) * s[width + f];
  }
  // part 0 is the gradient w.r.t. a, part 1 w.r.t. c.
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T SrcGrad(int part, T g, const T* s, const T* t, const W&, int64_t f, int64_t width) {
    const T z = s[f] + t[f];
    const T y = Act::Value(z);
    return part == 0 ? g * Act::Slope(z, y) * s[width + f] : g * y;
  }
  template <typename T, typename W>
  NGRA_HOST_DEVICE static T DstGrad(T g, const T* s, const T* t, const W&, int64_t f, int64_t width) {
    const T z = s[f] + t[f];
    return g * Act::Slope(z, Act::Value(z)) * s[width + f];
  }
};

// ---- type_select: x_src is [V, num_types, F]; an edge of type r reads slot r.
// The GG-NN edge A(type) h_src after hoisting computes every A_r h once per
// vertex; the edge stage then only selects. The kernels offset s (and ds) to
// the typed slot, so the program itself is a copy.
struct TypeSelect : CopySrc {
  static constexpr bool kUsesType = true;
};

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_PROGRAMS_H_
