# Sourced by run_cpu.sh and run_cpu_pools.sh: builds the CPU lazyattn_rag_bench, then
# `run NAME OPTIONS...` runs it with "${common[@]}" OPTIONS and writes
# $out/DAY-cpu-tiny-${prefix}NAME.json and .txt (set `common` and `prefix` before calling run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${BUILD:-build/rag}
out=${OUT:-bench/rag/results}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYATTN_CUDA=OFF \
  -DLAZYATTN_HEADER_CHECKS=OFF >/dev/null
cmake --build "$build" -j2 --target lazyattn_rag_bench
bench="$build/bench/rag/lazyattn_rag_bench"
day=$(date -u +%F)
mkdir -p "$out"
run() {  # name, options...
  local name=$1
  shift
  local at="$out/$day-cpu-tiny-${prefix:-}$name"
  echo "+ lazyattn_rag_bench ${common[*]} $* --out $at.json"
  "$bench" "${common[@]}" "$@" --out "$at.json" | tee "$at.txt"
}
