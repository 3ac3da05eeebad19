#!/bin/bash
# Device call a (2026-11-30): first run of the warp-specialised wgmma prefill (kWgmmaWs, commit
# 010c1ad). Built on the CPU machine:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-ws
# carry [".deps", "build/pb-ws", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
R=/tmp/ra; mkdir -p $R
B=build/pb-ws
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
# Where the WS kernel's registers go: spills (STL/LDL) against the setmaxnreg points.
cuobjdump -sass -fun '_ZN8lazyattn4cuda6detail20prefill_wgmma_kernelI13__nv_bfloat16Lb1ELb1EEEvNS0_13PrefillParamsE' \
  $B/lazyattn_bench_prefill > $R/ws-rope.sass 2>&1
grep -n "USETMAXREG\|STL\|LDL\|EXIT\|BAR\|SYNCS" $R/ws-rope.sass | head -80 > $R/ws-rope-marks.txt
# Correctness: the wgmma cases first (deadlock -> timeout), then the whole prefill set, then the
# decode GQA-16 case (written last session, never run).
timeout 120 $B/lazyattn_cuda_tests "the wgmma prefill kernel on RAG tails and long query runs" \
  --durations yes > $R/t_wgmma.log 2>&1; echo "wgmma case rc $?" | tee -a $R/t_wgmma.log; tail -3 $R/t_wgmma.log
timeout 200 $B/lazyattn_cuda_tests "[prefill]" --durations yes > $R/t_prefill.log 2>&1
echo "prefill rc $?" | tee -a $R/t_prefill.log; tail -3 $R/t_prefill.log
timeout 100 $B/lazyattn_cuda_tests "decode with a GQA group of 16" > $R/t_gqa16.log 2>&1
echo "gqa16 rc $?" | tee -a $R/t_gqa16.log; tail -3 $R/t_gqa16.log
# A/B: the same binary with and without LAZYATTN_BENCH_PREFILL_WS=1, 3 rounds.
mkdir -p build/pb-wsenv
printf '#!/bin/bash\nLAZYATTN_BENCH_PREFILL_WS=1 exec %s/%s/lazyattn_bench_prefill "$@"\n' "$PWD" "$B" \
  > build/pb-wsenv/lazyattn_bench_prefill
chmod +x build/pb-wsenv/lazyattn_bench_prefill
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 $R/ab wgmma=$B ws=build/pb-wsenv
tar czf $OUT/ra.tgz -C $R .
