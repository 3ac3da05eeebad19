#!/bin/bash
# Device call d (2026-11-30): commit 4th of the series (the softmax's tile keys rolled instead of
# whole records; the loader signals landed, fenced stages) against call c's build (00f177f), with
# and without LAZYATTN_PREFILL_WS_LANDED; the [prefill] tests; racecheck's hazard details on the
# short wgmma case. Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-d
#   PREBUILD_BUILD_DIR=build/prebuild-l0 PREBUILD_TARGETS=lazyattn_bench_prefill \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_LANDED=0" \
#     bash scripts/prebuild-gpu build/pb-d0
# carry [".deps", "build/pb-c", "build/pb-d", "build/pb-d0", "build/call.sh"].
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
R=/tmp/rd; mkdir -p $R
timeout 150 build/pb-d/lazyattn_cuda_tests "[prefill]" --durations yes > $R/t_prefill.log 2>&1
echo "prefill tests rc $?" | tee -a $R/t_prefill.log; tail -2 $R/t_prefill.log
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off|local_wgmma|rope_off_wgmma)/' 2 $R/ab \
  c=build/pb-c d0=build/pb-d0 d=build/pb-d
timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 \
  build/pb-d/lazyattn_cuda_tests "the wgmma prefill kernels on short RAG tails" > $R/racecheck_d.log 2>&1
echo "racecheck rc $?: $(tail -1 $R/racecheck_d.log)"
head -c 200000 $R/racecheck_d.log > $R/racecheck_d_head.log; rm $R/racecheck_d.log
tar czf $OUT/rd.tgz -C $R .
