// The store's input checks, shared by KvBookkeeping and KvStore: the configuration (the geometry
// its page ids index, and the byte size of pools of that geometry), storage forms and token
// counts. Each throws lazyattn::Error naming the value and what was expected.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/types.hpp"
#include "lazyattn/rope/types.hpp"

namespace lazyattn {

// The geometry of a valid configuration. The K/V pools' byte size must fit in int64: it is
// checked factor by factor, since an overflow would size the pools too small and every later
// offset would run past them (also for pools the caller allocates from this geometry).
inline PoolGeometry check_config(const KvStoreConfig& c) {
  const char* w = "KvStore";
  LAZYATTN_CHECK(c.num_layers >= 1, w, ": num_layers ", c.num_layers, ", expected >= 1");
  LAZYATTN_CHECK(c.num_kv_heads >= 1, w, ": num_kv_heads ", c.num_kv_heads, ", expected >= 1");
  LAZYATTN_CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.head_dim <= 1024, w, ": head_dim ",
                 c.head_dim, ", expected an even number in [2, 1024]");
  LAZYATTN_CHECK(c.page_size >= 1 && c.page_size <= 1024 && (c.page_size & (c.page_size - 1)) == 0,
                 w, ": page_size ", c.page_size, ", expected a power of two in [1, 1024]");
  LAZYATTN_CHECK(c.num_pages >= 1 && c.num_pages <= std::numeric_limits<int>::max(), w,
                 ": num_pages ", c.num_pages, ", expected in [1, 2^31 - 1]");
  LAZYATTN_CHECK(c.dtype == DType::kFloat32 || c.dtype == DType::kFloat16 ||
                     c.dtype == DType::kBFloat16 || c.dtype == DType::kFloat8E4M3,
                 w, ": dtype ", static_cast<int>(c.dtype),
                 ", expected float32, float16, bfloat16 or float8_e4m3");
  const std::size_t scales = static_cast<std::size_t>(c.num_layers) *
                             static_cast<std::size_t>(c.num_kv_heads);
  using Scales = std::pair<const char*, const std::vector<float>*>;
  for (const auto& [name, scale] : {Scales{"k_scale", &c.k_scale}, Scales{"v_scale", &c.v_scale}}) {
    const std::vector<float>& v = *scale;
    if (c.dtype != DType::kFloat8E4M3) {
      LAZYATTN_CHECK(v.empty(), w, ": ", name, " has ", v.size(), " entries for a ",
                     to_string(c.dtype), " pool, expected none (scales are for float8_e4m3 pools)");
      continue;
    }
    LAZYATTN_CHECK(v.empty() || v.size() == scales, w, ": ", name, " has ", v.size(),
                   " entries, expected none (all 1) or num_layers ", c.num_layers,
                   " x num_kv_heads ", c.num_kv_heads, " = ", scales);
    for (std::size_t i = 0; i < v.size(); ++i)
      LAZYATTN_CHECK(std::isfinite(v[i]) && v[i] > 0.0f, w, ": ", name, "[", i, "] (layer ",
                     i / static_cast<std::size_t>(c.num_kv_heads), ", KV head ",
                     i % static_cast<std::size_t>(c.num_kv_heads), ") is ", v[i],
                     ", expected a finite positive scale");
  }
  LAZYATTN_CHECK(c.eviction == EvictionPolicy::kLru || c.eviction == EvictionPolicy::kSegmentedLru,
                 w, ": eviction ", static_cast<int>(c.eviction),
                 ", expected lru (0) or segmented_lru (1)");
  std::int64_t bytes = 1;
  for (std::int64_t f :
       {std::int64_t{c.num_layers}, c.num_pages, std::int64_t{c.num_kv_heads},
        std::int64_t{c.page_size}, std::int64_t{c.head_dim}, std::int64_t{size_of(c.dtype)}}) {
    LAZYATTN_CHECK(!__builtin_mul_overflow(bytes, f, &bytes), w, ": a pool of num_layers ",
                   c.num_layers, " x num_pages ", c.num_pages, " x num_kv_heads ", c.num_kv_heads,
                   " x page_size ", c.page_size, " x head_dim ", c.head_dim, " x ",
                   size_of(c.dtype), " bytes overflows int64, expected fewer pages");
  }
  return PoolGeometry{c.num_layers, c.num_kv_heads, c.head_dim, c.page_size, c.num_pages};
}

namespace detail {

// Lengths are int32 where plans store them.
inline constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();

// Documents are raw or local; a tail may also be absolute (K rotated at its logical positions).
inline void check_storage_form(const char* where, StorageForm form, bool tail = false) {
  if (tail && form == StorageForm::kAbsolute) return;
  LAZYATTN_CHECK(form == StorageForm::kRaw || form == StorageForm::kLocal, where, ": storage form ",
                 static_cast<int>(form), ", expected raw (0) or local (1)",
                 tail ? " or absolute (2)" : " (absolute form is for tails only)");
}

// A token count: at least one, at most what a length can hold.
inline void check_token_count(const char* where, const char* name, std::int64_t n) {
  LAZYATTN_CHECK(n >= 1 && n <= kMaxTokens, where, ": ", name, " ", n,
                 ", expected in [1, 2^31 - 1]");
}

}  // namespace detail
}  // namespace lazyattn
