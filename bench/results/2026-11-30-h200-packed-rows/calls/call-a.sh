#!/bin/bash
# Call a (2026-11-30 evening): the packed-rows decode (LAZYATTN_DECODE_PACKED_ROWS=ON) at 4a41948:
# every [cuda] case and the decode sanitizers on the packed build, then a three-round A/B of the
# decode benchmark (local, raw, RoPE off) against the default build of the same commit.
# Built here:
#   PREBUILD_BUILD_DIR=build/prebuild-packed PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DLAZYATTN_DECODE_PACKED_ROWS=ON" \
#     bash scripts/prebuild-gpu build/pb-packed
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-next
#   scripts/pack-prebuilt build/pbpk.tar.xz build/pb-packed build/pb-next
# carry [".deps", "build/pbpk.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
LAZYATTN_PREBUILT_ARCHIVE=build/pbpk.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-packed SANITIZE_KERNELS="decode" TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 \
  OUT=$OUT/packed bash scripts/gpu-check tests sanitize 2>&1 | grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=90 scripts/ab-bench decode '/(local|raw|rope_off)/' 3 /tmp/pk/ab \
  default=build/pb-next packed=build/pb-packed > /dev/null 2>&1
cp /tmp/pk/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
python3 bench/tools/ab_overhead.py default=$OUT/ab.txt:default packed=$OUT/ab.txt:packed
python3 bench/tools/ab_overhead.py --mode raw default=$OUT/ab.txt:default packed=$OUT/ab.txt:packed
