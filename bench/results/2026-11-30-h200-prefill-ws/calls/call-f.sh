#!/bin/bash
# Ran at the start of the next session (2026-11-30, 10:24 UTC), binaries carried packed
# (scripts/pack-prebuilt build/pbf.tar.xz build/pb-f build/pb-direct build/pb-landed): where the
# warp-specialised prefill's RoPE
# overhead at encode 4096 goes (+10.1% in call e: about 5 us per CTA if charged per CTA, 8 us at
# encode 16384). Nsight Compute on one launch of the local and the RoPE-off build (source
# counters give the stall samples per SASS line: the prologue before the first wgmma against the
# tile loop), plus racecheck's per-hazard report on the short wgmma case and its verdict on each
# variant of the hand-over probe (tests/cuda/test_handover.cu). Then the experimental direct
# query build (LAZYATTN_PREFILL_WS_DIRECT_QUERY=1: one-segment CTAs rotate straight into the
# fragments, aimed at that per-CTA cost) and the loader that retires its own copies
# (LAZYATTN_PREFILL_WS_LANDED=1): their [prefill] tests and an A/B against the default.
# Build at the commit to profile:
#   LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-f
#   PREBUILD_BUILD_DIR=build/prebuild-direct PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_DIRECT_QUERY=1" \
#     bash scripts/prebuild-gpu build/pb-direct
#   (and build/pb-landed the same way with -DLAZYATTN_PREFILL_WS_LANDED=1, build dir
#   build/prebuild-landed)
# carry [".deps", "build/pbf.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbf.tar.xz scripts/pack-prebuilt --unpack-env
R=$OUT/rf; mkdir -p $R
for m in local rope_off; do
  timeout 150 ncu --clock-control none -k regex:prefill_wgmma_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --import-source yes -o $R/enc4096_$m build/pb-f/lazyattn_bench_prefill \
    --benchmark_filter="prefill/encode_4096/$m/" > $R/ncu_$m.log 2>&1
  ncu --import $R/enc4096_$m.ncu-rep --page details > $R/ncu_${m}_details.txt 2>&1
  ncu --import $R/enc4096_$m.ncu-rep --page source --csv --print-source sass > $R/ncu_${m}_sass.csv 2>&1
  gzip -f $R/ncu_${m}_sass.csv; rm -f $R/enc4096_$m.ncu-rep
done
timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 40 \
  build/pb-f/lazyattn_cuda_tests "the wgmma prefill kernels on short RAG tails" > $R/racecheck.log 2>&1
echo "racecheck rc $?"; head -c 60000 $R/racecheck.log > $R/racecheck_head.log; rm $R/racecheck.log
# The hand-over in miniature, one variant at a time: which of them racecheck flags.
build/pb-f/lazyattn_cuda_tests --list-test-names-only "[handover]" | grep "hand-over" |
  while read -r name; do
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 build/pb-f/lazyattn_cuda_tests \
      "$name" > $R/handover.log 2>&1
    echo "$name: rc $?, $(grep -h 'RACECHECK SUMMARY' $R/handover.log)"
  done | tee $R/handover_racecheck.txt
for v in direct landed; do  # a hang shows as rc 124
  timeout 150 build/pb-$v/lazyattn_cuda_tests "[prefill]" > $R/t_prefill_$v.log 2>&1
  echo "$v [prefill] rc $?: $(tail -2 $R/t_prefill_$v.log | head -1)"
done
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 $R/ab default=build/pb-f \
  direct=build/pb-direct landed=build/pb-landed
