// KvBookkeeping::fingerprint(): stores given the same calls in the same order keep equal
// fingerprints (what tensor-parallel ranks compare), a call that changes anything changes it, and
// a call that fails leaves it as it was (the strong guarantee, checked on the whole state).
#include "support/catch.hpp"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "lazyattn/kv/store.hpp"

using namespace lazyattn;

namespace {

KvStoreConfig small_config(EvictionPolicy eviction) {
  KvStoreConfig c;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.page_size = 4;
  c.num_pages = 24;
  c.eviction = eviction;
  return c;
}

// One random call, the same on every store it is given to (handles are picked by index, so they
// name the same document in each store). Returns whether the call threw.
struct Driver {
  std::mt19937_64 rng;
  std::vector<DocKey> keys;
  explicit Driver(std::uint64_t seed) : rng(seed) {
    for (std::uint64_t i = 0; i < 12; ++i) keys.push_back(DocKey{i, 77 + i});
  }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  // Draws the call first, then applies it to each store.
  template <class Apply>
  void step(Apply&& apply_to_all) {
    const int op = pick(7);
    const DocKey key = keys[static_cast<std::size_t>(pick(static_cast<int>(keys.size())))];
    const std::int64_t length = 1 + pick(30);
    apply_to_all(op, key, length, pick(1 << 20));
  }
};

// Applies call (op, key, length, r) to one store; tails and pins are tracked per store.
struct Client {
  KvBookkeeping& store;
  std::vector<DocHandle> pinned;
  std::vector<TailHandle> tails;
  bool apply(int op, const DocKey& key, std::int64_t length, int r) {
    try {
      switch (op) {
        case 0: {  // allocate and commit (pinned)
          const InsertResult res = store.allocate(key, StorageForm::kLocal, length);
          if (res.inserted) store.commit(res.handle);
          pinned.push_back(res.handle);
          break;
        }
        case 1: {  // find, pinning or not
          const std::optional<DocHandle> h = store.find(key, StorageForm::kLocal, r % 2 == 0);
          if (h && r % 2 == 0) pinned.push_back(*h);
          break;
        }
        case 2:  // unpin one
          if (!pinned.empty()) {
            const std::size_t i = static_cast<std::size_t>(r) % pinned.size();
            store.unpin(pinned[i]);
            pinned.erase(pinned.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 3:  // a tail
          tails.push_back(store.create_tail(StorageForm::kLocal));
          break;
        case 4:  // grow a tail (may evict, or fail when the pool is full of pinned pages)
          if (!tails.empty())
            store.reserve(tails[static_cast<std::size_t>(r) % tails.size()], length);
          break;
        case 5:  // release a tail
          if (!tails.empty()) {
            const std::size_t i = static_cast<std::size_t>(r) % tails.size();
            store.release(tails[i]);
            tails.erase(tails.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        default: {  // erase a document if stored and unpinned
          const std::optional<DocHandle> h = store.find(key, StorageForm::kLocal, false);
          if (h && store.info(*h).pins == 0) store.erase(*h);
          break;
        }
      }
      return false;
    } catch (const Error&) {
      return true;
    }
  }
};

}  // namespace

TEST_CASE("stores given the same calls keep equal fingerprints; a failed call keeps it", "[kv]") {
  for (EvictionPolicy eviction : {EvictionPolicy::kLru, EvictionPolicy::kSegmentedLru}) {
    INFO("eviction " << to_string(eviction));
    KvBookkeeping a(small_config(eviction)), b(small_config(eviction));
    REQUIRE(a.id() != b.id());
    CHECK(a.fingerprint() == b.fingerprint());
    Client ca{a, {}, {}}, cb{b, {}, {}};
    Driver driver(eviction == EvictionPolicy::kLru ? 11 : 12);
    int failed = 0, unchanged_ok = 0;
    for (int step = 0; step < 3000; ++step) {
      driver.step([&](int op, const DocKey& key, std::int64_t length, int r) {
        const std::uint64_t before = a.fingerprint();
        const bool fa = ca.apply(op, key, length, r);
        const bool fb = cb.apply(op, key, length, r);
        INFO("step " << step << " op " << op);
        REQUIRE(fa == fb);
        REQUIRE(a.fingerprint() == b.fingerprint());
        if (fa) {
          ++failed;
          CHECK(a.fingerprint() == before);  // the strong guarantee, on the whole state
        } else if (a.fingerprint() == before) {
          ++unchanged_ok;  // a call that changed nothing (unpin or release of nothing)
        }
      });
      if (step % 500 == 0) a.validate();
    }
    INFO(failed << " failed calls, " << unchanged_ok << " successful calls changed nothing");
    CHECK(failed > 10);  // the sequence reaches full pools of pinned pages
  }
}

TEST_CASE("a fingerprint moves with every call that changes the bookkeeping", "[kv]") {
  KvBookkeeping a(small_config(EvictionPolicy::kLru)), b(small_config(EvictionPolicy::kLru));
  const DocKey k1{1, 2}, k2{3, 4};
  std::vector<std::uint64_t> seen{a.fingerprint()};
  auto differs = [&](const char* what) {
    INFO(what);
    for (std::uint64_t f : seen) CHECK(a.fingerprint() != f);
    seen.push_back(a.fingerprint());
  };
  const InsertResult r1 = a.allocate(k1, StorageForm::kLocal, 9);
  differs("allocate");
  a.commit(r1.handle);
  differs("commit");
  a.unpin(r1.handle);
  differs("unpin (the use clock and the pins)");
  CHECK(!a.find(k2, StorageForm::kLocal));
  differs("a find that misses (the statistics)");
  CHECK(a.find(k1, StorageForm::kLocal));
  differs("a find that hits (the use clock)");
  const TailHandle t = a.create_tail(StorageForm::kLocal);
  differs("create_tail");
  a.reserve(t, 3);
  differs("reserve");
  a.release(t);
  differs("release");
  a.erase(r1.handle);
  differs("erase");
  // Same documents, another order of calls: another state (the clock and the free lists).
  const InsertResult x = b.allocate(k2, StorageForm::kLocal, 9);
  b.commit(x.handle);
  CHECK(b.fingerprint() != a.fingerprint());
}
