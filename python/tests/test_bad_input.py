"""Bad input on the GPU paths, through lazyattn.Pool and through the torch.library operators
called directly: wrong device, dtype, layout or size of a tensor, handles of another pool or
closed ones, layers and positions out of range. Each is refused with an exception that names the
value, before anything runs, and leaves the store as it was (its statistics and its K/V tensors).
scripts/gpu-check also runs this file under compute-sanitizer (memcheck): no failed call touches
memory it does not own. Needs a CUDA GPU and torch:

    python3 -m pytest python/tests/test_bad_input.py -q
"""
import pytest
import torch

import lazyattn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from scenes import DEV, config  # noqa: E402

D, KV_HEADS, QO_HEADS = 128, 2, 4


@pytest.fixture
def scene():
    """A one-layer pool with a document and a tail, a decode and a prefill plan over them."""
    rope = lazyattn.Rope(config("default"))
    pool = lazyattn.Pool(1, KV_HEADS, D, num_pages=32, rope=rope)
    other = lazyattn.Pool(1, KV_HEADS, D, num_pages=8, rope=rope)
    kv = lambda n: (torch.randn(1, n, KV_HEADS, D, device=DEV).bfloat16(),  # noqa: E731
                    torch.randn(1, n, KV_HEADS, D, device=DEV).bfloat16())
    doc = pool.insert(*kv(200), tokens=list(range(200)))  # 4 key tiles: splits possible
    tail = pool.create_tail()
    pool.append(tail, *kv(6))
    decode = pool.plan([lazyattn.back_to_back([doc], tail)], num_qo_heads=QO_HEADS)
    split = pool.plan([lazyattn.back_to_back([doc], tail)], num_qo_heads=QO_HEADS,
                      forced_splits=2)  # needs a split-KV workspace
    prefill = pool.plan([lazyattn.back_to_back([doc], tail)], kind="prefill",
                        num_qo_heads=QO_HEADS)
    yield dict(rope=rope, pool=pool, other=other, doc=doc, tail=tail, decode=decode,
               split=split, prefill=prefill, kv=kv)
    for x in (decode, split, prefill, pool, other, rope):
        x.close()


def snapshot(pool):
    """What a failed call must leave unchanged: the statistics and the K/V contents."""
    torch.cuda.synchronize()
    return pool.stats(), pool.k.clone(), pool.v.clone()


def unchanged(pool, before):
    torch.cuda.synchronize()
    stats, k, v = before
    assert pool.stats() == stats
    assert torch.equal(pool.k, k) and torch.equal(pool.v, v)


def refused(pool, call, exc, *needles):
    """`call` raises `exc` whose message contains every needle; the pool is as before."""
    before = snapshot(pool)
    with pytest.raises(exc) as info:
        call()
    for n in needles:
        assert n in str(info.value), "%r not in %r" % (n, str(info.value))
    unchanged(pool, before)
    return str(info.value)


def q_of(n, heads=QO_HEADS, dtype=torch.bfloat16):
    return torch.randn(n, heads, D, device=DEV).to(dtype)


def test_pool_methods_refuse_bad_layers_positions_and_handles(scene):
    pool, other, doc, tail = scene["pool"], scene["other"], scene["doc"], scene["tail"]
    dec, pre = scene["decode"], scene["prefill"]
    E = lazyattn.LazyAttnValueError
    for layer in (1, -1):
        refused(pool, lambda: pool.decode(dec, q_of(1), layer=layer), ValueError,
                "layer %d" % layer)
        refused(pool, lambda: pool.prefill(pre, q_of(6), layer=layer), ValueError,
                "layer %d" % layer)
    dst = pool.destinations([(tail, 0, 2)])
    k, v = scene["kv"](2)
    refused(pool, lambda: pool.write(dst, 3, k[0], v[0]), ValueError, "layer 3")
    # Too few rows for the destinations, and rows of another head count.
    refused(pool, lambda: pool.write(dst, 0, k[0, :1], v[0, :1]), ValueError, "(1, 2, 128)")
    refused(pool, lambda: pool.write(dst, 0, torch.randn(2, 3, D, device=DEV).bfloat16(), v[0]),
            ValueError, "(2, 3, 128)")
    # Positions past what the kernels' angle arithmetic takes (starts below 2^62).
    far = 2 ** 62
    refused(pool, lambda: pool.plan([[(doc, far), (tail, far + 100)]]), E, str(far))
    refused(pool, lambda: pool.plan([[(doc, -5), (tail, 100)]]), E, "-5")
    # Handles of another pool, a closed plan, a released tail.
    refused(pool, lambda: other.destinations([(tail, 0, 1)]), ValueError, "another pool")
    refused(other, lambda: other.prefill(pre, q_of(6)), ValueError, "another pool")
    closed = pool.plan([lazyattn.back_to_back([doc], tail)], num_qo_heads=QO_HEADS)
    closed.close()
    refused(pool, lambda: pool.decode(closed, q_of(1)), E, "closed")
    spare = pool.create_tail()
    spare.release()
    refused(pool, lambda: pool.reserve(spare, 4), E)
    refused(pool, lambda: pool.append(spare, *scene["kv"](1)), E)


def test_operators_called_directly_check_every_buffer(scene):
    pool, dec = scene["pool"], scene["decode"]
    op = torch.ops.lazyattn.decode
    q = q_of(1)

    def call(q=q, k=None, v=None, data=None, ws=None, meta=None, layer=0, plan=dec, o=op):
        return o(q, pool.k if k is None else k, pool.v if v is None else v,
                 plan.data if data is None else data, plan.workspace if ws is None else ws,
                 plan.meta if meta is None else meta, layer, 0.0, 1)

    call()  # the good call runs
    refused(pool, lambda: call(q=q.cpu()), ValueError, "q on cpu")
    refused(pool, lambda: call(q=q.half()), ValueError, "q of dtype torch.float16")
    refused(pool, lambda: call(q=q_of(3)), ValueError, "(3, 4, 128)")
    refused(pool, lambda: call(q=torch.randn(1, D, QO_HEADS, device=DEV).bfloat16()
                               .transpose(1, 2)), ValueError, "q is not contiguous")
    # K/V tensors of a smaller pool (same layout, fewer pages): the kernel would read past them.
    small = scene["other"]
    refused(pool, lambda: call(k=small.k, v=small.v), ValueError, "k_pool of",
            "expected the pool's")
    refused(pool, lambda: call(v=pool.v[:, :16]), ValueError, "v_pool of shape")
    refused(pool, lambda: call(k=pool.k.transpose(1, 2)), ValueError, "k_pool is not contiguous")
    refused(pool, lambda: call(data=dec.data[:dec.bytes - 1]), ValueError, "plan_data of",
            str(dec.bytes))
    refused(pool, lambda: call(data=dec.data.cpu()), ValueError, "plan_data on cpu")
    split = scene["split"]
    call(plan=split)  # the good call, with splits
    refused(pool, lambda: call(plan=split, ws=split.workspace[:16]), ValueError,
            "workspace of 16 elements")
    refused(pool, lambda: call(layer=1), ValueError, "layer 1")
    # The prefill operator with the decode plan's handle, and a destroyed plan's handle.
    refused(pool, lambda: call(o=torch.ops.lazyattn.prefill, q=q_of(1)),
            lazyattn.LazyAttnValueError, "the plan is a decode plan, expected a prefill plan")
    gone = pool.plan([lazyattn.back_to_back([scene["doc"]], scene["tail"])],
                     num_qo_heads=QO_HEADS)
    meta = gone.meta.clone()
    gone.close()
    refused(pool, lambda: call(meta=meta), lazyattn.LazyAttnValueError, "not a live handle")


def test_write_operator_checks_its_destinations(scene):
    pool, tail = scene["pool"], scene["tail"]
    first = pool.reserve(tail, 3)
    dst = pool.destinations([(tail, first, 3)])
    k, v = (t[0] for t in scene["kv"](3))
    op = torch.ops.lazyattn.write

    def call(k=k, v=v, data=None, layer=0, kp=None, vp=None):
        op(pool.k if kp is None else kp, pool.v if vp is None else vp, k, v,
           dst.data if data is None else data, dst.meta, layer, 0)

    refused(pool, lambda: call(data=dst.data[:8]), ValueError, "dst of 8 elements")
    refused(pool, lambda: call(k=k.cpu()), ValueError, "k on cpu")
    refused(pool, lambda: call(v=v.half()), ValueError, "v of dtype torch.float16")
    refused(pool, lambda: call(k=k[:, :1].contiguous()), ValueError, "k of shape (3, 1, 128)")
    refused(pool, lambda: call(layer=2), ValueError, "layer 2")
    small = scene["other"]
    refused(pool, lambda: call(kp=small.k, vp=small.v), ValueError, "k_pool of")
    call()  # the good call writes
    torch.cuda.synchronize()
