// lazyattn's C ABI (lazyattn_c.h), host side: pools, ropes, documents, tails, write destinations
// and plans. The launches are in write.cu, decode.cu and prefill.cu.
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

template <class T>
void check_out(const T* out, const char* where) {
  LAZYATTN_CHECK(out != nullptr, where, ": the output pointer is NULL");
}

lazyattn_pool_t& pool_of(lazyattn_pool p, const char* where) {
  return *pools().check(p, where, "lazyattn_pool");
}

// Which page list and length a write item names.
struct ItemPages {
  std::vector<std::int32_t> pages;
  std::int64_t length = 0;
  StorageForm form = StorageForm::kRaw;
};
ItemPages item_pages(const lazyattn_pool_t& pool, std::int32_t kind, std::uint64_t handle,
                     const char* where, std::int32_t i) {
  try {
    if (kind == LAZYATTN_SEGMENT_DOCUMENT) {
      DocInfo d = pool.pages.info(unpack_doc(handle));
      return ItemPages{std::move(d.pages), d.length, d.form};
    }
    LAZYATTN_CHECK(kind == LAZYATTN_SEGMENT_TAIL, where, ": item ", i, " kind ", kind,
                   ", expected 0 (document) or 1 (tail)");
    TailInfo t = pool.pages.info(unpack_tail(handle));
    return ItemPages{std::move(t.pages), t.length, t.form};
  } catch (const Error& e) {
    std::string_view m = e.what();
    if (m.starts_with(where)) throw;
    ::lazyattn::detail::throw_error(where, ": item ", i, ": ", e.what());
  }
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
  for (std::size_t i = 0; i < plan.segments.size(); ++i) {
    const lazyattn_segment& s = plan.segments[i];
    if (s.kind == LAZYATTN_SEGMENT_DOCUMENT) {
      LAZYATTN_CHECK(pool.pages.is_live(unpack_doc(s.handle)), where, ": segment ", i,
                     " (document handle ", s.handle,
                     ") was evicted or erased since the plan was made, expected a plan whose "
                     "documents stay stored (pin them); make a new plan");
    } else {
      const TailHandle t = unpack_tail(s.handle);
      LAZYATTN_CHECK(pool.pages.is_live(t), where, ": segment ", i, " (tail handle ", s.handle,
                     ") was released since the plan was made; make a new plan");
      const std::int64_t now = pool.pages.info(t).length;
      LAZYATTN_CHECK(now == s.length, where, ": segment ", i, " (tail handle ", s.handle, ") has ",
                     now, " tokens, the plan was made for ", s.length,
                     "; a tail that grows needs a new plan");
    }
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

lazyattn_status lazyattn_pool_create(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                                     int32_t page_size, int32_t dtype, int64_t num_pages,
                                     int32_t device, lazyattn_pool* out) {
  const char* w = "lazyattn_pool_create";
  return guarded(w, [&] {
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(dtype == LAZYATTN_DTYPE_FLOAT16 || dtype == LAZYATTN_DTYPE_BFLOAT16, w,
                   ": dtype ", dtype, ", expected 1 (float16) or 2 (bfloat16)");
    LAZYATTN_CHECK(device >= 0, w, ": device ", device, ", expected a CUDA device index >= 0");
    KvStoreConfig c{num_layers, num_kv_heads, head_dim, page_size, static_cast<DType>(dtype),
                    num_pages};
    auto pool = std::make_unique<lazyattn_pool_t>(device, c);
    // The geometry the kernels index (the bookkeeping store checked the page count and size).
    PoolGeometry g{num_layers, num_kv_heads, head_dim, page_size, num_pages};
    LAZYATTN_CHECK(num_layers >= 1 && num_kv_heads >= 1 && head_dim >= 2 && head_dim % 2 == 0 &&
                       head_dim <= 1024,
                   w, ": num_layers ", num_layers, ", num_kv_heads ", num_kv_heads, ", head_dim ",
                   head_dim, ", expected >= 1, >= 1 and an even number <= 1024");
    const double bytes = static_cast<double>(g.layer_stride()) * num_layers * size_of(c.dtype);
    LAZYATTN_CHECK(bytes < 4.0e18, w, ": ", bytes, " bytes per pool, expected less than 2^62");
    pools().add(pool.get());
    *out = pool.release();
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
    *out = pack_handle(r.handle.slot, r.handle.generation);
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
    *out = h ? pack_handle(h->slot, h->generation) : 0;
  });
}

lazyattn_status lazyattn_doc_commit(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_commit";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.commit(unpack_doc(doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_pin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_pin";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.pin(unpack_doc(doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_unpin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_unpin";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.unpin(unpack_doc(doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_erase(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_erase";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.erase(unpack_doc(doc));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_doc_info(lazyattn_pool pool, lazyattn_doc doc, int64_t* length,
                                  int32_t* form, int32_t* committed, int32_t* pins) {
  const char* w = "lazyattn_doc_info";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    DocInfo info = p.pages.info(unpack_doc(doc));
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
    *out = pack_handle(t.slot, t.generation);
  });
}

lazyattn_status lazyattn_tail_reserve(lazyattn_pool pool, lazyattn_tail tail, int64_t n,
                                      int64_t* first) {
  const char* w = "lazyattn_tail_reserve";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    std::int64_t f = p.pages.reserve(unpack_tail(tail), n);
    ++p.epoch;
    if (first) *first = f;
  });
}

lazyattn_status lazyattn_tail_release(lazyattn_pool pool, lazyattn_tail tail) {
  const char* w = "lazyattn_tail_release";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    p.pages.release(unpack_tail(tail));
    ++p.epoch;
  });
}

lazyattn_status lazyattn_tail_info(lazyattn_pool pool, lazyattn_tail tail, int64_t* length,
                                   int32_t* form) {
  const char* w = "lazyattn_tail_info";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    TailInfo info = p.pages.info(unpack_tail(tail));
    if (length) *length = info.length;
    if (form) *form = static_cast<int32_t>(info.form);
  });
}

// ---- write destinations -------------------------------------------------------------------------

lazyattn_status lazyattn_destinations_bytes(int64_t num_tokens, int32_t flags, int64_t* bytes) {
  const char* w = "lazyattn_destinations_bytes";
  return guarded(w, [&] {
    check_out(bytes, w);
    LAZYATTN_CHECK(num_tokens >= 0 && num_tokens < (std::int64_t{1} << 31), w, ": num_tokens ",
                   num_tokens, ", expected in [0, 2^31)");
    LAZYATTN_CHECK((flags & ~LAZYATTN_WRITE_ROTATE) == 0, w, ": flags ", flags,
                   ", expected 0 or LAZYATTN_WRITE_ROTATE (1)");
    const std::int64_t ints = (2 * num_tokens * 4 + 7) / 8 * 8;
    *bytes = ints + ((flags & LAZYATTN_WRITE_ROTATE) ? num_tokens * 8 : 0);
  });
}

lazyattn_status lazyattn_destinations(lazyattn_pool pool, int32_t num_items, const int32_t* kinds,
                                      const uint64_t* handles, const int64_t* first,
                                      const int64_t* count, int32_t flags, void* dst,
                                      int64_t dst_bytes, int64_t* num_tokens) {
  const char* w = "lazyattn_destinations";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    LAZYATTN_CHECK(num_items >= 0, w, ": num_items ", num_items, ", expected >= 0");
    LAZYATTN_CHECK(num_items == 0 || (kinds && handles && first && count), w,
                   ": kinds, handles, first and count must each hold num_items values");
    LAZYATTN_CHECK((flags & ~LAZYATTN_WRITE_ROTATE) == 0, w, ": flags ", flags,
                   ", expected 0 or LAZYATTN_WRITE_ROTATE (1)");
    const bool rotate = (flags & LAZYATTN_WRITE_ROTATE) != 0;
    std::vector<ItemPages> items;
    items.reserve(static_cast<std::size_t>(num_items));
    std::int64_t total = 0;
    for (std::int32_t i = 0; i < num_items; ++i) {
      items.push_back(item_pages(p, kinds[i], handles[i], w, i));
      const ItemPages& it = items.back();
      LAZYATTN_CHECK(first[i] >= 0 && count[i] >= 0 && first[i] <= it.length &&
                         count[i] <= it.length - first[i],
                     w, ": item ", i, " tokens [", first[i], ", ", first[i] + count[i],
                     "), expected within [0, ", it.length,
                     ") (the document's or the reserved tail's length)");
      LAZYATTN_CHECK(!rotate || it.form == StorageForm::kLocal, w, ": item ", i, " is in ",
                     to_string(it.form),
                     " form, but LAZYATTN_WRITE_ROTATE rotates K into local form; expected K "
                     "copied as given (flags 0)");
      total += count[i];
      LAZYATTN_CHECK(total < (std::int64_t{1} << 31), w, ": more than 2^31 - 1 tokens");
    }
    std::int64_t need = 0;
    lazyattn_destinations_bytes(total, flags, &need);
    LAZYATTN_CHECK(dst != nullptr && dst_bytes >= need, w, ": dst of ", dst_bytes, " bytes for ",
                   total, " tokens, expected at least ", need);
    auto* page = static_cast<std::int32_t*>(dst);
    auto* slot = page + total;
    auto* pos =
        reinterpret_cast<std::int64_t*>(static_cast<std::byte*>(dst) + (2 * total * 4 + 7) / 8 * 8);
    const int P = p.config.page_size;
    std::int64_t t = 0;
    for (std::int32_t i = 0; i < num_items; ++i) {
      for (std::int64_t k = first[i]; k < first[i] + count[i]; ++k, ++t) {
        page[t] = items[static_cast<std::size_t>(i)].pages[static_cast<std::size_t>(k / P)];
        slot[t] = static_cast<std::int32_t>(k % P);
        if (rotate) pos[t] = k;
      }
    }
    if (num_tokens) *num_tokens = total;
  });
}

// ---- plans --------------------------------------------------------------------------------------

lazyattn_status lazyattn_plan_create(lazyattn_pool pool, lazyattn_rope rope,
                                     const lazyattn_segment* segments,
                                     const int32_t* segment_indptr, const int32_t* num_queries,
                                     int32_t num_requests, const lazyattn_plan_options* options,
                                     lazyattn_plan* out) {
  const char* w = "lazyattn_plan_create";
  return guarded(w, [&] {
    lazyattn_pool_t& p = pool_of(pool, w);
    ropes().check(rope, w, "lazyattn_rope");
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(options != nullptr, w, ": options is NULL, expected lazyattn_plan_options");
    const lazyattn_plan_options& o = *options;
    LAZYATTN_CHECK(o.kind == LAZYATTN_PLAN_DECODE || o.kind == LAZYATTN_PLAN_PREFILL, w, ": kind ",
                   o.kind, ", expected 0 (decode) or 1 (prefill)");
    const int Hkv = p.config.num_kv_heads;
    LAZYATTN_CHECK(o.num_qo_heads >= 1 && o.num_qo_heads % Hkv == 0, w, ": num_qo_heads ",
                   o.num_qo_heads, ", expected a positive multiple of the pool's ", Hkv,
                   " KV heads");
    LAZYATTN_CHECK(rope->device == p.device, w, ": the rope was created on device ", rope->device,
                   ", expected the pool's device ", p.device);
    LAZYATTN_CHECK(rope->policy.head_dim() == p.config.head_dim, w, ": rope head_dim ",
                   rope->policy.head_dim(), ", expected the pool's ", p.config.head_dim);
    LAZYATTN_CHECK(o.forced_splits >= 0, w, ": forced_splits ", o.forced_splits,
                   ", expected >= 0 (0: the heuristic)");
    LAZYATTN_CHECK(o.kv_splits >= 0 && o.kv_splits <= 64, w, ": kv_splits ", o.kv_splits,
                   ", expected 0 (automatic) to 64");
    LAZYATTN_CHECK(o.headroom_tokens >= 0 && o.headroom_tokens < (std::int64_t{1} << 30), w,
                   ": headroom_tokens ", o.headroom_tokens, ", expected in [0, 2^30)");
    lazyattn_plan_t* like =
        o.like ? plans().check(o.like, w, "lazyattn_plan (options.like)") : nullptr;
    LAZYATTN_CHECK(!like || (like->pool == &p && like->kind == o.kind &&
                             like->num_qo_heads == o.num_qo_heads && like->rope == rope),
                   w, ": options.like was made for another pool, kind, head count or rope");
    LAZYATTN_CHECK(num_requests >= 1, w, ": num_requests ", num_requests, ", expected >= 1");
    LAZYATTN_CHECK(segment_indptr != nullptr, w,
                   ": segment_indptr is NULL, expected num_requests + 1 offsets");
    LAZYATTN_CHECK(segment_indptr[0] == 0, w, ": segment_indptr[0] ", segment_indptr[0],
                   ", expected 0");
    for (int32_t b = 0; b < num_requests; ++b) {
      LAZYATTN_CHECK(segment_indptr[b + 1] >= segment_indptr[b], w, ": segment_indptr[", b + 1,
                     "] ", segment_indptr[b + 1], ", expected >= segment_indptr[", b, "] ",
                     segment_indptr[b]);
    }
    const std::int32_t num_segments = segment_indptr[num_requests];
    LAZYATTN_CHECK(segments != nullptr || num_segments == 0, w, ": segments is NULL, expected ",
                   num_segments, " segments");
    LAZYATTN_CHECK(o.kind == LAZYATTN_PLAN_PREFILL || num_queries == nullptr, w,
                   ": num_queries given for a decode plan, expected NULL (one query each)");

    auto plan = std::make_unique<lazyattn_plan_t>();
    plan->pool = &p;
    plan->rope = rope;
    plan->kind = o.kind;
    plan->num_qo_heads = o.num_qo_heads;
    const int G = o.num_qo_heads / Hkv;
    std::vector<RequestLayout> layouts(static_cast<std::size_t>(num_requests));
    for (int32_t b = 0; b < num_requests; ++b) {
      RequestLayout& r = layouts[static_cast<std::size_t>(b)];
      r.num_queries = num_queries ? num_queries[b] : 1;
      for (int32_t i = segment_indptr[b]; i < segment_indptr[b + 1]; ++i) {
        const lazyattn_segment& s = segments[i];
        if (s.kind == LAZYATTN_SEGMENT_DOCUMENT) {
          r.segments.push_back(Segment::document(unpack_doc(s.handle), s.length, s.start));
        } else if (s.kind == LAZYATTN_SEGMENT_TAIL) {
          r.segments.push_back(Segment::of_tail(unpack_tail(s.handle), s.length, s.start));
        } else {
          ::lazyattn::detail::throw_error(w, ": request ", b, " segment ", i - segment_indptr[b],
                                          " kind ", s.kind, ", expected 0 (document) or 1 (tail)");
        }
        plan->segments.push_back(s);
      }
    }
    plan->plan = make_plan(p.pages, std::span<const RequestLayout>(layouts));
    const Plan& pl = plan->plan;
    for (std::int32_t s = 0; s < pl.num_segments(); ++s)
      rope->policy.check_form(static_cast<StorageForm>(pl.segment_form[s]), w);

    DeviceScope scope(p.device);
    if (o.kind == LAZYATTN_PLAN_DECODE) {
      LAZYATTN_CHECK(G <= 16, w, ": GQA group size ", G, " (", o.num_qo_heads, " / ", Hkv,
                     "), expected <= 16 for decode");
      if (p.sm_count == 0) {
        p.sm_count = cuda::device_sm_count();
        p.ctas_per_sm = decode_ctas_per_sm(p.config.dtype, p.config.head_dim);
      }
      cuda::ScheduleOptions so;
      so.num_sms = p.sm_count;
      so.ctas_per_sm = p.ctas_per_sm;
      so.forced_splits = o.forced_splits;
      if (like) so.request_splits = like->schedule.request_num_splits;
      plan->schedule = cuda::make_decode_schedule(pl, Hkv, so);
    } else {
      LAZYATTN_CHECK(cuda::kPrefillRowsPerQtile % G == 0 && (G & (G - 1)) == 0, w,
                     ": GQA group size ", G, ", expected a power of two dividing ",
                     cuda::kPrefillRowsPerQtile, " for prefill");
      plan->schedule = cuda::make_prefill_schedule(pl, Hkv, G);
    }
    cuda::PlanHeadroom room;
    if (o.headroom_tokens > 0) {
      room.tiles =
          static_cast<std::int64_t>(num_requests) *
          ((o.headroom_tokens + plan->schedule.tile_keys - 1) / plan->schedule.tile_keys + 1);
      room.pages = static_cast<std::int64_t>(num_requests) *
                   ((o.headroom_tokens + p.config.page_size - 1) / p.config.page_size + 1);
    }
    plan->packed = cuda::pack_plan(pl, plan->schedule, like ? &like->packed : nullptr, room);

    // Length-dependent schedules: the requests' frequency sets after the plan's arrays.
    if (rope->policy.depends_on_length()) {
      plan->plan_rope = std::make_unique<cuda::DeviceRope>(rope->policy);
      std::vector<std::uint64_t> turns;
      std::vector<float2> cs;
      plan->plan_rope->plan_sets(pl, turns, cs);
      std::vector<std::byte>& img = plan->packed.bytes;
      // After the plan's arrays (with `like`, its image already has like's size: the same places).
      const std::size_t t_off = like ? like->rope_turns_offset : (img.size() + 15) / 16 * 16;
      const std::size_t c_off =
          like ? like->rope_cs_offset : (t_off + turns.size() * 8 + 15) / 16 * 16;
      const std::size_t end = c_off + cs.size() * sizeof(float2);
      LAZYATTN_CHECK(!like || like->packed.bytes.size() == end, w,
                     ": the plan's frequency sets do not fit where options.like's are");
      img.resize(end, std::byte{0});
      std::memcpy(img.data() + t_off, turns.data(), turns.size() * 8);
      std::memcpy(img.data() + c_off, cs.data(), cs.size() * sizeof(float2));
      plan->rope_turns_offset = t_off;
      plan->rope_cs_offset = c_off;
    }

    // The workspace: decode's split counters, partial lse and outputs; prefill's split partials.
    const std::int64_t D = p.config.head_dim;
    auto align = [](std::size_t x) { return (x + 255) / 256 * 256; };
    if (o.kind == LAZYATTN_PLAN_DECODE) {
      const std::int64_t partials = plan->schedule.num_partials;
      plan->ws_counters = 0;
      plan->ws_lse = align(static_cast<std::size_t>(num_requests) * Hkv * 4);
      plan->ws_o = align(plan->ws_lse + static_cast<std::size_t>(partials * o.num_qo_heads) * 4);
      plan->ws_bytes =
          partials > 0
              ? align(plan->ws_o + static_cast<std::size_t>(partials * o.num_qo_heads * D) * 4)
              : 0;
    } else {
      plan->kv_splits = o.kv_splits;
      plan->kv_splits_room = o.kv_splits > 0 ? o.kv_splits : prefill_max_auto_splits(*plan);
      const std::int64_t rows = static_cast<std::int64_t>(pl.num_queries()) * o.num_qo_heads;
      if (plan->kv_splits_room > 1) {
        plan->ws_lse = 0;
        plan->ws_o = align(static_cast<std::size_t>(plan->kv_splits_room * rows) * 4);
        plan->ws_bytes =
            align(plan->ws_o + static_cast<std::size_t>(plan->kv_splits_room * rows * D) * 4);
      }
    }
    LAZYATTN_CHECK(!like || like->ws_bytes >= plan->ws_bytes, w, ": the plan needs a workspace of ",
                   plan->ws_bytes, " bytes, options.like's has ", like->ws_bytes);
    if (like) {
      plan->ws_bytes = like->ws_bytes;
      plan->ws_counters = like->ws_counters;
      plan->ws_lse = like->ws_lse;
      plan->ws_o = like->ws_o;
    }
    plan->checked_epoch = p.epoch;
    plans().add(plan.get());
    *out = plan.release();
  });
}

lazyattn_status lazyattn_plan_destroy(lazyattn_plan plan) {
  return guarded("lazyattn_plan_destroy", [&] {
    if (!plan) return;
    plans().check(plan, "lazyattn_plan_destroy", "lazyattn_plan");
    // Host memory only: a kernel in flight reads the caller's copy of the image, not this.
    plans().remove(plan);
    delete plan;
  });
}

lazyattn_status lazyattn_plan_info(lazyattn_plan plan, lazyattn_plan_info_t* out) {
  const char* w = "lazyattn_plan_info";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    check_out(out, w);
    lazyattn_plan_info_t i{};
    i.bytes = static_cast<int64_t>(plan->packed.bytes.size());
    i.workspace_bytes = static_cast<int64_t>(plan->ws_bytes);
    i.num_requests = plan->plan.num_requests();
    i.num_queries = plan->plan.num_queries();
    for (std::int64_t n : plan->plan.request_kv_length) i.num_keys += n;
    i.num_work = plan->kind == LAZYATTN_PLAN_DECODE
                     ? plan->schedule.num_work()
                     : static_cast<int32_t>(plan->schedule.qtile_request.size());
    i.kv_splits = plan->kv_splits_room;
    *out = i;
  });
}

lazyattn_status lazyattn_plan_pack(lazyattn_plan plan, void* dst, int64_t dst_bytes) {
  const char* w = "lazyattn_plan_pack";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    const std::size_t n = plan->packed.bytes.size();
    LAZYATTN_CHECK(dst != nullptr && dst_bytes >= static_cast<int64_t>(n), w, ": dst of ",
                   dst_bytes, " bytes, expected at least the plan's ", n);
    std::memcpy(dst, plan->packed.bytes.data(), n);
  });
}

lazyattn_status lazyattn_plan_valid(lazyattn_plan plan, int32_t* valid) {
  const char* w = "lazyattn_plan_valid";
  return guarded(w, [&] {
    plans().check(plan, w, "lazyattn_plan");
    pools().check(plan->pool, w, "the plan's lazyattn_pool");
    check_out(valid, w);
    try {
      check_plan_current(*plan, w);
      *valid = 1;
    } catch (const Error&) {
      *valid = 0;
    }
  });
}

}  // extern "C"
