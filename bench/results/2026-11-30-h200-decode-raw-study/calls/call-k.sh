#!/bin/bash
# Session 2026-11-30c call k: raw-form decode with keys rotated in shared memory by their copier
# (r1: cos/sin in registers, query from shared memory; r2: cos/sin read from the offset table,
# query in registers) A/B against main's decode (pb-final); r1's [cuda] tests and decode
# sanitizers; prefill A/B of main (v13) against the two prepared branches (t2: angle tables out
# of line, E: epilogue out of line). Writes straight under $OUT.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/k.tar.xz
R=$OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/gpu.txt
timeout 150 build/pb-r1/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests_r1.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_r1.log; tail -3 $R/cuda_tests_r1.log
export LAZYATTN_BENCH_SHAPES="64x4096,128x8192,1x32768,64x10272r,1x10272r"
for round in 1 2; do for v in final r1 r2; do
  timeout 90 build/pb-$v/lazyattn_bench_decode --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/dc_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/dc_${v}_$round.json > $R/dc_${v}_$round.txt
done
echo "## decode round $round: shape final r1 r2 (us)"
paste <(awk '{print $1, $2}' $R/dc_final_$round.txt) <(awk '{print $2}' $R/dc_r1_$round.txt) <(awk '{print $2}' $R/dc_r2_$round.txt)
done | tee $R/ab_decode.txt
unset LAZYATTN_BENCH_SHAPES
for round in 1 2; do for v in v13 t2 E; do
  timeout 60 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## prefill round $round: shape v13 t2 E (us)"
paste <(awk '{print $1, $2}' $R/pf_v13_$round.txt) <(awk '{print $2}' $R/pf_t2_$round.txt) <(awk '{print $2}' $R/pf_E_$round.txt)
done | tee $R/ab_prefill.txt
rm -f $R/*.json
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-r1/lazyattn_cuda_tests \
    "decode matches the float64 reference within 2x the eager error" --cuda-cases 6 > $R/sanitize_${tool}_decode_r1.log 2>&1
  echo "$tool rc $?: $(tail -1 $R/sanitize_${tool}_decode_r1.log)"
done
