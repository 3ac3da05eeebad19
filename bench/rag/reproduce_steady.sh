#!/usr/bin/env bash
# Issue 27's end-to-end comparison after a warm-up (docs/reproduction.md, "Rate sweeps after a
# warm-up") in one command, on a machine with the GPU: llama-3.1-8b shapes, Zipf 2.1, a budget of
# 20 bf16 documents for every pool type, 300 requests of which the first 100 are a warm-up;
# `lazy` and `block-attention` over bf16 and fp8 pools at rates that bracket each one's edge, both
# again over fp8 with segmented LRU and `prefix` over fp8 in overload; then the merged JSON, the
# table and the plot (bench/rag/plot.py).
#
#   bash bench/rag/reproduce_steady.sh OUT_DIR [--no-build] [--dry-run] [--only NAME[,NAME...]]
#
# About 10-12 minutes of GPU time on an H100 (the block-attention sweeps take most of it: 35 s
# a rate). OUT_DIR gets runs/NAME.json, logs/NAME.log and steady.{json,md}, steady-rates.png
# (the plot needs matplotlib). --only runs the named jobs (the names below) and plots what
# OUT_DIR/runs holds, so a run cut short can be finished in pieces.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
out=$1
shift
build="" dry="" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=--no-build ;;
    --dry-run) dry=--dry-run ;;
    --only) only=",$2,"; shift ;;
    *) echo "reproduce_steady.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out/runs" "$out/logs"
fp8=(--kv-dtype float8_e4m3 --budget-dtype bfloat16)
job() {  # name, mode, rates [bench flags]
  local name=$1 mode=$2 rates=$3
  shift 3
  [ -z "$only" ] || [[ $only == *",$name,"* ]] || return 0
  local tmp
  tmp=$(mktemp -d)
  echo "== $name: $mode at $rates/s $*"
  OUT=$tmp bash scripts/rag-gpu $build $dry --modes "$mode" --popularity zipf --rates "$rates" \
    --requests 300 --budget-s 100000 -- --warmup-requests 100 "$@" | tee "$out/logs/$name.log"
  build=--no-build  # the first job builds, the others reuse it
  if [ -z "$dry" ]; then
    tar xzf "$tmp/rag-gpu.tar.gz" -C "$tmp"
    cp "$tmp"/rag-zipf-*.json "$out/runs/$name.json"
  fi
  rm -rf "$tmp"
}
job bf16-lazy lazy 16,24,30,36 --eviction lru
job bf16-block-attention block-attention 5,7,9,11 --eviction lru
job fp8-lazy lazy 24,28,32,36,44,52 --eviction lru "${fp8[@]}"
job fp8-block-attention block-attention 8,11,12,13,15 --eviction lru "${fp8[@]}"
job fp8-slru-lazy lazy 64 --eviction segmented_lru "${fp8[@]}"
job fp8-slru-block-attention block-attention 40 --eviction segmented_lru "${fp8[@]}"
job fp8-prefix prefix 64 --eviction lru "${fp8[@]}"
[ -n "$dry" ] && exit 0
if python3 -c 'import matplotlib' 2>/dev/null; then py=python3; else py=/usr/bin/python3; fi
$py bench/rag/plot.py --out "$out" --name steady "$out"/runs/*.json
echo "reproduce_steady.sh: results in $out (table: $out/steady.md)"
