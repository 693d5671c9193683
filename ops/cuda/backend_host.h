// HostEmulation: runs every thread body of the GPU kernels in a host loop.
// It has the interface of backend_cuda.cuh (Launch, memset, copies, sort,
// scan), so launch.h compiles against either. Thread t runs before t + 1,
// which is one of the orders a GPU may pick; the bodies never depend on the
// order (that is what makes them deterministic), so this checks the
// algorithm, though not the GPU's memory model.
#ifndef NGRA_OPS_CUDA_BACKEND_HOST_H_
#define NGRA_OPS_CUDA_BACKEND_HOST_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "ops/cuda/api.h"

namespace ngra {
namespace gpu {

template <typename Body>
void Launch(const HostEmulation&, const Body& body, int64_t threads) {
  for (int64_t t = 0; t < threads; ++t) body(t);
}

inline void Memset(const HostEmulation&, void* p, int byte, size_t bytes) {
  if (bytes > 0) std::memset(p, byte, bytes);
}

inline std::string CopyToHost(const HostEmulation&, void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return "";
}

inline std::string CopyToDevice(const HostEmulation&, void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return "";
}

inline std::string LastError(const HostEmulation&) { return ""; }

// Stable sort of (key, id) pairs by key, descending.
template <typename Index>
std::string SortByKeyDescending(const HostEmulation&, const uint32_t* keys_in, uint32_t* keys_out,
                                const Index* ids_in, Index* ids_out, int64_t n, int /*end_bit*/) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return keys_in[a] > keys_in[b]; });
  for (int64_t i = 0; i < n; ++i) {
    keys_out[i] = keys_in[perm[i]];
    ids_out[i] = ids_in[perm[i]];
  }
  return "";
}

template <typename Index>
std::string ExclusiveSum(const HostEmulation&, const Index* in, Index* out, int64_t n) {
  Index sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Index v = in[i];
    out[i] = sum;
    sum += v;
  }
  return "";
}

// Nothing to select: the host has one "device".
struct DeviceScope {
  explicit DeviceScope(const HostEmulation&) {}
  std::string error() const { return ""; }
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_BACKEND_HOST_H_
