#!/usr/bin/env bash
# The CPU `tiny` runs behind docs/reproduction.md's "KV pool types at one byte budget" (issue
# 27): bfloat16 against fp8 (e4m3) pools at one byte budget (--cache-docs counted in bfloat16
# pages), LRU against segmented LRU. 256-token documents as in run_cpu.sh.
source "$(dirname "$0")/cpu_runs.sh"
common=(--config tiny --doc-length 256 --budget-dtype bfloat16 --no-progress)
prefix=pools-
# Hit ratio in the steady state: 3000 requests, the first 1000 left out.
for dtype in bfloat16 float8_e4m3; do
  for ev in lru segmented_lru; do
    run "hit-$dtype-$ev" --mode lazy,block-attention --rates 1 --cache-docs 10,20 \
      --requests 3000 --warmup-requests 1000 --kv-dtype "$dtype" --eviction "$ev"
  done
done
# Latency and throughput against the arrival rate at the tight budget (120 requests per point).
for dtype in bfloat16 float8_e4m3; do
  run "rates-$dtype" --mode lazy,block-attention,prefix --rates 1,2,4,8,16 --cache-docs 20 \
    --requests 120 --kv-dtype "$dtype" --eviction segmented_lru
done
