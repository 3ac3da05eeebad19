#!/bin/bash
# Session fq2: build_fast with the layout branch outside the word loop (pb-fq2) against main (pb-rot) and fq (pb-fq): [decode] tests, A/B half (two rounds), interleaved / partial (one round).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
tar xJf build/fq2.tar.xz
R=/tmp/rfq2; mkdir -p $R
timeout 60 build/pb-fq2/lazyattn_cuda_tests "[decode]" --durations yes > $R/cuda_tests_decode.log 2>&1; echo "tests rc $?"
tail -2 $R/cuda_tests_decode.log
run() { LAZYATTN_BENCH_ROTARY=$2 LAZYATTN_BENCH_SHAPES="64x4096,1x32768,64x10272r" timeout 100 build/pb-$1/lazyattn_bench_decode \
    --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/$1_$2_$3.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/$1_$2_$3.json > $R/$1_$2_$3.txt; }
for round in 1 2; do for v in rot fq fq2; do run $v half $round; done
  echo "== round $round half: main, fq, fq2 (us)"; paste <(awk '{print $1, $2}' $R/rot_half_$round.txt) <(awk '{print $2}' $R/fq_half_$round.txt) <(awk '{print $2}' $R/fq2_half_$round.txt); done
for lay in interleaved partial; do run fq2 $lay 1; echo "== fq2 $lay"; awk '{print $1, $2}' $R/fq2_${lay}_1.txt; done
tar czf $OUT/rfq2.tgz -C $R .
