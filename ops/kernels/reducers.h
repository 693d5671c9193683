// Reducers: how a segment's messages combine into one output row.
//
// Each reducer accumulates in place into the output row (which stays in L1
// while a segment is processed) and, for max and min, records the winning
// edge id per feature so that the gradient can go to exactly that edge.
#ifndef NGRA_OPS_KERNELS_REDUCERS_H_
#define NGRA_OPS_KERNELS_REDUCERS_H_

#include <cstdint>
#include <limits>

#include "ops/kernels/platform.h"

namespace ngra {

enum class Reduce { kSum, kMean, kMax, kMin };

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
// wins, so ties resolve deterministically. NaN wins over any number and then
// sticks, so NaN propagates as it does through a sum. An empty segment
// yields 0 with arg -1.
template <bool kIsMax>
struct ExtremeReducer {
  static constexpr bool kTracksArg = true;
  template <typename T>
  NGRA_HOST_DEVICE static T Init() { return T(0); }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Step(T& acc, Index& arg, T message, Index edge) {
    const bool better = kIsMax ? message > acc : message < acc;
    if (arg < 0 || better || (message != message && acc == acc)) {
      acc = message;
      arg = edge;
    }
  }
  template <typename T, typename Index>
  NGRA_HOST_DEVICE static void Finish(T& acc, Index arg, Index /*degree*/) {
    if (arg < 0) acc = T(0);
  }
};

template <>
struct Reducer<Reduce::kMax> : ExtremeReducer<true> {};
template <>
struct Reducer<Reduce::kMin> : ExtremeReducer<false> {};

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_REDUCERS_H_
