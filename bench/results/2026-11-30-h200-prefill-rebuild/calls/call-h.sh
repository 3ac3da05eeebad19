#!/bin/bash
# Session 2026-11-30b call h: prefill A/B of 4fcfdac (m7) against v11 (both query rotations out of line, __noinline__), v12 (the segment build only), v13 (the prologue rotation only).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/h.tar.xz
R=/tmp/rh; mkdir -p $R
for round in 1 2 3; do for v in m7 v11 v12 v13; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape m7 v11 v12 v13 (us)"
paste <(awk '{print $1, $2}' $R/pf_m7_$round.txt) <(awk '{print $2}' $R/pf_v11_$round.txt) <(awk '{print $2}' $R/pf_v12_$round.txt) <(awk '{print $2}' $R/pf_v13_$round.txt)
done | tee $R/ab.txt
tar czf $OUT/rh.tgz -C $R .
