#!/usr/bin/env python3
"""Host time of lazyattn's decode step under transformers: generate() of 33 tokens less that of 1,
over 32, median of 5 (Llama-3.1-8B shapes from bench/peers/hf_rag_bench.py, random weights,
bf16, 5 cached documents x 2048 + a 32-token question); then, unless NOPROF is set, a cProfile
of one 33-token generate() by internal time. For an A/B of two Python packages, one process each:

    LAZYATTN_TEST_INSTALLED=1 PYPKG=DIR LAZYATTN_LIB=LIBDIR python3 bench/tools/hf_decode_step.py

PYPKG: the folder holding the `lazyattn` package to test (default: the checkout's python/);
LAYERS: decoder layers (default 32).
"""
import cProfile
import io
import os
import pstats
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.abspath(os.environ.get("PYPKG", os.path.join(REPO, "python"))))
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import torch  # noqa: E402
import hf_rag_bench as hb  # noqa: E402
import lazyattn.hf as lh  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402


def main():
    layers = int(os.environ.get("LAYERS", "32"))
    config = hb.llama31_8b(layers)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.eval()
    docs_ids = [torch.randint(1000, config.vocab_size, (hb.DOC_LEN,)).tolist()
                for _ in range(hb.DOCS)]
    question = torch.randint(1000, config.vocab_size, (1, hb.QUESTION))
    store = lh.DocumentStore(model, num_pages=(hb.DOCS * hb.DOC_LEN + 4096) // 16 + 64)
    with torch.inference_mode():
        docs = [store.add(ids) for ids in docs_ids]

    def generate(n):
        cache = store.cache([docs])
        with torch.inference_mode():
            model.generate(**cache.inputs(question), past_key_values=cache, max_new_tokens=n,
                           min_new_tokens=n, do_sample=False)
        cache.close()

    def seconds(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        generate(n)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    for n in (1, 33):
        generate(n)
    one = sorted(seconds(1) for _ in range(5))[2]
    many = sorted(seconds(33) for _ in range(5))[2]
    print("decode ms/token %.3f (layers %d, package %s)" % ((many - one) / 32 * 1e3, layers,
                                                           os.path.dirname(lh.__file__)))
    if not os.environ.get("NOPROF"):
        prof = cProfile.Profile()
        prof.enable()
        generate(33)
        torch.cuda.synchronize()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(35)
        print(out.getvalue())
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
