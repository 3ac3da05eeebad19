#!/bin/bash
# Device call c (2026-11-30): the full check of the commit that makes the warp-specialised wgmma
# prefill kAuto's choice (tests, sanitizers incl. the new short wgmma case, decode and prefill
# benchmarks with the two-warpgroup form beside it, PyTorch peers, report), then the SASS of the
# WS kernels. Built here:
#   LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-c
# carry [".deps", "build/pb-c", "build/call.sh"]; COMMIT is passed in the environment.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
R=/tmp/rc; mkdir -p $R
TEST_TIMEOUT=240 SANITIZE_TIMEOUT=150 BENCH_TIMEOUT=240 LAZYATTN_PREBUILT=build/pb-c \
  LAZYATTN_COMMIT=${COMMIT:-unknown} OUT=$R/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 | tail -40
for k in 'Lb1ELb1E' 'Lb0ELb1E'; do
  cuobjdump -sass -fun "_ZN8lazyattn4cuda6detail20prefill_wgmma_kernelI13__nv_bfloat16${k}EEvNS0_13PrefillParamsE" \
    build/pb-c/lazyattn_bench_prefill > $R/ws-$k.sass 2>&1
done
tar czf $OUT/rc.tgz -C $R .
