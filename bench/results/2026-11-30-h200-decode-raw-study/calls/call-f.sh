#!/bin/bash
# Session 2026-11-30c call f: per-CTA timeline (diagnostic build -DLAZYATTN_DECODE_TIMELINE, main's
# code) of batch-1 decode, RAG layout and one segment of the same length, local and RoPE off:
# where the RAG layout's local-form overhead (+2.4-3.0%) goes. Three passes.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/f.tar.xz
R=$OUT
export LAZYATTN_BENCH_SHAPES="1x10272r,1x10272"
for pass in 1 2 3; do
  LAZYATTN_BENCH_TIMELINE=$R/timeline_$pass.txt timeout 60 build/pb-tlm/lazyattn_bench_decode --benchmark_filter='/(local|rope_off)/' > $R/bench_$pass.txt 2>&1
done
cat $R/timeline_1.txt; grep _median $R/bench_*.txt
