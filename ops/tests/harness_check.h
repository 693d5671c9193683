// The harness's bookkeeping and comparisons: pass/fail tally, exact and
// per-row relative comparisons, and a multi-threaded runner for the CPU
// reference kernels.
#ifndef NGRA_OPS_TESTS_HARNESS_CHECK_H_
#define NGRA_OPS_TESTS_HARNESS_CHECK_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "ops/kernels/segments.h"

namespace ngra {
namespace harness {

// ---- Bookkeeping ----

struct Tally {
  int64_t passed = 0, failed = 0;
  int64_t decided_by_exact = 0;  // passes where the float64 reference settled a float disagreement
  void Record(const std::string& name, const std::string& error) {
    if (error.empty()) {
      ++passed;
    } else {
      ++failed;
      if (failed <= 50) std::printf("FAIL %s: %s\n", name.c_str(), error.c_str());
    }
  }
};

// Where a group of checks spends its time, for its progress line: the CPU
// reference results (CpuRun), a GPU's allocations and frees, copies and
// fills, and waits for its kernels (synchronisations), comparing results
// and drawing operands; the rest is launches (the emulated kernels
// themselves) and the host vectors the checks allocate.
struct Phases {
  double reference = 0, allocate = 0, copy = 0, wait = 0, compare = 0, draw = 0;  // seconds
};
inline Phases g_phases;

// Adds the seconds of its scope to *sink.
class Timed {
 public:
  explicit Timed(double* sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~Timed() { *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
};

// Cases whose name contains --filter's value (all when empty).
inline std::string g_filter;
inline bool Selected(const std::string& name) { return g_filter.empty() || name.find(g_filter) != std::string::npos; }

// ---- Comparisons ----

// The lowest i in [0, n) for which error_at(i) is not empty, and that error;
// "" when there is none. Checked in contiguous blocks on all cores once the
// work (n items of `cost` elements each) is large: comparing results of
// millions of elements is most of a GPU run's host work.
template <typename ErrorAt>
std::string FirstError(int64_t n, int64_t cost, const ErrorAt& error_at) {
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t parts = n * std::max<int64_t>(cost, 1) < (int64_t{1} << 18) ? 1 : std::min(threads, n);
  std::vector<std::string> errors(parts);
  auto scan = [&](int64_t part) {
    for (int64_t i = n * part / parts, end = n * (part + 1) / parts; i < end; ++i) {
      std::string e = error_at(i);
      if (!e.empty()) {
        errors[part] = std::move(e);
        return;
      }
    }
  };
  if (parts == 1) {
    scan(0);
  } else {
    std::vector<std::thread> pool;
    for (int64_t part = 0; part < parts; ++part) pool.emplace_back(scan, part);
    for (auto& th : pool) th.join();
  }
  for (std::string& e : errors) {
    if (!e.empty()) return e;
  }
  return "";
}

template <typename T>
bool SameValue(T a, T b) {
  return (a != a && b != b) || (a == b && std::signbit(a) == std::signbit(b));
}

template <typename T>
std::string Mismatch(int64_t i, T got, T want) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "element %lld: got %.9g, want %.9g", static_cast<long long>(i),
                static_cast<double>(got), static_cast<double>(want));
  return buf;
}

template <typename T>
std::string CompareExact(const std::vector<T>& got, const std::vector<T>& want) {
  Timed timed(&g_phases.compare);
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  constexpr int64_t kBlock = 4096;  // elements a call of error_at scans in a plain loop
  const int64_t size = static_cast<int64_t>(got.size());
  return FirstError((size + kBlock - 1) / kBlock, kBlock, [&](int64_t b) {
    for (int64_t i = b * kBlock, end = std::min(size, i + kBlock); i < end; ++i) {
      if (!SameValue(got[i], want[i])) return Mismatch<double>(i, static_cast<double>(got[i]), static_cast<double>(want[i]));
    }
    return std::string();
  });
}

template <typename T>
double Tolerance() {
  return sizeof(T) == 4 ? 1e-4 : 1e-10;
}

// |got - want| <= tol * max(1, max |want| over the row); NaN matches NaN.
template <typename T>
std::string CompareClose(const std::vector<T>& got, const std::vector<T>& want, int64_t row) {
  Timed timed(&g_phases.compare);
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  row = std::max<int64_t>(row, 1);
  const int64_t size = static_cast<int64_t>(want.size()), rows = (size + row - 1) / row;
  return FirstError(rows, row, [&](int64_t r) {
    double scale = 1;
    const int64_t r0 = r * row, r1 = std::min(size, r0 + row);
    for (int64_t i = r0; i < r1; ++i) {
      if (std::isfinite(static_cast<double>(want[i]))) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    }
    for (int64_t i = r0; i < r1; ++i) {
      const double g = got[i], w = want[i];
      if (std::isnan(g) && std::isnan(w)) continue;
      if (std::isinf(w) && g == w) continue;
      if (!(std::fabs(g - w) <= Tolerance<T>() * scale)) return Mismatch(i, g, w);
    }
    return std::string();
  });
}

// For float sums that disagree with the CPU's float result: both are
// compared with the float64 result. Summing thousands of terms in float
// (a hub's in-edges) drifts by more than the tolerance in either order, and
// the GPU's chunked order usually drifts less than the CPU's sequential one.
// Per row, the GPU passes when its error is within the tolerance of the row's
// float64 scale, or at most twice the CPU kernel's own error: it must be no
// less accurate than the CPU op users already have.
template <typename T>
std::string CompareWithExact(const std::vector<T>& got, const std::vector<T>& cpu, const std::vector<double>& exact,
                             int64_t row) {
  Timed timed(&g_phases.compare);
  if (got.size() != exact.size() || cpu.size() != exact.size()) return "size mismatch with the float64 reference";
  row = std::max<int64_t>(row, 1);
  const int64_t size = static_cast<int64_t>(exact.size()), rows = (size + row - 1) / row;
  return FirstError(rows, row, [&](int64_t r) {
    const int64_t r0 = r * row, r1 = std::min(size, r0 + row);
    double scale = 1, got_error = 0, cpu_error = 0;
    int64_t worst = r0;
    for (int64_t i = r0; i < r1; ++i) {
      if (std::isfinite(exact[i])) scale = std::max(scale, std::fabs(exact[i]));
      const bool nan_match = std::isnan(static_cast<double>(got[i])) && std::isnan(exact[i]);
      const bool inf_match = std::isinf(exact[i]) && static_cast<double>(got[i]) == exact[i];
      const double e = nan_match || inf_match ? 0.0 : std::fabs(static_cast<double>(got[i]) - exact[i]);
      if (!(e <= got_error)) {  // NaN errors count as the worst
        got_error = e;
        worst = i;
      }
      const double c = std::fabs(static_cast<double>(cpu[i]) - exact[i]);
      if (std::isfinite(c)) cpu_error = std::max(cpu_error, c);
    }
    if (!(got_error <= std::max(Tolerance<T>() * scale, 2 * cpu_error))) {
      char buf[240];
      std::snprintf(buf, sizeof(buf),
                    "element %lld: got %.9g, CPU %.9g, float64 %.9g (row error %.3g > tolerance %.3g and twice "
                    "the CPU's %.3g)",
                    static_cast<long long>(worst), static_cast<double>(got[worst]), static_cast<double>(cpu[worst]),
                    exact[worst], got_error, Tolerance<T>() * scale, 2 * cpu_error);
      return std::string(buf);
    }
    return std::string();
  });
}

// got against the CPU kernel's `want`, per row; where they differ by more
// than the tolerance, the float64 result (exact(), computed only then)
// decides, as CompareWithExact says.
template <typename T, typename Exact>
std::string CompareSums(const std::vector<T>& got, const std::vector<T>& want, int64_t row, Tally& tally,
                        Exact&& exact) {
  std::string error = CompareClose(got, want, row);
  if (error.empty() || sizeof(T) == sizeof(double)) return error;
  error = CompareWithExact(got, want, exact(), row);
  if (error.empty()) ++tally.decided_by_exact;
  return error;
}

// The comparisons find what they must: planted differences in results large
// enough to be compared on all cores, each reported at its lowest element.
inline void CheckComparisons(Tally& tally) {
  const int64_t n = (int64_t{1} << 20) + 7, row = 100;  // the last row is partial
  const std::vector<float> want(n, 1.5f);
  const std::vector<double> exact(want.begin(), want.end());
  auto expect = [&](const std::string& name, const std::string& got, int64_t element) {
    const std::string prefix = element < 0 ? "" : "element " + std::to_string(element) + ":";
    const bool ok = element < 0 ? got.empty() : got.rfind(prefix, 0) == 0;
    tally.Record("comparisons " + name, ok ? "" : "got '" + got + "', want '" + prefix + "'");
  };
  expect("exact, equal", CompareExact(want, want), -1);
  expect("close, equal", CompareClose(want, want, row), -1);
  for (const std::vector<int64_t>& planted : {std::vector<int64_t>{n - 1}, {0}, {n / 2 + 3, n - 5}, {n / 3, 7}}) {
    std::vector<float> got = want, nan = want;
    for (int64_t i : planted) {
      got[i] = 1.75f;
      nan[i] = NAN;
    }
    const int64_t first = *std::min_element(planted.begin(), planted.end());
    const std::string at = " at " + std::to_string(first);
    expect("exact" + at, CompareExact(got, want), first);
    expect("exact NaN" + at, CompareExact(nan, want), first);
    expect("close" + at, CompareClose(got, want, row), first);
    expect("close NaN" + at, CompareClose(nan, want, row), first);
    expect("with float64" + at, CompareWithExact(got, want, exact, row), first);
  }
  std::vector<float> near = want;
  near[n / 2] = 1.5f + 1e-5f;  // within the float tolerance
  expect("close within tolerance", CompareClose(near, want, row), -1);
}

// Runs fn(first, last) over edge-balanced blocks of seg on all cores (the CPU
// reference is the slow side of a GPU run).
template <typename Index, typename Fn>
void CpuRun(const Segments<Index>& seg, Fn&& fn) {
  Timed timed(&g_phases.reference);
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<int64_t> bounds = BalancedBlocks(seg.indptr, seg.num_segments, 4 * threads);
  const int64_t blocks = static_cast<int64_t>(bounds.size()) - 1;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads && t < blocks; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t b = t; b < blocks; b += threads) fn(bounds[b], bounds[b + 1]);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace harness
}  // namespace ngra

#endif  // NGRA_OPS_TESTS_HARNESS_CHECK_H_
