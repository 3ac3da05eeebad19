#!/bin/bash
# Session fq: decode's look-ahead query build for interleaved and partial rotary (pb-fq) against main (pb-rot): [cuda] tests, decode sanitizers, A/B by rotary layout.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/fq.tar.xz
R=/tmp/rfq; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/device.txt 2>&1
timeout 150 build/pb-fq/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests.log 2>&1; echo "tests rc $?"
tail -3 $R/cuda_tests.log; grep "look-ahead" $R/cuda_tests.log
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-fq/lazyattn_cuda_tests "decode's look-ahead query build in every rotary layout" > $R/sanitize_${tool}_lookahead.log 2>&1
  echo "$tool: rc $? $(tail -1 $R/sanitize_${tool}_lookahead.log)"
done
for round in 1 2; do for lay in half interleaved partial; do for v in rot fq; do
  LAZYATTN_BENCH_ROTARY=$lay LAZYATTN_BENCH_SHAPES="64x4096,1x32768,64x10272r" timeout 150 build/pb-$v/lazyattn_bench_decode \
    --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/${v}_${lay}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/${v}_${lay}_$round.json > $R/${v}_${lay}_$round.txt
done; echo "== round $round $lay: main vs new (us)"; paste <(awk '{print $1, $2}' $R/rot_${lay}_$round.txt) <(awk '{print $2}' $R/fq_${lay}_$round.txt); done; done
tar czf $OUT/rfq.tgz -C $R .
