// CPU kernels of NGra's explicit data-movement ops, and their byte counters.
//
// On a CPU-only machine "host" is the store a chunk lives in and "device" is
// the budgeted working set the runtime computes on: the copy is real (a new
// buffer), so a plan's copies cost what they would on a GPU minus PCIe.
#include <cstring>
#include <string>

#include "ops/cc/copy_counters.h"
#include "ops/cc/op_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;
using ::tensorflow::tstring;

class CopyOp : public OpKernel {
 public:
  explicit CopyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    const std::string& op = type_string();  // NgraCopyH2D -> "h2d"
    kind_ = op.substr(op.size() - 3);
    for (char& c : kind_) c = static_cast<char>(std::tolower(c));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, input.shape(), &output));
    if (input.dtype() == tensorflow::DT_STRING) {
      // Strings own heap memory: copy element-wise.
      const auto in = input.flat<tstring>();
      auto out = output->flat<tstring>();
      int64_t bytes = 0;
      for (int64_t i = 0; i < in.size(); ++i) {
        out(i) = in(i);
        bytes += in(i).size();
      }
      CopyCounters::Get().Add(kind_, ctx->device()->name(), bytes);
      return;
    }
    OP_REQUIRES(ctx, tensorflow::DataTypeCanUseMemcpy(input.dtype()),
                InvalidArgument("input of dtype ", tensorflow::DataTypeString(input.dtype()),
                                " cannot be copied as bytes"));
    const auto src = input.tensor_data();
    char* dst = const_cast<char*>(output->tensor_data().data());
    const int64_t bytes = static_cast<int64_t>(src.size());
    // A large copy is split over the pool: one core does not saturate memory.
    constexpr int64_t kBlock = 1 << 22;
    const int64_t blocks = (bytes + kBlock - 1) / kBlock;
    CpuParallel(ctx)(blocks, [&](int64_t first, int64_t last) {
      const int64_t begin = first * kBlock;
      const int64_t end = std::min(bytes, last * kBlock);
      std::memcpy(dst + begin, src.data() + begin, end - begin);
    });
    CopyCounters::Get().Add(kind_, ctx->device()->name(), bytes);
  }

 private:
  std::string kind_;
};

class CopyStatsOp : public OpKernel {
 public:
  explicit CopyStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& reset = ctx->input(0);
    OP_REQUIRES(ctx, reset.dims() == 0,
                InvalidArgument("reset must be a scalar bool, got shape ", ShapeOf(reset)));
    const auto counts = CopyCounters::Get().Snapshot(reset.scalar<bool>()());
    const int64_t n = static_cast<int64_t>(counts.size());
    Tensor *kinds = nullptr, *devices = nullptr, *bytes = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &kinds));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n}), &devices));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n}), &bytes));
    int64_t i = 0;
    for (const auto& [key, value] : counts) {
      kinds->flat<tstring>()(i) = key.first;
      devices->flat<tstring>()(i) = key.second;
      bytes->flat<int64_t>()(i) = value;
      ++i;
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("NgraCopyH2D").Device(DEVICE_CPU), CopyOp);
REGISTER_KERNEL_BUILDER(Name("NgraCopyD2H").Device(DEVICE_CPU), CopyOp);
REGISTER_KERNEL_BUILDER(Name("NgraCopyD2D").Device(DEVICE_CPU), CopyOp);
REGISTER_KERNEL_BUILDER(Name("NgraCopyStats").Device(DEVICE_CPU), CopyStatsOp);

}  // namespace ngra
