// CPU kernel for NgraFusedGather: Scatter -> element-wise ApplyEdge -> Gather
// in one pass over the CSC segments, with no per-edge tensor.
#include <string>

#include "ops/cc/fused_args.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;

// The initial accumulator follows the nine inputs of fused_args.h.
constexpr int kInitInput = 9;

template <typename T, typename Index>
class FusedGatherOp : public OpKernel {
 public:
  explicit FusedGatherOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("program", &program_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_));
  }

  void Compute(OpKernelContext* ctx) override {
    FusedArgs<T, Index> args;
    OP_REQUIRES_OK(ctx, ParseFusedArgs(ctx, 0, program_, /*check_csr=*/false, &args));
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape({args.num_dst, args.in.width}, &out_shape));
    Tensor* out = nullptr;
    Tensor* arg = nullptr;
    const T* init = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, kInitInput, out_shape, reduce_, &out, &init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtremeReduce(reduce_) ? out_shape : TensorShape({0}),
                                             &arg));
    T* o = out->flat<T>().data();
    Index* a = arg->flat<Index>().data();
    OP_REQUIRES_OK(ctx, DispatchProgram(program_, [&](auto p) {
      using P = decltype(p);
      return DispatchReduce(reduce_, [&](auto r) {
        return DispatchWeight<P>(args.weight_kind, [&](auto w) {
          RunSegments(ctx, args.csc, args.in.width, [&](int64_t first, int64_t last) {
            FusedGather<P, decltype(r)::value, decltype(w)::value>(args.csc, args.in, args.num_src, first, last, o,
                                                                    a, init);
          });
          return absl::OkStatus();
        });
      });
    }));
  }

 private:
  std::string program_, reduce_;
};

#define NGRA_REGISTER(T, Index)                                                              \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("NgraFusedGather").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      FusedGatherOp<T, Index>);

NGRA_REGISTER(float, int32_t)
NGRA_REGISTER(float, int64_t)
NGRA_REGISTER(double, int32_t)
NGRA_REGISTER(double, int64_t)
#undef NGRA_REGISTER

}  // namespace ngra
