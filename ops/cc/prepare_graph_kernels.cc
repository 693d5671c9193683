// CPU kernel for NgraPrepareGraph: the fused ops' checks of an adjacency's
// five index arrays, once. The CPU walks need no schedule, so the plan is
// empty; the GPU kernel (ops/cuda/propagation_kernels_gpu.cc) fills it.
#include "ops/cc/op_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;

template <typename Index>
class PrepareGraphOp : public OpKernel {
 public:
  explicit PrepareGraphOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& csc_indptr = ctx->input(0);
    const Tensor& csc_src = ctx->input(1);
    const Tensor& csr_indptr = ctx->input(2);
    // Both shapes first, as the GPU kernel checks them (ValidateGraph): the sizes come from them.
    OP_REQUIRES(ctx, csc_indptr.dims() == 1 && csc_indptr.NumElements() >= 1,
                InvalidArgument("csc_indptr must be a non-empty vector, got shape ", ShapeOf(csc_indptr)));
    OP_REQUIRES(ctx, csr_indptr.dims() == 1 && csr_indptr.NumElements() >= 1,
                InvalidArgument("csr_indptr must be a non-empty vector, got shape ", ShapeOf(csr_indptr)));
    const int64_t num_dst = csc_indptr.NumElements() - 1, num_src = csr_indptr.NumElements() - 1;
    int64_t E = 0;
    OP_REQUIRES_OK(ctx, CheckIndptr<Index>(csc_indptr, "csc_indptr", -1, &E));
    OP_REQUIRES_OK(ctx, CheckIds<Index>(ctx, csc_src, "csc_src", E, num_src));
    OP_REQUIRES_OK(ctx, CheckCsr<Index>(ctx, csr_indptr, ctx->input(3), ctx->input(4), num_src, num_dst, E,
                                        /*check_csr=*/true));
    Tensor* plan = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({0}), &plan));
  }
};

REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_CPU).TypeConstraint<int32_t>("Tindex"),
                        PrepareGraphOp<int32_t>);
REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_CPU).TypeConstraint<int64_t>("Tindex"),
                        PrepareGraphOp<int64_t>);

}  // namespace ngra
