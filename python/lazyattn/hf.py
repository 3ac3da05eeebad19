"""lazyattn under a Hugging Face transformers model, through transformers' own extension points:
an attention function registered as "lazyattn" in the AttentionInterface, and a Cache subclass.

    import lazyattn.hf as lh
    store = lh.DocumentStore(model, num_pages=8192)          # the pool, per model; sets "lazyattn"
    docs = [store.add(ids) for ids in documents]             # each encoded once, at 0..len-1
    cache = store.cache([[docs[2], docs[0], docs[2]]])       # one layout per request
    out = model.generate(**cache.inputs(question_ids), past_key_values=cache, max_new_tokens=32)
    cache.close()

A document is encoded by the model's own forward at positions 0..len-1 (lazyattn's prefill over
the document as a tail, causal); its K, rotated by the model, is stored once in local form. A
request's question and generated tokens go to a tail in absolute form (K as the model rotated
it, at the positions the layout gives the tail); the model's query arrives rotated at its own
position, so the kernels apply R(-s_j) per document and nothing to the tail. The question is
prefilled with lazyattn's prefill, every new token decoded with lazyattn's decode. These are
Block-Attention semantics: each document sees only itself, the question sees every document at
its logical positions. transformers' rotation carries the schedule's attention factor (YaRN) on
q and k, and the kernels are told so (inputs_scaled).

An fp8 cache: DocumentStore(model, num_pages, dtype=torch.float8_e4m3fn, k_scale=..., v_scale=...)
stores every K/V the model writes (documents, questions, generated tokens) as e4m3(x / scale),
one scale per layer and KV head; the model's bfloat16 or float16 queries attend over the
dequantized values, and store.fp8_saturated() counts the values that saturated.

Tensor parallelism: a model loaded with transformers' tp_plan (launched with torchrun) gives each
rank its share of the query and KV heads, and DocumentStore(model, ...) then makes a pool of the
rank's KV heads only. Every rank calls add(), cache() and inputs() with the same arguments; the
ranks compare the document keys, layouts, question tokens and their pools' bookkeeping
fingerprints in one small collective per call and agree on every step a rank could fail alone,
so every rank makes the same cache decisions and a failure on one raises RankError on all.
"""
import contextvars
import hashlib
import json

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin

from . import _collective, _scales
from .layout import Document
from .pool import Pool
from .rope import Rope

NAME = "lazyattn"

# The cache whose update() ran last: the attention function of the same layer reads it (the
# attention interface is not given the cache).
_active = contextvars.ContextVar("lazyattn_active_cache", default=None)


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature: query [B, heads, n, head_dim] rotated by the
    model; key/value are what the cache's update returned (unused: the cache holds them)."""
    cache = _active.get()
    if cache is None:
        raise RuntimeError("lazyattn attention: no lazyattn cache is active; call the model with "
                           "past_key_values=store.cache(...) (or a document encode)")
    window = kwargs.get("sliding_window")
    if window is not None:
        raise ValueError("lazyattn attention: sliding_window %s, expected None (lazyattn runs "
                         "full attention only)" % window)
    if dropout:
        raise ValueError("lazyattn attention: dropout %s, expected 0 (inference only)" % dropout)
    return cache._attend(module.layer_idx, query, scaling), None


def register():
    """Registers the attention function under "lazyattn" (idempotent; done on import)."""
    AttentionInterface.register(NAME, _attention)


register()


def _text_config(config):
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def _fingerprint(config):
    text = json.dumps(config.to_dict(), sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "little")


def _local_heads(model, num_qo_heads, num_kv_heads, head_dim, tp_size):
    """(query heads, KV heads) of one tensor-parallel rank: transformers' plan splits q_proj and
    k_proj by output rows, so each rank holds 1/tp_size of either; checked against the rank's
    k_proj where the model has one."""
    if tp_size == 1:
        return num_qo_heads, num_kv_heads
    if num_qo_heads % tp_size or num_kv_heads % tp_size:
        raise ValueError("lazyattn.hf.DocumentStore: %d query heads and %d KV heads over %d "
                         "tensor-parallel ranks, expected both divisible by the ranks"
                         % (num_qo_heads, num_kv_heads, tp_size))
    kv = num_kv_heads // tp_size
    for module in model.modules():
        proj = getattr(module, "k_proj", None)
        if isinstance(proj, torch.nn.Linear):
            w = proj.weight
            rows = (w.to_local() if hasattr(w, "to_local") else w).shape[0]
            if rows != kv * head_dim:
                raise ValueError("lazyattn.hf.DocumentStore: this rank's k_proj has %d output "
                                 "rows, expected %d (%d KV heads / %d ranks x head dim %d): the "
                                 "model is not split by heads as transformers' tensor-parallel "
                                 "plan splits it"
                                 % (rows, kv * head_dim, num_kv_heads, tp_size, head_dim))
            break
    return num_qo_heads // tp_size, kv


def _rank_scales(name, value, num_layers, num_kv_heads, heads):
    """A tensor-parallel rank's share [num_layers, heads[1] - heads[0]] of fp8 scales given for
    the model's num_kv_heads (checked whole first, so a bad one is named by its global head)."""
    if value is None:
        return None
    flat = _scales.per_head("lazyattn.hf.DocumentStore", name, value, num_layers, num_kv_heads)
    return [flat[l * num_kv_heads + heads[0]:l * num_kv_heads + heads[1]]
            for l in range(num_layers)]


class _Layer(CacheLayerMixin):
    """What transformers may ask of a cache's layer (lengths); the K/V live in the pool."""

    is_compileable = False
    is_sliding = False

    def __init__(self, owner):
        super().__init__()
        self.owner = owner
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states):
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        raise RuntimeError("lazyattn: layers are updated through the cache")

    def get_seq_length(self):
        return self.owner.get_seq_length()

    def get_mask_sizes(self, query_length):
        return self.owner.get_seq_length() + query_length, 0

    def get_max_length(self):
        return -1


class _PoolCache(Cache):
    """A transformers Cache whose K/V go to a lazyattn pool (base of the encode and RAG caches)."""

    def __init__(self, store):
        super().__init__(layers=[_Layer(self) for _ in range(store.pool.num_layers)])
        self.store = store
        self.pool = store.pool
        self._plan = None
        self._dst = None
        self._seen = 0
        self._closed = False

    # transformers' cache interface ---------------------------------------------------------------

    def get_seq_length(self, layer_idx=0):
        return self._seen

    def get_query_offset(self, layer_idx=0):
        return self._seen

    def get_mask_sizes(self, query_length, layer_idx=0):
        return self._seen + query_length, 0

    @property
    def is_compileable(self):
        return False

    def reorder_cache(self, beam_idx):
        raise NotImplementedError("lazyattn cache: beam search is not supported (greedy or "
                                  "sampling only)")

    def crop(self, tokens_to_remove):
        raise NotImplementedError("lazyattn cache: crop (assisted decoding) is not supported")

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("lazyattn cache: num_return_sequences > 1 is not supported")

    def batch_select_indices(self, indices):
        raise NotImplementedError("lazyattn cache: batch selection is not supported")

    # the write / attend cycle --------------------------------------------------------------------

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """key_states, value_states [B, kv_heads, n, head_dim], rotated by the model: written to
        the pool (layer 0 first plans the step), returned unchanged."""
        if self._closed:
            raise RuntimeError("lazyattn cache: used after close()")
        if layer_idx == 0:
            self._begin(key_states.shape[0], key_states.shape[2])
        elif self._plan is None:
            raise RuntimeError("lazyattn cache: layer %d updated before layer 0" % layer_idx)
        b, h, n, d = key_states.shape
        k = key_states.transpose(1, 2).reshape(b * n, h, d)
        v = value_states.transpose(1, 2).reshape(b * n, h, d)
        self.pool.write(self._dst, layer_idx, k.contiguous(), v.contiguous())
        _active.set(self)
        if layer_idx == self.pool.num_layers - 1:
            self._seen += n
        return key_states, value_states

    def _attend(self, layer, query, scaling):
        b, hq, n, d = query.shape
        q = query.transpose(1, 2).reshape(b * n, hq, d).contiguous()
        run = self.pool.decode if self._plan.kind == 0 else self.pool.prefill
        o, _ = run(self._plan, q, layer, softmax_scale=scaling, query_rotated=True,
                   inputs_scaled=True)
        return o.view(b, n, hq, d)


class _EncodeCache(_PoolCache):
    """One document's standalone encoding: its tokens attend causally among themselves (a
    prefill over the document as a tail at 0), and each layer's K/V go to the document's pages
    too."""

    def __init__(self, store, doc):
        super().__init__(store)
        self.doc = doc
        self.tail = None

    def _begin(self, batch, n):
        if batch != 1 or n != self.doc.length:
            raise ValueError("lazyattn encode: %d x %d tokens, expected 1 x %d (the document)"
                             % (batch, n, self.doc.length))
        self.tail = self.pool.create_tail("local")
        self.pool.reserve(self.tail, n)
        self._dst = self.pool.destinations([(self.doc, 0, n), (self.tail, 0, n)])
        self._plan = self.pool.plan([[(self.tail, 0)]], kind="prefill", num_queries=n,
                                    num_qo_heads=self.store.num_qo_heads)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        # The same rows twice: once for the document's pages, once for the scratch tail's.
        if layer_idx == 0:
            self._begin(key_states.shape[0], key_states.shape[2])
        b, h, n, d = key_states.shape
        k = key_states.transpose(1, 2).reshape(n, h, d)
        v = value_states.transpose(1, 2).reshape(n, h, d)
        self.pool.write(self._dst, layer_idx, torch.cat([k, k]), torch.cat([v, v]))
        _active.set(self)
        return key_states, value_states

    def close(self):
        if self.tail is not None:
            self.tail.release()
            self.tail = None
        if self._plan is not None:
            self._plan.close()
        self._closed = True


def _resolve(store, requests, question_starts):
    """The requests' documents at their starts and the questions' starts, checked (documents of
    this store, live, starts given for all or none); changes nothing."""
    where = "lazyattn.hf.RagCache"
    if question_starts is not None and len(question_starts) != len(requests):
        raise ValueError("%s: %d question_starts for %d requests, expected one each"
                         % (where, len(question_starts), len(requests)))
    placed_all, starts = [], []
    for b, req in enumerate(requests):
        items = []
        for j, r in enumerate(req):
            doc, start = (r, None) if isinstance(r, Document) else (r[0], r[1])
            store._check_document(doc, "%s: request %d item %d" % (where, b, j))
            items.append((doc, start))
        if all(s is None for _, s in items):
            pos, placed = 0, []
            for doc, _ in items:
                placed.append((doc, pos))
                pos += doc.length
        elif any(s is None for _, s in items):
            raise ValueError("%s: request %d mixes documents with and without starts"
                             % (where, b))
        else:
            placed = [(d, int(s)) for d, s in items]
        end = max([s + d.length for d, s in placed] or [0])
        placed_all.append(placed)
        starts.append(int(question_starts[b]) if question_starts is not None else end)
    return placed_all, starts


class RagCache(_PoolCache):
    """A batch of RAG requests over a DocumentStore, as a transformers Cache for generate().
    Each request is a list of Documents (back to back from position 0) or of (Document, start)
    pairs (any positions, any order, repeats), with its question after them (or at
    question_starts[b]). The questions of one call share a length (input_ids is [B, n])."""

    def __init__(self, store, requests, question_starts=None, _resolved=None):
        super().__init__(store)
        self.layouts, self.tails, self.starts = [], [], []
        self._pinned = []
        # _resolved: DocumentStore.cache's _resolve of the same requests (not done twice).
        placed_all, starts = _resolved or _resolve(store, requests, question_starts)
        try:
            for placed, start in zip(placed_all, starts):
                for d, _ in placed:  # pinned while the cache is in use
                    d.pin()
                    self._pinned.append(d)
                tail = self.pool.create_tail("absolute")
                self.tails.append(tail)
                self.layouts.append(placed + [(tail, start)])
                self.starts.append(start)
        except BaseException:
            self.close()
            raise

    def inputs(self, question_ids):
        """generate()'s inputs for the questions [B, n] (token ids): input_ids, an all-ones
        attention_mask and the position ids the layouts give the questions."""
        g = self.store._group

        def parse():
            ids = torch.as_tensor(question_ids)
            if ids.dim() == 1:
                ids = ids[None]
            if ids.dim() != 2 or ids.shape[0] != len(self.tails):
                raise ValueError("lazyattn.hf.RagCache.inputs: %d questions for %d requests "
                                 "(shape %s), expected [%d, n] token ids"
                                 % (ids.shape[0] if ids.dim() else 0, len(self.tails),
                                    list(ids.shape), len(self.tails)))
            return ids
        ids, error = _collective.attempt(g, parse)
        if g is not None:  # transformers' tensor parallelism needs the same tokens on every rank
            g.exchange("lazyattn.hf.RagCache.inputs", error, [
                ("question token ids", 2,
                 None if error else _collective.digest(list(ids.shape), ids.tolist()))])
        device = self.pool.device_obj
        ids = ids.to(device)
        n = ids.shape[1]
        pos = torch.tensor(self.starts, device=device)[:, None] + self._seen + torch.arange(
            n, device=device)[None]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "position_ids": pos}

    def _begin(self, batch, n):
        if batch != len(self.tails):
            raise ValueError("lazyattn.hf.RagCache: a batch of %d, expected the cache's %d "
                             "requests" % (batch, len(self.tails)))
        firsts = [self.pool.reserve(t, n) for t in self.tails]
        self._dst = self.pool.destinations([(t, f, n) for t, f in zip(self.tails, firsts)])
        if self._plan is not None:
            self._plan.close()
        decode = n == 1 and self._seen > 0
        self._plan = self.pool.plan(self.layouts, kind="decode" if decode else "prefill",
                                    num_queries=None if decode else n,
                                    num_qo_heads=self.store.num_qo_heads)

    def close(self):
        """Releases the tails and unpins the documents (idempotent)."""
        for t in self.tails:
            try:
                t.release()
            except Exception:
                pass
        self.tails = []
        for d in self._pinned:
            try:
                d.unpin()
            except Exception:
                pass
        self._pinned = []
        if self._plan is not None:
            self._plan.close()
            self._plan = None
        self._closed = True


class DocumentStore:
    """lazyattn's pool for one transformers model (its layers, KV heads, head dim, dtype and
    RoPE schedule), with documents keyed by their token ids and the model's config. Sets the
    model's attention implementation to "lazyattn". `eviction`: the pool's policy ("lru" or
    "segmented_lru", lazyattn.Pool). `dtype`: the cache's (the pool's) element type, the
    model's by default; torch.float8_e4m3fn makes an fp8 cache with `k_scale` and `v_scale`
    (a float for every layer and KV head, or [num_hidden_layers, num_key_value_heads]; default
    1) under a bfloat16 or float16 model (lazyattn.Pool)."""

    def __init__(self, model, num_pages, page_size=16, device=None, dtype=None, eviction="lru",
                 k_scale=None, v_scale=None, group="auto"):
        self.pool = self.rope = None
        config = _text_config(model.config)
        self.model, self.config = model, config
        pg, self.tp_size, self.tp_rank = _collective.tensor_parallel(model, group)
        param = next(model.parameters())
        device = device if device is not None else param.device
        self._group = _collective.Group(pg, torch.device(device)) if pg is not None else None
        error = None
        try:
            self._open(model, config, num_pages, page_size, device, dtype, eviction, k_scale,
                       v_scale, param)
        except Exception as e:
            error = e
            if self._group is None:
                self.close()
                raise
        if self._group is not None:
            settings = None if error is not None else _collective.digest(
                num_pages, page_size, str(self.pool.dtype), eviction, self.pool.num_layers,
                self.pool.head_dim, self.num_qo_heads * self.tp_size)
            try:
                self._group.exchange("lazyattn.hf.DocumentStore", error,
                                     [("store settings", 2, settings)])
            except BaseException:
                self.close()
                raise
        model.set_attn_implementation(NAME)
        if model.config._attn_implementation != NAME:
            self.close()
            raise RuntimeError("lazyattn.hf.DocumentStore: the model did not take the lazyattn "
                               "attention implementation (it has %r)"
                               % model.config._attn_implementation)
        self._base = getattr(model, model.base_model_prefix, model)

    def _open(self, model, config, num_pages, page_size, device, dtype, eviction, k_scale,
              v_scale, param):
        layer_types = getattr(config, "layer_types", None) or []
        if "sliding_attention" in layer_types or (
                getattr(config, "sliding_window", None) is not None
                and getattr(config, "use_sliding_window", True) and not layer_types):
            raise ValueError("lazyattn.hf.DocumentStore: the config uses sliding-window "
                             "attention (sliding_window %s), expected full attention"
                             % getattr(config, "sliding_window", None))
        num_qo_heads = config.num_attention_heads
        num_kv_heads = getattr(config, "num_key_value_heads", None) or num_qo_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_qo_heads
        # A tensor-parallel rank holds its share of the heads: query heads
        # [rank * q, (rank + 1) * q) and KV heads [rank * kv, (rank + 1) * kv).
        self.num_qo_heads, kv = _local_heads(model, num_qo_heads, num_kv_heads, head_dim,
                                             self.tp_size)
        self.kv_heads = (self.tp_rank * kv, (self.tp_rank + 1) * kv)
        if dtype == torch.float8_e4m3fn and param.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError("lazyattn.hf.DocumentStore: an fp8 cache under a %s model, expected "
                             "a torch.bfloat16 or torch.float16 model (its queries and the K/V "
                             "the cache quantizes)" % param.dtype)
        if self.tp_size > 1:
            k_scale = _rank_scales("k_scale", k_scale, config.num_hidden_layers, num_kv_heads,
                                   self.kv_heads)
            v_scale = _rank_scales("v_scale", v_scale, config.num_hidden_layers, num_kv_heads,
                                   self.kv_heads)
        self.rope = Rope(config, device=device)
        if self.rope.depends_on_length:
            raise ValueError("lazyattn.hf.DocumentStore: the config's RoPE schedule depends on "
                             "the request length (dynamic, longrope), expected one that does not: "
                             "documents are stored rotated by the model (local form)")
        self.pool = Pool(config.num_hidden_layers, kv, head_dim, num_pages,
                         page_size=page_size, dtype=dtype or param.dtype, device=device,
                         rope=self.rope, eviction=eviction, k_scale=k_scale, v_scale=v_scale)
        self.fingerprint = _fingerprint(config)

    def _key(self, ids):
        hi, lo = self.pool.key_of(tokens=ids)
        f = self.fingerprint
        return hi ^ (f >> 64), lo ^ (f & ((1 << 64) - 1))

    def _check_document(self, doc, where):
        if not isinstance(doc, Document):
            raise TypeError("%s: a %s, expected a lazyattn Document" % (where, type(doc).__name__))
        if doc.pool is not self.pool:
            raise ValueError("%s: the document was cached for another model or config (another "
                             "store's pool), expected one of this store's" % where)
        doc.info()  # raises naming the stale handle

    @torch.inference_mode()
    def add(self, token_ids):
        """The document of these token ids (1-d), encoded by the model at positions 0..len-1
        the first time (a hit after that); pinned until unpinned or the store closes. Under
        tensor parallelism every rank calls it with the same ids; a failure on any rank raises
        RankError on every rank, and the ranks' stores stay equal."""
        where = "lazyattn.hf.DocumentStore.add"
        g = self._group

        def parse():
            ids = torch.as_tensor(token_ids).reshape(-1)
            if ids.numel() == 0 or ids.is_floating_point() or ids.is_complex():
                raise ValueError("%s: %d token ids of dtype %s, expected at least one integer id"
                                 % (where, ids.numel(), ids.dtype))
            return ids, self._key(ids)
        parsed, error = _collective.attempt(g, parse)
        if g is not None:  # the same document and the same store state on every rank
            g.exchange(where, error, [
                ("document (token count and key)", 3,
                 None if error else [parsed[0].numel(), *parsed[1]]), self._state_item()])
        ids, key = parsed
        doc = self.pool.find(key=key, form="local", pin=True)
        if doc is not None and doc.info()["committed"]:
            return doc
        if doc is not None:
            doc.unpin()
        got, error = _collective.attempt(
            g, lambda: self.pool.allocate(ids.numel(), "local", key=key))
        doc, inserted = got or (None, False)
        if g is not None:  # before the model's own collectives
            try:
                g.agree(where + " (allocating pages)", error)
            except BaseException:
                if doc is not None:
                    doc.unpin()
                    if inserted:
                        doc.erase()
                raise
        if not inserted:
            return doc
        enc = _EncodeCache(self, doc)
        error = None
        try:
            dev = self.pool.device_obj
            self._base(input_ids=ids[None].to(dev), position_ids=torch.arange(
                ids.numel(), device=dev)[None], past_key_values=enc, use_cache=True)
        except BaseException as e:
            error = e
        finally:
            enc.close()
        try:
            if g is not None:
                g.agree(where + " (encoding)", error if isinstance(error, Exception) else None)
            if error is not None:
                raise error
            self.pool.commit(doc)
        except BaseException:
            doc.unpin()
            doc.erase()
            raise
        return doc

    def cache(self, requests, question_starts=None):
        """A RagCache for generate(): one layout per request (see RagCache). Under tensor
        parallelism every rank calls it with the same requests (its own handles of the same
        documents); RankError on every rank otherwise."""
        g = self._group
        resolved, error = _collective.attempt(
            g, lambda: _resolve(self, requests, question_starts))
        if g is not None:
            g.exchange("lazyattn.hf.DocumentStore.cache", error, [
                ("request layout (documents and starts)", 2, None if error else _collective.digest(
                    [[(d.key, d.length, s) for d, s in p] for p in resolved[0]], resolved[1])),
                self._state_item()])
        return RagCache(self, requests, question_starts, _resolved=resolved)

    def _state_item(self):
        """The exchange item of the pool's bookkeeping fingerprint (equal on ranks whose stores
        made the same calls)."""
        return ("store state (pool fingerprint: the ranks' stores diverged)", 1,
                [self.pool.fingerprint()])

    def check_ranks(self):
        """Raises RankError on every rank when the tensor-parallel ranks' stores differ (their
        pool fingerprints); nothing without tensor parallelism. A collective."""
        if self._group is not None:
            self._group.exchange("lazyattn.hf.DocumentStore.check_ranks", None,
                                 [self._state_item()])

    def stats(self):
        return self.pool.stats()

    def fp8_saturated(self, reset=False):
        """An fp8 cache's saturated values so far (lazyattn.Pool.fp8_saturated; 0 otherwise)."""
        return self.pool.fp8_saturated(reset)

    def close(self):
        if self.pool is not None:
            self.pool.close()
        if self.rope is not None:
            self.rope.close()
