#!/bin/bash
# Session r: the end-to-end RAG sweep (lazy vs block-attention, Zipf 2.1, rates 4, 12, 24, 120 requests) on main's kernels (prebuilt lazyattn_rag_bench_cuda).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf build/r.tar.xz
LAZYATTN_COMMIT=1f7a1f7 bash scripts/rag-gpu --no-build --modes lazy,block-attention --popularity zipf --rates 4,12,24 --budget-s 300
