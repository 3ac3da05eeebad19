#!/bin/bash
# Call c (2026-11-30 evening): the decode's first query angles computed before the grid-dependency
# wait (working tree on 4a41948, committed after this call). Every [cuda] case and the decode
# sanitizers on that build, then a four-round A/B of the decode benchmark (local, raw, RoPE off)
# against 4a41948's build (pb-next, call b's binary).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-opt
#   scripts/pack-prebuilt build/pbc.tar.xz build/pb-opt build/pb-next
# carry [".deps", "build/pbc.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
LAZYATTN_PREBUILT_ARCHIVE=build/pbc.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-opt SANITIZE_KERNELS="decode" TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 \
  OUT=$OUT/opt bash scripts/gpu-check tests sanitize 2>&1 | grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=90 scripts/ab-bench decode '/(local|raw|rope_off)/' 4 /tmp/c/ab \
  base=build/pb-next opt=build/pb-opt > /dev/null 2>&1
cp /tmp/c/ab/ab.txt $OUT/ab.txt
python3 bench/tools/ab_overhead.py base=$OUT/ab.txt:base opt=$OUT/ab.txt:opt
python3 bench/tools/ab_overhead.py --mode raw base=$OUT/ab.txt:base opt=$OUT/ab.txt:opt
grep -E "B1_L" $OUT/ab.txt
