#!/bin/bash
# Session rot: decode by rotary layout (half, interleaved, partial 0.5): local / raw / rope_off at 64 x 4096 and 1 x 32768 and 64 x 10272 rag.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
tar xJf build/rot.tar.xz
R=/tmp/rrot; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $R/device.txt 2>&1
for lay in half interleaved partial; do
  LAZYATTN_BENCH_ROTARY=$lay LAZYATTN_BENCH_SHAPES="64x4096,1x32768,64x10272r" timeout 150 build/pb-rot/lazyattn_bench_decode \
    --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/rot_$lay.json --benchmark_out_format=json > $R/rot_$lay.log 2>&1
  python3 bench/medians.py $R/rot_$lay.json > $R/rot_$lay.txt
  echo "== $lay"; cat $R/rot_$lay.txt
done
tar czf $OUT/rrot.tgz -C $R .
