#!/bin/bash
# Device call h (2026-11-30): (1) racecheck on each variant of the hand-over probe, now seven
# (the computing warps past a named barrier of their own, or an mbarrier wait, before reading);
# (2) the build with the first run's segment length loaded in the prologue and K(tile_begin)
# waited for after the query is built (warp-specialised prefill): its [prefill] and [hopper]
# tests, racecheck's summary and first hazards on the short wgmma case, and an A/B against call
# g's build; (3) the end-to-end RAG sweep (Zipf, rates 4, 12, 24) with that build's kernels.
# Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-h
#   cmake --build build/rag-gpu --target lazyattn_rag_bench_cuda   (configured as in
#     bench/results/2026-11-30-h200-4fcfdac-rag/README.md)
#   mkdir -p build/pb-g1 build/rag-bin && cp build/pb-g/lazyattn_bench_prefill build/pb-g1/ &&
#     cp build/rag-gpu/bench/rag/lazyattn_rag_bench_cuda build/rag-bin/
#   scripts/pack-prebuilt build/pbh.tar.xz build/pb-h build/pb-g1 build/rag-bin
# carry [".deps", "build/pbh.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbh.tar.xz scripts/pack-prebuilt --unpack-env
mkdir -p build/rag-gpu/bench/rag && cp build/rag-bin/lazyattn_rag_bench_cuda build/rag-gpu/bench/rag/
W=/tmp/h; mkdir -p $W
T=build/pb-h/lazyattn_cuda_tests
$T --list-test-names-only "[handover]" | grep "hand-over" | while read -r name; do
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $T "$name" > $W/ho.log 2>&1
  echo "$name: rc $?, $(grep -h 'RACECHECK SUMMARY' $W/ho.log)"
done | tee $OUT/handover_racecheck.txt
timeout 150 $T "[prefill],[hopper]" --durations yes > $W/tests.log 2>&1
echo "[prefill],[hopper] rc $?: $(tail -2 $W/tests.log | head -1)" | tee $OUT/tests_summary.txt
timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 12 \
  $T "the wgmma prefill kernels on short RAG tails" > $W/race.log 2>&1
echo "racecheck rc $?: $(grep -h 'RACECHECK SUMMARY' $W/race.log)" | tee -a $OUT/tests_summary.txt
grep -h "hazard detected\|Read Thread\|Write Thread" $W/race.log | head -40 >> $OUT/tests_summary.txt
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 $W/ab before=build/pb-g1 after=build/pb-h \
  > /dev/null 2>&1
cp $W/ab/ab.txt $OUT/ab.txt; cat $OUT/ab.txt
LAZYATTN_COMMIT=${COMMIT:-unknown} OUT=$OUT/rag bash scripts/rag-gpu --no-build --modes lazy,block-attention \
  --popularity zipf --rates 4,12,24 --budget-s 200 2>&1 | tail -12
