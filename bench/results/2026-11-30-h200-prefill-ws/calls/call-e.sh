#!/bin/bash
# Device call e (2026-11-30): the full check of commit 1a3270e (the session's last kernel
# change), written straight under $OUT/check so a cut-off call still returns what it did.
#   LAZYATTN_CMAKE_ARGS=-DLAZYATTN_EXPERIMENTAL_TMA=OFF bash scripts/prebuild-gpu build/pb-e
# carry [".deps", "build/pb-e", "build/call.sh"].
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
TEST_TIMEOUT=120 SANITIZE_TIMEOUT=50 BENCH_TIMEOUT=120 LAZYATTN_PREBUILT=build/pb-e \
  LAZYATTN_COMMIT=1a3270e OUT=$OUT/check bash scripts/gpu-check build tests sanitize bench peers report 2>&1 | tail -45
