#!/bin/bash
# Call b (2026-11-30 evening): the full check of 4a41948 with the peers (decode after 32c2975).
# Build here first:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-next
#   scripts/pack-prebuilt build/pbpk.tar.xz build/pb-next
# carry [".deps", "build/pbpk.tar.xz", "build/call.sh"] (this file copied to build/call.sh);
# run with COMMIT=<sha> bash build/call.sh (about 5 minutes of device time with the start).
set -u
cd "$(dirname "$0")/.."
# (gpu-check and ab-bench find .deps/ and the toolkit themselves; the archive is unpacked once)
LAZYATTN_PREBUILT_ARCHIVE=build/pbpk.tar.xz scripts/pack-prebuilt --unpack-env
COMMIT=${COMMIT:-unknown}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-next \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY" | head -20
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/n/abp n=build/pb-next > /dev/null 2>&1
AB_TIMEOUT=120 scripts/ab-bench decode '/(local|rope_off)/' 3 /tmp/n/abd n=build/pb-next > /dev/null 2>&1
cp /tmp/n/abp/ab.txt $OUT/ab_prefill.txt; cp /tmp/n/abd/ab.txt $OUT/ab_decode.txt
grep -E "^\| (rag_tail|encode|1 x|16 x|64 x|128 x)" $OUT/check/decode_report.md
python3 bench/tools/ab_overhead.py n=$OUT/ab_prefill.txt; python3 bench/tools/ab_overhead.py n=$OUT/ab_decode.txt
