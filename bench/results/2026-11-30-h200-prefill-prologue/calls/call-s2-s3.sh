#!/bin/bash
# Device calls s2 and s3 (2026-11-30, right after call s, the machine still warm; the commands
# as they were passed to the device tool, with [".deps", "build/pbs.tar.xz"] carried):
# s2: the [cuda] cases outside [prefill] and [hopper] on call s's test binary (84eb54f);
# s3: PyTorch SDPA's prefill peers and the whole prefill benchmark of 84eb54f in one call
#     (report here: /usr/bin/python3 bench/report.py --prefill s/bench/bench_prefill.json
#      --peers s/bench/peers.json --out OUT --commit 84eb54f --date 2026-11-30).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64
LAZYATTN_PREBUILT_ARCHIVE=build/pbs.tar.xz scripts/pack-prebuilt --unpack-env >/dev/null 2>&1
if [ "${1:-s2}" = s2 ]; then
  timeout 170 build/pb-s/lazyattn_cuda_tests "[cuda]~[prefill]~[hopper]" > $OUT/other_cuda_tests.log 2>&1
  echo "rc $?"; tail -3 $OUT/other_cuda_tests.log
else
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > $OUT/device.txt
  timeout 70 python3 bench/peers/sdpa_peers.py $OUT/peers.json --prefill-only > $OUT/peers.log 2>&1
  echo "peers rc $?"
  timeout 110 build/pb-s/lazyattn_bench_prefill --benchmark_out=$OUT/bench_prefill.json \
    --benchmark_out_format=json > $OUT/bench_prefill.log 2>&1
  echo "bench rc $?"; python3 bench/medians.py $OUT/bench_prefill.json | head -30
fi
