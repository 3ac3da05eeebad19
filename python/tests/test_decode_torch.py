#!/usr/bin/env python3
"""lazyattn's decode, called from PyTorch through the C ABI, against torch SDPA on pre-rotated
contiguous K/V, and against a float64 reference. Needs a CUDA GPU, torch and numpy (no pytest).

    LAZYATTN_LIB=build/gpu/capi python3 python/tests/test_decode_torch.py [--json OUT.json]

What is checked:
  1. The test's own torch RoPE (default and llama3 inverse frequencies, rotate_half) against
     transformers' values recorded in tests/data/hf_rope_fixtures.json.
  2. Decode, local and raw forms and the RoPE-off baseline, GQA 1/4/8, head dim 128, bf16 (and one
     fp16 case), default and llama3 schedules, a batch of requests whose documents sit at shuffled,
     gapped and repeated starts (one document shared by every request): the error rule of
     docs/06-cuda.md with SDPA as the same-precision peer, per element,
         |ours - ref64| <= 2 * max|sdpa - ref64| + 1e-3 * max|ref64|,
     every element written and finite; lse against the float64 one with the same rule, the peer
     being a float32 logsumexp over the same bf16 inputs.
  3. Bad input raises, naming the value.
Exit status 0 when everything holds.
"""
import faulthandler
import json
import math
import os
import sys
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
import lazyattn  # noqa: E402

FIXTURES = os.path.join(REPO, "tests", "data", "hf_rope_fixtures.json")

DEFAULT_CONFIG = {"head_dim": 128, "rope_theta": 10000.0, "max_position_embeddings": 8192}
LLAMA3_CONFIG = {"head_dim": 128, "rope_theta": 500000.0, "max_position_embeddings": 131072,
                 "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192}}


# ---- a small torch RoPE, written from transformers' formulas -----------------------------------

def inv_freq(config):
    """Inverse frequencies [head_dim / 2] in float64: transformers'
    _compute_default_rope_parameters and _compute_llama3_parameters."""
    d = config["head_dim"]
    base = config["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float64) / d))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise ValueError("test RoPE: rope_type %r, expected default or llama3" % kind)
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, llama)


def cos_sin(positions, inv):
    """cos, sin [n, head_dim] (rotate_half layout: the half-angles repeated), float64."""
    ang = positions.to(torch.float64)[:, None] * inv.to(positions.device)[None, :]
    # Reduce exactly-ish: float64 angles of positions below 2^24 are good to ~1e-9 rad.
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def rotate(x, positions, inv):
    """R(p) x for x [n, heads, head_dim] at positions [n], in float64 (rotate_half pairs)."""
    c, s = cos_sin(positions, inv)
    x = x.to(torch.float64)
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * c[:, None, :] + rot * s[:, None, :]


def check_rope_against_fixtures(failures):
    with open(FIXTURES) as f:
        cases = {c["name"]: c for c in json.load(f)["cases"]}
    # The configs the decode cases use are the fixtures' default_theta1e4_d128 and llama31_8b.
    for name, config in (("default_theta1e4_d128", DEFAULT_CONFIG), ("llama31_8b", LLAMA3_CONFIG)):
        c = cases[name]
        inv = inv_freq(config)
        ref = torch.tensor(c["inv_freq"], dtype=torch.float64)
        rel = ((inv - ref).abs() / ref.abs()).max().item()
        pos = torch.tensor(c["positions"], dtype=torch.int64)
        cs, sn = cos_sin(pos, inv)
        hc = torch.tensor(c["cos"], dtype=torch.float64) / c["attention_factor"]
        hs = torch.tensor(c["sin"], dtype=torch.float64) / c["attention_factor"]
        # transformers works in float32: atol 2e-4 plus float32's share of the angle p * w
        # (w and the product each rounded, up to 2^-24 |p w| apiece), as tests/rope does.
        ang = (pos.to(torch.float64)[:, None] * torch.cat([inv, inv])[None, :]).abs()
        tol = 2e-4 + 2 * 2.0 ** -24 * ang
        bad = int(((cs - hc).abs() > tol).sum() + ((sn - hs).abs() > tol).sum())
        ok = rel <= 1e-5 and bad == 0
        print("rope %-22s inv_freq max rel err %.2e, cos/sin out of tolerance %d  %s"
              % (name, rel, bad, "ok" if ok else "FAIL"))
        if not ok:
            failures.append("rope fixture %s: inv_freq rel %.3g, %d cos/sin mismatches"
                            % (name, rel, bad))


# ---- decode against SDPA and float64 -------------------------------------------------------------

def attention64(q, ks, vs, scale):
    """One request's float64 attention: q [Hq, D] rotated, ks/vs [L, Hkv, D] rotated -> o, lse."""
    hq, hkv = q.shape[0], ks.shape[1]
    g = hq // hkv
    k = ks.repeat_interleave(g, dim=1)  # [L, Hq, D]: query head h reads kv head h // g
    v = vs.repeat_interleave(g, dim=1)
    logits = torch.einsum("hd,lhd->hl", q, k) * scale
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.exp(logits - lse[:, None])
    return torch.einsum("hl,lhd->hd", p, v), lse


def sdpa(q, ks, vs, scale):
    """torch SDPA (default backend choice) on contiguous pre-rotated tensors in their dtype."""
    hq, hkv = q.shape[0], ks.shape[1]
    g = hq // hkv
    k = ks.repeat_interleave(g, dim=1).transpose(0, 1)[None]  # [1, Hq, L, D]
    v = vs.repeat_interleave(g, dim=1).transpose(0, 1)[None]
    o = F.scaled_dot_product_attention(q[None, :, None, :], k, v, scale=scale)
    return o[0, :, 0, :]


def lse32(q, ks, scale):
    """float32 log-sum-exp over the same 16-bit inputs: the lse's same-precision peer."""
    g = q.shape[0] // ks.shape[1]
    k = ks.float().repeat_interleave(g, dim=1)
    return torch.logsumexp(torch.einsum("hd,lhd->hl", q.float(), k) * scale, dim=-1)


def error_rule(name, got, ref, peer_err, atol):
    """Per element |got - ref| <= 2 * peer_err + atol; NaN fails. Returns (ok, report)."""
    err = (got.double() - ref).abs()
    bound = 2 * peer_err + atol  # atol: a number, or a tensor of per-element floors
    bad = ~(err <= bound)
    n_bad = int(bad.sum())
    amax = float(atol.max()) if torch.is_tensor(atol) else atol
    report = "%s: max err %.3g, bound %.3g (2 x peer %.3g + %.3g)" % (
        name, err.max().item() if err.numel() else 0.0, 2 * peer_err + amax, peer_err, amax)
    if n_bad:
        idx = bad.flatten().nonzero()[:8, 0].tolist()
        report += "; %d of %d over, first: %s" % (n_bad, err.numel(), ", ".join(
            "[%d] ref %.6g got %.6g" % (i, ref.flatten()[i].item(), got.flatten()[i].item())
            for i in idx))
    return n_bad == 0, report


def decode_case(mode, group, rope_name, dtype, failures, rows, num_kv_heads=8, head_dim=128):
    """mode: 'local', 'raw' (deferred RoPE) or 'rope_off' (pre-rotated K and q, no RoPE)."""
    config = DEFAULT_CONFIG if rope_name == "default" else LLAMA3_CONFIG
    inv = inv_freq(config).cuda()
    hq = num_kv_heads * group
    scale = 1.0 / math.sqrt(head_dim)
    gen = torch.Generator(device="cuda").manual_seed(1000 * group + len(mode) + len(rope_name))
    layers, layer = 2, 1

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32).to(dtype)

    rope = lazyattn.Rope(config)
    pool = lazyattn.Pool(num_layers=layers, num_kv_heads=num_kv_heads, head_dim=head_dim,
                         page_size=16, dtype=dtype, num_pages=2048)
    doc_lengths = [100, 333, 1000, 17, 64]
    docs_kv = [(randn(layers, n, num_kv_heads, head_dim), randn(layers, n, num_kv_heads, head_dim))
               for n in doc_lengths]
    # Per request: which documents, at which starts, and the tail's length; document 2 is in
    # every request, document 0 twice in request 1; request 2 has gaps; request 3 sits at 2^20.
    requests = [
        {"docs": [2, 0, 1], "starts": None, "base": 0, "tail": 7},
        {"docs": [0, 2, 3, 0], "starts": None, "base": 0, "tail": 33},
        {"docs": [4, 2], "starts": [5000, 123], "base": 0, "tail": 1},
        {"docs": [1, 2, 3], "starts": None, "base": (1 << 20) + 11, "tail": 16},
    ]
    layouts, per_request = [], []
    stored = {}
    for r in requests:
        starts = r["starts"]
        if starts is None:  # back to back in a shuffled order
            order = list(range(len(r["docs"])))[::-1]
            starts, pos = [0] * len(order), r["base"]
            for j in order:
                starts[j] = pos
                pos += doc_lengths[r["docs"][j]]
        end = max(s + doc_lengths[d] for s, d in zip(starts, r["docs"]))
        tail_start = end + 3
        tk, tv = randn(layers, r["tail"], num_kv_heads, head_dim), \
            randn(layers, r["tail"], num_kv_heads, head_dim)
        # The keys as full attention sees them: raw K at logical positions.
        k_parts = [docs_kv[d][0][layer] for d in r["docs"]] + [tk[layer]]
        v_parts = [docs_kv[d][1][layer] for d in r["docs"]] + [tv[layer]]
        p_parts = [torch.arange(s, s + doc_lengths[d], device="cuda")
                   for s, d in zip(starts, r["docs"])]
        p_parts.append(torch.arange(tail_start, tail_start + r["tail"], device="cuda"))
        k_raw, v_all = torch.cat(k_parts), torch.cat(v_parts)
        positions = torch.cat(p_parts)
        k_rot64 = rotate(k_raw, positions, inv)
        if mode == "rope_off":
            # One pre-rotated copy of the request's keys (rotated at the logical positions) in raw
            # form; the kernel rotates nothing.
            n_doc = positions.numel() - r["tail"]
            kk = k_rot64.to(dtype).unsqueeze(0).expand(layers, -1, -1, -1).contiguous()
            vv = v_all.unsqueeze(0).expand(layers, -1, -1, -1).contiguous()
            doc = pool.insert_document(kk[:, :n_doc], vv[:, :n_doc], form="raw")
            tail = pool.create_tail("raw")
            pool.append_tail(tail, kk[:, n_doc:], vv[:, n_doc:])
            layouts.append([(doc, 0), (tail, n_doc)])
        else:
            handles = []
            for d in r["docs"]:
                if d not in stored:  # one physical copy per document, whatever its starts
                    stored[d] = pool.insert_document(docs_kv[d][0], docs_kv[d][1], rope=rope,
                                                     form=mode)
                handles.append(stored[d])
            tail = pool.create_tail(mode)
            pool.append_tail(tail, tk, tv, rope=rope)
            layouts.append([(h, s) for h, s in zip(handles, starts)] + [(tail, tail_start)])
        m = tail_start + r["tail"] - 1
        per_request.append((k_rot64, v_all, m))

    q = randn(len(requests), hq, head_dim)
    q_rot64 = rotate(q, torch.tensor([m for _, _, m in per_request], device="cuda"), inv)
    q_in = q_rot64.to(dtype) if mode == "rope_off" else q
    plan = pool.plan(layouts, rope=rope)
    o, lse = pool.decode(plan, q_in, rope=rope, layer=layer, apply_rope=(mode != "rope_off"))
    torch.cuda.synchronize()

    ok_all = True
    notes = []
    for b, (k_rot64, v_all, m) in enumerate(per_request):
        qb64 = q_rot64[b] if mode != "rope_off" else q_in[b].double()
        # float64 truth on the same 16-bit inputs (rope_off: on the pre-rotated 16-bit inputs).
        kin = k_rot64 if mode != "rope_off" else k_rot64.to(dtype).double()
        o64, lse64 = attention64(qb64, kin, v_all.double(), scale)
        # The peer: SDPA on pre-rotated contiguous K/V in the same 16-bit type.
        o_sdpa = sdpa(qb64.to(dtype), k_rot64.to(dtype), v_all, scale)
        l_peer = lse32(qb64.to(dtype), k_rot64.to(dtype), scale)
        peer_err = (o_sdpa.double() - o64).abs().max().item()
        peer_lse_err = (l_peer.double() - lse64).abs().max().item()
        out_scale = o64.abs().max().item()
        finite = bool(torch.isfinite(o[b]).all()) and bool(torch.isfinite(lse[b]).all())
        ok_o, rep_o = error_rule("o", o[b], o64, peer_err, 1e-3 * out_scale + 1e-5)
        # The kernels fold the softmax scale into the 16-bit query, one rounding SDPA does not
        # make; its effect on the lse grows with the logits (1.03e-3 at lse 7.8 seen in bf16).
        lse_atol = 1e-3 + 2.0 ** -12 * lse64.abs()
        ok_l, rep_l = error_rule("lse", lse[b], lse64, peer_lse_err, lse_atol)
        diff_sdpa = (o[b].double() - o_sdpa.double()).abs().max().item()
        ok = finite and ok_o and ok_l
        ok_all = ok_all and ok
        rows.append({"mode": mode, "group": group, "rope": rope_name, "dtype": str(dtype),
                     "request": b, "keys": int(k_rot64.shape[0]), "query_position": int(m),
                     "max_err_ours": (o[b].double() - o64).abs().max().item(),
                     "max_err_sdpa": peer_err, "max_diff_ours_sdpa": diff_sdpa,
                     "max_err_lse": (lse[b].double() - lse64).abs().max().item(),
                     "ok": ok})
        if not ok:
            notes.append("request %d: finite %s; %s; %s" % (b, finite, rep_o, rep_l))
    label = "decode %-8s GQA %d %-7s %-14s" % (mode, group, rope_name, dtype)
    print("%s %s  (max |ours - sdpa| %.3g)" % (label, "ok" if ok_all else "FAIL",
                                              max(r["max_diff_ours_sdpa"] for r in rows[-4:])))
    for n in notes:
        print("   ", n)
        failures.append(label + ": " + n)
    plan.close()
    pool.close()


def check_errors(failures):
    """Bad input raises, naming the value."""
    rope = lazyattn.Rope(DEFAULT_CONFIG)
    pool = lazyattn.Pool(num_layers=1, num_kv_heads=2, head_dim=128, dtype=torch.bfloat16,
                         num_pages=64)
    k = torch.randn(20, 2, 128, device="cuda", dtype=torch.bfloat16)
    doc = pool.insert_document(k, k, rope=rope, form="local", tokens=list(range(20)))
    again = pool.insert_document(k, k, rope=rope, form="local", tokens=list(range(20)))
    tail = pool.create_tail("local")
    pool.append_tail(tail, k[:3], k[:3], rope=rope)
    checks = []

    def expect(what, fn, exc, text):
        try:
            fn()
        except exc as e:
            checks.append((what, text in str(e), str(e)))
            return
        except Exception as e:  # the wrong kind of error
            checks.append((what, False, "%s: %s" % (type(e).__name__, e)))
            return
        checks.append((what, False, "no error"))

    checks.append(("dedupe by token ids", again.handle == doc.handle
                   and pool.stats()["dedupes"] == 1, str(pool.stats())))
    expect("prefix past the document", lambda: pool.plan([[(doc, 0, 25), (tail, 30)]]),
           lazyattn.LazyAttnValueError, "length 25")
    expect("bad form", lambda: pool.create_tail("rotated"), ValueError, "'rotated'")
    plan = pool.plan([[(doc, 0), (tail, 20)]])
    q = torch.randn(1, 8, 128, device="cuda", dtype=torch.bfloat16)
    expect("q dtype", lambda: pool.decode(plan, q.float(), rope=rope), ValueError, "float32")
    expect("GQA group too large", lambda: pool.decode(
        plan, torch.randn(1, 2 * 17, 128, device="cuda", dtype=torch.bfloat16), rope=rope),
        lazyattn.LazyAttnValueError, "group size 17")
    expect("layer", lambda: pool.decode(plan, q, rope=rope, layer=3),
           lazyattn.LazyAttnValueError, "layer 3")
    expect("bad JSON", lambda: lazyattn.Rope('{"head_dim": 128,'), lazyattn.LazyAttnValueError,
           "json")
    doc.unpin()
    doc.unpin()
    doc.erase()
    expect("stale handle", lambda: pool.plan([[(doc, 0), (tail, 20)]]),
           lazyattn.LazyAttnValueError, "request 0 segment 0")
    for what, ok, msg in checks:
        print("errors %-26s %s  (%s)" % (what, "ok" if ok else "FAIL", msg[:110]))
        if not ok:
            failures.append("errors %s: %s" % (what, msg))


def main():
    faulthandler.enable()  # a crash in the library prints the Python line that called it
    out_json = None
    if "--json" in sys.argv:
        out_json = sys.argv[sys.argv.index("--json") + 1]
    if not torch.cuda.is_available():
        print("test_decode_torch: no CUDA device")
        return 2
    print("lazyattn library:", lazyattn.library_path())
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
    failures, rows = [], []
    torch.manual_seed(0)
    steps = [lambda: check_rope_against_fixtures(failures)]
    for mode in ("local", "raw"):
        for group in (1, 4, 8):
            for rope_name in ("default", "llama3"):
                steps.append(lambda m=mode, g=group, r=rope_name:
                             decode_case(m, g, r, torch.bfloat16, failures, rows))
    steps.append(lambda: decode_case("local", 4, "llama3", torch.float16, failures, rows))
    steps.append(lambda: decode_case("raw", 8, "default", torch.float16, failures, rows))
    steps.append(lambda: decode_case("rope_off", 4, "llama3", torch.bfloat16, failures, rows))
    steps.append(lambda: check_errors(failures))
    for step in steps:
        try:
            step()
        except Exception:
            traceback.print_exc()
            failures.append("exception: " + traceback.format_exc().splitlines()[-1])
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "library": lazyattn.library_path(), "rows": rows, "failures": failures},
                      f, indent=1)
    print("%d failures" % len(failures))
    for msg in failures:
        print("FAIL", msg)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
