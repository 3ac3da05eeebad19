#!/bin/bash
# Device call n (2026-11-30): the full check of 397f17b (the mask split the default), and Nsight
# Compute's source counters on its encode 4096 (local and RoPE off), to place the remaining RoPE
# overhead (call g: 883 against 861 loop instructions per tile; about 1,900 more prologue stall
# samples out of 45,594).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-n
#   scripts/pack-prebuilt build/pbn.tar.xz build/pb-n
# carry [".deps", "build/pbn.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
# At most 8 files come back: the check's tarball and report, then the Nsight tarball.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbn.tar.xz scripts/pack-prebuilt --unpack-env
COMMIT=${COMMIT:-unknown}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=60 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-n \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 | tail -40
W=/tmp/n; mkdir -p $W
for m in local rope_off; do
  timeout 100 ncu --clock-control none -k regex:prefill_wgmma_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --import-source yes -o $W/enc4096_$m build/pb-n/lazyattn_bench_prefill \
    --benchmark_filter="prefill/encode_4096/$m/" > $W/ncu_$m.log 2>&1
  ncu --import $W/enc4096_$m.ncu-rep --page details > $W/ncu_${m}_details.txt 2>&1
  ncu --import $W/enc4096_$m.ncu-rep --page source --csv --print-source sass > $W/ncu_${m}_sass.csv 2>&1
  gzip -f $W/ncu_${m}_sass.csv; rm -f $W/enc4096_$m.ncu-rep
  grep -E "Duration|Elapsed Cycles" $W/ncu_${m}_details.txt
done
tar -czf $OUT/ncu.tar.gz -C $W ncu_local_details.txt ncu_rope_off_details.txt ncu_local_sass.csv.gz \
  ncu_rope_off_sass.csv.gz ncu_local.log ncu_rope_off.log
