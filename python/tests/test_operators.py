"""lazyattn's operators under torch.library.opcheck, torch.compile(fullgraph=True) and CUDA graph
replays. Needs a CUDA GPU and torch:

    python3 -m pytest python/tests/test_operators.py -q
"""
import math

import pytest
import torch

import lazyattn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from reference import attention64, check_close, rotate64, sdpa16  # noqa: E402
from scenes import DEV, config  # noqa: E402


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
