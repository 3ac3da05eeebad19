// Layout helpers and make_plan: starts and lengths of the layouts of docs/04-layouts.md, CSR page
// tables and per-segment metadata for hand-built batches, and every plan error naming its value.
#include "support/catch.hpp"
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "kv/store_contents.hpp"
#include "lazyattn/kv.hpp"
#include "support/str.hpp"

using namespace lazyattn;
namespace tk = lazyattn::test::kv;
using Catch::Contains;

namespace {

using lazyattn::test::str;

std::vector<std::int32_t> concat(std::initializer_list<std::vector<std::int32_t>> parts) {
  std::vector<std::int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<std::int32_t> prefix(const std::vector<std::int32_t>& v, std::size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

// A store with documents of awkward lengths and a few tails, all filled from known seeds.
struct Fixture {
  KvStore store{[] {
    KvStoreConfig c;
    c.num_layers = 1;
    c.num_kv_heads = 1;
    c.head_dim = 2;
    c.page_size = 4;
    c.dtype = DType::kFloat32;
    c.num_pages = 64;
    return c;
  }()};
  // A: 5 tokens (off a page boundary), B: 8 (on one), C: 1 token, D: 4 (exactly one page).
  DocHandle a = insert(1, StorageForm::kRaw, 5);
  DocHandle b = insert(2, StorageForm::kLocal, 8);
  DocHandle c = insert(3, StorageForm::kRaw, 1);
  DocHandle d = insert(4, StorageForm::kLocal, 4);
  TailHandle t3 = tail(103, 3, StorageForm::kLocal);
  TailHandle t9 = tail(109, 9, StorageForm::kRaw);
  TailHandle t1 = tail(101, 1, StorageForm::kLocal);
  TailHandle t4 = tail(104, 4, StorageForm::kLocal);
  TailHandle empty = tail(100, 0, StorageForm::kLocal);

  DocHandle insert(std::uint64_t seed, StorageForm f, std::int64_t len) {
    return tk::insert_spec(store, DocKey{seed, 0}, f, len, {seed, DType::kFloat32}, true).handle;
  }
  TailHandle tail(std::uint64_t seed, std::int64_t len, StorageForm f) {
    TailHandle h = store.create_tail(f);
    if (len > 0) tk::append_spec(store, h, 0, len, {seed, DType::kFloat32});
    return h;
  }
  std::vector<std::int32_t> pages(DocHandle h) const { return store.info(h).pages; }
  std::vector<std::int32_t> pages(TailHandle h) const { return store.info(h).pages; }
};

void check_segment(const RequestLayout& r, std::size_t j, SegmentKind kind, std::int64_t length,
                   std::int64_t start) {
  INFO("segment " << j << " of " << r);
  REQUIRE(j < r.segments.size());
  CHECK(r.segments[j].kind == kind);
  CHECK(r.segments[j].length == length);
  CHECK(r.segments[j].start == start);
}

}  // namespace

TEST_CASE("layout helpers place documents as docs/04-layouts.md says", "[kv][layout]") {
  Fixture f;
  const std::vector<DocHandle> docs{f.a, f.b, f.a, f.c};  // A twice
  SECTION("back to back (Block-Attention), padding never counts") {
    RequestLayout r = layouts::back_to_back(f.store, docs, f.t3, 2, 10);
    CHECK(r.num_queries == 2);
    REQUIRE(r.segments.size() == 5);
    check_segment(r, 0, SegmentKind::kDocument, 5, 10);
    check_segment(r, 1, SegmentKind::kDocument, 8, 15);
    check_segment(r, 2, SegmentKind::kDocument, 5, 23);
    check_segment(r, 3, SegmentKind::kDocument, 1, 28);
    check_segment(r, 4, SegmentKind::kTail, 3, 29);
    CHECK(r.segments[0].doc == f.a);
    CHECK(r.segments[2].doc == f.a);
    CHECK(r.segments[4].tail == f.t3);
    CHECK(str(r) ==
          "[document(len 5 @ 10), document(len 8 @ 15), document(len 5 @ 23), document(len 1 @ "
          "28), tail(len 3 @ 29)] queries 2");
  }
  SECTION("parallel (APE): one start, the tail after the longest") {
    RequestLayout r = layouts::parallel(f.store, docs, f.t9, 1, 7);
    REQUIRE(r.segments.size() == 5);
    for (std::size_t j = 0; j < 4; ++j) CHECK(r.segments[j].start == 7);
    CHECK(r.segments[1].length == 8);
    check_segment(r, 4, SegmentKind::kTail, 9, 15);
  }
  SECTION("gapped (Prompt Cache): starts as given") {
    const std::vector<std::int64_t> starts{100, 0, 40, 3};
    RequestLayout r = layouts::gapped(f.store, docs, starts, f.t1, 500, 1);
    REQUIRE(r.segments.size() == 5);
    check_segment(r, 0, SegmentKind::kDocument, 5, 100);
    check_segment(r, 1, SegmentKind::kDocument, 8, 0);
    check_segment(r, 2, SegmentKind::kDocument, 5, 40);
    check_segment(r, 3, SegmentKind::kDocument, 1, 3);
    check_segment(r, 4, SegmentKind::kTail, 1, 500);
  }
  SECTION("plain prefix caching: one document at 0") {
    const std::vector<DocHandle> one{f.b};
    RequestLayout r = layouts::back_to_back(f.store, one, f.t4);
    check_segment(r, 0, SegmentKind::kDocument, 8, 0);
    check_segment(r, 1, SegmentKind::kTail, 4, 8);
  }
  SECTION("errors name the value") {
    const std::vector<std::int64_t> two_starts{0, 1};
    CHECK_THROWS_WITH(layouts::gapped(f.store, docs, two_starts, f.t1, 0),
                      Contains("layouts::gapped: 4 documents and 2 starts"));
    CHECK_THROWS_WITH(layouts::back_to_back(f.store, docs, f.t1, 1, -4),
                      Contains("layouts::back_to_back: first_start -4, expected in [0, 2^62)"));
    CHECK_THROWS_WITH(layouts::parallel(f.store, docs, f.t1, 1, kMaxPosition),
                      Contains("layouts::parallel: start 4611686018427387904"));
    CHECK_THROWS_WITH(layouts::back_to_back(f.store, docs, f.t1, 1, kMaxPosition - 10),
                      Contains("layouts::back_to_back: document 1 ends at position " +
                               std::to_string(kMaxPosition - 10 + 13)));
    f.store.unpin(f.c);
    f.store.erase(f.c);
    CHECK_THROWS_WITH(layouts::back_to_back(f.store, docs, f.t1),
                      Contains("layouts::back_to_back: document 3: KvStore::info: stale document "
                               "handle " +
                               str(f.c)));
    f.store.release(f.t1);
    const std::vector<DocHandle> ab{f.a, f.b};
    CHECK_THROWS_WITH(layouts::parallel(f.store, ab, f.t1),
                      Contains("layouts::parallel: tail: KvStore::info: stale tail handle"));
  }
}

TEST_CASE("make_plan flattens a batch into CSR page tables", "[kv][plan]") {
  Fixture f;
  const auto A = f.pages(f.a), B = f.pages(f.b), C = f.pages(f.c), D = f.pages(f.d);
  const auto T3 = f.pages(f.t3), T9 = f.pages(f.t9), T1 = f.pages(f.t1), T4 = f.pages(f.t4);
  REQUIRE(A.size() == 2);
  REQUIRE(B.size() == 2);
  REQUIRE(C.size() == 1);
  REQUIRE(D.size() == 1);
  REQUIRE(T9.size() == 3);

  std::vector<RequestLayout> batch;
  // 0: A, B, A back to back (A twice in one request), two queries.
  const std::vector<DocHandle> aba{f.a, f.b, f.a};
  batch.push_back(layouts::back_to_back(f.store, aba, f.t3, 2));
  // 1: B, C, D in parallel from 100: B again, across requests.
  const std::vector<DocHandle> bcd{f.b, f.c, f.d};
  batch.push_back(layouts::parallel(f.store, bcd, f.t9, 1, 100));
  // 2: hand-built: a 5-token prefix of B far out, a 4-token prefix (one whole page) of B, an
  // empty segment of A past everything (it must not count towards rope length), the tail.
  RequestLayout r2;
  r2.segments = {Segment::document(f.b, 5, 1000), Segment::document(f.b, 4, 50),
                 Segment::document(f.a, 0, 5000), Segment::of_tail(f.t1, 1, 2000)};
  batch.push_back(r2);
  // 3: the one-token document C twice, gapped, and a prefill of the tail's 4 tokens.
  const std::vector<DocHandle> cc{f.c, f.c};
  const std::vector<std::int64_t> starts{7, 3};
  batch.push_back(layouts::gapped(f.store, cc, starts, f.t4, 20, 4));

  Plan p = make_plan(f.store, batch);
  CHECK(p.page_size == 4);
  CHECK(p.num_requests() == 4);
  CHECK(p.num_segments() == 15);
  CHECK(p.num_queries() == 8);
  using V32 = std::vector<std::int32_t>;
  using V64 = std::vector<std::int64_t>;
  using V8 = std::vector<std::uint8_t>;
  CHECK(p.request_segment_indptr == V32{0, 4, 8, 12, 15});
  CHECK(p.request_query_indptr == V32{0, 2, 3, 4, 8});
  CHECK(p.request_tail_segment == V32{3, 7, 11, 14});
  CHECK(p.request_kv_length == V64{21, 22, 10, 6});
  CHECK(p.request_query_position == V64{19, 108 + 9 - 1, 2000, 20});
  CHECK(p.request_rope_length == V64{21, 117, 2001, 24});
  CHECK(p.segment_length == V32{5, 8, 5, 3, 8, 1, 4, 9, 5, 4, 0, 1, 1, 1, 4});
  CHECK(p.segment_start == V64{0, 5, 13, 18, 100, 100, 100, 108, 1000, 50, 5000, 2000, 7, 3, 20});
  const auto raw = static_cast<std::uint8_t>(StorageForm::kRaw);
  const auto local = static_cast<std::uint8_t>(StorageForm::kLocal);
  CHECK(p.segment_form == V8{raw, local, raw, local, local, raw, local, raw, local, local, raw,
                             local, raw, raw, local});
  const auto doc = static_cast<std::uint8_t>(SegmentKind::kDocument);
  const auto tail = static_cast<std::uint8_t>(SegmentKind::kTail);
  CHECK(p.segment_kind ==
        V8{doc, doc, doc, tail, doc, doc, doc, tail, doc, doc, doc, tail, doc, doc, tail});
  CHECK(p.segment_page_indptr == V32{0, 2, 4, 6, 7, 9, 10, 11, 14, 16, 17, 17, 18, 19, 20, 21});
  CHECK(p.page_ids == concat({A, B, A, T3, B, C, D, T9, B, prefix(B, 1), T1, C, C, T4}));

  // The view carries the same arrays.
  PlanView v = p.view();
  CHECK(v.num_requests == 4);
  CHECK(v.num_segments == 15);
  CHECK(v.num_queries == 8);
  CHECK(v.page_size == 4);
  CHECK(v.page_ids == p.page_ids.data());
  CHECK(v.segment_start == p.segment_start.data());
  CHECK(v.request_rope_length == p.request_rope_length.data());

  // Following the plan the way a kernel does reaches each key's own stored values: key i of
  // segment s is slot i % page_size of page page_ids[segment_page_indptr[s] + i / page_size].
  const std::uint64_t seeds[] = {1, 2, 1, 103, 2, 3, 4, 109, 2, 2, 1, 101, 3, 3, 104};
  const float* k = f.store.k_pool<float>();
  const PoolGeometry& g = f.store.geometry();
  for (int s = 0; s < p.num_segments(); ++s) {
    for (std::int32_t i = 0; i < p.segment_length[s]; ++i) {
      std::int32_t page = p.page_ids[p.segment_page_indptr[s] + i / p.page_size];
      std::uint64_t th = tk::token_hash(seeds[s], 0, i);
      INFO("segment " << s << " key " << i);
      CHECK(k[g.offset(0, page, 0, i % p.page_size) + 1] == tk::source_value(th, 0, 0, 1));
    }
  }
}

TEST_CASE("make_plan accepts positions up to 2^62 and an empty batch", "[kv][plan]") {
  Fixture f;
  RequestLayout r;
  r.segments = {Segment::document(f.a, 5, kMaxPosition - 5),
                Segment::of_tail(f.t3, 3, kMaxPosition - 3)};
  r.num_queries = 3;
  Plan p = make_plan(f.store, r);
  CHECK(p.request_rope_length[0] == kMaxPosition);
  CHECK(p.request_query_position[0] == kMaxPosition - 3);
  Plan none = make_plan(f.store, std::span<const RequestLayout>{});
  CHECK(none.num_requests() == 0);
  CHECK(none.num_segments() == 0);
  CHECK(none.num_queries() == 0);
  CHECK(none.segment_page_indptr == std::vector<std::int32_t>{0});
}

TEST_CASE("make_plan errors name the request, segment and value", "[kv][plan][errors]") {
  Fixture f;
  // A valid first request, so errors in the second show they name request 1.
  RequestLayout ok;
  ok.segments = {Segment::document(f.a, 5, 0), Segment::of_tail(f.t3, 3, 5)};
  auto plan_with = [&](RequestLayout bad) {
    std::vector<RequestLayout> batch{ok, std::move(bad)};
    return make_plan(f.store, batch);
  };
  auto tail_only = [&](TailHandle t, std::int64_t len, std::int64_t nq) {
    RequestLayout r;
    r.segments = {Segment::of_tail(t, len, 0)};
    r.num_queries = nq;
    return r;
  };
  RequestLayout r;
  SECTION("stale document handle") {
    DocHandle gone = f.insert(50, StorageForm::kRaw, 3);
    f.store.unpin(gone);
    f.store.erase(gone);
    r.segments = {Segment::document(gone, 3, 0), Segment::of_tail(f.t3, 3, 3)};
    CHECK_THROWS_AS(plan_with(r), Error);
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 segment 0: KvStore::info: "
                                             "stale document handle " +
                                             str(gone)));
  }
  SECTION("stale tail handle") {
    TailHandle gone = f.tail(51, 2, StorageForm::kLocal);
    f.store.release(gone);
    CHECK_THROWS_WITH(
        plan_with(tail_only(gone, 2, 1)),
        Contains("make_plan: request 1 segment 0: KvStore::info: stale tail handle " + str(gone)));
  }
  SECTION("uncommitted document") {
    DocHandle pending = f.store.allocate(DocKey{52, 0}, StorageForm::kRaw, 6).handle;
    r.segments = {Segment::document(pending, 6, 0), Segment::of_tail(f.t3, 3, 6)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 segment 0 " + str(pending) +
                                             " was allocated but not committed"));
    f.store.commit(pending);
    CHECK_NOTHROW(plan_with(r));
  }
  SECTION("segment longer than its document") {
    r.segments = {Segment::document(f.c, 1, 0), Segment::document(f.a, 6, 1),
                  Segment::of_tail(f.t3, 3, 7)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 segment 1 length 6 runs past "
                                             "its document of length 5"));
  }
  SECTION("tail length other than the tail's") {
    CHECK_THROWS_WITH(plan_with(tail_only(f.t9, 8, 1)),
                      Contains("request 1 tail segment 0 length 8, expected the tail's length 9"));
  }
  SECTION("two tails") {
    r.segments = {Segment::of_tail(f.t1, 1, 0), Segment::document(f.c, 1, 1),
                  Segment::of_tail(f.t4, 4, 2)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 has a second tail at segment 2, "
                                             "expected exactly one tail"));
  }
  SECTION("no tail") {
    r.segments = {Segment::document(f.a, 5, 0)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 has no tail segment"));
  }
  SECTION("num_queries out of range") {
    CHECK_THROWS_WITH(
        plan_with(tail_only(f.t3, 3, 0)),
        Contains("make_plan: request 1 num_queries 0, expected in [1, tail length 3]"));
    CHECK_THROWS_WITH(plan_with(tail_only(f.t3, 3, 4)), Contains("num_queries 4"));
    CHECK_THROWS_WITH(plan_with(tail_only(f.t3, 3, -1)), Contains("num_queries -1"));
    CHECK_NOTHROW(plan_with(tail_only(f.t3, 3, 3)));
  }
  SECTION("an empty tail has no query to hold") {
    CHECK(f.store.info(f.empty).length == 0);
    CHECK_THROWS_WITH(
        plan_with(tail_only(f.empty, 0, 1)),
        Contains("make_plan: request 1 num_queries 1, expected in [1, tail length 0]"));
  }
  SECTION("negative start and length") {
    r.segments = {Segment::document(f.a, 5, -1), Segment::of_tail(f.t3, 3, 5)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 segment 0 start -1, expected "
                                             "in [0, 2^62)"));
    r.segments = {Segment::document(f.a, -2, 0), Segment::of_tail(f.t3, 3, 5)};
    CHECK_THROWS_WITH(plan_with(r), Contains("request 1 segment 0 length -2, expected >= 0"));
  }
  SECTION("positions past 2^62") {
    r.segments = {Segment::document(f.a, 5, kMaxPosition - 3), Segment::of_tail(f.t3, 3, 0)};
    CHECK_THROWS_WITH(plan_with(r), Contains("make_plan: request 1 segment 0 start " +
                                             std::to_string(kMaxPosition - 3) +
                                             " + length 5 overflows the position range"));
    r.segments = {Segment::document(f.a, 5, 0), Segment::of_tail(f.t3, 3, kMaxPosition)};
    CHECK_THROWS_WITH(plan_with(r), Contains("segment 1 start 4611686018427387904, expected in "
                                             "[0, 2^62)"));
    r.segments = {Segment::of_tail(f.t3, 3, std::numeric_limits<std::int64_t>::max())};
    CHECK_THROWS_WITH(plan_with(r), Contains("start 9223372036854775807"));
  }
  SECTION("unknown segment kind") {
    Segment odd = Segment::document(f.a, 5, 0);
    odd.kind = static_cast<SegmentKind>(3);
    r.segments = {odd, Segment::of_tail(f.t3, 3, 5)};
    CHECK_THROWS_WITH(plan_with(r), Contains("request 1 segment 0 kind 3, expected document (0) or "
                                             "tail (1)"));
  }
  // make_plan reads the store only: nothing above changed it.
  CHECK_NOTHROW(f.store.validate());
  CHECK(f.store.stats().pinned_documents >= 4);
}
