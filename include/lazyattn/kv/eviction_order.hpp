// The order in which a store evicts its unpinned documents (EvictionPolicy, types.hpp), apart
// from the documents themselves: one entry per unpinned document, keyed by its segment (under
// kSegmentedLru, protected documents after every probationary one) and its last use; and the
// protected segment's pages against their cap (80% of the pool). A document's moves (a use, a
// protection, a demotion) re-key its entry's node, so nothing allocates but insert(Entry) and
// spare(), which the store calls before it changes anything (its strong guarantee).
//
// The Doc methods take KvBookkeeping's document records: last_use, protected_seg, pins, pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>

#include "lazyattn/kv/types.hpp"

namespace lazyattn::detail {

class EvictionOrder {
 public:
  using Entry = std::pair<std::uint64_t, std::uint32_t>;  // (segment bit | last use, slot)
  using Node = std::set<Entry>::node_type;
  static constexpr std::uint64_t kProtectedKey = std::uint64_t{1} << 63;

  EvictionOrder(EvictionPolicy policy, std::int64_t num_pages)
      : policy_(policy), protected_cap_(num_pages * 4 / 5) {}

  static Entry key(std::uint32_t slot, std::uint64_t use, bool protected_seg) noexcept {
    return {(protected_seg ? kProtectedKey : 0) | use, slot};
  }
  template <class Doc>
  static Entry key(std::uint32_t slot, const Doc& d) noexcept {
    return key(slot, d.last_use, d.protected_seg);
  }

  // A node allocated ahead, for an insertion that must not fail.
  static Node spare() {
    std::set<Entry> s{{0, 0}};
    return s.extract(s.begin());
  }
  void insert(Node node, Entry e) noexcept {
    node.value() = e;
    set_.insert(std::move(node));
  }
  void insert(Entry e) { set_.insert(e); }  // allocates
  void erase(Entry e) noexcept { set_.erase(e); }
  void rekey(Entry from, Entry to) noexcept { insert(set_.extract(from), to); }

  bool empty() const noexcept { return set_.empty(); }
  std::size_t size() const noexcept { return set_.size(); }
  bool contains(Entry e) const { return set_.count(e) == 1; }
  std::uint32_t first_slot() const noexcept { return set_.begin()->second; }  // the next victim
  std::int64_t protected_pages() const noexcept { return protected_pages_; }

  // kSegmentedLru: document `slot`, asked for again, moves to the protected segment; then the
  // segment's least recently used unpinned documents go back to probation while it holds more
  // than its cap. `docs` indexes the records by slot.
  template <class Doc, class Docs>
  void protect(std::uint32_t slot, Doc& d, Docs& docs) noexcept {
    if (policy_ != EvictionPolicy::kSegmentedLru || d.protected_seg) return;
    const Entry from = key(slot, d);
    d.protected_seg = true;
    if (d.pins == 0) rekey(from, key(slot, d));
    protected_pages_ += static_cast<std::int64_t>(d.pages.size());
    demote_excess(docs);
  }
  template <class Docs>
  void demote_excess(Docs& docs) noexcept {
    while (protected_pages_ > protected_cap_) {
      auto it = set_.lower_bound({kProtectedKey, 0});
      if (it == set_.end()) return;  // the rest of the segment is pinned
      const std::uint32_t slot = it->second;
      auto& d = docs[slot];
      Node node = set_.extract(it);
      d.protected_seg = false;
      protected_pages_ -= static_cast<std::int64_t>(d.pages.size());
      insert(std::move(node), key(slot, d));
    }
  }
  // A removed document leaves the segment it was in (its entry, if unpinned, erased apart).
  template <class Doc>
  void forget(Doc& d) noexcept {
    if (d.protected_seg) protected_pages_ -= static_cast<std::int64_t>(d.pages.size());
    d.protected_seg = false;
  }

 private:
  EvictionPolicy policy_;
  std::int64_t protected_cap_;
  std::int64_t protected_pages_ = 0;
  std::set<Entry> set_;
};

}  // namespace lazyattn::detail
