// Definitions of validate.h, generic over the Backend; include after launch.h.
#ifndef NGRA_OPS_CUDA_VALIDATE_IMPL_H_
#define NGRA_OPS_CUDA_VALIDATE_IMPL_H_

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
  const int h = v.Indptr("csc_indptr", csc_indptr.As<Index>(), csc_indptr.NumElements());
  // Until the checks are judged, E is the length of csc_src; the first host
  // check below makes sure it is indptr[-1].
  const int64_t E = inputs.csc_src.NumElements();
  const int64_t num_src = problem->num_src, num_dst = problem->num_dst, width = in.width;
  v.Host([&]() -> std::string {
    if (inputs.csc_src.dims() != 1 || E != v.Last(h)) {
      return "csc_src must be a vector of " + Str(v.Last(h)) + " ids, got shape " + inputs.csc_src.ShapeString();
    }
    return "";
  });
  v.Ids("csc_src", inputs.csc_src.As<Index>(), E, 0, num_src);

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
  const std::string csr_shape = IndptrShape(csr_indptr, "csr_indptr", num_src);
  int hr = -1;
  if (csr_shape.empty()) {
    hr = v.Indptr("csr_indptr", csr_indptr.As<Index>(), csr_indptr.NumElements());
  } else {
    v.Host([csr_shape]() { return csr_shape; });
  }
  v.Host([&, hr]() -> std::string {
    if (hr < 0) return "";  // csr_indptr's shape error came first
    const int64_t positions = v.Last(hr);
    if (positions != E || inputs.csr_dst.dims() != 1 || inputs.csr_dst.NumElements() != E ||
        inputs.csr_edge.dims() != 1 || inputs.csr_edge.NumElements() != E) {
      return "csr_indptr[-1], csr_dst and csr_edge must all count the " + Str(E) + " edges of csc_indptr; got " +
             Str(positions) + ", " + inputs.csr_dst.ShapeString() + ", " + inputs.csr_edge.ShapeString();
    }
    return "";
  });
  if (check_csr && hr >= 0) {
    v.Ids("csr_dst", inputs.csr_dst.As<Index>(), inputs.csr_dst.NumElements(), 0, num_dst);
    const int64_t n = inputs.csr_edge.NumElements();
    v.Ids("csr_edge", inputs.csr_edge.As<Index>(), n, 0, n);
    v.Permutation("csr_edge", inputs.csr_edge.As<Index>(), n);
  }
  NGRA_GPU_RETURN_IF_ERROR(v.Finish());

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

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_VALIDATE_IMPL_H_
