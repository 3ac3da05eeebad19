#!/bin/bash
# Session y: prefill A/B: HEAD (f2), next query built under the last tile's wgmmas before the S wait (a), after it (b); tests of b; SASS; raw decode ncu.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/y.tar.xz
R=/tmp/ry; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/device.txt 2>&1
for round in 1 2; do for v in f2 a b; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done; done
for round in 1 2; do paste <(awk '{print $1, $2}' $R/pf_f2_$round.txt) <(awk '{print $2}' $R/pf_a_$round.txt) <(awk '{print $2}' $R/pf_b_$round.txt); done
for m in raw rope_off; do
timeout 90 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
  build/pb-b/lazyattn_bench_decode --benchmark_filter="decode/B64_L4096_single/$m/" > $R/ncu_$m.txt 2>&1
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Stall|Warp Cycles Per|Issued Warp|Registers Per|Eligible|Executed Ipc|Issue Slots" $R/ncu_$m.txt | head -20
done
tar czf $OUT/ry.tgz -C $R .
