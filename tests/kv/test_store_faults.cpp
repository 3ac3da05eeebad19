// KvStore and KvBookkeeping under allocation failure: every mutating call is run with its k-th
// allocation failing, for k = 0, 1, 2, ... until it succeeds; after each failure validate() passes
// and the statistics, documents (pins, pages, LRU order), tails and a store's pool bytes are as
// before the call, and a store that went through the failures still evicts only unpinned
// documents. The strong-guarantee cases run under both eviction policies (LRU, segmented LRU).
#include "support/catch.hpp"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kv/store_contents.hpp"
#include "kv/store_state.hpp"
#include "lazyattn/kv.hpp"

// The program's allocation functions (replaceable), failing on request: after arm(k), the k-th
// operator new of this thread from then on throws std::bad_alloc.
namespace {
thread_local long fail_at = -1;
thread_local long seen = 0;

void* checked_alloc(std::size_t n) {
  if (fail_at >= 0 && seen++ == fail_at) {
    fail_at = -1;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

// Every unaligned form, nothrow ones too, so that each new pairs with this file's delete (a
// sanitizer's own operator new freed here would be a mismatch); the aligned forms stay the
// runtime's, new and delete alike.
void* operator new(std::size_t n) { return checked_alloc(n); }
void* operator new[](std::size_t n) { return checked_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return checked_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace lazyattn;
namespace tk = lazyattn::test::kv;

namespace {

void arm(long k) {
  seen = 0;
  fail_at = k;
}
// Whether the armed failure fired (then the call saw a bad_alloc).
bool disarm() {
  const bool fired = fail_at < 0;
  fail_at = -1;
  return fired;
}

// The eviction policy of the fixtures' stores (each test case runs under both).
EvictionPolicy policy = EvictionPolicy::kLru;

KvStoreConfig config() {
  KvStoreConfig c;
  c.eviction = policy;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.page_size = 4;
  c.dtype = DType::kFloat16;
  c.num_pages = 12;
  return c;
}

// A fixture: documents pinned and not (in a known LRU order) and tails, handles kept. A KvStore
// is filled through insert and append; the bookkeeping alone through allocate, commit and reserve,
// as a caller whose K/V live elsewhere does.
template <class Store>
struct Fixture {
  static constexpr bool kHasPools = std::is_same_v<Store, KvStore>;
  Store store{config()};
  std::vector<DocHandle> docs;
  std::vector<TailHandle> tails;

  Fixture() {
    docs.reserve(64);  // the ops' push_backs must not allocate while a failure is armed
    tails.reserve(64);
    const KvStoreConfig c = store.config();
    auto add = [&](std::uint64_t id, std::int64_t n, bool pin) {
      if constexpr (kHasPools) {
        auto k = tk::make_tokens<float>(c, {id, DType::kFloat32}, 0, 0, n);
        auto v = tk::make_tokens<float>(c, {id, DType::kFloat32}, 1, 0, n);
        docs.push_back(store.insert(DocKey{0, id}, StorageForm::kLocal, n, k, v, pin).handle);
      } else {
        const DocHandle h = store.allocate(DocKey{0, id}, StorageForm::kLocal, n).handle;
        store.commit(h);
        if (!pin) store.unpin(h);
        docs.push_back(h);
      }
    };
    add(1, 8, true);   // pages 2, pinned
    add(2, 4, false);  // 1 page, unpinned (oldest)
    add(3, 8, false);  // 2 pages, unpinned
    add(4, 3, true);   // 1 page, pinned
    tails.push_back(store.create_tail(StorageForm::kRaw));
    if constexpr (kHasPools) {
      auto k = tk::make_tokens<float>(c, {9, DType::kFloat32}, 0, 0, 5);
      store.append(tails[0], 5, k, k);  // 2 pages
    } else {
      store.reserve(tails[0], 5);
    }
    tails.push_back(store.create_tail(StorageForm::kLocal));
    store.release(tails[1]);  // a free tail slot
    // 8 of 12 pages in use, 3 of them evictable.
  }

  tk::Snapshot state() const { return tk::snapshot(store, docs, tails); }
};

// Runs op with its k-th allocation failing, k = 0, 1, ...: each failure must leave the store as
// it was. Returns how many allocation points failed before the call got through.
template <class Store>
int run_with_failures(Fixture<Store>& f, const std::function<void(Fixture<Store>&)>& op) {
  const tk::Snapshot before = f.state();
  for (long k = 0; k < 200; ++k) {
    arm(k);
    try {
      op(f);
    } catch (const std::bad_alloc&) {
      REQUIRE(disarm());
      INFO("allocation " << k << " failed");
      f.store.validate();
      tk::check_same(f.state(), before);
      continue;
    }
    REQUIRE_FALSE(disarm());  // the call got through without reaching allocation k
    f.store.validate();
    return static_cast<int>(k);
  }
  FAIL("the call kept allocating past 200 allocations");
  return -1;
}

template <class Store>
struct Op {
  const char* name;
  std::function<void(Fixture<Store>&)> prepare;  // run normally, before the state is taken
  std::function<void(Fixture<Store>&)> run;      // the one call under failure
};

// The bookkeeping's own calls, the same for a KvStore and for the bookkeeping alone.
template <class Store>
std::vector<Op<Store>> bookkeeping_ops() {
  using F = Fixture<Store>;
  auto none = [](F&) {};
  return {
      {"allocate", none,
       [](F& f) {
         f.store.allocate(DocKey{0, 30}, StorageForm::kLocal, 9);
       }},
      {"allocate, evicting",
       [](F& f) {  // 3 of the 4 free pages, pinned: 1 free, 3 evictable
         f.store.allocate(DocKey{0, 20}, StorageForm::kLocal, 12);
       },
       [](F& f) {  // 3 pages: evicts the two unpinned documents
         f.docs.push_back(f.store.allocate(DocKey{0, 21}, StorageForm::kRaw, 10).handle);
       }},
      {"allocate, dedupe", none,
       [](F& f) {
         f.store.allocate(DocKey{0, 2}, StorageForm::kLocal, 4);
       }},
      {"find, touching", none,
       [](F& f) {
         f.store.find(DocKey{0, 2}, StorageForm::kLocal);
       }},
      {"find, pinning", none,
       [](F& f) {
         f.store.find(DocKey{0, 3}, StorageForm::kLocal, true);
       }},
      {"find, missing", none,
       [](F& f) {
         f.store.find(DocKey{0, 99}, StorageForm::kLocal);
       }},
      {"pin", none, [](F& f) { f.store.pin(f.docs[1]); }},
      {"unpin to zero", none, [](F& f) { f.store.unpin(f.docs[0]); }},
      {"unpin, still pinned", [](F& f) { f.store.pin(f.docs[3]); },
       [](F& f) { f.store.unpin(f.docs[3]); }},
      {"erase", none, [](F& f) { f.store.erase(f.docs[2]); }},
      {"commit", none, [](F& f) { f.store.commit(f.docs[0]); }},
      {"create_tail, reused slot", none, [](F& f) { f.store.create_tail(StorageForm::kRaw); }},
      {"create_tail, growing the slots",
       [](F& f) {  // the slot vector full (capacity 8)
         for (int i = 0; i < 7; ++i) f.tails.push_back(f.store.create_tail(StorageForm::kRaw));
       },
       [](F& f) { f.tails.push_back(f.store.create_tail(StorageForm::kRaw)); }},
      {"reserve", none, [](F& f) { f.store.reserve(f.tails[0], 3); }},
      {"reserve, evicting",
       [](F& f) { f.store.reserve(f.tails[0], 11); },   // 16 tokens: 2 free pages
       [](F& f) { f.store.reserve(f.tails[0], 12); }},  // 3 more pages: evicts
      {"release", none, [](F& f) { f.store.release(f.tails[0]); }},
  };
}

template <class Store>
void check_strong_guarantee(const std::vector<Op<Store>>& ops) {
  for (const Op<Store>& op : ops) {
    DYNAMIC_SECTION(op.name) {
      Fixture<Store> f;
      op.prepare(f);
      const int points = run_with_failures(f, op.run);
      INFO(op.name << ": " << points
                   << " allocation points failed, each leaving the store as it was");
      CHECK(points >= 0);
    }
  }
}

}  // namespace

TEST_CASE("KvStore gives the strong guarantee when allocations fail", "[kv][store][faults]") {
  for (EvictionPolicy p : {EvictionPolicy::kLru, EvictionPolicy::kSegmentedLru}) {
    policy = p;
    INFO("eviction " << to_string(p));
    const KvStoreConfig c = config();
    auto tokens = [&](std::uint64_t seed, std::int64_t n) {
      return tk::make_tokens<float>(c, {seed, DType::kFloat32}, 0, 0, n);
    };
    // The K/V each call reads, made before any failure is armed.
    const auto k3 = tokens(20, 12), k10 = tokens(21, 10), k4 = tokens(2, 4), k11 = tokens(40, 11),
               k12 = tokens(41, 12);
    using F = Fixture<KvStore>;
    std::vector<Op<KvStore>> ops = bookkeeping_ops<KvStore>();
    const std::vector<Op<KvStore>> copies = {
        {"insert, evicting",
         [&](F& f) {  // 3 of the 4 free pages, pinned: 1 free, 3 evictable
           f.store.insert(DocKey{0, 20}, StorageForm::kLocal, 12, k3, k3, true);
         },
         [&](F& f) {  // 3 pages: evicts the two unpinned documents
           f.docs.push_back(f.store.insert(DocKey{0, 21}, StorageForm::kRaw, 10, k10, k10).handle);
         }},
        {"insert, dedupe", [](F&) {},
         [&](F& f) {
           f.store.insert(DocKey{0, 2}, StorageForm::kLocal, 4, k4, k4, true);
         }},
        {"append, evicting",
         [&](F& f) { f.store.append(f.tails[0], 11, k11, k11); },   // 16 tokens: 2 free pages
         [&](F& f) { f.store.append(f.tails[0], 12, k12, k12); }},  // 3 more pages: evicts
    };
    ops.insert(ops.end(), copies.begin(), copies.end());
    check_strong_guarantee(ops);
  }
  policy = EvictionPolicy::kLru;
}

TEST_CASE("KvBookkeeping alone gives the strong guarantee when allocations fail",
          "[kv][bookkeeping][faults]") {
  for (EvictionPolicy p : {EvictionPolicy::kLru, EvictionPolicy::kSegmentedLru}) {
    policy = p;
    INFO("eviction " << to_string(p));
    check_strong_guarantee(bookkeeping_ops<KvBookkeeping>());
  }
  policy = EvictionPolicy::kLru;
}

TEST_CASE("KvStore's eviction never takes a pinned document", "[kv][store][faults]") {
  Fixture<KvStore> f;
  const KvStoreConfig c = f.store.config();
  // Free pages: 4; evictable: 3. A 7-page insert takes everything unpinned, an 8-page one fails.
  auto k = tk::make_tokens<float>(c, {60, DType::kFloat32}, 0, 0, 28);
  f.store.insert(DocKey{0, 60}, StorageForm::kLocal, 28, k, k, true);
  CHECK(f.store.is_live(f.docs[0]));
  CHECK(f.store.is_live(f.docs[3]));
  CHECK_FALSE(f.store.is_live(f.docs[1]));
  CHECK_FALSE(f.store.is_live(f.docs[2]));
  auto k2 = tk::make_tokens<float>(c, {61, DType::kFloat32}, 0, 0, 4);
  CHECK_THROWS_WITH(f.store.insert(DocKey{0, 61}, StorageForm::kLocal, 4, k2, k2),
                    Catch::Contains("store full: need 1 pages, 0 free and 0 held by unpinned"));
  f.store.validate();
}

TEST_CASE("KvBookkeeping's eviction never takes a pinned document", "[kv][bookkeeping][faults]") {
  Fixture<KvBookkeeping> f;
  // The same as the store's, through reserve: 7 pages take everything unpinned, 1 more fails.
  const TailHandle t = f.store.create_tail(StorageForm::kLocal);
  f.store.reserve(t, 28);
  CHECK(f.store.is_live(f.docs[0]));
  CHECK(f.store.is_live(f.docs[3]));
  CHECK_FALSE(f.store.is_live(f.docs[1]));
  CHECK_FALSE(f.store.is_live(f.docs[2]));
  CHECK_THROWS_WITH(f.store.allocate(DocKey{0, 61}, StorageForm::kLocal, 4),
                    Catch::Contains("store full: need 1 pages, 0 free and 0 held by unpinned"));
  f.store.validate();
}
