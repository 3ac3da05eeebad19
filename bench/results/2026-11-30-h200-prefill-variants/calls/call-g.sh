#!/bin/bash
# Session g: prefill A/B HEAD~1 (f2) vs 88f4450 (g), three rounds; then the full check of 88f4450 (tests, sanitizers, benchmarks, peers, report).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/g.tar.xz
R=/tmp/rg; mkdir -p $R
for round in 1 2 3; do for v in f2 gfull; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done; done
for round in 1 2 3; do paste <(awk '{print $1, $2}' $R/pf_f2_$round.txt) <(awk '{print $2}' $R/pf_gfull_$round.txt); done
TEST_TIMEOUT=200 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=200 LAZYATTN_PREBUILT=build/pb-gfull LAZYATTN_COMMIT=88f4450 OUT=$R/check bash scripts/gpu-check build tests sanitize bench peers report > $R/gpu-check.log 2>&1
echo "gpu-check rc $?" >> $R/gpu-check.log
grep -E "passed|failed|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|rc " $R/gpu-check.log | head
grep -E "^\| (RAG|encode|rag)" $R/check/*report*.md | head -20
tar czf $OUT/rg.tgz -C $R .
