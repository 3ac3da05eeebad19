#!/bin/bash
# Device call l (2026-11-30), on the machine call k left warm: 22186ca's prefill benchmark
# (call k's build) and the SDPA peers in the same call, for the report table. Run as one line:
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
LAZYATTN_PREBUILT_ARCHIVE=build/pbk.tar.xz scripts/pack-prebuilt --unpack-env
timeout 70 build/pb-k/lazyattn_bench_prefill --benchmark_out=$OUT/bench_prefill.json --benchmark_out_format=json > /dev/null 2>&1
python3 bench/medians.py $OUT/bench_prefill.json | tee $OUT/medians.txt
timeout 60 python3 bench/peers/sdpa_peers.py $OUT/peers.json --prefill-only > $OUT/peers.log 2>&1
