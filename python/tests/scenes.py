"""Shared by lazyattn's GPU tests from PyTorch (test_kernels.py, test_store_gpu.py,
test_operators.py): a config.json-style dict of each RoPE schedule the kernels take, a Scene
(documents, requests and tails in a pool, with the raw K/V kept for the float64 reference) and
the error rule applied to one run of it.

The rule is docs/06-cuda.md's with SDPA as the same-precision peer: every element of o within
2 x SDPA's largest error against float64 plus 1e-3 of the output scale, lse likewise against a
float32 log-sum-exp of the same 16-bit inputs (floor 1e-3 + 2^-12 |lse|).
"""
import math
import random

import torch

import lazyattn
from reference import attention64, check_close, lse32, rotate64, sdpa16

DEV = torch.device("cuda")




def phi3_like(n, top):
    return [round(1.0 + (top - 1.0) * (i / (n - 1)) ** 2, 6) for i in range(n)]


def config(name, head_dim=128):
    """A config.json-style dict of each schedule the kernels take."""
    base = {"head_dim": head_dim, "rope_theta": 10000.0, "max_position_embeddings": 8192}
    extra = {
        "default": {},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
        "llama3": {"rope_theta": 500000.0, "max_position_embeddings": 131072,
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192}},
        "yarn": {"rope_theta": 1000000.0, "max_position_embeddings": 131072,
                 "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": 32768}},
        "dynamic": {"max_position_embeddings": 4096,
                    "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        "longrope": {"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                     "rope_scaling": {"rope_type": "longrope",
                                      "short_factor": phi3_like(head_dim // 2, 2.0),
                                      "long_factor": phi3_like(head_dim // 2, 40.0)}},
        "gptj": {"rope_interleave": True},
        "partial": {"partial_rotary_factor": 0.5},
    }[name]
    return {**base, **extra}


LENGTH_DEPENDENT = ("dynamic", "longrope")
HEADS = [(8, 8), (32, 8), (16, 2)]  # GQA groups 1, 4, 8
DOC_LENGTHS = [17, 100, 257]


class Scene:
    """Documents, requests and their tails in a pool, with the raw K/V kept for the reference.

    mode 'native': K before RoPE (rotated on the way for local form), q un-rotated;
    'rotated': q rotated at its own position (query_rotated), keys as 'native';
    'model': everything as a model's forward leaves it: q and K rotated with the attention factor
    on their rotary dims, documents local (K rotated at 0..len-1, copied), tails absolute (K
    rotated at the tail's logical positions), query_rotated and inputs_scaled."""

    def __init__(self, sched, kind, mode, doc_form, tail_form, heads, head_dim=128,
                 dtype=torch.bfloat16, seed=0, base=1 << 20):
        self.sched, self.kind, self.mode = sched, kind, mode
        self.doc_form = doc_form
        self.tail_form = "absolute" if mode == "model" else tail_form
        self.hq, self.hkv = heads
        self.d = head_dim
        self.dtype = dtype
        self.layers, self.layer = 2, 1
        rng = random.Random(seed)
        self.gen = torch.Generator(device=DEV).manual_seed(seed)
        self.cfg = config(sched, head_dim)
        self.rope = lazyattn.Rope(self.cfg)
        self.pool = lazyattn.Pool(self.layers, self.hkv, head_dim, num_pages=512, page_size=16,
                                  dtype=dtype, rope=self.rope)
        self.inv0, self.af0 = self.rope.frequencies(0)
        self.interleaved = self.rope.interleaved
        af = self.af0 if mode == "model" else 1.0
        self.docs, self.doc_kv = [], []
        for n in DOC_LENGTHS:
            k, v = self.randn(self.layers, n, self.hkv, head_dim), self.randn(
                self.layers, n, self.hkv, head_dim)
            self.doc_kv.append((k, v))
            if mode == "model":
                pos = torch.arange(n)
                km = torch.stack([rotate64(k[l], pos, self.inv0, af, self.interleaved)
                                  for l in range(self.layers)]).to(dtype)
                self.docs.append(self.pool.insert(km, v, form="local", k_rotated=True))
            else:
                self.docs.append(self.pool.insert(k, v, form=doc_form))
        # Three requests: shuffled back-to-back; a repeated document and two sharing a start
        # (parallel); gapped at a large base position.
        order = list(range(3))
        rng.shuffle(order)
        starts, pos = [0] * 3, 0
        for j in order:
            starts[j] = pos
            pos += DOC_LENGTHS[j]
        specs = [
            ([(0, starts[0]), (1, starts[1]), (2, starts[2])], pos + 3),
            ([(1, 0), (0, 0), (1, 300)], 300 + DOC_LENGTHS[1]),
            ([(2, base + 1000), (0, base)], base + 5000),
        ]
        if kind == "decode":
            tails, nqs = [1, 9, 40], [1, 1, 1]
        else:
            tails, nqs = [5, 33, 70], [5, 13, 70]  # request 1: a chunk after 20 earlier tokens
        self.requests = []
        self.layouts = []
        for (segs, ts), t, nq in zip(specs, tails, nqs):
            k, v = self.randn(self.layers, t, self.hkv, head_dim), self.randn(
                self.layers, t, self.hkv, head_dim)
            form = "absolute" if mode == "model" else tail_form
            tail = self.pool.create_tail(form)
            if form == "absolute":
                p = ts + torch.arange(t)
                km = torch.stack([rotate64(k[l], p, self.inv0, af, self.interleaved)
                                  for l in range(self.layers)]).to(dtype)
                self.pool.append(tail, km, v)
            else:
                self.pool.append(tail, k, v)
            layout = [(self.docs[d], s) for d, s in segs] + [(tail, ts)]
            self.layouts.append(layout)
            ends = [s + DOC_LENGTHS[d] for d, s in segs] + [ts + t]
            self.requests.append({"segs": segs, "ts": ts, "t": t, "nq": nq, "k": k, "v": v,
                                  "rope_length": max(ends)})
        self.plan = self.pool.plan(self.layouts, kind=kind, num_qo_heads=self.hq,
                                   num_queries=None if kind == "decode" else nqs)
        rows = sum(r["nq"] for r in self.requests)
        self.q_raw = self.randn(rows, self.hq, head_dim)

    def randn(self, *shape):
        return torch.randn(*shape, device=DEV, generator=self.gen).to(self.dtype)

    def freqs(self, r):
        if self.sched in LENGTH_DEPENDENT:
            return self.rope.frequencies(r["rope_length"])
        return self.inv0, self.af0

    def query_positions(self, r):
        return r["ts"] + r["t"] - r["nq"] + torch.arange(r["nq"])

    def q_input(self, mode):
        """The queries as `mode` hands them to the kernels."""
        if mode == "native":
            return self.q_raw
        out, row = [], 0
        for r in self.requests:
            inv, af = self.freqs(r)
            q = self.q_raw[row:row + r["nq"]]
            out.append(rotate64(q, self.query_positions(r), inv, af if mode == "model" else 1.0,
                                self.interleaved).to(self.dtype))
            row += r["nq"]
        return torch.cat(out)

    def run(self, mode):
        q = self.q_input(mode)
        f = self.pool.decode if self.kind == "decode" else self.pool.prefill
        return f(self.plan, q, layer=self.layer, query_rotated=mode != "native",
                 inputs_scaled=mode == "model")

    def peer_keys(self, k, form, start, inv, af):
        """One segment's keys as Block-Attention's eager path holds them, from the same stored
        bytes: local form re-rotated from its stored R(i) k to the segment's start and rounded
        again, raw form rotated at the logical positions and rounded once, absolute form as
        stored. (The stored values are recomputed here as the write left them, to an ulp.)"""
        n = k.shape[0]
        pos = start + torch.arange(n)
        if form == "raw":
            return rotate64(k, pos, inv, af, self.interleaved).to(self.dtype)
        baked = af if self.mode == "model" else 1.0  # a model's K carries the factor
        if form == "absolute":
            return rotate64(k, pos, inv, baked, self.interleaved).to(self.dtype)
        stored = rotate64(k, torch.arange(n), inv, baked, self.interleaved).to(self.dtype)
        return rotate64(stored, torch.full((n,), start), inv, af / baked,
                        self.interleaved).to(self.dtype)

    def reference(self, mode):
        """(o64, lse64, o_peer, lse_peer) over all query rows: the float64 truth from the raw
        K/V, and the same-precision peer: SDPA over the eager path's keys (peer_keys) and the
        query as `mode` hands it over (scaled by the attention factor where the kernels would)."""
        scale = 1.0 / math.sqrt(self.d)
        L = self.layer
        outs = [[], [], [], []]
        q_in = self.q_input(mode)
        row = 0
        for r in self.requests:
            inv, af = self.freqs(r)
            ks, vs, vis, pk = [], [], [], []
            for d, s in r["segs"]:
                k, v = self.doc_kv[d]
                n = DOC_LENGTHS[d]
                ks.append(rotate64(k[L], s + torch.arange(n), inv, af, self.interleaved))
                pk.append(self.peer_keys(k[L], self.doc_form, s, inv, af))
                vs.append(v[L].double())
                vis.append(torch.ones(r["nq"], n, dtype=torch.bool))
            t, nq = r["t"], r["nq"]
            ks.append(rotate64(r["k"][L], r["ts"] + torch.arange(t), inv, af, self.interleaved))
            pk.append(self.peer_keys(r["k"][L], self.tail_form, r["ts"], inv, af))
            vs.append(r["v"][L].double())
            tail_vis = torch.arange(t)[None, :] <= (t - nq + torch.arange(nq))[:, None]
            vis.append(tail_vis)
            K, V = torch.cat(ks), torch.cat(vs)
            visible = torch.cat(vis, dim=1).to(DEV)
            q = rotate64(self.q_raw[row:row + nq], self.query_positions(r), inv, af,
                         self.interleaved)
            o64, l64 = attention64(q, K, V, visible, scale)
            if mode == "native":
                q16 = q.to(self.dtype)
            elif mode == "rotated":  # the factor the kernels apply to the rotated query
                q16 = rotate64(q_in[row:row + nq], torch.zeros(nq, dtype=torch.int64), inv, af,
                               self.interleaved).to(self.dtype)
            else:
                q16 = q_in[row:row + nq]
            k16, v16 = torch.cat(pk), V.to(self.dtype)
            outs[0].append(o64)
            outs[1].append(l64)
            outs[2].append(sdpa16(q16, k16, v16, visible, scale))
            outs[3].append(lse32(q16, k16, visible, scale))
            row += nq
        return [torch.cat(x) for x in outs]

    def close(self):
        self.plan.close()
        self.pool.close()
        self.rope.close()


def check_scene(s, mode, label, failures):
    """Runs the scene's kernel with `mode`'s inputs and applies the rule; returns (o, o64, the
    rule's bound on |o - o64|)."""
    o, lse = s.run(mode)
    torch.cuda.synchronize()
    o64, l64, o_peer, l_peer = s.reference(mode)
    assert torch.isfinite(o.float()).all() and torch.isfinite(lse).all(), label + ": non-finite"
    check_close(label + " o", o, o64, o_peer, 1e-3 * float(o64.abs().max()), failures)
    floor = 1e-3 + 2.0 ** -12 * l64.abs()
    err = (lse.double() - l64).abs()
    peer = float((l_peer.double() - l64).abs().max())
    if not bool((err <= 2 * peer + floor).all()):
        failures.append("%s lse: max err %.3g, bound 2 x %.3g + floor" % (label, float(err.max()),
                                                                        peer))
    atol = 1e-3 * float(o64.abs().max())
    return o, o64, 2 * float((o_peer.double() - o64).abs().max()) + atol
