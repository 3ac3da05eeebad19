// lazyattn's C ABI (lazyattn_c.h), host side: errors, pools, ropes, documents and tails. Write
// destinations and plans are in plans.cu, the launches in write.cu, decode.cu and prefill.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "internal.cuh"
#include "lazyattn/cuda/schedule.hpp"

namespace lazyattn::capi {

std::string& last_error_text() {
  thread_local std::string text;
  return text;
}

Registry<lazyattn_pool_t>& pools() {
  static Registry<lazyattn_pool_t> r;
  return r;
}
Registry<lazyattn_rope_t>& ropes() {
  static Registry<lazyattn_rope_t> r;
  return r;
}
Registry<lazyattn_plan_t>& plans() {
  static Registry<lazyattn_plan_t> r;
  return r;
}

namespace {

const char* memory_type_name(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeUnregistered:
      return "unregistered host";
    case cudaMemoryTypeHost:
      return "pinned host";
    case cudaMemoryTypeDevice:
      return "device";
    case cudaMemoryTypeManaged:
      return "managed";
  }
  return "unknown";
}

StorageForm checked_form(std::int32_t form, const char* where, bool tail) {
  LAZYATTN_CHECK(form == LAZYATTN_FORM_RAW || form == LAZYATTN_FORM_LOCAL ||
                     (tail && form == LAZYATTN_FORM_ABSOLUTE),
                 where, ": form ", form, ", expected 0 (raw) or 1 (local)",
                 tail ? " or 2 (absolute)" : " (absolute form is for tails only)");
  return static_cast<StorageForm>(form);
}

}  // namespace

void check_device_pointer(const void* p, int device, std::size_t align, const char* where,
                          const char* name) {
  LAZYATTN_CHECK(p != nullptr, where, ": ", name, " is NULL, expected a device pointer");
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so later calls do not see it
    ::lazyattn::detail::throw_error(where, ": ", name, " ", p, " is not a pointer CUDA knows (",
                                    cudaGetErrorName(e), "), expected device memory");
  }
  LAZYATTN_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged, where, ": ",
                 name, " ", p, " is ", memory_type_name(a.type),
                 " memory, expected device memory (a CUDA tensor)");
  LAZYATTN_CHECK(a.device == device, where, ": ", name, " ", p, " is on device ", a.device,
                 ", expected the pool's device ", device);
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(p) % align == 0, where, ": ", name, " ", p,
                 " is not aligned to ", align, " bytes, expected an aligned element pointer");
}

void check_plan_current(lazyattn_plan_t& plan, const char* where) {
  const lazyattn_pool_t& pool = *plan.pool;
  if (plan.checked_epoch == pool.epoch) return;
  ::lazyattn::check_plan_current(pool.pages, plan.plan, where);
  // Stricter than the pages: a decode or prefill plan's queries are its tails' last tokens, so a
  // tail that grew since means a step the caller did not plan.
  const std::vector<PlanSource>& sources = plan.plan.sources;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const PlanSource& s = sources[i];
    if (s.kind != SegmentKind::kTail) continue;
    const std::int64_t now = pool.pages.info(s.tail).length;
    LAZYATTN_CHECK(now == s.length, where, ": segment ", i, " (tail handle ",
                   pack_handle(pool, s.tail), ") has ", now, " tokens, the plan was made for ",
                   s.length, "; a tail that grows needs a new plan");
  }
  plan.checked_epoch = pool.epoch;
}

}  // namespace lazyattn::capi

using namespace lazyattn;
using namespace lazyattn::capi;

extern "C" {

const char* lazyattn_last_error(void) { return last_error_text().c_str(); }

int lazyattn_abi_version(void) { return LAZYATTN_C_ABI_VERSION; }

// ---- pool ---------------------------------------------------------------------------------------

namespace {

// The C values are the store's EvictionPolicy values.
static_assert(LAZYATTN_EVICTION_LRU == static_cast<int>(EvictionPolicy::kLru) &&
              LAZYATTN_EVICTION_SEGMENTED_LRU == static_cast<int>(EvictionPolicy::kSegmentedLru));

lazyattn_status create_pool(const char* w, int32_t num_layers, int32_t num_kv_heads,
                            int32_t head_dim, int32_t page_size, int32_t dtype, int64_t num_pages,
                            int32_t device, int32_t eviction, lazyattn_pool* out,
                            const float* k_scale = nullptr, const float* v_scale = nullptr) {
  return guarded(w, [&] {
    check_out(out, w);
    *out = nullptr;
    // (lazyattn_pool_create_fp8 passes LAZYATTN_DTYPE_FLOAT8_E4M3 itself)
    const bool fp8_entry = std::string_view(w) == "lazyattn_pool_create_fp8";
    LAZYATTN_CHECK(fp8_entry || dtype == LAZYATTN_DTYPE_FLOAT16 || dtype == LAZYATTN_DTYPE_BFLOAT16,
                   w, ": dtype ", dtype,
                   ", expected 1 (float16) or 2 (bfloat16) (fp8 pools: lazyattn_pool_create_fp8)");
    LAZYATTN_CHECK(device >= 0, w, ": device ", device, ", expected a CUDA device index >= 0");
    LAZYATTN_CHECK(eviction == LAZYATTN_EVICTION_LRU || eviction == LAZYATTN_EVICTION_SEGMENTED_LRU,
                   w, ": eviction ", eviction, ", expected ", LAZYATTN_EVICTION_LRU, " (lru) or ",
                   LAZYATTN_EVICTION_SEGMENTED_LRU, " (segmented_lru)");
    KvStoreConfig c{num_layers, num_kv_heads, head_dim, page_size, static_cast<DType>(dtype),
                    num_pages};
    c.eviction = static_cast<EvictionPolicy>(eviction);  // in range: checked above
    if (dtype == LAZYATTN_DTYPE_FLOAT8_E4M3) {  // the bookkeeping checks the values, by name
      LAZYATTN_CHECK(num_layers >= 1 && num_kv_heads >= 1, w, ": num_layers ", num_layers,
                     " and num_kv_heads ", num_kv_heads, ", expected >= 1");
      const auto n = static_cast<std::size_t>(num_layers) * static_cast<std::size_t>(num_kv_heads);
      if (k_scale) c.k_scale.assign(k_scale, k_scale + n);
      if (v_scale) c.v_scale.assign(v_scale, v_scale + n);
    }
    // The bookkeeping checks the geometry (the kernels index it), naming the bad value.
    auto pool = std::make_unique<lazyattn_pool_t>(device, c);
    const PoolGeometry& g = pool->pages.geometry();
    const double bytes = static_cast<double>(g.elements()) * size_of(c.dtype);
    LAZYATTN_CHECK(bytes < 4.0e18, w, ": ", bytes, " bytes per pool, expected less than 2^62");
    pools().add(pool.get());
    *out = pool.release();
  });
}

}  // namespace

lazyattn_status lazyattn_pool_create(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                                     int32_t page_size, int32_t dtype, int64_t num_pages,
                                     int32_t device, lazyattn_pool* out) {
  return create_pool("lazyattn_pool_create", num_layers, num_kv_heads, head_dim, page_size, dtype,
                     num_pages, device, LAZYATTN_EVICTION_LRU, out);
}

lazyattn_status lazyattn_pool_create_with_eviction(int32_t num_layers, int32_t num_kv_heads,
                                                   int32_t head_dim, int32_t page_size,
                                                   int32_t dtype, int64_t num_pages,
                                                   int32_t device, int32_t eviction,
                                                   lazyattn_pool* out) {
  return create_pool("lazyattn_pool_create_with_eviction", num_layers, num_kv_heads, head_dim,
                     page_size, dtype, num_pages, device, eviction, out);
}

lazyattn_status lazyattn_pool_fingerprint(lazyattn_pool pool, uint64_t* out) {
  const char* w = "lazyattn_pool_fingerprint";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(out, w);
    *out = p.pages.fingerprint();
  });
}

lazyattn_status lazyattn_pool_create_fp8(int32_t num_layers, int32_t num_kv_heads,
                                         int32_t head_dim, int32_t page_size, int64_t num_pages,
                                         int32_t device, int32_t eviction, const float* k_scale,
                                         const float* v_scale, lazyattn_pool* out) {
  return create_pool("lazyattn_pool_create_fp8", num_layers, num_kv_heads, head_dim, page_size,
                     LAZYATTN_DTYPE_FLOAT8_E4M3, num_pages, device, eviction, out, k_scale,
                     v_scale);
}

lazyattn_status lazyattn_pool_scales(lazyattn_pool pool, float* scales, int64_t count) {
  const char* w = "lazyattn_pool_scales";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(scales, w);
    const KvStoreConfig& c = p.config;
    LAZYATTN_CHECK(c.dtype == DType::kFloat8E4M3, w, ": a ", to_string(c.dtype),
                   " pool has no scales, expected a float8_e4m3 pool");
    const std::int64_t n = std::int64_t{c.num_layers} * c.num_kv_heads;
    LAZYATTN_CHECK(count == 2 * n, w, ": count ", count, ", expected 2 x num_layers ",
                   c.num_layers, " x num_kv_heads ", c.num_kv_heads, " = ", 2 * n);
    for (int k = 0; k < 2; ++k) {
      const std::vector<float>& s = k == 0 ? c.k_scale : c.v_scale;
      for (std::int64_t i = 0; i < n; ++i)
        scales[k * n + i] = s.empty() ? 1.0f : s[static_cast<std::size_t>(i)];
    }
  });
}

lazyattn_status lazyattn_pool_eviction(lazyattn_pool pool, int32_t* eviction) {
  const char* w = "lazyattn_pool_eviction";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(eviction, w);
    *eviction = static_cast<int32_t>(p.config.eviction);
  });
}

lazyattn_status lazyattn_pool_destroy(lazyattn_pool pool) {
  return guarded("lazyattn_pool_destroy", [&] {
    if (!pool) return;
    pools().check(pool, "lazyattn_pool_destroy", "lazyattn_pool");
    pools().remove(pool);
    delete pool;
  });
}

lazyattn_status lazyattn_pool_stats_get(lazyattn_pool pool, lazyattn_pool_stats* out) {
  const char* w = "lazyattn_pool_stats_get";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(out, w);
    KvStoreStats s = p.pages.stats();
    *out = lazyattn_pool_stats{s.pages_total, s.pages_in_use, s.documents, s.pinned_documents,
                               s.tails,       s.evictions,    s.dedupes,   s.hits,
                               s.misses,      s.inserts};
  });
}

lazyattn_status lazyattn_pool_bytes(lazyattn_pool pool, int64_t* bytes) {
  const char* w = "lazyattn_pool_bytes";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(bytes, w);
    const KvStoreConfig& c = p.config;
    PoolGeometry g{c.num_layers, c.num_kv_heads, c.head_dim, c.page_size, c.num_pages};
    *bytes = g.elements() * size_of(c.dtype);
  });
}

// ---- RoPE ---------------------------------------------------------------------------------------

lazyattn_status lazyattn_rope_create_json(const char* config_json, int32_t device,
                                          lazyattn_rope* out) {
  const char* w = "lazyattn_rope_create_json";
  return guarded(w, [&] {
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(config_json != nullptr, w, ": config_json is NULL, expected JSON text");
    LAZYATTN_CHECK(device >= 0, w, ": device ", device, ", expected a CUDA device index >= 0");
    RopePolicy policy = rope_policy_from_json(config_json);
    DeviceScope scope(device);
    auto rope = std::make_unique<lazyattn_rope_t>(device, policy);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());  // tables in place before any capture
    ropes().add(rope.get());
    *out = rope.release();
  });
}

lazyattn_status lazyattn_rope_destroy(lazyattn_rope rope) {
  return guarded("lazyattn_rope_destroy", [&] {
    if (!rope) return;
    ropes().check(rope, "lazyattn_rope_destroy", "lazyattn_rope");
    DeviceScope scope(rope->device);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());  // a pending kernel may still read its tables
    ropes().remove(rope);
    delete rope;
  });
}

lazyattn_status lazyattn_rope_info(lazyattn_rope rope, int32_t* head_dim, int32_t* rotary_dim,
                                   int32_t* depends_on_length, int32_t* interleaved) {
  const char* w = "lazyattn_rope_info";
  return guarded(w, [&] {
    ropes().check(rope, w, "lazyattn_rope");
    if (head_dim) *head_dim = rope->policy.head_dim();
    if (rotary_dim) *rotary_dim = rope->policy.rotary_dim();
    if (depends_on_length) *depends_on_length = rope->policy.depends_on_length() ? 1 : 0;
    if (interleaved) *interleaved = rope->device_rope.view().interleaved;
  });
}

lazyattn_status lazyattn_rope_frequencies(lazyattn_rope rope, int64_t rope_length, double* inv_freq,
                                          double* attention_factor) {
  const char* w = "lazyattn_rope_frequencies";
  return guarded(w, [&] {
    ropes().check(rope, w, "lazyattn_rope");
    LAZYATTN_CHECK(rope_length >= 0, w, ": rope_length ", rope_length, ", expected >= 0");
    const RopeFrequencies f = rope->policy.frequencies(rope_length);
    if (inv_freq) std::copy(f.inv_freq.begin(), f.inv_freq.end(), inv_freq);
    if (attention_factor) *attention_factor = f.attention_factor;
  });
}

// ---- documents ----------------------------------------------------------------------------------

lazyattn_status lazyattn_doc_allocate(lazyattn_pool pool, uint64_t key_hi, uint64_t key_lo,
                                      int32_t form, int64_t length, lazyattn_doc* out,
                                      int32_t* inserted) {
  const char* w = "lazyattn_doc_allocate";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(out, w);
    InsertResult r = p.pages.allocate(DocKey{key_hi, key_lo}, checked_form(form, w, false), length);
    ++p.epoch;
    *out = pack_handle(p, r.handle);
    if (inserted) *inserted = r.inserted ? 1 : 0;
  });
}

lazyattn_status lazyattn_doc_find(lazyattn_pool pool, uint64_t key_hi, uint64_t key_lo,
                                  int32_t form, int32_t pin, lazyattn_doc* out, int32_t* found) {
  const char* w = "lazyattn_doc_find";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(out, w);
    check_out(found, w);
    LAZYATTN_CHECK(pin == 0 || pin == 1, w, ": pin ", pin, ", expected 0 or 1");
    std::optional<DocHandle> h =
        p.pages.find(DocKey{key_hi, key_lo}, checked_form(form, w, false), pin == 1);
    ++p.epoch;
    *found = h ? 1 : 0;
    *out = h ? pack_handle(p, *h) : 0;
  });
}

lazyattn_status lazyattn_doc_commit(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_commit";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.commit(unpack_doc(p, doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_pin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_pin";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.pin(unpack_doc(p, doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_unpin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_unpin";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.unpin(unpack_doc(p, doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_erase(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_erase";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.erase(unpack_doc(p, doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_info(lazyattn_pool pool, lazyattn_doc doc, int64_t* length,
                                  int32_t* form, int32_t* committed, int32_t* pins) {
  const char* w = "lazyattn_doc_info";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    DocInfo info = p.pages.info(unpack_doc(p, doc));
    if (length) *length = info.length;
    if (form) *form = static_cast<int32_t>(info.form);
    if (committed) *committed = info.committed ? 1 : 0;
    if (pins) *pins = info.pins;
  });
}

lazyattn_status lazyattn_doc_key_from_tokens(const int32_t* tokens, int64_t num_tokens,
                                             uint64_t* key_hi, uint64_t* key_lo) {
  const char* w = "lazyattn_doc_key_from_tokens";
  return guarded(w, [&] {
    LAZYATTN_CHECK(num_tokens >= 0, w, ": num_tokens ", num_tokens, ", expected >= 0");
    LAZYATTN_CHECK(tokens != nullptr || num_tokens == 0, w,
                   ": tokens is NULL, expected num_tokens host int32 values");
    check_out(key_hi, w);
    check_out(key_lo, w);
    DocKey key = DocKey::from_tokens(
        std::span<const std::int32_t>(tokens, static_cast<std::size_t>(num_tokens)));
    *key_hi = key.hi;
    *key_lo = key.lo;
  });
}

// ---- tails --------------------------------------------------------------------------------------

lazyattn_status lazyattn_tail_create(lazyattn_pool pool, int32_t form, lazyattn_tail* out) {
  const char* w = "lazyattn_tail_create";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    check_out(out, w);
    TailHandle t = p.pages.create_tail(checked_form(form, w, true));
    ++p.epoch;
    *out = pack_handle(p, t);
  });
}

lazyattn_status lazyattn_tail_reserve(lazyattn_pool pool, lazyattn_tail tail, int64_t n,
                                      int64_t* first) {
  const char* w = "lazyattn_tail_reserve";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    std::int64_t f = p.pages.reserve(unpack_tail(p, tail), n);
    ++p.epoch;
    if (first) *first = f;
  });
}

lazyattn_status lazyattn_tail_release(lazyattn_pool pool, lazyattn_tail tail) {
  const char* w = "lazyattn_tail_release";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.release(unpack_tail(p, tail));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_tail_info(lazyattn_pool pool, lazyattn_tail tail, int64_t* length,
                                   int32_t* form) {
  const char* w = "lazyattn_tail_info";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    TailInfo info = p.pages.info(unpack_tail(p, tail));
    if (length) *length = info.length;
    if (form) *form = static_cast<int32_t>(info.form);
  });
}

}  // extern "C"
