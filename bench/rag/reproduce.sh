#!/usr/bin/env bash
# The whole issue-5 sweep of docs/reproduction.md ("H200 results") in one command, on a machine
# with the GPU: every job of that sweep (each a scripts/rag-gpu run), each mode at the rates that
# reach its saturation, then the merged JSON, the tables and the plots.
#
#   bash bench/rag/reproduce.sh OUT_DIR [--config llama-3.1-8b] [--requests 120] [--dry-run]
#
# About 25 minutes of GPU time on an H200 for llama-3.1-8b (the simulated clock makes a point
# cost its busy time, whatever its rate). OUT_DIR gets runs/<popularity>-<mode>[-mem0.9].json,
# logs/, and zipf-uniform.{json,md}, zipf-uniform-rates.png, zipf-uniform-hit.png (plots need
# matplotlib; the hit-ratio plot uses the CPU cache sweep in bench/rag/results/).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
out=$1
shift
config=llama-3.1-8b requests=120 dry=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift ;;
    --requests) requests=$2; shift ;;
    --dry-run) dry=--dry-run ;;
    *) echo "reproduce.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out/runs" "$out/logs"
build=""  # the first job builds, the others reuse it
job() {  # log name, file suffix, popularity, modes, rates [-- bench flags]
  local name=$1 suffix=$2 pop=$3 modes=$4 rates=$5
  shift 5
  local tmp
  tmp=$(mktemp -d)
  echo "== $name: $pop, $modes, rates $rates"
  OUT=$tmp bash scripts/rag-gpu $build $dry --config "$config" --requests "$requests" \
    --popularity "$pop" --modes "$modes" --rates "$rates" --budget-s 100000 "$@" |
    tee "$out/logs/$name.log"
  build=--no-build
  if [ -z "$dry" ]; then
    tar xzf "$tmp/rag-gpu.tar.gz" -C "$tmp"
    for f in "$tmp"/rag-"$pop"-*.json; do
      [ -e "$f" ] && cp "$f" "$out/runs/$(basename "$f" .json | sed 's/^rag-//')$suffix.json"
    done
  fi
  rm -rf "$tmp"
}
job zipf-lazy-block "" zipf lazy,block-attention 1,2,4,6,8,10,12,14,16,20,24
job zipf-others "" zipf prefix,full,position-aware 0.5,1,2,3,4
job uniform "" uniform lazy,block-attention 1,2,3,4
job zipf-mem0.9 -mem0.9 zipf lazy,block-attention 8,12,16 -- --gpu-memory-utilization 0.9
[ -n "$dry" ] && exit 0
if python3 -c 'import matplotlib' 2>/dev/null; then py=python3; else py=/usr/bin/python3; fi
$py bench/rag/plot.py --out "$out" --name zipf-uniform \
  --hit bench/rag/results/2026-11-29-cpu-tiny-cache.json "$out"/runs/*.json
echo "reproduce.sh: results in $out (tables: $out/zipf-uniform.md)"
