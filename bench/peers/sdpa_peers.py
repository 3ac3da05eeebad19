#!/usr/bin/env python3
"""Times the peers of docs/performance.md on the H200: PyTorch SDPA (flash and cuDNN backends) on
contiguous, pre-rotated K/V, and a large device copy for the bandwidth ceiling. Writes JSON.

    python3 bench/peers/sdpa_peers.py OUT.json [--quick] [--prefill-only | --decode-only]

Decode shapes (Llama-3-8B attention: 32 query heads, 8 KV heads, head dim 128, bf16) are timed as
SDPA sees GQA decode best: the 4 query heads of a group become 4 query rows against their one KV
head, so each K/V byte is read once. Medians over many repeats of CUDA-event times of 8 back-to-back
calls, inputs rotated among enough copies to exceed L2 several times.
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

HQ, HK, D = 32, 8, 128
DT = torch.bfloat16
L2_BYTES = 60 << 20


def median_ms(fn, sets, warmup=5, repeats=50, inner=8):
    """Median over repeats of (time of `inner` back-to-back calls) / inner. Back to back, the
    host's dispatch of one call overlaps the GPU's work on the previous one, so Python and the
    backend's host overhead do not count as GPU time (timing one call alone between two events
    did count it: it made cuDNN look 5-15% slower at decode)."""
    for i in range(warmup):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for j in range(inner):
            fn(sets[(i * inner + j) % len(sets)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return statistics.median(times), times


def copies_for(bytes_one):
    return max(2, min(16, (4 * L2_BYTES) // max(bytes_one, 1) + 1))


def backend_call(backend, q, k, v, **kw):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def decode_case(b, l, quick):
    g = HQ // HK
    kv_bytes = 2 * b * l * HK * D * 2
    n = copies_for(kv_bytes)
    sets = []
    for _ in range(n):
        q = torch.randn(b, HK, g, D, device="cuda", dtype=DT)
        k = torch.randn(b, HK, l, D, device="cuda", dtype=DT)
        v = torch.randn(b, HK, l, D, device="cuda", dtype=DT)
        sets.append((q, k, v))
    row = {"kind": "decode", "batch": b, "context": l, "kv_bytes": kv_bytes}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            ms, _ = median_ms(lambda s: backend_call(be, *s), sets, repeats=20 if quick else 100)
            row[name + "_ms"] = ms
            row[name + "_tbps"] = kv_bytes / ms / 1e9
        except Exception as e:
            row[name + "_error"] = repr(e)[:200]
    del sets
    torch.cuda.empty_cache()
    return row


def prefill_case(name, q_len, kv_len, causal_square, quick, d=D):
    flops = 4.0 * q_len * kv_len * d * HQ
    if causal_square:
        flops /= 2
    row = {"kind": "prefill", "name": name, "q_len": q_len, "kv_len": kv_len, "head_dim": d,
           "flops": flops}
    sets = []
    for _ in range(3):
        q = torch.randn(1, HQ, q_len, d, device="cuda", dtype=DT)
        k = torch.randn(1, HK, kv_len, d, device="cuda", dtype=DT)
        v = torch.randn(1, HK, kv_len, d, device="cuda", dtype=DT)
        sets.append((q, k, v))
    for bname, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            if causal_square:
                fn = lambda s: backend_call(be, *s, is_causal=True, enable_gqa=True)
            else:
                # The RAG tail: documents fully visible, the tail causal (bottom-right aligned).
                bias = causal_lower_right(q_len, kv_len)
                fn = lambda s: backend_call(be, *s, attn_mask=bias, enable_gqa=True)
            ms, _ = median_ms(fn, sets, repeats=10 if quick else 40)
            row[bname + "_ms"] = ms
            row[bname + "_tflops"] = flops / ms / 1e9
        except Exception as e:
            row[bname + "_error"] = repr(e)[:200]
    return row


def copy_case(quick):
    n = (8 << 30) // 2 // 2  # 4 GiB source + 4 GiB destination, bf16 elements
    src = torch.randn(n, device="cuda", dtype=DT)
    dst = torch.empty_like(src)
    ms, _ = median_ms(lambda s: dst.copy_(src), [None], repeats=10 if quick else 30)
    moved = 2 * n * 2
    return {"kind": "copy", "bytes_moved": moved, "ms": ms, "tbps": moved / ms / 1e9}


def main():
    quick = "--quick" in sys.argv
    prefill_only = "--prefill-only" in sys.argv  # no copy, no decode shapes
    decode_only = "--decode-only" in sys.argv  # the copy and the decode shapes, no prefill
    if prefill_only and decode_only:
        sys.exit("sdpa_peers.py: --prefill-only and --decode-only exclude each other; give one")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "rows": []}
    if not prefill_only:
        out["rows"].append(copy_case(quick))
        for b, l in ((1, 32768), (16, 16384), (64, 4096), (128, 8192), (64, 10272), (1, 10272)):
            out["rows"].append(decode_case(b, l, quick))
    # Head dim 128 (Llama-3-8B's attention), then 64 (Llama-3.2-1B's: the same head counts) and
    # 256 (Gemma's head dim, the same head counts).
    for d, suffix in () if decode_only else ((D, ""), (64, "_d64"), (256, "_d256")):
        out["rows"].append(prefill_case("rag_tail" + suffix, 512, 16 * 512 + 512, False, quick, d))
        out["rows"].append(prefill_case("encode_4096" + suffix, 4096, 4096, True, quick, d))
        out["rows"].append(prefill_case("encode_16384" + suffix, 16384, 16384, True, quick, d))
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    for r in out["rows"]:
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})


if __name__ == "__main__":
    main()
