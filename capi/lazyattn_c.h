/* lazyattn's C ABI: a device KV pool, RoPE policies, documents and tails written from device
 * arrays, decode plans, and the CUDA decode step, behind opaque handles and status codes.
 *
 * Every function returns a lazyattn_status; on failure lazyattn_last_error() holds a message that
 * names the function, the bad value and what was expected (the lazyattn::Error text where the C++
 * side threw). Nothing here throws or exits. Device arrays are raw CUDA pointers on the pool's
 * device, dense and row-major, with the shapes written in brackets; `stream` is a cudaStream_t
 * passed as void* (NULL: the legacy default stream). Calls on one pool are not thread-safe
 * against each other. See docs/07-python.md. */
#ifndef LAZYATTN_C_H_
#define LAZYATTN_C_H_

#include <stdint.h>

#if defined(_WIN32)
#define LAZYATTN_C_API __declspec(dllexport)
#else
#define LAZYATTN_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define LAZYATTN_C_ABI_VERSION 1

typedef enum lazyattn_status {
  LAZYATTN_OK = 0,
  LAZYATTN_ERROR_INVALID_ARGUMENT = 1, /* a bad value: lazyattn::Error or a check of this layer */
  LAZYATTN_ERROR_CUDA = 2,             /* a CUDA runtime call failed; the message names it */
  LAZYATTN_ERROR_OUT_OF_MEMORY = 3,    /* host allocation failed */
  LAZYATTN_ERROR_INTERNAL = 4          /* anything else (a bug: please report the message) */
} lazyattn_status;

/* Element types, storage forms and segment kinds: the values of lazyattn's DType, StorageForm
 * and SegmentKind. */
enum { LAZYATTN_DTYPE_FLOAT32 = 0, LAZYATTN_DTYPE_FLOAT16 = 1, LAZYATTN_DTYPE_BFLOAT16 = 2 };
enum { LAZYATTN_FORM_RAW = 0, LAZYATTN_FORM_LOCAL = 1 };
enum { LAZYATTN_SEGMENT_DOCUMENT = 0, LAZYATTN_SEGMENT_TAIL = 1 };

typedef struct lazyattn_pool_t* lazyattn_pool; /* device K/V pool + page bookkeeping */
typedef struct lazyattn_rope_t* lazyattn_rope; /* a RoPE policy and its device frequencies */
typedef struct lazyattn_plan_t* lazyattn_plan; /* a decode batch: page tables + split schedule */

/* Documents and tails are named by 64-bit handles (slot and generation); a handle kept past its
 * document's eviction or its tail's release is detected as stale. */
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
} lazyattn_pool_stats;

/* The message of the calling thread's last failure ("" if none). Valid until its next call. */
LAZYATTN_C_API const char* lazyattn_last_error(void);
/* LAZYATTN_C_ABI_VERSION of the library that was loaded. */
LAZYATTN_C_API int lazyattn_abi_version(void);

/* ---- pool ------------------------------------------------------------------------------------
 * K and V pools [num_layers, num_pages, num_kv_heads, page_size, head_dim] of `dtype` in device
 * memory on the current device, and a host page table (documents keyed by content, pins, LRU
 * eviction of unpinned documents, tails). */
LAZYATTN_C_API lazyattn_status lazyattn_pool_create(int32_t num_layers, int32_t num_kv_heads,
                                                    int32_t head_dim, int32_t page_size,
                                                    int32_t dtype, int64_t num_pages,
                                                    lazyattn_pool* out);
LAZYATTN_C_API lazyattn_status lazyattn_pool_destroy(lazyattn_pool pool); /* NULL: no-op */
LAZYATTN_C_API lazyattn_status lazyattn_pool_stats_get(lazyattn_pool pool,
                                                       lazyattn_pool_stats* out);

/* ---- RoPE ------------------------------------------------------------------------------------
 * From a Hugging Face config.json text (rope_theta, rope_scaling or rope_parameters, head_dim
 * or hidden_size / num_attention_heads, partial_rotary_factor, ...): rope_policy_from_json. */
LAZYATTN_C_API lazyattn_status lazyattn_rope_create_json(const char* config_json,
                                                         lazyattn_rope* out);
LAZYATTN_C_API lazyattn_status lazyattn_rope_destroy(lazyattn_rope rope); /* NULL: no-op */
/* head_dim, rotary_dim, and 1 when the schedule depends on the request length (dynamic,
 * longrope: raw form only). Any out pointer may be NULL. */
LAZYATTN_C_API lazyattn_status lazyattn_rope_info(lazyattn_rope rope, int32_t* head_dim,
                                                  int32_t* rotary_dim, int32_t* depends_on_length);

/* ---- documents -------------------------------------------------------------------------------
 * allocate reserves pages for `length` tokens under the 128-bit key (key_hi, key_lo) in `form`
 * and returns the document pinned; if (key, form) is already stored, that document is returned
 * pinned with *inserted = 0 and nothing needs writing. Write every layer's tokens, then commit;
 * plans refuse a document that is not committed. unpin lets LRU eviction take it. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_allocate(lazyattn_pool pool, uint64_t key_hi,
                                                     uint64_t key_lo, int32_t form, int64_t length,
                                                     lazyattn_doc* out, int32_t* inserted);
/* Writes tokens [first, first + num_tokens) of one layer from device arrays k, v
 * [num_tokens, num_kv_heads, head_dim] of the pool's dtype. Local form: K is rotated on the way
 * at each token's index in the document (rope required); raw form: copied (rope may be NULL). */
LAZYATTN_C_API lazyattn_status lazyattn_doc_write(lazyattn_pool pool, lazyattn_rope rope,
                                                  lazyattn_doc doc, int32_t layer, int64_t first,
                                                  int64_t num_tokens, const void* k, const void* v,
                                                  void* stream);
LAZYATTN_C_API lazyattn_status lazyattn_doc_commit(lazyattn_pool pool, lazyattn_doc doc);
LAZYATTN_C_API lazyattn_status lazyattn_doc_pin(lazyattn_pool pool, lazyattn_doc doc);
LAZYATTN_C_API lazyattn_status lazyattn_doc_unpin(lazyattn_pool pool, lazyattn_doc doc);
/* Removes an unpinned document now. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_erase(lazyattn_pool pool, lazyattn_doc doc);
/* length, form and whether it is committed, of a live document (any pointer may be NULL). */
LAZYATTN_C_API lazyattn_status lazyattn_doc_info(lazyattn_pool pool, lazyattn_doc doc,
                                                 int64_t* length, int32_t* form,
                                                 int32_t* committed);
/* The content key lazyattn uses for a token sequence (DocKey::from_tokens: FNV-1a 128 over the
 * little-endian int32 ids, then the count), from host memory. */
LAZYATTN_C_API lazyattn_status lazyattn_doc_key_from_tokens(const int32_t* tokens,
                                                            int64_t num_tokens, uint64_t* key_hi,
                                                            uint64_t* key_lo);

/* ---- tails -----------------------------------------------------------------------------------
 * A request's private tokens. reserve extends the tail by n tokens and returns the index of the
 * first new one; write fills them per layer as lazyattn_doc_write does (local form: K rotated at
 * the token's index in the tail). */
LAZYATTN_C_API lazyattn_status lazyattn_tail_create(lazyattn_pool pool, int32_t form,
                                                    lazyattn_tail* out);
LAZYATTN_C_API lazyattn_status lazyattn_tail_reserve(lazyattn_pool pool, lazyattn_tail tail,
                                                     int64_t n, int64_t* first);
LAZYATTN_C_API lazyattn_status lazyattn_tail_write(lazyattn_pool pool, lazyattn_rope rope,
                                                   lazyattn_tail tail, int32_t layer, int64_t first,
                                                   int64_t num_tokens, const void* k, const void* v,
                                                   void* stream);
LAZYATTN_C_API lazyattn_status lazyattn_tail_release(lazyattn_pool pool, lazyattn_tail tail);
LAZYATTN_C_API lazyattn_status lazyattn_tail_info(lazyattn_pool pool, lazyattn_tail tail,
                                                  int64_t* length, int32_t* form);

/* ---- plans -----------------------------------------------------------------------------------
 * A decode batch: request b's segments are segments[segment_indptr[b] .. segment_indptr[b+1]),
 * exactly one of them its tail, whose last token is the query (one query per request). The plan
 * is uploaded on `stream` (no host synchronisation) with a split-KV schedule sized for the
 * device; forced_splits > 0 fixes the splits per request (0: the heuristic). `rope` (may be NULL)
 * is needed only by schedules that depend on the request length (dynamic, longrope): the plan
 * then keeps its own frequency sets, and decode must be given the same rope. The plan reads the
 * page tables as they are now: documents must stay pinned (or at least stored) while it is used,
 * and a tail that grows needs a new plan. */
LAZYATTN_C_API lazyattn_status lazyattn_plan_create(lazyattn_pool pool, lazyattn_rope rope,
                                                    const lazyattn_segment* segments,
                                                    const int32_t* segment_indptr,
                                                    int32_t num_requests, int32_t forced_splits,
                                                    void* stream, lazyattn_plan* out);
/* Waits for the device to be idle first: a kernel in flight may still read the plan. */
LAZYATTN_C_API lazyattn_status lazyattn_plan_destroy(lazyattn_plan plan); /* NULL: no-op */
/* num_requests, total keys over all requests, work items (CTAs per KV head) of the schedule. */
LAZYATTN_C_API lazyattn_status lazyattn_plan_info(lazyattn_plan plan, int32_t* num_requests,
                                                  int64_t* num_keys, int32_t* num_work);

/* ---- decode ----------------------------------------------------------------------------------
 * One decode step for one layer: q [num_requests, num_qo_heads, head_dim] (un-rotated; the
 * kernel applies RoPE at the query's position) -> o (same shape and dtype as the pool) and
 * maybe_lse [num_requests, num_qo_heads] float32 natural-log log-sum-exp (may be NULL).
 * softmax_scale 0 means 1/sqrt(head_dim). apply_rope 0: the RoPE-off baseline (keys and queries
 * pre-rotated by the caller; rope may then be NULL). No host synchronisation. A plan holds
 * its own split-KV scratch: run one plan on one stream at a time. */
LAZYATTN_C_API lazyattn_status lazyattn_decode(lazyattn_pool pool, lazyattn_plan plan,
                                               lazyattn_rope rope, int32_t layer,
                                               int32_t num_requests, int32_t num_qo_heads,
                                               double softmax_scale, int32_t apply_rope,
                                               const void* q, void* o, float* maybe_lse,
                                               void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LAZYATTN_C_H_ */
