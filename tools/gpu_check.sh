#!/usr/bin/env bash
# A lent GPU's checks in one command (no TensorFlow needed there), each step
# under its own time limit so that one slow step cannot eat the lease:
#
#   tools/gpu_check.sh OUT_DIR [STEPS]      # STEPS: comma-separated, default all
#
# Steps, in this order: build (harness + bench library for sm_$NGRA_TF_CUDA_ARCHS,
# default 90; skipped when build/cuda/cuda_harness is there), quick (harness
# --mode=gpu --quick, then build/cuda/generated_code_check where it was built:
# generated edge code on the GPU against the CPU walks; its nvcc build takes ~7
# minutes, one thread, so build it here with tools/build_cuda.py
# --generated-check and carry it), bench (tools/bench_cuda.py $BENCH_ARGS), full (the whole
# harness: the goal is 3 minutes), memcheck and racecheck (compute-sanitizer over
# the quick set narrowed by $MEMCHECK_FILTER / $RACECHECK_FILTER). OUT_DIR gets
# one log per step and summary.txt (device, rc and seconds per step): eight
# files at most, what the device tool brings back.
#
# Seen on 2026-11-27: the build takes ~190 s on the lent machine's 16 cores, so
# build here first (NGRA_TF_CUDA_ARCHS=90 python3 tools/build_cuda.py --harness
# --bench-lib needs nvcc, no GPU) and carry build/cuda/cuda_harness and
# build/cuda/libngra_bench.so with their .flags files, run with CARRIED=1: the
# flags name the repository's path, which differs there, and the copies'
# times must not look older than the sources, or the bench library is built
# again (51 s). On an H200 the quick harness took 104-118 s, memcheck over
# "d=1 " 38-45 s, racecheck over "d=1 chunk=256" 81 s (over "d=1 " it did not
# finish its first group in 110 s); the whole harness did not finish its first
# group in 180 s, and bench with --widths=128 took 190 s. On 2026-11-28 (H200):
# quick 105 s (the generated check 3 s of it), bench --widths=128 157 s (37 s of
# it compiling the bench library's object again, which its carried library did
# not need: no longer done), memcheck 37 s, racecheck 73 s, and the whole
# harness again stopped at 180 s, after its ops groups (172 s).
set -u
out=${1:-build/gpu-check}
steps=${2:-build,quick,bench,full,memcheck,racecheck}
arch=${NGRA_TF_CUDA_ARCHS:-90}
bench_args=${BENCH_ARGS:---passes=forward,gate}
memcheck_filter=${MEMCHECK_FILTER:-d=1 }
racecheck_filter=${RACECHECK_FILTER:-d=1 chunk=256}
mkdir -p "$out"
cd "$(dirname "$0")/.."

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv,noheader
  nvcc --version | tail -1
  python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
} >"$out/summary.txt" 2>&1

step() {
  local name=$1 limit=$2
  shift 2
  case ",$steps," in *",$name,"*) ;; *) return 0 ;; esac
  local start rc
  start=$(date +%s%N)
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  rc=$?
  printf '%-10s rc=%-3s %7.1f s (limit %s s)\n' "$name" "$rc" \
    "$(( ($(date +%s%N) - start) / 1000000 ))e-3" "$limit" | tee -a "$out/summary.txt"
  tail -n 4 "$out/$name.txt"
}

export NGRA_TF_CUDA_ARCHS=$arch PYTHONUNBUFFERED=1
if [ "${CARRIED:-0}" = 1 ]; then  # binaries built on another machine from this very tree
  for f in build/cuda/cuda_harness build/cuda/libngra_bench.so build/cuda/generated_code_check; do
    [ -f "$f.flags" ] && sed -i "s|-I [^ ]* |-I $PWD |" "$f.flags" && touch "$f"
  done
fi
[ -x build/cuda/cuda_harness ] || step build 240 python3 tools/build_cuda.py --harness --bench-lib
# shellcheck disable=SC2016
step quick 210 sh -c 'build/cuda/cuda_harness --mode=gpu --quick; rc=$?
  if [ -x build/cuda/generated_code_check ]; then build/cuda/generated_code_check || rc=1; fi; exit $rc'
# shellcheck disable=SC2086
step bench 240 python3 tools/bench_cuda.py $bench_args --arch "$arch" --json="$out/bench.json"
step full 180 build/cuda/cuda_harness --mode=gpu
# --exact-buffers: memcheck sees whole allocations only, so each buffer is one of its own, not part of a slab.
step memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/cuda/cuda_harness --mode=gpu --quick \
  --exact-buffers "--filter=$memcheck_filter"
step racecheck 120 compute-sanitizer --tool racecheck --error-exitcode 9 build/cuda/cuda_harness --mode=gpu --quick \
  "--filter=$racecheck_filter"
cat "$out/summary.txt"
