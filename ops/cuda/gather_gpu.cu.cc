// Validation, scheduling, gather, scatter and the max/min gather gradient on CUDA:
// the explicit GpuStream instantiations of ops/cuda/launch.h and
// validate_impl.h. Compiled by nvcc without TensorFlow headers; the TF
// kernels (propagation_kernels_gpu.cc) and the harness link against them.
#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/launch.h"
#include "ops/cuda/validate_impl.h"
#include "ops/cuda/instances.h"

namespace ngra {
namespace gpu {

NGRA_GPU_INSTANCES_INDEX(, GpuStream, int32_t)
NGRA_GPU_INSTANCES_INDEX(, GpuStream, int64_t)
NGRA_GPU_INSTANCES_GATHER(, GpuStream, float, int32_t)
NGRA_GPU_INSTANCES_GATHER(, GpuStream, float, int64_t)
NGRA_GPU_INSTANCES_GATHER(, GpuStream, double, int32_t)
NGRA_GPU_INSTANCES_GATHER(, GpuStream, double, int64_t)

}  // namespace gpu
}  // namespace ngra
