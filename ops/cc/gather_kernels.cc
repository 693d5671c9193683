// CPU kernels for gather and scatter (and the max/min gather gradients):
// validate the arguments, then hand raw pointers to ops/kernels/propagate.h.
#include <string>

#include "ops/cc/op_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;

namespace {

// Rows and the width of one row (the product of the trailing dims).
struct RowShape {
  int64_t rows = 0;
  int64_t width = 1;
};
RowShape RowsOf(const Tensor& t) {
  RowShape r;
  r.rows = t.dims() > 0 ? t.dim_size(0) : 0;
  for (int d = 1; d < t.dims(); ++d) r.width *= t.dim_size(d);
  return r;
}

// Checks indptr and, if non-empty, the edge ids of a (gather/scatter) segment
// walk over `num_edges` edges.
template <typename Index>
absl::Status CheckGrouping(OpKernelContext* ctx, const Tensor& indptr, const Tensor& edge_ids,
                           int64_t num_segments, int64_t num_edges, bool ids_must_be_permutation) {
  int64_t positions = 0;
  TF_RETURN_IF_ERROR(CheckIndptr<Index>(indptr, "indptr", num_segments, &positions));
  if (edge_ids.NumElements() == 0) {
    if (positions != num_edges) {
      return InvalidArgument("indptr[-1] = ", positions, " must equal the number of edges, ", num_edges);
    }
    return absl::OkStatus();
  }
  if (edge_ids.NumElements() != positions) {
    return InvalidArgument("edge_ids must have indptr[-1] = ", positions, " entries, got shape ",
                           ShapeOf(edge_ids));
  }
  return ids_must_be_permutation ? CheckPermutation<Index>(ctx, edge_ids, "edge_ids", num_edges)
                                 : CheckIds<Index>(ctx, edge_ids, "edge_ids", positions, num_edges);
}

}  // namespace

// ---- NgraGather ----

template <typename T, typename Index>
class GatherOp : public OpKernel {
 public:
  explicit GatherOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& indptr = ctx->input(1);
    const Tensor& edge_ids = ctx->input(2);
    OP_REQUIRES(ctx, values.dims() >= 1,
                InvalidArgument("values must have rank >= 1, got shape ", ShapeOf(values)));
    const RowShape v = RowsOf(values);
    OP_REQUIRES_OK(ctx, CheckGrouping<Index>(ctx, indptr, edge_ids, -1, v.rows, false));
    const int64_t segments = indptr.NumElements() - 1;

    TensorShape out_shape = values.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, segments));
    Tensor* out = nullptr;
    Tensor* arg = nullptr;
    const T* init = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, 3, out_shape, reduce_, &out, &init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtremeReduce(reduce_) ? out_shape : TensorShape({0}),
                                             &arg));
    Segments<Index> seg = MakeSegments<Index>(indptr, &edge_ids, &edge_ids);
    Operands<T> in;
    in.x_src = values.flat<T>().data();
    in.width = v.width;
    T* o = out->flat<T>().data();
    Index* a = arg->flat<Index>().data();
    OP_REQUIRES_OK(ctx, DispatchReduce(reduce_, [&](auto r) {
                     RunSegments(ctx, seg, v.width, [&](int64_t first, int64_t last) {
                       FusedGather<CopySrc, decltype(r)::value, WeightKind::kNone>(seg, in, v.rows, first, last, o, a,
                                                                                    init);
                     });
                     return absl::OkStatus();
                   }));
  }

 private:
  std::string reduce_;
};

// ---- NgraScatter ----

template <typename T, typename Index>
class ScatterOp : public OpKernel {
 public:
  explicit ScatterOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& indptr = ctx->input(1);
    const Tensor& edge_ids = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() >= 1, InvalidArgument("x must have rank >= 1, got shape ", ShapeOf(x)));
    const RowShape r = RowsOf(x);
    int64_t num_edges = 0;
    OP_REQUIRES_OK(ctx, CheckIndptr<Index>(indptr, "indptr", r.rows, &num_edges));
    // Every edge row is written exactly once only if edge_ids is a permutation.
    OP_REQUIRES_OK(ctx, CheckGrouping<Index>(ctx, indptr, edge_ids, r.rows, num_edges, true));

    TensorShape out_shape = x.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, num_edges));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    const Segments<Index> seg = MakeSegments<Index>(indptr, nullptr, &edge_ids);
    const T* xp = x.flat<T>().data();
    T* o = out->flat<T>().data();
    RunSegments(ctx, seg, r.width,
                [&](int64_t first, int64_t last) { Broadcast(seg, xp, r.width, first, last, o); });
  }
};

// ---- NgraGatherGradArg ----

template <typename T, typename Index>
class GatherGradArgOp : public OpKernel {
 public:
  explicit GatherGradArgOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& arg = ctx->input(1);
    const Tensor& indptr = ctx->input(2);
    const Tensor& edge_ids = ctx->input(3);
    OP_REQUIRES(ctx, grad.dims() >= 1, InvalidArgument("grad must have rank >= 1, got shape ", ShapeOf(grad)));
    OP_REQUIRES(ctx, arg.shape() == grad.shape(),
                InvalidArgument("argedge must have the shape of grad ", ShapeOf(grad), ", got ", ShapeOf(arg)));
    const RowShape r = RowsOf(grad);
    int64_t num_edges = 0;
    OP_REQUIRES_OK(ctx, CheckIndptr<Index>(indptr, "indptr", r.rows, &num_edges));
    OP_REQUIRES_OK(ctx, CheckGrouping<Index>(ctx, indptr, edge_ids, r.rows, num_edges, true));
    OP_REQUIRES_OK(ctx, CheckIds<Index>(ctx, arg, "argedge", arg.NumElements(), num_edges, -1, false));
    TensorShape out_shape = grad.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, num_edges));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    // Each winner must be an edge of its own segment, or two segments could
    // write the same element.
    const Segments<Index> seg = MakeSegments<Index>(indptr, nullptr, &edge_ids);
    const Index* a = arg.flat<Index>().data();
    std::vector<int64_t> owner(seg.edge_ids ? num_edges : 0, -1);  // bounded by edge_ids' size
    for (int64_t s = 0; seg.edge_ids && s < r.rows; ++s) {
      for (Index k = seg.Begin(s); k < seg.End(s); ++k) owner[seg.Edge(k)] = s;
    }
    for (int64_t i = 0; i < arg.NumElements(); ++i) {
      const int64_t s = i / r.width;
      const bool own = a[i] < 0 || (seg.edge_ids ? owner[a[i]] == s : seg.Begin(s) <= a[i] && a[i] < seg.End(s));
      OP_REQUIRES(ctx, own, InvalidArgument("argedge[", i, "] = ", static_cast<int64_t>(a[i]),
                                            " is not an edge of segment ", s));
    }

    const T* g = grad.flat<T>().data();
    T* o = out->flat<T>().data();
    RunSegments(ctx, seg, r.width,
                [&](int64_t first, int64_t last) { GatherGradArg(seg, g, a, r.width, first, last, o); });
  }
};

// ---- NgraInitGrad ----

template <typename T, typename Index>
class InitGradOp : public OpKernel {
 public:
  explicit InitGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& arg = ctx->input(1);
    OP_REQUIRES(ctx, arg.shape() == grad.shape(),
                InvalidArgument("argedge must have the shape of grad ", ShapeOf(grad), ", got ", ShapeOf(arg)));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, grad.shape(), &out));
    const T* g = grad.flat<T>().data();
    const Index* a = arg.flat<Index>().data();
    T* o = out->flat<T>().data();
    ParallelRange(ctx, grad.NumElements(), [&](int64_t begin, int64_t end) { InitGrad(g, a, begin, end, o); });
  }
};

#define NGRA_REGISTER(T, Index)                                                                 \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("NgraGather").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      GatherOp<T, Index>);                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("NgraScatter").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      ScatterOp<T, Index>);                                                                     \
  REGISTER_KERNEL_BUILDER(Name("NgraGatherGradArg")                                             \
                              .Device(DEVICE_CPU)                                               \
                              .TypeConstraint<T>("T")                                           \
                              .TypeConstraint<Index>("Tindex"),                                 \
                          GatherGradArgOp<T, Index>);                                           \
  REGISTER_KERNEL_BUILDER(                                                                      \
      Name("NgraInitGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      InitGradOp<T, Index>);

NGRA_REGISTER(float, int32_t)
NGRA_REGISTER(float, int64_t)
NGRA_REGISTER(double, int32_t)
NGRA_REGISTER(double, int64_t)
#undef NGRA_REGISTER

}  // namespace ngra
