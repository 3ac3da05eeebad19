#!/bin/bash
# Session z: prefill A/B: HEAD (f2), c = prologue without a barrier + cs double buffer + WG0 barrier before the rebuild, d = c without the barrier move; tests of c; ncu source of encode_4096.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/z.tar.xz
R=/tmp/rz; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/device.txt 2>&1
timeout 120 build/pb-c/lazyattn_cuda_tests "[prefill]" --durations yes > $R/cuda_tests_c.log 2>&1; echo "tests rc $?"
tail -3 $R/cuda_tests_c.log
for round in 1 2; do for v in f2 c d; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done; done
for round in 1 2; do paste <(awk '{print $1, $2}' $R/pf_f2_$round.txt) <(awk '{print $2}' $R/pf_c_$round.txt) <(awk '{print $2}' $R/pf_d_$round.txt); done
for m in local rope_off; do
  timeout 60 ncu --clock-control none -k regex:prefill_wgmma --launch-skip 3 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats \
    -o $R/enc_$m build/pb-c/lazyattn_bench_prefill --benchmark_filter="encode_4096/$m/" > $R/ncu_enc_$m.log 2>&1
  ncu -i $R/enc_$m.ncu-rep --print-details all > $R/ncu_enc_$m.txt 2>&1
  ncu -i $R/enc_$m.ncu-rep --page source --csv --print-source sass > $R/ncu_enc_${m}_src.csv 2>&1
  grep -E "Executed Instructions  |Issue Slots|Warp Cycles Per Issued|Eligible Warps" $R/ncu_enc_$m.txt | head
done
ls -la $R | head -40
tar czf $OUT/rz.tgz -C $R .
