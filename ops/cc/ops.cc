// Op schemas and shape functions: declared once here, implemented per device
// in *_kernels.cc, differentiated in ngra_tf/ops/gradients.py.
//
// Index arrays come in one of two groupings (see ops/kernels/segments.h):
// CSC groups edges by destination and is what forward passes walk; edge ids
// are CSC positions. CSR groups them by source, with `csr_edge` mapping each
// CSR position back to its edge id; backward passes walk it.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace ngra {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// Number of segments of an indptr input: its length minus one.
DimensionHandle SegmentsOf(InferenceContext* c, int input) {
  ShapeHandle indptr;
  if (!c->WithRank(c->input(input), 1, &indptr).ok()) return c->UnknownDim();
  DimensionHandle n;
  if (!c->Subtract(c->Dim(indptr, 0), 1, &n).ok()) return c->UnknownDim();
  return n;
}

// [rows] + shape[1:]
absl::Status RowsLike(InferenceContext* c, DimensionHandle rows, int input, ShapeHandle* out) {
  ShapeHandle x = c->input(input);
  if (!c->RankKnown(x)) {
    *out = c->UnknownShape();
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(x, 1, &x));
  return c->ReplaceDim(x, 0, rows, out);
}

// A gather's init input is empty (no initial accumulator) or shaped like
// the output. When its shape is known and not empty, the two must agree, and
// what either knows refines the output shape.
absl::Status MergeInit(InferenceContext* c, int input, ShapeHandle* out) {
  const ShapeHandle init = c->input(input);
  if (!c->FullyDefined(init)) return absl::OkStatus();
  if (c->Value(c->NumElements(init)) == 0) return absl::OkStatus();
  if (!c->Merge(*out, init, out).ok()) {
    return ::tensorflow::errors::InvalidArgument("init must be empty or shaped like the output ", c->DebugString(*out),
                                                 ", got ", c->DebugString(init));
  }
  return absl::OkStatus();
}

// argedge is shaped like the output for max/min, empty otherwise.
absl::Status SetArgEdge(InferenceContext* c, ShapeHandle output) {
  std::string reduce;
  TF_RETURN_IF_ERROR(c->GetAttr("reduce", &reduce));
  c->set_output(1, reduce == "max" || reduce == "min" ? output : c->Vector(0));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("NgraGather")
    .Input("values: T")
    .Input("indptr: Tindex")
    .Input("edge_ids: Tindex")
    .Input("init: T")
    .Output("output: T")
    .Output("argedge: Tindex")
    .Attr("reduce: {'sum', 'mean', 'max', 'min'}")
    .Attr("T: {float, double}")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(RowsLike(c, SegmentsOf(c, 1), 0, &out));
      TF_RETURN_IF_ERROR(MergeInit(c, 3, &out));
      c->set_output(0, out);
      return SetArgEdge(c, out);
    })
    .Doc(R"doc(
Reduces edge rows into segments: output[s] = reduce(values[edge_ids[k]] for k
in [indptr[s], indptr[s+1])). An empty edge_ids means edge k is position k.
A non-empty init (shaped like the output; not with mean) is where each
segment's reduction starts, as if it were a message before every edge: an
empty segment yields init[s]. The output may take over init's buffer.
argedge holds, for max and min, the winning edge per element, or -1 where no
edge won (init's value, or 0 for an empty segment without init).
)doc");

REGISTER_OP("NgraScatter")
    .Input("x: T")
    .Input("indptr: Tindex")
    .Input("edge_ids: Tindex")
    .Output("output: T")
    .Attr("T: {float, double}")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle ids, out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &ids));
      DimensionHandle n = c->Dim(ids, 0);
      // Empty edge_ids (identity) leave the edge count to indptr's values.
      if (!c->ValueKnown(n) || c->Value(n) == 0) n = c->UnknownDim();
      TF_RETURN_IF_ERROR(RowsLike(c, n, 0, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Copies each segment's row to its edges: output[edge_ids[k]] = x[s] for k in
[indptr[s], indptr[s+1]). The adjoint of a sum NgraGather on the same segments.
)doc");

REGISTER_OP("NgraGatherGradArg")
    .Input("grad: T")
    .Input("argedge: Tindex")
    .Input("indptr: Tindex")
    .Input("edge_ids: Tindex")
    .Output("output: T")
    .Attr("T: {float, double}")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(RowsLike(c, c->UnknownDim(), 0, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc("The gradient of a max/min NgraGather w.r.t. its values.");

REGISTER_OP("NgraInitGrad")
    .Input("grad: T")
    .Input("argedge: Tindex")
    .Output("output: T")
    .Attr("T: {float, double}")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
The gradient of a max/min NgraGather or NgraFusedGather w.r.t. its init:
grad where argedge is -1 (no edge beat init), 0 elsewhere. The output may
take over grad's buffer.
)doc");

// The fused Scatter -> ApplyEdge -> Gather. Operands a program does not use
// are passed as empty tensors.
#define NGRA_FUSED_GATHER_INPUTS                  \
  Input("x_src: T")                               \
      .Input("x_dst: T")                          \
      .Input("edge_weight: T")                    \
      .Input("edge_type: int32")                  \
      .Input("csc_indptr: Tindex")                \
      .Input("csc_src: Tindex")                   \
      .Input("csr_indptr: Tindex")                \
      .Input("csr_dst: Tindex")                   \
      .Input("csr_edge: Tindex")

#define NGRA_FUSED_GATHER_ATTRS                                                       \
  Attr(                                                                               \
      "program: {'copy_src', 'src_mul_edge', 'src_add_dst', 'src_sub_dst', "          \
      "'src_mul_dst', 'gate_sigmoid', 'gate_tanh', 'gate_relu', 'type_select'}")      \
      .Attr("reduce: {'sum', 'mean', 'max', 'min'}")                                  \
      .Attr("T: {float, double}")                                                     \
      .Attr("Tindex: {int32, int64}")

REGISTER_OP("NgraFusedGather")
    .NGRA_FUSED_GATHER_INPUTS
    .Input("init: T")
    .Input("plan: int8")
    .Output("output: T")
    .Output("argedge: Tindex")
    .NGRA_FUSED_GATHER_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x_src = c->input(0), out;
      if (!c->RankKnown(x_src)) {
        out = c->UnknownShape();
      } else {
        TF_RETURN_IF_ERROR(c->WithRankAtLeast(x_src, 2, &x_src));
        out = c->Matrix(SegmentsOf(c, 4), c->Dim(x_src, -1));
      }
      TF_RETURN_IF_ERROR(MergeInit(c, 9, &out));
      c->set_output(0, out);
      return SetArgEdge(c, out);
    })
    .Doc(R"doc(
output[v] = reduce over edges e = (u -> v) of program(x_src[u], x_dst[v],
edge_weight[e] or edge_type[e]), walking the CSC arrays; the CSR arrays are
carried for the gradient. init and argedge as in NgraGather. plan: empty, or
NgraPrepareGraph's of these index arrays (see there).
)doc");

REGISTER_OP("NgraFusedGatherGrad")
    .Input("grad: T")
    .Input("argedge: Tindex")
    .NGRA_FUSED_GATHER_INPUTS
    .Input("plan: int8")
    .Output("output: T")
    .NGRA_FUSED_GATHER_ATTRS
    .Attr("wrt: {'x_src', 'x_dst', 'edge_weight'}")
    .SetShapeFn([](InferenceContext* c) {
      std::string wrt;
      TF_RETURN_IF_ERROR(c->GetAttr("wrt", &wrt));
      const int input = wrt == "x_src" ? 2 : wrt == "x_dst" ? 3 : 4;
      c->set_output(0, c->input(input));
      return absl::OkStatus();
    })
    .Doc("The gradient of NgraFusedGather w.r.t. one of its float operands.");

#undef NGRA_FUSED_GATHER_INPUTS
#undef NGRA_FUSED_GATHER_ATTRS

// Edge code (ops/kernels/edge_code.h): any element-wise ApplyEdge stage,
// fused between Scatter and Gather. The program is the `code` attribute (four
// ints per instruction); `tables` [num_tables, width] says where each load
// reads its operand row per message feature. `kernel` names the program's
// generated library (ops/cc/generated_code.h), `cuda_kernel` its generated
// GPU kernels (NVRTC's CUBIN or PTX: ops/cuda/api.h, GeneratedKernels);
// empty, or one that does not fit or load, runs the interpreter, with the
// same results.
#define NGRA_EDGE_CODE_INPUTS                     \
  Input("x_src: T")                               \
      .Input("x_dst: T")                          \
      .Input("edge_data: T")                      \
      .Input("edge_type: int32")                  \
      .Input("constants: T")                      \
      .Input("tables: int32")                     \
      .Input("csc_indptr: Tindex")                \
      .Input("csc_src: Tindex")                   \
      .Input("csr_indptr: Tindex")                \
      .Input("csr_dst: Tindex")                   \
      .Input("csr_edge: Tindex")

#define NGRA_EDGE_CODE_ATTRS                                      \
  Attr("code: list(int)")                                         \
      .Attr("value: int")                                         \
      .Attr("score: int = -1")                                    \
      .Attr("reduce: {'sum', 'mean', 'max', 'min', 'softmax'}")   \
      .Attr("kernel: string = ''")                                \
      .Attr("cuda_kernel: string = ''")                           \
      .Attr("T: {float, double}")                                 \
      .Attr("Tindex: {int32, int64}")

REGISTER_OP("NgraEdgeCode")
    .NGRA_EDGE_CODE_INPUTS
    .Input("init: T")
    .Input("plan: int8")
    .Output("output: T")
    .Output("aux: Tindex")
    .NGRA_EDGE_CODE_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      std::string reduce;
      TF_RETURN_IF_ERROR(c->GetAttr("reduce", &reduce));
      ShapeHandle tables;
      DimensionHandle width = c->UnknownDim();
      if (c->WithRank(c->input(5), 2, &tables).ok()) width = c->Dim(tables, 1);
      if (reduce == "softmax") TF_RETURN_IF_ERROR(c->Multiply(width, 3, &width));
      ShapeHandle out = c->Matrix(SegmentsOf(c, 6), width);
      TF_RETURN_IF_ERROR(MergeInit(c, 11, &out));
      c->set_output(0, out);
      return SetArgEdge(c, out);
    })
    .Doc(R"doc(
output[v] = reduce over edges e = (u -> v) of the program's message for
(x_src[u], x_dst[v], edge_data[e], edge_type[e]), walking the CSC arrays; the
CSR arrays are carried for the gradient. init and aux (argedge for max/min)
as in NgraGather. reduce=softmax is attention: the message is
softmax(score) * value over each destination's in-edges, and output rows
are the online-softmax state [acc | sum | m] (3 x width), which chains
through init across chunks; the result is acc / sum. plan as in
NgraFusedGather.
)doc");

REGISTER_OP("NgraEdgeCodeGrad")
    .Input("grad: T")
    .Input("aux: Tindex")
    .Input("state: T")
    .NGRA_EDGE_CODE_INPUTS
    .Input("plan: int8")
    .Output("output: T")
    .Output("output_dst: T")
    .NGRA_EDGE_CODE_ATTRS
    .Attr("wrt: {'x_src', 'x_dst', 'edge_data', 'x_src_and_dst'}")
    .SetShapeFn([](InferenceContext* c) {
      std::string wrt;
      TF_RETURN_IF_ERROR(c->GetAttr("wrt", &wrt));
      const bool both = wrt == "x_src_and_dst";
      c->set_output(0, c->input(wrt == "x_src" || both ? 3 : wrt == "x_dst" ? 4 : 5));
      c->set_output(1, both ? c->input(4) : c->Vector(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The gradient of NgraEdgeCode w.r.t. one operand, from d output (`grad`):
aux is the forward's argedge (max/min), state its finished softmax state
(softmax); each is empty otherwise. wrt x_src_and_dst gives both d x_src
(output) and d x_dst (output_dst, empty for any other wrt); on the CPU from
one walk over sources, which leaves each edge's share of d x_dst in a row of
its own and adds them per destination after each block of a few MiB.
)doc");

#undef NGRA_EDGE_CODE_INPUTS
#undef NGRA_EDGE_CODE_ATTRS

REGISTER_OP("NgraPrepareGraph")
    .Input("csc_indptr: Tindex")
    .Input("csc_src: Tindex")
    .Input("csr_indptr: Tindex")
    .Input("csr_dst: Tindex")
    .Input("csr_edge: Tindex")
    .Output("plan: int8")
    .Attr("Tindex: {int32, int64}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Checks an adjacency's five index arrays once, as every fused op would on
each call, and returns what the fused ops may then reuse instead of
rebuilding it per call: on a GPU, the walks' schedules (degree order, hub
splits) in one block, whose size follows from the graph's sizes; on the CPU,
where the ops need no schedule, an empty plan. A fused op given a non-empty
plan checks only the arrays' shapes: the plan vouches for their values, so
pass it only with the very arrays it was made of.
)doc");

REGISTER_OP("NgraVouchedPlan")
    .Input("num_src: int64")
    .Input("num_dst: int64")
    .Input("num_edges: int64")
    .Output("plan: int8")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The CPU plan NgraPrepareGraph makes of index arrays with these sizes, without
the arrays: for arrays checked elsewhere as it checks them (a store's chunks,
verified when the store is opened and read only while their files are
unchanged). Like any plan it vouches for the arrays' values, so that a fused
op checks only their shapes: pass it only with such arrays. A GPU op ignores
it (its plan holds schedules made from the arrays) and checks them itself.
)doc");

// Explicit data movement (NGra §3.1). Each is a real copy; the byte counters
// feed the streaming and ring measurements.
#define NGRA_COPY_OP(name)                                        \
  REGISTER_OP(name)                                               \
      .Input("input: T")                                          \
      .Output("output: T")                                        \
      .Attr("T: type")                                            \
      .SetIsStateful()                                            \
      .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)

NGRA_COPY_OP("NgraCopyH2D").Doc("Copies a host tensor to device memory.");
NGRA_COPY_OP("NgraCopyD2H").Doc("Copies a device tensor to host memory.");
NGRA_COPY_OP("NgraCopyD2D").Doc("Copies a tensor between two devices.");
#undef NGRA_COPY_OP

REGISTER_OP("NgraCopyStats")
    .Input("reset: bool")
    .Output("kinds: string")
    .Output("devices: string")
    .Output("bytes: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc("Bytes moved per copy kind and device since the last reset; resets them if asked.");

}  // namespace ngra
