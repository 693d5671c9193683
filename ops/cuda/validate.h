// The argument checks of each op's GPU kernel, in the order and with the
// messages of the CPU kernel (ops/cc/*_kernels.cc, op_util.h, fused_args.h),
// for tensors that live on the device. TF-free: a tensor is its data pointer
// and shape, so the harness can feed these bad input and read the messages.
//
// Shape conditions are decided on the host; conditions on index values run
// as device checks (Validator in api.h) with one synchronisation at the end.
// Copying the index arrays to the host instead would move every edge index
// over PCIe on every call, more than the kernel itself reads from them.
#ifndef NGRA_OPS_CUDA_VALIDATE_H_
#define NGRA_OPS_CUDA_VALIDATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/api.h"

namespace ngra {
namespace gpu {

struct TensorInfo {
  const void* data = nullptr;
  std::vector<int64_t> shape;

  int dims() const { return static_cast<int>(shape.size()); }
  int64_t dim(int d) const { return shape[d]; }
  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // As TensorShape::DebugString: "[3,4]".
  std::string ShapeString() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
  }
  template <typename U>
  const U* As() const {
    return static_cast<const U*>(data);
  }
};

// What the checks established, for the launch.
struct Checked {
  int64_t num_positions = 0;  // indptr[-1]
  int64_t rows = 0, width = 1;
};

// NgraGather(values, indptr, edge_ids); its init: ValidateInit.
template <typename Backend, typename Index>
std::string ValidateGather(const Backend& backend, const TensorInfo& values, const TensorInfo& indptr,
                           const TensorInfo& edge_ids, Checked* out);

// The init input of NgraGather and NgraFusedGather (a host check: shapes
// only): empty means none; otherwise shaped like the output, and not with
// mean. Sets *present.
inline std::string ValidateInit(const TensorInfo& init, const std::vector<int64_t>& out_shape,
                                const std::string& reduce, bool* present) {
  *present = init.NumElements() > 0;
  if (!*present) return "";
  if (reduce == "mean") {
    return "init cannot be used with reduce=mean: reduce with sum from init, then divide by the whole in-degree";
  }
  if (init.shape != out_shape) {
    return "init must be empty or shaped like the output " + TensorInfo{nullptr, out_shape}.ShapeString() + ", got " +
           init.ShapeString();
  }
  return "";
}

// NgraInitGrad(grad, argedge) (a host check): argedge shaped like grad.
inline std::string ValidateInitGrad(const TensorInfo& grad, const TensorInfo& argedge) {
  if (argedge.shape == grad.shape) return "";
  return "argedge must have the shape of grad " + grad.ShapeString() + ", got " + argedge.ShapeString();
}

// NgraScatter(x, indptr, edge_ids).
template <typename Backend, typename Index>
std::string ValidateScatter(const Backend& backend, const TensorInfo& x, const TensorInfo& indptr,
                            const TensorInfo& edge_ids, Checked* out);

// NgraGatherGradArg(grad, argedge, indptr, edge_ids).
template <typename Backend, typename Index>
std::string ValidateGatherGradArg(const Backend& backend, const TensorInfo& grad, const TensorInfo& argedge,
                                  const TensorInfo& indptr, const TensorInfo& edge_ids, Checked* out);

// The nine NgraFusedGather inputs, x_src first.
struct FusedInputs {
  TensorInfo x_src, x_dst, edge_weight, edge_type, csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge;
};

// NgraFusedGather (its nine inputs; init: ValidateInit); fills problem (its
// program and reduce are set from the names). check_csr: the walk reads the CSR arrays (the d/dx_src gradient).
template <typename Backend, typename T, typename Index>
std::string ValidateFused(const Backend& backend, const std::string& program, const std::string& reduce,
                          const FusedInputs& inputs, bool check_csr, FusedProblem<T, Index>* problem);

// NgraFusedGatherGrad: the forward checks, then grad, argedge and wrt.
template <typename Backend, typename T, typename Index>
std::string ValidateFusedGrad(const Backend& backend, const std::string& program, const std::string& reduce,
                              const std::string& wrt, const TensorInfo& grad, const TensorInfo& argedge,
                              const FusedInputs& inputs, FusedProblem<T, Index>* problem, Wrt* which);

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_VALIDATE_H_
