"""lazyattn under Hugging Face transformers models (random weights, small configs of three
families with the RoPE schedules they name): the question's logits and the greedy tokens of lazy
reuse against transformers' own computation of the same layout (documents encoded standalone,
their keys at the logical positions: Block-Attention semantics, computed by transformers with
its eager attention, a block mask and shifted position ids), and bad input. Needs a CUDA GPU,
torch and transformers:

    python3 -m pytest python/tests/test_hf.py -q

Logits rule: every question logit of lazy reuse within 2 x the largest error of transformers'
eager bf16 computation against its float64 computation, plus 1e-3 of the logits' scale.
"""
import copy
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig,  # noqa: E402
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

import lazyattn  # noqa: E402
import lazyattn.hf as lh  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

DEV = torch.device("cuda")
COMMON = dict(vocab_size=1000, intermediate_size=1024, num_hidden_layers=3, bos_token_id=1,
              eos_token_id=2, tie_word_embeddings=False)
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=512, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
        max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=131072, use_sliding_window=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                         "original_max_position_embeddings": 32768})),
    "mistral": (MistralConfig, MistralForCausalLM, dict(
        hidden_size=512, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
        max_position_embeddings=32768, sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}
DOC_LENGTHS = [45, 130, 77]
QUESTION = 9


def report(line):
    """Prints a figure line and appends it to $LAZYATTN_TEST_REPORT (scripts/python-check keeps
    it with the results)."""
    print(line)
    path = os.environ.get("LAZYATTN_TEST_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def build(family, seed=0, dtype=torch.bfloat16):
    """(lazy 16-bit model with its DocumentStore, eager 16-bit model, eager float64 model)."""
    cfg_cls, model_cls, extra = FAMILIES[family]
    config = cfg_cls(**COMMON, **extra)
    torch.manual_seed(seed)
    base = model_cls(config).to(DEV)
    with torch.no_grad():
        base.lm_head.weight.mul_(8.0)  # peaked logits: greedy choices well apart from rounding
    ref64 = copy.deepcopy(base).to(torch.float64)
    ref16 = copy.deepcopy(base).to(dtype)
    lazy = copy.deepcopy(base).to(dtype)
    del base
    for m in (ref64, ref16):
        m.set_attn_implementation("eager")
        m.eval()
    lazy.eval()
    store = lh.DocumentStore(lazy, num_pages=512)
    return lazy, store, ref16, ref64


def requests(docs):
    """Two layouts: back to back, and out of order with a repeat and gaps."""
    return [[docs[0], docs[1], docs[2]], [(docs[2], 500), (docs[0], 40), (docs[2], 900)]]


def block_inputs(doc_ids, layout, question, generated=(), dtype=torch.float32):
    """transformers' own view of one request: the documents' tokens and the question (and any
    generated tokens) in one sequence, position ids shifted to the layout's starts, and a 4-d
    mask where each document sees itself causally and the question sees everything before it."""
    toks, pos, block = [], [], []
    for j, (d, s) in enumerate(layout):
        n = len(doc_ids[d])
        toks += list(doc_ids[d])
        pos += list(range(s, s + n))
        block += [j] * n
    qs = max(s + len(doc_ids[d]) for d, s in layout)
    tail = list(question) + list(generated)
    toks += tail
    pos += list(range(qs, qs + len(tail)))
    block += [-1] * len(tail)
    S = len(toks)
    blk = torch.tensor(block)
    causal = torch.arange(S)[None, :] <= torch.arange(S)[:, None]
    same = blk[:, None] == blk[None, :]
    sees = causal & (same | (blk[:, None] == -1))
    mask = torch.zeros(S, S, dtype=dtype)
    mask.masked_fill_(~sees, torch.finfo(dtype).min)
    return (torch.tensor([toks], device=DEV), torch.tensor([pos], device=DEV),
            mask[None, None].to(DEV))


def layout_indices(req, docs):
    out = []
    for r in req:
        d, s = (r, None) if isinstance(r, lazyattn.Document) else r
        out.append((docs.index(d), s))
    if all(s is None for _, s in out):
        pos, placed = 0, []
        for d, _ in out:
            placed.append((d, pos))
            pos += DOC_LENGTHS[d]
        return placed
    return out


@torch.inference_mode()
def reference_logits(model, doc_ids, layout, question, generated=()):
    ids, pos, mask = block_inputs(doc_ids, layout, question, generated,
                                  dtype=next(model.parameters()).dtype)
    n = len(question) + len(generated)
    return model(input_ids=ids, position_ids=pos, attention_mask=mask).logits[0, -n:]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_question_logits_match_transformers(family):
    lazy, store, ref16, ref64 = build(family)
    g = torch.Generator().manual_seed(1)
    doc_ids = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in DOC_LENGTHS]
    docs = [store.add(ids) for ids in doc_ids]
    assert [store.add(ids).handle for ids in doc_ids] == [d.handle for d in docs]  # hits
    reqs = requests(docs)
    question = torch.randint(3, 1000, (2, QUESTION), generator=g)
    cache = store.cache(reqs)
    with torch.inference_mode():
        out = lazy(**cache.inputs(question), past_key_values=cache, use_cache=True)
    failures = []
    for b, req in enumerate(reqs):
        layout = layout_indices(req, docs)
        r64 = reference_logits(ref64, doc_ids, layout, question[b].tolist())
        r16 = reference_logits(ref16, doc_ids, layout, question[b].tolist())
        got = out.logits[b].double()
        peer = float((r16.double() - r64).abs().max())
        err = (got - r64).abs()
        bound = 2 * peer + 1e-3 * float(r64.abs().max())
        line = "logits %s request %d: lazy max err %.4g, eager bf16 max err %.4g, bound %.4g" % (
            family, b, float(err.max()), peer, bound)
        report(line)
        if not bool((err <= bound).all()):
            failures.append(line)
    cache.close()
    store.close()
    assert not failures, "\n".join(failures)


def fp32_logits(model):
    """The LM head in float32 on a float32 copy of the last hidden state (both sides of the
    greedy comparison): logits not rounded to 16 bits, so no two tokens tie by rounding."""
    model.lm_head.float()
    model.lm_head.register_forward_pre_hook(lambda mod, args: (args[0].float(),))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_greedy_tokens_match_transformers(dtype):
    """generate() with lazy reuse (lazyattn prefill for the question, lazyattn decode for each
    new token), 32 greedy tokens per request, for each family:
      - teacher-forced: at every step, given lazy's own previous tokens, transformers' eager
        computation of the same layout in the same dtype picks lazy's token, or one whose logit
        is within twice that computation's error against float64 of it (a tie within rounding);
      - free-running: transformers' own greedy loop. Random weights give flat distributions
        whose top two often lie within 16-bit rounding of each other (bf16's 8 bits more often
        than fp16's 11), and the first such step sends the two loops apart; in float16 all 32
        tokens must be identical on at least one family (every request)."""
    steps = 32
    identical = {}
    failures = []
    for family in FAMILIES:
        lazy, store, ref16, ref64 = build(family, seed=2, dtype=dtype)
        fp32_logits(lazy)
        fp32_logits(ref16)
        g = torch.Generator().manual_seed(3)
        doc_ids = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in DOC_LENGTHS]
        docs = [store.add(ids) for ids in doc_ids]
        reqs = requests(docs)
        question = torch.randint(3, 1000, (2, QUESTION), generator=g)
        cache = store.cache(reqs)
        with torch.inference_mode():
            out = lazy.generate(**cache.inputs(question), past_key_values=cache,
                                max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
        got = out[:, QUESTION:].tolist()
        cache.close()
        identical[family] = []
        for b, req in enumerate(reqs):
            layout = layout_indices(req, docs)
            qs = question[b].tolist()
            exact = 0
            for t in range(steps):
                l16 = reference_logits(ref16, doc_ids, layout, qs, got[b][:t])[-1].double()
                l64 = reference_logits(ref64, doc_ids, layout, qs, got[b][:t])[-1]
                want = int(l16.argmax())
                if got[b][t] == want:
                    exact += 1
                    continue
                tie = 2 * float((l16 - l64).abs().max())
                gap = float(l16[want] - l16[got[b][t]])
                line = ("%s request %d step %d: lazy %d, transformers %d, logit gap %.4g "
                        "(tie bound %.4g)" % (family, b, t, got[b][t], want, gap, tie))
                print(line)
                if gap > tie:
                    failures.append(line)
            gen = []
            for t in range(steps):
                gen.append(int(reference_logits(ref16, doc_ids, layout, qs, gen)[-1].argmax()))
            same = next((t for t in range(steps) if gen[t] != got[b][t]), steps)
            identical[family].append(same)
            report("greedy %s %s request %d: teacher-forced %d of %d exact, free-running %d of "
                   "%d identical" % (str(dtype)[6:], family, b, exact, steps, same, steps))
        store.close()
    full = [f for f, runs in identical.items() if all(n == steps for n in runs)]
    report("greedy %s: all %d tokens identical on %s" % (str(dtype)[6:], steps,
                                                          ", ".join(full) or "no family"))
    assert not failures, "\n".join(failures)
    if dtype == torch.float16:
        assert full, "no family generated %d identical tokens: %s" % (steps, identical)


def test_bad_input_changes_nothing():
    lazy, store, _, _ = build("llama")
    other_model = copy.deepcopy(lazy)
    other = lh.DocumentStore(other_model, num_pages=64)
    ids = list(range(3, 50))
    doc = store.add(ids)
    foreign = other.add(ids)
    before = store.stats()
    with pytest.raises(ValueError, match="cached for another model"):
        store.cache([[doc, foreign]])
    assert store.stats() == before
    doc2 = store.add(list(range(60, 80)))
    doc2.unpin()
    doc2.erase()
    with pytest.raises(lazyattn.LazyAttnValueError, match="stale document handle"):
        store.cache([[doc, doc2]])
    cache = store.cache([[doc]])
    with pytest.raises(ValueError, match="2 questions for 1 requests"):
        cache.inputs(torch.ones(2, 4, dtype=torch.long))
    inputs = cache.inputs(torch.ones(1, 4, dtype=torch.long))
    cache.close()
    with pytest.raises(RuntimeError, match="used after close"), torch.inference_mode():
        lazy(**inputs, past_key_values=cache)
    cfg_cls, model_cls, extra = FAMILIES["mistral"]
    sliding = model_cls(cfg_cls(**COMMON, **{**extra, "sliding_window": 64})).to(DEV).bfloat16()
    with pytest.raises(ValueError, match="sliding-window"):
        lh.DocumentStore(sliding, num_pages=16)
    cfg_cls, model_cls, extra = FAMILIES["llama"]
    dyn = {**extra, "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0,
                                        "factor": 2.0}}
    dynamic = model_cls(cfg_cls(**COMMON, **dyn)).to(DEV).bfloat16()
    with pytest.raises(ValueError, match="depends on the request length"):
        lh.DocumentStore(dynamic, num_pages=16)
    fp32 = model_cls(cfg_cls(**COMMON, **extra)).to(DEV)
    with pytest.raises(ValueError, match="dtype torch.float32, expected torch.bfloat16"):
        lh.DocumentStore(fp32, num_pages=16)
    store.close()
    with pytest.raises(lazyattn.LazyAttnValueError, match="closed"):
        store.add(ids)
    other.close()
