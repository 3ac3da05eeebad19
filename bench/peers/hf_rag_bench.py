#!/usr/bin/env python3
"""Time to first token and decode time per token through transformers, Llama-3.1-8B shapes
(random weights, bf16), the paper's RAG prompt: 5 cached documents x 2048 tokens + a 32-token
question, the documents in a new order for every prompt. Writes JSON.

    python3 bench/peers/hf_rag_bench.py OUT.json [--quick]

TTFT (wall time from the prompt to its first token, synchronised, host work included):
  lazy    lazyattn.hf: the documents encoded once into a DocumentStore; per prompt a RagCache,
          the question's prefill by lazyattn over the cached documents, the first token
  full    transformers' own prefill of the whole 10272-token prompt (sdpa, no reuse)
  block   Block-Attention-style reuse in PyTorch: each document's K/V cached from a standalone
          sdpa encoding at 0..2047, re-rotated to the prompt's positions and concatenated into a
          DynamicCache (a copy per prompt), then the question's prefill with sdpa
Decode per token: generate() of N + 1 tokens less generate() of 1, over N; lazy (lazyattn decode
every step) against transformers' sdpa decode with its static cache (eager: torch.compile off).
Medians over repeats, peers in the same process.
"""
import json
import os
import random
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if os.environ.get("LAZYATTN_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(REPO, "python"))
import lazyattn  # noqa: E402
import lazyattn.hf as lh  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

DOCS, DOC_LEN, QUESTION = 5, 2048, 32


def llama31_8b(layers):
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                       head_dim=128, max_position_embeddings=131072, bos_token_id=128000,
                       eos_token_id=128001, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                        "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192})


def timed(fn, repeats, warmup=1):
    """Median wall seconds of fn() (synchronised before and after)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return statistics.median(out), out


def lazy_times(model, store, shuffled, question, reps, steps):
    """lazyattn.hf's time to first token (median and every sample, s) and decode ms per token
    (generate() of steps + 1 tokens less generate() of 1, over steps): each prompt a RagCache over
    shuffled()'s documents, then the question."""
    def prompt():
        cache = store.cache([shuffled()])
        with torch.inference_mode():
            logits = model(**cache.inputs(question), past_key_values=cache, logits_to_keep=1).logits
            tok = logits[:, -1].argmax(-1)
        cache.close()
        return tok

    def generate(n):
        def run():
            cache = store.cache([shuffled()])
            with torch.inference_mode():
                model.generate(**cache.inputs(question), past_key_values=cache, max_new_tokens=n,
                               min_new_tokens=n, do_sample=False)
            cache.close()
        return run

    ttft, ttft_all = timed(prompt, 2 * reps, warmup=2)
    return ttft, ttft_all, per_token_ms(generate, reps, steps)


def random_llama(config, device):
    """A LlamaForCausalLM of `config` with random weights (torch seed 0), made in bfloat16 on
    `device`."""
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    return model


def greedy_generate(model, input_ids, **kwargs):
    """generate(n) for per_token_ms: a run of model.generate() of exactly n greedy tokens after
    input_ids() (called per run), with kwargs (the cache to use)."""
    def generate(n):
        def run():
            with torch.inference_mode():
                model.generate(input_ids=input_ids(), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, **kwargs)
        return run
    return generate


def add_documents(store, docs_ids):
    """The documents, each encoded into the store (a miss), and the seconds that took."""
    t = time.perf_counter()
    with torch.inference_mode():
        docs = [store.add(ids) for ids in docs_ids]
    torch.cuda.synchronize()
    return docs, time.perf_counter() - t


def per_token_ms(generate, reps, steps):
    """Decode ms per token: generate(n)() of steps + 1 tokens less of 1, medians, over steps."""
    g1, _ = timed(generate(1), reps)
    gn, _ = timed(generate(steps + 1), reps)
    return (gn - g1) / steps * 1e3


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def plot(out, path):
    """Two bar charts (TTFT, decode per token), the figures of one run, for docs/."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    names = ["lazy (lazyattn)", "block re-encode", "full prefill"]
    vals = [1e3 * out[k] for k in ("lazy_ttft_s", "block_ttft_s", "full_ttft_s")]
    a.bar(names, vals, color=["#2a7", "#e93", "#999"])
    a.set_ylabel("ms (median)")
    a.set_title("TTFT, %d x %d cached + %d question" % (out["docs"], out["doc_len"],
                                                         out["question"]))
    for i, v in enumerate(vals):
        a.text(i, v, "%.1f" % v, ha="center", va="bottom", fontsize=8)
    names = ["lazy (lazyattn)", "static cache, sdpa"]
    vals = [out["lazy_decode_ms_per_token"], out["static_decode_ms_per_token"]]
    b.bar(names, vals, color=["#2a7", "#999"])
    b.set_ylabel("ms per token (median)")
    b.set_title("decode through generate()")
    for i, v in enumerate(vals):
        b.text(i, v, "%.2f" % v, ha="center", va="bottom", fontsize=8)
    fig.suptitle("transformers, Llama-3.1-8B shapes (%d layers), bf16, %s, %s" % (
        out["layers"], out["device"], out["commit"]), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    quick = "--quick" in sys.argv
    layers = 8 if quick else 32
    reps = 3 if quick else 7
    steps = 16 if quick else 64
    rng = random.Random(0)
    config = llama31_8b(layers)
    model = random_llama(config, "cuda")
    model.eval()
    dev = torch.device("cuda")
    vocab = config.vocab_size
    docs_ids = [torch.randint(1000, vocab, (DOC_LEN,)).tolist() for _ in range(DOCS)]
    question = torch.randint(1000, vocab, (1, QUESTION))
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "transformers": __import__("transformers").__version__,
           "library": lazyattn.library_path(), "commit": os.environ.get("LAZYATTN_COMMIT", ""),
           "date": time.strftime("%Y-%m-%d"), "layers": layers, "docs": DOCS,
           "doc_len": DOC_LEN, "question": QUESTION, "repeats": reps, "decode_steps": steps}

    # ---- lazy ----------------------------------------------------------------------------------
    store = lh.DocumentStore(model, num_pages=(DOCS * DOC_LEN + 4096) // 16 + 64)
    docs, out["lazy_encode_s_first"] = add_documents(store, docs_ids)

    def shuffled():
        order = docs[:]
        rng.shuffle(order)
        return order

    out["lazy_ttft_s"], out["lazy_ttft_all"], out["lazy_decode_ms_per_token"] = lazy_times(
        model, store, shuffled, question, reps, steps)
    out["lazy_store"] = store.stats()

    # ---- transformers: full prefill, Block-Attention re-encoding, static-cache decode -----------
    model.set_attn_implementation("sdpa")
    base = model.model

    def full_prompt_ids(order):
        ids = sum((docs_ids[j] for j in order), []) + question[0].tolist()
        return torch.tensor([ids], device=dev)

    def full_prompt():
        order = list(range(DOCS))
        rng.shuffle(order)
        ids = full_prompt_ids(order)
        with torch.inference_mode():
            logits = model(input_ids=ids, use_cache=True, logits_to_keep=1).logits
            return logits[:, -1].argmax(-1)

    out["full_ttft_s"], out["full_ttft_all"] = timed(full_prompt, reps)

    # Block-Attention: each document's K/V at local positions, from a standalone encoding.
    cached = []
    with torch.inference_mode():
        for ids in docs_ids:
            c = DynamicCache(config=config)
            base(input_ids=torch.tensor([ids], device=dev), past_key_values=c, use_cache=True)
            cached.append([(layer.keys, layer.values) for layer in c.layers])
    rotary = base.rotary_emb

    def block_prompt():
        order = list(range(DOCS))
        rng.shuffle(order)
        with torch.inference_mode():
            cache = DynamicCache(config=config)
            shifts = [j * DOC_LEN for j in range(DOCS)]
            pos = torch.tensor([shifts], device=dev)
            like = torch.zeros(1, 1, dtype=torch.bfloat16, device=dev)  # dtype and device only
            cos, sin = rotary(like, position_ids=pos)  # [1, DOCS, 128]
            for layer in range(layers):
                ks, vs = [], []
                for slot, j in enumerate(order):
                    k, v = cached[j][layer]
                    c, s = cos[0, slot][None, None, None, :], sin[0, slot][None, None, None, :]
                    ks.append(k * c + rotate_half(k) * s)  # R(s_j) R(i) k = R(s_j + i) k
                    vs.append(v)
                cache.update(torch.cat(ks, dim=2), torch.cat(vs, dim=2), layer)
            qpos = DOCS * DOC_LEN + torch.arange(QUESTION, device=dev)[None]
            logits = model(input_ids=question.to(dev), position_ids=qpos, past_key_values=cache,
                           use_cache=True, logits_to_keep=1).logits
            return logits[:, -1].argmax(-1)

    out["block_ttft_s"], out["block_ttft_all"] = timed(block_prompt, reps)
    del cached
    torch.cuda.empty_cache()

    def shuffled_prompt_ids():
        order = list(range(DOCS))
        rng.shuffle(order)
        return full_prompt_ids(order)

    out["static_decode_ms_per_token"] = per_token_ms(greedy_generate(
        model, shuffled_prompt_ids, cache_implementation="static", disable_compile=True),
        reps, steps)
    model.set_attn_implementation(lh.NAME)

    out["ttft_full_over_lazy"] = out["full_ttft_s"] / out["lazy_ttft_s"]
    out["ttft_block_over_lazy"] = out["block_ttft_s"] / out["lazy_ttft_s"]
    out["decode_static_over_lazy"] = (out["static_decode_ms_per_token"] /
                                      out["lazy_decode_ms_per_token"])
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    plot(out, os.path.splitext(sys.argv[1])[0] + ".png")
    print("TTFT (median, ms): lazy %.2f | full prefill %.2f (%.2fx) | block re-encode %.2f "
          "(%.2fx)" % (1e3 * out["lazy_ttft_s"], 1e3 * out["full_ttft_s"],
                       out["ttft_full_over_lazy"], 1e3 * out["block_ttft_s"],
                       out["ttft_block_over_lazy"]))
    print("decode ms/token: lazy %.3f | static sdpa %.3f (%.2fx)" % (
        out["lazy_decode_ms_per_token"], out["static_decode_ms_per_token"],
        out["decode_static_over_lazy"]))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
