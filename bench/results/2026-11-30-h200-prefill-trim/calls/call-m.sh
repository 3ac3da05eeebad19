#!/bin/bash
# Prepared 2026-11-30 (compiled, not run that session); run as call m at the start of the next
# session (11:50 UTC, commit d29ed5f, H200): LAZYATTN_PREFILL_WS_MASK_SPLIT=1 (the warp-
# specialised tile loop skips the causal mask on the
# tiles every row sees whole; aimed at encode 4096's RoPE overhead, whose RoPE build recomputed
# the mask's column indices every tile) against the default build of the same commit: its
# [prefill] and [hopper] tests, memcheck and racecheck on the prefill sweep and the short wgmma
# case (scripts/gpu-check's tests and sanitize steps), and a three-round A/B of both Hopper
# forms. With the macro at 0 every kernel of bench_prefill.cu compiles to 22186ca's PTX
# (ptx_kernels_diff: SAME*), so the default column is 22186ca's kernel.
# Build here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-m
#   PREBUILD_BUILD_DIR=build/prebuild-split PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_MASK_SPLIT=1" \
#     bash scripts/prebuild-gpu build/pb-split
#   mkdir -p build/pb-m1 && cp build/pb-m/lazyattn_bench_prefill build/pb-m1/
#   scripts/pack-prebuilt build/pbm.tar.xz build/pb-split build/pb-m1
# carry [".deps", "build/pbm.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbm.tar.xz scripts/pack-prebuilt --unpack-env
# Tests and sanitizers through gpu-check (its tarball, the log's tail here), then the A/B.
LAZYATTN_PREBUILT=build/pb-split CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=60 OUT=$OUT/check bash scripts/gpu-check tests sanitize 2>&1 |
  tail -12
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)(_wgmma)?/' 3 /tmp/m/ab \
  default=build/pb-m1 split=build/pb-split > /dev/null 2>&1
cp /tmp/m/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
