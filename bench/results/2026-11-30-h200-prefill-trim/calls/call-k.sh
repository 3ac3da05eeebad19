#!/bin/bash
# Device call k (2026-11-30): the warp-specialised prefill whose loading warpgroup passes
# the computing warps' two prologue barriers, now CTA barriers (bar.sync 0, all 384 threads),
# before the hand-over's CTA barrier, and the hand-over probe's ninth variant in that form.
# (1) racecheck on that probe variant; (2) the build's [prefill] and [hopper] tests; (3)
# memcheck and racecheck on the sanitize step's prefill sweep and short wgmma case (the cases and
# flags of scripts/gpu-check); (4) an A/B of the prefill against call g's build (f69ee90).
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-k
#   scripts/pack-prebuilt build/pbk.tar.xz build/pb-k build/pb-g1   (pb-g1: call g's bench_prefill)
# carry [".deps", "build/pbk.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbk.tar.xz scripts/pack-prebuilt --unpack-env
W=/tmp/k; mkdir -p $W
T=build/pb-k/lazyattn_cuda_tests
$T --list-test-names-only "[handover]" | grep "CTA barriers first" | while read -r name; do
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $T "$name" > $W/ho.log 2>&1
  echo "$name: rc $?, $(grep -h 'RACECHECK SUMMARY\|test cases' $W/ho.log | tr '\n' ' ')"
done | tee $OUT/handover_racecheck.txt
timeout 150 $T "[prefill],[hopper]" --durations yes > $W/tests.log 2>&1
echo "[prefill],[hopper] rc $?: $(tail -2 $W/tests.log | head -1)" | tee $OUT/tests_summary.txt
for tool in memcheck racecheck; do
  for c in "prefill matches the float64 reference within 2x the eager error" \
           "the wgmma prefill kernels on short RAG tails"; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 $T "$c" --cuda-cases 6 > $W/san.log 2>&1
    echo "$tool '$c': rc $?, $(grep -h 'SUMMARY' $W/san.log) $(grep -h 'test cases' $W/san.log)"
  done
done | tee -a $OUT/tests_summary.txt
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 2 $W/ab before=build/pb-g1 \
  after=build/pb-k > /dev/null 2>&1
cp $W/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
