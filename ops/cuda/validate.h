// The argument checks of each op's GPU kernel, in the order and with the
// messages of the CPU kernel (ops/cc/*_kernels.cc, op_util.h, fused_args.h),
// for tensors that live on the device. TF-free: a tensor is its data pointer
// and shape, so the harness can feed these bad input and read the messages.
//
// Shape conditions are decided on the host; conditions on index values run
// as device checks (Validator in api.h) with one synchronisation at the end.
// Copying the index arrays to the host instead would move every edge index
// over PCIe on every call, more than the kernel itself reads from them.
#ifndef NGRA_OPS_CUDA_VALIDATE_H_
#define NGRA_OPS_CUDA_VALIDATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ops/cuda/api.h"

namespace ngra {
namespace gpu {

struct TensorInfo {
  const void* data = nullptr;
  std::vector<int64_t> shape;

  int dims() const { return static_cast<int>(shape.size()); }
  int64_t dim(int d) const { return shape[d]; }
  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // As TensorShape::DebugString: "[3,4]".
  std::string ShapeString() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
  }
  template <typename U>
  const U* As() const {
    return static_cast<const U*>(data);
  }
};

// What the checks established, for the launch.
struct Checked {
  int64_t num_positions = 0;  // indptr[-1]
  int64_t rows = 0, width = 1;
};

// NgraGather(values, indptr, edge_ids); its init: ValidateInit.
template <typename Backend, typename Index>
std::string ValidateGather(const Backend& backend, const TensorInfo& values, const TensorInfo& indptr,
                           const TensorInfo& edge_ids, Checked* out);

// The init input of NgraGather and NgraFusedGather (a host check: shapes
// only): empty means none; otherwise shaped like the output, and not with
// mean. Sets *present.
inline std::string ValidateInit(const TensorInfo& init, const std::vector<int64_t>& out_shape,
                                const std::string& reduce, bool* present) {
  *present = init.NumElements() > 0;
  if (!*present) return "";
  if (reduce == "mean") {
    return "init cannot be used with reduce=mean: reduce with sum from init, then divide by the whole in-degree";
  }
  if (init.shape != out_shape) {
    return "init must be empty or shaped like the output " + TensorInfo{nullptr, out_shape}.ShapeString() + ", got " +
           init.ShapeString();
  }
  return "";
}

// NgraInitGrad(grad, argedge) (a host check): argedge shaped like grad.
inline std::string ValidateInitGrad(const TensorInfo& grad, const TensorInfo& argedge) {
  if (argedge.shape == grad.shape) return "";
  return "argedge must have the shape of grad " + grad.ShapeString() + ", got " + argedge.ShapeString();
}

// NgraScatter(x, indptr, edge_ids).
template <typename Backend, typename Index>
std::string ValidateScatter(const Backend& backend, const TensorInfo& x, const TensorInfo& indptr,
                            const TensorInfo& edge_ids, Checked* out);

// NgraGatherGradArg(grad, argedge, indptr, edge_ids).
template <typename Backend, typename Index>
std::string ValidateGatherGradArg(const Backend& backend, const TensorInfo& grad, const TensorInfo& argedge,
                                  const TensorInfo& indptr, const TensorInfo& edge_ids, Checked* out);

// An adjacency's five index arrays: NgraPrepareGraph's inputs.
struct GraphInputs {
  TensorInfo csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge;
};

// NgraPrepareGraph: every check the fused ops make of the five arrays (one
// synchronisation), with their messages; sets the graph's sizes. Then
// PrepareGraph (api.h) builds the plan.
template <typename Backend, typename Index>
std::string ValidateGraph(const Backend& backend, const GraphInputs& graph, int64_t* num_src, int64_t* num_dst,
                          int64_t* num_edges);

// The nine NgraFusedGather inputs, x_src first, and the graph's plan:
// NgraPrepareGraph's of these very arrays, which then are not checked again
// (only their shapes), or any other, which is ignored (GpuPlanFits).
struct FusedInputs {
  TensorInfo x_src, x_dst, edge_weight, edge_type, csc_indptr, csc_src, csr_indptr, csr_dst, csr_edge;
  TensorInfo plan;
};

// NgraFusedGather (its nine inputs; init: ValidateInit); fills problem (its
// program and reduce are set from the names). check_csr: the walk reads the CSR arrays (the d/dx_src gradient).
template <typename Backend, typename T, typename Index>
std::string ValidateFused(const Backend& backend, const std::string& program, const std::string& reduce,
                          const FusedInputs& inputs, bool check_csr, FusedProblem<T, Index>* problem);

// NgraFusedGatherGrad: the forward checks, then grad, argedge and wrt.
template <typename Backend, typename T, typename Index>
std::string ValidateFusedGrad(const Backend& backend, const std::string& program, const std::string& reduce,
                              const std::string& wrt, const TensorInfo& grad, const TensorInfo& argedge,
                              const FusedInputs& inputs, FusedProblem<T, Index>* problem, Wrt* which);

// ---- Edge code ----

// The attributes of NgraEdgeCode and NgraEdgeCodeGrad, checked when the
// kernel is built (as the CPU kernel's CodeAttrs, same messages).
struct EdgeCodeAttrs {
  std::vector<int32_t> code;
  int value = 0, score = -1;
  std::string reduce;
  bool reads[4] = {false, false, false, false};  // per load opcode: src, dst, edge, typed src

  int num_instructions() const { return static_cast<int>(code.size() / kInstructionInts); }
  bool softmax() const { return reduce == "softmax"; }

  // What a generated module was compiled for (ngra_tf.ops.generated.cuda_signature writes the same): its
  // kernels' names end in GeneratedKernelSuffix of it, so a module of another program does not load.
  template <typename T, typename Index>
  std::string GeneratedSignature() const {
    return ProgramSignature<T, Index>("cuda_abi=" + std::to_string(kGeneratedAbi), code, reduce, value, score);
  }
};

inline std::string ParseEdgeCodeAttrs(const std::vector<int64_t>& raw, int value, int score,
                                      const std::string& reduce, EdgeCodeAttrs* attrs) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (reduce != "sum" && reduce != "mean" && reduce != "max" && reduce != "min" && reduce != "softmax") {
    return "reduce must be one of sum, mean, max, min, softmax; got '" + reduce + "'";
  }
  if (raw.empty() || raw.size() % kInstructionInts != 0) {
    return "code must hold " + str(kInstructionInts) + " ints per instruction, got " + str(raw.size());
  }
  const int n = static_cast<int>(raw.size() / kInstructionInts);
  if (n > kMaxInstructions) {
    return "code has " + str(n) + " instructions; at most " + str(kMaxInstructions) + " are supported";
  }
  *attrs = EdgeCodeAttrs();
  attrs->code.assign(raw.begin(), raw.end());
  attrs->value = value;
  attrs->score = score;
  attrs->reduce = reduce;
  for (int i = 0; i < n; ++i) {
    const int32_t* ins = attrs->code.data() + i * kInstructionInts;
    const int op = ins[0];
    const std::string at = "code[" + str(i) + "]: ";
    if (op < 0 || op >= kNumOpcodes) return at + "unknown opcode " + str(op);
    if (IsLoad(op)) {
      attrs->reads[op] = true;
      if (ins[1] < 0) return at + "a load needs a table row, got " + str(ins[1]);
      if (op == kLoadSrcTyped && ins[2] <= 0) return at + "a typed load needs a positive slot stride, got " + str(ins[2]);
    } else if (op == kConst) {
      if (ins[3] < 0) return at + "a constant needs its index, got " + str(ins[3]);
    } else {
      const bool binary = IsBinary(op);
      if (ins[1] < 0 || ins[1] >= i || (binary && (ins[2] < 0 || ins[2] >= i))) {
        return at + "operands must be earlier registers, got " + str(ins[1]) + ", " + str(ins[2]);
      }
      if ((op == kLeakyRelu || op == kPowConst) && ins[3] < 0) {
        return at + "opcode " + str(op) + " needs a constant parameter";
      }
    }
  }
  if (value < 0 || value >= n) return "value must be a register in [0, " + str(n) + "), got " + str(value);
  const bool softmax = reduce == "softmax";
  if (softmax != (score >= 0) || score >= n) {
    return softmax ? "reduce=softmax needs a score register in [0, " + str(n) + "), got " + str(score)
                   : "score must be -1 unless reduce=softmax";
  }
  return "";
}

// The eleven inputs NgraEdgeCode and NgraEdgeCodeGrad share, x_src first,
// and the plan (as FusedInputs'). `tables` is on the host (HostMemory in the
// GPU kernels' registration): its entries are checked there, and the
// gradients invert it there.
struct EdgeCodeInputs {
  TensorInfo x_src, x_dst, edge_data, edge_type, constants, tables, csc_indptr, csc_src, csr_indptr, csr_dst,
      csr_edge;
  TensorInfo plan;
};

// NgraEdgeCode (init: ValidateInit, with the output shape [num_dst, width]
// or [num_dst, 3 * width]); fills problem. check_csr: the walk reads the CSR
// arrays (the d/dx_src gradient).
template <typename Backend, typename T, typename Index>
std::string ValidateEdgeCode(const Backend& backend, const EdgeCodeAttrs& attrs, const EdgeCodeInputs& inputs,
                             bool check_csr, EdgeCodeProblem<T, Index>* problem);

// NgraEdgeCodeGrad: the forward checks, then grad, aux (argedge, max/min),
// state (softmax) and wrt (x_src, x_dst or edge_data; *which is kEdgeWeight
// for edge_data).
template <typename Backend, typename T, typename Index>
std::string ValidateEdgeCodeGrad(const Backend& backend, const EdgeCodeAttrs& attrs, const std::string& wrt,
                                 const TensorInfo& grad, const TensorInfo& aux, const TensorInfo& state,
                                 const EdgeCodeInputs& inputs, EdgeCodeProblem<T, Index>* problem, Wrt* which);

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_VALIDATE_H_
