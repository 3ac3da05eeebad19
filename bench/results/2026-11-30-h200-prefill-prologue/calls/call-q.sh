#!/bin/bash
# Device call q (2026-11-30): the end-to-end RAG sweep (Zipf, rates 4, 12, 24; the flags of
# bench/results/2026-11-30-h200-e36e2c4-rag/) on 153cb9f's kernels (the same PTX as cacbbf3's,
# whose full check is call p). Built here:
#   cmake --build build/rag-gpu --target lazyattn_rag_bench_cuda   (configured as in
#     bench/results/2026-11-30-h200-4fcfdac-rag/README.md)
#   mkdir -p build/rag-bin && cp build/rag-gpu/bench/rag/lazyattn_rag_bench_cuda build/rag-bin/
#   scripts/pack-prebuilt build/pbr.tar.xz build/rag-bin
# carry [".deps", "build/pbr.tar.xz", "build/call.sh"] (this file copied to build/call.sh).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
LAZYATTN_PREBUILT_ARCHIVE=build/pbr.tar.xz scripts/pack-prebuilt --unpack-env
mkdir -p build/rag-gpu/bench/rag && cp build/rag-bin/lazyattn_rag_bench_cuda build/rag-gpu/bench/rag/
LAZYATTN_COMMIT=${COMMIT:-unknown} OUT=$OUT/rag bash scripts/rag-gpu --no-build --modes lazy,block-attention \
  --popularity zipf --rates 4,12,24 --budget-s 200 2>&1 | tail -12
