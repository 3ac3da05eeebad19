// KvStore: the position-free paged KV store in host memory. Documents are stored once under a
// content key, in raw or local form, and shared by every request that places them, at any
// position; requests append their own tokens to private tails. The bookkeeping (documents, pins,
// eviction, tails, handles, statistics) is KvBookkeeping's (bookkeeping.hpp); this adds the K and V
// pools its page ids index, and the calls that copy tokens into them. A device mirror reuses the
// same page ids.
//
// Thread safety: as KvBookkeeping's; the pool pointers read only what the constructor fixed. Page
// contents are written only while a page is being filled (insert and append, under the mutex, or
// the caller between allocate and commit), and a pinned document's pages are never reused, so a
// thread may read the pages of a committed document it has pinned (or of its own tail) through
// the pool pointers without holding anything.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/bookkeeping.hpp"
#include "lazyattn/kv/checks.hpp"
#include "lazyattn/kv/doc_key.hpp"
#include "lazyattn/kv/types.hpp"

namespace lazyattn {

// A contiguous range of float, float16 or bfloat16 (std::vector, std::array, std::span...), what
// insert() and append() accept besides std::span<const T>.
template <class R>
concept StorageRange = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    StorageElement<std::remove_cv_t<std::ranges::range_value_t<R>>>;

class KvStore final : public KvBookkeeping {
 public:
  // The K and V pools start on a cache line, so that CPU kernels may use aligned vector loads on
  // head rows (a head's page is page_size * head_dim elements, a multiple of 64 bytes for the
  // usual shapes).
  static constexpr std::size_t kPoolAlignment = 64;

  explicit KvStore(const KvStoreConfig& config) : KvBookkeeping(config) {
    const auto bytes = static_cast<std::size_t>(geometry().elements() * size_of(config.dtype));
    k_ = allocate_pool(bytes, config);
    v_ = allocate_pool(bytes, config);
  }

  // Stores a document's K and V, each [num_layers, length, num_kv_heads, head_dim], converting to
  // the store's element type (an fp8 store quantizes x / scale of its layer and KV head, and
  // throws, store unchanged, where that is not finite or would not round to e4m3's +-448). If
  // (key, form) is already stored, nothing is copied and the stored document is returned
  // (inserted = false); its length must match. Evicts unpinned documents,
  // least recently used first, when the free pages do not suffice; throws (store unchanged) when
  // even that would not make room.
  template <StorageElement T>
  InsertResult insert(const DocKey& key, StorageForm form, std::int64_t length,
                      std::span<const T> k, std::span<const T> v, bool pin = false) {
    detail::check_storage_form("KvStore::insert", form);
    check_tokens("KvStore::insert", "length", length, k.size(), v.size());
    check_fp8_range("KvStore::insert", length, k, v);
    return allocate_and_fill(
        key, form, length, pin, "KvStore::insert",
        [&](const std::vector<std::int32_t>& pages) { write_tokens(pages, 0, length, k, v); });
  }
  template <StorageRange RK, StorageRange RV>
  InsertResult insert(const DocKey& key, StorageForm form, std::int64_t length, const RK& k,
                      const RV& v, bool pin = false) {
    using T = std::remove_cv_t<std::ranges::range_value_t<RK>>;
    static_assert(std::is_same_v<T, std::remove_cv_t<std::ranges::range_value_t<RV>>>,
                  "KvStore::insert: k and v must hold the same element type");
    return insert(key, form, length, std::span<const T>(std::ranges::data(k), std::ranges::size(k)),
                  std::span<const T>(std::ranges::data(v), std::ranges::size(v)), pin);
  }

  // Appends n tokens, K and V each [num_layers, n, num_kv_heads, head_dim], to a tail (converted
  // as insert's). New pages come from the free list, evicting unpinned documents if needed; on
  // failure nothing changes.
  template <StorageElement T>
  void append(TailHandle h, std::int64_t n, std::span<const T> k, std::span<const T> v) {
    check_tokens("KvStore::append", "n", n, k.size(), v.size());
    check_fp8_range("KvStore::append", n, k, v);
    reserve_and_fill(h, n, "KvStore::append",
                     [&](const std::vector<std::int32_t>& pages, std::int64_t first) {
                       write_tokens(pages, first, n, k, v);
                     });
  }
  template <StorageRange RK, StorageRange RV>
  void append(TailHandle h, std::int64_t n, const RK& k, const RV& v) {
    using T = std::remove_cv_t<std::ranges::range_value_t<RK>>;
    static_assert(std::is_same_v<T, std::remove_cv_t<std::ranges::range_value_t<RV>>>,
                  "KvStore::append: k and v must hold the same element type");
    append(h, n, std::span<const T>(std::ranges::data(k), std::ranges::size(k)),
           std::span<const T>(std::ranges::data(v), std::ranges::size(v)));
  }

  // ---- pool memory ----------------------------------------------------------------------------

  // The scales of an fp8 store's K and V at (layer, KV head): a stored e4m3 value times this is
  // the value it holds. 1 in stores of other types (and in fp8 stores configured without).
  float k_scale(int layer, int kv_head) const { return scale_of(config().k_scale, layer, kv_head); }
  float v_scale(int layer, int kv_head) const { return scale_of(config().v_scale, layer, kv_head); }

  // The K and V pools, [num_layers, num_pages, num_kv_heads, page_size, head_dim] (geometry()),
  // of the store's element type (float8_e4m3 for an fp8 store).
  template <PoolElement T>
  T* k_pool() {
    check_type<T>("KvStore::k_pool");
    return reinterpret_cast<T*>(k_.get());
  }
  template <PoolElement T>
  T* v_pool() {
    check_type<T>("KvStore::v_pool");
    return reinterpret_cast<T*>(v_.get());
  }
  template <PoolElement T>
  const T* k_pool() const {
    check_type<T>("KvStore::k_pool");
    return reinterpret_cast<const T*>(k_.get());
  }
  template <PoolElement T>
  const T* v_pool() const {
    check_type<T>("KvStore::v_pool");
    return reinterpret_cast<const T*>(v_.get());
  }
  const std::byte* k_bytes() const { return k_.get(); }
  const std::byte* v_bytes() const { return v_.get(); }
  std::byte* k_bytes() { return k_.get(); }
  std::byte* v_bytes() { return v_.get(); }

 private:
  struct PoolDeleter {
    void operator()(std::byte* p) const noexcept {
      ::operator delete (p, std::align_val_t{kPoolAlignment});
    }
  };
  using PoolPtr = std::unique_ptr<std::byte, PoolDeleter>;

  static PoolPtr allocate_pool(std::size_t bytes, const KvStoreConfig& c) {
    void* p = nullptr;
    try {
      p = ::operator new (bytes, std::align_val_t{kPoolAlignment});
    } catch (const std::bad_alloc&) {
      detail::throw_error("KvStore: cannot allocate ", bytes, " bytes for a pool of num_pages ",
                          c.num_pages, ", expected a pool that fits in memory");
    }
    std::memset(p, 0, bytes);
    return PoolPtr(static_cast<std::byte*>(p));
  }

  template <class T>
  void check_type(const char* where) const {
    LAZYATTN_CHECK(dtype_of<T>() == config().dtype, where, ": element type ",
                   to_string(dtype_of<T>()), ", expected the store's ", to_string(config().dtype));
  }

  // The shape of K and V for n tokens. n is bounded by the pool's capacity first, so the product
  // cannot overflow: it is at most the pool's element count.
  void check_tokens(const char* where, const char* name, std::int64_t n, std::size_t k_size,
                    std::size_t v_size) const {
    const KvStoreConfig& c = config();
    detail::check_token_count(where, name, n);
    LAZYATTN_CHECK(pages_for(n) <= c.num_pages, where, ": ", name, " ", n, " needs ", pages_for(n),
                   " pages, expected at most the store's num_pages ", c.num_pages);
    std::size_t expected = static_cast<std::size_t>(c.num_layers) * static_cast<std::size_t>(n) *
                           static_cast<std::size_t>(c.num_kv_heads) *
                           static_cast<std::size_t>(c.head_dim);
    LAZYATTN_CHECK(k_size == expected, where, ": k has ", k_size, " elements, expected ", expected,
                   " = [num_layers ", c.num_layers, ", ", name, " ", n, ", num_kv_heads ",
                   c.num_kv_heads, ", head_dim ", c.head_dim, "]");
    LAZYATTN_CHECK(v_size == expected, where, ": v has ", v_size, " elements, expected ", expected,
                   " = [num_layers ", c.num_layers, ", ", name, " ", n, ", num_kv_heads ",
                   c.num_kv_heads, ", head_dim ", c.head_dim, "]");
  }

  float scale_of(const std::vector<float>& scales, int layer, int kv_head) const {
    const KvStoreConfig& c = config();
    LAZYATTN_CHECK(layer >= 0 && layer < c.num_layers && kv_head >= 0 && kv_head < c.num_kv_heads,
                   "KvStore::k_scale / v_scale: layer ", layer, ", KV head ", kv_head,
                   ", expected layer in [0, ", c.num_layers, ") and KV head in [0, ",
                   c.num_kv_heads, ")");
    if (scales.empty()) return 1.0f;
    return scales[static_cast<std::size_t>(layer * c.num_kv_heads + kv_head)];
  }

  // An fp8 store's inputs: every x / scale finite and rounding to a finite e4m3 value, |x / scale|
  // < 464, halfway between the largest, 448, and the next power step (beyond it the conversion
  // would saturate, a silent clamp); checked before anything is allocated.
  template <StorageElement T>
  void check_fp8_range(const char* where, std::int64_t n, std::span<const T> k,
                       std::span<const T> v) const {
    const KvStoreConfig& c = config();
    if (c.dtype != DType::kFloat8E4M3) return;
    const int H = c.num_kv_heads, D = c.head_dim;
    for (const auto& [name, x] : {std::pair{"k", k}, std::pair{"v", v}}) {
      const bool is_k = name[0] == 'k';
      for (int l = 0; l < c.num_layers; ++l) {
        for (int h = 0; h < H; ++h) {
          const float scale = is_k ? k_scale(l, h) : v_scale(l, h);
          for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t src = ((l * n + i) * H + h) * D;
            for (int d = 0; d < D; ++d) {
              const float q = to_float(x[static_cast<std::size_t>(src + d)]) / scale;
              LAZYATTN_CHECK(std::isfinite(q) && std::fabs(q) < kFp8Limit, where, ": ", name,
                             "[layer ", l, ", token ", i, ", KV head ", h, ", dim ", d, "] = ",
                             to_float(x[static_cast<std::size_t>(src + d)]), " over ", name,
                             "_scale ", scale, " is ", q,
                             ", expected a finite value of magnitude below ", kFp8Limit,
                             " (float8_e4m3 holds up to 448; raise the scale)");
            }
          }
        }
      }
    }
  }
  static constexpr float kFp8Limit = 464.0f;

  // Copies tokens [first, first + n) of a page list from [num_layers, n, num_kv_heads, head_dim]
  // (an fp8 store: e4m3(x / scale), in range by check_fp8_range). Runs under the bookkeeping's
  // lock (allocate_and_fill, reserve_and_fill) and throws nothing.
  template <StorageElement T>
  void write_tokens(const std::vector<std::int32_t>& pages, std::int64_t first, std::int64_t n,
                    std::span<const T> k, std::span<const T> v) noexcept {
    const KvStoreConfig& c = config();
    const PoolGeometry& g = geometry();
    dispatch_pool_dtype(c.dtype, [&](auto tag) {
      using S = decltype(tag);
      auto* kp = reinterpret_cast<S*>(k_.get());
      auto* vp = reinterpret_cast<S*>(v_.get());
      const int H = c.num_kv_heads, D = c.head_dim, P = c.page_size;
      for (int l = 0; l < c.num_layers; ++l) {
        for (std::int64_t i = 0; i < n; ++i) {
          std::int64_t tok = first + i;
          std::int32_t page = pages[static_cast<std::size_t>(tok / P)];
          int slot = static_cast<int>(tok % P);
          for (int h = 0; h < H; ++h) {
            std::int64_t src = ((l * n + i) * H + h) * D;
            std::int64_t dst = g.offset(l, page, h, slot);
            if constexpr (std::is_same_v<S, float8_e4m3>) {
              const float ks = k_scale(l, h), vs = v_scale(l, h);
              for (int d = 0; d < D; ++d) {
                kp[dst + d] = from_float<S>(to_float(k[src + d]) / ks);
                vp[dst + d] = from_float<S>(to_float(v[src + d]) / vs);
              }
            } else {
              for (int d = 0; d < D; ++d) {
                if constexpr (std::is_same_v<S, T>) {
                  kp[dst + d] = k[src + d];
                  vp[dst + d] = v[src + d];
                } else {
                  kp[dst + d] = from_float<S>(to_float(k[src + d]));
                  vp[dst + d] = from_float<S>(to_float(v[src + d]));
                }
              }
            }
          }
        }
      }
    });
  }

  PoolPtr k_;
  PoolPtr v_;
};

}  // namespace lazyattn
