#!/bin/bash
# Session 2026-11-30c call e: e1 (the look-ahead query's work spread over the four warps: build
# units 4 lane + warp, angles on the upper threads first) A/B against main's decode (final), 3
# rounds, protocol shapes with raw; e1's [cuda] tests and decode memcheck / racecheck.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/e.tar.xz
R=/tmp/re; mkdir -p $R
export LAZYATTN_BENCH_SHAPES="1x32768,16x16384,64x4096,128x8192,64x10272r,1x10272r"
for round in 1 2 3; do for v in final e1; do
  timeout 90 build/pb-$v/lazyattn_bench_decode --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/dc_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/dc_${v}_$round.json > $R/dc_${v}_$round.txt
done
echo "## decode round $round: shape final e1 (us)"
paste <(awk '{print $1, $2}' $R/dc_final_$round.txt) <(awk '{print $2}' $R/dc_e1_$round.txt)
done | tee $R/ab.txt
unset LAZYATTN_BENCH_SHAPES
timeout 150 build/pb-e1/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests_e1.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_e1.log; tail -2 $R/cuda_tests_e1.log
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-e1/lazyattn_cuda_tests \
    "decode matches the float64 reference within 2x the eager error" --cuda-cases 6 > $R/sanitize_${tool}_decode_e1.log 2>&1
  echo "$tool rc $?: $(tail -1 $R/sanitize_${tool}_decode_e1.log)"
done
rm -f $R/*.json
tar czf $OUT/re.tgz -C $R .
