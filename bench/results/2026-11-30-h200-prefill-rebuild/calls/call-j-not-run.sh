#!/bin/bash
# Session 2026-11-30b call j: prefill A/B of e660d33 (v13) against t2 (the prologue's angle tables, once per CTA, out of line too: wgmma_rope_tables); t2's [cuda] tests and compute-sanitizer memcheck / racecheck on the prefill sweep. Writes straight under $OUT.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/j.tar.xz
R=$OUT
for round in 1 2; do for v in v13 t2; do
  timeout 60 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape v13 t2 (us)"
paste <(awk '{print $1, $2}' $R/pf_v13_$round.txt) <(awk '{print $2}' $R/pf_t2_$round.txt)
done | tee $R/ab.txt
rm -f $R/*.json
timeout 90 build/pb-t2/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests_t2.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_t2.log; tail -2 $R/cuda_tests_t2.log
for tool in memcheck racecheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-t2/lazyattn_cuda_tests \
    "prefill matches the float64 reference within 2x the eager error" --cuda-cases 6 > $R/sanitize_${tool}_prefill_t2.log 2>&1
  echo "$tool rc $?: $(tail -1 $R/sanitize_${tool}_prefill_t2.log)"
done
