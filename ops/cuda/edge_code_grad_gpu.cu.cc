// Edge code's gradients (d/dx_src, d/dx_dst, d/dedge_data) on CUDA: the
// explicit GpuStream instantiations of ops/cuda/edge_code_launch.h. Compiled
// by nvcc without TensorFlow headers; the TF kernels
// (propagation_kernels_gpu.cc) and the harness link against them.
#include "ops/cuda/backend_cuda.cuh"
#include "ops/cuda/edge_code_launch.h"
#include "ops/cuda/instances.h"

namespace ngra {
namespace gpu {

NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(, GpuStream, float, int32_t)
NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(, GpuStream, float, int64_t)
NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(, GpuStream, double, int32_t)
NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(, GpuStream, double, int64_t)

}  // namespace gpu
}  // namespace ngra
