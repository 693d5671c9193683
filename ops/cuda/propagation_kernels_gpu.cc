// GPU kernels of the propagation ops: thin TensorFlow wrappers around the
// TF-free entry points of ops/cuda/api.h (compiled by nvcc in
// ops/cuda/*_gpu.cu.cc). Compiled by the host compiler with TF's flags; it
// includes no CUDA header, so TF's bundled CUDA 12.3 headers never meet nvcc
// 13's. Shape functions are those of ops/cc/ops.cc; the checks and their
// messages are the CPU kernels' (ops/cuda/validate.h).
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ops/cuda/api.h"
#include "ops/cuda/validate.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace ngra {
namespace gpu {
namespace {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// The op's GpuStream: TF's compute stream (so the kernels are ordered with
// the ops around them), its CUDA device, and allocate_temp for scratch (TF's
// GPU allocator is stream-ordered on that stream, so scratch may be released
// when Compute returns even though the kernels are still queued).
class OpStream {
 public:
  explicit OpStream(OpKernelContext* ctx) {
    auto* stream = ctx->op_device_context()->stream();
    gpu_.stream = stream->platform_specific_handle().stream;
    gpu_.device = stream->parent()->device_ordinal();
    gpu_.allocate = [this, ctx](size_t bytes) -> void* {
      temps_.emplace_back();
      Tensor& t = temps_.back();
      if (!ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({static_cast<int64_t>(bytes)}), &t).ok()) {
        return nullptr;
      }
      return t.data();
    };
  }
  const GpuStream& get() const { return gpu_; }

 private:
  GpuStream gpu_;
  std::deque<Tensor> temps_;  // a deque keeps earlier tensors in place as it grows
};

TensorInfo Info(const Tensor& t) {
  TensorInfo info;
  info.data = t.NumElements() > 0 ? t.data() : nullptr;
  for (int d = 0; d < t.dims(); ++d) info.shape.push_back(t.dim_size(d));
  return info;
}

// Check failures are the caller's: InvalidArgument. A launch that fails
// after the checks passed is a resource or CUDA problem.
absl::Status CheckStatus(const std::string& message) {
  return message.empty() ? absl::OkStatus() : tensorflow::errors::InvalidArgument(message);
}
absl::Status RunStatus(const std::string& message) {
  if (message.empty()) return absl::OkStatus();
  if (message.rfind("out of device memory", 0) == 0) return tensorflow::errors::ResourceExhausted(message);
  return tensorflow::errors::Internal(message);
}

template <typename U>
U* Data(Tensor* t) {
  return t->NumElements() > 0 ? t->flat<U>().data() : nullptr;
}
template <typename U>
const U* Data(const Tensor& t) {
  return t.NumElements() > 0 ? t.flat<U>().data() : nullptr;
}

bool IsExtreme(const std::string& reduce) { return reduce == "max" || reduce == "min"; }

// Checks a gather's init input (ValidateInit) and allocates the output: in
// init's buffer when init is given and nothing else holds it, so that the
// reduction runs in place. *init_data is null without init.
template <typename T>
absl::Status OutputFromInit(OpKernelContext* ctx, int init_input, const TensorShape& out_shape,
                            const std::string& reduce, Tensor** out, const T** init_data) {
  const Tensor& init = ctx->input(init_input);
  const auto dims = out_shape.dim_sizes();
  bool present = false;
  TF_RETURN_IF_ERROR(
      CheckStatus(ValidateInit(Info(init), std::vector<int64_t>(dims.begin(), dims.end()), reduce, &present)));
  *init_data = present ? init.flat<T>().data() : nullptr;
  if (!present) return ctx->allocate_output(0, out_shape, out);
  return ctx->forward_input_or_allocate_output({init_input}, 0, out_shape, out);
}

// ---- NgraGather ----

template <typename T, typename Index>
class GatherGpuOp : public OpKernel {
 public:
  explicit GatherGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_name_));
    OP_REQUIRES(ctx, ParseReduce(reduce_name_, &reduce_),
                tensorflow::errors::InvalidArgument("unknown reduce '", reduce_name_, "'"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& values = ctx->input(0);
    const Tensor& indptr = ctx->input(1);
    const Tensor& edge_ids = ctx->input(2);
    OpStream stream(ctx);
    Checked c;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateGather<GpuStream, Index>(stream.get(), Info(values), Info(indptr),
                                                                     Info(edge_ids), &c)));
    const int64_t segments = indptr.NumElements() - 1;
    TensorShape out_shape = values.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, segments));
    Tensor *out = nullptr, *arg = nullptr;
    const T* init = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, 3, out_shape, reduce_name_, &out, &init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtreme(reduce_name_) ? out_shape : TensorShape({0}), &arg));
    const Index* ids = Data<Index>(edge_ids);
    const Segments<Index> seg{Data<Index>(indptr), ids, ids, segments};
    OP_REQUIRES_OK(ctx, RunStatus(RunGather<GpuStream, T, Index>(stream.get(), reduce_, seg, c.num_positions,
                                                                 Data<T>(values), c.width, init, Data<T>(out),
                                                                 Data<Index>(arg))));
  }

 private:
  std::string reduce_name_;
  Reduce reduce_ = Reduce::kSum;
};

// ---- NgraScatter ----

template <typename T, typename Index>
class ScatterGpuOp : public OpKernel {
 public:
  explicit ScatterGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& indptr = ctx->input(1);
    const Tensor& edge_ids = ctx->input(2);
    OpStream stream(ctx);
    Checked c;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateScatter<GpuStream, Index>(stream.get(), Info(x), Info(indptr),
                                                                      Info(edge_ids), &c)));
    TensorShape out_shape = x.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, c.num_positions));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    const Segments<Index> seg{Data<Index>(indptr), nullptr, Data<Index>(edge_ids), c.rows};
    OP_REQUIRES_OK(ctx, RunStatus(RunScatter<GpuStream, T, Index>(stream.get(), seg, c.num_positions, Data<T>(x),
                                                                  c.width, Data<T>(out))));
  }
};

// ---- NgraGatherGradArg ----

template <typename T, typename Index>
class GatherGradArgGpuOp : public OpKernel {
 public:
  explicit GatherGradArgGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& arg = ctx->input(1);
    const Tensor& indptr = ctx->input(2);
    const Tensor& edge_ids = ctx->input(3);
    OpStream stream(ctx);
    Checked c;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateGatherGradArg<GpuStream, Index>(stream.get(), Info(grad), Info(arg),
                                                                            Info(indptr), Info(edge_ids), &c)));
    TensorShape out_shape = grad.shape();
    OP_REQUIRES_OK(ctx, out_shape.SetDimWithStatus(0, c.num_positions));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    const Segments<Index> seg{Data<Index>(indptr), nullptr, Data<Index>(edge_ids), c.rows};
    OP_REQUIRES_OK(ctx, RunStatus(RunGatherGradArg<GpuStream, T, Index>(stream.get(), seg, c.num_positions,
                                                                        Data<T>(grad), Data<Index>(arg), c.width,
                                                                        Data<T>(out))));
  }
};

// ---- NgraInitGrad ----

template <typename T, typename Index>
class InitGradGpuOp : public OpKernel {
 public:
  explicit InitGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& arg = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateInitGrad(Info(grad), Info(arg))));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, grad.shape(), &out));
    OpStream stream(ctx);
    OP_REQUIRES_OK(ctx, RunStatus(RunInitGrad<GpuStream, T, Index>(stream.get(), Data<T>(grad), Data<Index>(arg),
                                                                   grad.NumElements(), Data<T>(out))));
  }
};

// ---- NgraFusedGather and its gradient ----

// The plan is each fused op's last input.
TensorInfo PlanOf(OpKernelContext* ctx) { return Info(ctx->input(ctx->num_inputs() - 1)); }

FusedInputs FusedInputsOf(OpKernelContext* ctx, int first) {
  FusedInputs in;
  TensorInfo* slots[] = {&in.x_src,      &in.x_dst,   &in.edge_weight, &in.edge_type, &in.csc_indptr,
                         &in.csc_src,    &in.csr_indptr, &in.csr_dst,   &in.csr_edge};
  for (int i = 0; i < 9; ++i) *slots[i] = Info(ctx->input(first + i));
  in.plan = PlanOf(ctx);
  return in;
}

template <typename T, typename Index>
class FusedGatherGpuOp : public OpKernel {
 public:
  explicit FusedGatherGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("program", &program_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_));
  }

  void Compute(OpKernelContext* ctx) override {
    OpStream stream(ctx);
    FusedProblem<T, Index> problem;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateFused<GpuStream, T, Index>(stream.get(), program_, reduce_,
                                                                       FusedInputsOf(ctx, 0), false, &problem)));
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape({problem.num_dst, problem.in.width}, &out_shape));
    Tensor *out = nullptr, *arg = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, 9, out_shape, reduce_, &out, &problem.init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtreme(reduce_) ? out_shape : TensorShape({0}), &arg));
    OP_REQUIRES_OK(ctx, RunStatus(RunFusedGather<GpuStream, T, Index>(stream.get(), problem, Data<T>(out),
                                                                      Data<Index>(arg))));
  }

 private:
  std::string program_, reduce_;
};

template <typename T, typename Index>
class FusedGatherGradGpuOp : public OpKernel {
 public:
  explicit FusedGatherGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("program", &program_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce", &reduce_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wrt", &wrt_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& argedge = ctx->input(1);
    OpStream stream(ctx);
    FusedProblem<T, Index> problem;
    Wrt wrt = Wrt::kXSrc;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateFusedGrad<GpuStream, T, Index>(stream.get(), program_, reduce_, wrt_,
                                                                           Info(grad), Info(argedge),
                                                                           FusedInputsOf(ctx, 2), &problem, &wrt)));
    const int wrt_input = wrt == Wrt::kXSrc ? 2 : wrt == Wrt::kXDst ? 3 : 4;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(wrt_input).shape(), &out));
    const Index* arg = IsExtreme(reduce_) ? Data<Index>(argedge) : nullptr;
    OP_REQUIRES_OK(ctx, RunStatus(RunFusedGatherGrad<GpuStream, T, Index>(stream.get(), problem, wrt, Data<T>(grad),
                                                                          arg, Data<T>(out))));
  }

 private:
  std::string program_, reduce_, wrt_;
};

// ---- NgraEdgeCode and its gradient ----

EdgeCodeInputs EdgeCodeInputsOf(OpKernelContext* ctx, int first) {
  EdgeCodeInputs in;
  TensorInfo* slots[] = {&in.x_src,      &in.x_dst,   &in.edge_data, &in.edge_type, &in.constants, &in.tables,
                         &in.csc_indptr, &in.csc_src, &in.csr_indptr, &in.csr_dst,  &in.csr_edge};
  for (int i = 0; i < 11; ++i) *slots[i] = Info(ctx->input(first + i));
  in.plan = PlanOf(ctx);
  return in;
}

// The attributes both ops share, checked as the CPU kernel checks them.
absl::Status ReadEdgeCodeAttrs(OpKernelConstruction* ctx, EdgeCodeAttrs* attrs) {
  std::vector<int64_t> code;
  int value = 0, score = -1;
  std::string reduce;
  TF_RETURN_IF_ERROR(ctx->GetAttr("code", &code));
  TF_RETURN_IF_ERROR(ctx->GetAttr("value", &value));
  TF_RETURN_IF_ERROR(ctx->GetAttr("score", &score));
  TF_RETURN_IF_ERROR(ctx->GetAttr("reduce", &reduce));
  return CheckStatus(ParseEdgeCodeAttrs(code, value, score, reduce, attrs));
}

// The program's generated kernels (the `cuda_kernel` attribute), loaded at
// the first call; null (the interpreter runs, with the same results) when
// there are none or they do not load, which is logged once per op.
class GeneratedCudaKernel {
 public:
  absl::Status Read(OpKernelConstruction* ctx) { return ctx->GetAttr("cuda_kernel", &path_); }
  template <typename T, typename Index>
  const GeneratedKernels* Get(const EdgeCodeAttrs& attrs) {
    absl::MutexLock lock(&mutex_);
    if (!tried_ && !path_.empty()) {
      tried_ = true;
      const std::string error =
          LoadGeneratedEdgeCode(path_, attrs.template GeneratedSignature<T, Index>(), &kernels_);
      if (!error.empty()) LOG(WARNING) << "ngra_tf: " << error << "; the edge-code interpreter runs instead";
    }
    return kernels_;
  }

 private:
  std::string path_;
  absl::Mutex mutex_;
  bool tried_ = false;
  const GeneratedKernels* kernels_ = nullptr;
};

template <typename T, typename Index>
class EdgeCodeGpuOp : public OpKernel {
 public:
  explicit EdgeCodeGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadEdgeCodeAttrs(ctx, &attrs_));
    OP_REQUIRES_OK(ctx, generated_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    OpStream stream(ctx);
    EdgeCodeProblem<T, Index> problem;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateEdgeCode<GpuStream, T, Index>(stream.get(), attrs_, EdgeCodeInputsOf(ctx, 0),
                                                                          false, &problem)));
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape(
                            {problem.num_dst, (attrs_.softmax() ? 3 : 1) * problem.program.width}, &out_shape));
    Tensor *out = nullptr, *aux = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, 11, out_shape, attrs_.reduce, &out, &problem.init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtreme(attrs_.reduce) ? out_shape : TensorShape({0}), &aux));
    problem.generated = generated_.Get<T, Index>(attrs_);
    OP_REQUIRES_OK(ctx, RunStatus(RunEdgeCode<GpuStream, T, Index>(stream.get(), problem, Data<T>(out),
                                                                   Data<Index>(aux))));
  }

 private:
  EdgeCodeAttrs attrs_;
  GeneratedCudaKernel generated_;
};

template <typename T, typename Index>
class EdgeCodeGradGpuOp : public OpKernel {
 public:
  explicit EdgeCodeGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadEdgeCodeAttrs(ctx, &attrs_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wrt", &wrt_));
    OP_REQUIRES_OK(ctx, generated_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    // Both operands (x_src_and_dst): on a GPU, the two walks each would take alone.
    const bool both = wrt_ == "x_src_and_dst";
    OP_REQUIRES_OK(ctx, Grad(ctx, both ? "x_src" : wrt_, 0));
    if (both) {
      OP_REQUIRES_OK(ctx, Grad(ctx, "x_dst", 1));
    } else {
      Tensor* empty = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({0}), &empty));
    }
  }

 private:
  // d `wrt` into output `output`.
  absl::Status Grad(OpKernelContext* ctx, const std::string& wrt_name, int output) {
    const Tensor& grad = ctx->input(0);
    const Tensor& aux = ctx->input(1);
    const Tensor& state = ctx->input(2);
    OpStream stream(ctx);
    EdgeCodeProblem<T, Index> problem;
    Wrt wrt = Wrt::kXSrc;
    TF_RETURN_IF_ERROR(CheckStatus(ValidateEdgeCodeGrad<GpuStream, T, Index>(
        stream.get(), attrs_, wrt_name, Info(grad), Info(aux), Info(state), EdgeCodeInputsOf(ctx, 3), &problem, &wrt)));
    const int wrt_input = wrt == Wrt::kXSrc ? 3 : wrt == Wrt::kXDst ? 4 : 5;
    Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(output, ctx->input(wrt_input).shape(), &out));
    const Index* arg = IsExtreme(attrs_.reduce) ? Data<Index>(aux) : nullptr;
    const T* finished = attrs_.softmax() ? Data<T>(state) : nullptr;
    problem.generated = generated_.Get<T, Index>(attrs_);
    return RunStatus(RunEdgeCodeGrad<GpuStream, T, Index>(stream.get(), problem, wrt, Data<T>(grad), arg, finished,
                                                          Data<T>(out)));
  }

  EdgeCodeAttrs attrs_;
  std::string wrt_;
  GeneratedCudaKernel generated_;
};

// ---- NgraPrepareGraph ----

template <typename Index>
class PrepareGraphGpuOp : public OpKernel {
 public:
  explicit PrepareGraphGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const GraphInputs graph{Info(ctx->input(0)), Info(ctx->input(1)), Info(ctx->input(2)), Info(ctx->input(3)),
                            Info(ctx->input(4))};
    OpStream stream(ctx);
    int64_t num_src = 0, num_dst = 0, num_edges = 0;
    OP_REQUIRES_OK(ctx, CheckStatus(ValidateGraph<GpuStream, Index>(stream.get(), graph, &num_src, &num_dst,
                                                                    &num_edges)));
    Tensor* plan = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({PlanBytes<Index>(num_src, num_dst, num_edges)}), &plan));
    const Segments<Index> csc{graph.csc_indptr.As<Index>(), graph.csc_src.As<Index>(), nullptr, num_dst};
    const Segments<Index> csr{graph.csr_indptr.As<Index>(), graph.csr_dst.As<Index>(), graph.csr_edge.As<Index>(),
                              num_src};
    OP_REQUIRES_OK(ctx, RunStatus(PrepareGraph<GpuStream, Index>(stream.get(), csc, csr, num_edges, plan->data())));
  }
};

#define NGRA_REGISTER_GPU(T, Index)                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraGather").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),         \
      GatherGpuOp<T, Index>);                                                                               \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraScatter").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),        \
      ScatterGpuOp<T, Index>);                                                                              \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraGatherGradArg").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),  \
      GatherGradArgGpuOp<T, Index>);                                                                        \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraInitGrad").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),       \
      InitGradGpuOp<T, Index>);                                                                             \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraFusedGather").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),    \
      FusedGatherGpuOp<T, Index>);                                                                          \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("NgraFusedGatherGrad").Device(DEVICE_GPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"), \
      FusedGatherGradGpuOp<T, Index>);                                                                      \
  /* The program's tables stay on the host: they are checked and inverted there. */                         \
  REGISTER_KERNEL_BUILDER(Name("NgraEdgeCode")                                                              \
                              .Device(DEVICE_GPU)                                                           \
                              .TypeConstraint<T>("T")                                                       \
                              .TypeConstraint<Index>("Tindex")                                              \
                              .HostMemory("tables"),                                                        \
                          EdgeCodeGpuOp<T, Index>);                                                         \
  REGISTER_KERNEL_BUILDER(Name("NgraEdgeCodeGrad")                                                          \
                              .Device(DEVICE_GPU)                                                           \
                              .TypeConstraint<T>("T")                                                       \
                              .TypeConstraint<Index>("Tindex")                                              \
                              .HostMemory("tables"),                                                        \
                          EdgeCodeGradGpuOp<T, Index>);

REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_GPU).TypeConstraint<int32_t>("Tindex"),
                        PrepareGraphGpuOp<int32_t>);
REGISTER_KERNEL_BUILDER(Name("NgraPrepareGraph").Device(DEVICE_GPU).TypeConstraint<int64_t>("Tindex"),
                        PrepareGraphGpuOp<int64_t>);
NGRA_REGISTER_GPU(float, int32_t)
NGRA_REGISTER_GPU(float, int64_t)
NGRA_REGISTER_GPU(double, int32_t)
NGRA_REGISTER_GPU(double, int64_t)
#undef NGRA_REGISTER_GPU

}  // namespace
}  // namespace gpu
}  // namespace ngra
