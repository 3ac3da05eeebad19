// Handles and plans carry their store's identity (issue 24): a store refuses another store's
// document and tail handles and a default one, and a plan is refused at use (check_plan_current)
// when it is another store's, or when a document it read was evicted or erased or a tail it read
// was released since, whether or not the slot was reused. Each message names the value.
#include "support/catch.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kv/store_contents.hpp"
#include "kv/store_state.hpp"
#include "lazyattn/kv.hpp"
#include "support/str.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;
using Catch::Contains;

namespace {

using lazyattn::test::str;

KvStoreConfig config(std::int64_t num_pages) {
  KvStoreConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.page_size = 4;
  c.dtype = DType::kFloat32;
  c.num_pages = num_pages;
  return c;
}

DocHandle insert(KvStore& s, std::uint64_t id, std::int64_t len, bool pin) {
  return tk::insert_spec(s, DocKey{id, 0}, StorageForm::kLocal, len, {id, DType::kFloat32}, pin)
      .handle;
}
TailHandle tail(KvStore& s, std::uint64_t id, std::int64_t len) {
  TailHandle t = s.create_tail(StorageForm::kLocal);
  tk::append_spec(s, t, 0, len, {id, DType::kFloat32});
  return t;
}

}  // namespace

TEST_CASE("a store refuses another store's handles, naming them", "[kv][store][identity]") {
  KvStore a(config(16)), b(config(16));
  REQUIRE(a.id() != b.id());
  REQUIRE(a.id() != 0);
  // The same slots and generations in both stores: only the store tells them apart.
  const DocHandle da = insert(a, 1, 5, true), db = insert(b, 2, 5, true);
  const TailHandle ta = tail(a, 3, 2), tb = tail(b, 4, 2);
  CHECK(da.slot == db.slot);
  CHECK(da.generation == db.generation);
  CHECK(da.store == a.id());
  CHECK(db.store == b.id());
  CHECK(ta.slot == tb.slot);
  CHECK(ta.store == a.id());
  const std::vector<DocHandle> docs{da};
  const std::vector<TailHandle> tails{ta};
  const tk::Snapshot before = tk::snapshot(a, docs, tails);
  const std::string theirs = " is a handle of another store, expected one of this store (store " +
                             std::to_string(a.id()) + ")";
  auto bad = [&](auto call, const std::string& message) {
    INFO(message);
    CHECK_THROWS_AS(call(), Error);
    CHECK_THROWS_WITH(call(), Contains(message));
    tk::check_same(tk::snapshot(a, docs, tails), before);
  };
  CHECK_FALSE(a.is_live(db));
  CHECK_FALSE(a.is_live(tb));
  bad([&] { a.pin(db); }, "KvStore::pin: " + str(db) + theirs);
  bad([&] { a.unpin(db); }, "KvStore::unpin: " + str(db) + theirs);
  bad([&] { a.erase(db); }, "KvStore::erase: " + str(db) + theirs);
  bad([&] { a.commit(db); }, "KvStore::commit: " + str(db) + theirs);
  bad([&] { a.info(db); }, "KvStore::info: " + str(db) + theirs);
  // B's tail appended into A (it would land in A's tail in the same slot).
  const std::vector<float> k1(2, 1.0f);
  bad([&] { a.append(tb, 1, k1, k1); }, "KvStore::append: " + str(tb) + theirs);
  bad([&] { a.reserve(tb, 1); }, "KvStore::reserve: " + str(tb) + theirs);
  bad([&] { a.release(tb); }, "KvStore::release: " + str(tb) + theirs);
  bad([&] { a.info(tb); }, "KvStore::info: " + str(tb) + theirs);
  // A handle made by hand names no store, even with a live slot and generation.
  const DocHandle raw{da.slot, da.generation};
  CHECK_FALSE(a.is_live(raw));
  bad([&] { a.pin(raw); }, "KvStore::pin: " + str(raw) +
                               " is no store's handle (store 0: a default or hand-made handle)");
  bad([&] { a.info(TailHandle{}); },
      "KvStore::info: tail(slot 4294967295, generation 0, store 0)"
      " is no store's handle");
  // Layouts and plans refuse them too, with their place.
  const std::vector<DocHandle> mixed{da, db};
  bad([&] { layouts::back_to_back(a, mixed, ta); },
      "layouts::back_to_back: document 1: KvStore::info: " + str(db) + theirs);
  RequestLayout r;
  r.segments = {Segment::document(db, 5, 0), Segment::of_tail(ta, 2, 5)};
  bad([&] { make_plan(a, r); },
      "make_plan: request 0 segment 0: KvStore::info: " + str(db) + theirs);
  r.segments = {Segment::document(da, 5, 0), Segment::of_tail(tb, 2, 5)};
  bad([&] { make_plan(a, r); },
      "make_plan: request 0 segment 1: KvStore::info: " + str(tb) + theirs);
  bad([&] { encode_plan(a, mixed); },
      "encode_plan: document 1: KvStore::info: " + str(db) + theirs);
  CHECK_NOTHROW(a.validate());
  CHECK_NOTHROW(b.validate());
}

TEST_CASE("a plan is refused at use by another store", "[kv][plan][identity]") {
  KvStore a(config(16)), b(config(16));
  const DocHandle da = insert(a, 1, 5, true);
  insert(b, 2, 5, true);
  const TailHandle ta = tail(a, 3, 2);
  tail(b, 4, 2);
  const std::vector<DocHandle> docs{da};
  const Plan p = make_plan(a, layouts::back_to_back(a, docs, ta));
  CHECK(p.store_id == a.id());
  CHECK_NOTHROW(check_plan_current(a, p));
  CHECK_THROWS_WITH(check_plan_current(b, p, "attend"),
                    Contains("attend: the plan was made from store " + std::to_string(a.id()) +
                             ", expected one of this store (store " + std::to_string(b.id()) +
                             "): its page ids index another pool"));
  // Joining plans of two stores is refused too, naming both.
  Plan joined = p;
  const Plan theirs = encode_plan(b, std::vector<DocHandle>{});
  const Plan before = joined;
  CHECK_THROWS_WITH(
      append_plan(joined, theirs),
      Contains("append_plan: src was made from store " + std::to_string(b.id()) +
               ", dst from store " + std::to_string(a.id()) + ", expected plans of one store"));
  CHECK(joined.page_ids == before.page_ids);
  CHECK(joined.store_id == before.store_id);
}

TEST_CASE("a plan whose document was evicted or erased is refused at use", "[kv][plan][identity]") {
  KvStore s(config(4));
  const DocHandle x = insert(s, 1, 4, true), y = insert(s, 2, 4, true);
  const TailHandle t = tail(s, 3, 2);
  const std::vector<DocHandle> xy{x, y};
  const Plan p = make_plan(s, layouts::back_to_back(s, xy, t));
  CHECK(p.sources.size() == 3);
  CHECK_NOTHROW(check_plan_current(s, p));
  // Pins, finds, a tail that grows: nothing removed, the plan's pages are still its own.
  s.unpin(x);
  s.find(DocKey{2, 0}, StorageForm::kLocal);
  const std::vector<float> k1(2, 1.0f);
  s.append(t, 1, k1, k1);
  CHECK(s.removals() == p.store_removals);
  CHECK_NOTHROW(check_plan_current(s, p));

  SECTION("evicted, its slot and pages reused by another document") {
    // One free page: a 2-page document evicts x, the only unpinned one, and takes its slot.
    const DocHandle z = insert(s, 4, 8, true);
    CHECK_FALSE(s.is_live(x));
    CHECK(z.slot == x.slot);
    CHECK(z.generation != x.generation);
    CHECK(s.stats().evictions == 1);
    CHECK_THROWS_WITH(check_plan_current(s, p, "ref::decode"),
                      Contains("ref::decode: plan source 0 " + str(x) +
                               " was evicted or erased since the plan was made, expected a plan "
                               "whose documents stay stored (pin them); make a new plan"));
    // A plan made now is current.
    const std::vector<DocHandle> zy{z, y};
    CHECK_NOTHROW(check_plan_current(s, make_plan(s, layouts::back_to_back(s, zy, t))));
  }
  SECTION("erased") {
    s.erase(x);
    CHECK_THROWS_WITH(check_plan_current(s, p),
                      Contains("check_plan_current: plan source 0 " + str(x) + " was evicted"));
  }
  SECTION("another document removed: the plan is checked in full and still current") {
    const DocHandle u = insert(s, 9, 1, false);
    s.erase(u);
    CHECK(s.removals() != p.store_removals);
    CHECK_NOTHROW(check_plan_current(s, p));
  }
  s.validate();
}

TEST_CASE("a plan whose tail was released, or released and reused, is refused at use",
          "[kv][plan][identity]") {
  KvStore s(config(8));
  const DocHandle x = insert(s, 1, 4, true);
  const TailHandle t = tail(s, 2, 3);
  const std::vector<DocHandle> docs{x};
  const Plan p = make_plan(s, layouts::back_to_back(s, docs, t, 2));
  s.release(t);
  const std::string message = "plan source 1 " + str(t) + " was released since the plan was made";
  CHECK_THROWS_WITH(check_plan_current(s, p), Contains(message));
  // Reused: the same slot, a new generation, the same pages filled with another request's keys.
  const TailHandle u = tail(s, 3, 3);
  CHECK(u.slot == t.slot);
  CHECK(s.info(u).pages == std::vector<std::int32_t>(p.page_ids.begin() + 1, p.page_ids.end()));
  CHECK_THROWS_WITH(check_plan_current(s, p), Contains(message));
}

TEST_CASE("the plan algebra keeps the sources: encodings, joined and coalesced plans are checked",
          "[kv][plan][identity]") {
  KvStore s(config(8));
  const DocHandle x = insert(s, 1, 4, true), y = insert(s, 2, 4, false);
  const TailHandle t = tail(s, 3, 2);
  // y is being encoded: an encoding plan reads it before it is committed, as it fills it.
  const DocHandle e = s.allocate(DocKey{5, 0}, StorageForm::kLocal, 4).handle;
  // x and y at one start, x filling its page: coalesced into one segment, both still sources.
  RequestLayout r;
  r.segments = {Segment::document(x, 4, 0), Segment::document(y, 4, 0), Segment::of_tail(t, 2, 8)};
  Plan step = make_plan(s, r);
  coalesce_document_segments(step);
  CHECK(step.num_segments() == 2);
  CHECK(step.sources.size() == 3);
  Plan joined = encode_plan(s, std::vector<DocHandle>{e});
  append_plan(joined, step);
  CHECK(joined.store_id == s.id());
  REQUIRE(joined.sources.size() == 4);
  CHECK(joined.sources[0].doc == e);
  CHECK(joined.sources[1].doc == x);
  CHECK(joined.sources[2].doc == y);
  CHECK(joined.sources[3].tail == t);
  CHECK_NOTHROW(check_plan_current(s, joined));
  s.erase(y);
  CHECK_THROWS_WITH(check_plan_current(s, joined),
                    Contains("plan source 2 " + str(y) + " was evicted or erased"));
  CHECK_THROWS_WITH(check_plan_current(s, step),
                    Contains("plan source 1 " + str(y) + " was evicted or erased"));
  s.unpin(e);
  s.erase(e);
  CHECK_THROWS_WITH(check_plan_current(s, joined),
                    Contains("plan source 0 " + str(e) + " was evicted or erased"));
  // A plan built by hand names no store and is not checked.
  Plan by_hand = joined;
  by_hand.store_id = 0;
  CHECK_NOTHROW(check_plan_current(s, by_hand));
}
