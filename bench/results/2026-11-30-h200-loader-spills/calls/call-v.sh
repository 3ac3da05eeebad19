#!/bin/bash
# Device call v (2026-11-30): the loader addressing rows from the tile's key_r = key0 + row_in
# (ptxas: the RoPE builds' loader spills 14/20 -> 0/0), its [prefill] and [hopper] cases,
# memcheck and racecheck on the prefill sweep, the short wgmma case and the one-segment case, and
# a three-round A/B of the prefill benchmark against db6e0e4's build.
# Built here:
#   (db6e0e4) PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-head
#   mkdir build/pb-headp; cp build/pb-head/lazyattn_bench_prefill build/pb-headp/
#   (the change) PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-v
#   scripts/pack-prebuilt build/pbv.tar.xz build/pb-headp build/pb-v
# carry [".deps", "build/pbv.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbv.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-v CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma oneseg" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 OUT=$OUT/v bash scripts/gpu-check tests sanitize 2>&1 | tail -8
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/v/ab \
  head=build/pb-headp loader=build/pb-v > /dev/null 2>&1
cp /tmp/v/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
