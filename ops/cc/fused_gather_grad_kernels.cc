// CPU kernel for NgraFusedGatherGrad: the gradient of a fused gather w.r.t.
// x_src (a walk over the CSR segments), x_dst or edge_weight (CSC walks).
#include <string>

#include "ops/cc/fused_args.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;

// The source-side walk reads edge weights in CSR order, at random in the
// CSC-ordered weight array, one lookup per edge on the walk's critical path
// (on reddit-small, 20-30 % of the walk). One pass over the edges copies them
// into CSR order first, so the walk reads them in sequence. Only one weight
// per edge, and only where the walk needs no edge id for anything else (max /
// min compare ids, typed programs pick a slot by edge): the order of the sum
// is unchanged, so the result is bit for bit the same.
template <typename Program, bool kArg, WeightKind K, typename T, typename Index>
absl::Status WeightsInCsrOrder(OpKernelContext* ctx, int64_t num_edges, Segments<Index>* csr, Operands<T>* in,
                               Tensor* storage) {
  if constexpr (K == WeightKind::kScalar && !kArg && !Program::kUsesType) {
    if (csr->edge_ids == nullptr) return absl::OkStatus();
    TF_RETURN_IF_ERROR(ctx->allocate_temp(::tensorflow::DataTypeToEnum<T>::value, TensorShape({num_edges}), storage));
    T* ordered = storage->flat<T>().data();
    const T* weight = in->weight;
    const Index* ids = csr->edge_ids;
    RunSegments(ctx, *csr, /*width=*/1, [&](int64_t first, int64_t last) {
      for (Index k = csr->Begin(first), end = csr->Begin(last); k < end; ++k) ordered[k] = weight[ids[k]];
    });
    in->weight = ordered;
    csr->edge_ids = nullptr;  // position k now reads weight k
  }
  return absl::OkStatus();
}

template <typename T, typename Index>
class FusedGatherGradOp : public OpKernel {
 public:
  explicit FusedGatherGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("program", &program_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wrt", &wrt_));
  }

  void Compute(OpKernelContext* ctx) override {
    FusedArgs<T, Index> args;
    OP_REQUIRES_OK(ctx, ParseFusedArgs(ctx, 2, program_, /*check_csr=*/wrt_ == "x_src", &args));
    const Tensor& grad = ctx->input(0);
    const Tensor& argedge = ctx->input(1);
    const int64_t width = args.in.width;
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape({args.num_dst, width}, &out_shape));
    OP_REQUIRES(ctx, grad.shape() == out_shape,
                InvalidArgument("grad must be shaped ", out_shape.DebugString(), ", got ", ShapeOf(grad)));
    const bool extreme = IsExtremeReduce(reduce_);
    if (extreme) {
      OP_REQUIRES(ctx, argedge.shape() == out_shape,
                  InvalidArgument("argedge must be shaped ", out_shape.DebugString(), ", got ", ShapeOf(argedge)));
      OP_REQUIRES_OK(ctx, CheckIds<Index>(ctx, argedge, "argedge", argedge.NumElements(), args.num_edges, -1, false));
    }

    ProgramInfo info;
    OP_REQUIRES_OK(ctx, InfoOf(program_, &info));
    const bool used = wrt_ == "x_src" || (wrt_ == "x_dst" && info.uses_dst) ||
                      (wrt_ == "edge_weight" && info.uses_weight);
    OP_REQUIRES(ctx, used, InvalidArgument("program ", program_, " has no operand ", wrt_, " to differentiate"));
    const int wrt_input = wrt_ == "x_src" ? 2 : wrt_ == "x_dst" ? 3 : 4;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(wrt_input).shape(), &out));
    T* o = out->flat<T>().data();

    // Mean spreads each output's gradient evenly: fold 1/degree in once.
    const T* g = nullptr;
    Tensor scaled;
    OP_REQUIRES_OK(ctx, MeanScaled<T, Index>(ctx, grad, args.csc, width, reduce_, &scaled, &g));
    const Index* a = extreme ? argedge.flat<Index>().data() : nullptr;

    OP_REQUIRES_OK(ctx, DispatchProgram(program_, [&](auto p) {
      using P = decltype(p);
      return DispatchWeight<P>(args.weight_kind, [&](auto w) {
        constexpr WeightKind K = decltype(w)::value;
        auto run = [&](auto arg_tag) {
          constexpr bool kArg = decltype(arg_tag)::value;
          const EdgeGrad<kArg, T, Index> eg{g, a, width, args.num_dst};
          if (wrt_ == "x_src") {
            Segments<Index> csr = args.csr;
            Operands<T> in = args.in;
            Tensor ordered;
            OP_REQUIRES_OK(ctx, (WeightsInCsrOrder<P, kArg, K>(ctx, args.num_edges, &csr, &in, &ordered)));
            RunSegments(ctx, csr, width, [&](int64_t first, int64_t last) {
              FusedGatherGradSrc<P, kArg, K>(csr, in, eg, first, last, o);
            });
          } else if (wrt_ == "x_dst") {
            if constexpr (P::kUsesDst) {
              RunSegments(ctx, args.csc, width, [&](int64_t first, int64_t last) {
                FusedGatherGradDst<P, kArg, K>(args.csc, args.in, args.num_src, eg, first, last, o);
              });
            }
          } else if constexpr (P::kUsesWeight) {
            RunSegments(ctx, args.csc, width, [&](int64_t first, int64_t last) {
              FusedGatherGradWeight<P, kArg, K>(args.csc, args.in, eg, first, last, o);
            });
          }
        };
        if (extreme) {
          run(std::true_type{});
        } else {
          run(std::false_type{});
        }
        return absl::OkStatus();
      });
    }));
  }

 private:
  std::string program_, reduce_, wrt_;
};

#define NGRA_REGISTER(T, Index)                                                              \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("NgraFusedGatherGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      FusedGatherGradOp<T, Index>);

NGRA_REGISTER(float, int32_t)
NGRA_REGISTER(float, int64_t)
NGRA_REGISTER(double, int32_t)
NGRA_REGISTER(double, int64_t)
#undef NGRA_REGISTER

}  // namespace ngra
