#!/usr/bin/env bash
# The CPU `tiny` runs behind docs/reproduction.md's tables: build, then three sweeps (Zipf 2.1 and
# uniform popularity over arrival rates, hit ratio over the cache budget). Documents are 256
# tokens instead of the paper's 2048 so that the full-prefill modes finish on a CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build/rag}
out=${OUT:-bench/rag/results}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYATTN_CUDA=OFF \
  -DLAZYATTN_HEADER_CHECKS=OFF >/dev/null
cmake --build "$build" -j2 --target lazyattn_rag_bench
bench="$build/bench/rag/lazyattn_rag_bench"
day=$(date -u +%F)
mkdir -p "$out"
common=(--config tiny --doc-length 256 --requests 120)
run() {  # name, options...
  local name=$1
  shift
  echo "+ lazyattn_rag_bench ${common[*]} $* --out $out/$day-cpu-tiny-$name.json"
  "$bench" "${common[@]}" "$@" --out "$out/$day-cpu-tiny-$name.json" | tee "$out/$day-cpu-tiny-$name.txt"
}
run zipf --mode all --rates 0.5,1,2,3,4 --cache-docs 20
run uniform --mode all --rates 1,2,4 --cache-docs 20 --uniform
run cache --mode lazy,position-aware --rates 1 --cache-docs 5,10,20,40
