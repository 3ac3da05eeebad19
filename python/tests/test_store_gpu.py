"""The store's semantics on the GPU from PyTorch: dedupe, find, pins, LRU eviction, stale handles
and plans, and bad input named in the exception. Needs a CUDA GPU and torch:

    python3 -m pytest python/tests/test_store_gpu.py -q
"""
import pytest
import torch

import lazyattn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from scenes import DEV, config  # noqa: E402


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


@pytest.mark.parametrize("eviction", ["lru", "segmented_lru"])
def test_eviction_policy(eviction):
    """A document asked for again, then documents used once that overflow the pages: LRU
    evicts the first, segmented LRU keeps it and evicts the oldest of the others."""
    rope = lazyattn.Rope(config("default"))
    pool = lazyattn.Pool(1, 2, 128, num_pages=8, rope=rope, eviction=eviction)
    assert pool.eviction == eviction and eviction in repr(pool)
    hot = pool.insert(*kv(32), tokens=[1] * 32, pin=False)
    assert pool.find(tokens=[1] * 32, pin=False).handle == hot.handle  # asked for again
    once = [pool.insert(*kv(32), tokens=[10 + i] * 32, pin=False) for i in range(3)]
    extra = pool.insert(*kv(32), tokens=[20] * 32, pin=False)  # one document must go
    assert pool.stats()["evictions"] == 1
    kept = eviction == "segmented_lru"
    assert hot.is_live == kept and once[0].is_live == (not kept)
    assert all(d.is_live for d in once[1:]) and extra.is_live
    refused = "eviction 'fifo', expected one of 'lru', 'segmented_lru'"
    with pytest.raises(ValueError, match=refused):
        lazyattn.Pool(1, 2, 128, num_pages=8, rope=rope, eviction="fifo")
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
