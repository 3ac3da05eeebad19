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


def build(family, seed=0):
    """(lazy bf16 model with its DocumentStore, eager bf16 model, eager float64 model)."""
    cfg_cls, model_cls, extra = FAMILIES[family]
    config = cfg_cls(**COMMON, **extra)
    torch.manual_seed(seed)
    base = model_cls(config).to(DEV)
    with torch.no_grad():
        base.lm_head.weight.mul_(8.0)  # peaked logits: greedy choices well apart from rounding
    ref64 = copy.deepcopy(base).to(torch.float64)
    ref16 = copy.deepcopy(base).to(torch.bfloat16)
    lazy = copy.deepcopy(base).to(torch.bfloat16)
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
        line = "%s request %d: lazy max err %.4g, eager bf16 max err %.4g, bound %.4g" % (
            family, b, float(err.max()), peer, bound)
        print(line)
        if not bool((err <= bound).all()):
            failures.append(line)
    cache.close()
    store.close()
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_tokens_match_transformers(family):
    """generate() with lazy reuse (lazyattn prefill for the question, lazyattn decode for each
    new token) against transformers' eager bf16 greedy loop over the block-masked sequence, 32
    tokens. Llama must match at every step; for the others a difference is a failure unless the
    reference's own top-2 margin there is within rounding."""
    steps = 32
    lazy, store, ref16, _ = build(family, seed=2)
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
    failures = []
    for b, req in enumerate(reqs):
        layout = layout_indices(req, docs)
        gen = []
        for t in range(steps):
            logits = reference_logits(ref16, doc_ids, layout, question[b].tolist(), gen)[-1]
            top2 = torch.topk(logits.float(), 2)
            want = int(top2.indices[0])
            if got[b][t] != want:
                margin = float(top2.values[0] - top2.values[1])
                line = "%s request %d step %d: lazy %d, transformers %d (its top-2 margin %.4g)" \
                    % (family, b, t, got[b][t], want, margin)
                print(line)
                if family == "llama" or margin > 0.25:
                    failures.append(line)
                break
            gen.append(want)
        print("%s request %d: %d of %d tokens identical" % (family, b, len(gen), steps))
    store.close()
    assert not failures, "\n".join(failures)


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
