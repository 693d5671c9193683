// NgraUniformAt: the values tf.random.stateless_uniform puts at some flat
// positions of a shape, without drawing the others. Dropout on sparse rows
// (ngra_tf.layers.Dropout) draws at the stored entries only and still drops
// exactly what dense dropout with the same seed drops there, so training
// does not change with how the features are held.
//
// NgraDropoutMask: the multiplier keras.random.dropout puts on rows `ids` of
// a [*, width] tensor (scale where kept, 0 where dropped), in one pass: the
// mask of edge.dropout, drawn at each edge's id, recomputed in every pass
// rather than kept.
//
// Both are TensorFlow's own generator, not a copy of it: StatelessRandomUniformV2
// (Philox, as "auto_select" picks on every device) fills a tensor in groups,
// group g being UniformDistribution(Philox(counter + g, key)), so element p
// is lane p % n of group p / n, n values to a group (4 for float32, 2 for
// float64). The key and counter come from StatelessRandomGetKeyCounter, as
// stateless_uniform's do.
#include <atomic>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <vector>

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
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      c->set_output(0, c->input(2));
      return absl::OkStatus();
    })
    .Doc(R"doc(
output[...]: the value tf.random.stateless_uniform(shape, seed, dtype) has at
flat position positions[...] of any shape that holds it (it does not depend on
the shape); output has the positions' shape. key [1] and counter [2]:
StatelessRandomGetKeyCounter(seed).
)doc");

// The generator StatelessRandomUniformV2 starts from, made from an op's key (input 0) and counter (input 1):
// false (the error set) when they are not StatelessRandomGetKeyCounter's shapes.
bool PhiloxFromInputs(OpKernelContext* ctx, PhiloxRandom* base) {
  const Tensor& key = ctx->input(0);
  const Tensor& counter = ctx->input(1);
  if (key.NumElements() != 1) {
    ctx->CtxFailure(InvalidArgument("key must hold 1 uint64 (StatelessRandomGetKeyCounter's), got shape ",
                                    ShapeOf(key)));
    return false;
  }
  if (counter.NumElements() != 2) {
    ctx->CtxFailure(InvalidArgument("counter must hold 2 uint64 (StatelessRandomGetKeyCounter's), got shape ",
                                    ShapeOf(counter)));
    return false;
  }
  *base = ::tensorflow::GetPhiloxRandomFromCounterKeyMem(counter.flat<::tensorflow::uint64>().data(),
                                                         key.flat<::tensorflow::uint64>().data());
  return true;
}

// stateless_uniform's value at flat position p: group p / n of the generator, lane p % n. A run of positions in
// one group (sorted positions, a row's features) draws it once.
template <typename T>
class UniformDraws {
 public:
  explicit UniformDraws(const PhiloxRandom& base) : base_(base) {}

  T At(uint64_t p) {
    if (p / kGroup != group_) {
      group_ = p / kGroup;
      PhiloxRandom generator = base_;
      generator.Skip(group_);
      values_ = uniform_(&generator);
    }
    return values_[p % kGroup];
  }

 private:
  using Uniform = ::tensorflow::random::UniformDistribution<PhiloxRandom, T>;
  static constexpr uint64_t kGroup = Uniform::kResultElementCount;
  const PhiloxRandom base_;
  Uniform uniform_;
  typename Uniform::ResultType values_;
  uint64_t group_ = ~uint64_t{0};
};

// Philox for many groups at once (any groups, in lanes), so that the rounds vectorise: TensorFlow's generator
// draws one group at a time. The rounds and constants are PhiloxRandom's (philox_random.h); each lane's result
// is what PhiloxRandom(base) skipped to that group returns (tests compare with tf.random.stateless_uniform).
constexpr int kPhiloxLanes = 16;

void PhiloxGroups(const PhiloxRandom& base, const uint64_t* groups, int n, PhiloxRandom::ResultType* out) {
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  const auto& counter = base.counter();
  for (int j = 0; j < kPhiloxLanes; ++j) {  // counter + group, with the 128-bit carries (as Skip)
    const uint64_t group = j < n ? groups[j] : 0;
    const uint64_t low = uint64_t{counter[0]} + static_cast<uint32_t>(group);
    const uint64_t next = uint64_t{counter[1]} + (group >> 32) + (low >> 32);
    const uint64_t high = uint64_t{counter[2]} + (next >> 32);
    c0[j] = static_cast<uint32_t>(low);
    c1[j] = static_cast<uint32_t>(next);
    c2[j] = static_cast<uint32_t>(high);
    c3[j] = counter[3] + static_cast<uint32_t>(high >> 32);
  }
  uint32_t k0 = base.key()[0], k1 = base.key()[1];
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kPhiloxLanes; ++j) {
      const uint64_t p0 = uint64_t{0xD2511F53u} * c0[j];
      const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2[j];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = static_cast<uint32_t>(p1);
      c3[j] = static_cast<uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int j = 0; j < n; ++j) {
    out[j][0] = c0[j];
    out[j][1] = c1[j];
    out[j][2] = c2[j];
    out[j][3] = c3[j];
  }
}

// A generator that returns one group drawn already: TensorFlow's distributions then turn it into values.
struct DrawnGroup {
  using ResultType = PhiloxRandom::ResultType;
  using ResultElementType = PhiloxRandom::ResultElementType;
  static constexpr int kResultElementCount = PhiloxRandom::kResultElementCount;
  ResultType drawn;
  ResultType operator()() const { return drawn; }
};

template <typename T>
class UniformAtOp : public OpKernel {
 public:
  explicit UniformAtOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PhiloxRandom base;
    if (!PhiloxFromInputs(ctx, &base)) return;
    const Tensor& positions = ctx->input(2);
    const auto p = positions.flat<int64_t>();
    const int64_t n = p.size();
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, positions.shape(), &output));
    auto out = output->flat<T>();
    std::atomic<int64_t> negative{-1};
    ParallelRange(ctx, n, [&](int64_t begin, int64_t end) {
      UniformDraws<T> draws(base);
      for (int64_t i = begin; i < end; ++i) {
        if (p(i) < 0) {
          negative.store(i);
          continue;
        }
        out(i) = draws.At(static_cast<uint64_t>(p(i)));
      }
    });
    const int64_t bad = negative.load();
    OP_REQUIRES(ctx, bad < 0, InvalidArgument("positions must be >= 0, got positions[", bad, "] = ", p(bad)));
  }
};

REGISTER_OP("NgraDropoutMask")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Input("ids: int64")
    .Input("rate: dtype")
    .Input("scale: dtype")
    .Output("mask: dtype")
    .Attr("width: int >= 1")
    .Attr("dtype: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused, ids;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &ids));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &unused));
      int64_t width;
      TF_RETURN_IF_ERROR(c->GetAttr("width", &width));
      c->set_output(0, c->Matrix(c->Dim(ids, 0), width));
      return absl::OkStatus();
    })
    .Doc(R"doc(
mask[i, f] = scale where stateless_uniform(shape, seed, dtype) at flat position
ids[i] * width + f is >= rate, else 0: what tf.nn.experimental.stateless_dropout
multiplies row ids[i] of a [*, width] tensor by (rate and scale made in dtype,
as it makes them). key [1] and counter [2]: StatelessRandomGetKeyCounter(seed).
)doc");

template <typename T>
class DropoutMaskOp : public OpKernel {
 public:
  explicit DropoutMaskOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("width", &width_));
  }

  void Compute(OpKernelContext* ctx) override {
    PhiloxRandom base;
    if (!PhiloxFromInputs(ctx, &base)) return;
    const auto ids = ctx->input(2).flat<int64_t>();
    const T rate = ctx->input(3).scalar<T>()(), scale = ctx->input(4).scalar<T>()();
    const int64_t n = ids.size(), width = width_;
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({n, width}), &output));
    T* out = output->flat<T>().data();
    const int64_t largest = (std::numeric_limits<int64_t>::max() - width) / width;  // ids * width fits below it
    using Uniform = ::tensorflow::random::UniformDistribution<DrawnGroup, T>;
    constexpr int64_t kGroup = Uniform::kResultElementCount;
    std::atomic<int64_t> negative{-1};
    ParallelRange(ctx, n, [&](int64_t begin, int64_t end) {
      // Rows a batch at a time: their groups listed, drawn in lanes, then each row's entries from its groups.
      // (rate and scale copied: read through the closure, every store into the rows would reload them)
      const T keep_from = rate, kept = scale;
      constexpr int64_t kRows = 64;
      std::vector<uint64_t> groups;
      std::vector<PhiloxRandom::ResultType> drawn;
      std::vector<int64_t> start(kRows + 1);
      for (int64_t batch = begin; batch < end; batch += kRows) {
        const int64_t rows = std::min(kRows, end - batch);
        groups.clear();
        for (int64_t r = 0; r < rows; ++r) {
          start[r] = static_cast<int64_t>(groups.size());
          const int64_t id = ids(batch + r);
          if (id < 0 || id > largest) {
            negative.store(batch + r);
            continue;
          }
          const uint64_t first = static_cast<uint64_t>(id) * width;
          for (uint64_t g = first / kGroup; g <= (first + width - 1) / kGroup; ++g) groups.push_back(g);
        }
        start[rows] = static_cast<int64_t>(groups.size());
        drawn.resize(groups.size());
        for (size_t g = 0; g < groups.size(); g += kPhiloxLanes) {
          PhiloxGroups(base, groups.data() + g, static_cast<int>(std::min<size_t>(kPhiloxLanes, groups.size() - g)),
                       drawn.data() + g);
        }
        for (int64_t r = 0; r < rows; ++r) {
          if (start[r] == start[r + 1]) continue;  // a bad id
          const uint64_t first = static_cast<uint64_t>(ids(batch + r)) * width;
          T* row = out + (batch + r) * width;
          int64_t f = 0;
          for (int64_t g = start[r]; g < start[r + 1]; ++g) {
            DrawnGroup group{drawn[g]};
            const typename Uniform::ResultType values = Uniform()(&group);
            for (uint64_t p = std::max(groups[g] * kGroup, first); p < (groups[g] + 1) * kGroup && f < width;
                 ++p, ++f) {
              row[f] = values[p % kGroup] >= keep_from ? kept : T(0);
            }
          }
        }
      }
    });
    const int64_t bad = negative.load();
    OP_REQUIRES(ctx, bad < 0, InvalidArgument("ids must be >= 0 and ids * width must fit in int64, got ids[", bad,
                                              "] = ", ids(bad), " with width ", width));
  }

 private:
  int64_t width_ = 1;
};

#define REGISTER(T)                                                                                         \
  REGISTER_KERNEL_BUILDER(Name("NgraUniformAt").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"),   \
                          UniformAtOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(Name("NgraDropoutMask").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          DropoutMaskOp<T>)
REGISTER(Eigen::half);
REGISTER(Eigen::bfloat16);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace ngra
