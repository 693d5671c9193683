// A cache of tensors in host memory that outlives the steps that fill it: the
// chunks and rows a plan (ngra_tf.runtime.plan.cache) says will be read again
// are inserted once and looked up later, without a copy (a hit returns the
// tensor that was inserted, sharing its buffer), until the plan erases them.
//
// Caches are named by an int64 the runtime picks (ngra_tf.ops.cache) and live
// in a process-wide table until NgraCacheClear. NgraCacheLookup is stateless
// for the same reason as NgraReadFile (ops/cc/file_ops.cc): a loop's next step
// looks up while this one computes, and `after` (the token of the inserts a
// lookup must follow) is its only ordering; it also refuses to be constant
// folded. Inserts and erasures are stateful and ordered by their own `after`.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ops/cc/cache.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"

namespace ngra {

namespace errors = ::tensorflow::errors;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

absl::Status Scalars(InferenceContext* c, std::initializer_list<int> inputs) {
  ShapeHandle unused;
  for (int i : inputs) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("NgraCacheLookup")
    .Input("cache: int64")
    .Input("key: int64")
    .Input("after: int64")
    .Output("found: bool")
    .Output("value: dtype")
    .Attr("dtype: type")
    // Not SetIsStateful(): see the top of this file.
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Scalars(c, {0, 1, 2}));
      c->set_output(0, c->Scalar());
      c->set_output(1, c->UnknownShape());
      return absl::OkStatus();
    })
    .Doc(R"doc(
The tensor cached under `key` (found: true), or an empty vector (found: false).
A hit shares the inserted tensor's buffer. `after` is not read: the lookup runs
once it is computed (pass the tokens of the inserts it must follow).
)doc");

REGISTER_OP("NgraCacheInsert")
    .Input("cache: int64")
    .Input("key: int64")
    .Input("value: T")
    .Input("after: int64")
    .Output("token: int64")
    .Attr("T: type")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Scalars(c, {0, 1, 3}));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Caches `value` under `key` (replacing what was there); token = after + 1, for
the lookups and erasures that must follow it.
)doc");

REGISTER_OP("NgraCacheErase")
    .Input("cache: int64")
    .Input("keys: int64")
    .Input("after: int64")
    .Output("token: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Scalars(c, {0, 2}));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc("Drops the entries of `keys` (negative keys and absent ones are skipped); token = after + 1.");

REGISTER_OP("NgraCacheStats")
    .Input("cache: int64")
    .Input("reset: bool")
    .Output("entries: int64")
    .Output("bytes: int64")
    .Output("hits: int64")
    .Output("misses: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Scalars(c, {0, 1}));
      for (int i = 0; i < 4; ++i) c->set_output(i, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
The cache's entries and bytes now, and its lookups that hit and missed since
the last reset (reset: zero those counts).
)doc");

REGISTER_OP("NgraCacheClear")
    .Input("cache: int64")
    .Output("entries: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(Scalars(c, {0}));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc("Drops the cache and every entry in it; entries: how many there were.");

namespace {

int64_t ScalarOf(OpKernelContext* ctx, int index) { return ctx->input(index).scalar<int64_t>()(); }

void Token(OpKernelContext* ctx, int after) {
  Tensor* token = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &token));
  token->scalar<int64_t>()() = ScalarOf(ctx, after) + 1;
}

}  // namespace

class CacheLookupOp : public OpKernel {
 public:
  explicit CacheLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    // As NgraReadFile: folded when the graph is optimised, a lookup would answer with the cache as it was then.
    OP_REQUIRES(ctx, ctx->step_container() != nullptr,
                errors::Unavailable("NgraCacheLookup looks up when the graph runs, not when it is optimised"));
    Tensor value;
    const bool found = Caches::Get().Find(ScalarOf(ctx, 0), /*create=*/true)->Lookup(ScalarOf(ctx, 1), &value);
    Tensor* hit = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &hit));
    hit->scalar<bool>()() = found;
    if (!found) {
      Tensor* empty = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({0}), &empty));
      return;
    }
    OP_REQUIRES(ctx, value.dtype() == output_type(1),
                errors::InvalidArgument("cache entry ", ScalarOf(ctx, 1), " holds ",
                                        tensorflow::DataTypeString(value.dtype()), ", looked up as ",
                                        tensorflow::DataTypeString(output_type(1))));
    ctx->set_output(1, value);
  }
};

class CacheInsertOp : public OpKernel {
 public:
  explicit CacheInsertOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    Caches::Get().Find(ScalarOf(ctx, 0), /*create=*/true)->Insert(ScalarOf(ctx, 1), ctx->input(2));
    Token(ctx, 3);
  }
};

class CacheEraseOp : public OpKernel {
 public:
  explicit CacheEraseOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const std::shared_ptr<Cache> cache = Caches::Get().Find(ScalarOf(ctx, 0), /*create=*/false);
    if (cache != nullptr) {
      const auto keys = ctx->input(1).vec<int64_t>();
      for (int64_t i = 0; i < keys.size(); ++i) {
        if (keys(i) >= 0) cache->Erase(keys(i));
      }
    }
    Token(ctx, 2);
  }
};

class CacheStatsOp : public OpKernel {
 public:
  explicit CacheStatsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    int64_t stats[4] = {0, 0, 0, 0};
    const std::shared_ptr<Cache> cache = Caches::Get().Find(ScalarOf(ctx, 0), /*create=*/false);
    if (cache != nullptr) cache->Stats(ctx->input(1).scalar<bool>()(), stats);
    for (int i = 0; i < 4; ++i) {
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, TensorShape({}), &out));
      out->scalar<int64_t>()() = stats[i];
    }
  }
};

class CacheClearOp : public OpKernel {
 public:
  explicit CacheClearOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    Tensor* entries = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &entries));
    entries->scalar<int64_t>()() = Caches::Get().Drop(ScalarOf(ctx, 0));
  }
};

REGISTER_KERNEL_BUILDER(Name("NgraCacheLookup").Device(::tensorflow::DEVICE_CPU), CacheLookupOp);
REGISTER_KERNEL_BUILDER(Name("NgraCacheInsert").Device(::tensorflow::DEVICE_CPU), CacheInsertOp);
REGISTER_KERNEL_BUILDER(Name("NgraCacheErase").Device(::tensorflow::DEVICE_CPU), CacheEraseOp);
REGISTER_KERNEL_BUILDER(Name("NgraCacheStats").Device(::tensorflow::DEVICE_CPU), CacheStatsOp);
REGISTER_KERNEL_BUILDER(Name("NgraCacheClear").Device(::tensorflow::DEVICE_CPU), CacheClearOp);

}  // namespace ngra
