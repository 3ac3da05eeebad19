#!/bin/bash
# Session 2026-11-30c call d: where raw-form decode's time goes. main's decode (final) against
# diagnostics built from it (wrong results, timing only): d1 raw keys not rotated; d2 raw query
# rotated once per segment (not per tile); d3 both. Nsight Compute (instruction, warp state,
# scheduler, source counters) of main's kernel at 64 x 4096, raw and RoPE off.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/d.tar.xz
R=/tmp/rd; mkdir -p $R
export LAZYATTN_BENCH_SHAPES="64x4096,1x32768,64x10272r"
for round in 1 2; do for v in final d1 d2 d3; do
  timeout 90 build/pb-$v/lazyattn_bench_decode --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/dc_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/dc_${v}_$round.json > $R/dc_${v}_$round.txt
done
echo "## decode round $round: shape final d1 d2 d3 (us)"
paste <(awk '{print $1, $2}' $R/dc_final_$round.txt) <(awk '{print $2}' $R/dc_d1_$round.txt) <(awk '{print $2}' $R/dc_d2_$round.txt) <(awk '{print $2}' $R/dc_d3_$round.txt)
done | tee $R/ab.txt
export LAZYATTN_BENCH_SHAPES="64x4096"
for m in raw local rope_off; do
  timeout 100 ncu --clock-control none -k regex:decode_kernel --launch-skip 5 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis \
    -o $R/dc_$m build/pb-final/lazyattn_bench_decode --benchmark_filter="/$m/" > $R/ncu_dc_$m.log 2>&1
  ncu -i $R/dc_$m.ncu-rep --print-details all > $R/ncu_dc_$m.txt 2>&1
  ncu -i $R/dc_$m.ncu-rep --page source --csv --print-source sass > $R/ncu_dc_${m}_src.csv 2>&1
  echo "== $m"; grep -E "Executed Instructions  |Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|Duration|Registers Per|Achieved Occupancy|Memory Throughput|DRAM Throughput" $R/ncu_dc_$m.txt | head -14
done
rm -f $R/*.ncu-rep $R/*.json
tar czf $OUT/rd.tgz -C $R .
