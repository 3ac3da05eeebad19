// The five serving modes the benchmark compares, and the cache eviction policies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::rag {

enum class Mode {
  kFull,            // no reuse: every prompt prefilled whole, full causal attention
  kPrefix,          // exact-prefix caching (vLLM APC): the longest cached block prefix is reused
  kPositionAware,   // a document cached once per position it appeared at
  kBlockAttention,  // cached once; each request copies and re-rotates it into private pages
  kLazy,            // cached once, position-free, zero copy, rotation deferred into attention
};

inline constexpr Mode kAllModes[] = {Mode::kFull, Mode::kPrefix, Mode::kPositionAware,
                                     Mode::kBlockAttention, Mode::kLazy};

constexpr std::string_view to_string(Mode m) {
  switch (m) {
    case Mode::kFull:
      return "full";
    case Mode::kPrefix:
      return "prefix";
    case Mode::kPositionAware:
      return "position-aware";
    case Mode::kBlockAttention:
      return "block-attention";
    case Mode::kLazy:
      return "lazy";
  }
  return "?";
}

inline Mode parse_mode(std::string_view s) {
  for (Mode m : kAllModes) {
    if (to_string(m) == s) return m;
  }
  LAZYATTN_CHECK(false, "rag::parse_mode: unknown mode '", s,
                 "', expected full, prefix, position-aware, block-attention or lazy");
  return Mode::kLazy;
}

// Which unpinned cache entry makes room. kLru and kSegmentedLru are the KvStore's own eviction
// (EvictionPolicy::kLru, kSegmentedLru: kv/types.hpp); kLfu evicts the entry requested least
// often so far (counts kept across evictions, "perfect LFU"), which under independent requests
// converges to caching the most popular ones: the H(C,s)/H(N,s) of the analytic hit ratio.
enum class Eviction { kLru, kLfu, kSegmentedLru };

constexpr std::string_view to_string(Eviction e) {
  return e == Eviction::kLru ? "lru" : e == Eviction::kLfu ? "lfu" : "segmented_lru";
}

inline Eviction parse_eviction(std::string_view s) {
  if (s == "lru") return Eviction::kLru;
  if (s == "segmented_lru") return Eviction::kSegmentedLru;
  LAZYATTN_CHECK(s == "lfu", "rag::parse_eviction: unknown policy '", s,
                 "', expected lru, segmented_lru or lfu");
  return Eviction::kLfu;
}

// The store's own policy for an engine eviction (kLfu keeps LRU underneath its own choices).
inline EvictionPolicy store_policy(Eviction e) {
  return e == Eviction::kSegmentedLru ? EvictionPolicy::kSegmentedLru : EvictionPolicy::kLru;
}

}  // namespace lazyattn::rag
