// Reducers: how a segment's messages combine into one output row.
//
// Each reducer accumulates in place into the output row (which stays in L1
// while a segment is processed) and, for max and min, records the winning
// edge id per feature so that the gradient can go to exactly that edge.
//
// A walk starts a segment's accumulator either empty (Init, with winner
// kUnset) or from an initial accumulator `init` (the value so far of a column
// of chunks, with winner kNoEdge): init then counts as a message that comes
// before every edge.
#ifndef NGRA_OPS_KERNELS_REDUCERS_H_
#define NGRA_OPS_KERNELS_REDUCERS_H_

#include <cstdint>
#include <limits>

#include "ops/kernels/platform.h"

namespace ngra {

enum class Reduce { kSum, kMean, kMax, kMin };

// Winners of max/min that are not edges. kNoEdge is what callers see: no
// edge won the element, so it holds init's value, or 0 for an empty segment
// without init. kUnset only lives inside a walk: nothing reduced yet.
constexpr int kNoEdge = -1;
constexpr int kUnset = -2;

template <Reduce R>
struct Reducer;

template <>
struct Reducer<Reduce::kSum> {
  static constexpr bool kTracksArg = false;
  template <typename T>
  NGRA_HOST_DEVICE static T Init() { return T(0); }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Step(T& acc, Index& /*arg*/, T message, Index /*edge*/) { acc += message; }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Finish(T& /*acc*/, Index /*arg*/, Index /*degree*/) {}
};

template <>
struct Reducer<Reduce::kMean> : Reducer<Reduce::kSum> {
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Finish(T& acc, Index /*arg*/, Index degree) {
    if (degree > 0) acc /= static_cast<T>(degree);
  }
};

// Max and min: the first edge (in segment order) with the extreme value
// wins, so ties resolve deterministically; init comes first, so it wins its
// ties too (winner kNoEdge). NaN wins over any number and then sticks, so NaN
// propagates as it does through a sum. An empty segment yields 0 (init's
// value with init) with winner kNoEdge.
template <bool kIsMax>
struct ExtremeReducer {
  static constexpr bool kTracksArg = true;
  template <typename T>
  NGRA_HOST_DEVICE static T Init() { return T(0); }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Step(T& acc, Index& arg, T message, Index edge) {
    const bool better = kIsMax ? message > acc : message < acc;
    if (arg == Index(kUnset) || better || (message != message && acc == acc)) {
      acc = message;
      arg = edge;
    }
  }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Finish(T& acc, Index& arg, Index /*degree*/) {
    if (arg == Index(kUnset)) {
      acc = T(0);
      arg = Index(kNoEdge);
    }
  }
};

template <>
struct Reducer<Reduce::kMax> : ExtremeReducer<true> {};
template <>
struct Reducer<Reduce::kMin> : ExtremeReducer<false> {};

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_REDUCERS_H_
