#!/bin/bash
# Session w: prefill A/B: HEAD (f2), e = query fragments loaded early (WG0 before its barrier, WG1 before the rescale), ff = e + one-segment prologue + prescaled cos/sin; tests of ff; ncu source of ff encode_4096.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/w.tar.xz
R=/tmp/rw; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/device.txt 2>&1
timeout 120 build/pb-ff/lazyattn_cuda_tests "[prefill]" --durations yes > $R/cuda_tests_ff.log 2>&1; echo "tests rc $?"
tail -3 $R/cuda_tests_ff.log
for round in 1 2 3; do for v in f2 e ff; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done; done
for round in 1 2 3; do paste <(awk '{print $1, $2}' $R/pf_f2_$round.txt) <(awk '{print $2}' $R/pf_e_$round.txt) <(awk '{print $2}' $R/pf_ff_$round.txt); done
for m in local rope_off; do
  timeout 60 ncu --clock-control none -k regex:prefill_wgmma --launch-skip 3 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --section SchedulerStats \
    -o $R/enc_$m build/pb-ff/lazyattn_bench_prefill --benchmark_filter="encode_4096/$m/" > $R/ncu_enc_$m.log 2>&1
  ncu -i $R/enc_$m.ncu-rep --print-details all > $R/ncu_enc_$m.txt 2>&1
  ncu -i $R/enc_$m.ncu-rep --page source --csv --print-source sass > $R/ncu_enc_${m}_src.csv 2>&1
  grep -E "Executed Instructions  |Issue Slots|Warp Cycles Per Issued|Eligible Warps" $R/ncu_enc_$m.txt | head
done
ls -la $R | head -40
rm -f $R/*.ncu-rep
tar czf $OUT/rw.tgz -C $R .
