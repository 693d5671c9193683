// Random test graphs for the CUDA harness: power-law degrees (Chung-Lu
// style), destinations without in-edges, multi-edges, one very-high
// in-degree destination and one very-high out-degree source, in the CSC and
// CSR arrays the ops take (segment edges sorted by the gathered row, as the
// CPU kernels' cache blocking requires).
#ifndef NGRA_OPS_TESTS_HARNESS_GRAPH_H_
#define NGRA_OPS_TESTS_HARNESS_GRAPH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "ops/tests/harness_check.h"

namespace ngra {
namespace harness {

struct GraphSpec {
  int64_t num_src = 0, num_dst = 0;
  int64_t edges = 0;           // power-law edges
  int64_t hub_in = 0;          // extra edges into one destination
  int64_t hub_out = 0;         // extra edges out of one source
  double empty_fraction = 0.1; // destinations that get no power-law edges
  uint64_t seed = 0;
};

template <typename Index>
struct Graph {
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
  std::vector<Index> csc_indptr, csc_src;             // by destination; edge id = position
  std::vector<Index> csr_indptr, csr_dst, csr_edge;   // by source; csr_edge = CSC position
};

// Ranks drawn with probability proportional to rank^(-1/(exponent-1)),
// mapped to ids through a random permutation so degree does not follow id.
class PowerLaw {
 public:
  PowerLaw(int64_t n, int64_t usable, std::mt19937_64* rng, double exponent = 2.2) : rng_(rng) {
    cumulative_.resize(usable);
    double sum = 0;
    for (int64_t r = 0; r < usable; ++r) cumulative_[r] = sum += std::pow(double(r + 1), -1.0 / (exponent - 1.0));
    for (double& c : cumulative_) c /= sum;
    relabel_.resize(n);
    std::iota(relabel_.begin(), relabel_.end(), int64_t{0});
    std::shuffle(relabel_.begin(), relabel_.end(), *rng_);
  }
  int64_t Draw() {
    const double u = std::uniform_real_distribution<double>(0, 1)(*rng_);
    const int64_t r = std::lower_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin();
    return relabel_[std::min<int64_t>(r, cumulative_.size() - 1)];
  }

 private:
  std::mt19937_64* rng_;
  std::vector<double> cumulative_;
  std::vector<int64_t> relabel_;
};

template <typename Index>
Graph<Index> MakeGraph(const GraphSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  std::vector<std::pair<int64_t, int64_t>> edges;  // (dst, src)
  if (spec.num_src > 0 && spec.num_dst > 0) {
    PowerLaw src(spec.num_src, spec.num_src, &rng);
    const int64_t usable = std::max<int64_t>(1, static_cast<int64_t>(spec.num_dst * (1.0 - spec.empty_fraction)));
    PowerLaw dst(spec.num_dst, usable, &rng);
    for (int64_t i = 0; i < spec.edges; ++i) edges.emplace_back(dst.Draw(), src.Draw());
    std::uniform_int_distribution<int64_t> any_src(0, spec.num_src - 1), any_dst(0, spec.num_dst - 1);
    const int64_t hub_dst = any_dst(rng), hub_src = any_src(rng);
    for (int64_t i = 0; i < spec.hub_in; ++i) edges.emplace_back(hub_dst, any_src(rng));
    for (int64_t i = 0; i < spec.hub_out; ++i) edges.emplace_back(any_dst(rng), hub_src);
  }
  std::sort(edges.begin(), edges.end());
  Graph<Index> g;
  g.num_src = spec.num_src;
  g.num_dst = spec.num_dst;
  g.num_edges = static_cast<int64_t>(edges.size());
  g.csc_indptr.assign(spec.num_dst + 1, 0);
  for (const auto& e : edges) {
    ++g.csc_indptr[e.first + 1];
    g.csc_src.push_back(static_cast<Index>(e.second));
  }
  for (int64_t v = 0; v < spec.num_dst; ++v) g.csc_indptr[v + 1] += g.csc_indptr[v];
  // CSR: positions sorted by (src, dst, edge id).
  std::vector<int64_t> by_src(edges.size());
  std::iota(by_src.begin(), by_src.end(), int64_t{0});
  std::stable_sort(by_src.begin(), by_src.end(), [&](int64_t a, int64_t b) {
    return std::tie(edges[a].second, edges[a].first) < std::tie(edges[b].second, edges[b].first);
  });
  g.csr_indptr.assign(spec.num_src + 1, 0);
  for (int64_t k : by_src) {
    ++g.csr_indptr[edges[k].second + 1];
    g.csr_dst.push_back(static_cast<Index>(edges[k].first));
    g.csr_edge.push_back(static_cast<Index>(k));
  }
  for (int64_t u = 0; u < spec.num_src; ++u) g.csr_indptr[u + 1] += g.csr_indptr[u];
  return g;
}

// Values on a 1/16 grid in [-2, 2): exact in float, and ties are common, so
// max/min tie-breaking (first edge in segment order) is exercised.
template <typename T>
std::vector<T> GridValues(int64_t n, std::mt19937_64* rng) {
  Timed timed(&g_phases.draw);
  std::uniform_int_distribution<int> d(-32, 31);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(*rng)) / T(16);
  return v;
}

template <typename T>
std::vector<T> RandomValues(int64_t n, std::mt19937_64* rng, double lo = -1.0, double hi = 1.0) {
  Timed timed(&g_phases.draw);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(*rng));
  return v;
}

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_GRAPH_H_
