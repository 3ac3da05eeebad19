// KvBookkeeping::validate(): the check of every invariant the bookkeeping keeps, for tests (the
// fault-injection, model and thread tests call it after each step). Included by bookkeeping.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/bookkeeping.hpp"

namespace lazyattn {

// Every free slot is an empty, unretired slot named once; every other slot is live or retired.
template <class Slot>
void KvBookkeeping::check_free_slots(const std::vector<Slot>& slots,
                                     const std::vector<std::uint32_t>& free,
                                     std::int64_t live_or_retired, const char* what) const {
  std::vector<bool> seen(slots.size(), false);
  for (std::uint32_t s : free) {
    LAZYATTN_CHECK(
        s < slots.size() && !slots[s].live && !seen[s] && slots[s].generation != kRetiredGeneration,
        "KvStore::validate: free ", what, " slot ", s, " is not a free slot");
    seen[s] = true;
  }
  LAZYATTN_CHECK(static_cast<std::int64_t>(free.size()) + live_or_retired ==
                     static_cast<std::int64_t>(slots.size()),
                 "KvStore::validate: ", free.size(), " free ", what, " slots and ", live_or_retired,
                 " live or retired, expected ", slots.size(), " in all");
}

inline void KvBookkeeping::validate() const {
  const char* w = "KvStore::validate";
  std::lock_guard lock(mu_);
  std::vector<std::int32_t> owner(static_cast<std::size_t>(config_.num_pages), kFree);
  auto claim = [&](std::int32_t page, std::int32_t who) {
    LAZYATTN_CHECK(page >= 0 && page < config_.num_pages, w, ": page ", page, " out of range");
    LAZYATTN_CHECK(owner[page] == kFree, w, ": page ", page, " owned twice");
    owner[page] = who;
  };
  std::int64_t live = 0, pinned = 0, unpinned = 0, unpinned_pages = 0, retired = 0;
  std::int64_t protected_pages = 0;
  for (std::size_t s = 0; s < docs_.size(); ++s) {
    const Doc& d = docs_[s];
    LAZYATTN_CHECK(d.generation <= kRetiredGeneration, w, ": document slot ", s,
                   " past the last generation");
    if (d.generation == kRetiredGeneration) ++retired;
    if (!d.live) {
      LAZYATTN_CHECK(d.pages.empty(), w, ": empty document slot ", s, " holds pages");
      continue;
    }
    ++live;
    LAZYATTN_CHECK(d.length >= 1 && d.length <= kMaxLength, w, ": document slot ", s,
                   " has length ", d.length);
    LAZYATTN_CHECK(static_cast<std::int64_t>(d.pages.size()) == pages_for(d.length), w,
                   ": document slot ", s, " has ", d.pages.size(), " pages for length ", d.length);
    LAZYATTN_CHECK(d.pins >= 0, w, ": document slot ", s, " has pin count ", d.pins);
    LAZYATTN_CHECK(d.last_use <= clock_ && d.last_use < detail::EvictionOrder::kProtectedKey, w, ": document slot ", s,
                   " used in the future");
    LAZYATTN_CHECK(!d.protected_seg || config_.eviction == EvictionPolicy::kSegmentedLru, w,
                   ": document slot ", s, " is protected under eviction ",
                   to_string(config_.eviction));
    if (d.protected_seg) protected_pages += static_cast<std::int64_t>(d.pages.size());
    for (std::int32_t p : d.pages) claim(p, doc_owner(static_cast<std::uint32_t>(s)));
    if (d.pins == 0) {
      ++unpinned;
      unpinned_pages += static_cast<std::int64_t>(d.pages.size());
      LAZYATTN_CHECK(order_.contains(order_.key(static_cast<std::uint32_t>(s), d)), w,
                     ": unpinned document slot ", s, " missing from LRU");
    } else {
      ++pinned;
    }
    auto it = index_.find(IndexKey{d.key, d.form});
    LAZYATTN_CHECK(it != index_.end() && it->second == s, w, ": document slot ", s, " not indexed");
  }
  LAZYATTN_CHECK(static_cast<std::int64_t>(index_.size()) == live, w, ": index holds ",
                 index_.size(), " keys, expected ", live);
  LAZYATTN_CHECK(static_cast<std::int64_t>(order_.size()) == unpinned, w, ": LRU holds ",
                 order_.size(), " entries, expected ", unpinned);
  LAZYATTN_CHECK(unpinned_pages_ == unpinned_pages, w, ": ", unpinned_pages_,
                 " pages counted as evictable, expected ", unpinned_pages);
  LAZYATTN_CHECK(order_.protected_pages() == protected_pages, w, ": ", order_.protected_pages(),
                 " pages counted as protected, expected ", protected_pages);
  LAZYATTN_CHECK(stats_.documents == live && stats_.pinned_documents == pinned, w, ": stats count ",
                 stats_.documents, " documents (", stats_.pinned_documents, " pinned), expected ",
                 live, " (", pinned, " pinned)");
  check_free_slots(docs_, free_doc_slots_, live + retired, "document");
  std::int64_t live_tails = 0;
  retired = 0;
  for (std::size_t s = 0; s < tails_.size(); ++s) {
    const Tail& t = tails_[s];
    if (t.generation == kRetiredGeneration) ++retired;
    if (!t.live) {
      LAZYATTN_CHECK(t.pages.empty() && t.length == 0, w, ": empty tail slot ", s, " holds tokens");
      continue;
    }
    ++live_tails;
    LAZYATTN_CHECK(t.length >= 0 && t.length <= kMaxLength, w, ": tail slot ", s, " has length ",
                   t.length);
    LAZYATTN_CHECK(static_cast<std::int64_t>(t.pages.size()) == pages_for(t.length), w,
                   ": tail slot ", s, " has ", t.pages.size(), " pages for length ", t.length);
    for (std::int32_t p : t.pages) claim(p, tail_owner(static_cast<std::uint32_t>(s)));
  }
  LAZYATTN_CHECK(stats_.tails == live_tails, w, ": stats count ", stats_.tails, " tails, expected ",
                 live_tails);
  check_free_slots(tails_, free_tail_slots_, live_tails + retired, "tail");
  for (std::int32_t p : free_pages_) claim(p, kFreeListed);
  for (std::int64_t p = 0; p < config_.num_pages; ++p) {
    LAZYATTN_CHECK(owner[p] != kFree, w, ": page ", p, " leaked");
    std::int32_t expected = owner[p] == kFreeListed ? kFree : owner[p];
    LAZYATTN_CHECK(page_owner_[p] == expected, w, ": page ", p, " owner table says ",
                   page_owner_[p], ", expected ", expected);
  }
}

}  // namespace lazyattn
