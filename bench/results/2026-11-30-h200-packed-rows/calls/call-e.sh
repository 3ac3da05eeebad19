#!/bin/bash
# Call e (2026-11-30 evening): the decode benchmarks of 9894eb1 (call d's binary, pb-d) with the
# peers (PyTorch SDPA flash / cuDNN, the 8 GB copy) and the report; then two A/B rounds of the
# same binary (local against RoPE off). Tests and decode sanitizers of this binary: call d.
# carry [".deps", "build/pbd.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
LAZYATTN_PREBUILT_ARCHIVE=build/pbd.tar.xz scripts/pack-prebuilt --unpack-env
BENCH=decode BENCH_TIMEOUT=150 LAZYATTN_PREBUILT=build/pb-d LAZYATTN_COMMIT=9894eb1 OUT=$OUT/check \
  bash scripts/gpu-check bench peers report 2>&1 | grep -E "failed|FAIL" | head -5
grep -E "^\| (1 x|16 x|64 x|128 x)" $OUT/check/decode_report.md
AB_TIMEOUT=60 scripts/ab-bench decode '/(local|rope_off)/' 2 /tmp/e/ab e=build/pb-d > /dev/null 2>&1
cp /tmp/e/ab/ab.txt $OUT/ab.txt; python3 bench/tools/ab_overhead.py e=$OUT/ab.txt
