// How the GPU walks split segments among threads (NGra §3.3, Seastar §6.3).
//
// Work items. Segment s (a destination's in-edges for a forward walk) is one
// work item when its degree is at most `chunk` edges, else ceil(degree /
// chunk) items of `chunk` edges each. An item that covers a whole segment
// writes the finished output row. The items of a split segment write their
// unfinished accumulators: chunk 0 into the output row itself, chunk c > 0
// into partial row slot_start + c - 1 of a scratch buffer; a second pass then
// folds a segment's chunks in chunk order and finishes the row. Every output
// element is thus produced by a fixed sequence of operations: results are
// deterministic and no atomics are used. The scratch has fewer than E / chunk
// rows, 1/chunk of the per-edge tensor an unfused scatter-gather writes.
//
// Order. Segments are processed in descending degree (capped at chunk + 1,
// so the split segments come first, then the rest from high to low degree;
// a stable sort breaks ties by segment id). Long items start first, and the
// thread groups that share a warp walk edge lists of similar length. The
// order is computed on the device by a stable radix sort, once per walk
// (per op call in TF, which cannot cache it across calls safely; once per
// graph in the benchmark).
//
// Thread groups. An item's row of `width` features is cut into tiles of
// lanes * kPerLane features; a group of `lanes` threads (a power of two up
// to a warp) owns one (item, part, tile) and lane l accumulates kPerLane
// features in registers: tile_start + l + lanes * j, j < kPerLane, or, where
// rows are aligned for vector loads, runs of adjacent features (RunStart).
// Either way the group reads contiguous stretches of each gathered row, so
// the reads coalesce.
#ifndef NGRA_OPS_CUDA_SCHEDULE_H_
#define NGRA_OPS_CUDA_SCHEDULE_H_

#include <cstdint>

#include "ops/kernels/platform.h"

namespace ngra {
namespace gpu {

template <typename Index>
struct WorkItem {
  Index segment;
  Index chunk;  // which `chunk`-edge slice of the segment
  Index slot;   // kWhole, kFirstChunk (into the output row), or the partial row
};

constexpr int kWhole = -1;       // the item is the whole segment: finish and write out
constexpr int kFirstChunk = -2;  // chunk 0 of a split segment: unfinished, into out

template <typename Index>
struct Schedule {
  const Index* order = nullptr;       // [num_segments] segments, split ones first, by degree
  const Index* slot_start = nullptr;  // [num_segments] partial row of chunk 1 of order[i] (split ones)
  const WorkItem<Index>* items = nullptr;  // [max_items]
  const Index* counts = nullptr;      // device: {num_items, num_split, num_slots}
  int64_t num_segments = 0;
  int64_t chunk = 0;
  int64_t max_items = 0;  // host-side bounds: grid sizes and scratch sizes
  int64_t max_split = 0;
  int64_t max_slots = 0;

  NGRA_HOST_DEVICE Index NumItems() const { return counts[0]; }
  NGRA_HOST_DEVICE Index NumSplit() const { return counts[1]; }
  NGRA_HOST_DEVICE int64_t Chunks(int64_t degree) const { return degree > chunk ? (degree + chunk - 1) / chunk : 1; }
};

// Bounds that need only the edge count E, so that nothing waits for the
// device. A split segment has degree d > chunk, so there are at most E /
// (chunk + 1) of them, and it needs ceil(d / chunk) - 1 <= (d - 1) / chunk
// partial rows, fewer than E / chunk in all. Every partial row adds one item
// to the one item per segment.
inline void ScheduleBounds(int64_t num_segments, int64_t num_positions, int64_t chunk, int64_t* max_split,
                           int64_t* max_slots, int64_t* max_items) {
  *max_split = num_positions / (chunk + 1);
  *max_slots = num_positions / chunk;
  *max_items = num_segments + *max_slots;
}

// Where a schedule's kept arrays lie in one block of Index words: the totals
// (3), order and slot_start (num_segments each), then the items (3 words
// each). A prepared graph (GraphPlan, api.h) keeps its schedules this way, in
// a block the op holds as a tensor, and finds them again from its sizes alone.
static_assert(sizeof(WorkItem<int32_t>) == 3 * sizeof(int32_t) && sizeof(WorkItem<int64_t>) == 3 * sizeof(int64_t),
              "WorkItem must pack into 3 index words");
inline int64_t ScheduleWords(int64_t num_segments, int64_t num_positions, int64_t chunk) {
  int64_t max_split, max_slots, max_items;
  ScheduleBounds(num_segments, num_positions, chunk, &max_split, &max_slots, &max_items);
  return 3 + 2 * num_segments + 3 * max_items;
}

// The schedule whose kept arrays start at `words` (ScheduleWords of them).
template <typename Index>
Schedule<Index> ScheduleAt(Index* words, int64_t num_segments, int64_t num_positions, int64_t chunk) {
  Schedule<Index> s;
  s.num_segments = num_segments;
  s.chunk = chunk;
  ScheduleBounds(num_segments, num_positions, chunk, &s.max_split, &s.max_slots, &s.max_items);
  s.counts = words;
  s.order = words + 3;
  s.slot_start = words + 3 + num_segments;
  s.items = reinterpret_cast<const WorkItem<Index>*>(words + 3 + 2 * num_segments);
  return s;
}

// Tuning knobs, fixed at compile time (tools/bench_cuda.py --define sweeps them).
#ifndef NGRA_GPU_PER_LANE
#define NGRA_GPU_PER_LANE 4
#endif
constexpr int kPerLane = NGRA_GPU_PER_LANE;  // features per lane per tile: registers of accumulators
// Threads per block of every launch: the nvcc-built kernels' (backend_cuda.cuh) and generated ones'.
constexpr int kThreadsPerBlock = 256;
constexpr int kMaxLanes = 32;

struct Geometry {
  int64_t width = 0;    // features per part
  int64_t parts = 1;    // parts per row (x_src slots for the d/dx_src walk)
  int lanes_log2 = 0;   // threads per group = 1 << lanes_log2
  int64_t tile = 0;     // features per tile = lanes * kPerLane
  int64_t tiles = 0;    // tiles per part

  NGRA_HOST_DEVICE int64_t Lanes() const { return int64_t{1} << lanes_log2; }
  NGRA_HOST_DEVICE int64_t UnitsPerItem() const { return parts * tiles; }
  NGRA_HOST_DEVICE int64_t Row() const { return parts * width; }
};

// The smallest group whose tile covers the row, up to a warp: a row of 16
// features gets 4 lanes of 4 features, a row of 602 gets 32 lanes and 5 tiles.
inline Geometry GeometryFor(int64_t width, int64_t parts) {
  Geometry g;
  g.width = width;
  g.parts = parts;
  while ((int64_t{1} << g.lanes_log2) < kMaxLanes && (int64_t{kPerLane} << g.lanes_log2) < width) ++g.lanes_log2;
  g.tile = int64_t{kPerLane} << g.lanes_log2;
  g.tiles = (width + g.tile - 1) / g.tile;
  return g;
}

// Where thread t works: unit = t / lanes, split into (item, part, tile) with
// the tile fastest (the groups of one item sit side by side and share its
// index reads), and the lane's first feature.
struct ThreadPlace {
  int64_t item, part, tile, lane;
  int64_t feature;  // the lane's first feature when lanes interleave (tile * g.tile + lane)
};
NGRA_HOST_DEVICE inline ThreadPlace Place(const Geometry& g, int64_t t) {
  const int64_t unit = t >> g.lanes_log2;
  const int64_t lane = t & (g.Lanes() - 1);
  const int64_t per_item = g.UnitsPerItem();
  ThreadPlace p;
  p.lane = lane;
  if (per_item == 1) {  // one part, one tile: the common case, without divisions
    p.item = unit;
    p.part = 0;
    p.tile = 0;
    p.feature = lane;
    return p;
  }
  // 64-bit division is slow on GPUs; grids stay far below 2^32 units.
  const uint64_t u = static_cast<uint64_t>(unit), n = static_cast<uint64_t>(per_item);
  const bool narrow = u < (uint64_t{1} << 32) && n < (uint64_t{1} << 32);
  const uint64_t item = narrow ? static_cast<uint32_t>(u) / static_cast<uint32_t>(n) : u / n;
  const int64_t rest = unit - static_cast<int64_t>(item) * per_item;
  p.item = static_cast<int64_t>(item);
  p.part = rest / g.tiles;
  p.tile = rest - p.part * g.tiles;
  p.feature = p.tile * g.tile + lane;
  return p;
}

// The first feature of a lane's q-th run of V adjacent features (q <
// kPerLane / V). V = 1: the lanes interleave, feature tile start + lane +
// q * lanes, so each register's reads coalesce across the group. V > 1: a
// lane's V registers hold adjacent features, one V-wide load per run, and
// the group still reads one contiguous stretch per run.
template <int V>
NGRA_HOST_DEVICE inline int64_t RunStart(const Geometry& g, const ThreadPlace& p, int q) {
  return ((p.tile * (kPerLane / V) + q) * g.Lanes() + p.lane) * V;
}

// Positions [begin, end) of a work item.
template <typename Index>
struct ItemRange {
  Index begin, end;
};
template <typename Index>
NGRA_HOST_DEVICE inline ItemRange<Index> RangeOf(const Index* indptr, const WorkItem<Index>& item, int64_t chunk) {
  const int64_t first = static_cast<int64_t>(indptr[item.segment]) + static_cast<int64_t>(item.chunk) * chunk;
  const int64_t last = static_cast<int64_t>(indptr[item.segment + 1]);
  return {static_cast<Index>(first), static_cast<Index>(first + chunk < last ? first + chunk : last)};
}

// ---- The bodies that build a schedule (one thread per segment) ----

// keys[s] = min(degree, chunk + 1) (the sort key), ids[s] = s.
template <typename Index>
struct DegreeKeysBody {
  const Index* indptr;
  int64_t num_segments, chunk;
  uint32_t* keys;
  Index* ids;
  NGRA_HOST_DEVICE void operator()(int64_t s) const {
    const int64_t degree = static_cast<int64_t>(indptr[s + 1]) - static_cast<int64_t>(indptr[s]);
    keys[s] = static_cast<uint32_t>(degree > chunk ? chunk + 1 : degree);
    ids[s] = static_cast<Index>(s);
  }
};

// For sorted position i: how many items the segment makes, and how many
// partial rows (one per chunk after the first).
template <typename Index>
struct ChunkCountsBody {
  const Index* indptr;
  const Index* order;
  int64_t chunk;
  Index* counts;
  Index* split_counts;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    const Index s = order[i];
    const int64_t degree = static_cast<int64_t>(indptr[s + 1]) - static_cast<int64_t>(indptr[s]);
    const int64_t n = degree > chunk ? (degree + chunk - 1) / chunk : 1;
    counts[i] = static_cast<Index>(n);
    split_counts[i] = static_cast<Index>(n - 1);
  }
};

// Writes the items of sorted position i at item_start[i], and the totals.
// Split segments are a prefix of the order, so num_split is the i + 1 of
// the last split one. `totals` must be zeroed first (no split segments).
template <typename Index>
struct ExpandItemsBody {
  const Index* order;
  const Index* counts;
  const Index* item_start;
  const Index* slot_start;
  int64_t num_segments;
  WorkItem<Index>* items;
  Index* totals;
  NGRA_HOST_DEVICE void operator()(int64_t i) const {
    const Index n = counts[i];
    for (Index c = 0; c < n; ++c) {
      const Index slot = n == 1 ? Index(kWhole) : c == 0 ? Index(kFirstChunk) : static_cast<Index>(slot_start[i] + c - 1);
      items[item_start[i] + c] = WorkItem<Index>{order[i], c, slot};
    }
    if (i + 1 == num_segments) {
      totals[0] = item_start[i] + n;
      totals[2] = slot_start[i] + n - 1;
    }
    if (n > 1 && (i + 1 == num_segments || counts[i + 1] == 1)) totals[1] = static_cast<Index>(i + 1);
  }
};

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_SCHEDULE_H_
