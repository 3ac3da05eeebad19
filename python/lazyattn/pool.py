"""Pool: the position-free K/V store on the GPU, from PyTorch (documents, tails, writes, plans,
and prefill / decode on torch tensors and torch's current stream).

The device memory is torch's: a Pool's K and V are tensors [num_layers, num_pages, num_kv_heads,
page_size, head_dim] (bfloat16, float16, or float8_e4m3fn with per-layer, per-KV-head scales and
a saturation counter), a Plan's packed page tables and its split-KV workspace are tensors too. The
C library (liblazyattn_c.so, through ctypes) keeps the bookkeeping on the host (content keys and
dedupe, pins, LRU eviction under the page budget, stale-handle detection, statistics) and
launches the kernels on pointers it is given. The kernels run through the operators of
lazyattn.ops (torch.library), so torch.compile and CUDA graphs see them.
"""
import ctypes
import uuid

import torch

from . import _capi, _scales, ops
from ._capi import LazyAttnValueError
from ._owned import _Owned, _device_index, _form
from .layout import Document, Tail
from .plan import Destinations, Plan

_DTYPES = {torch.float16: _capi.DTYPE_FLOAT16, torch.bfloat16: _capi.DTYPE_BFLOAT16}
FP8 = torch.float8_e4m3fn
# What an fp8 pool's writes, queries and outputs take (chosen per call).
_FP8_INPUTS = (torch.bfloat16, torch.float16)


class Pool(_Owned):
    """K/V pools [num_layers, num_pages, num_kv_heads, page_size, head_dim] of `dtype` on a CUDA
    device (torch tensors `k`, `v`), with the library's page bookkeeping: documents keyed by
    content and deduplicated, pins, eviction of unpinned documents when the num_pages budget
    runs out, tails, stale-handle detection. `rope` is the default for writes and plans.
    `eviction`: "lru" (the least recently used document goes first) or "segmented_lru" (a
    document asked for again is protected from the ones used once; capi/lazyattn_c.h).

    dtype torch.float8_e4m3fn: an fp8 pool. K and V are stored as e4m3(x / scale) with one scale
    per layer and KV head, `k_scale` and `v_scale` (each a float for all, or [num_layers,
    num_kv_heads]; default 1; finite and positive); writes take bfloat16 or float16 tokens and
    quantize them, prefill and decode take bfloat16 or float16 queries and return outputs of
    their dtype. `scales` is the scales' device copy, float32 [2, num_layers, num_kv_heads] (K's,
    then V's); fp8_saturated() reads how many written values saturated."""

    _DESTROY = "pool_destroy"

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size=16,
                 dtype=torch.bfloat16, device=None, rope=None, eviction="lru", k_scale=None,
                 v_scale=None):
        where = "lazyattn.Pool"
        fp8 = dtype == FP8
        if dtype not in _DTYPES and not fp8:
            raise ValueError("%s: dtype %s, expected torch.bfloat16, torch.float16 or "
                             "torch.float8_e4m3fn" % (where, dtype))
        if not isinstance(eviction, str) or eviction not in _capi.EVICTIONS:
            raise ValueError("lazyattn.Pool: eviction %r, expected one of %s"
                             % (eviction, ", ".join(map(repr, _capi.EVICTIONS))))
        if not fp8 and (k_scale is not None or v_scale is not None):
            raise ValueError("%s: %s given for a %s pool, expected scales only with "
                             "dtype=torch.float8_e4m3fn" % (
                                 where, "k_scale" if k_scale is not None else "v_scale", dtype))
        if fp8:
            # Checked here, before the library is called, so a bad one is named with its layer
            # and KV head and nothing is created.
            ks = _scales.per_head(where, "k_scale", k_scale, int(num_layers), int(num_kv_heads))
            vs = _scales.per_head(where, "v_scale", v_scale, int(num_layers), int(num_kv_heads))
        self.eviction = eviction
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.page_size, self.dtype, self.num_pages = page_size, dtype, num_pages
        self.is_fp8 = fp8
        self.device = _device_index(device)
        self.device_obj = torch.device("cuda", self.device)
        self.rope = rope
        self.scales = self.saturated = self.k_scale = self.v_scale = None
        self._h = None
        h = ctypes.c_void_p()
        if fp8:
            floats = ctypes.c_float * len(ks)
            _capi.call("pool_create_fp8", int(num_layers), int(num_kv_heads), int(head_dim),
                       int(page_size), int(num_pages), self.device, _capi.EVICTIONS[eviction],
                       floats(*ks), floats(*vs), ctypes.byref(h))
        else:
            _capi.call("pool_create_with_eviction", int(num_layers), int(num_kv_heads),
                       int(head_dim), int(page_size), _DTYPES[dtype], int(num_pages),
                       self.device, _capi.EVICTIONS[eviction], ctypes.byref(h))
        self._h, self._open = h, True
        shape = (num_layers, num_pages, num_kv_heads, page_size, head_dim)
        # Zero-filled: slots no token has been written to hold zeros, not garbage. (An fp8 pool's
        # zeros are allocated as bytes: code 0 is +0.)
        if fp8:
            self.k = torch.zeros(shape, dtype=torch.uint8, device=self.device_obj).view(FP8)
            self.v = torch.zeros(shape, dtype=torch.uint8, device=self.device_obj).view(FP8)
            # The library's copy of the scales (what its kernels are meant to read), to the device.
            n = 2 * len(ks)
            got = (ctypes.c_float * n)()
            _capi.call("pool_scales", h, got, n)
            host = torch.tensor(list(got), dtype=torch.float32).view(2, num_layers, num_kv_heads)
            self.k_scale, self.v_scale = host[0], host[1]
            self.scales = host.to(self.device_obj)
            # lazyattn_write_fp8's counter (a uint64 there; int64 bytes here).
            self.saturated = torch.zeros(1, dtype=torch.int64, device=self.device_obj)
        else:
            self.k = torch.zeros(shape, dtype=dtype, device=self.device_obj)
            self.v = torch.zeros(shape, dtype=dtype, device=self.device_obj)

    def close(self):
        """Frees the bookkeeping and drops the K/V tensors; the pool's plans stop working."""
        super().close()
        self.k = self.v = self.scales = self.saturated = None

    def fp8_saturated(self, reset=False):
        """How many values the fp8 pool's writes saturated since it was made (or last reset):
        those whose |x / scale| reached 464, stored as +-448 (raise the scale of their layer and
        KV head). Waits for the writes queued on torch's current stream (a host
        synchronisation). 0 for a 16-bit pool."""
        self._check_open("lazyattn.Pool.fp8_saturated")
        if self.saturated is None:
            return 0
        n = int(self.saturated.item())
        if reset:
            self.saturated.zero_()
        return n

    def __repr__(self):
        return "lazyattn.Pool(layers=%d, kv_heads=%d, head_dim=%d, pages=%d x %d, %s, %s)" % (
            self.num_layers, self.num_kv_heads, self.head_dim, self.num_pages, self.page_size,
            self.dtype, self.eviction)

    @property
    def input_dtypes(self):
        """The dtypes the pool's writes and kernels take: its own, or an fp8 pool's bfloat16
        and float16."""
        return _FP8_INPUTS if self.is_fp8 else (self.dtype,)

    def stats(self):
        s = _capi.PoolStats()
        _capi.call("pool_stats_get", self._live("lazyattn.Pool.stats"), ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in _capi.PoolStats._fields_}

    def fingerprint(self):
        """A 64-bit hash of everything that decides what the bookkeeping does next (documents,
        tails, pins, use clock, free lists, statistics): pools given the same calls in the same
        order have equal ones (tensor-parallel ranks compare them)."""
        out = ctypes.c_uint64()
        _capi.call("pool_fingerprint", self._live("lazyattn.Pool.fingerprint"), ctypes.byref(out))
        return out.value

    def _rope(self, rope, where, needed=True):
        rope = rope if rope is not None else self.rope
        if rope is None and needed:
            raise ValueError("%s: no rope given and the pool has none, expected a lazyattn.Rope"
                             % where)
        if rope is not None:
            rope._live(where)
            if rope.device != self.device:
                raise ValueError("%s: the rope is on cuda:%d, expected the pool's cuda:%d"
                                 % (where, rope.device, self.device))
        return rope

    # ---- tensors -----------------------------------------------------------------------------

    def _tensor(self, where, name, x):
        """x: a contiguous tensor on the pool's device of one of input_dtypes."""
        if not isinstance(x, torch.Tensor):
            raise TypeError("%s: %s of type %s, expected a torch.Tensor"
                            % (where, name, type(x).__name__))
        if x.device.type != "cuda" or x.device.index != self.device:
            raise ValueError("%s: %s on %s, expected cuda:%d (the pool's device)"
                             % (where, name, x.device, self.device))
        if x.dtype not in self.input_dtypes:
            raise ValueError("%s: %s dtype %s, expected %s" % (
                where, name, x.dtype, self.dtype if not self.is_fp8 else
                "torch.bfloat16 or torch.float16 (an fp8 pool's writes quantize them; its "
                "kernels take and return them)"))
        if not x.is_contiguous():
            raise ValueError("%s: %s of shape %s is not contiguous (strides %s), expected a "
                             "contiguous tensor (call .contiguous())"
                             % (where, name, tuple(x.shape), x.stride()))

    def _tokens(self, where, name, x, layers):
        """x checked as [layers, n, kv_heads, head_dim] ([n, kv_heads, head_dim] when
        layers == 1 and x is 3-d); returned 4-d."""
        self._tensor(where, name, x)
        if x.dim() == 3 and layers == 1:
            x = x.unsqueeze(0)
        if (x.dim() != 4 or x.shape[0] != layers or x.shape[2] != self.num_kv_heads
                or x.shape[3] != self.head_dim):
            raise ValueError("%s: %s of shape %s, expected [%d layers, tokens, kv_heads %d, "
                             "head_dim %d]" % (where, name, tuple(x.shape), layers,
                                               self.num_kv_heads, self.head_dim))
        return x

    def _pair(self, where, k, v, layers):
        k, v = self._tokens(where, "k", k, layers), self._tokens(where, "v", v, layers)
        if k.shape != v.shape:
            raise ValueError("%s: k %s and v %s, expected the same shape"
                             % (where, tuple(k.shape), tuple(v.shape)))
        if k.dtype != v.dtype:  # (an fp8 pool takes either 16-bit type, one per write)
            raise ValueError("%s: k of dtype %s and v of dtype %s, expected the same dtype"
                             % (where, k.dtype, v.dtype))
        return k, v

    # ---- documents ---------------------------------------------------------------------------

    def key_of(self, tokens=None, key=None):
        """The 128-bit content key (hi, lo): of token ids (lazyattn's FNV-1a 128, as the C++
        DocKey::from_tokens), of an int key or an (hi, lo) pair, or a fresh random one."""
        if tokens is not None:
            t = torch.as_tensor(tokens, dtype=torch.int32).reshape(-1).contiguous().cpu()
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

    def find(self, tokens=None, key=None, form="local", pin=True):
        """The stored document under the key (of `tokens`, or `key`) in `form`, pinned when pin,
        or None. Counts a hit or a miss in stats()."""
        hi, lo = self.key_of(tokens, key)
        h, found = ctypes.c_uint64(), ctypes.c_int32()
        if form not in ("raw", "local"):
            raise ValueError("lazyattn.Pool.find: form %r, expected 'raw' or 'local'" % (form,))
        _capi.call("doc_find", self._live("lazyattn.Pool.find"), hi, lo, _form(form),
                   1 if pin else 0, ctypes.byref(h), ctypes.byref(found))
        if not found.value:
            return None
        doc = Document(self, h.value, 0, form, (hi, lo))
        doc.length = doc.info()["length"]
        return doc

    def allocate(self, length, form="local", tokens=None, key=None):
        """Reserves pages for a document (pinned). Returns (Document, inserted); inserted is
        False when (key, form) was already stored: nothing needs writing then."""
        hi, lo = self.key_of(tokens, key)
        h, ins = ctypes.c_uint64(), ctypes.c_int32()
        _capi.call("doc_allocate", self._live("lazyattn.Pool.allocate"), hi, lo, _form(form),
                   int(length), ctypes.byref(h), ctypes.byref(ins))
        return Document(self, h.value, int(length), form, (hi, lo)), bool(ins.value)

    def commit(self, doc):
        _capi.call("doc_commit", self._live("lazyattn.Pool.commit"), doc.handle)

    def insert(self, k, v, tokens=None, key=None, form="local", k_rotated=False, rope=None,
               pin=True):
        """Stores a document from k, v [num_layers, n, kv_heads, head_dim] (or [n, kv_heads,
        head_dim] for a one-layer pool), as a model produced them. form 'local' stores K
        rotated at the document's own positions 0..n-1: pass k_rotated=True when K comes from a
        model's forward at those positions (copied as given), or K before RoPE (rotated on the
        way with the rope). 'raw' stores K before RoPE as given. The key (of token ids, an int
        or (hi, lo)) dedupes; neither gives a fresh key. The document stays pinned unless
        pin=False. On failure nothing is stored."""
        where = "lazyattn.Pool.insert"
        k, v = self._pair(where, k, v, self.num_layers)
        n = k.shape[1]
        doc, inserted = self.allocate(n, form, tokens, key)
        if inserted:
            try:
                dst = self.destinations([(doc, 0, n)], rotate=form == "local" and not k_rotated,
                                        rope=rope)
                for layer in range(self.num_layers):
                    self.write(dst, layer, k[layer], v[layer])
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
        _capi.call("tail_create", self._live("lazyattn.Pool.create_tail"), _form(form),
                   ctypes.byref(h))
        return Tail(self, h.value, form)

    def reserve(self, tail, n):
        """Extends a tail by n tokens (evicting unpinned documents if pages run out); returns
        the index of the first new one."""
        first = ctypes.c_int64()
        _capi.call("tail_reserve", self._live("lazyattn.Pool.reserve"), tail.handle, int(n),
                   ctypes.byref(first))
        return first.value

    def append(self, tail, k, v, k_rotated=None, rope=None):
        """Appends tokens to a tail from k, v [num_layers, n, kv_heads, head_dim] (or [n, ...]
        for a one-layer pool): reserve, then every layer written. A local tail rotates K on the
        way unless k_rotated; an absolute tail takes K as the model rotated it; raw copies."""
        where = "lazyattn.Pool.append"
        k, v = self._pair(where, k, v, self.num_layers)
        n = k.shape[1]
        if k_rotated is None:
            k_rotated = tail.form == "absolute"
        if (tail.form == "absolute") != bool(k_rotated) and tail.form != "local":
            raise ValueError("%s: k_rotated=%s for a %s tail, expected %s (an absolute tail holds "
                             "K rotated at its logical positions, a raw one K before RoPE)"
                             % (where, k_rotated, tail.form, tail.form == "absolute"))
        first = self.reserve(tail, n)
        dst = self.destinations([(tail, first, n)], rotate=tail.form == "local" and not k_rotated,
                                rope=rope)
        for layer in range(self.num_layers):
            self.write(dst, layer, k[layer], v[layer])
        return first

    # ---- writes ------------------------------------------------------------------------------

    def destinations(self, items, rotate=False, rope=None):
        """Where tokens go: items are (Document or Tail, first, count); the tokens of all
        items, in order, are the rows the writes read. rotate: K arrives before RoPE and is
        rotated into local form at each token's index (local documents and tails only)."""
        where = "lazyattn.Pool.destinations"
        h = self._live(where)
        n = len(items)
        kinds = (ctypes.c_int32 * max(n, 1))()
        handles = (ctypes.c_uint64 * max(n, 1))()
        first = (ctypes.c_int64 * max(n, 1))()
        count = (ctypes.c_int64 * max(n, 1))()
        total = 0
        for i, (obj, f, c) in enumerate(items):
            if getattr(obj, "pool", None) is not self:
                raise ValueError("%s: item %d (%r) belongs to another pool" % (where, i, obj))
            kinds[i], handles[i], first[i], count[i] = obj.kind, obj.handle, int(f), int(c)
            total += int(c)
        flags = _capi.WRITE_ROTATE if rotate else 0
        rope = self._rope(rope, where, needed=rotate)
        size = ctypes.c_int64()
        _capi.call("destinations_bytes", total, flags, ctypes.byref(size))
        host = torch.empty(max(size.value, 8), dtype=torch.uint8, pin_memory=True)
        got = ctypes.c_int64()
        _capi.call("destinations", h, n, kinds, handles, first, count, flags,
                   ctypes.c_void_p(host.data_ptr()), host.numel(), ctypes.byref(got))
        data = host.to(self.device_obj, non_blocking=True)
        meta = torch.tensor([h.value, rope._h.value if rope is not None else 0],
                            dtype=torch.int64)
        return Destinations(self, data, got.value, rotate, rope, meta)

    def write(self, dst, layer, k, v):
        """Writes one layer's tokens k, v [dst.num_tokens, kv_heads, head_dim] to `dst`."""
        where = "lazyattn.Pool.write"
        if not isinstance(dst, Destinations) or dst.pool is not self:
            raise ValueError("%s: dst is not a Destinations of this pool" % where)
        for name, x in (("k", k), ("v", v)):
            self._tensor(where, name, x)
            if tuple(x.shape) != (dst.num_tokens, self.num_kv_heads, self.head_dim):
                raise ValueError("%s: %s of shape %s, expected [%d tokens, kv_heads %d, head_dim "
                                 "%d]" % (where, name, tuple(x.shape), dst.num_tokens,
                                          self.num_kv_heads, self.head_dim))
        if k.dtype != v.dtype:
            raise ValueError("%s: k of dtype %s and v of dtype %s, expected the same dtype"
                             % (where, k.dtype, v.dtype))
        if not 0 <= int(layer) < self.num_layers:
            raise ValueError("%s: layer %d, expected in [0, %d)" % (where, layer, self.num_layers))
        self._check_open(where)
        flags = _capi.WRITE_ROTATE if dst.rotate else 0
        if self.is_fp8:
            ops.call("write_fp8", self.k, self.v, self.scales, self.saturated, k, v, dst.data,
                     dst.meta, int(layer), flags)
        else:
            ops.call("write", self.k, self.v, k, v, dst.data, dst.meta, int(layer), flags)

    # ---- plans and kernels -------------------------------------------------------------------

    def _segments(self, layouts, where):
        segs, indptr = [], [0]
        for b, layout in enumerate(layouts):
            tails = 0
            for j, item in enumerate(layout):
                if len(item) not in (2, 3):
                    raise ValueError("%s: request %d item %d %r, expected (document or tail, "
                                     "start) or (document, start, length)" % (where, b, j, item))
                obj, start = item[0], int(item[1])
                if not isinstance(obj, (Document, Tail)):
                    raise TypeError("%s: request %d item %d is a %s, expected a lazyattn "
                                    "Document or Tail" % (where, b, j, type(obj).__name__))
                if obj.pool is not self:
                    raise ValueError("%s: request %d item %d (%r) belongs to another pool, "
                                     "expected one of this pool's" % (where, b, j, obj))
                if isinstance(obj, Tail):
                    tails += 1
                    length = obj.length
                else:
                    length = int(item[2]) if len(item) == 3 else obj.length
                segs.append(_capi.Segment(obj.kind, 0, obj.handle, length, start))
            if tails != 1:
                raise ValueError("%s: request %d has %d tails, expected exactly one"
                                 % (where, b, tails))
            indptr.append(len(segs))
        return segs, indptr

    def plan(self, layouts, kind="decode", num_queries=None, num_qo_heads=None, rope=None,
             forced_splits=0, kv_splits=0, headroom_tokens=0, like=None):
        """A batch plan: one layout per request. kind 'decode' (each request's query is its
        tail's last token) or 'prefill' (the last num_queries[b] tokens of tail b, an int for
        all; default the whole tail). num_qo_heads: of the layers it serves (default
        kv_heads). headroom_tokens / like: plans of later decode steps that keep a captured
        CUDA graph's layout (see docs/07-python.md)."""
        where = "lazyattn.Pool.plan"
        h = self._live(where)
        if kind not in ("decode", "prefill"):
            raise ValueError("%s: kind %r, expected 'decode' or 'prefill'" % (where, kind))
        rope = self._rope(rope, where)
        layouts = list(layouts)
        if not layouts:
            raise ValueError("%s: no layouts, expected one per request" % where)
        segs, indptr = self._segments(layouts, where)
        nq = None
        if kind == "prefill":
            if num_queries is None:
                num_queries = [next(o for o, *_ in lay if isinstance(o, Tail)).length
                               for lay in layouts]
            elif isinstance(num_queries, int):
                num_queries = [num_queries] * len(layouts)
            if len(num_queries) != len(layouts):
                raise ValueError("%s: %d num_queries for %d requests" % (where, len(num_queries),
                                                                         len(layouts)))
            nq = (ctypes.c_int32 * len(layouts))(*[int(x) for x in num_queries])
        elif num_queries is not None:
            raise ValueError("%s: num_queries given for a decode plan (one query per request)"
                             % where)
        if like is not None and (not isinstance(like, Plan) or like.pool is not self):
            raise ValueError("%s: like is not a Plan of this pool" % where)
        opts = _capi.PlanOptions(
            _capi.PLAN_DECODE if kind == "decode" else _capi.PLAN_PREFILL,
            int(num_qo_heads or self.num_kv_heads), int(forced_splits), int(kv_splits),
            int(headroom_tokens), like._live(where) if like is not None else None)
        arr = (_capi.Segment * max(len(segs), 1))(*segs)
        ip = (ctypes.c_int32 * len(indptr))(*indptr)
        out = ctypes.c_void_p()
        _capi.call("plan_create", h, rope._h, arr, ip, nq, len(layouts), ctypes.byref(opts),
                   ctypes.byref(out))
        return Plan(self, out, rope,
                    _capi.PLAN_DECODE if kind == "decode" else _capi.PLAN_PREFILL, like)

    def _attend(self, op, where, plan, q, layer, softmax_scale, apply_rope, query_rotated,
                inputs_scaled):
        if not isinstance(plan, Plan) or plan.pool is not self:
            raise ValueError("%s: the plan belongs to another pool, expected one of this pool's"
                             % where)
        self._check_open(where)
        plan._check_open(where)
        self._tensor(where, "q", q)
        if q.dim() != 3 or q.shape[0] != plan.num_queries or q.shape[2] != self.head_dim:
            raise ValueError("%s: q of shape %s, expected [%d (the plan's queries), heads, %d]"
                             % (where, tuple(q.shape), plan.num_queries, self.head_dim))
        flags = ((_capi.APPLY_ROPE if apply_rope else 0)
                 | (_capi.QUERY_ROTATED if query_rotated else 0)
                 | (_capi.INPUTS_SCALED if inputs_scaled else 0))
        if self.is_fp8:
            return ops.call(op + "_fp8", q, self.k, self.v, self.scales, plan.data,
                            plan.workspace, plan.meta, int(layer), float(softmax_scale or 0.0),
                            flags)
        return ops.call(op, q, self.k, self.v, plan.data, plan.workspace, plan.meta, int(layer),
                        float(softmax_scale or 0.0), flags)

    def prefill(self, plan, q, layer=0, softmax_scale=None, apply_rope=True, query_rotated=False,
                inputs_scaled=False):
        """Attention of a prefill plan's queries q [plan.num_queries, num_qo_heads, head_dim]
        (un-rotated, or rotated at their own positions with query_rotated) over their
        requests' documents and, causally, their tails, in `layer`. Returns (o, lse): o like q,
        lse [num_queries, num_qo_heads] float32 natural-log log-sum-exp. The queries' own K/V
        must be written first. Runs on torch's current stream; no host synchronisation. q is of
        the pool's dtype, or bfloat16 or float16 over an fp8 pool (lazyattn::prefill_fp8)."""
        return self._attend("prefill", "lazyattn.Pool.prefill", plan, q, layer, softmax_scale,
                            apply_rope, query_rotated, inputs_scaled)

    def decode(self, plan, q, layer=0, softmax_scale=None, apply_rope=True, query_rotated=False,
               inputs_scaled=False):
        """One decode step of a decode plan: q [num_requests, num_qo_heads, head_dim]; as
        prefill otherwise (over an fp8 pool: local-form and absolute segments only)."""
        return self._attend("decode", "lazyattn.Pool.decode", plan, q, layer, softmax_scale,
                            apply_rope, query_rotated, inputs_scaled)
