// CPU kernels for NgraEdgeCode and NgraEdgeCodeGrad: any element-wise edge
// stage, fused (ops/kernels/edge_code.h). Every input is checked here, once,
// so that the walks can trust the program and the index arrays. The walks
// run the program's generated library when the `kernel` attribute names one
// that fits (generated_code.h), else the interpreter.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cc/generated_code.h"
#include "ops/cc/op_util.h"
#include "ops/kernels/edge_code_walks.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace ngra {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;

namespace {

// The program attributes, checked for shape when the kernel is built.
struct CodeAttrs {
  std::vector<int32_t> code;
  int value = 0, score = -1;
  std::string reduce;
  int reduce_code = kCodeSum;
  bool reads[4] = {false, false, false, false};  // per load kind: src, dst, edge, typed src
  std::string kernel;                             // a generated library's path, or empty
  const GeneratedCode* generated = nullptr;

  absl::Status Read(OpKernelConstruction* ctx) {
    std::vector<int64_t> raw;
    TF_RETURN_IF_ERROR(ctx->GetAttr("code", &raw));
    TF_RETURN_IF_ERROR(ctx->GetAttr("value", &value));
    TF_RETURN_IF_ERROR(ctx->GetAttr("score", &score));
    TF_RETURN_IF_ERROR(ctx->GetAttr("reduce", &reduce));
    TF_RETURN_IF_ERROR(ctx->GetAttr("kernel", &kernel));
    for (const char* name : {"sum", "mean", "max", "min", "softmax"}) {
      if (reduce == name) break;
      ++reduce_code;
    }
    if (raw.empty() || raw.size() % kInstructionInts != 0) {
      return InvalidArgument("code must hold ", kInstructionInts, " ints per instruction, got ", raw.size());
    }
    const int n = static_cast<int>(raw.size() / kInstructionInts);
    if (n > kMaxInstructions) {
      return InvalidArgument("code has ", n, " instructions; at most ", kMaxInstructions, " are supported");
    }
    code.assign(raw.begin(), raw.end());
    for (int i = 0; i < n; ++i) {
      const int32_t* ins = code.data() + i * kInstructionInts;
      const int op = ins[0];
      if (op < 0 || op >= kNumOpcodes) return InvalidArgument("code[", i, "]: unknown opcode ", op);
      if (IsLoad(op)) {
        reads[op] = true;
        if (ins[1] < 0) return InvalidArgument("code[", i, "]: a load needs a table row, got ", ins[1]);
        if (op == kLoadSrcTyped && ins[2] <= 0) {
          return InvalidArgument("code[", i, "]: a typed load needs a positive slot stride, got ", ins[2]);
        }
      } else if (op == kConst) {
        if (ins[3] < 0) return InvalidArgument("code[", i, "]: a constant needs its index, got ", ins[3]);
      } else {
        const bool binary = IsBinary(op);
        if (ins[1] < 0 || ins[1] >= i || (binary && (ins[2] < 0 || ins[2] >= i))) {
          return InvalidArgument("code[", i, "]: operands must be earlier registers, got ", ins[1], ", ", ins[2]);
        }
        if ((op == kLeakyRelu || op == kPowConst) && ins[3] < 0) {
          return InvalidArgument("code[", i, "]: opcode ", op, " needs a constant parameter");
        }
      }
    }
    if (value < 0 || value >= n) return InvalidArgument("value must be a register in [0, ", n, "), got ", value);
    const bool softmax = reduce == "softmax";
    if (softmax != (score >= 0) || score >= n) {
      return InvalidArgument(softmax ? "reduce=softmax needs a score register in [0, " : "score must be -1 unless ",
                             softmax ? std::to_string(n) + "), got " + std::to_string(score) : "reduce=softmax");
    }
    return absl::OkStatus();
  }

  // What a generated library must have been generated for (generated.py writes the same string).
  template <typename T, typename Index>
  std::string Signature() const {
    return ProgramSignature<T, Index>("abi=" + std::to_string(kCodeCallAbi), code, reduce, value, score);
  }

  // Loads the generated library, if any; one that does not fit is logged once and the interpreter runs.
  template <typename T, typename Index>
  void Load() {
    if (kernel.empty()) return;
    std::string why;
    generated = LoadGeneratedCode(kernel, Signature<T, Index>(), &why);
    if (generated == nullptr) LOG_FIRST_N(WARNING, 1) << "ngra_tf: interpreting edge code: " << why;
  }

  int num_instructions() const { return static_cast<int>(code.size() / kInstructionInts); }
};

template <typename T, typename Index>
struct CodeArgs {
  EdgeCode<T> p;
  std::vector<int32_t> contiguous;
  std::vector<uint8_t> uniform;
  std::string table_shapes;  // per table: c (contiguous), u (uniform), 8 / 4 / 2 (runs) or g, as generated code names them
  Segments<Index> csc, csr;
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
};

// Checks one operand matrix: [rows, any width] when the program reads it, empty otherwise.
absl::Status CheckOperand(const Tensor& t, const char* name, bool read, int64_t rows, const char* what) {
  if (!read) {
    if (t.NumElements() != 0) return InvalidArgument(name, " must be empty: the program does not read it");
    return absl::OkStatus();
  }
  if (t.dims() != 2 || (rows >= 0 && t.dim_size(0) != rows)) {
    return InvalidArgument(name, " must be shaped [", rows, " (one row per ", what, "), width], got ", ShapeOf(t));
  }
  return absl::OkStatus();
}

// The shape of a table that is neither contiguous nor uniform: '8', '4' or '2' when its entries are the same
// over each aligned run of that many features (attention's heads: generated code then adds a run's adjoints with
// a tree of fixed depth instead of a loop that compares entries), else 'g'. As table_shapes in generated.py.
char RunsShape(const int32_t* row, int64_t width) {
  for (const int run : {8, 4, 2}) {
    bool runs = width % run == 0;
    for (int64_t f = 0; runs && f < width; ++f) runs = row[f] == row[f - f % run];
    if (runs) return static_cast<char>('0' + run);
  }
  return 'g';
}

// Validates the eleven inputs from `first` on against the program.
template <typename T, typename Index>
absl::Status ParseCodeArgs(OpKernelContext* ctx, int first, const CodeAttrs& attrs, bool check_csr,
                           CodeArgs<T, Index>* args) {
  const Tensor& x_src = ctx->input(first + 0);
  const Tensor& x_dst = ctx->input(first + 1);
  const Tensor& edge = ctx->input(first + 2);
  const Tensor& type = ctx->input(first + 3);
  const Tensor& constants = ctx->input(first + 4);
  const Tensor& tables = ctx->input(first + 5);
  const Tensor& csc_indptr = ctx->input(first + 6);
  const Tensor& csc_src = ctx->input(first + 7);
  const Tensor& csr_indptr = ctx->input(first + 8);
  const Tensor& csr_dst = ctx->input(first + 9);
  const Tensor& csr_edge = ctx->input(first + 10);

  if (x_src.dims() != 2) return InvalidArgument("x_src must be a matrix [num_src, width], got ", ShapeOf(x_src));
  args->num_src = x_src.dim_size(0);
  args->num_dst = csc_indptr.dims() == 1 ? csc_indptr.NumElements() - 1 : -1;
  // The index arrays' values were checked when the graph was prepared, if its plan (the last input) fits them.
  const bool prepared =
      CpuPlanFits(ctx->input(ctx->num_inputs() - 1), args->num_src, args->num_dst, csc_src.NumElements());
  TF_RETURN_IF_ERROR(CheckCsc<Index>(ctx, csc_indptr, csc_src, args->num_src, prepared, &args->num_edges));
  const int64_t E = args->num_edges;
  args->csc = MakeSegments<Index>(csc_indptr, &csc_src, nullptr);
  TF_RETURN_IF_ERROR(CheckOperand(x_dst, "x_dst", attrs.reads[kLoadDst], args->num_dst, "destination vertex"));
  TF_RETURN_IF_ERROR(CheckOperand(edge, "edge_data", attrs.reads[kLoadEdge], E, "edge"));
  if (attrs.reads[kLoadSrcTyped]) {
    if (type.dims() != 1 || type.NumElements() != E) {
      return InvalidArgument("edge_type must be a vector of ", E, " types, got shape ", ShapeOf(type));
    }
  } else if (type.NumElements() != 0) {
    return InvalidArgument("edge_type must be empty: the program has no typed load");
  }
  if (constants.dims() != 1) return InvalidArgument("constants must be a vector, got shape ", ShapeOf(constants));
  if (tables.dims() != 2) return InvalidArgument("tables must be a matrix [num_tables, width], got ", ShapeOf(tables));

  auto& p = args->p;
  p.code = attrs.code.data();
  p.num_instructions = attrs.num_instructions();
  p.constants = constants.flat<T>().data();
  p.tables = tables.flat<int32_t>().data();
  p.width = tables.dim_size(1);
  p.value = attrs.value;
  p.score = attrs.score;
  p.x_src = x_src.flat<T>().data();
  p.src_width = x_src.dim_size(1);
  p.x_dst = attrs.reads[kLoadDst] ? x_dst.flat<T>().data() : nullptr;
  p.dst_width = attrs.reads[kLoadDst] ? x_dst.dim_size(1) : 0;
  p.edge = attrs.reads[kLoadEdge] ? edge.flat<T>().data() : nullptr;
  p.edge_width = attrs.reads[kLoadEdge] ? edge.dim_size(1) : 0;
  p.type = attrs.reads[kLoadSrcTyped] ? type.flat<int32_t>().data() : nullptr;

  // Each load's table within its operand's row (a typed load's, within its slot).
  const int64_t num_tables = tables.dim_size(0);
  const int64_t num_constants = constants.NumElements();
  args->contiguous.assign(num_tables, -1);
  args->uniform.assign(num_tables, 0);
  args->table_shapes.assign(num_tables, '-');  // '-': no load reads it
  int64_t typed_max = -1, typed_stride = 0;  // the typed loads' largest table entry, their slot stride
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    // Any op may carry a constant index (the evaluator reads it whenever it is not -1): bound them all.
    if (ins[3] >= num_constants && !IsLoad(ins[0])) {
      return InvalidArgument("code[", i, "] reads constant ", ins[3], " of ", num_constants);
    }
    if (!IsLoad(ins[0])) continue;
    if (ins[1] >= num_tables) return InvalidArgument("code[", i, "] reads table ", ins[1], " of ", num_tables);
    const int64_t bound = ins[0] == kLoadDst ? p.dst_width : ins[0] == kLoadEdge ? p.edge_width : p.src_width;
    const int32_t* row = p.tables + ins[1] * p.width;
    bool contiguous = true, uniform = true;
    for (int64_t f = 0; f < p.width; ++f) {
      if (row[f] < 0 || row[f] >= bound) {
        return InvalidArgument("tables[", ins[1], ", ", f, "] = ", row[f], " is out of range [0, ", bound,
                               ") for the load at code[", i, "]");
      }
      contiguous = contiguous && row[f] == row[0] + f;
      uniform = uniform && row[f] == row[0];
    }
    if (contiguous && p.width > 0) args->contiguous[ins[1]] = row[0];
    args->uniform[ins[1]] = uniform && !contiguous;
    args->table_shapes[ins[1]] =
        args->contiguous[ins[1]] >= 0 ? 'c' : args->uniform[ins[1]] ? 'u' : RunsShape(row, p.width);
    if (ins[0] == kLoadSrcTyped) {
      if (typed_stride != 0 && typed_stride != ins[2]) return InvalidArgument("typed loads must share one slot stride");
      typed_stride = ins[2];
      for (int64_t f = 0; f < p.width; ++f) typed_max = std::max<int64_t>(typed_max, row[f]);
    }
  }
  if (attrs.reads[kLoadSrcTyped] && p.width > 0) {
    // Type t reads entries + t * stride: all of them must stay inside the row.
    TF_RETURN_IF_ERROR(CheckIds<int32_t>(ctx, type, "edge_type", E, (p.src_width - 1 - typed_max) / typed_stride + 1));
  }
  p.contiguous = args->contiguous.data();
  p.uniform = args->uniform.data();

  TF_RETURN_IF_ERROR(
      CheckCsr<Index>(ctx, csr_indptr, csr_dst, csr_edge, args->num_src, args->num_dst, E, check_csr, prepared));
  args->csr = MakeSegments<Index>(csr_indptr, &csr_dst, &csr_edge);
  return absl::OkStatus();
}

}  // namespace

// wrt x_src_and_dst keeps the destination terms of this many bytes of edges at a time: a few MiB, which stay in
// the last-level cache between the walk that writes them and the adds that read them (1 to 8 MiB measured
// within noise of each other on a 32 MiB L3).
constexpr int64_t kTermsBytes = 4 << 20;

// Bounds of consecutive blocks of csr's segments (sources), each of at most max_positions edges or one source.
template <typename Index>
std::vector<int64_t> TermBlocks(const Segments<Index>& csr, int64_t max_positions) {
  std::vector<int64_t> bounds{0};
  const Index* end = csr.indptr + csr.num_segments + 1;
  for (int64_t u = 0; u < csr.num_segments;) {
    // The last segment boundary within max_positions of u's first edge, past u.
    const int64_t limit = static_cast<int64_t>(csr.Begin(u)) + max_positions;
    const int64_t next = std::upper_bound(csr.indptr + u + 1, end, limit,
                                          [](int64_t x, Index y) { return x < static_cast<int64_t>(y); }) -
                         csr.indptr - 1;
    u = std::max<int64_t>(u + 1, next);
    bounds.push_back(u);
  }
  return bounds;
}

// Runs the call over segments [first, last) (all by default) through the generated library when it fits the
// call's tables, else the interpreter.
template <typename T, typename Index>
void RunCode(OpKernelContext* ctx, const CodeAttrs& attrs, const CodeArgs<T, Index>& args,
             const CodeCall<T, Index>& call, int side, int64_t first = 0, int64_t last = -1) {
  const bool grad = side >= 0;
  const Segments<Index>& seg = side == kLoadSrc || side == kLoadSrcAndDst ? args.csr : args.csc;
  const int64_t cost = args.p.width * args.p.num_instructions;
  const GeneratedCode* generated = attrs.generated;
  if (generated != nullptr && generated->tables == args.table_shapes) {
    RunSegments(ctx, seg, cost, [&](int64_t begin, int64_t end) {
      if (grad) {
        generated->grad(&call, side, begin, end);
      } else {
        generated->forward(&call, begin, end);
      }
    }, first, last);
    return;
  }
  WithCodeReduce(attrs.reduce_code, [&](auto r) {
    constexpr int kReduce = decltype(r)::value;
    RunSegments(ctx, seg, cost, [&](int64_t begin, int64_t end) {
      if (grad) {
        RunCodeGrad<kReduce, Interpreted<T>>(call, side, begin, end);
      } else {
        RunCodeForward<kReduce, Interpreted<T>>(call, begin, end);
      }
    }, first, last);
  });
}

template <typename T, typename Index>
CodeCall<T, Index> CallOf(const CodeArgs<T, Index>& args) {
  CodeCall<T, Index> call;
  call.csc = args.csc;
  call.csr = args.csr;
  call.p = args.p;
  call.num_src = args.num_src;
  return call;
}

template <typename T, typename Index>
class EdgeCodeOp : public OpKernel {
 public:
  explicit EdgeCodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    attrs_.Load<T, Index>();
  }

  void Compute(OpKernelContext* ctx) override {
    CodeArgs<T, Index> args;
    OP_REQUIRES_OK(ctx, ParseCodeArgs(ctx, 0, attrs_, /*check_csr=*/false, &args));
    const bool softmax = attrs_.reduce == "softmax";
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape({args.num_dst, (softmax ? 3 : 1) * args.p.width}, &out_shape));
    Tensor* out = nullptr;
    Tensor* aux = nullptr;
    const T* init = nullptr;
    OP_REQUIRES_OK(ctx, OutputFromInit<T>(ctx, 11, out_shape, attrs_.reduce, &out, &init));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, IsExtremeReduce(attrs_.reduce) ? out_shape : TensorShape({0}), &aux));
    CodeCall<T, Index> call = CallOf(args);
    call.out = out->flat<T>().data();
    call.arg = aux->flat<Index>().data();
    call.init = init;
    RunCode(ctx, attrs_, args, call, /*side=*/-1);
  }

 private:
  CodeAttrs attrs_;
};

template <typename T, typename Index>
class EdgeCodeGradOp : public OpKernel {
 public:
  explicit EdgeCodeGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("wrt", &wrt_));
    side_ = wrt_ == "x_src" ? kLoadSrc : wrt_ == "x_dst" ? kLoadDst : wrt_ == "edge_data" ? kLoadEdge : kLoadSrcAndDst;
    attrs_.Load<T, Index>();
  }

  void Compute(OpKernelContext* ctx) override {
    CodeArgs<T, Index> args;
    OP_REQUIRES_OK(ctx, ParseCodeArgs(ctx, 3, attrs_, /*check_csr=*/side_ == kLoadSrc || side_ == kLoadSrcAndDst,
                                       &args));
    const Tensor& grad = ctx->input(0);
    const Tensor& aux = ctx->input(1);
    const Tensor& state = ctx->input(2);
    const std::string& reduce = attrs_.reduce;
    const bool softmax = reduce == "softmax", extreme = IsExtremeReduce(reduce);
    TensorShape grad_shape;
    OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape({args.num_dst, (softmax ? 3 : 1) * args.p.width}, &grad_shape));
    OP_REQUIRES(ctx, grad.shape() == grad_shape,
                InvalidArgument("grad must be shaped ", grad_shape.DebugString(), ", got ", ShapeOf(grad)));
    if (extreme) {
      OP_REQUIRES(ctx, aux.shape() == grad_shape,
                  InvalidArgument("aux (argedge) must be shaped ", grad_shape.DebugString(), ", got ", ShapeOf(aux)));
      OP_REQUIRES_OK(ctx, CheckIds<Index>(ctx, aux, "aux", aux.NumElements(), args.num_edges, -1, false));
    }
    if (softmax) {
      OP_REQUIRES(ctx, state.shape() == grad_shape,
                  InvalidArgument("state must be the forward's softmax state ", grad_shape.DebugString(), ", got ",
                                  ShapeOf(state)));
    }
    const bool both = side_ == kLoadSrcAndDst;
    const bool reads_src = attrs_.reads[kLoadSrc] || attrs_.reads[kLoadSrcTyped];
    const bool read = side_ == kLoadSrc ? reads_src : both ? reads_src && attrs_.reads[kLoadDst] : attrs_.reads[side_];
    OP_REQUIRES(ctx, read, InvalidArgument(both ? "wrt x_src_and_dst needs a program that reads both x_src and x_dst"
                                                : "the program reads no " + wrt_ + " to differentiate"));
    Tensor* out = nullptr;
    Tensor* out_dst = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(side_ == kLoadSrc || both ? 3 : side_ == kLoadDst ? 4 : 5)
                                                    .shape(), &out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, both ? ctx->input(4).shape() : TensorShape({0}), &out_dst));
    // Mean spreads each result's gradient evenly over the in-edges: fold 1/degree in once.
    const T* g = nullptr;
    Tensor scaled;
    OP_REQUIRES_OK(ctx, MeanScaled<T, Index>(ctx, grad, args.csc, args.p.width, reduce, &scaled, &g));
    CodeCall<T, Index> call = CallOf(args);
    call.out = out->flat<T>().data();
    call.grad = g;
    call.winners = extreme ? aux.flat<Index>().data() : nullptr;
    call.state = softmax ? state.flat<T>().data() : nullptr;
    if (!both) {
      RunCode(ctx, attrs_, args, call, side_);
      return;
    }
    // Both operands: blocks of sources whose edges' destination terms fit in kTermsBytes. Each block is walked,
    // then its terms are added into the destinations' rows, so the terms take a block's rows, never the graph's.
    const int64_t dst_width = args.p.dst_width;
    T* d_dst = out_dst->flat<T>().data();
    std::fill_n(d_dst, out_dst->NumElements(), T(0));
    const std::vector<int64_t> blocks =
        TermBlocks(args.csr, std::max<int64_t>(1, kTermsBytes / std::max<int64_t>(1, dst_width * sizeof(T))));
    int64_t rows = 0;
    for (size_t b = 0; b + 1 < blocks.size(); ++b) {
      rows = std::max<int64_t>(rows, args.csr.Begin(blocks[b + 1]) - args.csr.Begin(blocks[b]));
    }
    Tensor terms;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DataTypeToEnum<T>::value, TensorShape({rows, dst_width}),
                                           &terms));
    call.dst_terms = terms.NumElements() > 0 ? terms.flat<T>().data() : nullptr;  // null: no terms to add
    const int64_t num_dst = args.num_dst;
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(
        ctx->device()->tensorflow_cpu_worker_threads()->num_threads, num_dst));
    const auto parallel = CpuParallel(ctx);
    for (size_t b = 0; b + 1 < blocks.size(); ++b) {
      const int64_t k0 = args.csr.Begin(blocks[b]), k1 = args.csr.Begin(blocks[b + 1]);
      call.terms_first = k0;
      RunCode(ctx, attrs_, args, call, side_, blocks[b], blocks[b + 1]);
      if (call.dst_terms == nullptr || k1 == k0) continue;
      parallel(parts, [&](int64_t first, int64_t last) {
        for (int64_t part = first; part < last; ++part) {
          AddDstTerms(args.csr, call.dst_terms, dst_width, k0, k1, num_dst * part / parts,
                      num_dst * (part + 1) / parts, d_dst);
        }
      });
    }
  }

 private:
  CodeAttrs attrs_;
  std::string wrt_;
  int side_;  // kLoadSrc, kLoadDst, kLoadEdge or kLoadSrcAndDst
};

#define NGRA_REGISTER(T, Index)                                                                              \
  REGISTER_KERNEL_BUILDER(                                                                                   \
      Name("NgraEdgeCode").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),        \
      EdgeCodeOp<T, Index>);                                                                                 \
  REGISTER_KERNEL_BUILDER(                                                                                   \
      Name("NgraEdgeCodeGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<Index>("Tindex"),    \
      EdgeCodeGradOp<T, Index>);

NGRA_REGISTER(float, int32_t)
NGRA_REGISTER(float, int64_t)
NGRA_REGISTER(double, int32_t)
NGRA_REGISTER(double, int64_t)
#undef NGRA_REGISTER

}  // namespace ngra
