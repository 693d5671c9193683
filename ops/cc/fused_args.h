// The validated raw view of NgraFusedGather's nine inputs, shared by the
// forward kernel and the gradient kernel.
#ifndef NGRA_OPS_CC_FUSED_ARGS_H_
#define NGRA_OPS_CC_FUSED_ARGS_H_

#include <string>

#include "ops/cc/op_util.h"

namespace ngra {

template <typename T, typename Index>
struct FusedArgs {
  Operands<T> in;
  WeightKind weight_kind = WeightKind::kNone;
  Segments<Index> csc, csr;
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
};

struct ProgramInfo {
  int src_parts = 1;  // 0: any (type_select)
  bool uses_dst = false, uses_weight = false, uses_type = false;
};

inline absl::Status InfoOf(const std::string& program, ProgramInfo* info) {
  return DispatchProgram(program, [&](auto p) {
    using P = decltype(p);
    info->src_parts = P::kUsesType ? 0 : P::kSrcParts;
    info->uses_dst = P::kUsesDst;
    info->uses_weight = P::kUsesWeight;
    info->uses_type = P::kUsesType;
    return absl::OkStatus();
  });
}

// Validates the nine fused-gather inputs starting at input `first`. The CSR
// arrays are checked in full only when `check_csr` (the walks that read them);
// the index arrays' values not at all when the op's plan (its last input)
// fits them (CpuPlanFits).
template <typename T, typename Index>
absl::Status ParseFusedArgs(OpKernelContext* ctx, int first, const std::string& program,
                            bool check_csr, FusedArgs<T, Index>* args) {
  ProgramInfo info;
  TF_RETURN_IF_ERROR(InfoOf(program, &info));
  const Tensor& x_src = ctx->input(first + 0);
  const Tensor& x_dst = ctx->input(first + 1);
  const Tensor& weight = ctx->input(first + 2);
  const Tensor& type = ctx->input(first + 3);
  const Tensor& csc_indptr = ctx->input(first + 4);
  const Tensor& csc_src = ctx->input(first + 5);
  const Tensor& csr_indptr = ctx->input(first + 6);
  const Tensor& csr_dst = ctx->input(first + 7);
  const Tensor& csr_edge = ctx->input(first + 8);

  // x_src: [V, F], or [V, parts, F] for gates and type_select.
  const int want_rank = info.src_parts == 1 ? 2 : 3;
  if (x_src.dims() != want_rank) {
    return InvalidArgument("x_src must have rank ", want_rank, " for program ", program, ", got shape ",
                           ShapeOf(x_src));
  }
  if (info.src_parts == 2 && x_src.dim_size(1) != 2) {
    return InvalidArgument("x_src must be shaped [V, 2, F] ([a | c]) for program ", program, ", got ",
                           ShapeOf(x_src));
  }
  auto& in = args->in;
  args->num_src = x_src.dim_size(0);
  in.x_src = x_src.flat<T>().data();
  in.src_slots = want_rank == 3 ? x_src.dim_size(1) : 1;
  in.width = x_src.dim_size(want_rank - 1);

  args->num_dst = csc_indptr.dims() == 1 ? csc_indptr.NumElements() - 1 : -1;
  const bool prepared =
      CpuPlanFits(ctx->input(ctx->num_inputs() - 1), args->num_src, args->num_dst, csc_src.NumElements());
  TF_RETURN_IF_ERROR(CheckCsc<Index>(ctx, csc_indptr, csc_src, args->num_src, prepared, &args->num_edges));
  const int64_t E = args->num_edges;
  args->csc = MakeSegments<Index>(csc_indptr, &csc_src, nullptr);

  if (info.uses_dst) {
    if (x_dst.dims() != 2 || x_dst.dim_size(0) != args->num_dst || x_dst.dim_size(1) != in.width) {
      return InvalidArgument("x_dst must be shaped [", args->num_dst, ", ", in.width, "] for program ", program,
                             ", got ", ShapeOf(x_dst));
    }
    in.x_dst = x_dst.flat<T>().data();
  } else if (x_dst.NumElements() != 0) {
    return InvalidArgument("x_dst must be empty: program ", program, " does not read it");
  }

  if (info.uses_weight) {
    const bool scalar = weight.dims() == 1;
    const bool matrix = weight.dims() == 2 && weight.dim_size(1) > 0 && in.width % weight.dim_size(1) == 0;
    if (!(scalar || matrix) || weight.dim_size(0) != E) {
      return InvalidArgument("edge_weight must be shaped [", E, "] or [", E, ", W] with W dividing ", in.width,
                             " for program ", program, ", got ", ShapeOf(weight));
    }
    in.weight = weight.flat<T>().data();
    in.weight_width = scalar ? 1 : weight.dim_size(1);
    args->weight_kind = scalar || in.weight_width == 1 ? WeightKind::kScalar
                        : in.weight_width == in.width  ? WeightKind::kVector
                                                       : WeightKind::kBlock;
  } else if (weight.NumElements() != 0) {
    return InvalidArgument("edge_weight must be empty: program ", program, " does not read it");
  }

  if (info.uses_type) {
    TF_RETURN_IF_ERROR(CheckIds<int32_t>(ctx, type, "edge_type", E, in.src_slots));
    in.type = type.flat<int32_t>().data();
  } else if (type.NumElements() != 0) {
    return InvalidArgument("edge_type must be empty: program ", program, " does not read it");
  }

  TF_RETURN_IF_ERROR(
      CheckCsr<Index>(ctx, csr_indptr, csr_dst, csr_edge, args->num_src, args->num_dst, E, check_csr, prepared));
  args->csr = MakeSegments<Index>(csr_indptr, &csr_dst, &csr_edge);
  return absl::OkStatus();
}

}  // namespace ngra

#endif  // NGRA_OPS_CC_FUSED_ARGS_H_
