// The explicit instantiations of api.h and validate.h for one backend, as
// macros: with an empty Prefix they define (ops/cuda/*_gpu.cu.cc, with the
// definitions from launch.h and validate_impl.h in view), with Prefix =
// extern they only declare, so that a translation unit that sees the
// definitions (the harness) links against the GPU objects instead of
// instantiating GPU code itself.
#ifndef NGRA_OPS_CUDA_INSTANCES_H_
#define NGRA_OPS_CUDA_INSTANCES_H_

#include <cstdint>
#include <string>

#include "ops/cuda/api.h"
#include "ops/cuda/validate.h"

// Validation, scheduling, gather, scatter, and the max/min gather gradients.
#define NGRA_GPU_INSTANCES_INDEX(Prefix, Backend, Index)                                                             \
  Prefix template class Validator<Backend, Index>;                                                      \
  Prefix template std::string BuildSchedule<Backend, Index>(                                            \
      const Backend&, const Segments<Index>&, int64_t, const WalkConfig&,                       \
      Schedule<Index>*, Index*);                                                                        \
  Prefix template std::string PrepareGraph<Backend, Index>(                                             \
      const Backend&, const Segments<Index>&, const Segments<Index>&, int64_t, void*,           \
      const WalkConfig&);                                                                               \
  Prefix template std::string ValidateGraph<Backend, Index>(                                            \
      const Backend&, const GraphInputs&, int64_t*, int64_t*, int64_t*);                              \
  Prefix template std::string ValidateGather<Backend, Index>(                                           \
      const Backend&, const TensorInfo&, const TensorInfo&,                                \
      const TensorInfo&, Checked*);                                                        \
  Prefix template std::string ValidateScatter<Backend, Index>(                                          \
      const Backend&, const TensorInfo&, const TensorInfo&,                                \
      const TensorInfo&, Checked*);                                                        \
  Prefix template std::string ValidateGatherGradArg<Backend, Index>(                                    \
      const Backend&, const TensorInfo&, const TensorInfo&,                                \
      const TensorInfo&, const TensorInfo&, Checked*);

#define NGRA_GPU_INSTANCES_GATHER(Prefix, Backend, T, Index)                                                         \
  Prefix template std::string RunGather<Backend, T, Index>(                                             \
      const Backend&, Reduce, const Segments<Index>&, int64_t, const T*, int64_t, const T*, T*, Index*, \
      const WalkConfig&);                                                                               \
  Prefix template std::string RunScatter<Backend, T, Index>(                                            \
      const Backend&, const Segments<Index>&, int64_t, const T*, int64_t, T*,                                \
      const WalkConfig&);                                                                               \
  Prefix template std::string RunGatherGradArg<Backend, T, Index>(                                      \
      const Backend&, const Segments<Index>&, int64_t, const T*, const Index*, int64_t, T*,                  \
      const WalkConfig&);                                                                               \
  Prefix template std::string RunInitGrad<Backend, T, Index>(const Backend&, const T*, const Index*, int64_t, T*);

#define NGRA_GPU_INSTANCES_FUSED(Prefix, Backend, T, Index)                                                          \
  Prefix template std::string ValidateFused<Backend, T, Index>(                                         \
      const Backend&, const std::string&, const std::string&, const FusedInputs&, bool,                 \
      FusedProblem<T, Index>*);                                                                         \
  Prefix template std::string ValidateFusedGrad<Backend, T, Index>(                                     \
      const Backend&, const std::string&, const std::string&, const std::string&, const TensorInfo&,    \
      const TensorInfo&, const FusedInputs&, FusedProblem<T, Index>*,         \
      Wrt*);                                                                                            \
  Prefix template std::string RunFusedGather<Backend, T, Index>(                                        \
      const Backend&, const FusedProblem<T, Index>&, T*, Index*, const WalkConfig&);       \
  Prefix template std::string RunFusedGatherScheduled<Backend, T, Index>(                               \
      const Backend&, const FusedProblem<T, Index>&, const Schedule<Index>&, T*, Index*);

#define NGRA_GPU_INSTANCES_FUSED_GRAD(Prefix, Backend, T, Index)                                                     \
  Prefix template std::string RunFusedGatherGrad<Backend, T, Index>(                                    \
      const Backend&, const FusedProblem<T, Index>&, Wrt, const T*, const Index*, T*,      \
      const WalkConfig&);

// Edge code: validation and the forward; the gradients.
#define NGRA_GPU_INSTANCES_EDGE_CODE(Prefix, Backend, T, Index)                                                     \
  Prefix template std::string ValidateEdgeCode<Backend, T, Index>(                                                \
      const Backend&, const EdgeCodeAttrs&, const EdgeCodeInputs&, bool, EdgeCodeProblem<T, Index>*);             \
  Prefix template std::string ValidateEdgeCodeGrad<Backend, T, Index>(                                            \
      const Backend&, const EdgeCodeAttrs&, const std::string&, const TensorInfo&, const TensorInfo&,             \
      const TensorInfo&, const EdgeCodeInputs&, EdgeCodeProblem<T, Index>*, Wrt*);                                \
  Prefix template std::string RunEdgeCode<Backend, T, Index>(const Backend&, const EdgeCodeProblem<T, Index>&, T*, \
                                                             Index*, const WalkConfig&);

#define NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(Prefix, Backend, T, Index)                                                \
  Prefix template std::string RunEdgeCodeGrad<Backend, T, Index>(const Backend&, const EdgeCodeProblem<T, Index>&, \
                                                                 Wrt, const T*, const Index*, const T*, T*,        \
                                                                 const WalkConfig&);

// Every instance for one backend (the harness's extern declarations).
#define NGRA_GPU_INSTANCES_ALL(Prefix, Backend)                  \
  NGRA_GPU_INSTANCES_INDEX(Prefix, Backend, int32_t)             \
  NGRA_GPU_INSTANCES_INDEX(Prefix, Backend, int64_t)             \
  NGRA_GPU_INSTANCES_GATHER(Prefix, Backend, float, int32_t)     \
  NGRA_GPU_INSTANCES_GATHER(Prefix, Backend, float, int64_t)     \
  NGRA_GPU_INSTANCES_GATHER(Prefix, Backend, double, int32_t)    \
  NGRA_GPU_INSTANCES_GATHER(Prefix, Backend, double, int64_t)    \
  NGRA_GPU_INSTANCES_FUSED(Prefix, Backend, float, int32_t)      \
  NGRA_GPU_INSTANCES_FUSED(Prefix, Backend, float, int64_t)      \
  NGRA_GPU_INSTANCES_FUSED(Prefix, Backend, double, int32_t)     \
  NGRA_GPU_INSTANCES_FUSED(Prefix, Backend, double, int64_t)     \
  NGRA_GPU_INSTANCES_FUSED_GRAD(Prefix, Backend, float, int32_t) \
  NGRA_GPU_INSTANCES_FUSED_GRAD(Prefix, Backend, float, int64_t) \
  NGRA_GPU_INSTANCES_FUSED_GRAD(Prefix, Backend, double, int32_t) \
  NGRA_GPU_INSTANCES_FUSED_GRAD(Prefix, Backend, double, int64_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE(Prefix, Backend, float, int32_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE(Prefix, Backend, float, int64_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE(Prefix, Backend, double, int32_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE(Prefix, Backend, double, int64_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(Prefix, Backend, float, int32_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(Prefix, Backend, float, int64_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(Prefix, Backend, double, int32_t) \
  NGRA_GPU_INSTANCES_EDGE_CODE_GRAD(Prefix, Backend, double, int64_t)

#endif  // NGRA_OPS_CUDA_INSTANCES_H_
