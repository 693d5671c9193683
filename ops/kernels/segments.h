// Segments: the one index structure every propagation kernel walks.
//
// A segment s owns the positions k in [indptr[s], indptr[s+1]). Position k
// reads the operand row `Row(k)` (the other endpoint of the edge) and carries
// the edge id `Edge(k)`. Grouping edges by destination (CSC) gives forward
// propagation; grouping by source (CSR) gives the transposed, backward one.
//
// Framework-free: no TensorFlow, no chunks, no layers. Kernels are plain
// templates over raw pointers so that the CUDA build can share them.
#ifndef NGRA_OPS_KERNELS_SEGMENTS_H_
#define NGRA_OPS_KERNELS_SEGMENTS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/kernels/platform.h"

namespace ngra {

template <typename Index>
struct Segments {
  const Index* indptr = nullptr;    // [num_segments + 1]
  const Index* indices = nullptr;   // [num_positions]; null: position k reads row k
  const Index* edge_ids = nullptr;  // [num_positions]; null: position k is edge k
  int64_t num_segments = 0;

  NGRA_HOST_DEVICE Index Begin(int64_t s) const { return indptr[s]; }
  NGRA_HOST_DEVICE Index End(int64_t s) const { return indptr[s + 1]; }
  NGRA_HOST_DEVICE Index Degree(int64_t s) const { return indptr[s + 1] - indptr[s]; }
  NGRA_HOST_DEVICE Index Row(Index k) const { return indices ? indices[k] : k; }
  NGRA_HOST_DEVICE Index Edge(Index k) const { return edge_ids ? edge_ids[k] : k; }
};

#ifndef __CUDACC_RTC__  // host code (NVRTC compiles device code only)
// Splits [0, num_segments) into at most `max_blocks` contiguous blocks of
// about equal cost, where a segment costs its degree plus one (its output
// row). Threads are balanced by edge count, not vertex count, so a block
// boundary never splits a segment: every output row is written by exactly
// one thread, in a fixed edge order, which keeps results bitwise
// deterministic whatever the thread count.
template <typename Index>
std::vector<int64_t> BalancedBlocks(const Index* indptr, int64_t num_segments,
                                    int64_t max_blocks) {
  std::vector<int64_t> bounds{0};
  if (num_segments == 0) return bounds;
  // Costs from indptr[0], so that a view of some segments (indptr + first) splits as well.
  const int64_t base = static_cast<int64_t>(indptr[0]);
  const int64_t total = static_cast<int64_t>(indptr[num_segments]) - base + num_segments;
  const int64_t blocks = std::max<int64_t>(1, std::min(max_blocks, num_segments));
  auto cost_before = [&](int64_t s) { return static_cast<int64_t>(indptr[s]) - base + s; };
  int64_t lo = 0;
  for (int64_t b = 1; b < blocks; ++b) {
    const int64_t target = total * b / blocks;
    // First segment whose cumulative cost reaches the target.
    int64_t first = lo, count = num_segments - lo;
    while (count > 0) {
      const int64_t half = count / 2;
      if (cost_before(first + half) < target) {
        first += half + 1;
        count -= half + 1;
      } else {
        count = half;
      }
    }
    if (first > lo && first < num_segments) {
      bounds.push_back(first);
      lo = first;
    }
  }
  bounds.push_back(num_segments);
  return bounds;
}

// Runs fn(begin_segment, end_segment) for every block, through `parallel`,
// a callable parallel(num_blocks, body) that runs body(first_block,
// last_block) over a partition of [0, num_blocks) on some threads.
template <typename Parallel, typename Fn>
void ForEachBlock(const std::vector<int64_t>& bounds, Parallel&& parallel, Fn&& fn) {
  const int64_t num_blocks = static_cast<int64_t>(bounds.size()) - 1;
  if (num_blocks <= 0) return;
  parallel(num_blocks, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) fn(bounds[b], bounds[b + 1]);
  });
}
#endif  // __CUDACC_RTC__

}  // namespace ngra

#endif  // NGRA_OPS_KERNELS_SEGMENTS_H_
