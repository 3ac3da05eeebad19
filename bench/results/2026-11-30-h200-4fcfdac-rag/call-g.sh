#!/bin/bash
# Session 2026-11-30b call g: where encode 4096's RoPE cost sits: 4fcfdac (m7) against d3a (diagnostic: the prologue's query rotation and first build skipped, wrong results) and d3b (d3a and no cos/sin prologue either); then the end-to-end RAG sweep on 4fcfdac's kernels.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/g.tar.xz
R=/tmp/rg; mkdir -p $R
for round in 1 2; do for v in m7 d3a d3b; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape m7 d3a d3b (us)"
paste <(awk '{print $1, $2}' $R/pf_m7_$round.txt) <(awk '{print $2}' $R/pf_d3a_$round.txt) <(awk '{print $2}' $R/pf_d3b_$round.txt)
done | tee $R/ab.txt
tar czf $OUT/rg.tgz -C $R .
LAZYATTN_COMMIT=4fcfdac bash scripts/rag-gpu --no-build --modes lazy,block-attention --popularity zipf --rates 4,12,24 --budget-s 300
