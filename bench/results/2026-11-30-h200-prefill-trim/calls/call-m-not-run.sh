#!/bin/bash
# Prepared 2026-11-30, NOT RUN (this session's device time was spent): the experimental
# LAZYATTN_PREFILL_WS_MASK_SPLIT=1 (the warp-specialised tile loop skips the causal mask on the
# tiles every row sees whole; aimed at encode 4096's RoPE overhead, whose RoPE build recomputed
# the mask's column indices every tile) against the default build of the same commit: its
# [prefill] and [hopper] tests, memcheck and racecheck on the prefill sweep and the short wgmma
# case, and a three-round A/B of both Hopper forms. With the macro at 0 every kernel of
# bench_prefill.cu compiles to 22186ca's PTX (ptx_kernels_diff: SAME*), so the default column
# is 22186ca's kernel.
# Build here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-m
#   PREBUILD_BUILD_DIR=build/prebuild-split PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_MASK_SPLIT=1" \
#     bash scripts/prebuild-gpu build/pb-split
#   mkdir -p build/pb-m1 && cp build/pb-m/lazyattn_bench_prefill build/pb-m1/
#   scripts/pack-prebuilt build/pbm.tar.xz build/pb-split build/pb-m1
# carry [".deps", "build/pbm.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbm.tar.xz scripts/pack-prebuilt --unpack-env
W=/tmp/m; mkdir -p $W
T=build/pb-split/lazyattn_cuda_tests
timeout 150 $T "[prefill],[hopper]" --durations yes > $W/tests.log 2>&1
echo "[prefill],[hopper] rc $?: $(tail -2 $W/tests.log | head -1)" | tee $OUT/tests_summary.txt
for tool in memcheck racecheck; do
  for c in "prefill matches the float64 reference within 2x the eager error" \
           "the wgmma prefill kernels on short RAG tails"; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 $T "$c" --cuda-cases 6 > $W/san.log 2>&1
    echo "$tool '$c': rc $?, $(grep -h 'SUMMARY' $W/san.log) $(grep -h 'test cases' $W/san.log)"
  done
done | tee -a $OUT/tests_summary.txt
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)(_wgmma)?/' 3 $W/ab default=build/pb-m1 \
  split=build/pb-split > /dev/null 2>&1
cp $W/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
