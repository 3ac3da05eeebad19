// KvStore's input checks: each bad call throws lazyattn::Error naming the bad value, and leaves the
// store's statistics, bookkeeping and every byte of its pools exactly as they were.
#include "support/catch.hpp"
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kv/store_contents.hpp"
#include "kv/store_state.hpp"
#include "lazyattn/kv.hpp"
#include "support/str.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;

namespace {

using lazyattn::test::str;

KvStoreConfig small_config() {
  KvStoreConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.page_size = 4;
  c.dtype = DType::kFloat16;
  c.num_pages = 10;
  return c;
}

}  // namespace

TEST_CASE("KvStore rejects bad configurations, naming the value", "[kv][store][errors]") {
  auto with = [](auto edit) {
    KvStoreConfig c = small_config();
    edit(c);
    return c;
  };
  using Catch::Contains;
  CHECK_THROWS_AS(KvStore(with([](auto& c) { c.num_layers = 0; })), Error);
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.num_layers = 0; })),
                    Contains("KvStore: num_layers 0, expected >= 1"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.num_kv_heads = -1; })),
                    Contains("num_kv_heads -1, expected >= 1"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.head_dim = 3; })),
                    Contains("head_dim 3, expected an even number in [2, 1024]"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.head_dim = 0; })), Contains("head_dim 0"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.head_dim = 1026; })), Contains("head_dim 1026"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.page_size = 12; })),
                    Contains("page_size 12, expected a power of two in [1, 1024]"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.page_size = 0; })), Contains("page_size 0"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.page_size = 2048; })), Contains("page_size 2048"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.num_pages = 0; })),
                    Contains("num_pages 0, expected in [1, 2^31 - 1]"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.num_pages = std::int64_t{1} << 31; })),
                    Contains("num_pages 2147483648"));
  CHECK_THROWS_WITH(KvStore(with([](auto& c) { c.dtype = static_cast<DType>(7); })),
                    Contains("dtype 7, expected float32, float16, bfloat16 or float8_e4m3"));
  // A pool whose byte count overflows int64 must be refused before anything is allocated.
  CHECK_THROWS_WITH(KvStore(with([](auto& c) {
                      c.num_layers = 1 << 30;
                      c.num_kv_heads = 1 << 20;
                      c.head_dim = 1024;
                      c.page_size = 1024;
                      c.num_pages = (std::int64_t{1} << 31) - 1;
                    })),
                    Contains("overflows int64"));
  // The default configuration is valid and gives page size 16.
  KvStore defaults{KvStoreConfig{}};
  CHECK(defaults.config().page_size == 16);
  CHECK(defaults.geometry().page_size == 16);
}

TEST_CASE("KvStore's failed calls name the bad value and change nothing", "[kv][store][errors]") {
  using Catch::Contains;
  KvStore s(small_config());
  const KvStoreConfig& c = s.config();
  auto elems = [&](std::int64_t n) {
    return static_cast<std::size_t>(c.num_layers * n * c.num_kv_heads * c.head_dim);
  };
  // A: 5 tokens (2 pages), unpinned. B: 8 tokens (2 pages), pinned. C: allocated, 3 tokens,
  // pinned and not committed. D: erased. T: a tail of 6 tokens (2 pages). U: released.
  // 7 of 10 pages in use, 3 free, 2 evictable (A).
  const tk::ContentSpec sa{11, DType::kFloat32}, sb{12, DType::kFloat16}, sc{13, DType::kFloat16},
      st{14, DType::kBFloat16};
  DocHandle a = tk::insert_spec(s, DocKey{0xa, 1}, StorageForm::kRaw, 5, sa, false).handle;
  DocHandle b = tk::insert_spec(s, DocKey{0xb, 1}, StorageForm::kLocal, 8, sb, true).handle;
  DocHandle cdoc = s.allocate(DocKey{0xc, 1}, StorageForm::kRaw, 3).handle;
  tk::write_through_pool(s, s.info(cdoc).pages, sc, 0, 3);
  DocHandle d = tk::insert_spec(s, DocKey{0xd, 1}, StorageForm::kRaw, 1, sa, false).handle;
  s.erase(d);
  TailHandle t = s.create_tail(StorageForm::kLocal);
  tk::append_spec(s, t, 0, 6, st);
  TailHandle u = s.create_tail(StorageForm::kRaw);
  s.reserve(u, 2);
  s.release(u);
  REQUIRE(s.stats().pages_in_use == 7);
  REQUIRE_NOTHROW(s.validate());

  const std::vector<DocHandle> docs{a, b, cdoc, d};
  const std::vector<TailHandle> tails{t, u};
  // Runs the bad call twice (once for the type, once for the message) and checks nothing moved.
  auto bad = [&](auto&& call, const std::string& needle) {
    INFO("expected message containing: " << needle);
    tk::Snapshot before = tk::snapshot(s, docs, tails);
    CHECK_THROWS_AS(call(), Error);
    CHECK_THROWS_WITH(call(), Contains(needle));
    tk::check_same(before, tk::snapshot(s, docs, tails));
    CHECK_NOTHROW(s.validate());
  };
  std::vector<float> k5(elems(5), 0.25f), v5(elems(5), 0.5f);

  SECTION("shapes and lengths") {
    std::vector<float> short_k(elems(5) - 1, 1.0f), long_v(elems(5) + 3, 1.0f);
    bad(
        [&] {
          s.insert(DocKey{0xe, 1}, StorageForm::kRaw, 5, short_k, v5);
        },
        "KvStore::insert: k has " + std::to_string(elems(5) - 1) + " elements, expected " +
            std::to_string(elems(5)) + " = [num_layers 2, length 5, num_kv_heads 2, head_dim 4]");
    bad(
        [&] {
          s.insert(DocKey{0xe, 1}, StorageForm::kRaw, 5, k5, long_v);
        },
        "v has " + std::to_string(elems(5) + 3) + " elements");
    std::vector<float> none;
    bad(
        [&] {
          s.insert(DocKey{0xe, 1}, StorageForm::kRaw, 0, none, none);
        },
        "KvStore::insert: length 0, expected in [1, 2^31 - 1]");
    bad([&] { s.insert(DocKey{0xe, 1}, StorageForm::kRaw, -3, none, none); }, "length -3");
    bad(
        [&] {
          s.allocate(DocKey{0xe, 1}, StorageForm::kRaw, std::int64_t{1} << 31);
        },
        "KvStore::allocate: length 2147483648, expected in [1, 2^31 - 1]");
    bad(
        [&] {
          s.allocate(DocKey{0xe, 1}, StorageForm::kRaw, 41);
        },
        "KvStore::allocate: length 41 needs 11 pages, expected at most the store's num_pages 10");
    std::vector<float> k41(elems(41), 1.0f);
    bad(
        [&] {
          s.insert(DocKey{0xe, 1}, StorageForm::kRaw, 41, k41, k41);
        },
        "KvStore::insert: length 41 needs 11 pages");
    bad(
        [&] {
          s.insert(DocKey{0xe, 1}, static_cast<StorageForm>(9), 5, k5, v5);
        },
        "KvStore::insert: storage form 9, expected raw (0) or local (1)");
    bad([&] { s.allocate(DocKey{0xe, 1}, static_cast<StorageForm>(2), 5); }, "storage form 2");
    bad(
        [&] {
          s.find(DocKey{0xa, 1}, static_cast<StorageForm>(3));
        },
        "KvStore::find: storage form 3");
    bad([&] { s.create_tail(static_cast<StorageForm>(4)); },
        "KvStore::create_tail: storage form 4");
    bad([&] { s.pages_for(-1); }, "KvStore::pages_for: length -1, expected >= 0");
  }

  SECTION("an existing key with a different length") {
    bad(
        [&] {
          tk::insert_spec(s, DocKey{0xa, 1}, StorageForm::kRaw, 6, sa, false);
        },
        "is stored with length 5, got length 6");
    bad(
        [&] {
          s.allocate(DocKey{0xb, 1}, StorageForm::kLocal, 7);
        },
        "KvStore::allocate: key " + str(DocKey{0xb, 1}) +
            " (local) is stored with length 8, got length 7");
  }

  SECTION("stale and unknown document handles") {
    const std::string stale = "stale document handle " + str(d);
    bad([&] { s.pin(d); }, "KvStore::pin: " + stale);
    bad([&] { s.unpin(d); }, "KvStore::unpin: " + stale);
    bad([&] { s.erase(d); }, "KvStore::erase: " + stale);
    bad([&] { s.commit(d); }, "KvStore::commit: " + stale);
    bad([&] { s.info(d); }, "KvStore::info: " + stale);
    CHECK_FALSE(s.is_live(d));
    DocHandle nowhere{99, 0, s.id()};
    bad([&] { s.pin(nowhere); },
        "doc(slot 99, generation 0, store " + std::to_string(s.id()) + ") names no document slot");
    DocHandle wrong_generation{a.slot, a.generation + 1, a.store};
    bad([&] { s.info(wrong_generation); }, "stale document handle " + str(wrong_generation));
  }

  SECTION("pins") {
    bad([&] { s.unpin(a); }, "KvStore::unpin: " + str(a) + " has pin count 0, expected > 0");
    bad([&] { s.erase(b); }, "KvStore::erase: " + str(b) + " is pinned 1 times, expected 0");
    bad([&] { s.erase(cdoc); }, "is pinned 1 times");
  }

  SECTION("a full store") {
    // 6 pages wanted, 3 free and A's 2 evictable: nothing may be evicted for a doomed insert.
    std::vector<float> k24(elems(24), 1.0f);
    bad(
        [&] {
          s.insert(DocKey{0xf, 1}, StorageForm::kRaw, 24, k24, k24);
        },
        "KvStore::insert: store full: need 6 pages, 3 free and 2 held by unpinned documents, of 10 "
        "pages");
    bad(
        [&] {
          s.allocate(DocKey{0xf, 1}, StorageForm::kRaw, 21);
        },
        "KvStore::allocate: store full: need 6 pages");
    // T holds 6 tokens in 2 pages; 26 more make 32 tokens, 8 pages: 6 new.
    std::vector<float> k26(elems(26), 1.0f);
    bad([&] { s.append(t, 26, k26, k26); }, "KvStore::append: store full: need 6 pages");
    bad([&] { s.reserve(t, 26); }, "KvStore::reserve: store full: need 6 pages");
    // The same room without the doomed call: evicting A makes 5 pages.
    std::vector<float> k20(elems(20), 1.0f);
    InsertResult r = s.insert(DocKey{0xf, 1}, StorageForm::kRaw, 20, k20, k20);
    CHECK(r.inserted);
    CHECK_FALSE(s.is_live(a));
    CHECK(s.stats().evictions == 1);
    CHECK_NOTHROW(s.validate());
  }

  SECTION("tails") {
    const std::string stale = "stale tail handle " + str(u);
    std::vector<float> k1(elems(1), 1.0f);
    bad([&] { s.append(u, 1, k1, k1); }, "KvStore::append: " + stale);
    bad([&] { s.reserve(u, 1); }, "KvStore::reserve: " + stale);
    bad([&] { s.release(u); }, "KvStore::release: " + stale);
    bad([&] { s.info(u); }, "KvStore::info: " + stale);
    CHECK_FALSE(s.is_live(u));
    bad(
        [&] {
          s.reserve(TailHandle{77, 0, s.id()}, 1);
        },
        "tail(slot 77, generation 0, store " + std::to_string(s.id()) + ") names no tail slot");
    bad([&] { s.append(t, 0, k1, k1); }, "KvStore::append: n 0, expected in [1, 2^31 - 1]");
    bad([&] { s.append(t, 2, k1, k1); }, "k has " + std::to_string(elems(1)) + " elements");
    bad([&] { s.reserve(t, -1); }, "KvStore::reserve: n -1, expected in [1, 2^31 - 1]");
    bad([&] { s.reserve(t, std::int64_t{1} << 31); }, "n 2147483648");
    // The length itself would pass 2^31 - 1: refused before any page is looked for.
    bad([&] { s.reserve(t, std::numeric_limits<std::int32_t>::max()); },
        "KvStore::reserve: " + str(t) + " length 6 + n 2147483647 exceeds 2^31 - 1");
  }

  SECTION("pool element type") {
    bad([&] { s.k_pool<float>(); },
        "KvStore::k_pool: element type float32, expected the store's float16");
    bad([&] { s.v_pool<bfloat16>(); }, "KvStore::v_pool: element type bfloat16");
    const KvStore& cs = s;
    bad([&] { cs.k_pool<bfloat16>(); }, "KvStore::k_pool: element type bfloat16");
    CHECK(s.k_pool<float16>() == reinterpret_cast<float16*>(s.k_bytes()));
  }

  // Whatever the section did, the survivors hold their contents.
  for (auto [h, spec] : {std::pair{a, sa}, std::pair{b, sb}, std::pair{cdoc, sc}}) {
    if (!s.is_live(h)) continue;
    DocInfo info = s.info(h);
    CHECK(tk::check_contents(s, info.pages, spec, 0, info.length).empty());
  }
  CHECK(tk::check_contents(s, s.info(t).pages, st, 0, 6).empty());
}

TEST_CASE("KvStore handles: a reused slot gets a new generation", "[kv][store][errors]") {
  KvStore s(small_config());
  std::vector<float> k(static_cast<std::size_t>(2 * 3 * 2 * 4), 1.0f);
  DocHandle first = s.insert(DocKey{1, 1}, StorageForm::kRaw, 3, k, k).handle;
  s.erase(first);
  DocHandle second = s.insert(DocKey{2, 2}, StorageForm::kRaw, 3, k, k).handle;
  CHECK(second.slot == first.slot);
  CHECK(second.generation != first.generation);
  CHECK_FALSE(s.is_live(first));
  CHECK(s.is_live(second));
  CHECK_THROWS_WITH(s.pin(first), Catch::Contains("stale document handle " + str(first) +
                                                  ", the slot now holds generation"));
  TailHandle t1 = s.create_tail(StorageForm::kLocal);
  s.release(t1);
  TailHandle t2 = s.create_tail(StorageForm::kLocal);
  CHECK(t2.slot == t1.slot);
  CHECK(t2.generation != t1.generation);
  CHECK_THROWS_WITH(s.info(t1), Catch::Contains("stale tail handle " + str(t1)));
  CHECK(s.info(t2).length == 0);
}

TEST_CASE("KvStore dedupes inserts and pins through find and insert", "[kv][store]") {
  KvStore s(small_config());
  const KvStoreConfig& c = s.config();
  std::vector<std::int32_t> tokens{5, 6, 7};
  DocKey key = DocKey::from_tokens(tokens);
  tk::ContentSpec first{21, DType::kFloat32}, second{22, DType::kFloat32};
  InsertResult r1 = tk::insert_spec(s, key, StorageForm::kLocal, 3, first, false);
  InsertResult r2 = tk::insert_spec(s, key, StorageForm::kLocal, 3, second, true);
  CHECK(r1.inserted);
  CHECK_FALSE(r2.inserted);
  CHECK(r2.handle == r1.handle);
  CHECK(s.info(r1.handle).pins == 1);
  // The second call's contents were not copied.
  CHECK(tk::check_contents(s, s.info(r1.handle).pages, first, 0, 3).empty());
  CHECK_FALSE(tk::check_contents(s, s.info(r1.handle).pages, second, 0, 3).empty());
  // The same key in the other form is another document.
  InsertResult raw = tk::insert_spec(s, key, StorageForm::kRaw, 3, second, false);
  CHECK(raw.inserted);
  CHECK(raw.handle != r1.handle);
  auto found = s.find(key, StorageForm::kLocal, true);
  REQUIRE(found);
  CHECK(*found == r1.handle);
  CHECK(s.info(*found).pins == 2);
  CHECK_FALSE(s.find(DocKey{9, 9}, StorageForm::kLocal));
  KvStoreStats st = s.stats();
  CHECK(st.inserts == 2);
  CHECK(st.dedupes == 1);
  CHECK(st.hits == 1);
  CHECK(st.misses == 1);
  CHECK(st.documents == 2);
  CHECK(st.pinned_documents == 1);
  CHECK(st.pages_in_use == 2);
  CHECK(st.bytes_in_use == 2 * 2 * c.num_layers * c.num_kv_heads * c.page_size * c.head_dim * 2);
  s.unpin(r1.handle);
  s.unpin(r1.handle);
  CHECK(s.stats().pinned_documents == 0);
}

TEST_CASE("KvStore evicts the least recently used unpinned document", "[kv][store]") {
  KvStoreConfig cfg = small_config();
  cfg.num_pages = 4;
  KvStore s(cfg);
  auto ins = [&](std::uint64_t id) {
    return tk::insert_spec(s, DocKey{id, 0}, StorageForm::kRaw, 4, {id, DType::kFloat32}, false)
        .handle;
  };
  auto use = [&](std::uint64_t id) { REQUIRE(s.find(DocKey{id, 0}, StorageForm::kRaw)); };
  DocHandle a = ins(1), b = ins(2), c = ins(3), d = ins(4);  // one page each: the store is full
  // A is pinned first, then the others are used, then A is unpinned: A counts as used last.
  s.pin(a);
  use(2);
  use(3);
  use(4);
  s.unpin(a);
  DocHandle e = ins(5);
  CHECK_FALSE(s.is_live(b));
  CHECK(s.is_live(a));
  CHECK(s.is_live(c));
  CHECK(s.is_live(d));
  // D pinned, then every other document used: D is the oldest of all, but pinned.
  s.pin(d);
  use(3);
  use(1);
  use(5);
  DocHandle f = ins(6);
  CHECK(s.is_live(d));
  CHECK_FALSE(s.is_live(c));
  CHECK(s.is_live(a));
  CHECK(s.is_live(e));
  CHECK(s.is_live(f));
  CHECK(s.stats().evictions == 2);
  // Everything pinned: a further insert must fail, evicting nothing.
  for (DocHandle h : {a, e, f}) s.pin(h);
  CHECK_THROWS_WITH(ins(7), Catch::Contains("store full: need 1 pages, 0 free and 0 held"));
  CHECK(s.stats().evictions == 2);
  for (DocHandle h : {a, d, e, f}) s.unpin(h);
  CHECK_NOTHROW(s.validate());
}
