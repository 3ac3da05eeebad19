#!/bin/bash
# Device call b (2026-11-30): the warp-specialised wgmma prefill's variants (commit after
# b13ca2b: LAZYATTN_PREFILL_WS_QREG, LAZYATTN_PREFILL_WS_TURNS) against kWgmma, with the PyTorch
# SDPA prefill peers before and after, and the sanitizers on the wgmma test case. Built here:
#   PREBUILD_TARGETS="lazyattn_cuda_tests lazyattn_bench_prefill" \
#     LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-ws
#   PREBUILD_BUILD_DIR=build/prebuild-qreg PREBUILD_TARGETS=lazyattn_bench_prefill \
#     LAZYATTN_CMAKE_ARGS="-DLAZYATTN_EXPERIMENTAL_TMA=OFF -DCMAKE_CUDA_FLAGS=-DLAZYATTN_PREFILL_WS_QREG=1" \
#     bash scripts/prebuild-gpu build/pb-qreg      (and build/pb-noturn with LAZYATTN_PREFILL_WS_TURNS=0)
# carry [".deps", "build/pb-ws", "build/pb-qreg", "build/pb-noturn", "build/call.sh"].
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
R=/tmp/rb; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $R/gpu.txt
python3 bench/peers/sdpa_peers.py $R/peers1.json --prefill-only > $R/peers1.log 2>&1; tail -4 $R/peers1.log
# WS=1 wrappers: the same binaries with the warp-specialised kernel.
for v in ws qreg noturn; do
  mkdir -p build/env-$v
  printf '#!/bin/bash\nLAZYATTN_BENCH_PREFILL_WS=1 exec %s/build/pb-%s/lazyattn_bench_prefill "$@"\n' "$PWD" "$v" \
    > build/env-$v/lazyattn_bench_prefill
  chmod +x build/env-$v/lazyattn_bench_prefill
done
AB_TIMEOUT=120 scripts/ab-bench prefill '/(local|rope_off)/' 3 $R/ab wgmma=build/pb-ws \
  ws=build/env-ws qreg=build/env-qreg noturn=build/env-noturn
python3 bench/peers/sdpa_peers.py $R/peers2.json --prefill-only > $R/peers2.log 2>&1; tail -4 $R/peers2.log
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 build/pb-ws/lazyattn_cuda_tests \
    "the wgmma prefill kernel on RAG tails and long query runs" > $R/sanitize_$tool.log 2>&1
  echo "$tool rc $?: $(tail -1 $R/sanitize_$tool.log)"
done
tar czf $OUT/rb.tgz -C $R .
