#!/bin/bash
# Call d (2026-11-30 evening): the local build loads its first tile records and its rotary
# frequency before the grid-dependency wait (angles after the tiles go out; working tree: packed
# rows removed, d.diff applied). Every [cuda] case and the decode
# sanitizers on that build, then a four-round A/B of the decode benchmark (local, RoPE off)
# against 4a41948's build (pb-next, call b's binary).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-d
#   scripts/pack-prebuilt build/pbd.tar.xz build/pb-d build/pb-next
# carry [".deps", "build/pbd.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
LAZYATTN_PREBUILT_ARCHIVE=build/pbd.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-d SANITIZE_KERNELS="decode" TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 \
  OUT=$OUT/d bash scripts/gpu-check tests sanitize 2>&1 | grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=90 scripts/ab-bench decode '/(local|rope_off)/' 4 /tmp/d/ab \
  base=build/pb-next d=build/pb-d > /dev/null 2>&1
cp /tmp/d/ab/ab.txt $OUT/ab.txt
python3 bench/tools/ab_overhead.py base=$OUT/ab.txt:base d=$OUT/ab.txt:d
grep -E "B1_L" $OUT/ab.txt
