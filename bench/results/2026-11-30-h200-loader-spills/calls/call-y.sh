#!/bin/bash
# Device call y (2026-11-30): the segment cos/sin double-buffered per warpgroup, so a rebuild
# passes one warpgroup barrier instead of two (no code duplicated; call x's ahead form ran the
# RAG tail 12% slower): its [prefill] and [hopper] cases, memcheck and racecheck on the prefill
# sweep, the short wgmma case and the one-segment case, and a three-round A/B of the prefill
# benchmark against 7a1a24d's build (call w's binaries).
# Built here:
#   (7a1a24d) build/pb-w as call w; mkdir build/pb-wp; cp build/pb-w/lazyattn_bench_prefill build/pb-wp/
#   (the change) PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-y
#   scripts/pack-prebuilt build/pby.tar.xz build/pb-wp build/pb-y
# carry [".deps", "build/pby.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pby.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-y CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma oneseg" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 OUT=$OUT/y bash scripts/gpu-check tests sanitize 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/y/ab \
  loader=build/pb-wp dbuf=build/pb-y > /dev/null 2>&1
cp /tmp/y/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
