"""lazyattn over fp8 (e4m3) pools from PyTorch: pools with per-layer, per-KV-head scales, writes
that quantize bfloat16 / float16 tokens (the stored codes against torch's own quantization),
prefill and decode against a float64 reference over the stored values, saturation counting, the
operators under opcheck, an fp8 cache under transformers, and bad input named in the exception.
Needs a CUDA GPU and torch (transformers for the last test):

    python3 -m pytest python/tests/test_fp8.py -q

The rule is test_kernels.py's, over what the pool holds: the reference reads the codes the
writes stored and dequantizes them (code x scale) in float64; the same-precision peer is SDPA
in the queries' 16-bit type over the same dequantized values (exact in 16 bits for the scales
used here), rotated to their logical positions and rounded once. Every element of o within
2 x the peer's largest error against float64 plus 1e-3 of the output scale; lse likewise.
"""
import zlib

import pytest
import torch

import lazyattn

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from fp8_scenes import DOC_LENGTHS, FP8, Fp8Scene, quantize, refused, stored  # noqa: E402
from reference import check_close  # noqa: E402
from scenes import DEV, LENGTH_DEPENDENT, config  # noqa: E402

# ---- prefill and decode against float64 ----------------------------------------------------------

# (sched, doc_form, tail_form, head_dim, (qo heads, kv heads), token dtype, query dtype)
BF, HF = torch.bfloat16, torch.float16
PREFILL_CASES = [
    ("default", "local", "local", 128, (32, 8), BF, BF),
    ("llama3", "raw", "raw", 128, (8, 8), BF, BF),
    ("yarn", "local", "raw", 64, (16, 2), HF, HF),
    ("gptj", "local", "local", 128, (16, 2), BF, HF),
    ("partial", "raw", "local", 256, (16, 4), HF, HF),
    ("longrope", "raw", "raw", 128, (32, 8), BF, BF),
    ("dynamic", "raw", "raw", 64, (8, 8), HF, HF),
]
# Raw-form segments in the fp8 decode take bfloat16 queries (its only build; float16 is refused:
# below).
DECODE_CASES = [
    ("default", "local", "local", 128, (32, 8), BF, BF),
    ("llama3", "local", "local", 256, (16, 4), HF, HF),
    ("yarn", "local", "local", 64, (16, 2), BF, BF),
    ("gptj", "local", "local", 128, (8, 8), HF, BF),
    ("partial", "local", "local", 128, (32, 8), BF, BF),
    ("dynamic", "raw", "raw", 128, (8, 8), BF, BF),
    ("gptj", "raw", "local", 64, (16, 2), HF, BF),
    ("partial", "local", "raw", 256, (16, 4), BF, BF),
]
CASES = ([("prefill",) + c for c in PREFILL_CASES] + [("decode",) + c for c in DECODE_CASES])


@pytest.mark.parametrize("kind,sched,doc_form,tail_form,head_dim,heads,dtype,q_dtype", CASES)
def test_fp8_kernels_match_float64(kind, sched, doc_form, tail_form, head_dim, heads, dtype,
                                   q_dtype):
    """Un-rotated and rotated queries (within their rule, and of each other), and where the
    form is local and the schedule does not depend on the length, the model-style path; the
    writes' codes against torch's quantization; nothing saturated."""
    seed = zlib.crc32(repr((kind, sched, doc_form, tail_form, head_dim)).encode()) % 100000
    label = "fp8 %s %s docs %s tail %s d%d %s %s/%s" % (kind, sched, doc_form, tail_form,
                                                        head_dim, heads, str(dtype)[6:],
                                                        str(q_dtype)[6:])
    failures = []
    s = Fp8Scene(kind, sched, "native", doc_form, tail_form, heads, head_dim, dtype, q_dtype,
                 seed=seed)
    try:
        failures += s.write_failures
        o_native, _, bound_native = s.check("native", label + " native", failures)
        o_rot, _, bound_rot = s.check("rotated", label + " query_rotated", failures)
        check_close(label + " rotated vs native", o_rot, o_native.double(), None,
                    bound_native + bound_rot, failures)
        assert s.pool.fp8_saturated() == 0
    finally:
        s.close()
    if doc_form == "local" and sched not in LENGTH_DEPENDENT:
        m = Fp8Scene(kind, sched, "model", doc_form, "absolute", heads, head_dim, dtype,
                     q_dtype, seed=seed + 1)
        try:
            failures += m.write_failures
            m.check("model", label + " model path", failures)
        finally:
            m.close()
    assert not failures, "\n".join(failures)


# ---- pools, scales and saturation ----------------------------------------------------------------

def test_fp8_pool_tensors_and_scales():
    rope = lazyattn.Rope(config("default", 64))
    ks = [[0.5, 0.25, 2.0], [1.0, 0.125, 4.0]]
    pool = lazyattn.Pool(2, 3, 64, num_pages=8, dtype=FP8, rope=rope, k_scale=ks, v_scale=0.75)
    assert pool.is_fp8 and pool.k.dtype == FP8 and pool.v.dtype == FP8
    assert tuple(pool.k.shape) == (2, 8, 3, 16, 64) and pool.k.device.type == "cuda"
    assert not bool(pool.k.view(torch.uint8).any())  # zero-filled
    assert pool.scales.dtype == torch.float32 and tuple(pool.scales.shape) == (2, 2, 3)
    assert pool.scales[0].tolist() == ks and pool.scales[1].tolist() == [[0.75] * 3] * 2
    assert pool.k_scale.tolist() == ks and pool.v_scale.tolist() == [[0.75] * 3] * 2
    assert pool.saturated.dtype == torch.int64 and pool.fp8_saturated() == 0
    assert "torch.float8_e4m3fn" in repr(pool)
    assert pool.input_dtypes == (torch.bfloat16, torch.float16)
    plain = lazyattn.Pool(2, 3, 64, num_pages=8, rope=rope)
    assert not plain.is_fp8 and plain.scales is None and plain.fp8_saturated() == 0
    # No scales: all 1.
    ones = lazyattn.Pool(1, 2, 64, num_pages=8, dtype=FP8, rope=rope)
    assert ones.scales.tolist() == [[[1.0, 1.0]], [[1.0, 1.0]]]
    for p in (pool, plain, ones, rope):
        p.close()


def test_fp8_saturation_is_counted():
    """|x / scale| >= 464 (and non-finite values) are counted and stored as +-448; 460 rounds
    to 448 as any value does, uncounted."""
    pool = lazyattn.Pool(1, 2, 64, num_pages=8, dtype=FP8, k_scale=[[1.0, 0.5]], v_scale=2.0,
                         rope=lazyattn.Rope(config("default", 64)))
    tail = pool.create_tail("raw")
    k = (0.1 * torch.randn(5, 2, 64, device=DEV)).bfloat16()
    v = (0.1 * torch.randn(5, 2, 64, device=DEV)).bfloat16()
    k[0, 0, 0], k[1, 0, 1], k[2, 0, 2] = 464.0, -1000.0, 460.0   # head 0, scale 1: 2 counted
    k[3, 1, 3], k[4, 1, 4] = 232.0, 230.0                        # head 1, scale 0.5: 1 counted
    v[0, 0, 0], v[1, 1, 5], v[2, 0, 6] = 928.0, float("inf"), 920.0  # scale 2: 2 counted
    dst = pool.destinations([(tail, pool.reserve(tail, 5), 5)])
    pool.write(dst, 0, k, v)
    assert pool.fp8_saturated() == 5
    kc, vc = stored(pool, dst, 0)
    got = [kc[0, 0, 0], kc[1, 0, 1], kc[2, 0, 2], kc[3, 1, 3], kc[4, 1, 4], vc[0, 0, 0],
           vc[1, 1, 5], vc[2, 0, 6]]
    assert [int(x) for x in got] == [0x7e, 0xfe, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e]
    assert pool.fp8_saturated(reset=True) == 5
    assert pool.fp8_saturated() == 0
    k2 = torch.zeros(1, 2, 64, device=DEV, dtype=torch.float16)
    k2[0, 1, 0] = -300.0  # scale 0.5: -600
    pool.append(tail, k2, torch.zeros_like(k2))  # float16 tokens into the same pool
    assert pool.fp8_saturated() == 1
    pool.close()
    pool.rope.close()


# torch's schema check compares every argument before and after with allclose, which torch
# does not implement for float8 tensors ("mul_cuda" not implemented for 'Float8_e4m3fn'); the
# other checks run.
OPCHECKS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def test_fp8_opcheck():
    rope = lazyattn.Rope(config("llama3"))
    pool = lazyattn.Pool(2, 8, 128, num_pages=64, dtype=FP8, rope=rope, k_scale=0.5,
                         v_scale=0.25)
    kv = lambda n: (torch.randn(2, n, 8, 128, device=DEV).bfloat16(),  # noqa: E731
                    torch.randn(2, n, 8, 128, device=DEV).bfloat16())
    docs = [pool.insert(*kv(n)) for n in (100, 70)]
    tails = []
    for _ in range(2):
        t = pool.create_tail("local")
        pool.append(t, *kv(5))
        tails.append(t)
    layouts = [lazyattn.back_to_back(docs, tails[0]),
               lazyattn.gapped(docs[::-1], [500, 7000], tails[1], 9000)]
    q = torch.randn(2, 32, 128, device=DEV).bfloat16()
    qp = torch.randn(6, 32, 128, device=DEV).half()
    plan = pool.plan(layouts, num_qo_heads=32)
    pplan = pool.plan(layouts, kind="prefill", num_queries=3, num_qo_heads=32)
    torch.library.opcheck(torch.ops.lazyattn.decode_fp8.default,
                          (q, pool.k, pool.v, pool.scales, plan.data, plan.workspace, plan.meta,
                           1, 0.0, 1), test_utils=OPCHECKS)
    torch.library.opcheck(torch.ops.lazyattn.prefill_fp8.default,
                          (qp, pool.k, pool.v, pool.scales, pplan.data, pplan.workspace,
                           pplan.meta, 0, 0.0, 3), test_utils=OPCHECKS)
    plan.close()
    pplan.close()
    first = [pool.reserve(t, 1) for t in tails]
    dst = pool.destinations([(t, f, 1) for t, f in zip(tails, first)], rotate=True)
    k, v = (torch.randn(2, 8, 128, device=DEV).half() for _ in range(2))
    torch.library.opcheck(torch.ops.lazyattn.write_fp8.default,
                          (pool.k, pool.v, pool.scales, pool.saturated, k, v, dst.data, dst.meta,
                           1, 1), test_utils=OPCHECKS)
    pool.close()
    rope.close()


# ---- bad input -----------------------------------------------------------------------------------

def test_fp8_bad_scales_are_named_before_the_library_is_called(monkeypatch):
    calls = []
    real = lazyattn._capi.call

    def spy(name, *args):
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(lazyattn._capi, "call", spy)
    make = lambda **kw: lazyattn.Pool(2, 3, 64, num_pages=8, **kw)  # noqa: E731
    nan = [[1.0, 1.0, 1.0], [float("nan"), 1.0, 1.0]]
    bad = [
        (dict(dtype=FP8, k_scale=0.0), ValueError,
         "k_scale[0, 0] (layer 0, KV head 0) is 0.0, expected a finite positive scale"),
        (dict(dtype=FP8, v_scale=-2.0), ValueError, "v_scale[0, 0] (layer 0, KV head 0) is -2.0"),
        (dict(dtype=FP8, k_scale=nan), ValueError, "k_scale[1, 0] (layer 1, KV head 0) is nan"),
        (dict(dtype=FP8, v_scale=torch.tensor([[1.0, float("inf"), 1.0], [1.0, 1.0, 1.0]])),
         ValueError, "v_scale[0, 1] (layer 0, KV head 1) is inf"),
        (dict(dtype=FP8, k_scale=1e39), ValueError, "is 1e+39 (inf in float32)"),
        (dict(dtype=FP8, k_scale=1e-50), ValueError, "is 1e-50 (0.0 in float32)"),
        (dict(dtype=FP8, k_scale=[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]), ValueError,
         "k_scale of shape [3, 2], expected a float or a sequence or tensor [num_layers 2, "
         "num_kv_heads 3]"),
        (dict(dtype=FP8, v_scale=[1.0, 2.0, 3.0]), ValueError, "v_scale of shape [3]"),
        (dict(dtype=FP8, k_scale="0.5"), TypeError, "k_scale '0.5', expected a float"),
        (dict(dtype=FP8, k_scale=[["a"]]), TypeError, "k_scale of type list"),
        (dict(k_scale=0.5), ValueError,
         "k_scale given for a torch.bfloat16 pool, expected scales only with "
         "dtype=torch.float8_e4m3fn"),
        (dict(dtype=torch.float16, v_scale=0.5), ValueError, "v_scale given for a torch.float16"),
        (dict(dtype=torch.float8_e5m2), ValueError, "dtype torch.float8_e5m2, expected "
         "torch.bfloat16, torch.float16 or torch.float8_e4m3fn"),
    ]
    for kwargs, exc, needle in bad:
        with pytest.raises(exc) as info:
            make(**kwargs)
        assert needle in str(info.value), "%r not in %r" % (needle, str(info.value))
    assert calls == [], "the library was called: %s" % calls


@pytest.fixture
def fp8_scene():
    """A one-layer fp8 pool with a local document and a tail, decode and prefill plans; a
    bfloat16 pool beside it."""
    rope = lazyattn.Rope(config("default"))
    pool = lazyattn.Pool(1, 2, 128, num_pages=32, dtype=FP8, rope=rope, k_scale=0.5,
                         v_scale=[[0.25, 1.0]])
    plain = lazyattn.Pool(1, 2, 128, num_pages=32, rope=rope)
    kv = lambda n: (torch.randn(1, n, 2, 128, device=DEV).bfloat16(),  # noqa: E731
                    torch.randn(1, n, 2, 128, device=DEV).bfloat16())
    doc = pool.insert(*kv(200))
    tail = pool.create_tail()
    pool.append(tail, *kv(6))
    decode = pool.plan([lazyattn.back_to_back([doc], tail)], num_qo_heads=4)
    prefill = pool.plan([lazyattn.back_to_back([doc], tail)], kind="prefill", num_qo_heads=4)
    yield dict(rope=rope, pool=pool, plain=plain, doc=doc, tail=tail, decode=decode,
               prefill=prefill, kv=kv)
    for x in (decode, prefill, pool, plain, rope):
        x.close()


def test_fp8_pool_methods_refuse_bad_tokens_and_queries(fp8_scene):
    pool, tail, dec, pre = (fp8_scene[n] for n in ("pool", "tail", "decode", "prefill"))
    first = pool.reserve(tail, 2)
    dst = pool.destinations([(tail, first, 2)])
    k, v = (x[0] for x in fp8_scene["kv"](2))
    expected = "expected torch.bfloat16 or torch.float16"
    refused(pool, lambda: pool.write(dst, 0, k.float(), v), ValueError,
            "k dtype torch.float32, " + expected)
    refused(pool, lambda: pool.write(dst, 0, k, v.to(FP8)), ValueError,
            "v dtype torch.float8_e4m3fn, " + expected)
    refused(pool, lambda: pool.write(dst, 0, k, v.half()), ValueError,
            "k of dtype torch.bfloat16 and v of dtype torch.float16, expected the same dtype")
    refused(pool, lambda: pool.insert(*(x.float() for x in fp8_scene["kv"](3))), ValueError,
            "k dtype torch.float32")
    refused(pool, lambda: pool.decode(dec, torch.randn(1, 4, 128, device=DEV)), ValueError,
            "q dtype torch.float32, " + expected)
    refused(pool, lambda: pool.prefill(pre, torch.randn(6, 4, 128, device=DEV).to(FP8)),
            ValueError, "q dtype torch.float8_e4m3fn")
    # The good calls run, in either 16-bit type.
    pool.write(dst, 0, k.half(), v.half())
    dec2 = pool.plan([lazyattn.back_to_back([fp8_scene["doc"]], tail)], num_qo_heads=4)
    for dt in (torch.bfloat16, torch.float16):
        o, lse = pool.decode(dec2, torch.randn(1, 4, 128, device=DEV).to(dt))
        assert o.dtype == dt and lse.dtype == torch.float32
    dec2.close()
    # A raw-form document: the fp8 decode takes it with bfloat16 queries, refuses float16 ones.
    raw = pool.insert(*fp8_scene["kv"](20), form="raw")
    raw_plan = pool.plan([lazyattn.back_to_back([raw], tail)], num_qo_heads=4)
    o, _ = pool.decode(raw_plan, torch.randn(1, 4, 128, device=DEV).bfloat16())
    assert o.dtype == torch.bfloat16 and bool(torch.isfinite(o).all())
    refused(pool, lambda: pool.decode(raw_plan, torch.randn(1, 4, 128, device=DEV).half()),
            lazyattn.LazyAttnValueError, "lazyattn_decode_fp8", "raw-form segments over a "
            "float8_e4m3 pool with float16 queries, expected bfloat16")
    raw_plan.close()
    torch.cuda.synchronize()


def test_fp8_operators_called_directly_check_every_buffer(fp8_scene):
    pool, plain, dec, pre = (fp8_scene[n] for n in ("pool", "plain", "decode", "prefill"))
    q = torch.randn(1, 4, 128, device=DEV).bfloat16()
    ops = torch.ops.lazyattn

    def attend(op=ops.decode_fp8, q=q, k=None, v=None, scales=None, plan=dec):
        return op(q, pool.k if k is None else k, pool.v if v is None else v,
                  pool.scales if scales is None else scales, plan.data, plan.workspace,
                  plan.meta, 0, 0.0, 1)

    attend()  # the good call runs
    # The 16-bit operators on an fp8 pool, and the fp8 ones on a 16-bit pool.
    refused(pool, lambda: ops.decode(q, pool.k, pool.v, dec.data, dec.workspace, dec.meta, 0,
                                     0.0, 1), ValueError,
            "lazyattn::decode: k_pool of dtype torch.float8_e4m3fn, expected torch.bfloat16 or "
            "torch.float16 (fp8 pools: lazyattn::decode_fp8)")
    refused(pool, lambda: ops.prefill(torch.randn(6, 4, 128, device=DEV).bfloat16(), pool.k,
                                      pool.v, pre.data, pre.workspace, pre.meta, 0, 0.0, 1),
            ValueError, "(fp8 pools: lazyattn::prefill_fp8)")
    refused(pool, lambda: attend(k=plain.k, v=plain.v), ValueError,
            "lazyattn::decode_fp8: k_pool of dtype torch.bfloat16, expected torch.float8_e4m3fn "
            "(16-bit pools: lazyattn::decode)")
    # The library, called past the Python checks, refuses them by name too.
    status = lazyattn._capi
    refused(pool, lambda: status.call("prefill", pre._h, 0, pool.k.data_ptr(),
                                      pool.v.data_ptr(), pre.data.data_ptr(),
                                      pre.workspace.data_ptr(), 4, 0.0, 1, q.data_ptr(),
                                      q.data_ptr(), None, None),
            lazyattn.LazyAttnValueError, "lazyattn_prefill: a float8_e4m3 pool",
            "lazyattn_prefill_fp8")
    # Scales: the wrong size, dtype or device; queries of a type the kernels do not take.
    refused(pool, lambda: attend(scales=pool.scales[:1]), ValueError,
            "scales of 2 elements, expected 2 x num_layers 1 x num_kv_heads 2 = 4")
    refused(pool, lambda: attend(scales=pool.scales.double()), ValueError,
            "scales of dtype torch.float64, expected torch.float32")
    refused(pool, lambda: attend(scales=pool.scales.cpu()), ValueError, "scales on cpu")
    refused(pool, lambda: attend(q=q.float()), ValueError,
            "q of dtype torch.float32, expected torch.bfloat16 or torch.float16")
    refused(pool, lambda: attend(op=ops.prefill_fp8), lazyattn.LazyAttnValueError,
            "the plan is a decode plan, expected a prefill plan")
    # The write: its counter and its tokens.
    tail = fp8_scene["tail"]
    dst = pool.destinations([(tail, pool.reserve(tail, 3), 3)])
    k, v = (x[0] for x in fp8_scene["kv"](3))

    def write(k=k, v=v, saturated=None, scales=None, kp=None, vp=None):
        ops.write_fp8(pool.k if kp is None else kp, pool.v if vp is None else vp,
                      pool.scales if scales is None else scales,
                      pool.saturated if saturated is None else saturated, k, v, dst.data,
                      dst.meta, 0, 0)

    refused(pool, lambda: write(saturated=pool.saturated.float()), ValueError,
            "saturated of dtype torch.float32, expected torch.int64")
    refused(pool, lambda: write(saturated=pool.saturated[:0]), ValueError,
            "saturated of 0 elements, expected at least 1")
    refused(pool, lambda: write(k=k.float(), v=v.float()), ValueError,
            "k of dtype torch.float32, expected torch.bfloat16 or torch.float16")
    refused(pool, lambda: write(v=v.half()), ValueError, "v of dtype torch.float16, expected "
            "torch.bfloat16")
    refused(pool, lambda: write(scales=pool.scales[:, :0]), ValueError, "scales of 0 elements")
    refused(pool, lambda: write(kp=plain.k, vp=plain.v), ValueError,
            "k_pool of dtype torch.bfloat16, expected torch.float8_e4m3fn")
    refused(pool, lambda: ops.write(pool.k, pool.v, k, v, dst.data, dst.meta, 0, 0), ValueError,
            "lazyattn::write: k_pool of dtype torch.float8_e4m3fn", "lazyattn::write_fp8")
    write()  # the good call writes
    torch.cuda.synchronize()


# ---- transformers: an fp8 cache ------------------------------------------------------------------

def test_transformers_fp8_cache():
    """A Llama with an fp8 DocumentStore: the question's logits within 2 x transformers' eager
    bf16 error against its float64 computation, both with their K/V quantized as the pool
    quantizes them (an attention function that rounds K and V through e4m3 with the same
    scales), and 8 greedy tokens each transformers' choice or a tie within that error. Every
    document at position 0 (parallel): its keys are quantized at the positions the reference
    quantizes them at."""
    pytest.importorskip("transformers")
    from transformers import AttentionInterface
    from transformers.models.llama.modeling_llama import eager_attention_forward

    import lazyattn.hf as lh
    import test_hf as th

    lazy, store, ref16, ref64 = th.build("llama")
    store.close()
    layers, heads = 3, 2
    # Powers of two: x / scale is exact in every dtype, so both sides quantize the same values.
    k_scale = [[2.0 ** -(1 + (l + h) % 3) for h in range(heads)] for l in range(layers)]
    v_scale = [[2.0 ** -(2 + (l * heads + h) % 2) for h in range(heads)] for l in range(layers)]
    store = lh.DocumentStore(lazy, num_pages=512, dtype=FP8, k_scale=k_scale, v_scale=v_scale)
    assert store.pool.is_fp8 and "float8_e4m3fn" in repr(store.pool)
    scales = (torch.tensor(k_scale, dtype=torch.float64), torch.tensor(v_scale,
                                                                       dtype=torch.float64))

    def through_fp8(x, scale):  # x [B, kv_heads, S, head_dim]
        s = scale.to(x.device, x.dtype)[None, :, None, None]
        return (x / s).clamp(-448.0, 448.0).float().to(FP8).float().to(x.dtype) * s

    def attention(module, query, key, value, attention_mask, **kwargs):
        ks, vs = (t[module.layer_idx] for t in scales)
        return eager_attention_forward(module, query, through_fp8(key, ks), through_fp8(value, vs),
                                       attention_mask, **kwargs)

    AttentionInterface.register("lazyattn_fp8_reference", attention)
    for m in (ref16, ref64):
        m.set_attn_implementation("lazyattn_fp8_reference")
    g = torch.Generator().manual_seed(1)
    doc_ids = [torch.randint(3, 1000, (n,), generator=g).tolist() for n in th.DOC_LENGTHS]
    docs = [store.add(ids) for ids in doc_ids]
    layout = [(j, 0) for j in range(len(docs))]
    question = torch.randint(3, 1000, (1, th.QUESTION), generator=g)
    cache = store.cache([[(d, 0) for d in docs]])
    with torch.inference_mode():
        out = lazy(**cache.inputs(question), past_key_values=cache, use_cache=True)
    cache.close()
    failures = []
    r64 = th.reference_logits(ref64, doc_ids, layout, question[0].tolist())
    r16 = th.reference_logits(ref16, doc_ids, layout, question[0].tolist())
    err = (out.logits[0].double() - r64).abs()
    peer = float((r16.double() - r64).abs().max())
    bound = 2 * peer + 1e-3 * float(r64.abs().max())
    line = "logits fp8 llama: lazy max err %.4g, eager bf16 max err %.4g, bound %.4g" % (
        float(err.max()), peer, bound)
    th.report(line)
    if not bool((err <= bound).all()):
        failures.append(line)
    steps = 8
    cache = store.cache([[(d, 0) for d in docs]])
    with torch.inference_mode():
        gen = lazy.generate(**cache.inputs(question), past_key_values=cache,
                            max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
    cache.close()
    got = gen[0, th.QUESTION:].tolist()
    for t in range(steps):
        l16 = th.reference_logits(ref16, doc_ids, layout, question[0].tolist(),
                                  got[:t])[-1].double()
        l64 = th.reference_logits(ref64, doc_ids, layout, question[0].tolist(), got[:t])[-1]
        want = int(l16.argmax())
        tie = 2 * float((l16 - l64).abs().max())
        if got[t] != want and float(l16[want] - l16[got[t]]) > tie:
            failures.append("fp8 greedy step %d: lazy %d, transformers %d, logit gap %.4g (tie "
                            "bound %.4g)" % (t, got[t], want, float(l16[want] - l16[got[t]]),
                                             tie))
    assert store.fp8_saturated() == 0
    store.close()
    assert not failures, "\n".join(failures)
    fp32 = th.FAMILIES["llama"][1](th.FAMILIES["llama"][0](**th.COMMON,
                                                         **th.FAMILIES["llama"][2])).to(DEV)
    with pytest.raises(ValueError, match="an fp8 cache under a torch.float32 model"):
        lh.DocumentStore(fp32, num_pages=16, dtype=FP8)
