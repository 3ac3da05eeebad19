#!/bin/bash
# Prepared 2026-11-30, NOT RUN (no device time left): the packed query rows of branch
# next/decode-packed-rows against main. Build first, on the CPU machine:
#   git worktree add /tmp/wt-pack next/decode-packed-rows && cd /tmp/wt-pack
#   PREBUILD_TARGETS="lazyattn_bench_decode lazyattn_cuda_tests" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu /work/main/build/pb-pk
#   PREBUILD_BUILD_DIR=build/prebuild-pks PREBUILD_TARGETS=lazyattn_bench_decode \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_DECODE_PACK_QSMEM" \
#     bash scripts/prebuild-gpu /work/main/build/pb-pks
#   (and main's bench_decode into build/pb-main), then in /work/main:
#   tar -cJf build/pk.tar.xz build/pb-main/lazyattn_bench_decode build/pb-pk build/pb-pks/lazyattn_bench_decode
# Device call: carry [".deps", "build/pk.tar.xz", "build/call-pk.sh"] (this file copied there).
# Both were left in build/ on 2026-11-30: branch d35f874, main 0a82796 (decode as affc149).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/pk.tar.xz
R=/tmp/rpk; mkdir -p $R
# Correctness first: the decode cases (the sweep runs the packed builds, GQA groups 1, 4, 8; the
# group-16 case the unpacked ones), then the decode sanitizers.
timeout 150 build/pb-pk/lazyattn_cuda_tests "[decode]" --durations yes > $R/cuda_tests_pk.log 2>&1; echo "tests rc $?" | tee -a $R/cuda_tests_pk.log; tail -2 $R/cuda_tests_pk.log
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-pk/lazyattn_cuda_tests \
    "decode matches the float64 reference within 2x the eager error" --cuda-cases 6 > $R/sanitize_${tool}_pk.log 2>&1
  echo "$tool rc $?: $(tail -1 $R/sanitize_${tool}_pk.log)"
done
LAZYATTN_BENCH_SHAPES="1x32768,16x16384,64x4096,128x8192,64x10272r,1x10272r" \
  scripts/ab-bench decode '/(local|raw|rope_off)/' 3 $R/ab main=build/pb-main pk=build/pb-pk pks=build/pb-pks
# The other rotary layouts (the packed build's partial-rotary path reads the partner's query
# fragments from shared memory).
for layout in interleaved partial; do
  LAZYATTN_BENCH_ROTARY=$layout LAZYATTN_BENCH_SHAPES="64x4096,1x32768" \
    scripts/ab-bench decode '/(raw|rope_off)/' 1 $R/rot_$layout main=build/pb-main pk=build/pb-pk
done
tar czf $OUT/rpk.tgz -C $R .
