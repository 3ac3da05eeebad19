#!/bin/bash
# Device call g (2026-11-30): the full check of the commit with the one-load tail trim
# (visible_tile_end) and the two experimental macros removed, an A/B of its prefill against
# adf2701's (call f's default build), Nsight Compute's source counters on its encode 4096 (local
# and RoPE off), and racecheck's per-hazard report on the short wgmma case.
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_decode lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-g
#   mkdir -p build/pb-f1 && cp build/pb-f/lazyattn_bench_prefill build/pb-f1/
#   scripts/pack-prebuilt build/pbg.tar.xz build/pb-g build/pb-f1
# carry [".deps", "build/pbg.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
# At most 8 files come back: the check's tarball and report, then one file per step.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbg.tar.xz scripts/pack-prebuilt --unpack-env
COMMIT=${COMMIT:-unknown}
TEST_TIMEOUT=150 SANITIZE_TIMEOUT=60 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-g \
  LAZYATTN_COMMIT=$COMMIT OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 | tail -40
W=/tmp/g; mkdir -p $W
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 $W/ab before=build/pb-f1 after=build/pb-g \
  > /dev/null 2>&1
cp $W/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
for m in local rope_off; do
  timeout 100 ncu --clock-control none -k regex:prefill_wgmma_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --import-source yes -o $W/enc4096_$m build/pb-g/lazyattn_bench_prefill \
    --benchmark_filter="prefill/encode_4096/$m/" > $W/ncu_$m.log 2>&1
  ncu --import $W/enc4096_$m.ncu-rep --page details > $W/ncu_${m}_details.txt 2>&1
  ncu --import $W/enc4096_$m.ncu-rep --page source --csv --print-source sass > $W/ncu_${m}_sass.csv 2>&1
  gzip -f $W/ncu_${m}_sass.csv; rm -f $W/enc4096_$m.ncu-rep
  grep -E "Duration|Elapsed Cycles" $W/ncu_${m}_details.txt
done
tar -czf $OUT/ncu.tar.gz -C $W ncu_local_details.txt ncu_rope_off_details.txt ncu_local_sass.csv.gz \
  ncu_rope_off_sass.csv.gz ncu_local.log ncu_rope_off.log
timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 40 \
  build/pb-g/lazyattn_cuda_tests "the wgmma prefill kernels on short RAG tails" > $W/race.log 2>&1
echo "racecheck rc $?: $(grep -c 'Race reported\|Hazard' $W/race.log) report lines"
head -c 400000 $W/race.log | gzip > $OUT/racecheck_wgmma_hazards.log.gz
