#!/bin/bash
# Call f (2026-11-30 evening): the C ABI and the PyTorch wrapper at 1314229 (decode code as
# 9894eb1): python/tests/test_decode_torch.py and the one-process comparison with SDPA
# (bench/peers/lazyattn_vs_sdpa.py, --quick for the device time left: 10 samples x 5).
# Built here: PREBUILD_TARGETS=lazyattn_c LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF \
#   bash scripts/prebuild-gpu build/pb-capi
# carry [".deps", "build/pb-capi", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
OUT=$OUT/capi LAZYATTN_COMMIT=1314229 timeout 250 bash scripts/capi-check build/pb-capi --quick 2>&1 | tail -30
