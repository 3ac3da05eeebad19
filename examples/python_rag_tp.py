#!/usr/bin/env python3
"""examples/python_rag.py under tensor parallelism: transformers splits the model over the GPUs
(its own tensor-parallel plan), each rank's lazyattn store holds its KV heads' pages, and every
rank runs the same calls.

    torchrun --standalone --nproc_per_node=2 examples/python_rag_tp.py          # small random Llama
    torchrun --standalone --nproc_per_node=4 examples/python_rag_tp.py --model PATH_OR_ID

Needs CUDA GPUs, torch, transformers and the lazyattn package. One rank works too (transformers
then splits nothing, and the store runs its checks over the one rank).
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.distributed import DistributedConfig

import lazyattn
import lazyattn.hf as lh


def save_small_random_llama(path):
    config = LlamaConfig(vocab_size=2000, hidden_size=512, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                         head_dim=64, max_position_embeddings=131072,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    torch.manual_seed(0)
    LlamaForCausalLM(config).bfloat16().save_pretrained(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a transformers checkpoint (default: a small random Llama)")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    path = args.model
    if path is None:
        path = os.path.join(tempfile.gettempdir(), "lazyattn_small_llama")
        if rank == 0 and not os.path.exists(os.path.join(path, "config.json")):
            save_small_random_llama(path)
        dist.barrier()
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_plan="auto"))
    if world == 1:  # nothing to split: the whole model on the one GPU
        model.cuda()
    model.eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)  # the same token ids on every rank
    documents = [torch.randint(10, vocab, (n,), generator=g).tolist() for n in (300, 120, 500)]
    question = torch.randint(10, vocab, (2, 12), generator=g)

    store = lh.DocumentStore(model, num_pages=4096,
                             group="auto" if world > 1 else dist.group.WORLD)
    docs = [store.add(ids) for ids in documents]       # the same calls, in the same order, on all
    cache = store.cache([[docs[0], docs[1], docs[2]],
                         [(docs[2], 0), (docs[0], 800), (docs[2], 1500)]])
    out = model.generate(**cache.inputs(question), past_key_values=cache, max_new_tokens=16,
                         do_sample=False)
    cache.close()
    refused = "NOT refused"
    try:  # bad input on one rank fails the call on every rank
        store.add([] if rank == world - 1 else documents[0])
    except lazyattn.RankError as e:
        refused = "refused on every rank: %s" % str(e)[:90]
    if rank == 0:
        print("ranks %d, KV heads per rank %d of %d" % (
            world, store.pool.num_kv_heads, model.config.num_key_value_heads))
        print("generated:", out[:, question.shape[1]:].tolist())
        print("empty token ids on rank %d:" % (world - 1), refused)
        print("store:", store.stats())
    store.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
