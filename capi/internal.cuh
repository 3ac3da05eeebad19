// What the C ABI's translation units share: the objects behind the opaque handles, the registry
// that tells a live handle from a destroyed one, the boundary that turns exceptions into status
// codes, and the checks of device pointers. Not installed; not part of the ABI.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/packed_plan.hpp"
#include "lazyattn/detail/splitmix.hpp"
#include "lazyattn/lazyattn.hpp"
#include "lazyattn_c.h"

namespace lazyattn::capi {

std::string& last_error_text();

// LAZYATTN_CUDA_CHECK's message reads "<file>:<line>: <call> failed: cudaErrorX (...)": that is
// how a CUDA failure is told apart from a bad value (both are lazyattn::Error).
inline bool is_cuda_failure(std::string_view message) {
  return message.find(" failed: cuda") != std::string_view::npos;
}

// Runs f, turning whatever it throws into a status and the thread's last error message, prefixed
// with the entry point's name.
template <class F>
lazyattn_status guarded(const char* where, F&& f) noexcept {
  auto set = [&](std::string_view m) {
    try {
      last_error_text() =
          m.starts_with(where) ? std::string(m) : std::string(where) + ": " + std::string(m);
    } catch (...) {
    }
  };
  try {
    f();
    return LAZYATTN_OK;
  } catch (const Error& e) {
    set(e.what());
    return is_cuda_failure(e.what()) ? LAZYATTN_ERROR_CUDA : LAZYATTN_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    set("out of host memory");
    return LAZYATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set(std::string("internal error: ") + e.what());
    return LAZYATTN_ERROR_INTERNAL;
  } catch (...) {
    set("internal error: unknown exception");
    return LAZYATTN_ERROR_INTERNAL;
  }
}

// The live objects of one kind: a handle is dereferenced only once found here, so a destroyed
// (or never created) handle is an error, not a crash.
template <class T>
class Registry {
 public:
  void add(T* p) {
    std::lock_guard lock(mu_);
    live_.insert(p);
  }
  void remove(T* p) {
    std::lock_guard lock(mu_);
    live_.erase(p);
  }
  T* check(T* p, const char* where, const char* name) const {
    LAZYATTN_CHECK(p != nullptr, where, ": ", name, " is NULL, expected a handle from ", name,
                   "_create");
    std::lock_guard lock(mu_);
    LAZYATTN_CHECK(live_.count(p) == 1, where, ": ", name, " ", static_cast<const void*>(p),
                   " is not a live handle (destroyed, or never created), expected one from ", name,
                   "_create");
    return p;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_set<T*> live_;
};

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

// A device (or managed) pointer on `device`, aligned to `align` bytes.
void check_device_pointer(const void* p, int device, std::size_t align, const char* where,
                          const char* name);

}  // namespace lazyattn::capi

struct lazyattn_rope_t {
  int device;
  lazyattn::RopePolicy policy;
  lazyattn::cuda::DeviceRope device_rope;  // the shared set (none for length-dependent ones)

  lazyattn_rope_t(int d, const lazyattn::RopePolicy& p) : device(d), policy(p), device_rope(p) {}
};

struct lazyattn_pool_t {
  int device;
  lazyattn::KvStoreConfig config;  // pages.config(), the geometry of the caller's K/V pools
  // The page bookkeeping (documents, dedupe, pins, eviction, tails) of the K/V pools the caller
  // keeps in device buffers: KvBookkeeping alone, no host copy of the pages.
  lazyattn::KvBookkeeping pages;
  // Mixed into every 64-bit handle the pool gives (see pack_handle): a splitmix64 of the
  // bookkeeping's store id.
  std::uint64_t handle_salt = 0;
  // Bumped by every call that may change a document's or tail's pages: a plan checks its
  // sources again only when this moved since it last did.
  std::uint64_t epoch = 0;
  int sm_count = 0;     // the device's, read at the first plan
  int ctas_per_sm = 0;  // decode CTAs per SM for the pool's dtype and head dim

  lazyattn_pool_t(int d, const lazyattn::KvStoreConfig& c)
      : device(d), config(c), pages(c), handle_salt(salt_of(pages.id())) {}

  static std::uint64_t salt_of(std::uint64_t id) {
    return lazyattn::detail::splitmix64_mix(id + lazyattn::detail::kGoldenGamma);
  }
};

// Where a plan's launches find their pieces in the caller's buffers.
struct lazyattn_plan_t {
  lazyattn_pool_t* pool = nullptr;
  lazyattn_rope_t* rope = nullptr;
  std::int32_t kind = LAZYATTN_PLAN_DECODE;
  std::int32_t num_qo_heads = 0;
  lazyattn::Plan plan;
  lazyattn::cuda::DecodeSchedule schedule;
  lazyattn::cuda::PackedPlan packed;  // its image: plan, schedule, then rope sets if any
  // Length-dependent schedules: the requests' frequency sets inside the image, and a DeviceRope
  // that reads them there at each launch.
  std::size_t rope_turns_offset = 0;
  std::size_t rope_cs_offset = 0;
  std::unique_ptr<lazyattn::cuda::DeviceRope> plan_rope;
  // The split-KV workspace: byte offsets of its parts and its size.
  std::size_t ws_counters = 0, ws_lse = 0, ws_o = 0, ws_bytes = 0;
  // prefill over raw-form segments: the Hopper kernel's rotated K (byte offset, 16-bit elements)
  std::size_t ws_k = 0;
  std::int64_t ws_k_elems = 0;
  std::int32_t kv_splits = 0;       // prefill: what launches ask for (0: automatic)
  std::int32_t kv_splits_room = 1;  // prefill: splits the workspace holds
  // The pool's epoch when the plan's sources (plan.sources) were last found current.
  std::uint64_t checked_epoch = 0;
};

namespace lazyattn::capi {

Registry<lazyattn_pool_t>& pools();
Registry<lazyattn_rope_t>& ropes();
Registry<lazyattn_plan_t>& plans();

// A non-null output pointer, and a live pool.
template <class T>
void check_out(const T* out, const char* where) {
  LAZYATTN_CHECK(out != nullptr, where, ": the output pointer is NULL");
}
inline lazyattn_pool_t& pool_of(lazyattn_pool p, const char* where) {
  return *pools().check(p, where, "lazyattn_pool");
}

// The 64-bit handles of the C ABI: slot and generation, XORed with the pool's salt. The C++
// handles' third part, the store id, does not fit; the salt stands in for it: another pool's
// handle unpacks to a slot and generation of this pool only by a 2^-64 chance (its slot almost
// always names no slot here), so it is refused, as a stale one is.
inline std::uint64_t pack_handle(const lazyattn_pool_t& pool, std::uint32_t slot,
                                 std::uint32_t generation) {
  return ((static_cast<std::uint64_t>(generation) << 32) | slot) ^ pool.handle_salt;
}
inline std::uint64_t pack_handle(const lazyattn_pool_t& pool, DocHandle h) {
  return pack_handle(pool, h.slot, h.generation);
}
inline std::uint64_t pack_handle(const lazyattn_pool_t& pool, TailHandle h) {
  return pack_handle(pool, h.slot, h.generation);
}
inline DocHandle unpack_doc(const lazyattn_pool_t& pool, lazyattn_doc h) {
  const std::uint64_t v = h ^ pool.handle_salt;
  return DocHandle{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32),
                   pool.pages.id()};
}
inline TailHandle unpack_tail(const lazyattn_pool_t& pool, lazyattn_tail h) {
  const std::uint64_t v = h ^ pool.handle_salt;
  return TailHandle{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32),
                    pool.pages.id()};
}

// Throws unless the plan's pages are still its own (check_plan_current in kv/plan.hpp) and every
// tail it read has the length it had then (the pool's epoch short-cuts both).
void check_plan_current(lazyattn_plan_t& plan, const char* where);

// Kernel-side helpers the host translation units call (each defined in the unit that holds the
// kernels, so those are instantiated once).
int decode_ctas_per_sm(DType dtype, int head_dim);
// The most key-range splits automatic prefill would take for this plan, over both RoPE settings.
int prefill_max_auto_splits(const lazyattn_plan_t& plan);
// 16-bit elements of tile scratch a prefill plan's workspace holds (cuda::prefill_tile_elems with
// RoPE on, where the Hopper kernel takes the plan; else 0).
std::int64_t prefill_tile_elems(const lazyattn_plan_t& plan);

}  // namespace lazyattn::capi
