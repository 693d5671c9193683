// Bytes moved by the copy ops per (copy kind, device), process-wide, shared
// by the CPU copy kernels (copy_kernels.cc), the GPU ones
// (ops/cuda/copy_kernels_gpu.cc) and NgraCopyStats. Header-only: the
// function-local static in an inline function is one object per library.
#ifndef NGRA_OPS_CC_COPY_COUNTERS_H_
#define NGRA_OPS_CC_COPY_COUNTERS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace ngra {

class CopyCounters {
 public:
  static CopyCounters& Get() {
    static CopyCounters* counters = new CopyCounters;
    return *counters;
  }
  void Add(const std::string& kind, const std::string& device, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    bytes_[{kind, device}] += bytes;
  }
  std::map<std::pair<std::string, std::string>, int64_t> Snapshot(bool reset) {
    std::lock_guard<std::mutex> lock(mu_);
    auto copy = bytes_;
    if (reset) bytes_.clear();
    return copy;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> bytes_;
};

}  // namespace ngra

#endif  // NGRA_OPS_CC_COPY_COUNTERS_H_
