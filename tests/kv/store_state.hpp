// Test helper: everything of a KvStore or a KvBookkeeping that a failed call must leave alone
// (statistics, every document's and tail's bookkeeping, the LRU order, and a store's every pool
// byte), and the check that two such snapshots agree.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "lazyattn/kv/store.hpp"
#include "support/catch.hpp"

namespace lazyattn::test::kv {

// Everything a failed call must leave alone.
struct Snapshot {
  KvStoreStats stats;
  std::vector<std::optional<DocInfo>> docs;
  std::vector<std::optional<TailInfo>> tails;
  std::vector<std::byte> k, v;  // a KvStore's pools; empty for the bookkeeping alone
};

inline Snapshot snapshot(const KvBookkeeping& s, const std::vector<DocHandle>& docs,
                         const std::vector<TailHandle>& tails) {
  Snapshot snap;
  snap.stats = s.stats();
  for (DocHandle h : docs)
    snap.docs.push_back(s.is_live(h) ? std::optional(s.info(h)) : std::nullopt);
  for (TailHandle h : tails)
    snap.tails.push_back(s.is_live(h) ? std::optional(s.info(h)) : std::nullopt);
  return snap;
}

inline Snapshot snapshot(const KvStore& s, const std::vector<DocHandle>& docs,
                         const std::vector<TailHandle>& tails) {
  Snapshot snap = snapshot(static_cast<const KvBookkeeping&>(s), docs, tails);
  std::size_t bytes = static_cast<std::size_t>(s.geometry().elements() * size_of(s.config().dtype));
  snap.k.assign(s.k_bytes(), s.k_bytes() + bytes);
  snap.v.assign(s.v_bytes(), s.v_bytes() + bytes);
  return snap;
}

inline void check_same(const Snapshot& a, const Snapshot& b) {
  CHECK(a.stats.hits == b.stats.hits);
  CHECK(a.stats.misses == b.stats.misses);
  CHECK(a.stats.inserts == b.stats.inserts);
  CHECK(a.stats.dedupes == b.stats.dedupes);
  CHECK(a.stats.evictions == b.stats.evictions);
  CHECK(a.stats.documents == b.stats.documents);
  CHECK(a.stats.pinned_documents == b.stats.pinned_documents);
  CHECK(a.stats.tails == b.stats.tails);
  CHECK(a.stats.pages_in_use == b.stats.pages_in_use);
  CHECK(a.stats.bytes_in_use == b.stats.bytes_in_use);
  REQUIRE(a.docs.size() == b.docs.size());
  for (std::size_t i = 0; i < a.docs.size(); ++i) {
    INFO("document " << i);
    REQUIRE(a.docs[i].has_value() == b.docs[i].has_value());
    if (!a.docs[i]) continue;
    CHECK(a.docs[i]->key == b.docs[i]->key);
    CHECK(a.docs[i]->form == b.docs[i]->form);
    CHECK(a.docs[i]->length == b.docs[i]->length);
    CHECK(a.docs[i]->pins == b.docs[i]->pins);
    CHECK(a.docs[i]->committed == b.docs[i]->committed);
    CHECK(a.docs[i]->pages == b.docs[i]->pages);
    CHECK(a.docs[i]->last_use == b.docs[i]->last_use);  // the LRU order
  }
  REQUIRE(a.tails.size() == b.tails.size());
  for (std::size_t i = 0; i < a.tails.size(); ++i) {
    INFO("tail " << i);
    REQUIRE(a.tails[i].has_value() == b.tails[i].has_value());
    if (!a.tails[i]) continue;
    CHECK(a.tails[i]->form == b.tails[i]->form);
    CHECK(a.tails[i]->length == b.tails[i]->length);
    CHECK(a.tails[i]->pages == b.tails[i]->pages);
  }
  CHECK(a.k == b.k);
  CHECK(a.v == b.v);
}

}  // namespace lazyattn::test::kv
