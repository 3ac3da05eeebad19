// Test helpers for the KV store: deterministic K/V contents from a seed, and a check that the pool
// holds exactly them, read back through info().pages and geometry() the way a kernel would.
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/kv/store.hpp"

namespace lazyattn::test::kv {

// What a document or tail was filled from: a seed and the element type the caller passed. The
// value of an element depends only on the seed and its coordinates, so any thread can rebuild it.
struct ContentSpec {
  std::uint64_t seed = 0;
  DType input = DType::kFloat32;
};

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Token-level hash first, so the per-element work is one more mix.
inline std::uint64_t token_hash(std::uint64_t seed, int layer, std::int64_t token) {
  return splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(token) * 0x100000001b3ull +
                                      static_cast<std::uint64_t>(layer)));
}

// A float with a full 24-bit mantissa and a spread of exponents, so every storage type rounds it.
// which: 0 for K, 1 for V.
inline float source_value(std::uint64_t token_h, int which, int head, int dim) {
  std::uint64_t x =
      splitmix64(token_h + static_cast<std::uint64_t>((head * 4096 + dim) * 2 + which));
  float unit = static_cast<float>(x >> 40) * 0x1p-24f;  // [0, 1), 24 bits
  int exponent = static_cast<int>((x >> 8) & 7) - 4;    // 2^-4 .. 2^3
  return std::ldexp(unit * 2.0f - 1.0f, exponent);
}

// The bits the store must hold for value x given by the caller as `input` into a `store` pool.
inline std::uint32_t stored_bits(float x, DType input, DType store) {
  float given = dispatch_dtype(input, [&](auto t) {
    using T = decltype(t);
    return to_float(from_float<T>(x));
  });
  return dispatch_dtype(store, [&](auto s) -> std::uint32_t {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, float>) {
      return std::bit_cast<std::uint32_t>(given);
    } else {
      return from_float<S>(given).bits;
    }
  });
}

// K (which 0) or V (which 1) of tokens [first, first + n) as the caller passes them:
// [num_layers, n, num_kv_heads, head_dim] of T.
template <StorageElement T>
std::vector<T> make_tokens(const KvStoreConfig& c, const ContentSpec& spec, int which,
                           std::int64_t first, std::int64_t n) {
  std::vector<T> out(static_cast<std::size_t>(c.num_layers * n * c.num_kv_heads * c.head_dim));
  std::size_t o = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint64_t th = token_hash(spec.seed, l, first + i);
      for (int h = 0; h < c.num_kv_heads; ++h) {
        for (int d = 0; d < c.head_dim; ++d)
          out[o++] = from_float<T>(source_value(th, which, h, d));
      }
    }
  }
  return out;
}

// Element offset -> bits, for the pool's element type.
inline std::uint32_t read_bits(const std::byte* pool, DType t, std::int64_t offset) {
  if (t == DType::kFloat32) {
    std::uint32_t b;
    std::memcpy(&b, pool + offset * 4, 4);
    return b;
  }
  std::uint16_t b;
  std::memcpy(&b, pool + offset * 2, 2);
  return b;
}
inline void write_bits(std::byte* pool, DType t, std::int64_t offset, std::uint32_t bits) {
  if (t == DType::kFloat32) {
    std::memcpy(pool + offset * 4, &bits, 4);
  } else {
    auto b = static_cast<std::uint16_t>(bits);
    std::memcpy(pool + offset * 2, &b, 2);
  }
}

// Writes tokens [first, first + n) straight into the pool pages, as a caller of allocate() or
// reserve() (a device kernel, say) does.
inline void write_through_pool(KvStore& store, const std::vector<std::int32_t>& pages,
                               const ContentSpec& spec, std::int64_t first, std::int64_t n) {
  const KvStoreConfig& c = store.config();
  const PoolGeometry& g = store.geometry();
  for (int l = 0; l < c.num_layers; ++l) {
    for (std::int64_t i = first; i < first + n; ++i) {
      std::uint64_t th = token_hash(spec.seed, l, i);
      std::int32_t page = pages.at(static_cast<std::size_t>(i / g.page_size));
      for (int h = 0; h < c.num_kv_heads; ++h) {
        for (int d = 0; d < c.head_dim; ++d) {
          std::int64_t off = g.offset(l, page, h, static_cast<int>(i % g.page_size)) + d;
          write_bits(store.k_bytes(), c.dtype, off,
                     stored_bits(source_value(th, 0, h, d), spec.input, c.dtype));
          write_bits(store.v_bytes(), c.dtype, off,
                     stored_bits(source_value(th, 1, h, d), spec.input, c.dtype));
        }
      }
    }
  }
}

// Empty when the pool holds tokens [first, first + n) of `spec` at `pages`; otherwise the first
// mismatch, with its coordinates.
inline std::string check_contents(const KvStore& store, const std::vector<std::int32_t>& pages,
                                  const ContentSpec& spec, std::int64_t first, std::int64_t n) {
  const KvStoreConfig& c = store.config();
  const PoolGeometry& g = store.geometry();
  if (static_cast<std::int64_t>(pages.size()) < store.pages_for(first + n)) {
    return fmt::format("{} pages hold fewer than {} tokens", pages.size(), first + n);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    for (std::int64_t i = first; i < first + n; ++i) {
      std::uint64_t th = token_hash(spec.seed, l, i);
      std::int32_t page = pages[static_cast<std::size_t>(i / g.page_size)];
      for (int h = 0; h < c.num_kv_heads; ++h) {
        for (int d = 0; d < c.head_dim; ++d) {
          std::int64_t off = g.offset(l, page, h, static_cast<int>(i % g.page_size)) + d;
          for (int which = 0; which < 2; ++which) {
            std::uint32_t want = stored_bits(source_value(th, which, h, d), spec.input, c.dtype);
            std::uint32_t got =
                read_bits(which == 0 ? store.k_bytes() : store.v_bytes(), c.dtype, off);
            if (want != got) {
              return fmt::format(
                  "{} mismatch at layer {} token {} head {} dim {} (page {}): want bits {:#x}, "
                  "got {:#x} (seed {}, input {}, store {})",
                  which == 0 ? "K" : "V", l, i, h, d, page, want, got, spec.seed,
                  to_string(spec.input), to_string(c.dtype));
            }
          }
        }
      }
    }
  }
  return {};
}

// Inserts a document whose contents come from `spec`, passing K and V as spec.input.
inline InsertResult insert_spec(KvStore& store, const DocKey& key, StorageForm form,
                                std::int64_t length, const ContentSpec& spec, bool pin) {
  return dispatch_dtype(spec.input, [&](auto t) {
    using T = decltype(t);
    auto k = make_tokens<T>(store.config(), spec, 0, 0, length);
    auto v = make_tokens<T>(store.config(), spec, 1, 0, length);
    return store.insert(key, form, length, k, v, pin);
  });
}

// Appends tokens [first, first + n) of `spec` to a tail, first being the tail's current length.
inline void append_spec(KvStore& store, TailHandle tail, std::int64_t first, std::int64_t n,
                        const ContentSpec& spec) {
  dispatch_dtype(spec.input, [&](auto t) {
    using T = decltype(t);
    auto k = make_tokens<T>(store.config(), spec, 0, first, n);
    auto v = make_tokens<T>(store.config(), spec, 1, first, n);
    store.append(tail, n, std::span<const T>(k), std::span<const T>(v));
  });
}

}  // namespace lazyattn::test::kv
