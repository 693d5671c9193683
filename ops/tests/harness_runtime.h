// Where the harness runs the GPU algorithm: EmuRuntime (HostEmulation, any
// machine) or GpuRuntime (a CUDA device, nvcc builds only). Both hand out
// "device" buffers from one Arena, fill every buffer they do not copy into
// with 0xff bytes (NaN / -1) so that an element a kernel forgets to write, or
// scratch a launcher forgets to clear, shows up, and check at each Sync that
// no kernel wrote past the end of a live buffer.
#ifndef NGRA_OPS_TESTS_HARNESS_RUNTIME_H_
#define NGRA_OPS_TESTS_HARNESS_RUNTIME_H_

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/api.h"
#include "ops/tests/harness_check.h"

#if NGRA_HARNESS_GPU
#include <cuda_runtime.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace ngra {
namespace harness {

// --exact-buffers: a device allocation per buffer (Arena's slab_bytes 0).
inline bool g_exact_buffers = false;

// Buffers carved from large slabs and handed back in reverse order
// (Release(Mark())), each followed by a guard of kGuardByte. No allocator
// call per buffer (on a GPU a cudaMalloc, and a cudaFree that waits for the
// device), and an overrun, which would land in a neighbour or in the
// allocator's rounding unseen, fails the next Check. Under AddressSanitizer
// (emulated builds) guards and released buffers are poisoned as well, so a
// read past the end is caught too.
//
// With slab_bytes 0 (--exact-buffers) each buffer is instead an allocation of
// its own, of exactly its size, freed on release, without a guard: for
// compute-sanitizer's memcheck, which sees whole allocations only.
//
// Memory is the runtime's: void* Get(size_t), void Free(void*),
// void Fill(void*, int byte, size_t), Guards(n, const char* const* at, size,
// char* out), which reads size bytes at each of n device addresses, and
// Poison/Unpoison(void*, size_t), what AddressSanitizer may not touch.
template <typename Memory>
class Arena {
 public:
  static constexpr size_t kAlign = 256;  // cudaMalloc's alignment
  static constexpr size_t kGuard = 256;
  static constexpr unsigned char kGuardByte = 0x5b;
  static constexpr size_t kSlab = size_t{256} << 20;

  // Slabs hold slab_bytes each, or one buffer where it needs more.
  explicit Arena(Memory memory, size_t slab_bytes = kSlab)
      : memory_(std::move(memory)), slab_bytes_(slab_bytes) {}
  ~Arena() {
    for (const Slab& s : slabs_) {
      memory_.Unpoison(s.base, s.bytes);
      memory_.Free(s.base);
    }
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Memory& memory() { return memory_; }

  // bytes of memory followed by a guard; nullptr when out of memory.
  void* Allocate(size_t bytes) {
    if (slab_bytes_ == 0) {  // exact: slab i is buffer i
      char* p = static_cast<char*>(memory_.Get(bytes > 0 ? bytes : 1));
      if (p == nullptr) return nullptr;
      slabs_.push_back(Slab{p, bytes > 0 ? bytes : 1});
      buffers_.push_back(Buffer{slabs_.size() - 1, 0, 0, bytes});
      return p;
    }
    const size_t span = RoundUp(bytes) + kGuard;
    size_t slab = buffers_.empty() ? 0 : buffers_.back().slab;
    size_t offset = buffers_.empty() ? 0 : buffers_.back().offset + buffers_.back().span;
    if (slab < slabs_.size() && offset + span > slabs_[slab].bytes) ++slab, offset = 0;
    if (slab < slabs_.size() && span > slabs_[slab].bytes) {  // empty (LIFO): replace it with a bigger one
      memory_.Unpoison(slabs_[slab].base, slabs_[slab].bytes);
      memory_.Free(slabs_[slab].base);
      slabs_.erase(slabs_.begin() + slab);
    }
    if (slab == slabs_.size() || span > slabs_[slab].bytes) {
      const size_t size = span > slab_bytes_ ? span : slab_bytes_;
      char* base = static_cast<char*>(memory_.Get(size));
      if (base == nullptr) return nullptr;
      memory_.Poison(base, size);
      slabs_.insert(slabs_.begin() + slab, Slab{base, size});
    }
    char* p = slabs_[slab].base + offset;
    memory_.Unpoison(p, span);
    memory_.Fill(p + bytes, kGuardByte, span - bytes);
    memory_.Poison(p + bytes, span - bytes);
    buffers_.push_back(Buffer{slab, offset, span, bytes});
    return p;
  }

  size_t Mark() const { return buffers_.size(); }
  // Frees what was allocated since mark was taken.
  void Release(size_t mark) {
    if (mark >= buffers_.size()) return;
    if (slab_bytes_ == 0) {
      for (size_t i = mark; i < slabs_.size(); ++i) memory_.Free(slabs_[i].base);
      slabs_.resize(mark);
    } else {
      for (size_t i = mark; i < buffers_.size(); ++i) memory_.Poison(Address(buffers_[i]), buffers_[i].span);
    }
    buffers_.resize(mark);
  }

  // "" when the first kGuard bytes after every live buffer are intact; else
  // which buffer was overrun (its place in allocation order and its size)
  // and the first byte written.
  std::string Check() {
    if (slab_bytes_ == 0) return "";  // no guards: the allocator's checker watches each buffer
    std::vector<const char*> at(buffers_.size());
    for (size_t i = 0; i < buffers_.size(); ++i) {
      at[i] = Address(buffers_[i]) + buffers_[i].bytes;
      memory_.Unpoison(const_cast<char*>(at[i]), kGuard);
    }
    std::vector<char> seen(at.size() * kGuard);
    memory_.Guards(at.size(), at.data(), kGuard, seen.data());
    for (size_t i = 0; i < buffers_.size(); ++i) memory_.Poison(const_cast<char*>(at[i]), kGuard);
    for (size_t i = 0; i < buffers_.size(); ++i) {
      for (size_t b = 0; b < kGuard; ++b) {
        if (static_cast<unsigned char>(seen[i * kGuard + b]) != kGuardByte) {
          return "a kernel wrote past the end of device buffer " + std::to_string(i) + " (" +
                 std::to_string(buffers_[i].bytes) + " bytes): byte " + std::to_string(b) + " after it";
        }
      }
    }
    return "";
  }

 private:
  struct Slab {
    char* base;
    size_t bytes;
  };
  struct Buffer {
    size_t slab, offset, span, bytes;
  };
  static size_t RoundUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  char* Address(const Buffer& b) const { return slabs_[b.slab].base + b.offset; }

  Memory memory_;
  size_t slab_bytes_;
  std::vector<Slab> slabs_;  // kept until the arena goes: later settings reuse them
  std::vector<Buffer> buffers_;
};

struct HostMemory {
  void* Get(size_t bytes) { return ::operator new(bytes, std::align_val_t{256}, std::nothrow); }
#if defined(__SANITIZE_ADDRESS__)
  void Poison(void* p, size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
  void Unpoison(void* p, size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
  void Poison(void*, size_t) {}
  void Unpoison(void*, size_t) {}
#endif
  void Free(void* p) { ::operator delete(p, std::align_val_t{256}); }
  void Fill(void* p, int byte, size_t n) { std::memset(p, byte, n); }
  void Guards(size_t n, const char* const* at, size_t size, char* out) {
    for (size_t i = 0; i < n; ++i) std::memcpy(out + i * size, at[i], size);
  }
};

// The arena finds what it must: a byte written just past each kind of
// buffer (empty, unaligned, a whole slab's, a slab of its own) and at the
// end of its guard, nothing once that buffer is released; released space
// is handed out again, and a slab too small for a buffer is replaced.
template <typename Memory>
void CheckArena(Memory memory, const std::string& runtime, Tally& tally) {
  using A = Arena<Memory>;
  A arena(std::move(memory), 4096);
  const std::string prefix = "arena " + runtime + " ";
  auto expect = [&](const std::string& name, const std::string& got, const std::string& want) {
    const bool ok = want.empty() ? got.empty() : got == want;
    tally.Record(prefix + name, ok ? "" : "got '" + got + "', want '" + want + "'");
  };
  auto plant = [&](char* at, int byte) {
    arena.memory().Unpoison(at, 1);  // Check poisons the guard again
    arena.memory().Fill(at, byte, 1);
  };
  // 3000 finds no room left in the first slab, 10000 needs a slab of its own.
  const std::vector<size_t> sizes = {0, 1, 255, 256, 1000, 3000, 10000};
  std::vector<char*> p;
  bool aligned = true;
  for (size_t n : sizes) {
    p.push_back(static_cast<char*>(arena.Allocate(n)));
    aligned = aligned && p.back() != nullptr && reinterpret_cast<uintptr_t>(p.back()) % A::kAlign == 0;
  }
  tally.Record(prefix + "buffers aligned", aligned ? "" : "a buffer is null or not 256-byte aligned");
  expect("guards intact", arena.Check(), "");
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (size_t b : {size_t{0}, A::kGuard - 1}) {
      const std::string what = "buffer " + std::to_string(i) + " (" + std::to_string(sizes[i]) + " bytes): byte " +
                               std::to_string(b) + " after it";
      plant(p[i] + sizes[i] + b, 0);
      expect("overrun of " + what, arena.Check(), "a kernel wrote past the end of device " + what);
      plant(p[i] + sizes[i] + b, A::kGuardByte);
    }
  }
  expect("guards repaired", arena.Check(), "");
  plant(p[6] + sizes[6], 0);
  arena.Release(6);
  expect("overrun of a released buffer", arena.Check(), "");
  expect("released space reused", arena.Allocate(10000) == p[6] ? "" : "a new address", "");
  arena.Release(6);
  char* big = static_cast<char*>(arena.Allocate(20000));
  expect("a bigger slab's guards intact", big == nullptr ? "null" : arena.Check(), "");
  if (big != nullptr) {
    plant(big + 20000, 0);
    expect("overrun of a bigger slab's buffer", arena.Check(),
           "a kernel wrote past the end of device buffer 6 (20000 bytes): byte 0 after it");
  }
  arena.Release(0);
  expect("all space reused", arena.Allocate(5) == p[0] ? "" : "a new address", "");

  A exact(Memory{}, 0);  // --exact-buffers
  char* a = static_cast<char*>(exact.Allocate(300));
  char* b = static_cast<char*>(exact.Allocate(0));
  const bool apart = a != nullptr && b != nullptr && (b >= a + 300 || a >= b + 1);
  expect("exact buffers apart", apart && reinterpret_cast<uintptr_t>(a) % A::kAlign == 0 ? "" : "overlapping", "");
  exact.Release(1);
  expect("exact buffers released one by one", exact.Mark() == 1 && exact.Check().empty() ? "" : "not released", "");
}

class EmuRuntime {
 public:
  using Backend = gpu::HostEmulation;
  static constexpr const char* kName = "emulated";

  EmuRuntime() : arena_(HostMemory{}, g_exact_buffers ? 0 : Arena<HostMemory>::kSlab) {
    backend_.allocate = [this](size_t bytes) -> void* { return Garbage<char>(bytes); };
  }
  const Backend& backend() const { return backend_; }
  template <typename U>
  U* Put(const std::vector<U>& v) {
    U* p = static_cast<U*>(arena_.Allocate(v.size() * sizeof(U)));
    if (p != nullptr && !v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(U));
    return p;
  }
  template <typename U>
  U* Garbage(int64_t n) {
    U* p = static_cast<U*>(arena_.Allocate(n * sizeof(U)));
    if (p != nullptr) arena_.memory().Fill(p, 0xff, n * sizeof(U));
    return p;
  }
  template <typename U>
  std::vector<U> Get(const U* p, int64_t n) {
    return n > 0 ? std::vector<U>(p, p + n) : std::vector<U>();
  }
  std::string Sync() { return arena_.Check(); }
  // Release(Mark()) frees what was allocated in between.
  size_t Mark() const { return arena_.Mark(); }
  void Release(size_t mark) { arena_.Release(mark); }
  void Reset() { arena_.Release(0); }

 private:
  Backend backend_;
  Arena<HostMemory> arena_;
};

#if NGRA_HARNESS_GPU
// cudaMalloc'd slabs on the default stream; guards come back in one batch of
// asynchronous copies into pinned memory.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept : pinned_(other.pinned_), pinned_bytes_(other.pinned_bytes_) {
    other.pinned_ = nullptr;
    other.pinned_bytes_ = 0;
  }
  ~DeviceMemory() {
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
  }
  void* Get(size_t bytes) {
    Timed timed(&g_phases.allocate);
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  }
  void Free(void* p) {
    Timed timed(&g_phases.allocate);
    cudaFree(p);
  }
  void Fill(void* p, int byte, size_t n) {
    Timed timed(&g_phases.copy);
    cudaMemsetAsync(p, byte, n, nullptr);
  }
  void Poison(void*, size_t) {}
  void Unpoison(void*, size_t) {}
  void Guards(size_t n, const char* const* at, size_t size, char* out) {
    Timed timed(&g_phases.copy);
    if (n * size > pinned_bytes_) {
      if (pinned_ != nullptr) cudaFreeHost(pinned_);
      pinned_bytes_ = 2 * n * size;
      if (cudaMallocHost(&pinned_, pinned_bytes_) != cudaSuccess) pinned_ = nullptr, pinned_bytes_ = 0;
    }
    char* dst = pinned_ != nullptr ? static_cast<char*>(pinned_) : out;
    for (size_t i = 0; i < n; ++i) {
      cudaMemcpyAsync(dst + i * size, at[i], size, cudaMemcpyDeviceToHost, nullptr);
    }
    cudaStreamSynchronize(nullptr);
    if (dst != out) std::memcpy(out, dst, n * size);
  }

 private:
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
};

class GpuRuntime {
 public:
  using Backend = gpu::GpuStream;
  static constexpr const char* kName = "gpu";

  GpuRuntime() : arena_(DeviceMemory{}, g_exact_buffers ? 0 : Arena<DeviceMemory>::kSlab) {
    backend_.stream = nullptr;  // the default stream
    backend_.device = 0;
    backend_.allocate = [this](size_t bytes) -> void* { return Garbage<char>(bytes); };
  }
  const Backend& backend() const { return backend_; }
  template <typename U>
  U* Put(const std::vector<U>& v) {
    U* p = static_cast<U*>(arena_.Allocate(v.size() * sizeof(U)));
    Timed timed(&g_phases.copy);
    if (p != nullptr && !v.empty()) cudaMemcpy(p, v.data(), v.size() * sizeof(U), cudaMemcpyHostToDevice);
    return p;
  }
  template <typename U>
  U* Garbage(int64_t n) {
    U* p = static_cast<U*>(arena_.Allocate(n * sizeof(U)));
    if (p != nullptr) arena_.memory().Fill(p, 0xff, n * sizeof(U));
    return p;
  }
  template <typename U>
  std::vector<U> Get(const U* p, int64_t n) {
    Timed timed(&g_phases.copy);
    std::vector<U> v(n > 0 ? n : 0);
    if (n > 0) cudaMemcpy(v.data(), p, n * sizeof(U), cudaMemcpyDeviceToHost);
    return v;
  }
  // Kernel faults surface at a synchronisation; overruns at the guards.
  std::string Sync() {
    {
      Timed timed(&g_phases.wait);
      const cudaError_t status = cudaDeviceSynchronize();
      if (status != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(status);
    }
    return arena_.Check();
  }
  // Stream order keeps a released buffer's next user behind the kernels
  // that used it, so releasing does not wait.
  size_t Mark() const { return arena_.Mark(); }
  void Release(size_t mark) { arena_.Release(mark); }
  void Reset() { arena_.Release(0); }

 private:
  Backend backend_;
  Arena<DeviceMemory> arena_;
};
#endif

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_RUNTIME_H_
