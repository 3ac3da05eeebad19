#!/usr/bin/env python3
"""Tests of bench/rag/plot.py's reading and tables (no matplotlib needed): one run's JSON as
lazyattn_rag_bench writes it, scripts/rag-gpu's merged sweep of several, and the grouping by
pool, eviction, running-request limit and warm-up.   Usage: python3 bench/rag/test_plot.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot  # noqa: E402


def point(mode, rate, rps, steady=None, hit=0.9, ideal=0.95, cap=20):
    return {"mode": mode, "rate": rate, "capacity_docs": cap, "ttft_p50_s": 1.0 / rps,
            "ttft_p90_s": 2.0 / rps, "throughput_rps": rps,
            "throughput_steady_rps": rps if steady is None else steady, "hit_ratio": hit,
            "top_c_hit_ratio_same_draws": ideal}


def run(points, zipf=2.1, requests=300, warmup=0, **header):
    r = {"benchmark": "lazyattn_rag_bench", "workload": {"zipf": zipf, "requests": requests},
         "warmup_requests": warmup, "points": points}
    r.update(header)
    return r


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def test_a_run_from_before_fp8_pools_is_bf16_lru(self):
        # No kv_dtype, eviction or warm-up in the header: the CPU runs of 2026-11-29.
        r = run([point("lazy", 2, 2.0), point("block-attention", 2, 1.0)])
        del r["warmup_requests"]
        groups, headers = plot.load([self.write("old.json", r)])
        self.assertEqual(list(groups), [("Zipf 2.1", "bf16 pool", 20, 0, 0)])
        self.assertEqual(headers[0]["file"], "old.json")
        self.assertNotIn("points", headers[0])

    def test_a_merged_sweep_reads_every_run(self):
        sweep = {"benchmark": "lazyattn_rag_bench_cuda sweep", "popularity": "zipf", "runs": [
            run([point("lazy", 16, 15.0), point("lazy", 24, 22.0)], kv_dtype="bfloat16"),
            run([point("lazy", 24, 23.0, cap=45)], kv_dtype="float8_e4m3"),
        ]}
        groups, headers = plot.load([self.write("sweep.json", sweep)])
        self.assertEqual(len(headers), 2)
        self.assertEqual(sorted(groups[("Zipf 2.1", "bf16 pool", 20, 0, 0)]["lazy"]), [16, 24])
        self.assertEqual(list(groups[("Zipf 2.1", "fp8 pool", 45, 0, 0)]["lazy"]), [24])

    def test_eviction_limit_and_warm_up_are_groups_of_their_own(self):
        a = run([point("lazy", 40, 40.0)], kv_dtype="float8_e4m3", warmup=100)
        b = run([point("lazy", 40, 41.0)], kv_dtype="float8_e4m3", warmup=100,
                eviction="segmented_lru")
        c = run([point("lazy", 40, 42.0)], kv_dtype="float8_e4m3", warmup=100, max_batch=32)
        d = run([point("lazy", 40, 43.0)], kv_dtype="float8_e4m3", warmup=300, requests=1000,
                max_batch=32)
        groups, _ = plot.load([self.write(f"{n}.json", r) for n, r in zip("abcd", [a, b, c, d])])
        self.assertEqual(sorted(k[1] for k in groups), [
            "fp8 pool", "fp8 pool, max batch 32", "fp8 pool, max batch 32",
            "fp8 pool, segmented LRU"])
        self.assertEqual(len(groups), 4)
        self.assertIn(("Zipf 2.1", "fp8 pool, max batch 32", 20, 1000, 300), groups)
        self.assertEqual(plot.title(("Zipf 2.1", "fp8 pool", 45, 300, 100)),
                         "Zipf 2.1, fp8 pool, 45 cached docs\n300 requests, the first 100 a warm-up")
        self.assertEqual(plot.title(("uniform", "bf16 pool", 20, 0, 0)),
                         "uniform, bf16 pool, 20 cached docs")

    def test_a_rate_measured_twice_keeps_the_later_files_point(self):
        first = self.write("1.json", run([point("lazy", 8, 7.0)]))
        later = self.write("2.json", run([point("lazy", 8, 7.5)]))
        groups, _ = plot.load([first, later])
        self.assertEqual(groups[("Zipf 2.1", "bf16 pool", 20, 0, 0)]["lazy"][8]["throughput_rps"],
                         7.5)

    def test_the_table_gives_the_ratios_and_the_throughput_after_a_warm_up(self):
        r = run([point("lazy", 10, 9.0, steady=12.0), point("block-attention", 10, 3.0, steady=4.0)],
                warmup=100)
        groups, _ = plot.load([self.write("w.json", r)])
        text = plot.table(groups)
        self.assertIn("**Zipf 2.1, bf16 pool, 20 cached docs; 300 requests, the first 100 a "
                      "warm-up**", text)
        # TTFT 1/3 s against 1/9 s, throughput 9 against 3.
        self.assertIn("| 10 | 111 ms (222 ms), 9.00/s | 333 ms (667 ms), 3.00/s | 3.00x | 3.00x |",
                      text)
        self.assertIn("Highest throughput measured: lazy 9.00 req/s, block-attention 3.00 req/s.",
                      text)
        self.assertIn("Highest throughput after the warm-up: lazy 12.00 req/s, block-attention "
                      "4.00 req/s.", text)
        # Without a warm-up the two are the same, and the second line is left out.
        cold = plot.table(plot.load([self.write("c.json", run([point("lazy", 10, 9.0)]))])[0])
        self.assertNotIn("after the warm-up", cold)

    def test_the_command_writes_the_merged_json_and_the_table(self):
        path = self.write("r.json", run([point("lazy", 1, 1.0)], kv_dtype="float8_e4m3",
                                        warmup=10))
        out = os.path.join(self.dir.name, "out")
        # The JSON and the table whether or not matplotlib is there (without it, no plots).
        subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), "--out", out, "--name",
                        "t", path], check=True, capture_output=True)
        with open(os.path.join(out, "t.json")) as f:
            merged = json.load(f)
        self.assertEqual(merged["groups"][0]["pool"], "fp8 pool")
        self.assertEqual(merged["groups"][0]["warmup_requests"], 10)
        self.assertEqual(merged["groups"][0]["requests"], 300)
        self.assertEqual([p["rate"] for p in merged["groups"][0]["points"]], [1])
        with open(os.path.join(out, "t.md")) as f:
            self.assertIn("fp8 pool", f.read())


if __name__ == "__main__":
    unittest.main()
