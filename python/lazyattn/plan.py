"""Plan (a batch's packed page tables and split-KV workspace on the GPU) and Destinations (where a
batch of written tokens goes), both as torch tensors the operators take."""
import ctypes

import torch

from . import _capi
from ._capi import LazyAttnValueError
from ._owned import _Owned

class Destinations:
    """Where a batch of tokens goes in a pool (Pool.destinations): a device tensor the write
    operator reads, for `num_tokens` rows of K/V; `rotate`: K is rotated into local form on the
    way. `meta` holds the pool's and rope's handles for the operator."""

    def __init__(self, pool, data, num_tokens, rotate, rope, meta):
        # The rope is kept so its handle in `meta` stays live as long as these destinations.
        self.pool, self.data, self.num_tokens, self.rotate, self.rope = (
            pool, data, num_tokens, rotate, rope)
        self.meta = meta

    def load_into(self, captured):
        """Copies these destinations over `captured`'s device tensor (same token count and
        flags), on the current stream: a CUDA graph that captured a write to `captured` then
        writes here."""
        if (captured.pool is not self.pool or captured.num_tokens != self.num_tokens
                or captured.rotate != self.rotate or captured.data.numel() != self.data.numel()):
            raise LazyAttnValueError(_capi.ERROR_INVALID_ARGUMENT,
                                     "lazyattn.Destinations.load_into: %d tokens (rotate %s) "
                                     "into a captured write of %d (rotate %s), expected the same"
                                     % (self.num_tokens, self.rotate, captured.num_tokens,
                                        captured.rotate))
        captured.data.copy_(self.data, non_blocking=True)


class Plan(_Owned):
    """A batch over a pool (Pool.plan): the packed page tables and schedule on the device
    (`data`), the split-KV workspace (`workspace`), and the host handles (plan, pool) as a CPU
    tensor (`meta`).
    Valid while its documents stay stored and its tails keep their length."""

    _DESTROY = "plan_destroy"

    def __init__(self, pool, h, rope, kind, like=None):
        # The pool and rope are kept: the library's plan refers to both handles.
        self.pool, self._h, self.rope, self.kind = pool, h, rope, kind
        self._open = True
        info = _capi.PlanInfo()
        _capi.call("plan_info", h, ctypes.byref(info))
        self.num_requests, self.num_queries = info.num_requests, info.num_queries
        self.num_keys, self.num_work, self.kv_splits = info.num_keys, info.num_work, info.kv_splits
        self.bytes = info.bytes
        # The plan's and its pool's handles: the operators check the K/V tensors against the
        # pool's size.
        self.meta = torch.tensor([h.value, pool._h.value], dtype=torch.int64)
        host = self._image()
        if like is None:
            self.data = torch.empty(self.bytes, dtype=torch.uint8, device=pool.device_obj)
            # Zeroed once: the decode keeps its split counters at zero from then on.
            self.workspace = torch.zeros(max(info.workspace_bytes, 256), dtype=torch.uint8,
                                         device=pool.device_obj)
        else:
            # The captured plan's buffers: a graph replays with their addresses.
            self.data, self.workspace = like.data, like.workspace
        self.image = host
        if like is None:
            self.data.copy_(host, non_blocking=True)

    def _image(self):
        host = torch.empty(self.bytes, dtype=torch.uint8, pin_memory=True)
        _capi.call("plan_pack", self._h, ctypes.c_void_p(host.data_ptr()), self.bytes)
        return host

    def load_into(self, captured):
        """Copies this plan's image over `captured`'s device buffer (this plan was made with
        like=captured), on the current stream: a CUDA graph captured with `captured` then runs
        this plan."""
        if self.data.data_ptr() != captured.data.data_ptr():
            raise LazyAttnValueError(_capi.ERROR_INVALID_ARGUMENT,
                                     "lazyattn.Plan.load_into: the plan was not made with "
                                     "like=the captured plan")
        captured.data.copy_(self.image, non_blocking=True)

    def valid(self):
        v = ctypes.c_int32()
        _capi.call("plan_valid", self._live("lazyattn.Plan.valid"), ctypes.byref(v))
        return bool(v.value)

    def __repr__(self):
        return "lazyattn.Plan(%s, requests=%d, queries=%d, keys=%d)" % (
            "decode" if self.kind == _capi.PLAN_DECODE else "prefill", self.num_requests,
            self.num_queries, self.num_keys)
