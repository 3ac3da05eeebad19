#!/bin/bash
# Device call p (2026-11-30): the full check of cacbbf3 (the one-segment form the default), then
# the experimental LAZYATTN_PREFILL_WS_EARLY_ROTATE=1 (the RoPE builds wait for K(tile_begin)
# after the query's rotation, not before): its [prefill] and [hopper] cases, memcheck and
# racecheck on the prefill sweep, the short wgmma case and the one-segment case, and a
# three-round A/B of the warp-specialised kernel against cacbbf3's build (RoPE off: the control).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-q
#   PREBUILD_BUILD_DIR=build/prebuild-split PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_EARLY_ROTATE=1" \
#     bash scripts/prebuild-gpu build/pb-p
#   scripts/pack-prebuilt build/pbpq.tar.xz build/pb-q build/pb-p
# carry [".deps", "build/pbpq.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
# At most 8 files come back: the check's five, the variant's tarball, the A/B.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbpq.tar.xz scripts/pack-prebuilt --unpack-env
COMMIT=${COMMIT:-unknown}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-q \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY|rag_tail|encode_|^\| 1 x|^\| 64 x 10272" | head -40
LAZYATTN_PREBUILT=build/pb-p CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma oneseg" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 OUT=$OUT/early bash scripts/gpu-check tests sanitize 2>&1 | tail -9
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/p/ab \
  default=build/pb-q early=build/pb-p > /dev/null 2>&1
cp /tmp/p/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
