#!/bin/bash
# Device call z (2026-11-30): decode's local build (kRawTiles = false) looks one tile ahead only:
# at the end of tile t it computes the angles of tile t + 1 (when its segment differs, then one
# CTA barrier) and builds its query, instead of testing the record of tile t + 2 loaded in the
# same iteration (the local form's largest stall in Nsight Compute). Its [decode], [rope] and
# [write] cases, memcheck and racecheck on the decode sweep, and a three-round A/B of the decode
# benchmark (local and RoPE off, every shape) against 7a1a24d's build (call w's binaries).
# Built here:
#   (7a1a24d) build/pb-w as call w; mkdir build/pb-wd; cp build/pb-w/lazyattn_bench_decode build/pb-wd/
#   (the change) PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-z
#   scripts/pack-prebuilt build/pbz.tar.xz build/pb-wd build/pb-z
# carry [".deps", "build/pbz.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbz.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-z CUDA_TESTS="[decode],[rope],[write]" SANITIZE_KERNELS="decode" \
  TEST_TIMEOUT=60 SANITIZE_TIMEOUT=60 OUT=$OUT/z bash scripts/gpu-check tests sanitize 2>&1 |
  grep -E "passed|failed|FAIL|SUMMARY" | head -12
AB_TIMEOUT=60 scripts/ab-bench decode '/(local|rope_off)/' 3 /tmp/z/ab \
  head=build/pb-wd lookone=build/pb-z > /dev/null 2>&1
cp /tmp/z/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
