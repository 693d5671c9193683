// GPU kernels of NGra's explicit data-movement ops (NGra §3.1):
//   NgraCopyH2D: input in host memory, output on the GPU;
//   NgraCopyD2H: input on the GPU, output in host memory;
//   NgraCopyD2D: a new buffer on the same GPU (TF has already brought an
//     input from another device to this one: an op runs on one device).
// Each is asynchronous: it enqueues the copy through the device context
// (TF's copy streams, which also order it with the compute stream) and
// finishes when the copy does, without blocking a thread. Bytes are counted
// like the CPU kernels' (copy_counters.h), once the copy has succeeded.
#include <string>

#include "ops/cc/copy_counters.h"
#include "tensorflow/core/framework/device.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace ngra {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

enum class Kind { kH2D, kD2H, kD2D };

class CopyGpuOp : public AsyncOpKernel {
 public:
  explicit CopyGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    const std::string& op = type_string();  // NgraCopyH2D -> "h2d"
    name_ = op.substr(op.size() - 3);
    for (char& c : name_) c = static_cast<char>(std::tolower(c));
    kind_ = name_ == "h2d" ? Kind::kH2D : name_ == "d2h" ? Kind::kD2H : Kind::kD2D;
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, input.shape(), &output), done);
    const int64_t bytes = static_cast<int64_t>(input.TotalBytes());
    const std::string device = ctx->device()->name();
    if (input.NumElements() == 0) {
      CopyCounters::Get().Add(name_, device, 0);
      done();
      return;
    }
    auto finish = [ctx, done, bytes, device, name = name_](const absl::Status& status) {
      if (status.ok()) CopyCounters::Get().Add(name, device, bytes);
      ctx->SetStatus(status);
      done();
    };
    auto* context = ctx->op_device_context();
    OP_REQUIRES_ASYNC(ctx, context != nullptr,
                      tensorflow::errors::Internal("NgraCopy", name_, " has no device context on ", device), done);
    auto* target = static_cast<tensorflow::Device*>(ctx->device());
    switch (kind_) {
      case Kind::kH2D:
        context->CopyCPUTensorToDevice(&input, target, output, finish);
        break;
      case Kind::kD2H:
        context->CopyDeviceTensorToCPU(&input, "ngra_copy_d2h", target, output, finish);
        break;
      case Kind::kD2D:
        context->CopyTensorInSameDevice(&input, target, output, finish);
        break;
    }
  }

 private:
  std::string name_;
  Kind kind_ = Kind::kD2D;
};

// Types that live in device memory and copy as bytes; strings (which own
// heap memory) stay with the CPU kernels.
const std::vector<tensorflow::DataType> kGpuTypes = {
    tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE,    tensorflow::DT_HALF,      tensorflow::DT_BFLOAT16,
    tensorflow::DT_INT8,  tensorflow::DT_UINT8,     tensorflow::DT_INT16,     tensorflow::DT_UINT16,
    tensorflow::DT_INT32, tensorflow::DT_UINT32,    tensorflow::DT_INT64,     tensorflow::DT_UINT64,
    tensorflow::DT_BOOL,  tensorflow::DT_COMPLEX64, tensorflow::DT_COMPLEX128};

REGISTER_KERNEL_BUILDER(
    Name("NgraCopyH2D").Device(tensorflow::DEVICE_GPU).HostMemory("input").TypeConstraint("T", kGpuTypes), CopyGpuOp);
REGISTER_KERNEL_BUILDER(
    Name("NgraCopyD2H").Device(tensorflow::DEVICE_GPU).HostMemory("output").TypeConstraint("T", kGpuTypes), CopyGpuOp);
REGISTER_KERNEL_BUILDER(Name("NgraCopyD2D").Device(tensorflow::DEVICE_GPU).TypeConstraint("T", kGpuTypes), CopyGpuOp);

}  // namespace
}  // namespace ngra
