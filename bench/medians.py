#!/usr/bin/env python3
"""Prints the median time (and counters) of every benchmark in Google Benchmark JSON files, one
line each: a quick look at modes bench/report.py does not tabulate (e.g. local_no_pdl).
    python3 bench/medians.py bench_decode.json [bench_prefill.json ...]"""
import json
import sys

for path in sys.argv[1:]:
    try:
        runs = json.load(open(path))["benchmarks"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{path}: {e}")
        continue
    for r in runs:
        if r.get("aggregate_name") != "median":
            continue
        name = r["run_name"].split("/iterations")[0]
        extra = "  ".join(f"{k} {r[k]:.4g}" for k in ("TBps", "TFLOPs", "splits", "host_us") if k in r)
        print(f"{name:48s} {r['real_time']:10.2f} {r['time_unit']}  {extra}")
