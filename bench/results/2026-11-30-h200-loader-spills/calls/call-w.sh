#!/bin/bash
# Device call w (2026-11-30): the full check of 7a1a24d (the loader without spills), then three
# more rounds of the prefill benchmark (local and RoPE off) and of decode at 1 x 10272, the same
# binaries, for the RoPE overheads' spread.
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-w
#   scripts/pack-prebuilt build/pbw.tar.xz build/pb-w
# carry [".deps", "build/pbw.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbw.tar.xz scripts/pack-prebuilt --unpack-env
COMMIT=${COMMIT:-7a1a24d}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-w \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY" | head -20
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/w/abp w=build/pb-w > /dev/null 2>&1
AB_TIMEOUT=120 scripts/ab-bench decode 'B1_L10272.*/(local|rope_off)/' 3 /tmp/w/abd w=build/pb-w > /dev/null 2>&1
cp /tmp/w/abp/ab.txt $OUT/ab_prefill.txt; cp /tmp/w/abd/ab.txt $OUT/ab_decode.txt
cat $OUT/check/decode_report.md | grep -E "^\| (rag_tail|encode|1 x|64 x 4096)" ; cat $OUT/ab_prefill.txt $OUT/ab_decode.txt
