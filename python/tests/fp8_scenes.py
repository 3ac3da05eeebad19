"""The fp8 pool tests' scene and helpers (test_fp8.py): scales of at most two significant bits,
the codes a write should store (torch's own e4m3 quantization), and Fp8Scene, documents and tails
written into an fp8 pool with a float64 reference over the stored values. Needs torch and a CUDA
GPU (test_fp8.py skips without one before importing this).
"""
import math

import pytest
import torch

import lazyattn
from reference import attention64, check_close, lse32, rotate64, sdpa16
from scenes import DEV, LENGTH_DEPENDENT, config

FP8 = torch.float8_e4m3fn
# Scales of at most two significant bits: a code (four) times one is exact in bfloat16 and
# float16, so the kernels' dequantized values are the reference's.
K_SCALES = [0.25, 0.5, 0.75, 1.5, 0.125, 1.0, 0.375, 2.0]
V_SCALES = [1.0, 0.375, 0.125, 0.5, 1.5, 0.25, 2.0, 0.75]
DOC_LENGTHS = [17, 100, 257]


def scales_of(values, layers, heads, shift):
    """A [layers][heads] list of scales drawn from `values`."""
    return [[values[(l * heads + h + shift) % len(values)] for h in range(heads)]
            for l in range(layers)]


def quantize(x, scale):
    """The write's e4m3(x / scale) in torch for x [n, kv_heads, head_dim] and scale [kv_heads]
    float32: the codes as uint8. (torch's conversion rounds to nearest even but does not
    saturate, hence the clamp.)"""
    q = x.float() / scale.to(x.device)[None, :, None]
    return q.clamp(-448.0, 448.0).to(FP8).view(torch.uint8)


def stored(pool, dst, layer):
    """The codes a write to `dst` left in `layer`: (K, V) uint8 [n, kv_heads, head_dim], read at
    the destinations' pages and slots (int32 page [n], then int32 slot [n]: capi/lazyattn_c.h)."""
    n = dst.num_tokens
    at = dst.data[:8 * n].view(torch.int32).long()
    page, slot = at[:n], at[n:]
    return tuple(t[layer].view(torch.uint8)[page, :, slot] for t in (pool.k, pool.v))


def dequantize(codes, scale):
    """code x scale in float64, codes uint8 [n, kv_heads, head_dim], scale [kv_heads]."""
    return codes.view(FP8).float().double() * scale.double().to(codes.device)[None, :, None]


def snapshot(pool):
    torch.cuda.synchronize()
    return (pool.stats(), pool.k.view(torch.uint8).clone(), pool.v.view(torch.uint8).clone(),
            pool.fp8_saturated())


def refused(pool, call, exc, *needles):
    """`call` raises `exc` whose message contains every needle; the pool (statistics, codes,
    saturation count) is as before."""
    before = snapshot(pool)
    with pytest.raises(exc) as info:
        call()
    for n in needles:
        assert n in str(info.value), "%r not in %r" % (n, str(info.value))
    after = snapshot(pool)
    assert after[0] == before[0] and after[3] == before[3]
    assert torch.equal(after[1], before[1]) and torch.equal(after[2], before[2])
    return str(info.value)


# ---- a scene: documents, requests and tails in an fp8 pool ---------------------------------------

class Fp8Scene:
    """Documents and three requests (shuffled back to back; a repeated document and two sharing
    a start; gapped at 2^20) in a two-layer fp8 pool, with what each write stored read back.

    mode 'native': K before RoPE (rotated on the way for local form), q un-rotated, and the same
    writes serve mode 'rotated' (q rotated at its own position); 'model': K and q as a model's
    forward leaves them (rotated, with the attention factor), local documents, absolute tails.
    dtype: the tokens'; q_dtype: the queries' and outputs' (the kernels take either)."""

    def __init__(self, kind, sched, mode, doc_form, tail_form, heads, head_dim,
                 dtype=torch.bfloat16, q_dtype=None, seed=0, base=1 << 20):
        self.kind, self.sched, self.mode = kind, sched, mode
        self.doc_form = doc_form
        self.tail_form = "absolute" if mode == "model" else tail_form
        self.hq, self.hkv = heads
        self.d, self.dtype, self.q_dtype = head_dim, dtype, q_dtype or dtype
        self.layers, self.layer = 2, 1
        self.gen = torch.Generator(device=DEV).manual_seed(seed)
        self.rope = lazyattn.Rope(config(sched, head_dim))
        ks = scales_of(K_SCALES, self.layers, self.hkv, seed)
        vs = scales_of(V_SCALES, self.layers, self.hkv, seed + 1)
        # One as a list, one as a tensor: both are taken.
        self.pool = lazyattn.Pool(self.layers, self.hkv, head_dim, num_pages=512, dtype=FP8,
                                  rope=self.rope, k_scale=ks, v_scale=torch.tensor(vs))
        self.k_scale = torch.tensor(ks, dtype=torch.float32)
        self.v_scale = torch.tensor(vs, dtype=torch.float32)
        self.inv0, self.af0 = self.rope.frequencies(0)
        self.il = self.rope.interleaved
        self.write_failures = []
        self.docs, self.doc_kv = [], []
        for n in DOC_LENGTHS:
            doc, inserted = self.pool.allocate(n, doc_form)
            assert inserted
            self.doc_kv.append(self.put(doc, 0, n, doc_form, torch.arange(n)))
            self.pool.commit(doc)
            self.docs.append(doc)
        order = [0, 1, 2]
        order.sort(key=lambda j: (j * 7 + seed) % 3)
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
        self.requests, self.layouts = [], []
        for (segs, ts), t, nq in zip(specs, tails, nqs):
            tail = self.pool.create_tail(self.tail_form)
            first = self.pool.reserve(tail, t)
            kv = self.put(tail, first, t, self.tail_form, ts + torch.arange(t))
            self.layouts.append([(self.docs[d], s) for d, s in segs] + [(tail, ts)])
            ends = [s + DOC_LENGTHS[d] for d, s in segs] + [ts + t]
            self.requests.append({"segs": segs, "ts": ts, "t": t, "nq": nq, "kv": kv,
                                  "rope_length": max(ends)})
        self.plan = self.pool.plan(self.layouts, kind=kind, num_qo_heads=self.hq,
                                   num_queries=None if kind == "decode" else nqs)
        rows = sum(r["nq"] for r in self.requests)
        self.q_raw = self.randn(rows, self.hq, head_dim).to(self.q_dtype)

    def randn(self, *shape):
        return torch.randn(*shape, device=DEV, generator=self.gen)

    def put(self, obj, first, n, form, positions):
        """Writes n tokens of every layer to obj's tokens [first, first + n): K and V of a few
        times their head's scale, K as the mode hands it over (a model's rotated at
        `positions`). Checks the stored codes of layer self.layer against torch's quantization
        and returns them dequantized, (K, V) float64 [n, kv_heads, head_dim]."""
        L = self.layer
        k = (2 * self.randn(self.layers, n, self.hkv, self.d)
             * self.k_scale.to(DEV)[:, None, :, None]).to(self.dtype)
        v = (2 * self.randn(self.layers, n, self.hkv, self.d)
             * self.v_scale.to(DEV)[:, None, :, None]).to(self.dtype)
        rotate = form == "local" and self.mode != "model"
        if self.mode == "model":
            k = torch.stack([rotate64(k[l], positions, self.inv0, self.af0, self.il)
                             for l in range(self.layers)]).to(self.dtype)
        dst = self.pool.destinations([(obj, first, n)], rotate=rotate)
        for layer in range(self.layers):
            self.pool.write(dst, layer, k[layer], v[layer])
        k_codes, v_codes = stored(self.pool, dst, L)
        what = "%s %s tokens [%d, %d)" % (form, type(obj).__name__, first, first + n)
        if not torch.equal(v_codes, quantize(v[L], self.v_scale[L])):
            self.write_failures.append("V codes of " + what)
        if not rotate:
            if not torch.equal(k_codes, quantize(k[L], self.k_scale[L])):
                self.write_failures.append("K codes of " + what)
        else:
            # Rotated in fp32 on the way: within half a code step of the exact rotation's
            # (a value on a rounding boundary may go either way).
            exact = rotate64(k[L], first + torch.arange(n), self.inv0, 1.0, self.il)
            exact = exact / self.k_scale[L].double().to(DEV)[None, :, None]
            err = (k_codes.view(FP8).float().double() - exact).abs()
            if not bool((err <= exact.abs() * (2.0 ** -4 + 1e-6) + 2.0 ** -10).all()):
                self.write_failures.append("rotated K codes of %s: max err %.3g code units"
                                           % (what, float(err.max())))
        return dequantize(k_codes, self.k_scale[L]), dequantize(v_codes, self.v_scale[L])

    def freqs(self, r):
        if self.sched in LENGTH_DEPENDENT:
            return self.rope.frequencies(r["rope_length"])
        return self.inv0, self.af0

    def query_positions(self, r):
        return r["ts"] + r["t"] - r["nq"] + torch.arange(r["nq"])

    def q_input(self, mode):
        if mode == "native":
            return self.q_raw
        out, row = [], 0
        for r in self.requests:
            inv, af = self.freqs(r)
            q = self.q_raw[row:row + r["nq"]]
            out.append(rotate64(q, self.query_positions(r), inv, af if mode == "model" else 1.0,
                                self.il).to(self.q_dtype))
            row += r["nq"]
        return torch.cat(out)

    def logical(self, k, form, start, inv, af):
        """A segment's stored keys (dequantized) at their logical positions start + i, with the
        attention factor once: local form holds R(i) k (a model's with the factor in it), raw
        form k, absolute form (model mode) the model's key at its logical position."""
        n = k.shape[0]
        if form == "raw":
            return rotate64(k, start + torch.arange(n), inv, af, self.il)
        if form == "absolute":
            return k
        baked = af if self.mode == "model" else 1.0
        return rotate64(k, torch.full((n,), start), inv, af / baked, self.il)

    def run(self, mode):
        f = self.pool.decode if self.kind == "decode" else self.pool.prefill
        return f(self.plan, self.q_input(mode), layer=self.layer, query_rotated=mode != "native",
                 inputs_scaled=mode == "model")

    def check(self, mode, label, failures):
        """Runs `mode` and applies the rule; returns (o, o64, the rule's bound on |o - o64|)."""
        o, lse = self.run(mode)
        torch.cuda.synchronize()
        assert o.dtype == self.q_dtype, "%s: o of dtype %s" % (label, o.dtype)
        assert torch.isfinite(o.float()).all() and torch.isfinite(lse).all(), label + ": non-finite"
        scale = 1.0 / math.sqrt(self.d)
        q_in = self.q_input(mode)
        outs = [[], [], [], []]
        row = 0
        for r in self.requests:
            inv, af = self.freqs(r)
            ks, vs, vis = [], [], []
            for d, s in r["segs"]:
                k, v = self.doc_kv[d]
                ks.append(self.logical(k, self.doc_form, s, inv, af))
                vs.append(v)
                vis.append(torch.ones(r["nq"], DOC_LENGTHS[d], dtype=torch.bool))
            k, v = r["kv"]
            t, nq = r["t"], r["nq"]
            ks.append(self.logical(k, self.tail_form, r["ts"], inv, af))
            vs.append(v)
            vis.append(torch.arange(t)[None, :] <= (t - nq + torch.arange(nq))[:, None])
            K, V = torch.cat(ks), torch.cat(vs)
            visible = torch.cat(vis, dim=1).to(DEV)
            Q = rotate64(self.q_raw[row:row + nq], self.query_positions(r), inv, af, self.il)
            o64, l64 = attention64(Q, K, V, visible, scale)
            if mode == "native":
                q16 = Q.to(self.q_dtype)
            elif mode == "rotated":  # the factor the kernels apply to the rotated query
                q16 = rotate64(q_in[row:row + nq], torch.zeros(nq, dtype=torch.int64), inv, af,
                               self.il).to(self.q_dtype)
            else:
                q16 = q_in[row:row + nq]
            k16, v16 = K.to(self.q_dtype), V.to(self.q_dtype)
            outs[0].append(o64)
            outs[1].append(l64)
            outs[2].append(sdpa16(q16, k16, v16, visible, scale))
            outs[3].append(lse32(q16, k16, visible, scale))
            row += nq
        o64, l64, o_peer, l_peer = (torch.cat(x) for x in outs)
        atol = 1e-3 * float(o64.abs().max())
        check_close(label + " o", o, o64, o_peer, atol, failures)
        floor = 1e-3 + 2.0 ** -12 * l64.abs()
        err = (lse.double() - l64).abs()
        peer = float((l_peer.double() - l64).abs().max())
        if not bool((err <= 2 * peer + floor).all()):
            failures.append("%s lse: max err %.3g, bound 2 x %.3g + floor"
                            % (label, float(err.max()), peer))
        return o, o64, 2 * float((o_peer.double() - o64).abs().max()) + atol

    def close(self):
        self.plan.close()
        self.pool.close()
        self.rope.close()
