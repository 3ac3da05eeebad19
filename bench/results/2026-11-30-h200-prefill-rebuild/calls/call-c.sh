#!/bin/bash
# Session 2026-11-30b call c: prefill A/B of HEAD against v4 (the segment rebuild unrolled over its four k-steps), v5 (v3 + unrolled: cos/sin per warp by shuffles, no warpgroup barrier), v7 (v5 + the run's last tile peeled, warpgroup 1 passing the next CTA barrier after its softmax).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/c.tar.xz
R=/tmp/rc; mkdir -p $R
for round in 1 2 3; do for v in head v4 v5 v7; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape head v4 v5 v7 (us)"
paste <(awk '{print $1, $2}' $R/pf_head_$round.txt) <(awk '{print $2}' $R/pf_v4_$round.txt) <(awk '{print $2}' $R/pf_v5_$round.txt) <(awk '{print $2}' $R/pf_v7_$round.txt)
done | tee $R/ab.txt
rm -f $R/*.ncu-rep
tar czf $OUT/rc.tgz -C $R .
