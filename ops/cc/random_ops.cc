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
// NgraDropout: tf.nn.experimental.stateless_dropout (keras.random.dropout) of a
// whole tensor in one pass, keeping no mask: its gradient is the same op on
// the upstream gradient. TensorFlow's takes several passes (uniforms, compare,
// scale, select) and keeps the mask for the backward.
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
#include <cstring>
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

// The inputs every op here starts with: key and counter vectors (StatelessRandomGetKeyCounter's), and from the
// dropout ops rate and scale scalars (inputs 3 and 4).
absl::Status CheckSeedInputs(InferenceContext* c, bool rate_and_scale) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
  if (rate_and_scale) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 0, &unused));
  }
  return absl::OkStatus();
}

REGISTER_OP("NgraUniformAt")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Input("positions: int64")
    .Output("output: dtype")
    .Attr("dtype: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(CheckSeedInputs(c, false));
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

// Philox for many groups at once (any groups, in vector lanes): TensorFlow's generator draws one group at a time.
// The rounds and constants are PhiloxRandom's (philox_random.h); each group's result is what PhiloxRandom(base)
// skipped to that group returns (tests compare with tf.random.stateless_uniform). A lane holds one 32-bit word in
// 64 bits, so that the 32 x 32 -> 64-bit products are one vector multiply; kPhiloxVectors vectors go through the
// rounds together so that the multiplies' latency overlaps (a 10-round chain alone leaves the core idle).
#if defined(__AVX512F__)
constexpr int kPhiloxVectorBytes = 64;
#else
constexpr int kPhiloxVectorBytes = 32;
#endif
typedef uint64_t PhiloxWords __attribute__((vector_size(kPhiloxVectorBytes)));
typedef uint32_t PhiloxWords32 __attribute__((vector_size(kPhiloxVectorBytes / 2)));
typedef uint64_t PhiloxPairs __attribute__((vector_size(kPhiloxVectorBytes / 2)));  // two words of a group
constexpr int kPhiloxWidth = kPhiloxVectorBytes / 8;  // groups per vector
constexpr int kPhiloxVectors = 4;
constexpr int kPhiloxLanes = kPhiloxWidth * kPhiloxVectors;  // groups per call

// Four vectors of word i of each group into the groups' [group][4] layout, through pairs (words 0-1 and 2-3).
inline void PhiloxStore(const PhiloxWords& w0, const PhiloxWords& w1, const PhiloxWords& w2, const PhiloxWords& w3,
                        int n, PhiloxRandom::ResultType* out) {
  const PhiloxWords32 a = __builtin_convertvector(w0, PhiloxWords32), b = __builtin_convertvector(w1, PhiloxWords32);
  const PhiloxWords32 c = __builtin_convertvector(w2, PhiloxWords32), d = __builtin_convertvector(w3, PhiloxWords32);
#if defined(__AVX512F__)
  const auto ab_lo = (PhiloxPairs)__builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
  const auto ab_hi = (PhiloxPairs)__builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
  const auto cd_lo = (PhiloxPairs)__builtin_shufflevector(c, d, 0, 8, 1, 9, 2, 10, 3, 11);
  const auto cd_hi = (PhiloxPairs)__builtin_shufflevector(c, d, 4, 12, 5, 13, 6, 14, 7, 15);
  const PhiloxPairs groups[4] = {__builtin_shufflevector(ab_lo, cd_lo, 0, 4, 1, 5),
                                 __builtin_shufflevector(ab_lo, cd_lo, 2, 6, 3, 7),
                                 __builtin_shufflevector(ab_hi, cd_hi, 0, 4, 1, 5),
                                 __builtin_shufflevector(ab_hi, cd_hi, 2, 6, 3, 7)};
#else
  const auto ab_lo = (PhiloxPairs)__builtin_shufflevector(a, b, 0, 4, 1, 5);
  const auto ab_hi = (PhiloxPairs)__builtin_shufflevector(a, b, 2, 6, 3, 7);
  const auto cd_lo = (PhiloxPairs)__builtin_shufflevector(c, d, 0, 4, 1, 5);
  const auto cd_hi = (PhiloxPairs)__builtin_shufflevector(c, d, 2, 6, 3, 7);
  const PhiloxPairs groups[4] = {__builtin_shufflevector(ab_lo, cd_lo, 0, 2), __builtin_shufflevector(ab_lo, cd_lo, 1, 3),
                                 __builtin_shufflevector(ab_hi, cd_hi, 0, 2), __builtin_shufflevector(ab_hi, cd_hi, 1, 3)};
#endif
  static_assert(sizeof(groups) == kPhiloxWidth * sizeof(PhiloxRandom::ResultType), "four words per group");
  if (n == kPhiloxWidth) {
    std::memcpy(out, groups, sizeof(groups));  // (a constant size: stores, not a call)
  } else {
    std::memcpy(out, groups, n * sizeof(PhiloxRandom::ResultType));
  }
}

void PhiloxGroups(const PhiloxRandom& base, const uint64_t* groups, int n, PhiloxRandom::ResultType* out) {
  constexpr uint64_t kLow = 0xFFFFFFFFu;
  const auto& counter = base.counter();
  PhiloxWords c0[kPhiloxVectors], c1[kPhiloxVectors], c2[kPhiloxVectors], c3[kPhiloxVectors];
  for (int v = 0; v < kPhiloxVectors; ++v) {  // counter + group, with the 128-bit carries (as Skip)
    PhiloxWords group = {};
    for (int j = 0; j < kPhiloxWidth && v * kPhiloxWidth + j < n; ++j) group[j] = groups[v * kPhiloxWidth + j];
    const PhiloxWords low = (group & kLow) + counter[0];
    const PhiloxWords next = (group >> 32) + (low >> 32) + counter[1];
    const PhiloxWords high = (next >> 32) + counter[2];
    c0[v] = low & kLow;
    c1[v] = next & kLow;
    c2[v] = high & kLow;
    c3[v] = ((high >> 32) + counter[3]) & kLow;
  }
  uint64_t k0 = base.key()[0], k1 = base.key()[1];
  for (int round = 0; round < 10; ++round) {
    for (int v = 0; v < kPhiloxVectors; ++v) {
      const PhiloxWords p0 = c0[v] * 0xD2511F53u;
      const PhiloxWords p1 = c2[v] * 0xCD9E8D57u;
      c0[v] = (p1 >> 32) ^ c1[v] ^ k0;
      c2[v] = (p0 >> 32) ^ c3[v] ^ k1;
      c1[v] = p1 & kLow;
      c3[v] = p0 & kLow;
    }
    k0 = (k0 + 0x9E3779B9u) & kLow;
    k1 = (k1 + 0xBB67AE85u) & kLow;
  }
  for (int v = 0; v < kPhiloxVectors && v * kPhiloxWidth < n; ++v) {
    PhiloxStore(c0[v], c1[v], c2[v], c3[v], std::min(kPhiloxWidth, n - v * kPhiloxWidth), out + v * kPhiloxWidth);
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

// Dropout over runs of flat positions: out[k] = x[k] * scale where stateless_uniform at the run's position k is
// >= rate, else 0, as tf.nn.experimental.stateless_dropout computes it (tf.where(uniform >= rate, x * scale, 0));
// with no x, the multiplier itself (scale or 0). A run is a row of a [*, width] tensor at its id, or a stretch of
// a whole tensor. Runs are taken a batch at a time: their groups listed, drawn in lanes, made uniforms by
// TensorFlow's distribution, then each run's entries selected from its uniforms in one vectorised loop.
template <typename T>
class RunDropper {
 public:
  RunDropper(const PhiloxRandom& base, T rate, T scale) : base_(base), rate_(rate), scale_(scale) {}

  // Runs [begin, end): run r covers flat positions first(r) + [0, length(r)), read from x + offset(r) (x may be
  // null) and written to out + offset(r).
  template <typename First, typename Length, typename Offset>
  void Drop(int64_t begin, int64_t end, First first, Length length, Offset offset, const T* x, T* out) {
    constexpr int64_t kBatchGroups = 1024;  // ~16 KB of drawn groups and of uniforms: stays in L1/L2
    for (int64_t r = begin; r < end;) {
      const int64_t batch = r;
      int64_t count = 0;
      start_.clear();
      for (; r < end && (r == batch || count < kBatchGroups); ++r) {
        start_.push_back(count);
        const uint64_t p = first(r), n = length(r);
        if (n == 0) continue;
        const uint64_t g0 = p / kGroup, g1 = (p + n - 1) / kGroup + 1;
        if (groups_.size() < count + g1 - g0) groups_.resize(2 * (count + g1 - g0));
        for (uint64_t g = g0; g < g1; ++g) groups_[count++] = g;
      }
      Draw(count);
      for (int64_t q = batch; q < r; ++q) {
        const int64_t n = length(q);
        if (n == 0) continue;
        const T* u = uniforms_.data() + start_[q - batch] * kGroup + first(q) % kGroup;
        T* o = out + offset(q);
        const T keep_from = rate_, kept = scale_;  // copies: through `this`, each store would reload them
        if (x == nullptr) {
          for (int64_t k = 0; k < n; ++k) o[k] = u[k] >= keep_from ? kept : T(0);
        } else {
          const T* in = x + offset(q);
          for (int64_t k = 0; k < n; ++k) o[k] = u[k] >= keep_from ? in[k] * kept : T(0);
        }
      }
    }
  }

 private:
  using Uniform = ::tensorflow::random::UniformDistribution<DrawnGroup, T>;

 public:
  static constexpr int64_t kGroup = Uniform::kResultElementCount;  // values per drawn group

 private:

  void Draw(size_t count) {
    if (drawn_.size() < count) {
      drawn_.resize(count);
      uniforms_.resize(count * kGroup);
    }
    for (size_t g = 0; g < count; g += kPhiloxLanes) {
      PhiloxGroups(base_, groups_.data() + g, static_cast<int>(std::min<size_t>(kPhiloxLanes, count - g)),
                   drawn_.data() + g);
    }
    for (size_t g = 0; g < count; ++g) {
      DrawnGroup group{drawn_[g]};
      const typename Uniform::ResultType values = Uniform()(&group);
      for (int64_t j = 0; j < kGroup; ++j) uniforms_[g * kGroup + j] = values[j];
    }
  }

  const PhiloxRandom base_;
  const T rate_, scale_;
  std::vector<uint64_t> groups_;
  std::vector<int64_t> start_;
  std::vector<PhiloxRandom::ResultType> drawn_;
  std::vector<T> uniforms_;
};

// Dropout of flat positions [0, size): out = x * scale where kept, else 0 (with no x, the multiplier itself), in
// stretches of `stretch` positions (whole groups, so that no group is drawn twice).
template <typename T>
void DropFlat(OpKernelContext* ctx, const PhiloxRandom& base, T rate, T scale, int64_t size, const T* x, T* out) {
  const int64_t stretch = 4096, stretches = (size + stretch - 1) / stretch;
  ParallelRange(ctx, stretches, [&](int64_t begin, int64_t end) {
    RunDropper<T>(base, rate, scale)
        .Drop(
            begin, end, [&](int64_t r) { return static_cast<uint64_t>(r * stretch); },
            [&](int64_t r) { return std::min(stretch, size - r * stretch); }, [&](int64_t r) { return r * stretch; },
            x, out);
  }, stretch);
}

// rate and scale (inputs 3 and 4), as stateless_dropout makes them in the values' dtype.
template <typename T>
void RateAndScale(OpKernelContext* ctx, T* rate, T* scale) {
  *rate = ctx->input(3).scalar<T>()();
  *scale = ctx->input(4).scalar<T>()();
}

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
      TF_RETURN_IF_ERROR(CheckSeedInputs(c, true));
      ShapeHandle ids;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &ids));
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
    T rate, scale;
    RateAndScale(ctx, &rate, &scale);
    const int64_t n = ids.size(), width = width_;
    const int64_t largest = (std::numeric_limits<int64_t>::max() - width) / width;  // ids * width fits below it
    int64_t top = -1;
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, ids(i) >= 0 && ids(i) <= largest,
                  InvalidArgument("ids must be >= 0 and ids * width must fit in int64, got ids[", i, "] = ", ids(i),
                                  " with width ", width));
      top = std::max<int64_t>(top, ids(i));
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({n, width}), &output));
    T* out = output->flat<T>().data();
    // Rows narrower than a group whose ids cover their range densely (a chunk's edges: a permutation of them)
    // would draw each group once per row, up to kGroup times: draw the range once instead, in stretches of whole
    // groups, and copy each row's entries from it. The same values either way.
    const int64_t range = (top + 1) * width;
    if (width < RunDropper<T>::kGroup && n > 0 && range <= 2 * n * width) {
      Tensor drawn;
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DataTypeToEnum<T>::value, {range}, &drawn));
      T* all = drawn.flat<T>().data();
      DropFlat<T>(ctx, base, rate, scale, range, nullptr, all);
      ParallelRange(ctx, n, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) std::copy_n(all + ids(r) * width, width, out + r * width);
      }, width);
      return;
    }
    ParallelRange(ctx, n, [&](int64_t begin, int64_t end) {
      RunDropper<T>(base, rate, scale)
          .Drop(
              begin, end, [&](int64_t r) { return static_cast<uint64_t>(ids(r)) * width; },
              [&](int64_t) { return width; }, [&](int64_t r) { return r * width; }, nullptr, out);
    }, width);
  }

 private:
  int64_t width_ = 1;
};

REGISTER_OP("NgraDropout")
    .Input("key: uint64")
    .Input("counter: uint64")
    .Input("x: dtype")
    .Input("rate: dtype")
    .Input("scale: dtype")
    .Output("y: dtype")
    .Attr("dtype: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(CheckSeedInputs(c, true));
      c->set_output(0, c->input(2));
      return absl::OkStatus();
    })
    .Doc(R"doc(
y = tf.nn.experimental.stateless_dropout(x, rate, seed), bit for bit, in one
pass with no mask kept: the same op on dy is its gradient. rate and scale
(1 / (1 - rate)) made in dtype, as it makes them. key [1] and counter [2]:
StatelessRandomGetKeyCounter(seed).
)doc");

template <typename T>
class DropoutOp : public OpKernel {
 public:
  explicit DropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    PhiloxRandom base;
    if (!PhiloxFromInputs(ctx, &base)) return;
    T rate, scale;
    RateAndScale(ctx, &rate, &scale);
    const Tensor& x = ctx->input(2);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &output));
    DropFlat<T>(ctx, base, rate, scale, x.NumElements(), x.flat<T>().data(), output->flat<T>().data());
  }
};

#define REGISTER(T)                                                                                         \
  REGISTER_KERNEL_BUILDER(Name("NgraUniformAt").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"),   \
                          UniformAtOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(Name("NgraDropoutMask").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          DropoutMaskOp<T>);                                                                  \
  REGISTER_KERNEL_BUILDER(Name("NgraDropout").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("dtype"),     \
                          DropoutOp<T>)
REGISTER(Eigen::half);
REGISTER(Eigen::bfloat16);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace ngra
