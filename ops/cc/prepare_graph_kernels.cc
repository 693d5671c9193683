// CPU kernel for NgraPrepareGraph: the fused ops' checks of an adjacency's
// five index arrays, once. The CPU walks need no schedule: the plan is the
// graph's sizes under a tag (op_util.h), which lets a fused op skip these
// checks; the GPU kernel (ops/cuda/propagation_kernels_gpu.cc) adds the schedules.
// NgraVouchedPlan writes the same plan from sizes alone, for arrays a store
// verified.
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
    OP_REQUIRES_OK(ctx, CheckCsc<Index>(ctx, csc_indptr, csc_src, num_src, /*prepared=*/false, &E));
    OP_REQUIRES_OK(ctx, CheckCsr<Index>(ctx, csr_indptr, ctx->input(3), ctx->input(4), num_src, num_dst, E,
                                        /*check_csr=*/true));
    Tensor* plan = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kCpuPlanBytes}), &plan));
    WriteCpuPlan(num_src, num_dst, E, reinterpret_cast<char*>(plan->flat<int8_t>().data()));
  }
};

// NgraVouchedPlan: the same plan from the sizes of arrays checked elsewhere.
class VouchedPlanOp : public OpKernel {
 public:
  explicit VouchedPlanOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t sizes[3];
    const char* names[3] = {"num_src", "num_dst", "num_edges"};
    for (int i = 0; i < 3; ++i) {
      const Tensor& size = ctx->input(i);
      OP_REQUIRES(ctx, size.dims() == 0,
                  InvalidArgument(names[i], " must be a scalar, got shape ", ShapeOf(size)));
      sizes[i] = size.scalar<int64_t>()();
      OP_REQUIRES(ctx, sizes[i] >= 0, InvalidArgument(names[i], " must be >= 0, got ", sizes[i]));
    }
    Tensor* plan = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({kCpuPlanBytes}), &plan));
    WriteCpuPlan(sizes[0], sizes[1], sizes[2], reinterpret_cast<char*>(plan->flat<int8_t>().data()));
  }
};

REGISTER_KERNEL_BUILDER(Name("NgraVouchedPlan").Device(DEVICE_CPU), VouchedPlanOp);

REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_CPU).TypeConstraint<int32_t>("Tindex"),
                        PrepareGraphOp<int32_t>);
REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_CPU).TypeConstraint<int64_t>("Tindex"),
                        PrepareGraphOp<int64_t>);

}  // namespace ngra
