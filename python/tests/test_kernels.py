"""lazyattn's prefill and decode from PyTorch against the float64 reference (reference.py), for
every RoPE schedule the kernels take, in both storage forms, with queries and keys as the library
takes them and as models produce them; document encoding; a prefill in two chunks. Needs a CUDA
GPU and torch (the error rule: scenes.py):

    python3 -m pytest python/tests/test_kernels.py -q
"""
import math
import zlib

import pytest
import torch

import lazyattn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from reference import attention64, check_close, rotate64, sdpa16  # noqa: E402
from scenes import DEV, HEADS, LENGTH_DEPENDENT, Scene, check_scene, config  # noqa: E402


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
    # A stable seed per case (str hash() differs from one process to the next).
    seed = zlib.crc32(repr((kind, sched, doc_form, tail_form, head_dim)).encode()) % 100000
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
