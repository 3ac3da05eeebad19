"""lazyattn's kernels as PyTorch operators (torch.library): lazyattn::write, lazyattn::prefill and
lazyattn::decode, with fake (meta) implementations, so torch.compile(fullgraph=True) traces code
that calls them and CUDA graphs capture them.

Each takes the device buffers as tensors: the pool's K/V [num_layers, num_pages, num_kv_heads,
page_size, head_dim], a plan's packed image (uint8) and split-KV workspace (uint8, mutated), and
the library's host handles as a CPU int64 tensor (`meta`), so that a new plan is new data, not a
new constant to recompile for. The implementations call liblazyattn_c through ctypes on torch's
current CUDA stream; nothing here synchronises the host. lazyattn.Pool's methods check their
arguments and call these; call them directly only with a Pool's own tensors.
"""
import ctypes

import torch

from . import _capi


def _stream(t):
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


@torch.library.custom_op("lazyattn::write", mutates_args=("k_pool", "v_pool"))
def write(k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          dst: torch.Tensor, meta: torch.Tensor, layer: int, flags: int) -> None:
    """Writes k, v [n, kv_heads, head_dim] of one layer at the destinations `dst` (a device copy
    of lazyattn_destinations' output); meta = [pool handle, rope handle or 0] (CPU int64)."""
    pool, rope = (int(x) for x in meta.tolist())
    _capi.call("write", ctypes.c_void_p(pool), ctypes.c_void_p(rope or None), layer,
               _ptr(k_pool), _ptr(v_pool), _ptr(k), _ptr(v), k.shape[0], _ptr(dst), flags,
               _stream(k))


@write.register_fake
def _(k_pool, v_pool, k, v, dst, meta, layer, flags):
    return None


def _launch(name, q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags):
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    _capi.call(name, ctypes.c_void_p(int(meta.item())), layer, _ptr(k_pool), _ptr(v_pool),
               _ptr(plan_data), _ptr(workspace), q.shape[1], scale, flags, _ptr(q), _ptr(o),
               ctypes.c_void_p(lse.data_ptr()), _stream(q))
    return o, lse


def _fake(q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags):
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("lazyattn::prefill", mutates_args=("workspace",))
def prefill(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, plan_data: torch.Tensor,
            workspace: torch.Tensor, meta: torch.Tensor, layer: int, scale: float,
            flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill of a plan's queries q [num_queries, num_qo_heads, head_dim] in one layer:
    (o like q, lse [num_queries, num_qo_heads] float32). meta = [plan handle] (CPU int64)."""
    return _launch("prefill", q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags)


@torch.library.custom_op("lazyattn::decode", mutates_args=("workspace",))
def decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, plan_data: torch.Tensor,
           workspace: torch.Tensor, meta: torch.Tensor, layer: int, scale: float,
           flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of a plan's requests, q [num_requests, num_qo_heads, head_dim]."""
    return _launch("decode", q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags)


prefill.register_fake(_fake)
decode.register_fake(_fake)
