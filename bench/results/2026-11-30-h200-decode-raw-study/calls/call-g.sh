#!/bin/bash
# Session 2026-11-30c call g: f1 (94540f9: decode tile records three tiles ahead) A/B against
# main's decode (final), 3 rounds, six shapes; then the full check of 94540f9 (pb-f1: its tests
# and bench_decode, e660d33's bench_prefill: prefill code unchanged).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/g.tar.xz
R=/tmp/rg; mkdir -p $R
export LAZYATTN_BENCH_SHAPES="1x32768,16x16384,64x4096,128x8192,64x10272r,1x10272r,1x10272"
for round in 1 2 3; do for v in final f1; do
  timeout 90 build/pb-$v/lazyattn_bench_decode --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/dc_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/dc_${v}_$round.json > $R/dc_${v}_$round.txt
done
echo "## decode round $round: shape final f1 (us)"
paste <(awk '{print $1, $2}' $R/dc_final_$round.txt) <(awk '{print $2}' $R/dc_f1_$round.txt)
done | tee $R/ab.txt
unset LAZYATTN_BENCH_SHAPES
rm -f $R/*.json
TEST_TIMEOUT=200 SANITIZE_TIMEOUT=90 BENCH_TIMEOUT=200 LAZYATTN_PREBUILT=build/pb-f1 LAZYATTN_COMMIT=94540f9 OUT=$R/check bash scripts/gpu-check build tests sanitize bench peers report > $R/gpu-check.log 2>&1
echo "gpu-check rc $?" >> $R/gpu-check.log
grep -E "passed|failed|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|rc " $R/gpu-check.log | head
grep -E "^\| (RAG|encode|rag|B=|[0-9])" $R/check/*report*.md | head -40
tar czf $OUT/rg.tgz -C $R .
