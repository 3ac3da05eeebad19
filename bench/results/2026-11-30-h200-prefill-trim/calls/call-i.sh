#!/bin/bash
# Device call i (2026-11-30): (1) racecheck on each of the seven variants of the hand-over probe
# (in call h three of them did not run: Catch2 reads a comma in a test name as a list, so they
# were renamed; the earlier "wait_group ..., after setmaxnreg" runs had run its neighbour);
# (2) the build with e36e2c4's prologue change reverted and the causal mask tested against
# bound - 2 t4 with immediate column offsets (warp-specialised and two-warpgroup prefill): its
# [prefill] and [hopper] tests, racecheck's count on the short wgmma case, and an A/B against
# call g's build (f69ee90), both Hopper forms.
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-i
#   scripts/pack-prebuilt build/pbi.tar.xz build/pb-i build/pb-g1   (pb-g1: call g's bench_prefill)
# carry [".deps", "build/pbi.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbi.tar.xz scripts/pack-prebuilt --unpack-env
W=/tmp/i; mkdir -p $W
T=build/pb-i/lazyattn_cuda_tests
$T --list-test-names-only "[handover]" | grep "hand-over" | while read -r name; do
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $T "$name" > $W/ho.log 2>&1
  echo "$name: rc $?, $(grep -h 'RACECHECK SUMMARY\|test cases' $W/ho.log | tr '\n' ' ')"
done | tee $OUT/handover_racecheck.txt
timeout 150 $T "[prefill],[hopper]" --durations yes > $W/tests.log 2>&1
echo "[prefill],[hopper] rc $?: $(tail -2 $W/tests.log | head -1)" | tee $OUT/tests_summary.txt
timeout 120 compute-sanitizer --tool racecheck $T "the wgmma prefill kernels on short RAG tails" > $W/race.log 2>&1
echo "racecheck rc $?: $(grep -h 'RACECHECK SUMMARY' $W/race.log)" | tee -a $OUT/tests_summary.txt
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)(_wgmma)?/' 3 $W/ab before=build/pb-g1 \
  after=build/pb-i > /dev/null 2>&1
cp $W/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
