// Reading and writing a byte range of a file as graph ops: a training loop
// compiled into a tf.function / tf.while_loop reads chunks of a graph stored
// as .npy files (and spills / reloads activation blocks) without a Python
// call per read, so TensorFlow's executor can overlap reads with compute.
//
// NgraReadFile is deliberately NOT stateful. TensorFlow chains the stateful
// ops of a while-loop body across iterations, so a stateful read could not
// start until the previous iteration's ops had finished; stateless, iteration
// k+1's read runs while iteration k computes (parallel_iterations >= 2). The
// price: nothing orders a read after a write of the same file but its
// `after` input, which callers pass the writes' results; and, stateless, it
// would be constant-folded (read once, when the graph is optimised) wherever
// its inputs are constants, which the kernel prevents (see
// ReadFileOp::Compute). NgraWriteFile is stateful (it always runs), and takes
// `after` too: being stateful alone does not order writes (see its doc).
//
// Both kernels run on the host (CPU only) with POSIX pread / pwrite.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <string>

#include "ops/cc/cache.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/errors.h"

namespace ngra {

namespace errors = ::tensorflow::errors;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// The plain numeric types, whose bytes are the values (little-endian here).
#define NGRA_FILE_TYPES \
  "{half, bfloat16, float, double, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool}"

REGISTER_OP("NgraReadFile")
    .Input("path: string")
    .Input("offset: int64")
    .Input("shape: int64")
    .Input("expected_size: int64")
    .Input("expected_mtime_ns: int64")
    .Input("expected_inode: int64")
    .Input("expected_ctime_ns: int64")
    .Input("after: int64")
    .Input("cache: int64")
    .Input("key: int64")
    .Input("keep: bool")
    .Output("output: dtype")
    .Attr("dtype: " NGRA_FILE_TYPES)
    // Not SetIsStateful(): see the top of this file.
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused, out;
      for (int i : {0, 1, 3, 4, 5, 6, 7, 8, 9, 10}) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
      // The shape input's value when known; else unknown dims, as many as it has.
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(2, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Reads prod(shape) values of dtype, stored as raw bytes, from the file at path
starting `offset` bytes from its beginning (e.g. a range of an .npy file's
data, after its header, or a spilled block). expected_size,
expected_mtime_ns, expected_inode and expected_ctime_ns (-1: unchecked) must
equal the file's size in bytes, its modification time in nanoseconds, its inode
number and its status-change time, to catch a file replaced since it was
verified (inode and ctime catch a same-size replacement that kept the mtime).
`after` is not read: the op runs once it is computed, so passing
the `written` output of the NgraWriteFile calls a read must follow orders it
after them (a data dependency, which unlike a control dependency survives
being captured into loop bodies). The op is stateless so that reads overlap
other work. With `cache` >= 0 (a cache of ngra_tf.ops.cache) the range is
first looked up there under `key` and, when found, returned without reading
(the cached tensor itself); a range read because it was not found is cached
under `key` when `keep`. (So a cached range is checked against its file only
when it is read.)
)doc");

REGISTER_OP("NgraWriteFile")
    .Input("path: string")
    .Input("offset: int64")
    .Input("value: T")
    .Input("after: int64")
    .Output("written: int64")
    .Attr("T: " NGRA_FILE_TYPES)
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Writes value's bytes into the file at path, starting `offset` bytes from its
beginning; creates the file (mode 0644) if absent and never truncates it, so
blocks of one file can be written at different offsets by different steps.
written is the number of bytes written. `after` is not read: the write runs
once it is computed, so passing the `written` outputs of earlier writes of
the same range orders this one after them. Being stateful does not: inside a
conditional in a loop that also touches a resource variable, TensorFlow
lowers a control dependency on an outer tensor to one that only guards
input-less nodes, and the write could overtake the write it follows.
)doc");

REGISTER_OP("NgraFileStats")
    .Input("reset: bool")
    .Output("read: int64")
    .Output("written: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 0, &unused));
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
The bytes NgraReadFile has read and NgraWriteFile has written in this process
since the last reset (reset: zero them after reading).
)doc");

#undef NGRA_FILE_TYPES

namespace {

// Bytes read and written by the file ops, process-wide (NgraFileStats).
std::atomic<int64_t> bytes_read{0}, bytes_written{0};

// A file descriptor closed on every path out of the kernel.
class Fd {
 public:
  // Opens path; error() is the errno of a failed open, or of a failed Close.
  Fd(const std::string& path, int flags, mode_t mode = 0)
      : fd_(::open(path.c_str(), flags, mode)), error_(fd_ < 0 ? errno : 0) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int error() const { return error_; }
  // Closes now; nonzero (the errno) when close fails (a delayed write error, say).
  int Close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) == 0) return 0;
    return error_ = errno;
  }

 private:
  int fd_;
  int error_;
};

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// The scalar input `index` of type T, named `name` in the error.
template <typename T>
absl::Status ScalarInput(OpKernelContext* ctx, int index, const char* name, T* value) {
  const Tensor& t = ctx->input(index);
  if (t.dims() != 0) {
    return errors::InvalidArgument(name, " must be a scalar, got shape ", t.shape().DebugString());
  }
  *value = t.scalar<T>()();
  return absl::OkStatus();
}

// path and offset, the first two inputs of both ops.
absl::Status PathAndOffset(OpKernelContext* ctx, std::string* path, int64_t* offset) {
  ::tensorflow::tstring p;
  TF_RETURN_IF_ERROR(ScalarInput<::tensorflow::tstring>(ctx, 0, "path", &p));
  *path = std::string(p);
  TF_RETURN_IF_ERROR(ScalarInput<int64_t>(ctx, 1, "offset", offset));
  if (*offset < 0) return errors::InvalidArgument("offset must be >= 0, got ", *offset, " (file ", *path, ")");
  return absl::OkStatus();
}

// errors::IOError(context, errno): "context; strerror", its code from errno -- except that EFBIG (a file size
// limit) and EOVERFLOW map to OUT_OF_RANGE, which Keras's fit takes for the end of its data and stops training
// without a word. Those are reported as a resource that ran out.
absl::Status FileError(const std::string& context, int error) {
  absl::Status status = errors::IOError(context, error);
  if (status.code() == absl::StatusCode::kOutOfRange) return errors::ResourceExhausted(status.message());
  return status;
}

// Whether [offset, offset + bytes) fits in an int64 (so in an off_t).
bool RangeFits(int64_t offset, int64_t bytes) {
  return bytes <= std::numeric_limits<int64_t>::max() - offset;
}

}  // namespace

class ReadFileOp : public OpKernel {
 public:
  explicit ReadFileOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    // Constant folding (the graph optimiser's and Grappler's) runs a
    // stateless op whose inputs are all constants once, when the graph is
    // optimised, and bakes its output into the graph: a read would return the
    // file as it was then, on every later call and ahead of the writes it is
    // ordered after. Those evaluations run without a step container, which
    // every real step has; refused, the folders leave the op in the graph.
    OP_REQUIRES(ctx, ctx->step_container() != nullptr,
                errors::Unavailable("NgraReadFile reads its file when the graph runs, not when it is optimised"));
    const int64_t cache_name = ctx->input(8).scalar<int64_t>()();
    const int64_t key = ctx->input(9).scalar<int64_t>()();
    std::shared_ptr<Cache> cache;
    if (cache_name >= 0) {
      cache = Caches::Get().Find(cache_name, /*create=*/true);
      Tensor cached;
      if (cache->Lookup(key, &cached)) {
        OP_REQUIRES(ctx, cached.dtype() == output_type(0),
                    errors::InvalidArgument("cache entry ", key, " holds ", tensorflow::DataTypeString(cached.dtype()),
                                            ", read as ", tensorflow::DataTypeString(output_type(0))));
        ctx->set_output(0, cached);
        return;
      }
    }
    std::string path;
    int64_t offset = 0, expected_size = -1, expected_mtime_ns = -1;
    OP_REQUIRES_OK(ctx, PathAndOffset(ctx, &path, &offset));
    OP_REQUIRES_OK(ctx, ScalarInput<int64_t>(ctx, 3, "expected_size", &expected_size));
    OP_REQUIRES_OK(ctx, ScalarInput<int64_t>(ctx, 4, "expected_mtime_ns", &expected_mtime_ns));
    int64_t expected_inode = -1, expected_ctime_ns = -1;
    OP_REQUIRES_OK(ctx, ScalarInput<int64_t>(ctx, 5, "expected_inode", &expected_inode));
    OP_REQUIRES_OK(ctx, ScalarInput<int64_t>(ctx, 6, "expected_ctime_ns", &expected_ctime_ns));

    const Tensor& shape_t = ctx->input(2);
    OP_REQUIRES(ctx, shape_t.dims() == 1,
                errors::InvalidArgument("shape must be a vector, got shape ", shape_t.shape().DebugString(),
                                        " (file ", path, ")"));
    const auto dims = shape_t.vec<int64_t>();
    for (int64_t i = 0; i < dims.size(); ++i) {
      OP_REQUIRES(ctx, dims(i) >= 0,
                  errors::InvalidArgument("shape[", i, "] = ", dims(i), " is negative (file ", path, ")"));
    }
    TensorShape shape;
    const absl::Status shape_status = tensorflow::TensorShapeUtils::MakeShape(dims.data(), dims.size(), &shape);
    OP_REQUIRES(ctx, shape_status.ok(), errors::InvalidArgument(shape_status.message(), " (file ", path, ")"));
    // The range is checked against the file before the output is allocated.
    const int64_t item = tensorflow::DataTypeSize(output_type(0));
    OP_REQUIRES(ctx, shape.num_elements() <= std::numeric_limits<int64_t>::max() / item,
                errors::InvalidArgument("shape ", shape.DebugString(), " has too many bytes (file ", path, ")"));
    const int64_t bytes = shape.num_elements() * item;
    OP_REQUIRES(ctx, RangeFits(offset, bytes),
                errors::InvalidArgument("offset ", offset, " + ", bytes, " bytes overflows (file ", path, ")"));

    // Opened, checked and ranged even when nothing is to be read, so that a
    // missing or changed file is always reported.
    Fd fd(path, O_RDONLY | O_CLOEXEC);
    OP_REQUIRES(ctx, fd.get() >= 0, FileError("cannot open " + path + " for reading", fd.error()));
    struct stat st;
    const int stat_error = ::fstat(fd.get(), &st) == 0 ? 0 : errno;
    OP_REQUIRES(ctx, stat_error == 0, FileError("cannot stat " + path, stat_error));
    OP_REQUIRES(ctx, !S_ISDIR(st.st_mode), errors::FailedPrecondition(path, " is a directory, not a file"));
    const int64_t size = static_cast<int64_t>(st.st_size);
    OP_REQUIRES(ctx, expected_size < 0 || size == expected_size,
                errors::DataLoss(path, ": the file has ", size, " bytes, expected ", expected_size,
                                 ": it was truncated or replaced"));
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    OP_REQUIRES(ctx, expected_mtime_ns < 0 || mtime_ns == expected_mtime_ns,
                errors::FailedPrecondition(path, " changed since it was verified: its mtime is ", mtime_ns,
                                           " ns, expected ", expected_mtime_ns));
    // The same path, size and mtime, yet another file (a copy that kept the mtime) or one rewritten in place.
    const int64_t inode = static_cast<int64_t>(st.st_ino);
    const int64_t ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    OP_REQUIRES(ctx, (expected_inode < 0 || inode == expected_inode) &&
                         (expected_ctime_ns < 0 || ctime_ns == expected_ctime_ns),
                errors::FailedPrecondition(path, " changed since it was verified: its inode and change time are ",
                                           inode, " and ", ctime_ns, " ns, expected ", expected_inode, " and ",
                                           expected_ctime_ns));
    OP_REQUIRES(ctx, offset + bytes <= size,
                errors::DataLoss("reading ", path, " needs bytes [", offset, ", ", offset + bytes,
                                 "), the file has ", size));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &output));
    char* data = const_cast<char*>(output->tensor_data().data());
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(fd.get(), data + done, static_cast<size_t>(bytes - done), offset + done);
      const int error = n < 0 ? errno : 0;
      if (error == EINTR) continue;
      OP_REQUIRES(ctx, n >= 0,
                  FileError("cannot read " + path + " at byte " + std::to_string(offset + done), error));
      // End of file before the range's end: the file shrank after fstat.
      OP_REQUIRES(ctx, n > 0,
                  errors::DataLoss("reading ", path, " needs bytes [", offset, ", ", offset + bytes,
                                   "), but it ended at byte ", offset + done));
      done += n;
    }
    if (output->dtype() == tensorflow::DT_BOOL) {
      // A bool must be 0 or 1; any nonzero byte reads as true.
      for (int64_t i = 0; i < bytes; ++i) data[i] = data[i] != 0;
    }
    bytes_read += bytes;
    if (cache != nullptr && ctx->input(10).scalar<bool>()()) cache->Insert(key, *output);
  }
};

class WriteFileOp : public OpKernel {
 public:
  explicit WriteFileOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    std::string path;
    int64_t offset = 0;
    OP_REQUIRES_OK(ctx, PathAndOffset(ctx, &path, &offset));
    const auto src = ctx->input(2).tensor_data();
    const int64_t bytes = static_cast<int64_t>(src.size());
    OP_REQUIRES(ctx, RangeFits(offset, bytes),
                errors::InvalidArgument("offset ", offset, " + ", bytes, " bytes overflows (file ", path, ")"));
    const std::string what = std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " of " + path;

    // Never O_TRUNC: other blocks of the file may already be written.
    Fd fd(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    OP_REQUIRES(ctx, fd.get() >= 0, FileError("cannot open " + path + " to write " + what, fd.error()));
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pwrite(fd.get(), src.data() + done, static_cast<size_t>(bytes - done), offset + done);
      const int error = n < 0 ? errno : 0;
      if (error == EINTR) continue;
      OP_REQUIRES(ctx, n >= 0,
                  FileError("cannot write " + what + " (" + std::to_string(done) + " written)", error));
      // pwrite returning 0 for a non-empty write makes no progress.
      OP_REQUIRES(ctx, n > 0,
                  FileError("cannot write " + what + " (" + std::to_string(done) + " written): no progress", ENOSPC));
      done += n;
    }
    OP_REQUIRES(ctx, fd.Close() == 0, FileError("cannot close " + path + " after writing " + what, fd.error()));
    bytes_written += bytes;
    Tensor* written = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &written));
    written->scalar<int64_t>()() = bytes;
  }
};

class FileStatsOp : public OpKernel {
 public:
  explicit FileStatsOp(::tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& reset = ctx->input(0);
    OP_REQUIRES(ctx, reset.dims() == 0,
                errors::InvalidArgument("reset must be a scalar bool, got shape ", reset.shape().DebugString()));
    const bool zero = reset.scalar<bool>()();
    Tensor *read = nullptr, *written = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &read));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &written));
    read->scalar<int64_t>()() = zero ? bytes_read.exchange(0) : bytes_read.load();
    written->scalar<int64_t>()() = zero ? bytes_written.exchange(0) : bytes_written.load();
  }
};

REGISTER_KERNEL_BUILDER(Name("NgraFileStats").Device(::tensorflow::DEVICE_CPU), FileStatsOp);
REGISTER_KERNEL_BUILDER(Name("NgraReadFile").Device(::tensorflow::DEVICE_CPU), ReadFileOp);
REGISTER_KERNEL_BUILDER(Name("NgraWriteFile").Device(::tensorflow::DEVICE_CPU), WriteFileOp);

}  // namespace ngra
