// Generated edge code: the libraries ngra_tf/ops/generated.py compiles, one
// per program, loaded by the edge-code kernels.
//
// A library exports, as plain C symbols:
//   ngra_edge_code_signature  what it was generated for: the CodeCall layout,
//                             T, Index, the reduce and the program's attributes
//   ngra_edge_code_tables     per table, 'c' (a contiguous run), 'u' (one entry),
//                             '8', '4' or '2' (the same entry over aligned runs of
//                             that many features) or 'g' (any): the shapes its
//                             loads were written for
//   ngra_edge_code_forward(const void* call, int64_t first, int64_t last)
//   ngra_edge_code_grad(const void* call, int side, int64_t first, int64_t last)
// where call is a CodeCall<T, Index> (ops/kernels/edge_code_walks.h). The
// kernel uses a library only when its signature is the kernel's own and its
// table shapes are the call's; anything else runs the interpreter, so a stale
// or foreign file costs speed, never a wrong result.
#ifndef NGRA_OPS_CC_GENERATED_CODE_H_
#define NGRA_OPS_CC_GENERATED_CODE_H_

#include <cstdint>
#include <string>

namespace ngra {

struct GeneratedCode {
  using Forward = void (*)(const void* call, int64_t first, int64_t last);
  using Grad = void (*)(const void* call, int side, int64_t first, int64_t last);
  Forward forward = nullptr;
  Grad grad = nullptr;
  std::string tables;     // one of c / u / g per table
  std::string signature;  // what it was generated for: a later caller with another is refused, as the first was
};

// The library at `path` if it is whole, loads and was generated for
// `signature`; else null, with the reason in *why (logged once per path by the
// caller). Loaded libraries stay loaded for the process (kernels may hold their
// functions). The op library exports the same check to Python as
// ngra_generated_code_problem(path, signature, why, why_size): nonzero, with
// the reason, where a kernel would not load the library, which is then built
// again.
const GeneratedCode* LoadGeneratedCode(const std::string& path, const std::string& signature, std::string* why);

}  // namespace ngra

#endif  // NGRA_OPS_CC_GENERATED_CODE_H_
