// Plans: a batch of request layouts flattened into CSR page tables and per-segment metadata, the
// plain struct the CPU reference and the CUDA kernels read.
//
//   request b owns segments [request_segment_indptr[b], request_segment_indptr[b+1])
//              and query rows [request_query_indptr[b], request_query_indptr[b+1])
//   segment s owns pages    page_ids[segment_page_indptr[s] .. segment_page_indptr[s+1])
//   key i of segment s is slot i % page_size of page
//              page_ids[segment_page_indptr[s] + i / page_size]
//              and sits at logical position segment_start[s] + i
//   query r of request b (0-based within the request) is tail token
//              tail_length - num_queries + r, at position query_position[b] + r
//
// A plan holds page ids, so it is only as good as the pages it names. It records where they came
// from: the store (its id) and the documents and tails it read (sources, with their generations).
// check_plan_current(store, plan) at use refuses a plan of another store, or one whose document
// was evicted or erased, or whose tail was released, since it was made: those pages may hold
// another document's keys now. A live handle of the same generation still owns the pages the plan
// names (a document's pages never change while it is stored; a tail only gains pages), so the
// check is exact. It costs one lock when nothing was removed since the plan was made (the store's
// removal count), and one lookup per source otherwise.
//
// Why a check at use and not plans that pin: a plan is plain data that is copied, joined
// (append_plan), packed and uploaded, and captured in CUDA graphs that outlive the host copy; a
// pinning plan would have to own a reference to its store and unpin on destruction, which none of
// those copies can. Pins also cannot hold tails (a tail's owner releases it), and a plan kept by
// mistake would hold its documents' pages forever, where a stale one is refused with a message.
// The caller still keeps the documents pinned for as long as it means to use the plan (the
// layouts' and make_plan's contract); the check turns a slip into an error instead of attention
// over another document's keys.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/bookkeeping.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/store.hpp"  // not used here: includers of plan.hpp have long had KvStore

namespace lazyattn {

// kMaxPosition (layout.hpp): positions stay below 2^62, so any difference of two fits in int64.

// Non-owning view of a plan; pointers all in one memory space (host here, device once uploaded).
struct PlanView {
  std::int32_t num_requests = 0;
  std::int32_t num_segments = 0;
  std::int32_t num_queries = 0;  // rows of the query tensor
  std::int32_t page_size = 0;
  const std::int32_t* request_segment_indptr = nullptr;  // [num_requests + 1]
  const std::int32_t* request_query_indptr = nullptr;    // [num_requests + 1]
  const std::int32_t* request_tail_segment = nullptr;    // [num_requests] global segment index
  const std::int64_t* request_kv_length = nullptr;       // [num_requests] keys over all segments
  const std::int64_t* request_query_position = nullptr;  // [num_requests] position of query 0
  const std::int64_t* request_rope_length = nullptr;     // [num_requests] 1 + largest key position
  const std::int32_t* segment_page_indptr = nullptr;     // [num_segments + 1]
  const std::int32_t* segment_length = nullptr;          // [num_segments]
  const std::int64_t* segment_start = nullptr;           // [num_segments] logical start
  const std::uint8_t* segment_form = nullptr;            // [num_segments] StorageForm
  const std::uint8_t* segment_kind = nullptr;            // [num_segments] SegmentKind
  const std::int32_t* page_ids = nullptr;                // [segment_page_indptr[num_segments]]
};

// A document or tail a plan read, and how many of its keys: what check_plan_current re-checks.
struct PlanSource {
  SegmentKind kind = SegmentKind::kDocument;
  DocHandle doc;    // kind == kDocument
  TailHandle tail;  // kind == kTail
  std::int64_t length = 0;

  static PlanSource of(const Segment& s) { return PlanSource{s.kind, s.doc, s.tail, s.length}; }
};

// Owning plan, host memory.
struct Plan {
  std::int32_t page_size = 0;
  std::vector<std::int32_t> request_segment_indptr{0};
  std::vector<std::int32_t> request_query_indptr{0};
  std::vector<std::int32_t> request_tail_segment;
  std::vector<std::int64_t> request_kv_length;
  std::vector<std::int64_t> request_query_position;
  std::vector<std::int64_t> request_rope_length;
  std::vector<std::int32_t> segment_page_indptr{0};
  std::vector<std::int32_t> segment_length;
  std::vector<std::int64_t> segment_start;
  std::vector<std::uint8_t> segment_form;
  std::vector<std::uint8_t> segment_kind;
  std::vector<std::int32_t> page_ids;
  // Where the pages came from (host only, not in the view): the store the plan was made from (0:
  // a plan built by hand, whose pages its maker vouches for and nothing checks), the store's
  // removals() then, and the documents and tails read, in the order read.
  std::uint64_t store_id = 0;
  std::uint64_t store_removals = 0;
  std::vector<PlanSource> sources;

  std::int32_t num_requests() const {
    return static_cast<std::int32_t>(request_segment_indptr.size() - 1);
  }
  std::int32_t num_segments() const { return static_cast<std::int32_t>(segment_length.size()); }
  std::int32_t num_queries() const { return request_query_indptr.back(); }

  PlanView view() const {
    PlanView v;
    v.num_requests = num_requests();
    v.num_segments = num_segments();
    v.num_queries = num_queries();
    v.page_size = page_size;
    v.request_segment_indptr = request_segment_indptr.data();
    v.request_query_indptr = request_query_indptr.data();
    v.request_tail_segment = request_tail_segment.data();
    v.request_kv_length = request_kv_length.data();
    v.request_query_position = request_query_position.data();
    v.request_rope_length = request_rope_length.data();
    v.segment_page_indptr = segment_page_indptr.data();
    v.segment_length = segment_length.data();
    v.segment_start = segment_start.data();
    v.segment_form = segment_form.data();
    v.segment_kind = segment_kind.data();
    v.page_ids = page_ids.data();
    return v;
  }
};

namespace detail {

// The store's view of a segment's document or tail; a stale handle's message gains the place.
template <class Handle>
auto plan_info(const KvBookkeeping& store, Handle h, std::size_t b, std::size_t j) {
  try {
    return store.info(h);
  } catch (const Error& e) {
    throw_error("make_plan: request ", b, " segment ", j, ": ", e.what());
  }
}

}  // namespace detail

// Flattens a batch of layouts against the store. Checks every handle is live (and committed),
// every segment fits its pages, each request has exactly one tail holding its queries, and all
// positions stay in [0, kMaxPosition). Pins nothing: the caller keeps its documents pinned while
// the plan is in use. request_rope_length counts only positions that hold a key, so an empty
// segment placed far away does not inflate it.
inline Plan make_plan(const KvBookkeeping& store, std::span<const RequestLayout> requests) {
  constexpr const char* w = "make_plan";
  constexpr auto kMaxI32 = std::numeric_limits<std::int32_t>::max();
  LAZYATTN_CHECK(requests.size() < static_cast<std::size_t>(kMaxI32), w, ": ", requests.size(),
                 " requests, expected fewer than 2^31 - 1");
  Plan plan;
  plan.page_size = store.config().page_size;
  plan.store_id = store.id();
  // Read before any segment: a removal while the plan is made moves the count past this, so
  // check_plan_current looks at every source then.
  plan.store_removals = store.removals();
  std::int64_t total_queries = 0;
  for (std::size_t b = 0; b < requests.size(); ++b) {
    const RequestLayout& r = requests[b];
    int tail_index = -1;
    std::int64_t kv_length = 0;
    std::int64_t rope_length = 0;
    std::int64_t query_position = 0;
    for (std::size_t j = 0; j < r.segments.size(); ++j) {
      const Segment& s = r.segments[j];
      LAZYATTN_CHECK(s.kind == SegmentKind::kDocument || s.kind == SegmentKind::kTail, w,
                     ": request ", b, " segment ", j, " kind ", static_cast<int>(s.kind),
                     ", expected document (0) or tail (1)");
      LAZYATTN_CHECK(s.start >= 0 && s.start < kMaxPosition, w, ": request ", b, " segment ", j,
                     " start ", s.start, ", expected in [0, 2^62)");
      LAZYATTN_CHECK(s.length >= 0, w, ": request ", b, " segment ", j, " length ", s.length,
                     ", expected >= 0");
      LAZYATTN_CHECK(s.length <= kMaxPosition - s.start, w, ": request ", b, " segment ", j,
                     " start ", s.start, " + length ", s.length,
                     " overflows the position range [0, 2^62)");
      std::vector<std::int32_t> pages;
      StorageForm form;
      if (s.kind == SegmentKind::kDocument) {
        DocInfo d = detail::plan_info(store, s.doc, b, j);
        LAZYATTN_CHECK(d.committed, w, ": request ", b, " segment ", j, " ", s.doc,
                       " was allocated but not committed");
        LAZYATTN_CHECK(s.length <= d.length, w, ": request ", b, " segment ", j, " length ",
                       s.length, " runs past its document of length ", d.length);
        form = d.form;
        pages = std::move(d.pages);
      } else {
        LAZYATTN_CHECK(tail_index < 0, w, ": request ", b, " has a second tail at segment ", j,
                       ", expected exactly one tail");
        TailInfo t = detail::plan_info(store, s.tail, b, j);
        LAZYATTN_CHECK(s.length == t.length, w, ": request ", b, " tail segment ", j, " length ",
                       s.length, ", expected the tail's length ", t.length);
        LAZYATTN_CHECK(r.num_queries >= 1 && r.num_queries <= t.length, w, ": request ", b,
                       " num_queries ", r.num_queries, ", expected in [1, tail length ", t.length,
                       "]");
        tail_index = plan.num_segments();
        form = t.form;
        pages = std::move(t.pages);
        query_position = s.start + s.length - r.num_queries;
      }
      pages.resize(static_cast<std::size_t>(store.pages_for(s.length)));
      LAZYATTN_CHECK(static_cast<std::int64_t>(plan.page_ids.size() + pages.size()) <= kMaxI32, w,
                     ": more than 2^31 - 1 pages in one plan");
      LAZYATTN_CHECK(plan.segment_length.size() < static_cast<std::size_t>(kMaxI32), w,
                     ": more than 2^31 - 1 segments in one plan");
      plan.page_ids.insert(plan.page_ids.end(), pages.begin(), pages.end());
      plan.segment_page_indptr.push_back(static_cast<std::int32_t>(plan.page_ids.size()));
      plan.segment_length.push_back(static_cast<std::int32_t>(s.length));
      plan.segment_start.push_back(s.start);
      plan.segment_form.push_back(static_cast<std::uint8_t>(form));
      plan.segment_kind.push_back(static_cast<std::uint8_t>(s.kind));
      plan.sources.push_back(PlanSource::of(s));
      kv_length += s.length;
      if (s.length > 0) rope_length = std::max(rope_length, s.start + s.length);
    }
    LAZYATTN_CHECK(tail_index >= 0, w, ": request ", b, " has no tail segment, expected one");
    total_queries += r.num_queries;
    LAZYATTN_CHECK(total_queries <= kMaxI32, w, ": more than 2^31 - 1 queries in one plan");
    plan.request_segment_indptr.push_back(plan.num_segments());
    plan.request_query_indptr.push_back(static_cast<std::int32_t>(total_queries));
    plan.request_tail_segment.push_back(tail_index);
    plan.request_kv_length.push_back(kv_length);
    plan.request_query_position.push_back(query_position);
    plan.request_rope_length.push_back(rope_length);
  }
  return plan;
}

inline Plan make_plan(const KvBookkeeping& store, const RequestLayout& request) {
  return make_plan(store, std::span<const RequestLayout>(&request, 1));
}

// Throws unless the plan's pages are still those it was made for in `store` (see the top of this
// file): the plan is of this store, and every document and tail it read is still stored, with
// the generation it had (so not evicted, erased or released since, its slot perhaps reused).
// A plan built by hand (store_id 0) passes unchecked. `where` names the caller for the message.
inline void check_plan_current(const KvBookkeeping& store, const Plan& plan,
                               const char* where = "check_plan_current") {
  if (plan.store_id == 0) return;
  LAZYATTN_CHECK(plan.store_id == store.id(), where, ": the plan was made from store ",
                 plan.store_id, ", expected one of this store (store ", store.id(),
                 "): its page ids index another pool");
  if (store.removals() == plan.store_removals) return;  // nothing removed: every source holds
  for (std::size_t i = 0; i < plan.sources.size(); ++i) {
    const PlanSource& s = plan.sources[i];
    if (s.kind == SegmentKind::kDocument) {
      LAZYATTN_CHECK(store.is_live(s.doc), where, ": plan source ", i, " ", s.doc,
                     " was evicted or erased since the plan was made, expected a plan whose "
                     "documents stay stored (pin them); make a new plan");
    } else {
      LAZYATTN_CHECK(store.is_live(s.tail), where, ": plan source ", i, " ", s.tail,
                     " was released since the plan was made, expected a plan whose tails stay "
                     "live; make a new plan");
    }
  }
}

}  // namespace lazyattn
