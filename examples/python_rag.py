#!/usr/bin/env python3
"""RAG with lazyattn under a transformers model: each document is encoded once, then prompts
place the cached documents at any positions, in any order, repeated, and generate() runs
lazyattn's prefill for the question and lazyattn's decode for every new token.

    python3 examples/python_rag.py                      # a small random Llama (no download)
    python3 examples/python_rag.py --model PATH_OR_ID   # any Llama / Qwen2 / Mistral checkpoint

Needs a CUDA GPU, torch, transformers and the lazyattn package
(pip install --no-build-isolation ./python).
"""
import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import lazyattn.hf as lh


def small_random_llama():
    config = LlamaConfig(vocab_size=2000, hidden_size=512, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         head_dim=128, max_position_embeddings=131072,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                          "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192})
    torch.manual_seed(0)
    return LlamaForCausalLM(config).cuda().bfloat16().eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a transformers checkpoint (default: a small random Llama)")
    args = ap.parse_args()
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    else:
        model = small_random_llama()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    documents = [torch.randint(10, vocab, (n,), generator=g).tolist() for n in (300, 120, 500)]
    question = torch.randint(10, vocab, (2, 12), generator=g)

    # ---- the ten lines -------------------------------------------------------------------------
    store = lh.DocumentStore(model, num_pages=4096)              # lazyattn's pool for this model
    docs = [store.add(ids) for ids in documents]                 # each encoded once, at 0..len-1
    cache = store.cache([[docs[0], docs[1], docs[2]],            # request 0: back to back
                         [(docs[2], 0), (docs[0], 800), (docs[2], 1500)]])  # any positions, repeats
    out = model.generate(**cache.inputs(question), past_key_values=cache, max_new_tokens=16,
                         do_sample=False)
    cache.close()
    # ---------------------------------------------------------------------------------------------

    print("generated:", out[:, question.shape[1]:].tolist())
    again = store.add(documents[1])  # a hit: nothing is encoded
    print("document 1 again:", again.handle == docs[1].handle, "| store:", store.stats())
    store.close()


if __name__ == "__main__":
    main()
