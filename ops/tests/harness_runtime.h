// Where the harness runs the GPU algorithm: EmuRuntime (HostEmulation, any
// machine) or GpuRuntime (a CUDA device, nvcc builds only). Both hand out
// "device" buffers, fill outputs with 0xff bytes (NaN / -1) so that an
// element a kernel forgets to write shows up, and free them on Release/Reset.
#ifndef NGRA_OPS_TESTS_HARNESS_RUNTIME_H_
#define NGRA_OPS_TESTS_HARNESS_RUNTIME_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ops/cuda/api.h"
#include "ops/tests/harness_check.h"

#if NGRA_HARNESS_GPU
#include <cuda_runtime.h>
#endif

namespace ngra {
namespace harness {

class EmuRuntime {
 public:
  using Backend = gpu::HostEmulation;
  static constexpr const char* kName = "emulated";

  EmuRuntime() {
    backend_.allocate = [this](size_t bytes) -> void* {
      blocks_.emplace_back(new char[bytes > 0 ? bytes : 1]);
      return blocks_.back().get();
    };
  }
  const Backend& backend() const { return backend_; }
  template <typename U>
  U* Put(const std::vector<U>& v) {
    U* p = static_cast<U*>(backend_.allocate(v.size() * sizeof(U)));
    if (!v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(U));
    return p;
  }
  template <typename U>
  U* Garbage(int64_t n) {
    U* p = static_cast<U*>(backend_.allocate(n * sizeof(U)));
    std::memset(p, 0xff, n * sizeof(U));
    return p;
  }
  template <typename U>
  std::vector<U> Get(const U* p, int64_t n) {
    return n > 0 ? std::vector<U>(p, p + n) : std::vector<U>();
  }
  std::string Sync() { return ""; }
  // Release(Mark()) frees what was allocated in between.
  size_t Mark() const { return blocks_.size(); }
  void Release(size_t mark) { blocks_.resize(mark); }
  void Reset() { blocks_.clear(); }

 private:
  Backend backend_;
  std::vector<std::unique_ptr<char[]>> blocks_;
};

#if NGRA_HARNESS_GPU
class GpuRuntime {
 public:
  using Backend = gpu::GpuStream;
  static constexpr const char* kName = "gpu";

  GpuRuntime() {
    backend_.stream = nullptr;  // the default stream
    backend_.device = 0;
    backend_.allocate = [this](size_t bytes) -> void* {
      Timed timed(&g_phases.allocate);
      void* p = nullptr;
      if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) return nullptr;
      blocks_.push_back(p);
      return p;
    };
  }
  ~GpuRuntime() { Reset(); }
  const Backend& backend() const { return backend_; }
  template <typename U>
  U* Put(const std::vector<U>& v) {
    U* p = static_cast<U*>(backend_.allocate(v.size() * sizeof(U)));
    Timed timed(&g_phases.copy);
    if (p != nullptr && !v.empty()) cudaMemcpy(p, v.data(), v.size() * sizeof(U), cudaMemcpyHostToDevice);
    return p;
  }
  template <typename U>
  U* Garbage(int64_t n) {
    U* p = static_cast<U*>(backend_.allocate(n * sizeof(U)));
    Timed timed(&g_phases.copy);
    if (p != nullptr) cudaMemset(p, 0xff, n * sizeof(U));
    return p;
  }
  template <typename U>
  std::vector<U> Get(const U* p, int64_t n) {
    Timed timed(&g_phases.copy);
    std::vector<U> v(n > 0 ? n : 0);
    if (n > 0) cudaMemcpy(v.data(), p, n * sizeof(U), cudaMemcpyDeviceToHost);
    return v;
  }
  // Kernel faults surface at a synchronisation.
  std::string Sync() {
    Timed timed(&g_phases.wait);
    const cudaError_t status = cudaDeviceSynchronize();
    return status == cudaSuccess ? "" : std::string("CUDA error: ") + cudaGetErrorString(status);
  }
  size_t Mark() const { return blocks_.size(); }
  void Release(size_t mark) {
    {
      Timed timed(&g_phases.wait);
      cudaDeviceSynchronize();
    }
    Timed timed(&g_phases.allocate);
    for (size_t i = mark; i < blocks_.size(); ++i) cudaFree(blocks_[i]);
    blocks_.resize(mark);
  }
  void Reset() { Release(0); }

 private:
  Backend backend_;
  std::vector<void*> blocks_;
};
#endif

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_RUNTIME_H_
