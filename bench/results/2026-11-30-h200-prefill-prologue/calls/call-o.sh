#!/bin/bash
# Device call o (2026-11-30): the experimental one-segment form of the warp-specialised prefill
# (LAZYATTN_PREFILL_WS_ONE_SEGMENT=1: plans whose requests have one segment each, the encodings,
# take prefill_wgmma_kernel<T, true, true, true>: the query rotated once to R(m - s), no rebuild
# code) against 397f17b's build (call n's): its [prefill] and [hopper] cases (with the new
# one-segment case), memcheck and racecheck on the prefill sweep, the short wgmma case and the
# one-segment case, a three-round A/B of the warp-specialised kernel (the RAG tail and RoPE off
# run the same kernels in both builds: the control), and Nsight Compute on its encode 4096.
# Built here (the variant from the working tree of the commit that adds this script):
#   PREBUILD_BUILD_DIR=build/prebuild-split PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_ONE_SEGMENT=1" \
#     bash scripts/prebuild-gpu build/pb-o
#   mkdir -p build/pb-n1 && cp build/pb-n/lazyattn_bench_prefill build/pb-n1/
#   scripts/pack-prebuilt build/pbo.tar.xz build/pb-o build/pb-n1
# carry [".deps", "build/pbo.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbo.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-o CUDA_TESTS="[prefill],[hopper]" SANITIZE_KERNELS="prefill wgmma oneseg" \
  TEST_TIMEOUT=150 SANITIZE_TIMEOUT=90 OUT=$OUT/check bash scripts/gpu-check tests sanitize 2>&1 |
  tail -14
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 /tmp/o/ab \
  default=build/pb-n1 oneseg=build/pb-o > /dev/null 2>&1
cp /tmp/o/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
W=/tmp/o; m=local
timeout 100 ncu --clock-control none -k regex:prefill_wgmma_kernel --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --import-source yes -o $W/enc4096_$m build/pb-o/lazyattn_bench_prefill \
  --benchmark_filter="prefill/encode_4096/$m/" > $W/ncu_$m.log 2>&1
ncu --import $W/enc4096_$m.ncu-rep --page details > $W/ncu_${m}_details.txt 2>&1
ncu --import $W/enc4096_$m.ncu-rep --page source --csv --print-source sass > $W/ncu_${m}_sass.csv 2>&1
gzip -f $W/ncu_${m}_sass.csv
grep -E "Duration" $W/ncu_${m}_details.txt
tar -czf $OUT/ncu.tar.gz -C $W ncu_local_details.txt ncu_local_sass.csv.gz ncu_local.log
