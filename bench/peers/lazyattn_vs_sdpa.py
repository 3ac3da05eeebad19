#!/usr/bin/env python3
"""Times lazyattn's decode (through the C ABI and python/lazyattn) next to PyTorch SDPA with the
flash and cuDNN backends, on the decode shapes of docs/performance.md, in one process. Writes JSON.

    LAZYATTN_LIB=build/gpu/capi python3 bench/peers/lazyattn_vs_sdpa.py OUT.json [--quick]

Shapes: Llama-3-8B attention (32 query heads, 8 KV heads, head dim 128, bf16, page size 16);
batch x context in {1x32768, 16x16384, 64x4096, 128x8192}, each request one document of
context - 32 tokens plus a 32-token tail (as bench/cuda/bench_decode.cu); and "rag" (5 documents x
2048 tokens at shuffled starts + a 32-token tail) against "single" (one document of the same
length), at batch 1 and 64.

Ours: local form, raw form, and the RoPE-off kernel (apply_rope=False over the raw pages: the same
bytes read, no rotation; the keys are not actually pre-rotated, so only its time means anything).
SDPA: contiguous K/V [batch, kv_heads, context, 128], the 4 query heads of a group as 4 query rows
against their KV head (how SDPA does GQA decode best; sdpa_peers.py does the same).

Each call allocates its outputs (torch's caching allocator; from the graph's pool when replayed).
Timing: CUDA events around `inner` back-to-back calls, each call on the next copy of the inputs
(layers of our pool, copies of SDPA's tensors: enough to exceed L2), median over samples, per call.
Two figures each: "eager" (calls launched from Python one by one, so host overhead shows when the
kernel is shorter than the launch) and "graph" (the same calls captured once in a CUDA graph and
replayed: the kernels' own time). Ratios use the graph figures where both sides have one.
Bandwidth: bytes of K and V read (2 x batch x context x 8 x 128 x 2) per second; the copy ceiling is
an 8 GB device copy timed in the same process.
"""
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)
import lazyattn  # noqa: E402
from sdpa_peers import backend_call, copy_case, median_ms  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

HQ, HK, D, PAGE, TAIL = 32, 8, 128, 16, 32
DT = torch.bfloat16
ROTATE_BYTES = 1 << 30  # >= 1 GiB of K/V per rotation over copies (L2 is 50 MiB)
LLAMA3 = {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}


def kv_bytes(batch, context):
    return 2 * batch * context * HK * D * 2


def copies_for(batch, context):
    return max(1, min(8, ROTATE_BYTES // kv_bytes(batch, context) + 1))


def time_calls(call, variants, samples, inner):
    """Median ms per call of call(i) (i selects the input copy), launched eagerly and from a CUDA
    graph of `inner` calls. Returns {"eager_ms", "graph_ms" or "graph_error"}."""
    out = {}
    # Eager: sdpa_peers.median_ms's back-to-back timing (warm-up: attributes, workspaces, autotuning).
    out["eager_ms"] = median_ms(call, list(range(variants)), warmup=max(3, variants),
                                repeats=samples, inner=inner)[0]
    try:
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for j in range(variants):
                call(j)
        torch.cuda.current_stream().wait_stream(side)
        try:
            ctx = torch.cuda.graph(g, capture_error_mode="relaxed")
        except TypeError:  # older torch: no capture_error_mode
            ctx = torch.cuda.graph(g)
        with ctx:
            for j in range(inner):
                call(j % variants)
        # One replay holds `inner` calls.
        out["graph_ms"] = median_ms(lambda _: g.replay(), [None], warmup=1, repeats=samples,
                                    inner=1)[0] / inner
        del g
    except Exception as e:  # capture refused: the eager figure stands alone
        out["graph_error"] = repr(e)[:300]
        torch.cuda.synchronize()
    return out


def best_ms(t):
    return t.get("graph_ms", t["eager_ms"])


def ours_case(batch, context, layout, rope, samples, inner):
    """Our decode, local / raw / rope_off, on a pool holding every request's keys once per form
    and per layer copy (the layers are the copies the timing rotates over)."""
    layers = copies_for(batch, context)
    docs_per_request = 5 if layout == "rag" else 1
    doc_len = 2048 if layout == "rag" else context - TAIL
    pages_per_request = docs_per_request * -(-doc_len // PAGE) + -(-TAIL // PAGE)
    # Every request has its own documents (as bench_decode.cu): nothing is read from L2 twice.
    num_pages = 2 * batch * pages_per_request + 16
    pool = lazyattn.Pool(num_layers=layers, num_kv_heads=HK, head_dim=D, page_size=PAGE,
                         dtype=DT, num_pages=num_pages, rope=rope)
    gen = torch.Generator(device="cuda").manual_seed(batch * 100003 + context)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen).to(DT)

    plans = {}
    setup_start = time.time()
    for form in ("local", "raw"):
        layouts = []
        for b in range(batch):
            docs = [pool.insert(randn(layers, doc_len, HK, D), randn(layers, doc_len, HK, D),
                                form=form)
                    for _ in range(docs_per_request)]
            tail = pool.create_tail(form)
            pool.append(tail, randn(layers, TAIL, HK, D), randn(layers, TAIL, HK, D))
            if layout == "rag":
                # Back-to-back slots handed out in a shuffled order (per request).
                order = torch.randperm(5, generator=torch.Generator().manual_seed(b)).tolist()
                starts, pos = [0] * 5, 0
                for j in order:
                    starts[j] = pos
                    pos += doc_len
                layouts.append([(d, s) for d, s in zip(docs, starts)] + [(tail, pos)])
            else:
                layouts.append(lazyattn.back_to_back(docs, tail))
        plans[form] = pool.plan(layouts, num_qo_heads=HQ)
    torch.cuda.synchronize()
    setup_s = time.time() - setup_start
    q = [randn(batch, HQ, D) for _ in range(layers)]
    row = {"layers": layers, "setup_s": round(setup_s, 2), "num_work": plans["local"].num_work}
    for mode, form, apply_rope in (("local", "local", True), ("raw", "raw", True),
                                   ("rope_off", "raw", False)):
        plan = plans[form]

        def call(i, plan=plan, apply_rope=apply_rope):
            pool.decode(plan, q[i], layer=i, apply_rope=apply_rope)

        t = time_calls(call, layers, samples, inner)
        row.update({mode + "_" + k: v for k, v in t.items()})
    for p in plans.values():
        p.close()
    pool.close()
    return row


def sdpa_case(batch, context, samples, inner):
    g = HQ // HK
    n = max(2, copies_for(batch, context))
    sets = []
    for _ in range(n):
        sets.append((torch.randn(batch, HK, g, D, device="cuda", dtype=DT),
                     torch.randn(batch, HK, context, D, device="cuda", dtype=DT),
                     torch.randn(batch, HK, context, D, device="cuda", dtype=DT)))
    row = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            t = time_calls(lambda i, be=be: backend_call(be, *sets[i]), n, samples, inner)
            row.update({name + "_" + k: v for k, v in t.items()})
        except Exception as e:
            row[name + "_error"] = repr(e)[:300]
    del sets
    torch.cuda.empty_cache()
    return row


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    quick = "--quick" in sys.argv
    samples, inner = (10, 5) if quick else (30, 10)
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "library": lazyattn.library_path(),
           "commit": os.environ.get("LAZYATTN_COMMIT", ""), "date": time.strftime("%Y-%m-%d"),
           "samples": samples, "calls_per_sample": inner, "rows": []}
    copy = copy_case(quick)
    out["copy"] = copy
    torch.cuda.empty_cache()  # the copy's 8 GB go back to the device before the pools are made
    print("copy ceiling %.3f TB/s" % copy["tbps"])
    rope = lazyattn.Rope(LLAMA3)
    shapes = [("decode", 1, 32768), ("decode", 16, 16384), ("decode", 64, 4096),
              ("decode", 128, 8192), ("rag", 1, 5 * 2048 + TAIL), ("single", 1, 5 * 2048 + TAIL),
              ("rag", 64, 5 * 2048 + TAIL), ("single", 64, 5 * 2048 + TAIL)]
    for layout, batch, context in shapes:
        row = {"layout": layout, "batch": batch, "context": context,
               "kv_bytes": kv_bytes(batch, context)}
        try:
            row.update(ours_case(batch, context, layout, rope, samples, inner))
        except Exception as e:
            row["ours_error"] = repr(e)[:300]
        torch.cuda.empty_cache()
        if layout != "rag":  # SDPA sees contiguous K/V: the rag and single shapes are one shape
            row.update(sdpa_case(batch, context, samples, inner))
        for k in [k for k in row if k.endswith("_eager_ms")]:
            name = k[:-len("_eager_ms")]
            ms = best_ms({"eager_ms": row[k], **({"graph_ms": row[name + "_graph_ms"]}
                                                 if name + "_graph_ms" in row else {})})
            row[name + "_tbps"] = row["kv_bytes"] / ms / 1e9
        for mine in ("local", "raw", "rope_off"):
            if mine + "_tbps" not in row:
                continue
            for peer in ("flash", "cudnn"):
                if peer + "_tbps" in row:
                    row["%s_vs_%s" % (mine, peer)] = row[mine + "_tbps"] / row[peer + "_tbps"]
            row[mine + "_of_copy"] = row[mine + "_tbps"] / copy["tbps"]
        if "local_tbps" in row and "rope_off_tbps" in row:
            row["rope_overhead_local"] = row["rope_off_tbps"] / row["local_tbps"] - 1
            row["rope_overhead_raw"] = row["rope_off_tbps"] / row["raw_tbps"] - 1
        out["rows"].append(row)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
        sys.stdout.flush()
    # RAG against one segment of the same length, same batch.
    for r in out["rows"]:
        if r["layout"] == "rag":
            single = [s for s in out["rows"] if s["layout"] == "single" and s["batch"] == r["batch"]]
            if single and "local_tbps" in r and "local_tbps" in single[0]:
                r["rag_vs_single_local"] = r["local_tbps"] / single[0]["local_tbps"]
                r["rag_vs_single_raw"] = r["raw_tbps"] / single[0]["raw_tbps"]
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
