// KvBookkeeping::fingerprint(): a 64-bit hash of the state that decides what the bookkeeping does
// next. Every document record (slot, generation, key, form, length, pins, committed, last use,
// segment, pages), every tail record, the free page and free slot lists in their order, the use
// clock, the removal count and the statistics. Left out: the store's id (unique per store) and
// what follows from the records (the key index, the page owners, the eviction order, the
// unpinned page count).
//
// What it is for: two stores given the same calls in the same order have equal fingerprints.
//  - Tensor-parallel ranks each hold their KV heads' share of a pool and must decide alike;
//    comparing fingerprints finds a rank whose bookkeeping went its own way.
//  - Tests check that a failed call left a store exactly as it was, not only its counters.
// A hash, not a proof: distinct states collide with a chance of about 2^-64.
#pragma once

#include <cstdint>
#include <mutex>

#include "lazyattn/detail/splitmix.hpp"
#include "lazyattn/kv/bookkeeping.hpp"

namespace lazyattn {

inline std::uint64_t KvBookkeeping::fingerprint() const {
  std::lock_guard lock(mu_);
  std::uint64_t h = 0x6c617a7961747465ull;  // mixes each word in turn (splitmix64's finalizer)
  auto mix = [&h](std::uint64_t x) {
    h ^= x + detail::kGoldenGamma + (h << 6) + (h >> 2);
    h = detail::splitmix64_mix(h);
  };
  auto mix_list = [&mix](const auto& xs) {
    mix(xs.size());
    for (const auto& x : xs) mix(static_cast<std::uint64_t>(x));
  };
  mix(docs_.size());
  for (const Doc& d : docs_) {
    mix(d.live | std::uint64_t{d.committed} << 1 | std::uint64_t{d.protected_seg} << 2);
    mix(d.generation);
    if (!d.live) continue;
    mix(d.key.hi);
    mix(d.key.lo);
    mix(static_cast<std::uint64_t>(d.form));
    mix(static_cast<std::uint64_t>(d.length));
    mix(static_cast<std::uint64_t>(d.pins));
    mix(d.last_use);
    mix_list(d.pages);
  }
  mix(tails_.size());
  for (const Tail& t : tails_) {
    mix(t.live);
    mix(t.generation);
    if (!t.live) continue;
    mix(static_cast<std::uint64_t>(t.form));
    mix(static_cast<std::uint64_t>(t.length));
    mix_list(t.pages);
  }
  mix_list(free_pages_);
  mix_list(free_doc_slots_);
  mix_list(free_tail_slots_);
  mix(clock_);
  mix(removals_);
  for (std::int64_t x : {stats_.hits, stats_.misses, stats_.inserts, stats_.dedupes,
                         stats_.evictions, stats_.documents, stats_.pinned_documents, stats_.tails,
                         stats_.pages_total, stats_.pages_in_use, stats_.bytes_in_use})
    mix(static_cast<std::uint64_t>(x));
  return h;
}

}  // namespace lazyattn
