#!/usr/bin/env python3
"""One rank of test_tp.py's tensor-parallel run (started by torchrun there, one rank per GPU):
a small random Llama loaded with transformers' tp_plan="auto", lazyattn.hf.DocumentStore over
the rank's KV heads, RAG requests through generate(), and bad input that must fail on every rank
alike. Rank 0 also runs the same requests on an unsplit copy of the model (one GPU, no process
group) and compares the greedy tokens. Each rank writes its findings to OUT/rank<r>.json; a
check that fails raises (the rank exits non-zero, torchrun reports it).

    torchrun --nproc_per_node=N python/tests/tp_worker.py MODEL_DIR OUT_DIR
"""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("LAZYATTN_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))
import lazyattn  # noqa: E402
import lazyattn.hf as lh  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.distributed import DistributedConfig  # noqa: E402

DOC_LENGTHS = [45, 130, 77]
QUESTION, NEW_TOKENS, PAGES = 9, 6, 256


def prompts(vocab):
    """The documents' and questions' token ids (the same on every rank: a fixed generator)."""
    g = torch.Generator().manual_seed(1234)
    docs = [torch.randint(3, vocab, (n,), generator=g) for n in DOC_LENGTHS]
    questions = torch.randint(3, vocab, (2, QUESTION), generator=g)
    return docs, questions


def rag(model, store, docs, questions):
    """Greedy tokens of two requests: documents back to back, and at chosen starts with a
    repeat."""
    d = [store.add(ids) for ids in docs]
    cache = store.cache([[d[0], d[1], d[2]], [(d[2], 0), (d[0], 300), (d[2], 700)]])
    try:
        out = model.generate(**cache.inputs(questions), past_key_values=cache,
                             max_new_tokens=NEW_TOKENS, do_sample=False)
    finally:
        cache.close()
    return out[:, -NEW_TOKENS:].tolist()


def expect_rank_error(what, fn, store, checks):
    """fn() must raise lazyattn.RankError on this rank, leaving the pool's bookkeeping as it
    was (its fingerprint), and the ranks' stores equal."""
    before = store.pool.fingerprint()
    try:
        fn()
    except lazyattn.RankError as e:
        checks.append({"case": what, "error": str(e)[:300], "ranks": e.ranks})
    else:
        raise AssertionError("%s: no RankError" % what)
    after = store.pool.fingerprint()
    if after != before:
        raise AssertionError("%s: the pool's fingerprint changed (%x -> %x)"
                             % (what, before, after))
    store.check_ranks()


def main():
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    # A hang (a rank left waiting in a collective) fails the run instead of stalling it.
    dist.init_process_group("nccl", device_id=torch.device("cuda", local),
                            timeout=timedelta(seconds=120))
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_plan="auto"))
    if next(model.parameters()).device.type != "cuda":  # one rank: transformers splits nothing
        model.to(torch.device("cuda", local))
    model.eval()
    cfg = model.config
    # Over one rank transformers sets up no tensor parallelism; the store is given the process
    # group, so its collective checks run all the same.
    store = lh.DocumentStore(model, num_pages=PAGES,
                             group="auto" if world > 1 else dist.group.WORLD)
    found = {"rank": rank, "world": world, "model_tp_size": getattr(model, "tp_size", None),
             "tp_size": store.tp_size, "tp_rank": store.tp_rank,
             "pool_kv_heads": store.pool.num_kv_heads, "kv_heads": list(store.kv_heads),
             "qo_heads": store.num_qo_heads}
    assert store.tp_size == world, found
    assert store.pool.num_kv_heads * world == cfg.num_key_value_heads, found
    assert store.num_qo_heads * world == cfg.num_attention_heads, found
    docs, questions = prompts(cfg.vocab_size)
    found["tokens"] = rag(model, store, docs, questions)
    stats = store.stats()
    # Again: every document a hit on every rank, the same tokens.
    again = rag(model, store, docs, questions)
    assert again == found["tokens"], (again, found["tokens"])
    assert store.stats()["hits"] > stats["hits"], (stats, store.stats())
    store.check_ranks()

    checks = []
    # Bad input on one rank (the last): every rank raises, no store changes.
    last = world - 1
    bad = torch.tensor([], dtype=torch.long) if rank == last else docs[0]
    expect_rank_error("empty token ids on rank %d" % last, lambda: store.add(bad), store, checks)
    if world > 1:
        other = docs[1] if rank == last else docs[0]
        expect_rank_error("different token ids on rank %d" % last, lambda: store.add(other),
                          store, checks)
    d0 = store.add(docs[0])
    stale = store.add(torch.arange(3, 40))
    stale.unpin()
    stale.erase()
    expect_rank_error("a stale document on every rank",
                      lambda: store.cache([[d0, stale]]), store, checks)
    req = [[d0]] if rank == last else [[d0, d0]]
    if world > 1:
        expect_rank_error("a different layout on rank %d" % last, lambda: store.cache(req),
                          store, checks)
    if world > 1:
        cache = store.cache([[d0]])
        q = questions[:1] + (1 if rank == last else 0)
        expect_rank_error("different question ids on rank %d" % last, lambda: cache.inputs(q),
                          store, checks)
        cache.close()
    if world == 1:
        # A failure inside the encode (the model's forward): the document is erased. With
        # several ranks a rank failing inside the forward leaves the others waiting in the
        # model's own collectives (NCCL's timeout ends them), so it is not injected there.
        def fail(module, args, kwargs):
            raise RuntimeError("injected failure on rank %d" % rank)
        used = store.stats()["pages_in_use"]
        hook = model.model.layers[0].self_attn.register_forward_pre_hook(fail, with_kwargs=True)
        try:
            try:
                store.add(torch.arange(100, 180))
            except lazyattn.RankError as e:
                checks.append({"case": "the encode fails", "error": str(e)[:300],
                               "ranks": e.ranks})
            else:
                raise AssertionError("encode failure: no RankError")
        finally:
            hook.remove()
        assert store.stats()["pages_in_use"] == used, (used, store.stats())
        assert store.pool.find(key=store._key(torch.arange(100, 180)), pin=False) is None
        store.check_ranks()
    # The store still works on every rank after the failures.
    assert rag(model, store, docs, questions) == found["tokens"]
    found["checks"] = checks

    if rank == 0:  # the one-GPU run of the same model and prompts
        one = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(
            torch.device("cuda", local))
        one.eval()
        single = lh.DocumentStore(one, num_pages=PAGES, group=None)
        found["tokens_one_gpu"] = rag(one, single, docs, questions)
        found["same_tokens"] = found["tokens_one_gpu"] == found["tokens"]
        single.close()
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(found, f, indent=1)
    store.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
