// NgraUniformAt: the values tf.random.stateless_uniform puts at some flat
// positions of a shape, without drawing the others. Dropout on sparse rows
// (ngra_tf.layers.Dropout) draws at the stored entries only and still drops
// exactly what dense dropout with the same seed drops there, so training
// does not change with how the features are held.
//
// It is TensorFlow's own generator, not a copy of it: StatelessRandomUniformV2
// (Philox, as "auto_select" picks on every device) fills a tensor in groups,
// group g being UniformDistribution(Philox(counter + g, key)), so element p
// is lane p % n of group p / n, n values to a group (4 for float32, 2 for
// float64). The key and counter come from StatelessRandomGetKeyCounter, as
// stateless_uniform's do.
#include <atomic>
#include <cstdint>

#include "ops/cc/op_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/kernels/random_ops_util.h"
#include "tensorflow/core/lib/random/philox_random.h"
#include "tensorflow/core/lib/random/random_distributions.h"

namespace ngra {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
using ::tensorflow::random::PhiloxRandom;

REGISTER_OP("NgraUniformAt")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Input("positions: int64")
    .Output("output: dtype")
    .Attr("dtype: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused, positions;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &positions));
      c->set_output(0, positions);
      return absl::OkStatus();
    })
    .Doc(R"doc(
output[i]: the value tf.random.stateless_uniform(shape, seed, dtype) has at flat
position positions[i] of any shape that holds it (it does not depend on the
shape). key [1] and counter [2]: StatelessRandomGetKeyCounter(seed).
)doc");

template <typename T>
class UniformAtOp : public OpKernel {
 public:
  explicit UniformAtOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& key = ctx->input(0);
    const Tensor& counter = ctx->input(1);
    const Tensor& positions = ctx->input(2);
    OP_REQUIRES(ctx, key.NumElements() == 1,
                InvalidArgument("key must hold 1 uint64 (StatelessRandomGetKeyCounter's), got shape ", ShapeOf(key)));
    OP_REQUIRES(ctx, counter.NumElements() == 2,
                InvalidArgument("counter must hold 2 uint64 (StatelessRandomGetKeyCounter's), got shape ",
                                ShapeOf(counter)));
    const auto p = positions.flat<int64_t>();
    const int64_t n = p.size();
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &output));
    auto out = output->flat<T>();

    using Uniform = ::tensorflow::random::UniformDistribution<PhiloxRandom, T>;
    constexpr int64_t kGroup = Uniform::kResultElementCount;
    const PhiloxRandom base = ::tensorflow::GetPhiloxRandomFromCounterKeyMem(
        counter.flat<::tensorflow::uint64>().data(), key.flat<::tensorflow::uint64>().data());
    std::atomic<int64_t> negative{-1};
    ParallelRange(ctx, n, [&](int64_t begin, int64_t end) {
      Uniform uniform;
      typename Uniform::ResultType values;
      int64_t group = -1;  // the group `values` holds: sorted positions often share one
      for (int64_t i = begin; i < end; ++i) {
        if (p(i) < 0) {
          negative.store(i);
          continue;
        }
        if (p(i) / kGroup != group) {
          group = p(i) / kGroup;
          PhiloxRandom generator = base;
          generator.Skip(static_cast<uint64_t>(group));
          values = uniform(&generator);
        }
        out(i) = values[p(i) % kGroup];
      }
    });
    const int64_t bad = negative.load();
    OP_REQUIRES(ctx, bad < 0, InvalidArgument("positions must be >= 0, got positions[", bad, "] = ", p(bad)));
  }
};

#define REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("NgraUniformAt").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          UniformAtOp<T>)
REGISTER(Eigen::half);
REGISTER(Eigen::bfloat16);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace ngra
