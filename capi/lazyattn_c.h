/* lazyattn's C ABI: the page bookkeeping of a position-free K/V pool whose device memory the
 * caller owns (a framework's tensors), RoPE policies, packed plans, and the CUDA kernels (page
 * writes, prefill, decode) behind opaque handles and status codes.
 *
 * Every function returns a lazyattn_status; on failure lazyattn_last_error() holds a message that
 * names the function, the bad value and what was expected (the lazyattn::Error text where the C++
 * side threw). Nothing here throws or exits, and a failed call changes nothing. Device arrays are
 * raw CUDA pointers on the pool's device, dense and row-major, with the shapes written in
 * brackets; `stream` is a cudaStream_t passed as void* (NULL: the legacy default stream). Calls on
 * one pool are not thread-safe against each other. See docs/07-python.md.
 *
 * Memory: nothing here allocates device memory after lazyattn_rope_create_json, and no launch
 * synchronises the host. K/V pools, packed plans, write destinations and split-KV workspaces are
 * the caller's device buffers; the library says how large each must be. */
#ifndef LAZYATTN_C_H_
#define LAZYATTN_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LAZYATTN_C_API __declspec(dllexport)
#else
#define LAZYATTN_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define LAZYATTN_C_ABI_VERSION 6

typedef enum lazyattn_status {
  LAZYATTN_OK = 0,
  LAZYATTN_ERROR_INVALID_ARGUMENT = 1, /* a bad value: lazyattn::Error or a check of this layer */
  LAZYATTN_ERROR_CUDA = 2,             /* a CUDA runtime call failed; the message names it */
  LAZYATTN_ERROR_OUT_OF_MEMORY = 3,    /* host allocation failed */
  LAZYATTN_ERROR_INTERNAL = 4          /* anything else (a bug: please report the message) */
} lazyattn_status;

/* Element types, storage forms and segment kinds: the values of lazyattn's DType, StorageForm
 * and SegmentKind. Absolute form (tails only): K rotated at its logical positions, as a model's
 * own forward rotates it. */
enum {
  LAZYATTN_DTYPE_FLOAT32 = 0,
  LAZYATTN_DTYPE_FLOAT16 = 1,
  LAZYATTN_DTYPE_BFLOAT16 = 2,
  LAZYATTN_DTYPE_FLOAT8_E4M3 = 3 /* pools only: lazyattn_pool_create_fp8 */
};
enum { LAZYATTN_FORM_RAW = 0, LAZYATTN_FORM_LOCAL = 1, LAZYATTN_FORM_ABSOLUTE = 2 };
enum { LAZYATTN_SEGMENT_DOCUMENT = 0, LAZYATTN_SEGMENT_TAIL = 1 };
/* What a plan is for. */
enum { LAZYATTN_PLAN_DECODE = 0, LAZYATTN_PLAN_PREFILL = 1 };
/* Launch flags of lazyattn_prefill / lazyattn_decode. APPLY_ROPE off: the RoPE-off baseline (keys
 * and queries pre-rotated by the caller). QUERY_ROTATED: q arrives rotated at its own position
 * (R(m) q, as models rotate it); the kernels then apply R(-s) per local segment. INPUTS_SCALED:
 * q and the stored keys carry the schedule's attention factor (YaRN, LongRoPE) on their rotary
 * dims, as a model's own rotation leaves them, so it is not applied again. */
enum { LAZYATTN_APPLY_ROPE = 1, LAZYATTN_QUERY_ROTATED = 2, LAZYATTN_INPUTS_SCALED = 4 };
/* Flags of lazyattn_destinations: rotate K on the way (local form from K before RoPE). */
enum { LAZYATTN_WRITE_ROTATE = 1 };

typedef struct lazyattn_pool_t* lazyattn_pool; /* page bookkeeping of one K/V pool */
typedef struct lazyattn_rope_t* lazyattn_rope; /* a RoPE policy and its device frequencies */
typedef struct lazyattn_plan_t* lazyattn_plan; /* a batch's packed page tables and schedule */

/* Documents and tails are named by 64-bit handles (slot and generation); a handle kept past its
 * document's eviction or erasure, or its tail's release, is detected as stale. A handle is only
 * its own pool's: each pool mixes its own salt into its handles, so another pool's handle is
 * refused as naming no slot or a stale one (the chance that it names a live one is 2^-64). */
typedef uint64_t lazyattn_doc;
typedef uint64_t lazyattn_tail;

/* One segment of a request's layout (docs/04-layouts.md): keys [0, length) of a document or of
 * the tail, at logical positions start + i. */
typedef struct lazyattn_segment {
  int32_t kind;    /* LAZYATTN_SEGMENT_DOCUMENT or LAZYATTN_SEGMENT_TAIL */
  int32_t pad_;    /* zero */
  uint64_t handle; /* a lazyattn_doc or a lazyattn_tail, per kind */
  int64_t length;  /* a document may be cut to a prefix; a tail must be given whole */
  int64_t start;
} lazyattn_segment;

typedef struct lazyattn_pool_stats {
  int64_t num_pages;
  int64_t pages_in_use;
  int64_t documents;
  int64_t pinned_documents;
  int64_t tails;
  int64_t evictions;
  int64_t dedupes;
  int64_t hits;    /* lazyattn_doc_find calls that found the document */
  int64_t misses;  /* ... that did not */
  int64_t inserts; /* documents allocated */
} lazyattn_pool_stats;

/* The message of the calling thread's last failure ("" if none). Valid until its next call. */
LAZYATTN_C_API const char* lazyattn_last_error(void);
/* LAZYATTN_C_ABI_VERSION of the library that was loaded. */
LAZYATTN_C_API int lazyattn_abi_version(void);

/* ---- pool ------------------------------------------------------------------------------------
 * The bookkeeping of K and V pools [num_layers, num_pages, num_kv_heads, page_size, head_dim] of
 * `dtype` that the caller allocates on the device it names (documents keyed by content, dedupe,
 * pins, LRU (or segmented-LRU) eviction of unpinned documents when pages run out, tails,
 * stale-handle detection).
 * Host memory only: the pool works, and is tested, without a GPU. The launches take the K/V
 * pointers; lazyattn_pool_bytes gives the size of each. */
LAZYATTN_C_API lazyattn_status lazyattn_pool_create(int32_t num_layers, int32_t num_kv_heads,
                                                    int32_t head_dim, int32_t page_size,
                                                    int32_t dtype, int64_t num_pages,
                                                    int32_t device, lazyattn_pool* out);
/* Which unpinned document a pool evicts first when pages run out (KvStoreConfig::eviction):
 * LAZYATTN_EVICTION_LRU, the least recently used (what lazyattn_pool_create takes), or
 * LAZYATTN_EVICTION_SEGMENTED_LRU, segmented LRU: a document enters a probationary segment and
 * moves to a protected one (at most 80% of the pages) when it is asked for again (a find that
 * hits, an allocate of a key already stored); eviction takes probation's least recently used
 * first, so documents used once do not push out the ones asked for again. */
#define LAZYATTN_EVICTION_LRU 0
#define LAZYATTN_EVICTION_SEGMENTED_LRU 1
/* lazyattn_pool_create with the eviction policy named (since ABI version 3). */
LAZYATTN_C_API lazyattn_status lazyattn_pool_create_with_eviction(
    int32_t num_layers, int32_t num_kv_heads, int32_t head_dim, int32_t page_size, int32_t dtype,
    int64_t num_pages, int32_t device, int32_t eviction, lazyattn_pool* out);
/* A 64-bit hash of everything that decides what the pool's bookkeeping does next (documents,
 * tails, pins, use clock, free lists, statistics; KvBookkeeping::fingerprint): pools given the
 * same calls in the same order have equal ones. Tensor-parallel ranks compare theirs to find one
 * whose bookkeeping went its own way (since ABI version 4). */
LAZYATTN_C_API lazyattn_status lazyattn_pool_fingerprint(lazyattn_pool pool, uint64_t* out);
/* An fp8 (e4m3) pool (since ABI version 5): K and V are stored as e4m3(x / scale) with one scale
 * per layer and KV head, k_scale and v_scale [num_layers * num_kv_heads] host floats (copied;
 * NULL: all 1), finite and positive. Host memory only, as lazyattn_pool_create. Its launches are
 * lazyattn_write_fp8, lazyattn_decode_fp8 and (since ABI version 6) lazyattn_prefill_fp8, which
 * take the caller's device copy of the scales (lazyattn_pool_scales gives them);
 * lazyattn_write, lazyattn_decode and lazyattn_prefill refuse the pool. */
LAZYATTN_C_API lazyattn_status lazyattn_pool_create_fp8(int32_t num_layers, int32_t num_kv_heads,
                                                        int32_t head_dim, int32_t page_size,
                                                        int64_t num_pages, int32_t device,
                                                        int32_t eviction, const float* k_scale,
                                                        const float* v_scale, lazyattn_pool* out);
/* An fp8 pool's scales into `scales` (count = 2 * num_layers * num_kv_heads floats): K's, then
 * V's, each [num_layers][num_kv_heads], 1 where none were given. */
LAZYATTN_C_API lazyattn_status lazyattn_pool_scales(lazyattn_pool pool, float* scales,
                                                    int64_t count);
/* The pool's eviction policy (a LAZYATTN_EVICTION_ value). */
LAZYATTN_C_API lazyattn_status lazyattn_pool_eviction(lazyattn_pool pool, int32_t* eviction);
LAZYATTN_C_API lazyattn_status lazyattn_pool_destroy(lazyattn_pool pool); /* NULL: no-op */
LAZYATTN_C_API lazyattn_status lazyattn_pool_stats_get(lazyattn_pool pool,
                                                       lazyattn_pool_stats* out);
/* Bytes of one of the K or V pools (num_layers * num_pages * num_kv_heads * page_size * head_dim
 * elements). */
LAZYATTN_C_API lazyattn_status lazyattn_pool_bytes(lazyattn_pool pool, int64_t* bytes);

/* ---- RoPE ------------------------------------------------------------------------------------
 * From a Hugging Face config.json text (rope_theta, rope_scaling or rope_parameters, head_dim
 * or hidden_size / num_attention_heads, partial_rotary_factor, ...): rope_policy_from_json. The
 * frequency tables go to `device` (synchronously: create ropes before capturing graphs). */
LAZYATTN_C_API lazyattn_status lazyattn_rope_create_json(const char* config_json, int32_t device,
                                                         lazyattn_rope* out);
LAZYATTN_C_API lazyattn_status lazyattn_rope_destroy(lazyattn_rope rope); /* NULL: no-op */
/* head_dim, rotary_dim, 1 when the schedule depends on the request length (dynamic, longrope:
 * raw form only), and 1 for the interleaved (GPT-J) pair layout. Any out pointer may be NULL. */
LAZYATTN_C_API lazyattn_status lazyattn_rope_info(lazyattn_rope rope, int32_t* head_dim,
                                                  int32_t* rotary_dim, int32_t* depends_on_length,
                                                  int32_t* interleaved);
/* The frequencies the kernels use for a request whose largest key position is rope_length - 1:
 * inv_freq [rotary_dim / 2] in radians per position (exact to float64), and the attention
 * factor (1 except YaRN / LongRoPE) that scales the rotary dims of q and k. */
LAZYATTN_C_API lazyattn_status lazyattn_rope_frequencies(lazyattn_rope rope, int64_t rope_length,
                                                         double* inv_freq,
                                                         double* attention_factor);

/* ---- documents -------------------------------------------------------------------------------
 * allocate reserves pages for `length` tokens under the 128-bit key (key_hi, key_lo) in `form`
 * (raw or local) and returns the document pinned; if (key, form) is already stored, that document
 * is returned pinned with *inserted = 0 and nothing needs writing. Write every layer's tokens
 * (lazyattn_destinations + lazyattn_write), then commit; plans refuse a document that is not
 * committed. unpin lets LRU eviction take it. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_allocate(lazyattn_pool pool, uint64_t key_hi,
                                                     uint64_t key_lo, int32_t form, int64_t length,
                                                     lazyattn_doc* out, int32_t* inserted);
/* The document stored under (key, form), pinned when pin is 1: *found 0 if there is none.
 * Counts a hit or a miss. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_find(lazyattn_pool pool, uint64_t key_hi,
                                                 uint64_t key_lo, int32_t form, int32_t pin,
                                                 lazyattn_doc* out, int32_t* found);
LAZYATTN_C_API lazyattn_status lazyattn_doc_commit(lazyattn_pool pool, lazyattn_doc doc);
LAZYATTN_C_API lazyattn_status lazyattn_doc_pin(lazyattn_pool pool, lazyattn_doc doc);
LAZYATTN_C_API lazyattn_status lazyattn_doc_unpin(lazyattn_pool pool, lazyattn_doc doc);
/* Removes an unpinned document now. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_erase(lazyattn_pool pool, lazyattn_doc doc);
/* length, form, committed and pin count of a live document (any pointer may be NULL). */
LAZYATTN_C_API lazyattn_status lazyattn_doc_info(lazyattn_pool pool, lazyattn_doc doc,
                                                 int64_t* length, int32_t* form, int32_t* committed,
                                                 int32_t* pins);
/* The content key lazyattn uses for a token sequence (DocKey::from_tokens: FNV-1a 128 over the
 * little-endian int32 ids, then the count), from host memory. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_key_from_tokens(const int32_t* tokens,
                                                            int64_t num_tokens, uint64_t* key_hi,
                                                            uint64_t* key_lo);

/* ---- tails -----------------------------------------------------------------------------------
 * A request's private tokens, in raw, local (K rotated at its index in the tail) or absolute form
 * (K rotated at its logical position in the request). reserve extends the tail by n tokens
 * (evicting unpinned documents if pages run out) and returns the index of the first new one. */
LAZYATTN_C_API lazyattn_status lazyattn_tail_create(lazyattn_pool pool, int32_t form,
                                                    lazyattn_tail* out);
LAZYATTN_C_API lazyattn_status lazyattn_tail_reserve(lazyattn_pool pool, lazyattn_tail tail,
                                                     int64_t n, int64_t* first);
LAZYATTN_C_API lazyattn_status lazyattn_tail_release(lazyattn_pool pool, lazyattn_tail tail);
LAZYATTN_C_API lazyattn_status lazyattn_tail_info(lazyattn_pool pool, lazyattn_tail tail,
                                                  int64_t* length, int32_t* form);

/* ---- page writes -----------------------------------------------------------------------------
 * Where tokens go. Item i names tokens [first[i], first[i] + count[i]) of a document or tail
 * (kinds[i], handles[i]); the tokens of all items, in item order, are the rows of the K/V the
 * write reads. The destinations are packed into `dst` (host memory, lazyattn_destinations_bytes
 * of them: int32 page [n], int32 slot [n], then with WRITE_ROTATE int64 position [n] at an 8-byte
 * boundary), for the caller to copy to the device. WRITE_ROTATE (local form from K before RoPE,
 * with a rope whose schedule does not depend on the request length) rotates K at each token's
 * index in its document or tail; without it K is copied as given (raw form, or K a model already
 * rotated: local form for a document encoded at 0..len-1, absolute form for a tail). */
LAZYATTN_C_API lazyattn_status lazyattn_destinations_bytes(int64_t num_tokens, int32_t flags,
                                                           int64_t* bytes);
LAZYATTN_C_API lazyattn_status lazyattn_destinations(lazyattn_pool pool, int32_t num_items,
                                                     const int32_t* kinds, const uint64_t* handles,
                                                     const int64_t* first, const int64_t* count,
                                                     int32_t flags, void* dst, int64_t dst_bytes,
                                                     int64_t* num_tokens);
/* Writes num_tokens tokens of one layer: k, v [num_tokens, num_kv_heads, head_dim] of the pool's
 * dtype into k_pool, v_pool (the caller's pools) at the destinations `dst` (a device copy of
 * lazyattn_destinations' output for the same flags). rope may be NULL without WRITE_ROTATE. */
LAZYATTN_C_API lazyattn_status lazyattn_write(lazyattn_pool pool, lazyattn_rope rope, int32_t layer,
                                              void* k_pool, void* v_pool, const void* k,
                                              const void* v, int64_t num_tokens, const void* dst,
                                              int32_t flags, void* stream);
/* lazyattn_write into an fp8 pool: k, v of `input_dtype` (LAZYATTN_DTYPE_BFLOAT16 or FLOAT16),
 * stored as e4m3(x / scale), K after its rotation. scales: the device copy of
 * lazyattn_pool_scales' output; saturated: one device uint64 that counts the values whose
 * |x / scale| reached 464 (stored as +-448; lazyattn_doc_allocate's host twin refuses them). */
LAZYATTN_C_API lazyattn_status lazyattn_write_fp8(lazyattn_pool pool, lazyattn_rope rope,
                                                  int32_t layer, void* k_pool, void* v_pool,
                                                  const float* scales, uint64_t* saturated,
                                                  int32_t input_dtype, const void* k,
                                                  const void* v, int64_t num_tokens,
                                                  const void* dst, int32_t flags, void* stream);

/* ---- plans -----------------------------------------------------------------------------------
 * A batch: request b's segments are segments[segment_indptr[b] .. segment_indptr[b+1]), exactly
 * one of them its tail, whose last num_queries[b] tokens are the queries (decode: one per
 * request; num_queries may then be NULL). The plan holds the page tables as they are now:
 * documents must stay stored (pinned) while it is used, and a tail that grows needs a new plan.
 * Host work only; the packed image (lazyattn_plan_info: bytes) goes to the device with one copy
 * the caller makes (lazyattn_plan_pack into pinned memory, then an async copy). */
typedef struct lazyattn_plan_options {
  int32_t kind;            /* LAZYATTN_PLAN_DECODE or LAZYATTN_PLAN_PREFILL */
  int32_t num_qo_heads;    /* query heads of the layers it serves (sizes the workspace) */
  int32_t forced_splits;   /* decode: > 0 fixes the splits per request (0: the heuristic) */
  int32_t kv_splits;       /* prefill: key-range splits (0: automatic, 1: none) */
  int64_t headroom_tokens; /* room in the tile and page arrays for every tail to grow by this
                              many tokens (plans of later steps packed with `like`) */
  lazyattn_plan like;      /* NULL, or a plan whose layout this one must keep: same offsets,
                              grid and splits per request, so a CUDA graph captured with `like`'s
                              device image runs this plan once its image is copied over */
} lazyattn_plan_options;

typedef struct lazyattn_plan_info_t {
  int64_t bytes;           /* the packed image */
  int64_t workspace_bytes; /* the split-KV workspace launches need (zeroed once by the caller) */
  int32_t num_requests;
  int32_t num_queries; /* rows of q */
  int64_t num_keys;    /* keys over all requests */
  int32_t num_work;    /* decode: CTAs per KV head; prefill: query tiles */
  int32_t kv_splits;   /* prefill: the splits the workspace has room for */
} lazyattn_plan_info_t;

LAZYATTN_C_API lazyattn_status lazyattn_plan_create(
    lazyattn_pool pool, lazyattn_rope rope, const lazyattn_segment* segments,
    const int32_t* segment_indptr, const int32_t* num_queries, int32_t num_requests,
    const lazyattn_plan_options* options, lazyattn_plan* out);
LAZYATTN_C_API lazyattn_status lazyattn_plan_destroy(lazyattn_plan plan); /* NULL: no-op */
LAZYATTN_C_API lazyattn_status lazyattn_plan_info(lazyattn_plan plan, lazyattn_plan_info_t* out);
/* Copies the packed image (info.bytes) into dst (host memory of at least that size). */
LAZYATTN_C_API lazyattn_status lazyattn_plan_pack(lazyattn_plan plan, void* dst, int64_t dst_bytes);
/* Whether the plan's documents and tails are still as it recorded them (live, committed, tails
 * of the same length): 1 when it may be launched. */
LAZYATTN_C_API lazyattn_status lazyattn_plan_valid(lazyattn_plan plan, int32_t* valid);

/* ---- kernels ---------------------------------------------------------------------------------
 * One layer of a plan's batch. plan_device: the device copy of the plan's packed image;
 * workspace: info.workspace_bytes of device memory, zero-filled before its first use (the kernels
 * keep its counters at zero), used by one launch at a time. q [num_queries, num_qo_heads,
 * head_dim] -> o (same shape and dtype as the pool), maybe_lse [num_queries, num_qo_heads] float32
 * natural-log log-sum-exp (may be NULL). softmax_scale 0 means 1/sqrt(head_dim). Before launching,
 * the plan is checked against the pool (lazyattn_plan_valid): a stale plan is refused. No host
 * synchronisation; capturable into a CUDA graph. Prefill: the queries' own K/V must be written
 * first; the plan must be a PREFILL plan. Decode: a DECODE plan, one query per request. */
LAZYATTN_C_API lazyattn_status lazyattn_prefill(lazyattn_plan plan, int32_t layer,
                                                const void* k_pool, const void* v_pool,
                                                const void* plan_device, void* workspace,
                                                int32_t num_qo_heads, double softmax_scale,
                                                int32_t flags, const void* q, void* o,
                                                float* maybe_lse, void* stream);
LAZYATTN_C_API lazyattn_status lazyattn_decode(lazyattn_plan plan, int32_t layer,
                                               const void* k_pool, const void* v_pool,
                                               const void* plan_device, void* workspace,
                                               int32_t num_qo_heads, double softmax_scale,
                                               int32_t flags, const void* q, void* o,
                                               float* maybe_lse, void* stream);
/* lazyattn_prefill over an fp8 pool (since ABI version 6): q and o of `q_dtype`
 * (LAZYATTN_DTYPE_BFLOAT16 or FLOAT16), scales the device copy of lazyattn_pool_scales' output.
 * Every storage form. The Hopper kernel dequantizes every K and V tile the plan reads into the
 * workspace (its info.workspace_bytes includes that), so head_dim must be 64, 128 or 256. */
LAZYATTN_C_API lazyattn_status lazyattn_prefill_fp8(lazyattn_plan plan, int32_t layer,
                                                    const void* k_pool, const void* v_pool,
                                                    const float* scales, const void* plan_device,
                                                    void* workspace, int32_t num_qo_heads,
                                                    double softmax_scale, int32_t flags,
                                                    int32_t q_dtype, const void* q, void* o,
                                                    float* maybe_lse, void* stream);
/* lazyattn_decode over an fp8 pool: q and o of `q_dtype` (LAZYATTN_DTYPE_BFLOAT16 or FLOAT16),
 * scales the device copy of lazyattn_pool_scales' output. Local-form and absolute segments only
 * (raw-form ones are refused). */
LAZYATTN_C_API lazyattn_status lazyattn_decode_fp8(lazyattn_plan plan, int32_t layer,
                                                   const void* k_pool, const void* v_pool,
                                                   const float* scales, const void* plan_device,
                                                   void* workspace, int32_t num_qo_heads,
                                                   double softmax_scale, int32_t flags,
                                                   int32_t q_dtype, const void* q, void* o,
                                                   float* maybe_lse, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LAZYATTN_C_H_ */
