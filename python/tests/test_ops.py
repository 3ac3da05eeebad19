"""lazyattn's GPU path from PyTorch: the store, writes, prefill and decode on torch tensors against
the float64 reference (reference.py), for every RoPE schedule the kernels take, in both storage
forms, with queries and keys as the library takes them and as models produce them; the
operators under torch.library.opcheck, torch.compile(fullgraph=True) and CUDA graphs; bad input.
Needs a CUDA GPU and torch:

    python3 -m pytest python/tests/test_ops.py -q

The error rule is docs/06-cuda.md's with SDPA as the same-precision peer: every element of o
within 2 x SDPA's largest error against float64 plus 1e-3 of the output scale, lse likewise
against a float32 log-sum-exp of the same 16-bit inputs (floor 1e-3 + 2^-12 |lse|).
"""
import math
import random

import pytest
import torch

import lazyattn
from reference import attention64, check_close, lse32, rotate64, sdpa16

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

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


# ---- the kernels against float64, every schedule and form ---------------------------------------

CASES = []
for sched in ("default", "linear", "llama3", "yarn"):
    for doc_form, tail_form in (("local", "local"), ("raw", "raw")):
        CASES.append((sched, doc_form, tail_form, 128))
for sched in LENGTH_DEPENDENT:
    CASES.append((sched, "raw", "raw", 128))
for sched in ("gptj", "partial"):
    CASES.append((sched, "local", "local", 128))
    CASES.append((sched, "raw", "local", 128))
CASES += [("llama3", "local", "local", 64), ("llama3", "local", "raw", 256),
          ("default", "raw", "raw", 64)]


@pytest.mark.parametrize("kind", ["decode", "prefill"])
@pytest.mark.parametrize("sched,doc_form,tail_form,head_dim", CASES)
def test_kernels_match_float64(kind, sched, doc_form, tail_form, head_dim):
    """Un-rotated queries, and queries rotated at their own positions (the same results, and
    both within the rule of the float64 reference); and, where the form is local and the
    schedule does not depend on the length, the whole model-style path."""
    seed = hash((kind, sched, doc_form, tail_form, head_dim)) % 100000
    heads = HEADS[seed % 3] if head_dim != 256 else (16, 4)
    s = Scene(sched, kind, "native", doc_form, tail_form, heads, head_dim, seed=seed)
    failures = []
    try:
        label = "%s %s docs %s tail %s d%d %s" % (kind, sched, doc_form, tail_form, head_dim,
                                                  heads)
        o_native, o64, bound_native = check_scene(s, "native", label + " native", failures)
        o_rot, _, bound_rot = check_scene(s, "rotated", label + " query_rotated", failures)
        # The pre-rotated path equals the raw-query path: both within their rule of float64,
        # so within the sum of the two bounds of each other.
        check_close(label + " rotated vs native", o_rot, o_native.double(), None,
                    bound_native + bound_rot, failures)
    finally:
        s.close()
    if doc_form == "local" and sched not in LENGTH_DEPENDENT:
        m = Scene(sched, kind, "model", doc_form, "absolute", heads, head_dim, seed=seed + 1)
        try:
            check_scene(m, "model", label + " model path", failures)
        finally:
            m.close()
    assert not failures, "\n".join(failures)


def test_float16_and_query_rotated_model_path():
    failures = []
    for kind in ("decode", "prefill"):
        s = Scene("llama3", kind, "model", "local", "absolute", (32, 8), dtype=torch.float16,
                  seed=7)
        try:
            check_scene(s, "model", "fp16 %s model path" % kind, failures)
        finally:
            s.close()
    assert not failures, "\n".join(failures)


# ---- document encoding and chunked prefill --------------------------------------------------------

@pytest.mark.parametrize("query_rotated", [False, True])
def test_document_encoding(query_rotated):
    """A plan whose only segment is a tail at 0 with every token a query: causal encoding (the
    Hopper kernel's one-segment form at head dim 128), two documents in one batch."""
    torch.manual_seed(3)
    rope = lazyattn.Rope(config("llama3"))
    pool = lazyattn.Pool(1, 8, 128, num_pages=256, rope=rope)
    inv, af = rope.frequencies(0)
    lengths = [300, 129]
    tails, ks, vs = [], [], []
    for n in lengths:
        k = torch.randn(n, 8, 128, device=DEV).bfloat16()
        v = torch.randn(n, 8, 128, device=DEV).bfloat16()
        t = pool.create_tail("local")
        pool.append(t, k, v)
        tails.append(t)
        ks.append(k)
        vs.append(v)
    plan = pool.plan([[(t, 0)] for t in tails], kind="prefill", num_qo_heads=32)
    q = torch.randn(sum(lengths), 32, 128, device=DEV).bfloat16()
    rows, qin = 0, []
    for n in lengths:
        qq = q[rows:rows + n]
        qin.append(rotate64(qq, torch.arange(n), inv, 1.0).bfloat16() if query_rotated else qq)
        rows += n
    o, lse = pool.prefill(plan, torch.cat(qin), query_rotated=query_rotated)
    failures, rows = [], 0
    for n, k, v in zip(lengths, ks, vs):
        K = rotate64(k, torch.arange(n), inv, af)
        Q = rotate64(q[rows:rows + n], torch.arange(n), inv, af)
        vis = (torch.arange(n)[None, :] <= torch.arange(n)[:, None]).to(DEV)
        o64, _ = attention64(Q, K, v.double(), vis, 1 / math.sqrt(128))
        peer = sdpa16(Q.bfloat16(), K.bfloat16(), v, vis, 1 / math.sqrt(128))
        check_close("encode %d" % n, o[rows:rows + n], o64, peer, 1e-3 * float(o64.abs().max()),
                    failures)
        rows += n
    plan.close()
    pool.close()
    assert not failures, "\n".join(failures)


def test_chunked_prefill_in_two_chunks():
    """A 40-token question prefilled in two chunks of 20 over two documents: the second chunk's
    queries see the first chunk's keys."""
    torch.manual_seed(4)
    rope = lazyattn.Rope(config("default"))
    pool = lazyattn.Pool(1, 8, 128, num_pages=256, rope=rope)
    inv, _ = rope.frequencies(0)
    dk = [torch.randn(n, 8, 128, device=DEV).bfloat16() for n in (64, 90)]
    dv = [torch.randn(n, 8, 128, device=DEV).bfloat16() for n in (64, 90)]
    docs = [pool.insert(k, v) for k, v in zip(dk, dv)]
    tail = pool.create_tail("local")
    tk = torch.randn(40, 8, 128, device=DEV).bfloat16()
    tv = torch.randn(40, 8, 128, device=DEV).bfloat16()
    q = torch.randn(40, 32, 128, device=DEV).bfloat16()
    failures = []
    for c in range(2):
        pool.append(tail, tk[20 * c:20 * c + 20], tv[20 * c:20 * c + 20])
        plan = pool.plan([lazyattn.back_to_back(docs, tail)], kind="prefill", num_queries=20,
                         num_qo_heads=32)
        o, _ = pool.prefill(plan, q[20 * c:20 * c + 20])
        K = torch.cat([rotate64(dk[0], torch.arange(64), inv), rotate64(dk[1], 64 +
                       torch.arange(90), inv), rotate64(tk[:20 * c + 20], 154 + torch.arange(
                           20 * c + 20), inv)])
        V = torch.cat([dv[0], dv[1], tv[:20 * c + 20]]).double()
        Q = rotate64(q[20 * c:20 * c + 20], 154 + 20 * c + torch.arange(20), inv)
        vis = torch.ones(20, 154 + 20 * c + 20, dtype=torch.bool)
        vis[:, 154:] = torch.arange(20 * c + 20)[None, :] <= (20 * c + torch.arange(20))[:, None]
        vis = vis.to(DEV)
        o64, _ = attention64(Q, K, V, vis, 1 / math.sqrt(128))
        peer = sdpa16(Q.bfloat16(), K.bfloat16(), V.bfloat16(), vis, 1 / math.sqrt(128))
        check_close("chunk %d" % c, o, o64, peer, 1e-3 * float(o64.abs().max()), failures)
        plan.close()
    pool.close()
    assert not failures, "\n".join(failures)


# ---- the store's semantics from Python ------------------------------------------------------------

def small_pool(num_pages=64, layers=1):
    rope = lazyattn.Rope(config("default"))
    return lazyattn.Pool(layers, 2, 128, num_pages=num_pages, rope=rope), rope


def kv(n, layers=1):
    return (torch.randn(layers, n, 2, 128, device=DEV).bfloat16(),
            torch.randn(layers, n, 2, 128, device=DEV).bfloat16())


def test_dedupe_find_pins_and_lru_eviction():
    pool, rope = small_pool(num_pages=8)  # 8 pages of 16 tokens
    a = pool.insert(*kv(32), tokens=list(range(32)))                 # 2 pages, pinned
    again = pool.insert(*kv(32), tokens=list(range(32)))
    assert again.handle == a.handle and pool.stats()["dedupes"] == 1
    assert pool.find(tokens=list(range(32))).handle == a.handle
    assert pool.find(tokens=[5, 6]) is None
    st = pool.stats()
    assert st["hits"] == 1 and st["misses"] == 1
    b = pool.insert(*kv(32), tokens=[1] * 32, pin=False)               # unpinned, older
    c = pool.insert(*kv(32), tokens=[2] * 32, pin=False)               # unpinned, newer
    a.unpin()
    a.unpin()  # the insert and the dedupe each pinned it
    a.pin()    # pinned again: never evicted
    pool.find(tokens=[1] * 32, pin=False)  # touches b: now c is the least recently used
    d = pool.insert(*kv(64), tokens=[3] * 64)                        # needs 4 pages: evicts c
    assert not c.is_live and b.is_live and a.is_live and d.is_live
    assert pool.stats()["evictions"] == 1
    with pytest.raises(lazyattn.LazyAttnValueError):
        pool.insert(*kv(200), tokens=[4] * 200)  # more than the pool can ever free
    assert a.is_live and b.is_live and d.is_live  # the failed insert changed nothing
    pool.close()
    rope.close()


def test_stale_handles_and_stale_plans():
    pool, rope = small_pool()
    doc = pool.insert(*kv(20), pin=False)
    tail = pool.create_tail()
    pool.append(tail, *kv(3))
    plan = pool.plan([lazyattn.back_to_back([doc], tail)])
    q = torch.randn(1, 2, 128, device=DEV).bfloat16()
    pool.decode(plan, q)
    doc.erase()
    assert not plan.valid()
    with pytest.raises(lazyattn.LazyAttnValueError, match="evicted or erased"):
        pool.decode(plan, q)
    with pytest.raises(lazyattn.LazyAttnValueError, match="stale document handle"):
        pool.plan([lazyattn.back_to_back([doc], tail)])
    doc2 = pool.insert(*kv(20))
    plan2 = pool.plan([lazyattn.back_to_back([doc2], tail)])
    pool.append(tail, *kv(1))  # the tail grew: the plan is stale
    with pytest.raises(lazyattn.LazyAttnValueError, match="grows needs a new plan"):
        pool.decode(plan2, q)
    tail.release()
    with pytest.raises(lazyattn.LazyAttnValueError):
        tail.length
    pool.close()
    with pytest.raises(lazyattn.LazyAttnValueError, match="closed"):
        pool.decode(plan2, q)
    with pytest.raises(lazyattn.LazyAttnValueError, match="closed"):
        pool.stats()
    rope.close()


def test_bad_input_names_the_value():
    pool, rope = small_pool()
    other, rope2 = small_pool()
    doc = pool.insert(*kv(20))
    tail = pool.create_tail()
    pool.append(tail, *kv(2))
    plan = pool.plan([lazyattn.back_to_back([doc], tail)], num_qo_heads=4)
    q = torch.randn(1, 4, 128, device=DEV).bfloat16()
    with pytest.raises(ValueError, match="dtype torch.float16, expected torch.bfloat16"):
        pool.decode(plan, q.half())
    with pytest.raises(ValueError, match="on cpu, expected cuda"):
        pool.decode(plan, q.cpu())
    with pytest.raises(ValueError, match="not contiguous"):
        pool.decode(plan, torch.randn(1, 128, 4, device=DEV).bfloat16().transpose(1, 2))
    with pytest.raises(ValueError, match="expected \\[1 \\(the plan's queries\\)"):
        pool.decode(plan, torch.randn(2, 4, 128, device=DEV).bfloat16())
    with pytest.raises(lazyattn.LazyAttnValueError, match="num_qo_heads 8, expected the plan's 4"):
        pool.decode(plan, torch.randn(1, 8, 128, device=DEV).bfloat16())
    with pytest.raises(ValueError, match="belongs to another pool"):
        other.decode(plan, q)
    with pytest.raises(ValueError, match="belongs to another pool"):
        other.plan([lazyattn.back_to_back([doc], tail)])
    with pytest.raises(ValueError, match="expected exactly one"):
        pool.plan([[(doc, 0)]])
    with pytest.raises(ValueError, match="kv_heads 2"):
        pool.insert(torch.randn(1, 5, 3, 128, device=DEV).bfloat16(), *kv(5)[1:])
    with pytest.raises(lazyattn.LazyAttnValueError, match="absolute form is for tails"):
        pool.allocate(10, form="absolute")
    abs_tail = pool.create_tail("absolute")
    with pytest.raises(ValueError, match="k_rotated=False for a absolute tail"):
        pool.append(abs_tail, *kv(2), k_rotated=False)
    pool.reserve(abs_tail, 2)
    with pytest.raises(lazyattn.LazyAttnValueError, match="rotates K into local form"):
        pool.destinations([(abs_tail, 0, 2)], rotate=True)
    with pytest.raises(lazyattn.LazyAttnValueError, match="decode plan, expected a prefill"):
        pool.prefill(plan, q)
    with pytest.raises(lazyattn.LazyAttnValueError, match="num_queries 5, expected in \\[1, tail"):
        pool.plan([lazyattn.back_to_back([doc], tail)], kind="prefill", num_queries=5)
    dyn = lazyattn.Rope(config("dynamic"))
    with pytest.raises(lazyattn.LazyAttnValueError, match="depends on the request length"):
        pool.plan([lazyattn.back_to_back([doc], tail)], rope=dyn)
    before = pool.stats()
    with pytest.raises(lazyattn.LazyAttnValueError):
        pool.plan([lazyattn.back_to_back([doc], tail)], kind="prefill", num_queries=0)
    assert pool.stats() == before  # failed calls leave the store as it was
    for x in (plan, pool, other, rope, rope2, dyn):
        x.close()


# ---- operators: opcheck, torch.compile, CUDA graphs -----------------------------------------------

def decode_setup():
    """Two documents (100 and 70 tokens) and two requests: back to back (tail at 170), and
    gapped (document 1 at 500, document 0 at 7000, tail at 9000); tails of 5 tokens. Returns the
    raw K/V too: documents [(k, v)] and tails [[(k, v) per append]], [2, n, 8, 128]."""
    rope = lazyattn.Rope(config("llama3"))
    pool = lazyattn.Pool(2, 8, 128, num_pages=256, rope=rope)
    doc_kv = [kv_full(n) for n in (100, 70)]
    docs = [pool.insert(*x) for x in doc_kv]
    tails, tail_kv = [], []
    for _ in range(2):
        t = pool.create_tail("local")
        x = kv_full(5)
        pool.append(t, *x)
        tails.append(t)
        tail_kv.append([x])
    layouts = [lazyattn.back_to_back(docs, tails[0]), lazyattn.gapped(docs[::-1], [500, 7000],
                                                                      tails[1], 9000)]
    placed = [[(0, 0), (1, 100)], [(1, 500), (0, 7000)]]
    return rope, pool, docs, tails, layouts, doc_kv, tail_kv, placed, [170, 9000]


def kv_full(n, layers=2):
    return (torch.randn(layers, n, 8, 128, device=DEV).bfloat16(),
            torch.randn(layers, n, 8, 128, device=DEV).bfloat16())


def test_opcheck():
    rope, pool, docs, tails, layouts = decode_setup()[:5]
    q = torch.randn(2, 32, 128, device=DEV).bfloat16()
    qp = torch.randn(6, 32, 128, device=DEV).bfloat16()
    first = [pool.reserve(t, 1) for t in tails]
    dst = pool.destinations([(t, f, 1) for t, f in zip(tails, first)], rotate=True)
    k, v = torch.randn(2, 8, 128, device=DEV).bfloat16(), torch.randn(2, 8, 128,
                                                                        device=DEV).bfloat16()
    torch.library.opcheck(torch.ops.lazyattn.write.default,
                          (pool.k, pool.v, k, v, dst.data, dst.meta, 1, 1))
    plan = pool.plan(layouts, num_qo_heads=32)
    pplan = pool.plan(layouts, kind="prefill", num_queries=3, num_qo_heads=32)
    torch.library.opcheck(torch.ops.lazyattn.decode.default,
                          (q, pool.k, pool.v, plan.data, plan.workspace, plan.meta, 1, 0.0, 1))
    torch.library.opcheck(torch.ops.lazyattn.prefill.default,
                          (qp, pool.k, pool.v, pplan.data, pplan.workspace, pplan.meta, 0, 0.0, 3))
    pool.close()
    rope.close()


def test_torch_compile_fullgraph():
    rope, pool, docs, tails, layouts = decode_setup()[:5]
    first = [pool.reserve(t, 1) for t in tails]
    dst = pool.destinations([(t, f, 1) for t, f in zip(tails, first)], rotate=True)
    plan = pool.plan(layouts, num_qo_heads=32)
    q = torch.randn(2, 32, 128, device=DEV).bfloat16()
    k, v = torch.randn(2, 8, 128, device=DEV).bfloat16(), torch.randn(2, 8, 128,
                                                                        device=DEV).bfloat16()

    class Step(torch.nn.Module):
        """A model's decode step: project, write the new token, attend, project."""

        def __init__(self):
            super().__init__()
            self.o_proj = torch.nn.Linear(32 * 128, 64, dtype=torch.bfloat16, device=DEV)

        def forward(self, q, k, v):
            for layer in range(2):
                pool.write(dst, layer, k, v)
                q, lse = pool.decode(plan, q, layer=layer)
            return self.o_proj(q.reshape(2, -1)), lse

    step = Step()
    eager = step(q, k, v)
    compiled = torch.compile(step, fullgraph=True)
    got = compiled(q, k, v)
    # The operators give the same bits; the projection is the same matrix product.
    torch.testing.assert_close(got[1], eager[1], rtol=0, atol=0)
    torch.testing.assert_close(got[0], eager[0], rtol=1e-2, atol=1e-2)
    assert not torch.equal(got[1], torch.zeros_like(got[1]))
    pool.close()
    rope.close()


def test_cuda_graph_decode_steps():
    """One capture of a decode step (append every request's new token, then decode both
    layers), replayed for 70 steps with the next step's plan and destinations copied into the
    captured buffers; steps checked against float64 (writes included). The tails cross tile
    and page boundaries."""
    steps = 70
    rope, pool, docs, tails, layouts, doc_kv, tail_kv, placed, starts = decode_setup()
    inv, af = rope.frequencies(0)
    first = [pool.reserve(t, 1) for t in tails]
    plan0 = pool.plan(layouts, num_qo_heads=32, headroom_tokens=steps)
    dst0 = pool.destinations([(t, f, 1) for t, f in zip(tails, first)], rotate=True)
    q_in = torch.zeros(2, 32, 128, device=DEV, dtype=torch.bfloat16)
    k_in = torch.zeros(2, 2, 8, 128, device=DEV, dtype=torch.bfloat16)  # [layer, request, ...]
    v_in = torch.zeros_like(k_in)

    def step():
        outs = []
        for layer in range(2):
            pool.write(dst0, layer, k_in[layer], v_in[layer])
            outs.append(pool.decode(plan0, q_in, layer=layer)[0])
        return outs

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    failures = []
    scale = 1 / math.sqrt(128)
    for s in range(steps):
        if s > 0:
            first = [pool.reserve(t, 1) for t in tails]
            pool.plan(layouts, num_qo_heads=32, like=plan0).load_into(plan0)
            pool.destinations([(t, f, 1) for t, f in zip(tails, first)],
                              rotate=True).load_into(dst0)
        k_new, v_new = kv_full(2)  # [layer, request, 8, 128]
        q_new = torch.randn(2, 32, 128, device=DEV).bfloat16()
        k_in.copy_(k_new)
        v_in.copy_(v_new)
        q_in.copy_(q_new)
        for b in range(2):
            tail_kv[b].append((k_new[:, b:b + 1], v_new[:, b:b + 1]))
        graph.replay()
        torch.cuda.synchronize()
        if s not in (0, 1, 58, 59, steps - 1):
            continue
        for b in range(2):
            tk = torch.cat([x[0] for x in tail_kv[b]], dim=1)
            tv = torch.cat([x[1] for x in tail_kv[b]], dim=1)
            n = tk.shape[1]
            for layer in range(2):
                ks = [rotate64(doc_kv[d][0][layer], st + torch.arange(doc_kv[d][0].shape[1]),
                               inv) for d, st in placed[b]]
                vs = [doc_kv[d][1][layer].double() for d, _ in placed[b]]
                ks.append(rotate64(tk[layer], starts[b] + torch.arange(n), inv))
                vs.append(tv[layer].double())
                K, V = torch.cat(ks), torch.cat(vs)
                Q = rotate64(q_new[b:b + 1], torch.tensor([starts[b] + n - 1]), inv)
                vis = torch.ones(1, K.shape[0], dtype=torch.bool, device=DEV)
                o64, _ = attention64(Q, K, V, vis, scale)
                peer = sdpa16(Q.bfloat16(), K.bfloat16(), V.bfloat16(), vis, scale)
                check_close("graph step %d request %d layer %d" % (s, b, layer),
                            outs[layer][b:b + 1], o64, peer, 1e-3 * float(o64.abs().max()),
                            failures)
    assert not failures, "\n".join(failures)
    pool.close()
    rope.close()
