"""lazyattn from PyTorch: attention with deferred RoPE over a position-free paged K/V pool.

One physical copy of a document's K/V serves any number of requests at any positions; the
position is applied inside the kernels. The store's bookkeeping is the C library's
(liblazyattn_c.so, through ctypes); the device memory is torch tensors; the kernels are PyTorch
operators (lazyattn.ops: torch.library), on torch's current CUDA stream, with no host sync in
prefill or decode. lazyattn.hf puts it under a Hugging Face transformers model. See
docs/07-python.md.

    import torch, lazyattn
    rope = lazyattn.Rope(model_config)                        # a config.json dict, or a config
    pool = lazyattn.Pool(num_layers=32, num_kv_heads=8, head_dim=128, num_pages=8192, rope=rope)
    doc = pool.insert(k, v, tokens=ids, k_rotated=True)       # [layers, n, 8, 128] from a model
    tail = pool.create_tail("absolute")
    pool.append(tail, k_q, v_q)                               # the question's K/V
    plan = pool.plan([lazyattn.back_to_back([doc, doc], tail)], kind="prefill", num_qo_heads=32)
    o, lse = pool.prefill(plan, q, layer=0, query_rotated=True)
"""
from ._capi import LazyAttnError, LazyAttnValueError
from ._collective import RankError
from .layout import Document, Tail, back_to_back, gapped, parallel, tail_start
from .plan import Destinations, Plan
from .pool import Pool
from .rope import Rope
from . import ops

__version__ = "0.2.0"

__all__ = ["Rope", "Pool", "Document", "Tail", "Plan", "Destinations", "LazyAttnError",
           "LazyAttnValueError", "RankError", "back_to_back", "parallel", "gapped", "tail_start",
           "ops", "library_path"]


def library_path():
    """Where liblazyattn_c.so was loaded from."""
    from . import _capi
    return _capi.lib().path
