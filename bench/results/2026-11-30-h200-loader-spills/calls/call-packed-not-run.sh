#!/bin/bash
# Prepared 2026-11-30, NOT RUN (device time spent): decode with packed query rows
# (LAZYATTN_DECODE_PACKED_ROWS, CMake option of the same name; decode.cuh's header comment and
# bench/results/2026-11-30-h200-decode-raw-study/README.md describe it). GQA groups up to 8 take
# it: the decode sweep's groups 1, 4 and 8, the GQA-16 case the unpacked kernel. ptxas on the
# CPU machine: 254 / 224 / 191 registers at head dim 128 (raw-capable / local / RoPE off, bf16),
# no spills, the raw-capable build's query fragments in registers (255 / 228 / 194 without it).
# Every [cuda] case and the decode sanitizers on the packed build, then a three-round A/B of the
# decode benchmark (local, raw, RoPE off) against the default build.
# Build here first:
#   PREBUILD_BUILD_DIR=build/prebuild-packed PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DLAZYATTN_DECODE_PACKED_ROWS=ON" \
#     bash scripts/prebuild-gpu build/pb-packed
#   PREBUILD_TARGETS=lazyattn_bench_decode LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF \
#     bash scripts/prebuild-gpu build/pb-default
#   scripts/pack-prebuilt build/pbpacked.tar.xz build/pb-packed build/pb-default
# carry [".deps", "build/pbpacked.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
# (gpu-check and ab-bench find .deps/ and the toolkit themselves; the archive is unpacked once)
LAZYATTN_PREBUILT_ARCHIVE=build/pbpacked.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-packed SANITIZE_KERNELS="decode" TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 \
  OUT=$OUT/packed bash scripts/gpu-check tests sanitize 2>&1 | grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=90 scripts/ab-bench decode '/(local|raw|rope_off)/' 3 /tmp/pk/ab \
  default=build/pb-default packed=build/pb-packed > /dev/null 2>&1
cp /tmp/pk/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
python3 bench/tools/ab_overhead.py default=$OUT/ab.txt:default packed=$OUT/ab.txt:packed
python3 bench/tools/ab_overhead.py --mode raw default=$OUT/ab.txt:default packed=$OUT/ab.txt:packed
