#!/bin/bash
# Session 2026-11-30b call a: prefill A/B of HEAD (c1867f1) against v1 (run's last tile peeled: warpgroup 1 passes the next CTA barrier after its softmax), v3 (segment cos/sin per warp by shuffles, no warpgroup barriers), v2 (both); decode fq3 against main; v2's [cuda] tests.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/a.tar.xz; tar xJf build/fq3.tar.xz
R=/tmp/ra; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/device.txt
for round in 1 2; do for v in head v1 v2 v3; do
  timeout 100 build/pb-$v/lazyattn_bench_prefill --benchmark_filter='/(local|rope_off)/' --benchmark_out=$R/pf_${v}_$round.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/pf_${v}_$round.json > $R/pf_${v}_$round.txt
done
echo "## round $round: shape head v1 v2 v3 (us)"
paste <(awk '{print $1, $2}' $R/pf_head_$round.txt) <(awk '{print $2}' $R/pf_v1_$round.txt) <(awk '{print $2}' $R/pf_v2_$round.txt) <(awk '{print $2}' $R/pf_v3_$round.txt)
done | tee $R/ab.txt
rund() { LAZYATTN_BENCH_ROTARY=$2 LAZYATTN_BENCH_SHAPES="64x4096,1x32768,64x10272r" timeout 100 build/pb-$1/lazyattn_bench_decode \
    --benchmark_filter='/(local|raw|rope_off)/' --benchmark_out=$R/d_$1_$2_$3.json --benchmark_out_format=json > /dev/null 2>&1
  python3 bench/medians.py $R/d_$1_$2_$3.json > $R/d_$1_$2_$3.txt; }
for round in 1 2; do for v in rot fq3; do rund $v half $round; done
  echo "== decode round $round half: main, fq3 (us)"; paste <(awk '{print $1, $2}' $R/d_rot_half_$round.txt) <(awk '{print $2}' $R/d_fq3_half_$round.txt); done | tee $R/ab_decode.txt
timeout 200 build/pb-v2t/lazyattn_cuda_tests "[cuda]" --durations yes > $R/cuda_tests_v2.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_v2.log
tail -3 $R/cuda_tests_v2.log
tar czf $OUT/ra.tgz -C $R .
