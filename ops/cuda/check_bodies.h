// Per-thread bodies of the device-side argument checks (see Validator in
// api.h). A check records the first bad position in its status slot with an
// atomic minimum; the order in which threads do so does not change the
// result, so the reported error is deterministic. Slots start at kClean.
#ifndef NGRA_OPS_CUDA_CHECK_BODIES_H_
#define NGRA_OPS_CUDA_CHECK_BODIES_H_

#include <cstdint>

#include "ops/kernels/platform.h"

namespace ngra {
namespace gpu {

// What a status slot holds before any failure: every byte 0x7f (a memset).
constexpr int64_t kClean = 0x7f7f7f7f7f7f7f7fLL;
constexpr int kMaxSlots = 24;  // device checks per Validator; then one last value per indptr

NGRA_HOST_DEVICE inline void AtomicMinPosition(int64_t* slot, int64_t position) {
#ifdef __CUDA_ARCH__
  // Positions and kClean are non-negative, so the unsigned minimum is the minimum.
  atomicMin(reinterpret_cast<unsigned long long*>(slot), static_cast<unsigned long long>(position));
#else
  if (position < *slot) *slot = position;  // HostEmulation runs one thread at a time
#endif
}

// True when a device check before `slot` failed: later checks may index by
// values that the failed one was meant to vouch for, so they stand down.
NGRA_HOST_DEVICE inline bool EarlierFailed(const int64_t* status, int slot) {
  for (int j = 0; j < slot; ++j) {
    if (status[j] != kClean) return true;
  }
  return false;
}

// indptr[0] == 0 and indptr[i] >= indptr[i - 1]; thread 0 also stores
// indptr[length - 1] for the host.
template <typename Index>
struct IndptrCheckBody {
  const Index* indptr;
  int64_t length;
  int64_t* status;
  int slot;
  int64_t* last;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    if (i == 0) *last = static_cast<int64_t>(indptr[length - 1]);
    if (EarlierFailed(status, slot)) return;
    const bool bad = i == 0 ? indptr[0] != 0 : indptr[i] < indptr[i - 1];
    if (bad) AtomicMinPosition(status + slot, i);
  }
};

// ids[i] in [lower, bound), bound read from *bound_at when given.
template <typename Id>
struct RangeCheckBody {
  const Id* ids;
  int64_t lower, bound;
  const int64_t* bound_at;
  int64_t* status;
  int slot;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    if (EarlierFailed(status, slot)) return;
    const int64_t limit = bound_at ? *bound_at : bound;
    const int64_t v = static_cast<int64_t>(ids[i]);
    if (v < lower || v >= limit) AtomicMinPosition(status + slot, i);
  }
};

// Permutation, pass 1: first[v] = the first position holding value v.
template <typename Index>
struct FirstPositionBody {
  const Index* ids;
  int64_t* first;  // [count], initialised to kClean
  const int64_t* status;
  int slot;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    if (EarlierFailed(status, slot)) return;
    AtomicMinPosition(first + static_cast<int64_t>(ids[i]), i);
  }
};

// Permutation, pass 2: position i repeats a value if an earlier position
// holds it. The smallest such i is where the CPU check stops.
template <typename Index>
struct RepeatCheckBody {
  const Index* ids;
  const int64_t* first;
  int64_t* status;
  int slot;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    if (EarlierFailed(status, slot)) return;
    if (first[static_cast<int64_t>(ids[i])] < i) AtomicMinPosition(status + slot, i);
  }
};

// The segment that owns position k: the last s with indptr[s] <= k.
template <typename Index>
NGRA_HOST_DEVICE inline int64_t SegmentOf(const Index* indptr, int64_t num_segments, int64_t k) {
  int64_t lo = 0, hi = num_segments;  // indptr[lo] <= k (indptr[0] == 0); answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(indptr[mid]) <= k) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Ownership, pass 1 (with edge ids): owner[edge_ids[k]] = segment of k.
template <typename Index>
struct OwnerMarkBody {
  const Index* indptr;
  int64_t num_segments;
  const Index* edge_ids;
  int64_t* owner;
  const int64_t* status;
  int slot;
  NGRA_HOST_DEVICE void operator()(int64_t k) const {
    if (EarlierFailed(status, slot)) return;
    owner[static_cast<int64_t>(edge_ids[k])] = SegmentOf(indptr, num_segments, k);
  }
};

// Ownership, pass 2: argedge[i] < 0 or an edge of segment i / width.
template <typename Index>
struct OwnerCheckBody {
  const Index* argedge;
  int64_t width;
  const Index* indptr;
  const int64_t* owner;  // null: edge k is position k
  int64_t* status;
  int slot;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    if (EarlierFailed(status, slot)) return;
    const int64_t s = i / width;
    const int64_t a = static_cast<int64_t>(argedge[i]);
    const bool own = a < 0 || (owner ? owner[a] == s
                                     : static_cast<int64_t>(indptr[s]) <= a && a < static_cast<int64_t>(indptr[s + 1]));
    if (!own) AtomicMinPosition(status + slot, i);
  }
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_CHECK_BODIES_H_
