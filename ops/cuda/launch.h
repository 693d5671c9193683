// The definitions behind api.h, generic over the Backend (GpuStream from
// backend_cuda.cuh, HostEmulation from backend_host.h): which bodies run, in
// which order, over how many threads, with which scratch memory. Include the
// backend header first, then this one, then instantiate.
#ifndef NGRA_OPS_CUDA_LAUNCH_H_
#define NGRA_OPS_CUDA_LAUNCH_H_

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/cuda/api.h"
#include "ops/cuda/bodies.h"
#include "ops/cuda/check_bodies.h"
#include "ops/cuda/schedule.h"

namespace ngra {
namespace gpu {

// ---- Dispatch from runtime ids to template arguments ----

template <typename Fn>
std::string WithProgram(ProgramId id, Fn&& fn) {
  switch (id) {
    case ProgramId::kCopySrc: return fn(CopySrc{});
    case ProgramId::kSrcMulEdge: return fn(SrcMulEdge{});
    case ProgramId::kSrcAddDst: return fn(SrcAddDst{});
    case ProgramId::kSrcSubDst: return fn(SrcSubDst{});
    case ProgramId::kSrcMulDst: return fn(SrcMulDst{});
    case ProgramId::kGateSigmoid: return fn(Gate<Sigmoid>{});
    case ProgramId::kGateTanh: return fn(Gate<Tanh>{});
    case ProgramId::kGateRelu: return fn(Gate<Relu>{});
    case ProgramId::kTypeSelect: return fn(TypeSelect{});
  }
  return "unknown program id";
}

template <typename Fn>
std::string WithReduce(Reduce reduce, Fn&& fn) {
  switch (reduce) {
    case Reduce::kSum: return fn(ReduceTag<Reduce::kSum>{});
    case Reduce::kMean: return fn(ReduceTag<Reduce::kMean>{});
    case Reduce::kMax: return fn(ReduceTag<Reduce::kMax>{});
    case Reduce::kMin: return fn(ReduceTag<Reduce::kMin>{});
  }
  return "unknown reduce";
}

template <typename Program, typename Fn>
std::string WithWeight(WeightKind kind, Fn&& fn) {
  return WithWeightKind<Program>(kind, fn, [] { return std::string("edge_weight is required by this program"); });
}

// ---- Scratch memory ----

// Typed allocations from backend.allocate; remembers the first failure.
template <typename Backend>
class Scratch {
 public:
  explicit Scratch(const Backend& backend) : backend_(backend) {}
  template <typename U>
  U* Get(int64_t count) {
    if (count <= 0) return nullptr;
    void* p = backend_.allocate(static_cast<size_t>(count) * sizeof(U));
    if (p == nullptr && error_.empty()) error_ = "out of device memory for " + std::to_string(count * sizeof(U)) + " bytes of scratch";
    return static_cast<U*>(p);
  }
  const std::string& error() const { return error_; }

 private:
  const Backend& backend_;
  std::string error_;
};

#define NGRA_GPU_RETURN_IF_ERROR(expr) \
  do {                                  \
    std::string _status = (expr);       \
    if (!_status.empty()) return _status; \
  } while (0)

// Guards the int64 thread arithmetic and the grid limit of one launch.
inline std::string CheckThreads(int64_t threads) {
  constexpr int64_t kMaxThreads = int64_t{1} << 40;
  return threads < 0 || threads > kMaxThreads ? "the problem is too large for one kernel launch" : "";
}

// ---- Validator ----

template <typename Backend, typename Index>
struct Validator<Backend, Index>::Check {
  enum Kind { kIndptr, kIds, kTypes, kPermutation, kOwners, kHost } kind;
  std::string name;
  int slot = -1;          // device status slot
  const void* data = nullptr;  // the checked array (device), for the message
  int64_t lower = 0, bound = 0;
  int bound_indptr = -1;
  int64_t width = 1;
  std::function<std::string()> host;
};

template <typename Backend, typename Index>
Validator<Backend, Index>::Validator(const Backend& backend) : backend_(backend) {}

template <typename Backend, typename Index>
bool Validator<Backend, Index>::Status() {
  if (status_ != nullptr) return true;
  status_ = static_cast<int64_t*>(backend_.allocate(2 * kMaxSlots * sizeof(int64_t)));
  if (status_ == nullptr) {
    if (error_.empty()) error_ = "out of device memory for argument checks";
    return false;
  }
  Memset(backend_, status_, 0x7f, 2 * kMaxSlots * sizeof(int64_t));
  return true;
}

// Records a device check and gives it the next status slot; null (and the
// error for Finish) when the validator is already failing or full. The
// pointer is valid until the next check is added.
template <typename Backend, typename Index>
typename Validator<Backend, Index>::Check* Validator<Backend, Index>::AddDeviceCheck(int kind, const std::string& name,
                                                                                  const void* data) {
  if (!error_.empty() || !Status()) return nullptr;
  if (slots_ >= kMaxSlots) {
    error_ = "too many argument checks for one validator";
    return nullptr;
  }
  Check c;
  c.kind = static_cast<typename Check::Kind>(kind);
  c.name = name;
  c.slot = slots_++;
  c.data = data;
  checks_.push_back(c);
  return &checks_.back();
}

template <typename Backend, typename Index>
int Validator<Backend, Index>::Indptr(const std::string& name, const Index* indptr, int64_t length) {
  const int handle = static_cast<int>(lengths_.size());
  lengths_.push_back(length);
  known_last_.push_back(-1);
  indptr_data_.push_back(indptr);
  if (handle >= kMaxSlots) {
    error_ = "too many indptr checks for one validator";
    return handle;
  }
  const Check* c = AddDeviceCheck(Check::kIndptr, name, indptr);
  if (c != nullptr && length > 0) {
    Launch(backend_, IndptrCheckBody<Index>{indptr, length, status_, c->slot, status_ + kMaxSlots + handle}, length);
  }
  return handle;
}

template <typename Backend, typename Index>
int Validator<Backend, Index>::KnownIndptr(const Index* indptr, int64_t length, int64_t last) {
  const int handle = static_cast<int>(lengths_.size());
  lengths_.push_back(length);
  known_last_.push_back(last);
  indptr_data_.push_back(indptr);
  return handle;
}

template <typename Backend, typename Index>
void Validator<Backend, Index>::Ids(const std::string& name, const Index* ids, int64_t count, int64_t lower,
                                   int64_t bound, int bound_indptr) {
  Check* c = AddDeviceCheck(Check::kIds, name, ids);
  if (c == nullptr) return;
  c->lower = lower;
  const bool known = bound_indptr >= 0 && bound_indptr < static_cast<int>(known_last_.size()) &&
                     known_last_[bound_indptr] >= 0;
  if (known) bound = known_last_[bound_indptr];
  c->bound = bound;
  c->bound_indptr = known ? -1 : bound_indptr;
  const int64_t* bound_at = c->bound_indptr >= 0 ? status_ + kMaxSlots + bound_indptr : nullptr;
  Launch(backend_, RangeCheckBody<Index>{ids, lower, bound, bound_at, status_, c->slot}, count);
}

template <typename Backend, typename Index>
void Validator<Backend, Index>::Types(const std::string& name, const int32_t* ids, int64_t count, int64_t bound) {
  Check* c = AddDeviceCheck(Check::kTypes, name, ids);
  if (c == nullptr) return;
  c->bound = bound;
  Launch(backend_, RangeCheckBody<int32_t>{ids, 0, bound, nullptr, status_, c->slot}, count);
}

template <typename Backend, typename Index>
void Validator<Backend, Index>::Permutation(const std::string& name, const Index* ids, int64_t count) {
  const Check* c = AddDeviceCheck(Check::kPermutation, name, ids);
  if (c == nullptr || count == 0) return;
  const int slot = c->slot;
  Scratch<Backend> scratch(backend_);
  int64_t* first = scratch.template Get<int64_t>(count);
  if (!scratch.error().empty()) {
    error_ = scratch.error();
    return;
  }
  Memset(backend_, first, 0x7f, count * sizeof(int64_t));
  Launch(backend_, FirstPositionBody<Index>{ids, first, status_, slot}, count);
  Launch(backend_, RepeatCheckBody<Index>{ids, first, status_, slot}, count);
}

template <typename Backend, typename Index>
void Validator<Backend, Index>::Owners(const Index* argedge, int64_t count, int64_t width, int indptr,
                                      const Index* edge_ids, int64_t num_edges) {
  const int64_t num_segments = width > 0 ? count / width : 0;
  // The caller has checked the indptr length on the host; without that the
  // bodies below could read past it, so refuse rather than trust it.
  if (indptr < 0 || indptr >= static_cast<int>(lengths_.size()) || lengths_[indptr] < num_segments + 1) {
    if (error_.empty()) error_ = "argedge ownership check: indptr must have one entry per segment, plus one";
    return;
  }
  Check* c = AddDeviceCheck(Check::kOwners, "argedge", argedge);
  if (c == nullptr || count == 0) return;
  c->width = width;
  const int slot = c->slot;
  const Index* segments = indptr_data_[indptr];
  int64_t* owner = nullptr;
  if (edge_ids != nullptr) {
    Scratch<Backend> scratch(backend_);
    owner = scratch.template Get<int64_t>(num_edges);
    if (!scratch.error().empty()) {
      error_ = scratch.error();
      return;
    }
    // Unmarked edges (possible only when an earlier host check fails) own nothing.
    Memset(backend_, owner, 0x7f, num_edges * sizeof(int64_t));
    Launch(backend_, OwnerMarkBody<Index>{segments, num_segments, edge_ids, owner, status_, slot}, num_edges);
  }
  Launch(backend_, OwnerCheckBody<Index>{argedge, width, segments, owner, status_, slot}, count);
}

template <typename Backend, typename Index>
void Validator<Backend, Index>::Host(std::function<std::string()> check) {
  Check c;
  c.kind = Check::kHost;
  c.host = std::move(check);
  checks_.push_back(std::move(c));
}

template <typename Backend, typename Index>
int64_t Validator<Backend, Index>::Last(int indptr) const {
  if (indptr < 0 || indptr >= static_cast<int>(lengths_.size())) return -1;
  if (known_last_[indptr] >= 0) return known_last_[indptr];
  if (host_status_.empty()) return -1;
  return host_status_[kMaxSlots + indptr];
}

// Reads one element of a device array for a message (error path only).
template <typename Backend, typename U>
int64_t ReadOne(const Backend& backend, const void* data, int64_t i) {
  U value{};
  CopyToHost(backend, &value, static_cast<const U*>(data) + i, sizeof(U));
  return static_cast<int64_t>(value);
}

template <typename Backend, typename Index>
std::string Validator<Backend, Index>::Finish() {
  if (!error_.empty()) return error_;
  NGRA_GPU_RETURN_IF_ERROR(LastError(backend_));
  host_status_.assign(2 * kMaxSlots, kClean);
  if (status_ != nullptr) {  // the one synchronisation
    NGRA_GPU_RETURN_IF_ERROR(CopyToHost(backend_, host_status_.data(), status_, host_status_.size() * sizeof(int64_t)));
  }
  auto str = [](int64_t v) { return std::to_string(v); };
  for (const Check& c : checks_) {
    if (c.kind == Check::kHost) {
      NGRA_GPU_RETURN_IF_ERROR(c.host());
      continue;
    }
    const int64_t i = host_status_[c.slot];
    if (i == kClean) continue;
    const auto at = [&](int64_t j) {
      return c.kind == Check::kTypes ? ReadOne<Backend, int32_t>(backend_, c.data, j)
                                     : ReadOne<Backend, Index>(backend_, c.data, j);
    };
    switch (c.kind) {
      case Check::kIndptr:
        if (i == 0) return c.name + "[0] must be 0, got " + str(at(0));
        return c.name + " must be non-decreasing, but " + c.name + "[" + str(i) + "] = " + str(at(i)) + " < " +
               c.name + "[" + str(i - 1) + "] = " + str(at(i - 1));
      case Check::kIds:
      case Check::kTypes: {
        const int64_t bound = c.bound_indptr >= 0 ? Last(c.bound_indptr) : c.bound;
        return c.name + "[" + str(i) + "] = " + str(at(i)) + " is out of range [" + str(c.lower) + ", " + str(bound) +
               ")";
      }
      case Check::kPermutation:
        return c.name + " must be a permutation, but " + str(at(i)) + " appears twice (again at position " + str(i) +
               ")";
      case Check::kOwners:
        return "argedge[" + str(i) + "] = " + str(at(i)) + " is not an edge of segment " + str(i / c.width);
      case Check::kHost:
        break;
    }
  }
  return "";
}

// ---- Schedule ----

template <typename Backend, typename Index>
std::string BuildSchedule(const Backend& backend, const Segments<Index>& seg, int64_t num_positions,
                          const WalkConfig& config, Schedule<Index>* schedule, Index* kept) {
  if (config.max_chunk < 1) return "max_chunk must be >= 1";
  const int64_t n = seg.num_segments;
  int64_t max_split, max_slots, max_items;
  ScheduleBounds(n, num_positions, config.max_chunk, &max_split, &max_slots, &max_items);
  if (max_items > static_cast<int64_t>(std::numeric_limits<Index>::max())) {
    return "the graph has too many segments and edges for 32-bit indices in the GPU schedule; use int64 indices";
  }
  Scratch<Backend> scratch(backend);
  if (kept == nullptr) kept = scratch.template Get<Index>(ScheduleWords(n, num_positions, config.max_chunk));
  uint32_t* keys = scratch.template Get<uint32_t>(2 * n);
  Index* ids = scratch.template Get<Index>(4 * n);
  NGRA_GPU_RETURN_IF_ERROR(scratch.error());
  Schedule<Index> s = ScheduleAt(kept, n, num_positions, config.max_chunk);
  Index* totals = kept;  // s.counts
  Memset(backend, totals, 0, 3 * sizeof(Index));
  if (n > 0) {
    Index* order = kept + 3;
    Index* slot_start = order + n;
    auto* items = reinterpret_cast<WorkItem<Index>*>(slot_start + n);
    Index* counts = ids + n;
    Index* split_counts = ids + 2 * n;
    Index* item_start = ids + 3 * n;
    Launch(backend, DegreeKeysBody<Index>{seg.indptr, n, s.chunk, keys, ids}, n);
    int end_bit = 1;
    while (end_bit < 32 && (int64_t{1} << end_bit) <= s.chunk + 1) ++end_bit;
    NGRA_GPU_RETURN_IF_ERROR(SortByKeyDescending(backend, keys, keys + n, ids, order, n, end_bit));
    Launch(backend, ChunkCountsBody<Index>{seg.indptr, order, s.chunk, counts, split_counts}, n);
    NGRA_GPU_RETURN_IF_ERROR(ExclusiveSum(backend, counts, item_start, n));
    NGRA_GPU_RETURN_IF_ERROR(ExclusiveSum(backend, split_counts, slot_start, n));
    Launch(backend, ExpandItemsBody<Index>{order, counts, item_start, slot_start, n, items, totals}, n);
  }
  *schedule = s;
  return LastError(backend);
}

template <typename Backend, typename Index>
std::string PrepareGraph(const Backend& backend, const Segments<Index>& csc, const Segments<Index>& csr,
                         int64_t num_edges, void* block, const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  Index* words = static_cast<Index*>(block);
  const WalkConfig per_edge = PerEdgeWalk(config);
  Schedule<Index> s;
  NGRA_GPU_RETURN_IF_ERROR(BuildSchedule(backend, csc, num_edges, config, &s, words));
  words += ScheduleWords(csc.num_segments, num_edges, config.max_chunk);
  NGRA_GPU_RETURN_IF_ERROR(BuildSchedule(backend, csr, num_edges, config, &s, words));
  words += ScheduleWords(csr.num_segments, num_edges, config.max_chunk);
  return BuildSchedule(backend, csc, num_edges, per_edge, &s, words);
}

// A prepared graph's schedule of the walk that computes d/d`wrt`; null without a plan.
template <typename Index>
const Schedule<Index>* PlannedWalk(const GraphPlan<Index>& plan, Wrt wrt) {
  if (!plan.present()) return nullptr;
  return wrt == Wrt::kXSrc ? &plan.backward : wrt == Wrt::kXDst ? &plan.forward : &plan.per_edge;
}

// The schedule of one walk: the prepared graph's, else built now.
template <typename Backend, typename Index>
std::string WalkSchedule(const Backend& backend, const Schedule<Index>* prepared, const Segments<Index>& seg,
                         int64_t num_positions, const WalkConfig& config, Schedule<Index>* schedule) {
  if (prepared != nullptr) {
    *schedule = *prepared;
    return "";
  }
  return BuildSchedule(backend, seg, num_positions, config, schedule);
}

// ---- Walks ----

// Calls launch(V) with the widest run V <= kMax (halving down to 1) for which
// aligned(V * sizeof(T)) holds: every row the kernel touches starts on such
// a boundary.
template <int kMax, typename T, typename Launcher, typename Aligned>
void LaunchWidest(const Launcher& launch, const Aligned& aligned) {
  if constexpr (kMax > 1) {
    if (!aligned(kMax * static_cast<int64_t>(sizeof(T)))) return LaunchWidest<kMax / 2, T>(launch, aligned);
  }
  launch(std::integral_constant<int, kMax>{});
}

// At most one 16-byte vector per run, and no more than a lane's registers.
template <typename T>
constexpr int kMaxRun = 16 / sizeof(T) < kPerLane ? 16 / sizeof(T) : kPerLane;

// A term with kScalarRuns = true never reads in vector runs (edge code reads
// its operands through index tables): only V = 1 is instantiated for it.
template <typename Term, typename = void>
struct ScalarRuns : std::false_type {};
template <typename Term>
struct ScalarRuns<Term, std::void_t<decltype(Term::kScalarRuns)>> : std::bool_constant<Term::kScalarRuns> {};
template <typename Term, typename T>
constexpr int kMaxRunOf = ScalarRuns<Term>::value ? 1 : kMaxRun<T>;

// Runs a segment reduction of `term` over `schedule`, then folds split
// segments; each segment starts from its row of `init` (which may be out)
// when init is not null.
template <Reduce R, typename Backend, typename Term, typename T, typename Index>
std::string ReduceWalk(const Backend& backend, const Segments<Index>& seg, const Schedule<Index>& schedule,
                       const Geometry& geo, const Term& term, T* out, Index* arg, const T* init = nullptr) {
  if (seg.num_segments == 0 || geo.width == 0 || geo.parts == 0) return "";
  constexpr bool kArg = Reducer<R>::kTracksArg;
  Scratch<Backend> scratch(backend);
  T* partial = scratch.template Get<T>(schedule.max_slots * geo.Row());
  Index* partial_arg = kArg ? scratch.template Get<Index>(schedule.max_slots * geo.Row()) : nullptr;
  NGRA_GPU_RETURN_IF_ERROR(scratch.error());
  const int64_t threads = schedule.max_items * geo.UnitsPerItem() * geo.Lanes();
  NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
  // Vector runs where every row read or written is aligned for them (TF's
  // buffers are; the width decides: 16 bytes for d = 128, 8 for d = 602).
  LaunchWidest<kMaxRunOf<Term, T>, T>(
      [&](auto run) {
        Launch(backend,
               SegmentReduceBody<R, Term, T, Index, decltype(run)::value>{seg, schedule, geo, term, out, arg, partial,
                                                                          partial_arg, init},
               threads);
      },
      [&](int64_t bytes) {
        return term.Aligned(bytes) && RowsAligned(out, geo.width, bytes) && RowsAligned(partial, geo.width, bytes) &&
               RowsAligned(init, geo.width, bytes);
      });
  if (schedule.max_split > 0) {
    Launch(backend, CombineBody<R, T, Index>{seg.indptr, schedule, geo, partial, partial_arg, out, arg},
           schedule.max_split * geo.UnitsPerItem() * geo.Lanes());
  }
  return LastError(backend);
}

template <typename Backend, typename T, typename Index>
std::string RunGather(const Backend& backend, Reduce reduce, const Segments<Index>& seg, int64_t num_positions,
                      const T* values, int64_t width, const T* init, T* out, Index* argedge,
                      const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (seg.num_segments == 0 || width == 0) return "";
  Schedule<Index> schedule;
  NGRA_GPU_RETURN_IF_ERROR(BuildSchedule(backend, seg, num_positions, config, &schedule));
  Operands<T> in;
  in.x_src = values;
  in.width = width;
  return WithReduce(reduce, [&](auto r) {
    using Term = MessageTerm<CopySrc, WeightKind::kNone, T, Index>;
    return ReduceWalk<decltype(r)::value>(backend, seg, schedule, GeometryFor(width, 1), Term{seg, in}, out, argedge,
                                          init);
  });
}

template <typename Backend, typename T, typename Index>
std::string RunScatter(const Backend& backend, const Segments<Index>& seg, int64_t num_positions, const T* x,
                       int64_t width, T* out, const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (seg.num_segments == 0 || width == 0 || num_positions == 0) return "";
  Schedule<Index> schedule;
  NGRA_GPU_RETURN_IF_ERROR(BuildSchedule(backend, seg, num_positions, config, &schedule));
  const Geometry geo = GeometryFor(width, 1);
  const int64_t threads = schedule.max_items * geo.tiles * geo.Lanes();
  NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
  Launch(backend, BroadcastBody<T, Index>{seg, schedule, geo, x, out}, threads);
  return LastError(backend);
}

template <typename Backend, typename T, typename Index>
std::string RunGatherGradArg(const Backend& backend, const Segments<Index>& seg, int64_t num_positions, const T* grad,
                             const Index* argedge, int64_t width, T* out, const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (seg.num_segments == 0 || width == 0 || num_positions == 0) return "";
  Schedule<Index> schedule;
  NGRA_GPU_RETURN_IF_ERROR(BuildSchedule(backend, seg, num_positions, config, &schedule));
  const Geometry geo = GeometryFor(width, 1);
  const int64_t threads = schedule.max_items * geo.tiles * geo.Lanes();
  NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
  Launch(backend, GatherGradArgBody<T, Index>{seg, schedule, geo, grad, argedge, out}, threads);
  return LastError(backend);
}

template <typename Backend, typename T, typename Index>
std::string RunInitGrad(const Backend& backend, const T* grad, const Index* argedge, int64_t n, T* out) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (n == 0) return "";
  NGRA_GPU_RETURN_IF_ERROR(CheckThreads(n));
  Launch(backend, InitGradBody<T, Index>{grad, argedge, out}, n);
  return LastError(backend);
}

template <typename Backend, typename T, typename Index>
std::string RunFusedGatherScheduled(const Backend& backend, const FusedProblem<T, Index>& problem,
                                    const Schedule<Index>& schedule, T* out, Index* argedge) {
  if (problem.num_dst == 0 || problem.in.width == 0) return "";
  const Geometry geo = GeometryFor(problem.in.width, 1);
  return WithProgram(problem.program, [&](auto program) {
    using P = decltype(program);
    return WithReduce(problem.reduce, [&](auto r) {
      return WithWeight<P>(problem.weight_kind, [&](auto w) {
        using Term = MessageTerm<P, decltype(w)::value, T, Index>;
        return ReduceWalk<decltype(r)::value>(backend, problem.csc, schedule, geo, Term{problem.csc, problem.in}, out,
                                              argedge, problem.init);
      });
    });
  });
}

template <typename Backend, typename T, typename Index>
std::string RunFusedGather(const Backend& backend, const FusedProblem<T, Index>& problem, T* out, Index* argedge,
                           const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  if (problem.num_dst == 0 || problem.in.width == 0) return "";
  Schedule<Index> schedule;
  NGRA_GPU_RETURN_IF_ERROR(WalkSchedule(backend, problem.plan.present() ? &problem.plan.forward : nullptr,
                                        problem.csc, problem.num_edges, config, &schedule));
  return RunFusedGatherScheduled(backend, problem, schedule, out, argedge);
}

// d/dweight: one weight per edge and feature maps features to lanes like the
// forward walk; one per edge (or per head) maps the edges of an item to lanes.
template <typename Program, bool kArg, WeightKind K, typename Backend, typename T, typename Index>
std::string WeightGradWalk(const Backend& backend, const FusedProblem<T, Index>& problem,
                           const Schedule<Index>& schedule, const UpstreamGrad<kArg, T, Index>& up, T* out) {
  if constexpr (K == WeightKind::kVector) {
    const Geometry geo = GeometryFor(problem.in.width, 1);
    const int64_t threads = schedule.max_items * geo.tiles * geo.Lanes();
    NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
    Launch(backend,
           VectorWeightGradBody<Program, kArg, K, T, Index>{problem.csc, schedule, geo, problem.in, up, out}, threads);
  } else {
    constexpr int kLanesLog2 = 5;
    const int64_t threads = schedule.max_items << kLanesLog2;
    NGRA_GPU_RETURN_IF_ERROR(CheckThreads(threads));
    const int64_t block = problem.in.width / problem.in.weight_width;
    LaunchWidest<kMaxRun<T>, T>(
        [&](auto run) {
          Launch(backend,
                 BlockWeightGradBody<Program, kArg, K, T, Index, decltype(run)::value>{problem.csc, schedule,
                                                                                      kLanesLog2, problem.in, up, out},
                 threads);
        },
        [&](int64_t bytes) {
          return block * static_cast<int64_t>(sizeof(T)) % bytes == 0 && OperandsAligned<K>(problem.in, bytes) &&
                 RowsAligned(up.grad, problem.in.width, bytes);
        });
  }
  return LastError(backend);
}

template <typename Backend, typename T, typename Index>
std::string RunFusedGatherGrad(const Backend& backend, const FusedProblem<T, Index>& problem, Wrt wrt, const T* grad,
                               const Index* argedge, T* out, const WalkConfig& config) {
  DeviceScope scope(backend);
  NGRA_GPU_RETURN_IF_ERROR(scope.error());
  const int64_t width = problem.in.width;
  if (width == 0) return "";
  Scratch<Backend> scratch(backend);
  const T* g = grad;
  if (problem.reduce == Reduce::kMean && problem.num_dst > 0) {
    T* scaled = scratch.template Get<T>(problem.num_dst * width);
    NGRA_GPU_RETURN_IF_ERROR(scratch.error());
    Launch(backend, ScaleByDegreeBody<T, Index>{problem.csc.indptr, width, grad, scaled}, problem.num_dst * width);
    g = scaled;
  }
  const bool extreme = problem.reduce == Reduce::kMax || problem.reduce == Reduce::kMin;
  const Segments<Index>& walked = wrt == Wrt::kXSrc ? problem.csr : problem.csc;
  if (walked.num_segments == 0) return LastError(backend);
  Schedule<Index> schedule;
  const WalkConfig walk = wrt == Wrt::kEdgeWeight ? PerEdgeWalk(config) : config;
  NGRA_GPU_RETURN_IF_ERROR(WalkSchedule(backend, PlannedWalk(problem.plan, wrt), walked, problem.num_edges, walk,
                                        &schedule));

  return WithProgram(problem.program, [&](auto program) {
    using P = decltype(program);
    return WithWeight<P>(problem.weight_kind, [&](auto w) {
      constexpr WeightKind K = decltype(w)::value;
      auto run = [&](auto arg_tag) -> std::string {
        constexpr bool kArg = decltype(arg_tag)::value;
        const UpstreamGrad<kArg, T, Index> up{g, argedge};
        if (wrt == Wrt::kXSrc) {
          // Gates differentiate [a | c] as two parts; type_select one part per type slot.
          const int64_t parts = P::kUsesType ? problem.in.src_slots : P::kSrcParts;
          using Term = SrcGradTerm<P, kArg, K, T, Index>;
          return ReduceWalk<Reduce::kSum>(backend, problem.csr, schedule, GeometryFor(width, parts),
                                          Term{problem.csr, problem.in, up}, out, static_cast<Index*>(nullptr));
        }
        if (wrt == Wrt::kXDst) {
          if constexpr (P::kUsesDst) {
            using Term = DstGradTerm<P, kArg, K, T, Index>;
            return ReduceWalk<Reduce::kSum>(backend, problem.csc, schedule, GeometryFor(width, 1),
                                            Term{problem.csc, problem.in, up}, out, static_cast<Index*>(nullptr));
          }
          return "this program has no operand x_dst to differentiate";
        }
        if constexpr (P::kUsesWeight) {
          return WeightGradWalk<P, kArg, K>(backend, problem, schedule, up, out);
        }
        return "this program has no operand edge_weight to differentiate";
      };
      return extreme ? run(std::true_type{}) : run(std::false_type{});
    });
  });
}

}  // namespace gpu
}  // namespace ngra

#endif  // NGRA_OPS_CUDA_LAUNCH_H_
