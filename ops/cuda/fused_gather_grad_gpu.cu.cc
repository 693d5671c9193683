// The fused gather's gradients (d/dx_src, d/dx_dst, d/dweight) on CUDA:
// the explicit GpuStream instantiations of ops/cuda/launch.h and
// validate_impl.h. Compiled by nvcc without TensorFlow headers; the TF
// kernels (propagation_kernels_gpu.cc) and the harness link against them.
#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"
#include "ops/cuda/instances.h"

namespace ngra {
namespace gpu {

NGRA_GPU_INSTANCES_FUSED_GRAD(, GpuStream, float, int32_t)
NGRA_GPU_INSTANCES_FUSED_GRAD(, GpuStream, float, int64_t)
NGRA_GPU_INSTANCES_FUSED_GRAD(, GpuStream, double, int32_t)
NGRA_GPU_INSTANCES_FUSED_GRAD(, GpuStream, double, int64_t)

}  // namespace gpu
}  // namespace ngra
