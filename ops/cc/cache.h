// The process-wide table of tensor caches (ngra_tf.ops.cache), shared by the
// cache ops (cache_ops.cc) and NgraReadFile (file_ops.cc), which serves a
// read from a cache when asked and fills it on a miss. Header-only: the
// function-local static in an inline function is one object per library.
#ifndef NGRA_OPS_CC_CACHE_H_
#define NGRA_OPS_CC_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "tensorflow/core/framework/tensor.h"

namespace ngra {

using ::tensorflow::Tensor;

// Tensors by key; a hit shares the inserted tensor's buffer.
class Cache {
 public:
  bool Lookup(int64_t key, Tensor* value) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto found = entries_.find(key);
    if (found == entries_.end()) {
      ++misses_;
      return false;
    }
    ++hits_;
    *value = found->second;
    return true;
  }
  void Insert(int64_t key, const Tensor& value) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [place, fresh] = entries_.try_emplace(key, value);
    if (!fresh) {
      bytes_ -= place->second.TotalBytes();
      place->second = value;
    }
    bytes_ += value.TotalBytes();
  }
  void Erase(int64_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto found = entries_.find(key);
    if (found == entries_.end()) return;
    bytes_ -= found->second.TotalBytes();
    entries_.erase(found);
  }
  void Stats(bool reset, int64_t out[4]) {
    std::lock_guard<std::mutex> lock(mu_);
    out[0] = static_cast<int64_t>(entries_.size());
    out[1] = bytes_;
    out[2] = hits_;
    out[3] = misses_;
    if (reset) hits_ = misses_ = 0;
  }

 private:
  std::mutex mu_;
  std::map<int64_t, Tensor> entries_;
  int64_t bytes_ = 0, hits_ = 0, misses_ = 0;
};

// Every cache of the process, by name.
class Caches {
 public:
  static inline Caches& Get() {
    static Caches* caches = new Caches;
    return *caches;
  }
  std::shared_ptr<Cache> Find(int64_t name, bool create) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto found = caches_.find(name);
    if (found != caches_.end()) return found->second;
    if (!create) return nullptr;
    return caches_[name] = std::make_shared<Cache>();
  }
  int64_t Drop(int64_t name) {
    std::shared_ptr<Cache> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto found = caches_.find(name);
      if (found == caches_.end()) return 0;
      dropped = found->second;
      caches_.erase(found);
    }
    int64_t stats[4];
    dropped->Stats(false, stats);
    return stats[0];
  }

 private:
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<Cache>> caches_;
};

}  // namespace ngra

#endif  // NGRA_OPS_CC_CACHE_H_
