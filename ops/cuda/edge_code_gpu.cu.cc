// Edge code's argument checks and forward pass (sum, mean, max, min and the
// online softmax) on CUDA: the explicit GpuStream instantiations of
// ops/cuda/edge_code_launch.h and validate_impl.h, and the loader of
// generated kernels. Compiled by nvcc without
// TensorFlow headers; the TF kernels (propagation_kernels_gpu.cc) and the
// harness link against them.
#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/validate_impl.h"
#include "ops/cuda/instances.h"

namespace ngra {
namespace gpu {

std::string LoadGeneratedEdgeCode(const std::string& path, const std::string& signature,
                                  const GeneratedKernels** kernels) {
  return LoadGeneratedKernels(path, signature, kernels);
}

NGRA_GPU_INSTANCES_EDGE_CODE(, GpuStream, float, int32_t)
NGRA_GPU_INSTANCES_EDGE_CODE(, GpuStream, float, int64_t)
NGRA_GPU_INSTANCES_EDGE_CODE(, GpuStream, double, int32_t)
NGRA_GPU_INSTANCES_EDGE_CODE(, GpuStream, double, int64_t)

}  // namespace gpu
}  // namespace ngra
