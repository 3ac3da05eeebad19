// lazyattn's C ABI (lazyattn_c.h): opaque handles over DevicePool, DeviceRope, DevicePlan and
// cuda::decode; every entry catches at the boundary and turns exceptions into status codes.
#include "lazyattn_c.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/decode.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/page_write.cuh"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/lazyattn.hpp"

namespace {

using namespace lazyattn;

std::string& last_error_text() {
  thread_local std::string text;
  return text;
}

// LAZYATTN_CUDA_CHECK's message reads "<file>:<line>: <call> failed: cudaErrorX (...)": that is
// how a CUDA failure is told apart from a bad value (both are lazyattn::Error).
bool is_cuda_failure(std::string_view message) {
  return message.find(" failed: cuda") != std::string_view::npos;
}

// Runs f, turning whatever it throws into a status and the thread's last error message, prefixed
// with the entry point's name.
template <class F>
lazyattn_status guarded(const char* where, F&& f) noexcept {
  try {
    f();
    return LAZYATTN_OK;
  } catch (const Error& e) {
    std::string_view m = e.what();
    // Messages raised in this file already start with the entry point's name.
    try {
      last_error_text() =
          m.starts_with(where) ? std::string(m) : std::string(where) + ": " + e.what();
    } catch (...) {
    }
    return is_cuda_failure(m) ? LAZYATTN_ERROR_CUDA : LAZYATTN_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    try {
      last_error_text() = std::string(where) + ": out of host memory";
    } catch (...) {
    }
    return LAZYATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    try {
      last_error_text() = std::string(where) + ": internal error: " + e.what();
    } catch (...) {
    }
    return LAZYATTN_ERROR_INTERNAL;
  } catch (...) {
    try {
      last_error_text() = std::string(where) + ": internal error: unknown exception";
    } catch (...) {
    }
    return LAZYATTN_ERROR_INTERNAL;
  }
}

// Makes `device` current for the scope and restores the caller's device after (torch, say, keeps
// its own notion of the current device).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    LAZYATTN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LAZYATTN_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

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

// A device (or managed) pointer on `device`, aligned to its element size.
void check_device_pointer(const void* p, int device, std::size_t align, const char* where,
                          const char* name) {
  LAZYATTN_CHECK(p != nullptr, where, ": ", name, " is NULL, expected a device pointer");
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so later calls do not see it
    detail::throw_error(where, ": ", name, " ", p, " is not a pointer CUDA knows (",
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

std::uint64_t pack(std::uint32_t slot, std::uint32_t generation) {
  return (static_cast<std::uint64_t>(generation) << 32) | slot;
}
DocHandle unpack_doc(lazyattn_doc h) {
  return DocHandle{static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}
TailHandle unpack_tail(lazyattn_tail h) {
  return TailHandle{static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32)};
}

StorageForm checked_form(std::int32_t form, const char* where) {
  LAZYATTN_CHECK(form == LAZYATTN_FORM_RAW || form == LAZYATTN_FORM_LOCAL, where, ": form ", form,
                 ", expected 0 (raw) or 1 (local)");
  return static_cast<StorageForm>(form);
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

struct lazyattn_rope_t {
  int device;
  RopePolicy policy;
  cuda::DeviceRope device_rope;

  lazyattn_rope_t(int d, const RopePolicy& p) : device(d), policy(p), device_rope(p) {}
};

struct lazyattn_pool_t {
  int device;
  KvStoreConfig config;
  // The page bookkeeping (documents, dedupe, pins, eviction, tails) is the host KvStore's; its K/V
  // live only in `pool`. The store keeps the page size and page count, which is all plans read,
  // and shrinks its own element geometry to one head of two bf16 dims per slot, so its host pool
  // costs 4 bytes a token instead of a second copy of the device pool.
  KvStore pages;
  cuda::DevicePool pool;
  int sm_count = 0;
  int ctas_per_sm = 0;
  std::unique_ptr<cuda::DeviceRope> plain_rope;  // raw-form writes and RoPE-off decodes without one

  // write_tokens reads destinations from device memory: packed on the host into pinned staging,
  // one async copy, then the kernel. `scratch_free` is recorded after the kernel: the next write
  // waits on it (host side) before it reuses either buffer.
  std::mutex write_mutex;
  void* staging = nullptr;
  std::size_t staging_bytes = 0;
  cuda::DeviceBuffer<std::byte> scratch;
  cudaEvent_t scratch_free = nullptr;

  static KvStoreConfig bookkeeping_config(const KvStoreConfig& c) {
    KvStoreConfig b = c;
    b.num_layers = 1;
    b.num_kv_heads = 1;
    b.head_dim = 2;
    b.dtype = DType::kBFloat16;
    return b;
  }

  lazyattn_pool_t(int d, const KvStoreConfig& c)
      : device(d), config(c), pages(bookkeeping_config(c)), pool(c) {
    sm_count = cuda::device_sm_count();
    ctas_per_sm = cuda::decode_ctas_per_sm(c.dtype, c.head_dim);
  }
  ~lazyattn_pool_t() {
    if (scratch_free) {
      cudaEventSynchronize(scratch_free);
      cudaEventDestroy(scratch_free);
    }
    if (staging) cudaFreeHost(staging);
  }

  const cuda::DeviceRope& rope_or_plain(lazyattn_rope_t* rope, const char* where) {
    if (rope) {
      LAZYATTN_CHECK(rope->device == device, where, ": the rope was created on device ",
                     rope->device, ", expected the pool's device ", device);
      return rope->device_rope;
    }
    if (!plain_rope) {
      RopeConfig rc;
      rc.head_dim = config.head_dim;
      plain_rope = std::make_unique<cuda::DeviceRope>(RopePolicy(rc));
    }
    return *plain_rope;
  }

  // Writes tokens [first, first + n) of a page list (a document or tail of `length` tokens) into
  // one layer; local form rotates K at each token's index in the list.
  void write(lazyattn_rope_t* rope, std::span<const std::int32_t> page_list, std::int64_t length,
             StorageForm form, std::int32_t layer, std::int64_t first, std::int64_t n,
             const void* k, const void* v, cudaStream_t stream, const char* where) {
    LAZYATTN_CHECK(layer >= 0 && layer < config.num_layers, where, ": layer ", layer,
                   ", expected in [0, ", config.num_layers, ")");
    LAZYATTN_CHECK(first >= 0 && n >= 0 && first <= length && n <= length - first, where,
                   ": tokens [", first, ", ", first + n, "), expected within [0, ", length,
                   ") (the document's or the reserved tail's length)");
    if (n == 0) return;
    LAZYATTN_CHECK(form == StorageForm::kRaw || rope != nullptr, where,
                   ": rope is NULL, expected a rope for local form (K is rotated on the way)");
    const std::size_t es = static_cast<std::size_t>(size_of(config.dtype));
    check_device_pointer(k, device, es, where, "k");
    check_device_pointer(v, device, es, where, "v");
    const cuda::DeviceRope& drope = rope_or_plain(rope, where);
    cuda::TokenDestinations dst =
        cuda::token_destinations(page_list, config.page_size, first, n, form);

    std::lock_guard lock(write_mutex);
    const std::size_t count = static_cast<std::size_t>(n);
    const std::size_t pos_offset = (2 * count * sizeof(std::int32_t) + 15) / 16 * 16;
    const std::size_t bytes = pos_offset + dst.rotate_position.size() * sizeof(std::int64_t);
    if (scratch_free)
      LAZYATTN_CUDA_CHECK(cudaEventSynchronize(scratch_free));
    else
      LAZYATTN_CUDA_CHECK(cudaEventCreateWithFlags(&scratch_free, cudaEventDisableTiming));
    if (bytes > staging_bytes) {
      if (staging) LAZYATTN_CUDA_CHECK(cudaFreeHost(staging));
      staging = nullptr;
      staging_bytes = 0;
      LAZYATTN_CUDA_CHECK(cudaMallocHost(&staging, bytes));
      staging_bytes = bytes;
    }
    scratch.reserve(bytes);
    auto* h = static_cast<std::byte*>(staging);
    std::memcpy(h, dst.page.data(), count * sizeof(std::int32_t));
    std::memcpy(h + count * sizeof(std::int32_t), dst.slot.data(), count * sizeof(std::int32_t));
    if (!dst.rotate_position.empty())
      std::memcpy(h + pos_offset, dst.rotate_position.data(), count * sizeof(std::int64_t));
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(scratch.data(), staging, bytes, cudaMemcpyHostToDevice, stream));
    const auto* d_page = reinterpret_cast<const std::int32_t*>(scratch.data());
    const auto* d_slot = d_page + count;
    const auto* d_pos = dst.rotate_position.empty()
                            ? nullptr
                            : reinterpret_cast<const std::int64_t*>(scratch.data() + pos_offset);
    try {
      cuda::write_tokens(pool, layer, k, v, static_cast<std::int32_t>(n), d_page, d_slot, d_pos,
                         drope, stream);
    } catch (...) {
      cudaEventRecord(scratch_free, stream);  // the copy above still reads the staging buffer
      throw;
    }
    LAZYATTN_CUDA_CHECK(cudaEventRecord(scratch_free, stream));
  }
};

struct lazyattn_plan_t {
  lazyattn_pool_t* pool = nullptr;  // compared, never dereferenced once the plan exists
  int device = 0;
  lazyattn_rope_t* rope_source = nullptr;      // the rope the plan's own frequency sets come from
  std::unique_ptr<cuda::DeviceRope> own_rope;  // length-dependent schedules only
  cuda::DevicePlan device_plan;
  // The split-KV partial states are the plan's own, so that plans of different pools or layers
  // may run on different streams; one plan runs on one stream at a time. Grows on first use.
  cuda::DecodeWorkspace workspace;
  std::int32_t num_requests = 0;
  std::int64_t num_keys = 0;
  std::int32_t num_work = 0;
};

namespace {

template <class T>
void check_handle(const T* h, const char* where, const char* name) {
  LAZYATTN_CHECK(h != nullptr, where, ": ", name, " is NULL, expected a handle from ", name,
                 "_create");
}
template <class T>
void check_out(const T* out, const char* where) {
  LAZYATTN_CHECK(out != nullptr, where, ": the output pointer is NULL");
}

}  // namespace

extern "C" {

const char* lazyattn_last_error(void) { return last_error_text().c_str(); }

int lazyattn_abi_version(void) { return LAZYATTN_C_ABI_VERSION; }

// ---- pool ---------------------------------------------------------------------------------------

lazyattn_status lazyattn_pool_create(int32_t num_layers, int32_t num_kv_heads, int32_t head_dim,
                                     int32_t page_size, int32_t dtype, int64_t num_pages,
                                     lazyattn_pool* out) {
  const char* w = "lazyattn_pool_create";
  return guarded(w, [&] {
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(dtype == LAZYATTN_DTYPE_FLOAT16 || dtype == LAZYATTN_DTYPE_BFLOAT16, w,
                   ": dtype ", dtype, ", expected 1 (float16) or 2 (bfloat16)");
    KvStoreConfig c{num_layers, num_kv_heads, head_dim, page_size, static_cast<DType>(dtype),
                    num_pages};
    int device = 0;
    LAZYATTN_CUDA_CHECK(cudaGetDevice(&device));
    *out = new lazyattn_pool_t(device, c);
  });
}

lazyattn_status lazyattn_pool_destroy(lazyattn_pool pool) {
  return guarded("lazyattn_pool_destroy", [&] {
    if (!pool) return;
    DeviceScope scope(pool->device);
    delete pool;
  });
}

lazyattn_status lazyattn_pool_stats_get(lazyattn_pool pool, lazyattn_pool_stats* out) {
  const char* w = "lazyattn_pool_stats_get";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    check_out(out, w);
    KvStoreStats s = pool->pages.stats();
    *out = lazyattn_pool_stats{s.pages_total, s.pages_in_use, s.documents, s.pinned_documents,
                               s.tails,       s.evictions,    s.dedupes};
  });
}

// ---- RoPE ---------------------------------------------------------------------------------------

lazyattn_status lazyattn_rope_create_json(const char* config_json, lazyattn_rope* out) {
  const char* w = "lazyattn_rope_create_json";
  return guarded(w, [&] {
    check_out(out, w);
    *out = nullptr;
    LAZYATTN_CHECK(config_json != nullptr, w, ": config_json is NULL, expected JSON text");
    RopePolicy policy = rope_policy_from_json(config_json);
    int device = 0;
    LAZYATTN_CUDA_CHECK(cudaGetDevice(&device));
    *out = new lazyattn_rope_t(device, policy);
  });
}

lazyattn_status lazyattn_rope_destroy(lazyattn_rope rope) {
  return guarded("lazyattn_rope_destroy", [&] {
    if (!rope) return;
    DeviceScope scope(rope->device);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());  // a pending kernel may still read its tables
    delete rope;
  });
}

lazyattn_status lazyattn_rope_info(lazyattn_rope rope, int32_t* head_dim, int32_t* rotary_dim,
                                   int32_t* depends_on_length) {
  const char* w = "lazyattn_rope_info";
  return guarded(w, [&] {
    check_handle(rope, w, "lazyattn_rope");
    if (head_dim) *head_dim = rope->policy.head_dim();
    if (rotary_dim) *rotary_dim = rope->policy.rotary_dim();
    if (depends_on_length) *depends_on_length = rope->policy.depends_on_length() ? 1 : 0;
  });
}

// ---- documents ----------------------------------------------------------------------------------

lazyattn_status lazyattn_doc_allocate(lazyattn_pool pool, uint64_t key_hi, uint64_t key_lo,
                                      int32_t form, int64_t length, lazyattn_doc* out,
                                      int32_t* inserted) {
  const char* w = "lazyattn_doc_allocate";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    check_out(out, w);
    InsertResult r = pool->pages.allocate(DocKey{key_hi, key_lo}, checked_form(form, w), length);
    *out = pack(r.handle.slot, r.handle.generation);
    if (inserted) *inserted = r.inserted ? 1 : 0;
  });
}

lazyattn_status lazyattn_doc_write(lazyattn_pool pool, lazyattn_rope rope, lazyattn_doc doc,
                                   int32_t layer, int64_t first, int64_t num_tokens, const void* k,
                                   const void* v, void* stream) {
  const char* w = "lazyattn_doc_write";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    DeviceScope scope(pool->device);
    DocInfo info = pool->pages.info(unpack_doc(doc));
    pool->write(rope, info.pages, info.length, info.form, layer, first, num_tokens, k, v,
                as_stream(stream), w);
  });
}

lazyattn_status lazyattn_doc_commit(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_commit";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    pool->pages.commit(unpack_doc(doc));
  });
}

lazyattn_status lazyattn_doc_pin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_pin";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    pool->pages.pin(unpack_doc(doc));
  });
}

lazyattn_status lazyattn_doc_unpin(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_unpin";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    pool->pages.unpin(unpack_doc(doc));
  });
}

lazyattn_status lazyattn_doc_erase(lazyattn_pool pool, lazyattn_doc doc) {
  const char* w = "lazyattn_doc_erase";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    pool->pages.erase(unpack_doc(doc));
  });
}

lazyattn_status lazyattn_doc_info(lazyattn_pool pool, lazyattn_doc doc, int64_t* length,
                                  int32_t* form, int32_t* committed) {
  const char* w = "lazyattn_doc_info";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    DocInfo info = pool->pages.info(unpack_doc(doc));
    if (length) *length = info.length;
    if (form) *form = static_cast<int32_t>(info.form);
    if (committed) *committed = info.committed ? 1 : 0;
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
    check_handle(pool, w, "lazyattn_pool");
    check_out(out, w);
    TailHandle t = pool->pages.create_tail(checked_form(form, w));
    *out = pack(t.slot, t.generation);
  });
}

lazyattn_status lazyattn_tail_reserve(lazyattn_pool pool, lazyattn_tail tail, int64_t n,
                                      int64_t* first) {
  const char* w = "lazyattn_tail_reserve";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    std::int64_t f = pool->pages.reserve(unpack_tail(tail), n);
    if (first) *first = f;
  });
}

lazyattn_status lazyattn_tail_write(lazyattn_pool pool, lazyattn_rope rope, lazyattn_tail tail,
                                    int32_t layer, int64_t first, int64_t num_tokens, const void* k,
                                    const void* v, void* stream) {
  const char* w = "lazyattn_tail_write";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    DeviceScope scope(pool->device);
    TailInfo info = pool->pages.info(unpack_tail(tail));
    pool->write(rope, info.pages, info.length, info.form, layer, first, num_tokens, k, v,
                as_stream(stream), w);
  });
}

lazyattn_status lazyattn_tail_release(lazyattn_pool pool, lazyattn_tail tail) {
  const char* w = "lazyattn_tail_release";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    pool->pages.release(unpack_tail(tail));
  });
}

lazyattn_status lazyattn_tail_info(lazyattn_pool pool, lazyattn_tail tail, int64_t* length,
                                   int32_t* form) {
  const char* w = "lazyattn_tail_info";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    TailInfo info = pool->pages.info(unpack_tail(tail));
    if (length) *length = info.length;
    if (form) *form = static_cast<int32_t>(info.form);
  });
}

// ---- plans --------------------------------------------------------------------------------------

lazyattn_status lazyattn_plan_create(lazyattn_pool pool, lazyattn_rope rope,
                                     const lazyattn_segment* segments,
                                     const int32_t* segment_indptr, int32_t num_requests,
                                     int32_t forced_splits, void* stream, lazyattn_plan* out) {
  const char* w = "lazyattn_plan_create";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    check_out(out, w);
    *out = nullptr;
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
    LAZYATTN_CHECK(segments != nullptr || segment_indptr[num_requests] == 0, w,
                   ": segments is NULL, expected ", segment_indptr[num_requests], " segments");
    LAZYATTN_CHECK(forced_splits >= 0, w, ": forced_splits ", forced_splits,
                   ", expected >= 0 (0: the heuristic)");
    DeviceScope scope(pool->device);
    std::vector<RequestLayout> layouts(static_cast<std::size_t>(num_requests));
    for (int32_t b = 0; b < num_requests; ++b) {
      RequestLayout& r = layouts[static_cast<std::size_t>(b)];
      r.num_queries = 1;
      for (int32_t i = segment_indptr[b]; i < segment_indptr[b + 1]; ++i) {
        const lazyattn_segment& s = segments[i];
        if (s.kind == LAZYATTN_SEGMENT_DOCUMENT) {
          r.segments.push_back(Segment::document(unpack_doc(s.handle), s.length, s.start));
        } else if (s.kind == LAZYATTN_SEGMENT_TAIL) {
          r.segments.push_back(Segment::of_tail(unpack_tail(s.handle), s.length, s.start));
        } else {
          detail::throw_error(w, ": request ", b, " segment ", i - segment_indptr[b], " kind ",
                              s.kind, ", expected 0 (document) or 1 (tail)");
        }
      }
    }
    Plan plan = make_plan(pool->pages, std::span<const RequestLayout>(layouts));
    auto handle = std::make_unique<lazyattn_plan_t>();
    handle->pool = pool;
    handle->device = pool->device;
    if (rope) {
      LAZYATTN_CHECK(rope->device == pool->device, w, ": the rope was created on device ",
                     rope->device, ", expected the pool's device ", pool->device);
      if (rope->policy.depends_on_length()) {
        handle->own_rope = std::make_unique<cuda::DeviceRope>(rope->policy);
        handle->own_rope->prepare(plan, as_stream(stream));
        handle->rope_source = rope;
      }
    }
    cuda::ScheduleOptions opt;
    opt.num_sms = pool->sm_count;
    opt.ctas_per_sm = pool->ctas_per_sm;
    opt.forced_splits = forced_splits;
    cuda::DecodeSchedule schedule =
        cuda::make_decode_schedule(plan, pool->config.num_kv_heads, opt);
    handle->device_plan.upload(plan, schedule, as_stream(stream));
    handle->num_requests = plan.num_requests();
    for (std::int64_t n : plan.request_kv_length) handle->num_keys += n;
    handle->num_work = schedule.num_work();
    *out = handle.release();
  });
}

lazyattn_status lazyattn_plan_destroy(lazyattn_plan plan) {
  return guarded("lazyattn_plan_destroy", [&] {
    if (!plan) return;
    DeviceScope scope(plan->device);
    // Its device buffers may still be read by a kernel in flight on any stream.
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    delete plan;
  });
}

lazyattn_status lazyattn_plan_info(lazyattn_plan plan, int32_t* num_requests, int64_t* num_keys,
                                   int32_t* num_work) {
  const char* w = "lazyattn_plan_info";
  return guarded(w, [&] {
    check_handle(plan, w, "lazyattn_plan");
    if (num_requests) *num_requests = plan->num_requests;
    if (num_keys) *num_keys = plan->num_keys;
    if (num_work) *num_work = plan->num_work;
  });
}

// ---- decode -------------------------------------------------------------------------------------

lazyattn_status lazyattn_decode(lazyattn_pool pool, lazyattn_plan plan, lazyattn_rope rope,
                                int32_t layer, int32_t num_requests, int32_t num_qo_heads,
                                double softmax_scale, int32_t apply_rope, const void* q, void* o,
                                float* maybe_lse, void* stream) {
  const char* w = "lazyattn_decode";
  return guarded(w, [&] {
    check_handle(pool, w, "lazyattn_pool");
    check_handle(plan, w, "lazyattn_plan");
    LAZYATTN_CHECK(plan->pool == pool, w, ": the plan was made for another pool");
    LAZYATTN_CHECK(num_requests == plan->num_requests, w, ": num_requests ", num_requests,
                   " (rows of q), expected the plan's ", plan->num_requests);
    LAZYATTN_CHECK(layer >= 0 && layer < pool->config.num_layers, w, ": layer ", layer,
                   ", expected in [0, ", pool->config.num_layers, ")");
    LAZYATTN_CHECK(apply_rope == 0 || apply_rope == 1, w, ": apply_rope ", apply_rope,
                   ", expected 0 or 1");
    LAZYATTN_CHECK(apply_rope == 0 || rope != nullptr, w,
                   ": rope is NULL, expected a rope (apply_rope is 1)");
    DeviceScope scope(pool->device);
    const std::size_t es = static_cast<std::size_t>(size_of(pool->config.dtype));
    check_device_pointer(q, pool->device, es, w, "q");
    check_device_pointer(o, pool->device, es, w, "o");
    if (maybe_lse) check_device_pointer(maybe_lse, pool->device, sizeof(float), w, "lse");

    const cuda::DeviceRope* drope = &pool->rope_or_plain(rope, w);
    if (apply_rope && rope->policy.depends_on_length()) {
      LAZYATTN_CHECK(plan->rope_source == rope, w, ": rope_type ",
                     to_string(rope->policy.rope_type()),
                     " depends on the request length, expected the rope the plan was created "
                     "with (its frequency sets are per plan)");
      drope = plan->own_rope.get();
    }
    cuda::DecodeArgs args;
    args.dtype = pool->config.dtype;
    args.q = q;
    args.o = o;
    args.maybe_lse = maybe_lse;
    args.layer = layer;
    args.params = AttentionParams{num_qo_heads, pool->config.num_kv_heads, pool->config.head_dim,
                                  softmax_scale, 0.0};
    args.rope = apply_rope != 0;
    cuda::decode(args, pool->pool, plan->device_plan, *drope, plan->workspace, as_stream(stream));
  });
}

}  // extern "C"
