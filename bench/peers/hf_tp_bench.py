#!/usr/bin/env python3
"""Tensor-parallel RAG serving through transformers (random weights, bf16): time to first token and
decode time per token for the paper's RAG prompt (5 cached documents x 2048 tokens + a 32-token
question, the documents in a new order for every prompt), lazyattn.hf against transformers' own
run of the same model without reuse (the whole prompt prefilled with sdpa, then its decode), both
under transformers' tensor-parallel plan. One process per GPU, launched with torchrun:

    torchrun --standalone --nproc_per_node=N bench/peers/hf_tp_bench.py OUT.json \
        [--model 8b|70b] [--layers L] [--checkpoint DIR] [--quick]

--model: Llama-3.1-8B shapes (default) or Llama-3.1-70B shapes (hidden 8192, 64 query heads,
8 KV heads); --layers cuts the layer count (the full 70B does not fit 2 H100s with its
activations: TTFT and decode time grow with the layers). With N > 1 rank 0 saves the random model
to --checkpoint (default /tmp/lazyattn_tp_<model>_<layers>) and every rank loads it with
transformers' tensor-parallel plan; with N = 1 the model is made on the GPU and lazyattn takes
the process group all the same (its collective checks run, over one rank). Rank 0 writes OUT.json.
"""
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_rag_bench import (DOC_LEN, DOCS, QUESTION, add_documents, greedy_generate,  # noqa: E402
                          lazy_times, llama31_8b, per_token_ms, random_llama, timed)
import lazyattn  # noqa: E402
import lazyattn.hf as lh  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.distributed import DistributedConfig  # noqa: E402


def llama31_70b(layers):
    config = llama31_8b(layers)
    config.hidden_size, config.intermediate_size = 8192, 28672
    config.num_attention_heads, config.num_key_value_heads = 64, 8
    return config


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def load(config, world, local, checkpoint):
    """The random model on this rank: made on the GPU (one rank), or saved once by rank 0 and
    loaded under transformers' tensor-parallel plan."""
    dev = torch.device("cuda", local)
    if world == 1:
        return random_llama(config, dev)
    if dist.get_rank() == 0 and not os.path.exists(os.path.join(checkpoint, "config.json")):
        random_llama(config, dev).save_pretrained(checkpoint)
        torch.cuda.empty_cache()
    dist.barrier()
    return AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_plan="auto"))


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("--"):
        print(__doc__)
        return 2
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    quick = "--quick" in sys.argv
    name = option("--model", "8b")
    if name not in ("8b", "70b"):
        raise SystemExit("hf_tp_bench: --model %s, expected 8b or 70b" % name)
    layers = int(option("--layers", 8 if quick else (32 if name == "8b" else 80)))
    reps, steps = (3, 16) if quick else (7, 64)
    config = (llama31_8b if name == "8b" else llama31_70b)(layers)
    checkpoint = option("--checkpoint", "/tmp/lazyattn_tp_%s_%d" % (name, layers))
    model = load(config, world, local, checkpoint)
    model.eval()
    dev = torch.device("cuda", local)
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)  # the same prompts on every rank
    docs_ids = [torch.randint(1000, config.vocab_size, (DOC_LEN,), generator=g).tolist()
                for _ in range(DOCS)]
    question = torch.randint(1000, config.vocab_size, (1, QUESTION), generator=g)
    out = {"device": torch.cuda.get_device_name(), "gpus": world, "model": name,
           "layers": layers, "torch": torch.__version__,
           "transformers": __import__("transformers").__version__,
           "library": lazyattn.library_path(), "commit": os.environ.get("LAZYATTN_COMMIT", ""),
           "date": time.strftime("%Y-%m-%d"), "docs": DOCS, "doc_len": DOC_LEN,
           "question": QUESTION, "repeats": reps, "decode_steps": steps,
           "model_tp_size": getattr(model, "tp_size", None)}

    # ---- lazy ----------------------------------------------------------------------------------
    store = lh.DocumentStore(model, num_pages=(DOCS * DOC_LEN + 4096) // 16 + 64,
                             group="auto" if world > 1 else dist.group.WORLD)
    out["store_tp_size"], out["pool_kv_heads"] = store.tp_size, store.pool.num_kv_heads
    docs, out["lazy_encode_s_first"] = add_documents(store, docs_ids)

    def orders():
        order = list(range(DOCS))
        rng.shuffle(order)
        return order

    out["lazy_ttft_s"], out["lazy_ttft_all"], out["lazy_decode_ms_per_token"] = lazy_times(
        model, store, lambda: [docs[j] for j in orders()], question, reps, steps)
    out["lazy_store"] = store.stats()
    store.check_ranks()

    # ---- transformers' own run, no reuse: the whole prompt, sdpa ---------------------------------
    model.set_attn_implementation("sdpa")

    def prompt_ids():
        return torch.tensor([sum((docs_ids[j] for j in orders()), []) + question[0].tolist()],
                            device=dev)

    def full_prompt():
        with torch.inference_mode():
            logits = model(input_ids=prompt_ids(), use_cache=True, logits_to_keep=1).logits
        return logits[:, -1].argmax(-1)

    out["full_ttft_s"], out["full_ttft_all"] = timed(full_prompt, reps)

    out["full_decode_ms_per_token"] = per_token_ms(greedy_generate(model, prompt_ids), reps,
                                                   steps)
    model.set_attn_implementation(lh.NAME)
    out["ttft_full_over_lazy"] = out["full_ttft_s"] / out["lazy_ttft_s"]
    out["decode_full_over_lazy"] = out["full_decode_ms_per_token"] / out["lazy_decode_ms_per_token"]
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)
        print("%s x %d layers, TP %d: TTFT (median, ms) lazy %.2f | transformers, no reuse %.2f "
              "(%.2fx); decode ms/token lazy %.3f | transformers %.3f (%.2fx)" % (
                  name, layers, world, 1e3 * out["lazy_ttft_s"], 1e3 * out["full_ttft_s"],
                  out["ttft_full_over_lazy"], out["lazy_decode_ms_per_token"],
                  out["full_decode_ms_per_token"], out["decode_full_over_lazy"]))
    store.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
