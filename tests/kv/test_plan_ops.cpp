// Plan algebra (kv/plan_ops.hpp): document encodings as plans, plans appended, local-form document
// segments coalesced; each checks what it reads and names the bad value, leaving its destination
// as it was on a throw.
#include "support/catch.hpp"

#include <cstdint>
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

using V32 = std::vector<std::int32_t>;
using V64 = std::vector<std::int64_t>;
using V8 = std::vector<std::uint8_t>;
constexpr auto kRaw = static_cast<std::uint8_t>(StorageForm::kRaw);
constexpr auto kLocal = static_cast<std::uint8_t>(StorageForm::kLocal);
constexpr auto kDoc = static_cast<std::uint8_t>(SegmentKind::kDocument);
constexpr auto kTail = static_cast<std::uint8_t>(SegmentKind::kTail);

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
  DocHandle insert(std::uint64_t seed, StorageForm f, std::int64_t len) {
    return tk::insert_spec(store, DocKey{seed, 0}, f, len, {seed, DType::kFloat32}, true).handle;
  }
  TailHandle tail(std::uint64_t seed, std::int64_t len, StorageForm f) {
    TailHandle h = store.create_tail(f);
    if (len > 0) tk::append_spec(store, h, 0, len, {seed, DType::kFloat32});
    return h;
  }
  V32 pages(DocHandle h) const { return store.info(h).pages; }
  V32 pages(TailHandle h) const { return store.info(h).pages; }
};

V32 concat(std::initializer_list<V32> parts) {
  V32 out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every array of two plans, compared one by one so that a failure names the array.
void check_same_plan(const Plan& a, const Plan& b) {
  CHECK(a.page_size == b.page_size);
  CHECK(a.request_segment_indptr == b.request_segment_indptr);
  CHECK(a.request_query_indptr == b.request_query_indptr);
  CHECK(a.request_tail_segment == b.request_tail_segment);
  CHECK(a.request_kv_length == b.request_kv_length);
  CHECK(a.request_query_position == b.request_query_position);
  CHECK(a.request_rope_length == b.request_rope_length);
  CHECK(a.segment_page_indptr == b.segment_page_indptr);
  CHECK(a.segment_length == b.segment_length);
  CHECK(a.segment_start == b.segment_start);
  CHECK(a.segment_form == b.segment_form);
  CHECK(a.segment_kind == b.segment_kind);
  CHECK(a.page_ids == b.page_ids);
}

}  // namespace

TEST_CASE("encode_plan makes each document a causal tail at 0, every token a query",
          "[kv][plan_ops]") {
  Fixture f;
  const DocHandle a = f.insert(1, StorageForm::kLocal, 5);  // off a page boundary
  const DocHandle b = f.insert(2, StorageForm::kRaw, 8);    // on one
  // Being filled: allocated, not committed. Encoding is what fills it, so it is accepted.
  const DocHandle c = f.store.allocate(DocKey{3, 0}, StorageForm::kLocal, 1).handle;
  const std::vector<DocHandle> docs{a, b, c, a};
  const Plan p = encode_plan(f.store, docs);
  CHECK(p.page_size == 4);
  CHECK(p.num_requests() == 4);
  CHECK(p.request_segment_indptr == V32{0, 1, 2, 3, 4});
  CHECK(p.request_query_indptr == V32{0, 5, 13, 14, 19});
  CHECK(p.request_tail_segment == V32{0, 1, 2, 3});
  CHECK(p.request_kv_length == V64{5, 8, 1, 5});
  CHECK(p.request_query_position == V64{0, 0, 0, 0});
  CHECK(p.request_rope_length == V64{5, 8, 1, 5});
  CHECK(p.segment_length == V32{5, 8, 1, 5});
  CHECK(p.segment_start == V64{0, 0, 0, 0});
  CHECK(p.segment_form == V8{kLocal, kRaw, kLocal, kLocal});
  CHECK(p.segment_kind == V8{kTail, kTail, kTail, kTail});
  CHECK(p.segment_page_indptr == V32{0, 2, 4, 5, 7});
  CHECK(p.page_ids == concat({f.pages(a), f.pages(b), f.pages(c), f.pages(a)}));
  CHECK_NOTHROW(check_plan_arrays(p, "test"));

  const Plan none = encode_plan(f.store, std::vector<DocHandle>{});
  CHECK(none.num_requests() == 0);
  CHECK(none.segment_page_indptr == V32{0});

  // A stale document is named with its place.
  const DocHandle gone = f.insert(4, StorageForm::kLocal, 3);
  f.store.unpin(gone);
  f.store.erase(gone);
  const std::vector<DocHandle> with_gone{a, gone};
  CHECK_THROWS_WITH(
      encode_plan(f.store, with_gone),
      Contains("encode_plan: document 1: KvStore::info: stale document handle " + str(gone)));
}

TEST_CASE("append_plan joins two batches, shifting src's indices", "[kv][plan_ops]") {
  Fixture f;
  const DocHandle a = f.insert(1, StorageForm::kLocal, 5), b = f.insert(2, StorageForm::kRaw, 8);
  const TailHandle t3 = f.tail(103, 3, StorageForm::kLocal), t2 = f.tail(102, 2, StorageForm::kRaw);
  const std::vector<DocHandle> ab{a, b}, ba{b, a};
  const std::vector<RequestLayout> layouts{layouts::back_to_back(f.store, ab, t3, 2),
                                           layouts::parallel(f.store, ba, t2, 1, 40)};
  const Plan steps = make_plan(f.store, layouts);
  const std::vector<DocHandle> encodes{b};
  Plan joined = encode_plan(f.store, encodes);
  append_plan(joined, steps);

  // The encoding first, then the steps' requests as make_plan made them, shifted by one request,
  // one segment, 8 queries and 2 pages.
  CHECK(joined.num_requests() == 3);
  CHECK(joined.request_segment_indptr == V32{0, 1, 4, 7});
  CHECK(joined.request_query_indptr == V32{0, 8, 10, 11});
  CHECK(joined.request_tail_segment == V32{0, 3, 6});
  CHECK(joined.request_kv_length == V64{8, 16, 15});
  CHECK(joined.request_query_position == V64{0, 14, 49});
  CHECK(joined.request_rope_length == V64{8, 16, 50});
  CHECK(joined.segment_length == V32{8, 5, 8, 3, 8, 5, 2});
  CHECK(joined.segment_start == V64{0, 0, 5, 13, 40, 40, 48});
  CHECK(joined.segment_form == V8{kRaw, kLocal, kRaw, kLocal, kRaw, kLocal, kRaw});
  CHECK(joined.segment_kind == V8{kTail, kDoc, kDoc, kTail, kDoc, kDoc, kTail});
  CHECK(joined.segment_page_indptr == V32{0, 2, 4, 6, 7, 9, 11, 12});
  CHECK(joined.page_ids == concat({f.pages(b), steps.page_ids}));
  CHECK_NOTHROW(check_plan_arrays(joined, "test"));

  // Into a default plan: src itself.
  Plan empty;
  append_plan(empty, steps);
  check_same_plan(empty, steps);
  // An empty src changes nothing.
  Plan same = steps, nothing;
  nothing.page_size = 4;
  append_plan(same, nothing);
  check_same_plan(same, steps);
}

TEST_CASE("append_plan and coalesce_document_segments name a bad plan and change nothing",
          "[kv][plan_ops][errors]") {
  Fixture f;
  const DocHandle a = f.insert(1, StorageForm::kLocal, 5);
  const TailHandle t = f.tail(103, 3, StorageForm::kLocal);
  const std::vector<DocHandle> docs{a};
  const Plan good = make_plan(f.store, layouts::back_to_back(f.store, docs, t, 1));
  Plan dst = good;
  auto refused = [&](const Plan& src, const std::string& message) {
    INFO(message);
    CHECK_THROWS_WITH(append_plan(dst, src), Contains(message));
    check_same_plan(dst, good);
  };
  Plan bad = good;
  bad.page_size = 8;
  refused(bad, "append_plan: src page_size 8, expected dst's 4");
  bad = good;
  bad.request_tail_segment.push_back(0);
  refused(bad,
          "append_plan: src: plan.request_tail_segment has 2 entries, expected num_requests 1");
  bad = good;
  bad.segment_page_indptr[1] = 9;
  refused(bad,
          "append_plan: src: plan.segment_page_indptr[2] 3, expected >= "
          "plan.segment_page_indptr[1] 9");
  bad = good;
  bad.segment_page_indptr.back() = 7;
  refused(bad, "append_plan: src: plan.segment_page_indptr ends at 7, expected 3");
  bad = good;
  bad.request_tail_segment[0] = 0;
  refused(bad, "append_plan: src: request 0 tail segment 0 has kind 0, expected 1 (tail)");
  bad = good;
  bad.request_tail_segment[0] = 2;
  refused(bad, "append_plan: src: request 0 tail segment 2, expected one of its segments [0, 2)");
  bad = good;
  bad.segment_form.pop_back();
  refused(bad, "append_plan: src: plan.segment_form has 1 entries, expected num_segments 2");
  bad = good;
  bad.request_query_indptr = {0, -1};
  refused(bad,
          "append_plan: src: plan.request_query_indptr[1] -1, expected >= "
          "plan.request_query_indptr[0] 0");
  bad = good;
  bad.page_size = 0;
  Plan into_bad = bad;
  CHECK_THROWS_WITH(append_plan(into_bad, good),
                    Contains("append_plan: dst: plan.page_size 0, expected >= 1"));

  Plan broken = good;
  broken.request_tail_segment[0] = 5;
  const Plan before = broken;
  CHECK_THROWS_WITH(coalesce_document_segments(broken),
                    Contains("coalesce_document_segments: request 0 tail segment 5, expected one "
                             "of its segments [0, 2)"));
  check_same_plan(broken, before);
}

TEST_CASE("coalesce_document_segments merges local documents at one start that fill their pages",
          "[kv][plan_ops]") {
  Fixture f;
  // Page size 4: a and b fill their pages (8 and 4 tokens), c ends mid-page (5), d after it does
  // not merge; r is raw.
  const DocHandle a = f.insert(1, StorageForm::kLocal, 8), b = f.insert(2, StorageForm::kLocal, 4),
                  c = f.insert(3, StorageForm::kLocal, 5), d = f.insert(4, StorageForm::kLocal, 4),
                  r = f.insert(5, StorageForm::kRaw, 4);
  const TailHandle t = f.tail(100, 2, StorageForm::kLocal);
  RequestLayout same;  // a, b, c at 0 merge; d at 0 follows c's partial page; r raw; the tail
  same.segments = {Segment::document(a, 8, 0), Segment::document(b, 4, 0),
                   Segment::document(c, 5, 0), Segment::document(d, 4, 0),
                   Segment::document(r, 4, 0), Segment::of_tail(t, 2, 0)};
  RequestLayout apart;  // every start its own: nothing merges
  apart.segments = {Segment::document(a, 8, 0), Segment::document(b, 4, 8),
                    Segment::of_tail(t, 2, 12)};
  const std::vector<RequestLayout> layouts{apart, same};
  const Plan plan = make_plan(f.store, layouts);
  Plan merged = plan;
  coalesce_document_segments(merged);
  CHECK(merged.request_segment_indptr == V32{0, 3, 7});
  CHECK(merged.request_tail_segment == V32{2, 6});
  CHECK(merged.segment_length == V32{8, 4, 2, 17, 4, 4, 2});
  CHECK(merged.segment_start == V64{0, 8, 12, 0, 0, 0, 0});
  CHECK(merged.segment_form == V8{kLocal, kLocal, kLocal, kLocal, kLocal, kRaw, kLocal});
  CHECK(merged.segment_kind == V8{kDoc, kDoc, kTail, kDoc, kDoc, kDoc, kTail});
  CHECK(merged.segment_page_indptr == V32{0, 2, 3, 4, 4 + 2 + 1 + 2, 10, 11, 12});
  CHECK(merged.page_ids == plan.page_ids);
  CHECK(merged.request_query_indptr == plan.request_query_indptr);
  CHECK(merged.request_kv_length == plan.request_kv_length);
  CHECK(merged.request_query_position == plan.request_query_position);
  CHECK(merged.request_rope_length == plan.request_rope_length);
  CHECK_NOTHROW(check_plan_arrays(merged, "test"));
  // Coalescing twice changes nothing more.
  Plan again = merged;
  coalesce_document_segments(again);
  check_same_plan(again, merged);
}
