// KvBookkeeping alone, as a caller whose K/V live elsewhere uses it (a device pool, the C ABI):
// no host pool however large the geometry, dedupe, find, pins, LRU eviction, tails, stale handles,
// statistics, failed calls that name the value and change nothing, and plans made from it.
#include "support/catch.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kv/store_state.hpp"
#include "lazyattn/kv.hpp"
#include "support/str.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;
using Catch::Contains;

namespace {

using lazyattn::test::str;

KvStoreConfig small_config(std::int64_t num_pages) {
  KvStoreConfig c;
  c.num_layers = 3;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.page_size = 4;
  c.dtype = DType::kBFloat16;
  c.num_pages = num_pages;
  return c;
}

// A committed document of `length` tokens, left pinned or not.
DocHandle stored(KvBookkeeping& b, std::uint64_t id, std::int64_t length, bool pinned) {
  const InsertResult r = b.allocate(DocKey{id, 0}, StorageForm::kLocal, length);
  REQUIRE(r.inserted);
  b.commit(r.handle);
  if (!pinned) b.unpin(r.handle);
  return r.handle;
}

}  // namespace

TEST_CASE("KvBookkeeping keeps the books of K/V pools it does not hold", "[kv][bookkeeping]") {
  // Llama-3-70B's KV geometry over 2^20 pages: 2.7 TB per pool, which no host pool could hold.
  KvStoreConfig c;
  c.num_layers = 80;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.dtype = DType::kBFloat16;
  c.num_pages = std::int64_t{1} << 20;
  KvBookkeeping b(c);
  const std::int64_t page_bytes = 2 * 80 * 8 * 16 * 128 * 2;
  CHECK(b.page_bytes() == page_bytes);
  CHECK(b.geometry().elements() == std::int64_t{80} * (1 << 20) * 8 * 16 * 128);
  const DocHandle d = stored(b, 1, 1000, true);
  CHECK(b.info(d).pages.size() == 63);
  const KvStoreStats s = b.stats();
  CHECK(s.pages_total == c.num_pages);
  CHECK(s.pages_in_use == 63);
  CHECK(s.bytes_in_use == 63 * page_bytes);
  // The configuration is checked as the store's is, naming the value.
  c.head_dim = 7;
  CHECK_THROWS_WITH(KvBookkeeping(c), Contains("head_dim 7, expected an even number in [2, 1024]"));
  c.head_dim = 128;
  c.num_layers = 1 << 30;
  c.num_pages = (std::int64_t{1} << 31) - 1;
  CHECK_THROWS_WITH(KvBookkeeping(c), Contains("overflows int64"));
}

TEST_CASE("KvBookkeeping dedupes, finds, pins and evicts the least recently used",
          "[kv][bookkeeping]") {
  KvBookkeeping b(small_config(4));
  const DocHandle a = stored(b, 1, 4, false), c = stored(b, 2, 4, false),
                  d = stored(b, 3, 4, false);
  // The same key again: that document, pinned, nothing to write.
  const InsertResult again = b.allocate(DocKey{1, 0}, StorageForm::kLocal, 4);
  CHECK_FALSE(again.inserted);
  CHECK(again.handle == a);
  CHECK(b.info(a).pins == 1);
  CHECK(b.info(a).committed);
  b.unpin(a);                                             // a used last of all now
  CHECK(b.find(DocKey{2, 0}, StorageForm::kLocal) == c);  // c used after a
  CHECK_FALSE(b.find(DocKey{2, 0}, StorageForm::kRaw));   // the other form is another document
  // One free page: a tail of 8 tokens takes it and evicts the least recently used, d.
  const TailHandle t = b.create_tail(StorageForm::kLocal);
  CHECK(b.reserve(t, 5) == 0);
  CHECK(b.reserve(t, 3) == 5);
  CHECK_FALSE(b.is_live(d));
  CHECK(b.is_live(a));
  CHECK(b.is_live(c));
  CHECK(b.info(t).length == 8);
  CHECK(b.info(t).pages.size() == 2);
  const KvStoreStats s = b.stats();
  CHECK(s.inserts == 3);
  CHECK(s.dedupes == 1);
  CHECK(s.hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.evictions == 1);
  CHECK(s.documents == 2);
  CHECK(s.pinned_documents == 0);
  CHECK(s.tails == 1);
  CHECK(s.pages_in_use == 4);
  CHECK(s.bytes_in_use == 4 * b.page_bytes());
  // Pinned documents are never evicted: with a and c pinned nothing can make room.
  b.pin(a);
  b.pin(c);
  CHECK_THROWS_WITH(b.reserve(t, 1),
                    Contains("KvStore::reserve: store full: need 1 pages, 0 free and 0 held by "
                             "unpinned documents"));
  b.release(t);
  CHECK(b.stats().pages_in_use == 2);
  CHECK_NOTHROW(b.validate());
}

TEST_CASE("KvBookkeeping's failed calls name the value and change nothing",
          "[kv][bookkeeping][errors]") {
  KvBookkeeping b(small_config(6));
  const DocHandle a = stored(b, 1, 5, true);
  const DocHandle gone = stored(b, 2, 3, false);
  b.erase(gone);
  const TailHandle t = b.create_tail(StorageForm::kRaw);
  b.reserve(t, 2);
  const TailHandle released = b.create_tail(StorageForm::kLocal);
  b.release(released);
  const std::vector<DocHandle> docs{a, gone};
  const std::vector<TailHandle> tails{t, released};
  const tk::Snapshot before = tk::snapshot(b, docs, tails);
  auto bad = [&](auto call, const std::string& message) {
    INFO(message);
    CHECK_THROWS_WITH(call(), Contains(message));
    tk::check_same(tk::snapshot(b, docs, tails), before);
    CHECK_NOTHROW(b.validate());
  };
  bad([&] { b.pin(gone); }, "KvStore::pin: stale document handle " + str(gone));
  bad([&] { b.commit(gone); }, "KvStore::commit: stale document handle " + str(gone));
  bad([&] { b.erase(a); }, "KvStore::erase: " + str(a) + " is pinned 1 times, expected 0");
  bad([&] { b.reserve(released, 1); }, "KvStore::reserve: stale tail handle " + str(released));
  bad([&] { b.release(released); }, "KvStore::release: stale tail handle " + str(released));
  bad(
      [&] {
        b.allocate(DocKey{1, 0}, StorageForm::kLocal, 6);
      },
      "is stored with length 5, got length 6");
  bad(
      [&] {
        b.allocate(DocKey{9, 0}, StorageForm::kAbsolute, 6);
      },
      "KvStore::allocate: storage form 2, expected raw (0) or local (1) (absolute form is for "
      "tails only)");
  bad(
      [&] {
        b.allocate(DocKey{9, 0}, StorageForm::kLocal, 25);
      },
      "KvStore::allocate: length 25 needs 7 pages, expected at most the store's num_pages 6");
  bad(
      [&] {
        b.allocate(DocKey{9, 0}, StorageForm::kLocal, 20);
      },
      "KvStore::allocate: store full: need 5 pages, 3 free and 0 held by unpinned documents");
  bad([&] { b.reserve(t, 0); }, "KvStore::reserve: n 0, expected in [1, 2^31 - 1]");
}

TEST_CASE("plans and layouts are made from the bookkeeping alone", "[kv][bookkeeping][plan]") {
  KvBookkeeping b(small_config(16));
  const DocHandle x = stored(b, 1, 5, true), y = stored(b, 2, 8, true);
  const TailHandle t = b.create_tail(StorageForm::kLocal);
  b.reserve(t, 3);
  const std::vector<DocHandle> docs{x, y};
  const RequestLayout r = layouts::back_to_back(b, docs, t, 2);
  const Plan p = make_plan(b, r);
  CHECK(p.page_size == 4);
  CHECK(p.segment_length == std::vector<std::int32_t>{5, 8, 3});
  CHECK(p.segment_start == std::vector<std::int64_t>{0, 5, 13});
  std::vector<std::int32_t> pages = b.info(x).pages;
  for (const auto& more : {b.info(y).pages, b.info(t).pages})
    pages.insert(pages.end(), more.begin(), more.end());
  CHECK(p.page_ids == pages);
  const Plan enc = encode_plan(b, docs);
  CHECK(enc.num_queries() == 13);
}
