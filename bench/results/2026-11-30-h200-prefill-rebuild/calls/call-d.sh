#!/bin/bash
# Session 2026-11-30b call d: [cuda] tests of 4fcfdac (m7: the segment rebuild unrolled); prefill A/B of m7 against v9 (the first segment's query built from the prologue's registers) and v8 (the next segment's cos/sin computed a run ahead into a spare buffer: a predicted rebuild has no angle and no barrier).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/d.tar.xz
R=/tmp/rd; mkdir -p $R
timeout 200 build/pb-m7/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests_m7.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_m7.log
tail -3 $R/cuda_tests_m7.log
for round in 1 2 3; do for v in m7 v9 v8; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape m7 v9 v8 (us)"
paste <(awk '{print $1, $2}' $R/pf_m7_$round.txt) <(awk '{print $2}' $R/pf_v9_$round.txt) <(awk '{print $2}' $R/pf_v8_$round.txt)
done | tee $R/ab.txt
tar czf $OUT/rd.tgz -C $R .
