// Definitions of validate.h, generic over the Backend; include after launch.h.
#ifndef NGRA_OPS_CUDA_VALIDATE_IMPL_H_
#define NGRA_OPS_CUDA_VALIDATE_IMPL_H_

#include <algorithm>
#include <string>

#include "ops/cuda/launch.h"
#include "ops/cuda/validate.h"

namespace ngra {
namespace gpu {

inline std::string Str(int64_t v) { return std::to_string(v); }

// Rows and the width of one row (the product of the trailing dims).
inline void RowsOf(const TensorInfo& t, Checked* c) {
  c->rows = t.dims() > 0 ? t.dim(0) : 0;
  c->width = 1;
  for (int d = 1; d < t.dims(); ++d) c->width *= t.dim(d);
}

// The host half of CheckIndptr: a non-empty vector of the expected length.
inline std::string IndptrShape(const TensorInfo& indptr, const std::string& name, int64_t num_segments) {
  if (indptr.dims() != 1 || indptr.NumElements() < 1) {
    return name + " must be a non-empty vector, got shape " + indptr.ShapeString();
  }
  if (num_segments >= 0 && indptr.NumElements() != num_segments + 1) {
    return name + " must have " + Str(num_segments + 1) + " entries (one per vertex, plus one), got " +
           Str(indptr.NumElements());
  }
  return "";
}

// The edge-id checks of scatter and the max/min gather gradient: edge_ids,
// when given, is a permutation of the indptr[-1] edges.
template <typename Backend, typename Index>
void PermutationIds(Validator<Backend, Index>& v, int h, const TensorInfo& edge_ids) {
  const int64_t m = edge_ids.NumElements();
  if (m == 0) return;
  v.Host([&v, h, m, &edge_ids]() -> std::string {
    if (m != v.Last(h)) {
      return "edge_ids must have indptr[-1] = " + Str(v.Last(h)) + " entries, got shape " + edge_ids.ShapeString();
    }
    if (edge_ids.dims() != 1) {
      return "edge_ids must be a vector of " + Str(m) + " ids, got shape " + edge_ids.ShapeString();
    }
    return "";
  });
  v.Ids("edge_ids", edge_ids.As<Index>(), m, 0, m);
  v.Permutation("edge_ids", edge_ids.As<Index>(), m);
}

template <typename Backend, typename Index>
std::string ValidateGather(const Backend& backend, const TensorInfo& values, const TensorInfo& indptr,
                           const TensorInfo& edge_ids, Checked* out) {
  if (values.dims() < 1) return "values must have rank >= 1, got shape " + values.ShapeString();
  RowsOf(values, out);
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(indptr, "indptr", -1));
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  const int h = v.Indptr("indptr", indptr.As<Index>(), indptr.NumElements());
  const int64_t m = edge_ids.NumElements();
  const int64_t rows = out->rows;
  v.Host([&]() -> std::string {
    if (m == 0 && v.Last(h) != rows) {
      return "indptr[-1] = " + Str(v.Last(h)) + " must equal the number of edges, " + Str(rows);
    }
    if (m != 0 && m != v.Last(h)) {
      return "edge_ids must have indptr[-1] = " + Str(v.Last(h)) + " entries, got shape " + edge_ids.ShapeString();
    }
    if (m != 0 && edge_ids.dims() != 1) {
      return "edge_ids must be a vector of " + Str(m) + " ids, got shape " + edge_ids.ShapeString();
    }
    return "";
  });
  if (m != 0) v.Ids("edge_ids", edge_ids.As<Index>(), m, 0, rows);
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());
  out->num_positions = v.Last(h);
  return "";
}

template <typename Backend, typename Index>
std::string ValidateScatter(const Backend& backend, const TensorInfo& x, const TensorInfo& indptr,
                            const TensorInfo& edge_ids, Checked* out) {
  if (x.dims() < 1) return "x must have rank >= 1, got shape " + x.ShapeString();
  RowsOf(x, out);
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(indptr, "indptr", out->rows));
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  const int h = v.Indptr("indptr", indptr.As<Index>(), indptr.NumElements());
  PermutationIds(v, h, edge_ids);
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());
  out->num_positions = v.Last(h);
  return "";
}

template <typename Backend, typename Index>
std::string ValidateGatherGradArg(const Backend& backend, const TensorInfo& grad, const TensorInfo& argedge,
                                  const TensorInfo& indptr, const TensorInfo& edge_ids, Checked* out) {
  if (grad.dims() < 1) return "grad must have rank >= 1, got shape " + grad.ShapeString();
  if (argedge.shape != grad.shape) {
    return "argedge must have the shape of grad " + grad.ShapeString() + ", got " + argedge.ShapeString();
  }
  RowsOf(grad, out);
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(indptr, "indptr", out->rows));
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  const int h = v.Indptr("indptr", indptr.As<Index>(), indptr.NumElements());
  PermutationIds(v, h, edge_ids);
  const int64_t m = edge_ids.NumElements();
  // With edge ids the bound is their count (equal to indptr[-1] once the
  // check above passed), which also bounds the ownership table.
  v.Ids("argedge", argedge.As<Index>(), argedge.NumElements(), -1, m, m == 0 ? h : -1);
  v.Owners(argedge.As<Index>(), argedge.NumElements(), out->width, h, m ? edge_ids.As<Index>() : nullptr, m);
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());
  out->num_positions = v.Last(h);
  return "";
}

// csc_indptr's handle in v, and the checks of csc_src against it (ids in
// [0, num_src)). A prepared graph's arrays were checked when it was
// prepared: its indptr's last entry is csc_src's length, known on the host.
template <typename Backend, typename Index>
int CscChecks(Validator<Backend, Index>& v, const TensorInfo& csc_indptr, const TensorInfo& csc_src, int64_t num_src,
              bool prepared) {
  const int64_t E = csc_src.NumElements();
  const int h = prepared ? v.KnownIndptr(csc_indptr.As<Index>(), csc_indptr.NumElements(), E)
                         : v.Indptr("csc_indptr", csc_indptr.As<Index>(), csc_indptr.NumElements());
  v.Host([&v, &csc_src, h, E]() -> std::string {
    if (csc_src.dims() != 1 || E != v.Last(h)) {
      return "csc_src must be a vector of " + Str(v.Last(h)) + " ids, got shape " + csc_src.ShapeString();
    }
    return "";
  });
  if (!prepared) v.Ids("csc_src", csc_src.As<Index>(), E, 0, num_src);
  return h;
}

// The CSR arrays of a fused op (the d/dx_src walk's), after the checks
// already in v: csr_indptr's shape and values, that csr_dst and csr_edge
// count the E edges, and with check_csr (the walk reads them) their values.
// A prepared graph's are compared by size only, as in CscChecks.
template <typename Backend, typename Index>
void CsrChecks(Validator<Backend, Index>& v, const TensorInfo& csr_indptr, const TensorInfo& csr_dst,
               const TensorInfo& csr_edge, int64_t num_src, int64_t num_dst, int64_t E, bool check_csr,
               bool prepared) {
  const std::string csr_shape = IndptrShape(csr_indptr, "csr_indptr", num_src);
  int hr = -1;
  if (!csr_shape.empty()) {
    v.Host([csr_shape]() { return csr_shape; });
  } else if (prepared) {
    hr = v.KnownIndptr(csr_indptr.As<Index>(), csr_indptr.NumElements(), csr_dst.NumElements());
  } else {
    hr = v.Indptr("csr_indptr", csr_indptr.As<Index>(), csr_indptr.NumElements());
  }
  v.Host([&v, &csr_dst, &csr_edge, hr, E]() -> std::string {
    if (hr < 0) return "";  // csr_indptr's shape error came first
    const int64_t positions = v.Last(hr);
    if (positions != E || csr_dst.dims() != 1 || csr_dst.NumElements() != E || csr_edge.dims() != 1 ||
        csr_edge.NumElements() != E) {
      return "csr_indptr[-1], csr_dst and csr_edge must all count the " + Str(E) + " edges of csc_indptr; got " +
             Str(positions) + ", " + csr_dst.ShapeString() + ", " + csr_edge.ShapeString();
    }
    return "";
  });
  if (check_csr && hr >= 0 && !prepared) {
    v.Ids("csr_dst", csr_dst.As<Index>(), csr_dst.NumElements(), 0, num_dst);
    const int64_t n = csr_edge.NumElements();
    v.Ids("csr_edge", csr_edge.As<Index>(), n, 0, n);
    v.Permutation("csr_edge", csr_edge.As<Index>(), n);
  }
}

// Whether the op's plan is the one NgraPrepareGraph makes on a GPU for index
// arrays of these sizes. Any other plan (empty, a CPU's, another graph's) is
// ignored: the op then checks and schedules as without one.
template <typename Index>
bool GpuPlanFits(const TensorInfo& plan, int64_t num_src, int64_t num_dst, int64_t num_edges) {
  return plan.data != nullptr && plan.dims() == 1 && num_dst >= 0 &&
         plan.NumElements() == PlanBytes<Index>(num_src, num_dst, num_edges);
}

template <typename Backend, typename Index>
std::string ValidateGraph(const Backend& backend, const GraphInputs& graph, int64_t* num_src, int64_t* num_dst,
                          int64_t* num_edges) {
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(graph.csc_indptr, "csc_indptr", -1));
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(graph.csr_indptr, "csr_indptr", -1));
  *num_dst = graph.csc_indptr.NumElements() - 1;
  *num_src = graph.csr_indptr.NumElements() - 1;
  *num_edges = graph.csc_src.NumElements();
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  CscChecks(v, graph.csc_indptr, graph.csc_src, *num_src, false);
  CsrChecks(v, graph.csr_indptr, graph.csr_dst, graph.csr_edge, *num_src, *num_dst, *num_edges, true, false);
  return v.Finish();
}

struct ProgramFlags {
  int src_parts = 1;  // 0: any (type_select)
  bool uses_dst = false, uses_weight = false, uses_type = false;
};

inline std::string FlagsOf(const std::string& name, ProgramId* id, ProgramFlags* flags) {
  if (!ParseProgram(name, id)) {
    return "program must be one of copy_src, src_mul_edge, src_add_dst, src_sub_dst, src_mul_dst, "
           "gate_sigmoid, gate_tanh, gate_relu, type_select; got '" + name + "'";
  }
  return WithProgram(*id, [&](auto p) -> std::string {
    using P = decltype(p);
    flags->src_parts = P::kUsesType ? 0 : P::kSrcParts;
    flags->uses_dst = P::kUsesDst;
    flags->uses_weight = P::kUsesWeight;
    flags->uses_type = P::kUsesType;
    return "";
  });
}

template <typename Backend, typename T, typename Index>
std::string ValidateFused(const Backend& backend, const std::string& program, const std::string& reduce,
                          const FusedInputs& inputs, bool check_csr, FusedProblem<T, Index>* problem) {
  ProgramFlags info;
  NGRA_GPU_RETURN_IF_ERROR(FlagsOf(program, &problem->program, &info));
  if (!ParseReduce(reduce, &problem->reduce)) return "reduce must be one of sum, mean, max, min; got '" + reduce + "'";
  const TensorInfo& x_src = inputs.x_src;
  const TensorInfo& x_dst = inputs.x_dst;
  const TensorInfo& weight = inputs.edge_weight;
  const TensorInfo& type = inputs.edge_type;
  const int want_rank = info.src_parts == 1 ? 2 : 3;
  if (x_src.dims() != want_rank) {
    return "x_src must have rank " + Str(want_rank) + " for program " + program + ", got shape " + x_src.ShapeString();
  }
  if (info.src_parts == 2 && x_src.dim(1) != 2) {
    return "x_src must be shaped [V, 2, F] ([a | c]) for program " + program + ", got " + x_src.ShapeString();
  }
  Operands<T>& in = problem->in;
  problem->num_src = x_src.dim(0);
  in.x_src = x_src.As<T>();
  in.src_slots = want_rank == 3 ? x_src.dim(1) : 1;
  in.width = x_src.dim(want_rank - 1);
  const TensorInfo& csc_indptr = inputs.csc_indptr;
  problem->num_dst = csc_indptr.dims() == 1 ? csc_indptr.NumElements() - 1 : -1;
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(csc_indptr, "csc_indptr", -1));

  DeviceScope scope(backend);  // the checks run on the op's GPU, whatever the thread's current one
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  // Until the checks are judged, E is the length of csc_src; CscChecks' host
  // check makes sure it is indptr[-1].
  const int64_t E = inputs.csc_src.NumElements();
  const int64_t num_src = problem->num_src, num_dst = problem->num_dst, width = in.width;
  const bool prepared = GpuPlanFits<Index>(inputs.plan, num_src, num_dst, E);
  CscChecks(v, csc_indptr, inputs.csc_src, num_src, prepared);

  std::string shape_error;  // decided now, reported in the CPU order below
  if (info.uses_dst) {
    if (x_dst.dims() != 2 || x_dst.dim(0) != num_dst || x_dst.dim(1) != width) {
      shape_error = "x_dst must be shaped [" + Str(num_dst) + ", " + Str(width) + "] for program " + program +
                    ", got " + x_dst.ShapeString();
    }
    in.x_dst = x_dst.As<T>();
  } else if (x_dst.NumElements() != 0) {
    shape_error = "x_dst must be empty: program " + program + " does not read it";
  }
  if (!shape_error.empty()) {
    v.Host([shape_error]() { return shape_error; });
  }
  if (info.uses_weight) {
    const bool scalar = weight.dims() == 1;
    const bool matrix = weight.dims() == 2 && weight.dim(1) > 0 && width % weight.dim(1) == 0;
    v.Host([&, scalar, matrix]() -> std::string {
      if (!(scalar || matrix) || weight.dim(0) != E) {
        return "edge_weight must be shaped [" + Str(E) + "] or [" + Str(E) + ", W] with W dividing " + Str(width) +
               " for program " + program + ", got " + weight.ShapeString();
      }
      return "";
    });
    in.weight = weight.As<T>();
    in.weight_width = scalar ? 1 : weight.dims() == 2 ? weight.dim(1) : 0;
    problem->weight_kind = scalar || in.weight_width == 1 ? WeightKind::kScalar
                           : in.weight_width == width     ? WeightKind::kVector
                                                          : WeightKind::kBlock;
  } else if (weight.NumElements() != 0) {
    v.Host([program]() { return "edge_weight must be empty: program " + program + " does not read it"; });
  }
  if (info.uses_type) {
    v.Host([&]() -> std::string {
      if (type.dims() != 1 || type.NumElements() != E) {
        return "edge_type must be a vector of " + Str(E) + " ids, got shape " + type.ShapeString();
      }
      return "";
    });
    v.Types("edge_type", type.As<int32_t>(), type.NumElements(), in.src_slots);
    in.type = type.As<int32_t>();
  } else if (type.NumElements() != 0) {
    v.Host([program]() { return "edge_type must be empty: program " + program + " does not read it"; });
  }

  const TensorInfo& csr_indptr = inputs.csr_indptr;
  CsrChecks(v, csr_indptr, inputs.csr_dst, inputs.csr_edge, num_src, num_dst, E, check_csr, prepared);
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());

  if (prepared) problem->plan = PlanOf<Index>(inputs.plan.data, num_src, num_dst, E);
  problem->num_edges = E;
  problem->csc.indptr = csc_indptr.As<Index>();
  problem->csc.indices = E > 0 ? inputs.csc_src.As<Index>() : nullptr;
  problem->csc.num_segments = num_dst;
  problem->csr.indptr = csr_indptr.As<Index>();
  problem->csr.indices = E > 0 ? inputs.csr_dst.As<Index>() : nullptr;
  problem->csr.edge_ids = E > 0 ? inputs.csr_edge.As<Index>() : nullptr;
  problem->csr.num_segments = num_src;
  return "";
}

template <typename Backend, typename T, typename Index>
std::string ValidateFusedGrad(const Backend& backend, const std::string& program, const std::string& reduce,
                              const std::string& wrt, const TensorInfo& grad, const TensorInfo& argedge,
                              const FusedInputs& inputs, FusedProblem<T, Index>* problem, Wrt* which) {
  if (wrt == "x_src") {
    *which = Wrt::kXSrc;
  } else if (wrt == "x_dst") {
    *which = Wrt::kXDst;
  } else if (wrt == "edge_weight") {
    *which = Wrt::kEdgeWeight;
  } else {
    return "wrt must be one of x_src, x_dst, edge_weight; got '" + wrt + "'";
  }
  NGRA_GPU_RETURN_IF_ERROR(ValidateFused(backend, program, reduce, inputs, *which == Wrt::kXSrc, problem));
  const std::vector<int64_t> out_shape{problem->num_dst, problem->in.width};
  const std::string out_string = TensorInfo{nullptr, out_shape}.ShapeString();
  if (grad.shape != out_shape) return "grad must be shaped " + out_string + ", got " + grad.ShapeString();
  if (problem->reduce == Reduce::kMax || problem->reduce == Reduce::kMin) {
    if (argedge.shape != out_shape) return "argedge must be shaped " + out_string + ", got " + argedge.ShapeString();
    DeviceScope scope(backend);
    NGRA_GPU_RETURN_IF_ERROR(scope.error());
    Validator<Backend, Index> v(backend);
    v.Ids("argedge", argedge.As<Index>(), argedge.NumElements(), -1, problem->num_edges);
    NGRA_GPU_RETURN_IF_ERROR(v.Finish());
  }
  ProgramFlags info;
  ProgramId id;
  NGRA_GPU_RETURN_IF_ERROR(FlagsOf(program, &id, &info));
  const bool used = *which == Wrt::kXSrc || (*which == Wrt::kXDst && info.uses_dst) ||
                    (*which == Wrt::kEdgeWeight && info.uses_weight);
  if (!used) return "program " + program + " has no operand " + wrt + " to differentiate";
  return "";
}

// ---- Edge code: the checks of ParseCodeArgs (ops/cc/edge_code_kernels.cc) ----

// An operand matrix: [rows, any width] when the program reads it, empty otherwise.
inline std::string CodeOperandShape(const TensorInfo& t, const char* name, bool read, int64_t rows,
                                    const char* what) {
  if (!read) return t.NumElements() != 0 ? std::string(name) + " must be empty: the program does not read it" : "";
  if (t.dims() != 2 || (rows >= 0 && t.dim(0) != rows)) {
    return std::string(name) + " must be shaped [" + Str(rows) + " (one row per " + what + "), width], got " +
           t.ShapeString();
  }
  return "";
}

// The loads' constants and tables against the operands (host data); sets
// *typed_bound to the number of types a typed load can address (-1: none).
template <typename T>
std::string CodeTables(const EdgeCode<T>& p, int64_t num_tables, int64_t num_constants, bool reads_typed,
                       int64_t* typed_bound) {
  int64_t typed_max = -1, typed_stride = 0;  // the typed loads' largest table entry, their slot stride
  for (int i = 0; i < p.num_instructions; ++i) {
    const int32_t* ins = p.Ins(i);
    if (ins[3] >= num_constants && (ins[0] == kConst || ins[0] == kLeakyRelu || ins[0] == kPowConst)) {
      return "code[" + Str(i) + "] reads constant " + Str(ins[3]) + " of " + Str(num_constants);
    }
    if (!IsLoad(ins[0])) continue;
    if (ins[1] >= num_tables) return "code[" + Str(i) + "] reads table " + Str(ins[1]) + " of " + Str(num_tables);
    const int64_t bound = ins[0] == kLoadDst ? p.dst_width : ins[0] == kLoadEdge ? p.edge_width : p.src_width;
    const int32_t* row = p.tables + static_cast<int64_t>(ins[1]) * p.width;
    for (int64_t f = 0; f < p.width; ++f) {
      if (row[f] < 0 || row[f] >= bound) {
        return "tables[" + Str(ins[1]) + ", " + Str(f) + "] = " + Str(row[f]) + " is out of range [0, " + Str(bound) +
               ") for the load at code[" + Str(i) + "]";
      }
    }
    if (ins[0] == kLoadSrcTyped) {
      if (typed_stride != 0 && typed_stride != ins[2]) return "typed loads must share one slot stride";
      typed_stride = ins[2];
      for (int64_t f = 0; f < p.width; ++f) typed_max = std::max<int64_t>(typed_max, row[f]);
    }
  }
  // Type t reads entries + t * stride: all of them must stay inside the row.
  *typed_bound = reads_typed && p.width > 0 ? (p.src_width - 1 - typed_max) / typed_stride + 1 : -1;
  return "";
}

template <typename Backend, typename T, typename Index>
std::string ValidateEdgeCode(const Backend& backend, const EdgeCodeAttrs& attrs, const EdgeCodeInputs& inputs,
                             bool check_csr, EdgeCodeProblem<T, Index>* problem) {
  const TensorInfo& x_src = inputs.x_src;
  if (x_src.dims() != 2) return "x_src must be a matrix [num_src, width], got " + x_src.ShapeString();
  const TensorInfo& csc_indptr = inputs.csc_indptr;
  const int64_t num_src = x_src.dim(0);
  const int64_t num_dst = csc_indptr.dims() == 1 ? csc_indptr.NumElements() - 1 : -1;
  NGRA_GPU_RETURN_IF_ERROR(IndptrShape(csc_indptr, "csc_indptr", -1));

  DeviceScope scope(backend);  // the checks run on the op's GPU, whatever the thread's current one
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Validator<Backend, Index> v(backend);
  // A host check whose message is known now: nothing after it is checked.
  auto stop = [&v](const std::string& error) {
    v.Host([error]() { return error; });
    return v.Finish();
  };
  // Until the checks are judged, E is the length of csc_src; CscChecks' host
  // check makes sure it is indptr[-1].
  const int64_t E = inputs.csc_src.NumElements();
  const bool prepared = GpuPlanFits<Index>(inputs.plan, num_src, num_dst, E);
  CscChecks(v, csc_indptr, inputs.csc_src, num_src, prepared);
  const bool* reads = attrs.reads;
  std::string error = CodeOperandShape(inputs.x_dst, "x_dst", reads[kLoadDst], num_dst, "destination vertex");
  if (error.empty()) error = CodeOperandShape(inputs.edge_data, "edge_data", reads[kLoadEdge], E, "edge");
  const TensorInfo& type = inputs.edge_type;
  if (error.empty() && reads[kLoadSrcTyped] && (type.dims() != 1 || type.NumElements() != E)) {
    error = "edge_type must be a vector of " + Str(E) + " types, got shape " + type.ShapeString();
  } else if (error.empty() && !reads[kLoadSrcTyped] && type.NumElements() != 0) {
    error = "edge_type must be empty: the program has no typed load";
  }
  if (error.empty() && inputs.constants.dims() != 1) {
    error = "constants must be a vector, got shape " + inputs.constants.ShapeString();
  }
  if (error.empty() && inputs.tables.dims() != 2) {
    error = "tables must be a matrix [num_tables, width], got " + inputs.tables.ShapeString();
  }
  if (!error.empty()) return stop(error);

  EdgeCode<T>& p = problem->program;
  p = EdgeCode<T>();
  p.code = attrs.code.data();
  p.num_instructions = attrs.num_instructions();
  p.constants = inputs.constants.As<T>();
  p.tables = inputs.tables.As<int32_t>();
  p.width = inputs.tables.dim(1);
  p.value = attrs.value;
  p.score = attrs.score;
  p.x_src = x_src.As<T>();
  p.src_width = x_src.dim(1);
  p.x_dst = reads[kLoadDst] ? inputs.x_dst.As<T>() : nullptr;
  p.dst_width = reads[kLoadDst] ? inputs.x_dst.dim(1) : 0;
  p.edge = reads[kLoadEdge] ? inputs.edge_data.As<T>() : nullptr;
  p.edge_width = reads[kLoadEdge] ? inputs.edge_data.dim(1) : 0;
  p.type = reads[kLoadSrcTyped] ? type.As<int32_t>() : nullptr;
  int64_t typed_bound = -1;
  error = CodeTables(p, inputs.tables.dim(0), inputs.constants.NumElements(), reads[kLoadSrcTyped], &typed_bound);
  if (!error.empty()) return stop(error);
  if (typed_bound >= 0) v.Types("edge_type", p.type, E, typed_bound);

  const TensorInfo& csr_indptr = inputs.csr_indptr;
  CsrChecks(v, csr_indptr, inputs.csr_dst, inputs.csr_edge, num_src, num_dst, E, check_csr, prepared);
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());

  if (prepared) problem->plan = PlanOf<Index>(inputs.plan.data, num_src, num_dst, E);
  problem->num_tables = inputs.tables.dim(0);
  problem->softmax = attrs.softmax();
  if (!problem->softmax) ParseReduce(attrs.reduce, &problem->reduce);
  problem->num_src = num_src;
  problem->num_dst = num_dst;
  problem->num_edges = E;
  problem->csc = Segments<Index>{csc_indptr.As<Index>(), E > 0 ? inputs.csc_src.As<Index>() : nullptr, nullptr,
                                 num_dst};
  problem->csr = Segments<Index>{csr_indptr.As<Index>(), E > 0 ? inputs.csr_dst.As<Index>() : nullptr,
                                 E > 0 ? inputs.csr_edge.As<Index>() : nullptr, num_src};
  return "";
}

template <typename Backend, typename T, typename Index>
std::string ValidateEdgeCodeGrad(const Backend& backend, const EdgeCodeAttrs& attrs, const std::string& wrt,
                                 const TensorInfo& grad, const TensorInfo& aux, const TensorInfo& state,
                                 const EdgeCodeInputs& inputs, EdgeCodeProblem<T, Index>* problem, Wrt* which) {
  int side = kLoadSrc;
  if (wrt == "x_src") {
    *which = Wrt::kXSrc;
  } else if (wrt == "x_dst") {
    *which = Wrt::kXDst;
    side = kLoadDst;
  } else if (wrt == "edge_data") {
    *which = Wrt::kEdgeWeight;
    side = kLoadEdge;
  } else {
    return "wrt must be one of x_src, x_dst, edge_data; got '" + wrt + "'";
  }
  NGRA_GPU_RETURN_IF_ERROR(ValidateEdgeCode(backend, attrs, inputs, *which == Wrt::kXSrc, problem));
  const bool softmax = attrs.softmax(), extreme = attrs.reduce == "max" || attrs.reduce == "min";
  const std::vector<int64_t> grad_shape{problem->num_dst, (softmax ? 3 : 1) * problem->program.width};
  const std::string shape_string = TensorInfo{nullptr, grad_shape}.ShapeString();
  if (grad.shape != grad_shape) return "grad must be shaped " + shape_string + ", got " + grad.ShapeString();
  if (extreme) {
    if (aux.shape != grad_shape) return "aux (argedge) must be shaped " + shape_string + ", got " + aux.ShapeString();
    DeviceScope scope(backend);
    NGRA_GPU_RETURN_IF_ERROR(scope.error());
    Validator<Backend, Index> v(backend);
    v.Ids("aux", aux.As<Index>(), aux.NumElements(), -1, problem->num_edges);
    NGRA_GPU_RETURN_IF_ERROR(v.Finish());
  }
  if (softmax && state.shape != grad_shape) {
    return "state must be the forward's softmax state " + shape_string + ", got " + state.ShapeString();
  }
  if (!attrs.reads[side] && !(side == kLoadSrc && attrs.reads[kLoadSrcTyped])) {
    return "the program reads no " + wrt + " to differentiate";
  }
  return "";
}

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_VALIDATE_IMPL_H_
