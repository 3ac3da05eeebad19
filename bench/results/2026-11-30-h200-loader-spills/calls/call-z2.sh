#!/bin/bash
# Device call z2 (2026-11-30): every [cuda] case on call z's test binary (32c2975's tree: the
# decode change and the prefill of 7a1a24d).
# carry [".deps", "build/pbz.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbz.tar.xz scripts/pack-prebuilt --unpack-env
LAZYATTN_PREBUILT=build/pb-z TEST_TIMEOUT=150 OUT=$OUT/z2 bash scripts/gpu-check tests 2>&1 |
  grep -E "passed|failed|FAIL" | head -12
