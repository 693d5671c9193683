// GpuStream: runs the thread bodies as CUDA kernels on a given stream.
// nvcc only. Everything is enqueued asynchronously on the stream, except
// CopyToHost, which waits for it (the one synchronisation per validated op),
// and CopyToDevice from pageable memory (an edge program), which waits for
// the stream's earlier work before it starts.
#ifndef NGRA_OPS_CUDA_BACKEND_CUDA_CUH_
#define NGRA_OPS_CUDA_BACKEND_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ops/cuda/api.h"

namespace ngra {
namespace gpu {

// The one kernel: thread t runs body(t). Each body type is its own
// instantiation, so this is as specialised as a hand-written kernel.
template <typename Body>
__global__ void __launch_bounds__(kThreadsPerBlock) RunBody(const Body body, int64_t threads) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < threads) body(t);
}

inline cudaStream_t StreamOf(const GpuStream& gpu) { return static_cast<cudaStream_t>(gpu.stream); }

inline std::string CudaError(const char* what, cudaError_t status) {
  return std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

template <typename Body>
void Launch(const GpuStream& gpu, const Body& body, int64_t threads) {
  if (threads <= 0) return;
  const int64_t blocks = (threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  // blocks < 2^31 - 1 (the grid limit) for any launch below 5 * 10^11 threads;
  // launch.h never asks for more (it checks sizes first).
  RunBody<<<static_cast<unsigned int>(blocks), kThreadsPerBlock, 0, StreamOf(gpu)>>>(body, threads);
}

inline void Memset(const GpuStream& gpu, void* p, int byte, size_t bytes) {
  if (bytes > 0) cudaMemsetAsync(p, byte, bytes, StreamOf(gpu));
}

inline std::string CopyToHost(const GpuStream& gpu, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return "";
  cudaError_t status = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, StreamOf(gpu));
  if (status == cudaSuccess) status = cudaStreamSynchronize(StreamOf(gpu));
  return status == cudaSuccess ? "" : CudaError("copying check results to the host", status);
}

// A small host array (an edge program, its index tables) to the device, in
// stream order. From pageable memory the call returns once the bytes are
// staged, so `src` may go away right after; it waits for the stream's earlier
// work first, which the validated ops have already waited for (Finish).
inline std::string CopyToDevice(const GpuStream& gpu, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return "";
  const cudaError_t status = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, StreamOf(gpu));
  return status == cudaSuccess ? "" : CudaError("copying an edge program to the device", status);
}

// Launch errors (bad configuration, no kernel image for this GPU) surface
// here; errors inside kernels surface at the next synchronisation.
inline std::string LastError(const GpuStream&) {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? "" : CudaError("launching a kernel", status);
}

// Stable LSD radix sort of (key, id) by key, descending: ties keep segment order.
template <typename Index>
std::string SortByKeyDescending(const GpuStream& gpu, const uint32_t* keys_in, uint32_t* keys_out,
                                const Index* ids_in, Index* ids_out, int64_t n, int end_bit) {
  size_t bytes = 0;
  cudaError_t status = cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys_in, keys_out, ids_in, ids_out, n,
                                                                 0, end_bit, StreamOf(gpu));
  if (status != cudaSuccess) return CudaError("sizing the degree sort", status);
  void* temp = gpu.allocate(bytes);
  if (temp == nullptr && bytes > 0) return "out of device memory for the degree sort";
  status = cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys_in, keys_out, ids_in, ids_out, n, 0, end_bit,
                                                     StreamOf(gpu));
  return status == cudaSuccess ? "" : CudaError("sorting segments by degree", status);
}

template <typename Index>
std::string ExclusiveSum(const GpuStream& gpu, const Index* in, Index* out, int64_t n) {
  size_t bytes = 0;
  cudaError_t status = cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, n, StreamOf(gpu));
  if (status != cudaSuccess) return CudaError("sizing a prefix sum", status);
  void* temp = gpu.allocate(bytes);
  if (temp == nullptr && bytes > 0) return "out of device memory for a prefix sum";
  status = cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, n, StreamOf(gpu));
  return status == cudaSuccess ? "" : CudaError("prefix sum", status);
}

// ---- Generated edge code (api.h: GeneratedKernels) ----

// The kernels of a module file ngra_tf/ops/generated.py compiled with NVRTC
// (CUBIN or PTX) for the program of `signature` (EdgeCodeAttrs::
// GeneratedSignature), loaded once per file and signature for the process (a
// runtime library is loaded into every device's context as it is used) and
// kept. Its kernels are looked up by names that end in the signature's hash.
inline std::string LoadGeneratedKernels(const std::string& path, const std::string& signature,
                                        const GeneratedKernels** kernels) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<GeneratedKernels>>* loaded =
      new std::map<std::string, std::unique_ptr<GeneratedKernels>>();  // never destroyed: kernels outlive ops
  std::lock_guard<std::mutex> lock(mutex);
  const std::string suffix = GeneratedKernelSuffix(signature);
  auto found = loaded->find(path + suffix);
  if (found != loaded->end()) {
    *kernels = found->second.get();
    return "";
  }
  cudaLibrary_t library = nullptr;
  cudaError_t status = cudaLibraryLoadFromFile(&library, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (status != cudaSuccess) return CudaError(("loading generated edge code from " + path).c_str(), status);
  auto entry = std::make_unique<GeneratedKernels>();
  for (int k = 0; k < kNumGeneratedKernels; ++k) {
    cudaKernel_t kernel = nullptr;
    const std::string name = kGeneratedKernelNames[k] + suffix;
    if (cudaLibraryGetKernel(&kernel, library, name.c_str()) == cudaSuccess) entry->kernel[k] = kernel;
    cudaGetLastError();  // a pass the program has no kernel for (it reads no such operand) is no error
  }
  if (entry->kernel[kGeneratedForward] == nullptr) {
    cudaLibraryUnload(library);
    return "generated edge code in " + path + " has no " + kGeneratedKernelNames[kGeneratedForward] + suffix +
           " (a module of another program, or of another ngra-tf)";
  }
  *kernels = entry.get();
  (*loaded)[path + suffix] = std::move(entry);
  return "";
}

// GpuStream, launching the bodies that evaluate the program through its
// generated kernels (GeneratedEntry) and every other body as GpuStream does.
struct GeneratedStream : GpuStream {
  GeneratedStream(const GpuStream& gpu, const GeneratedKernels* generated) : GpuStream(gpu), kernels(generated) {}
  const GeneratedKernels* kernels;
};

template <>
struct GeneratedBackend<GpuStream> {
  static constexpr bool kAvailable = true;
  using Stream = GeneratedStream;
};

template <typename Body>
void Launch(const GeneratedStream& gpu, const Body& body, int64_t threads) {
  constexpr int k = GeneratedEntry<Body>::kKernel;
  if constexpr (k < 0) {
    Launch(static_cast<const GpuStream&>(gpu), body, threads);
  } else {
    if (threads <= 0) return;
    const int64_t blocks = (threads + kThreadsPerBlock - 1) / kThreadsPerBlock;
    Body arg = body;
    int64_t count = threads;
    void* args[] = {&arg, &count};
    // A missing kernel (null) fails the launch; LastError reports it.
    cudaLaunchKernel(gpu.kernels->kernel[k], dim3(static_cast<unsigned int>(blocks)), dim3(kThreadsPerBlock), args, 0,
                     StreamOf(gpu));
  }
}

// Makes the stream's device current for the runtime calls of one op and
// restores the caller's afterwards (TF's threads serve several GPUs).
class DeviceScope {
 public:
  explicit DeviceScope(const GpuStream& gpu) {
    cudaError_t status = cudaGetDevice(&previous_);
    if (status == cudaSuccess && previous_ != gpu.device) {
      status = cudaSetDevice(gpu.device);
      switched_ = status == cudaSuccess;
    }
    if (status != cudaSuccess) error_ = CudaError("selecting the op's GPU", status);
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const std::string& error() const { return error_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  std::string error_;
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_BACKEND_CUDA_CUH_
