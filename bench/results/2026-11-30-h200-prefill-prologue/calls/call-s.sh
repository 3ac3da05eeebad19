#!/bin/bash
# Device call s (2026-11-30): the warp-specialised prefill's loader with each row's swizzled
# offset taken as its first row's plus a constant (the swizzle's phase repeats every 8 rows), so
# that ptxas no longer keeps eight offsets live across the loop and spills them (calls n, o: 11
# local loads per tile in the RoPE build's loader, 3 in RoPE off's): its [prefill] and [hopper]
# cases, memcheck and racecheck on the prefill sweep, the short wgmma case and the one-segment
# case, and a three-round A/B against cacbbf3's build (call p's).
# Built here (the working tree of the commit that adds this script):
#   PREBUILD_BUILD_DIR=build/prebuild-split PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=" bash scripts/prebuild-gpu build/pb-s
#   mkdir -p build/pb-q1 && cp build/pb-q/lazyattn_bench_prefill build/pb-q1/
#   scripts/pack-prebuilt build/pbs.tar.xz build/pb-s build/pb-q1
# carry [".deps", "build/pbs.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbs.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-s CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma oneseg" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 OUT=$OUT/check bash scripts/gpu-check tests sanitize 2>&1 |
  tail -9
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/s/ab \
  cacbbf3=build/pb-q1 loader=build/pb-s > /dev/null 2>&1
cp /tmp/s/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
