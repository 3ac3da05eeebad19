"""lazyattn from PyTorch: the CUDA decode with deferred RoPE over a position-free paged KV pool,
called through the C ABI (capi/lazyattn_c.h) with ctypes, on torch tensors and torch's current
CUDA stream. See docs/07-python.md.

    import torch, lazyattn
    rope = lazyattn.Rope({"head_dim": 128, "rope_theta": 500000.0})      # a config.json dict
    pool = lazyattn.Pool(num_layers=1, num_kv_heads=8, head_dim=128, num_pages=4096)
    doc = pool.insert_document(k, v, rope=rope, form="local")  # k, v [tokens, 8, 128] bf16, cuda
    tail = pool.create_tail("local")
    pool.append_tail(tail, k_tail, v_tail, rope=rope)
    plan = pool.plan([lazyattn.back_to_back([doc], tail)], rope=rope)
    o, lse = pool.decode(plan, q, rope=rope)                        # q [1, 32, 128]
"""
import ctypes
import json
import os
import uuid

import torch

from . import _capi
from ._capi import LazyAttnError, LazyAttnValueError

__all__ = ["Rope", "Pool", "Document", "Tail", "Plan", "LazyAttnError", "LazyAttnValueError",
           "back_to_back", "parallel", "decode", "library_path"]

_DTYPES = {torch.float16: _capi.DTYPE_FLOAT16, torch.bfloat16: _capi.DTYPE_BFLOAT16}
_FORMS = {"raw": _capi.FORM_RAW, "local": _capi.FORM_LOCAL}


def library_path():
    """Where liblazyattn_c.so was loaded from."""
    return _capi.lib().path


def _device_index(device):
    if device is None:
        return torch.cuda.current_device()
    d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if d.type != "cuda":
        raise ValueError("lazyattn: device %s, expected a CUDA device" % d)
    return d.index if d.index is not None else torch.cuda.current_device()


def _stream(device):
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _form(form):
    if form not in _FORMS:
        raise ValueError("lazyattn: form %r, expected 'raw' or 'local'" % (form,))
    return _FORMS[form]


def _handle(h):
    return h._h if h is not None else None


class _Owned:
    """An object that owns a library handle `_h`, destroyed by lazyattn_<_DESTROY> on close() or
    when the object is collected."""

    _DESTROY = None

    def close(self):
        if getattr(self, "_h", None):
            _capi.call(self._DESTROY, self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Rope(_Owned):
    """A RoPE policy from a Hugging Face config: a dict (config.json's contents, or a
    transformers config's to_dict()), a JSON string, or a path to a config.json. Its frequency
    tables live on `device` (default: the current CUDA device)."""

    _DESTROY = "rope_destroy"

    def __init__(self, config, device=None):
        if hasattr(config, "to_dict"):
            config = config.to_dict()
        if isinstance(config, dict):
            text = json.dumps(config)
        elif isinstance(config, (str, bytes)):
            text = config.decode() if isinstance(config, bytes) else config
            if not text.lstrip().startswith("{") and os.path.isfile(text):
                with open(text) as f:
                    text = f.read()
        else:
            raise TypeError("lazyattn.Rope: config of type %s, expected a dict, a JSON string "
                            "or a path" % type(config).__name__)
        self.device = _device_index(device)
        self._h = None
        h = ctypes.c_void_p()
        with torch.cuda.device(self.device):
            _capi.call("rope_create_json", text.encode(), ctypes.byref(h))
        self._h = h
        hd, rd, dep = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
        _capi.call("rope_info", self._h, ctypes.byref(hd), ctypes.byref(rd), ctypes.byref(dep))
        self.head_dim, self.rotary_dim = hd.value, rd.value
        self.depends_on_length = bool(dep.value)


    def __repr__(self):
        return "lazyattn.Rope(head_dim=%d, rotary_dim=%d%s)" % (
            self.head_dim, self.rotary_dim, ", length-dependent" if self.depends_on_length else "")


class Document:
    """A stored document: `length` tokens in `form` ('raw' or 'local'), named by a handle that
    goes stale when the document is evicted or erased."""

    def __init__(self, pool, handle, length, form):
        self.pool, self.handle, self.length, self.form = pool, handle, length, form

    kind = _capi.SEGMENT_DOCUMENT

    def pin(self):
        _capi.call("doc_pin", self.pool._h, self.handle)

    def unpin(self):
        _capi.call("doc_unpin", self.pool._h, self.handle)

    def erase(self):
        _capi.call("doc_erase", self.pool._h, self.handle)

    def __repr__(self):
        return "lazyattn.Document(length=%d, form=%s)" % (self.length, self.form)


class Tail:
    """A request's private tokens (question, then generated ones)."""

    kind = _capi.SEGMENT_TAIL

    def __init__(self, pool, handle, form):
        self.pool, self.handle, self.form = pool, handle, form

    @property
    def length(self):
        n = ctypes.c_int64()
        _capi.call("tail_info", self.pool._h, self.handle, ctypes.byref(n), None)
        return n.value

    def release(self):
        _capi.call("tail_release", self.pool._h, self.handle)

    def __repr__(self):
        return "lazyattn.Tail(length=%d, form=%s)" % (self.length, self.form)


def back_to_back(docs, tail, first_start=0):
    """Block-Attention layout: documents back to back from first_start, then the tail."""
    segs, pos = [], first_start
    for d in docs:
        segs.append((d, pos))
        pos += d.length
    segs.append((tail, pos))
    return segs


def parallel(docs, tail, start=0):
    """APE-style layout: every document at `start`, the tail after the longest."""
    longest = max([d.length for d in docs] or [0])
    return [(d, start) for d in docs] + [(tail, start + longest)]


class Plan(_Owned):
    """A decode batch over a pool (see Pool.plan). Valid while its documents stay stored and its
    tails keep their length."""

    _DESTROY = "plan_destroy"

    def __init__(self, pool, h, rope):
        self.pool, self._h, self.rope = pool, h, rope
        nr, nk, nw = ctypes.c_int32(), ctypes.c_int64(), ctypes.c_int32()
        _capi.call("plan_info", h, ctypes.byref(nr), ctypes.byref(nk), ctypes.byref(nw))
        self.num_requests, self.num_keys, self.num_work = nr.value, nk.value, nw.value


class Pool(_Owned):
    """K/V pools [num_layers, num_pages, num_kv_heads, page_size, head_dim] of `dtype` on a CUDA
    device, with page bookkeeping (documents keyed by content, pins, LRU eviction, tails)."""

    _DESTROY = "pool_destroy"

    def __init__(self, num_layers, num_kv_heads, head_dim, page_size=16, dtype=torch.bfloat16,
                 num_pages=1024, device=None):
        if dtype not in _DTYPES:
            raise ValueError("lazyattn.Pool: dtype %s, expected torch.bfloat16 or torch.float16"
                             % dtype)
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.page_size, self.dtype, self.num_pages = page_size, dtype, num_pages
        self.device = _device_index(device)
        self._h = None
        h = ctypes.c_void_p()
        with torch.cuda.device(self.device):
            _capi.call("pool_create", num_layers, num_kv_heads, head_dim, page_size,
                       _DTYPES[dtype], num_pages, ctypes.byref(h))
        self._h = h


    def stats(self):
        s = _capi.PoolStats()
        _capi.call("pool_stats_get", self._h, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in _capi.PoolStats._fields_}

    # ---- tensors -----------------------------------------------------------------------------

    def _tensor(self, where, name, x):
        if not isinstance(x, torch.Tensor):
            raise TypeError("%s: %s of type %s, expected a torch.Tensor"
                            % (where, name, type(x).__name__))
        if x.device.type != "cuda" or x.device.index != self.device:
            raise ValueError("%s: %s on %s, expected cuda:%d (the pool's device)"
                             % (where, name, x.device, self.device))
        if x.dtype != self.dtype:
            raise ValueError("%s: %s dtype %s, expected the pool's %s"
                             % (where, name, x.dtype, self.dtype))

    def _tokens(self, where, name, x):
        """x as a contiguous [num_layers, n, kv_heads, head_dim] tensor; [n, kv_heads, head_dim]
        is accepted when the pool has one layer."""
        self._tensor(where, name, x)
        if x.dim() == 3 and self.num_layers == 1:
            x = x.unsqueeze(0)
        if (x.dim() != 4 or x.shape[0] != self.num_layers or x.shape[2] != self.num_kv_heads
                or x.shape[3] != self.head_dim):
            raise ValueError("%s: %s of shape %s, expected [num_layers %d, tokens, kv_heads %d, "
                             "head_dim %d]%s" % (where, name, tuple(x.shape), self.num_layers,
                                                 self.num_kv_heads, self.head_dim,
                                                 " or [tokens, kv_heads, head_dim]"
                                                 if self.num_layers == 1 else ""))
        return x.contiguous()

    def _layer_tokens(self, where, name, x):
        """x as a contiguous [n, kv_heads, head_dim] tensor (one layer's tokens)."""
        self._tensor(where, name, x)
        if x.dim() != 3 or x.shape[1] != self.num_kv_heads or x.shape[2] != self.head_dim:
            raise ValueError("%s: %s of shape %s, expected [tokens, kv_heads %d, head_dim %d]"
                             % (where, name, tuple(x.shape), self.num_kv_heads, self.head_dim))
        return x.contiguous()

    def _pair(self, where, k, v, one_layer):
        f = self._layer_tokens if one_layer else self._tokens
        k, v = f(where, "k", k), f(where, "v", v)
        if k.shape != v.shape:
            raise ValueError("%s: k %s and v %s, expected the same shape"
                             % (where, tuple(k.shape), tuple(v.shape)))
        return k, v

    # ---- documents ---------------------------------------------------------------------------

    def _key(self, key, tokens):
        if tokens is not None:
            t = torch.as_tensor(tokens, dtype=torch.int32).contiguous().cpu()
            hi, lo = ctypes.c_uint64(), ctypes.c_uint64()
            ptr = ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_int32))
            _capi.call("doc_key_from_tokens", ptr, t.numel(), ctypes.byref(hi), ctypes.byref(lo))
            return hi.value, lo.value
        if key is None:
            key = uuid.uuid4().int  # unique: no dedupe
        if isinstance(key, int):
            if not 0 <= key < (1 << 128):
                raise ValueError("lazyattn: key %d, expected a 128-bit unsigned integer" % key)
            return key >> 64, key & ((1 << 64) - 1)
        hi, lo = key
        return int(hi), int(lo)

    def allocate_document(self, length, form="local", key=None, tokens=None):
        """Reserves pages for a document (pinned). Returns (Document, inserted); inserted is
        False when (key, form) was already stored: nothing needs writing then."""
        hi, lo = self._key(key, tokens)
        h, ins = ctypes.c_uint64(), ctypes.c_int32()
        _capi.call("doc_allocate", self._h, hi, lo, _form(form), int(length), ctypes.byref(h),
                   ctypes.byref(ins))
        return Document(self, h.value, int(length), form), bool(ins.value)

    def write_document(self, doc, layer, k, v, rope=None, first=0):
        """Writes one layer's tokens [first, first + n) of a document from k, v
        [n, kv_heads, head_dim]; local form rotates K at the tokens' indices (rope needed)."""
        where = "lazyattn.Pool.write_document"
        k, v = self._pair(where, k, v, one_layer=True)
        _capi.call("doc_write", self._h, _handle(rope), doc.handle, int(layer), int(first),
                   k.shape[0], ctypes.c_void_p(k.data_ptr()), ctypes.c_void_p(v.data_ptr()),
                   _stream(self.device))

    def commit(self, doc):
        _capi.call("doc_commit", self._h, doc.handle)

    def insert_document(self, k, v, rope=None, form="local", key=None, tokens=None, pin=True):
        """Stores a document from k, v [num_layers, n, kv_heads, head_dim] (or [n, kv_heads,
        head_dim] for a one-layer pool), K *before* RoPE as the model's projection gives it.
        form 'local' stores K rotated at the document's own positions 0..n-1 (rotated on the way:
        pass the rope), what a standalone prefill of the document would cache; 'raw' stores K as
        given. The key (a 128-bit int or (hi, lo)), or token ids to hash, dedupes; neither: a
        fresh key. The document stays pinned unless pin=False."""
        where = "lazyattn.Pool.insert_document"
        k, v = self._pair(where, k, v, one_layer=False)
        n = k.shape[1]
        doc, inserted = self.allocate_document(n, form, key, tokens)
        if inserted:
            try:
                for layer in range(self.num_layers):
                    self.write_document(doc, layer, k[layer], v[layer], rope)
                self.commit(doc)
            except BaseException:
                doc.unpin()
                doc.erase()
                raise
        if not pin:
            doc.unpin()
        return doc

    # ---- tails -------------------------------------------------------------------------------

    def create_tail(self, form="local"):
        h = ctypes.c_uint64()
        _capi.call("tail_create", self._h, _form(form), ctypes.byref(h))
        return Tail(self, h.value, form)

    def reserve_tail(self, tail, n):
        """Extends a tail by n tokens; returns the index of the first new one."""
        first = ctypes.c_int64()
        _capi.call("tail_reserve", self._h, tail.handle, int(n), ctypes.byref(first))
        return first.value

    def write_tail(self, tail, layer, k, v, first, rope=None):
        """Writes one layer's reserved tail tokens [first, first + n) from k, v
        [n, kv_heads, head_dim]; local form rotates K at the tokens' indices in the tail."""
        where = "lazyattn.Pool.write_tail"
        k, v = self._pair(where, k, v, one_layer=True)
        _capi.call("tail_write", self._h, _handle(rope), tail.handle, int(layer), int(first),
                   k.shape[0], ctypes.c_void_p(k.data_ptr()), ctypes.c_void_p(v.data_ptr()),
                   _stream(self.device))

    def append_tail(self, tail, k, v, rope=None):
        """Appends tokens to a tail from k, v [num_layers, n, kv_heads, head_dim] (or [n, ...]
        for a one-layer pool): reserve, then every layer written."""
        where = "lazyattn.Pool.append_tail"
        k, v = self._pair(where, k, v, one_layer=False)
        first = self.reserve_tail(tail, k.shape[1])
        for layer in range(self.num_layers):
            self.write_tail(tail, layer, k[layer], v[layer], first, rope)
        return first

    # ---- plans and decode --------------------------------------------------------------------

    def plan(self, layouts, rope=None, forced_splits=0):
        """A decode plan for a batch: layouts[b] is request b's list of segments, each
        (Document or Tail, start) or (Document, start, length) for a prefix; exactly one Tail per
        request, whose last token is the query. Give the rope for dynamic / longrope schedules."""
        segs, indptr = [], [0]
        for b, layout in enumerate(layouts):
            for j, s in enumerate(layout):
                if not isinstance(s, (tuple, list)) or len(s) not in (2, 3):
                    raise ValueError("lazyattn.Pool.plan: request %d segment %d is %r, expected "
                                     "(document or tail, start[, length])" % (b, j, s))
                obj, start = s[0], int(s[1])
                if not isinstance(obj, (Document, Tail)) or obj.pool is not self:
                    raise ValueError("lazyattn.Pool.plan: request %d segment %d holds %r, "
                                     "expected a Document or Tail of this pool" % (b, j, obj))
                length = int(s[2]) if len(s) == 3 else obj.length
                segs.append(_capi.Segment(obj.kind, 0, obj.handle, length, start))
            indptr.append(len(segs))
        arr = (_capi.Segment * max(1, len(segs)))(*segs)
        ind = (ctypes.c_int32 * len(indptr))(*indptr)
        h = ctypes.c_void_p()
        _capi.call("plan_create", self._h, _handle(rope), arr, ind, len(layouts),
                   int(forced_splits), _stream(self.device), ctypes.byref(h))
        return Plan(self, h, rope)

    def decode(self, plan, q, rope=None, layer=0, softmax_scale=0.0, apply_rope=True, out=None,
               lse=None, return_lse=True):
        """One decode step: q [num_requests, num_qo_heads, head_dim] (un-rotated, the pool's
        dtype, on its device) -> (o, lse): o like q, lse [num_requests, num_qo_heads] float32
        (natural log). apply_rope=False: the RoPE-off baseline on pre-rotated K and q."""
        where = "lazyattn.Pool.decode"
        if not isinstance(q, torch.Tensor) or q.dim() != 3:
            raise ValueError("%s: q of shape %s, expected [num_requests, num_qo_heads, head_dim]"
                             % (where, tuple(getattr(q, "shape", ()))))
        if q.device.type != "cuda" or q.device.index != self.device:
            raise ValueError("%s: q on %s, expected cuda:%d" % (where, q.device, self.device))
        if q.dtype != self.dtype:
            raise ValueError("%s: q dtype %s, expected the pool's %s" % (where, q.dtype,
                                                                         self.dtype))
        if q.shape[0] != plan.num_requests or q.shape[2] != self.head_dim:
            raise ValueError("%s: q of shape %s, expected [%d (the plan's requests), heads, %d]"
                             % (where, tuple(q.shape), plan.num_requests, self.head_dim))
        if plan.pool is not self:
            raise ValueError("%s: the plan belongs to another pool" % where)
        q = q.contiguous()
        if out is None:
            out = torch.empty_like(q)
        elif (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device
              or not out.is_contiguous()):
            raise ValueError("%s: out %s %s, expected a contiguous %s %s tensor"
                             % (where, tuple(out.shape), out.dtype, tuple(q.shape), q.dtype))
        if lse is None and return_lse:
            lse = torch.empty(q.shape[0], q.shape[1], device=q.device, dtype=torch.float32)
        elif lse is not None and (lse.shape != q.shape[:2] or lse.dtype != torch.float32
                                  or lse.device != q.device or not lse.is_contiguous()):
            raise ValueError("%s: lse %s %s, expected a contiguous float32 tensor of shape %s"
                             % (where, tuple(lse.shape), lse.dtype, tuple(q.shape[:2])))
        _capi.call("decode", self._h, plan._h, _handle(rope), int(layer), q.shape[0], q.shape[1],
                   float(softmax_scale), 1 if apply_rope else 0, ctypes.c_void_p(q.data_ptr()),
                   ctypes.c_void_p(out.data_ptr()),
                   ctypes.c_void_p(lse.data_ptr()) if lse is not None else None,
                   _stream(self.device))
        return out, lse


def decode(pool, plan, q, rope=None, **kwargs):
    """pool.decode(plan, q, rope, ...)."""
    return pool.decode(plan, q, rope, **kwargs)
