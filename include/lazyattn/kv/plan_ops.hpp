// Plan algebra: plans made from stored documents alone (document encodings), batches joined
// (append_plan), and neighbouring local-form document segments merged (coalesce_document_segments).
// Each checks the plans it reads (check_plan_arrays) and throws lazyattn::Error naming the bad
// value; on a throw the destination is unchanged.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/bookkeeping.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn {

namespace detail {

inline constexpr std::int64_t kMaxPlanIndex = std::numeric_limits<std::int32_t>::max();

// A CSR offset array of a plan: count + 1 entries from 0, never decreasing, ending at total.
inline void check_plan_indptr(const char* where, const char* name,
                              const std::vector<std::int32_t>& indptr, std::size_t count,
                              std::size_t total) {
  LAZYATTN_CHECK(indptr.size() == count + 1, where, ": plan.", name, " has ", indptr.size(),
                 " entries, expected ", count + 1);
  LAZYATTN_CHECK(indptr.front() == 0, where, ": plan.", name, "[0] ", indptr.front(),
                 ", expected 0");
  for (std::size_t i = 1; i < indptr.size(); ++i) {
    LAZYATTN_CHECK(indptr[i] >= indptr[i - 1], where, ": plan.", name, "[", i, "] ", indptr[i],
                   ", expected >= plan.", name, "[", i - 1, "] ", indptr[i - 1]);
  }
  LAZYATTN_CHECK(static_cast<std::size_t>(indptr.back()) == total, where, ": plan.", name,
                 " ends at ", indptr.back(), ", expected ", total);
}

inline void check_plan_count(const char* where, const char* name, std::size_t size,
                             std::size_t expected, const char* what) {
  LAZYATTN_CHECK(size == expected, where, ": plan.", name, " has ", size, " entries, expected ",
                 what, " ", expected);
}

}  // namespace detail

// Checks that a plan's arrays agree with each other, so that code walking it (the functions
// below) stays inside them: sizes per request and per segment, the CSR offsets, each request's
// tail segment among its segments and of kind tail, and page_size >= 1. It does not check the
// pages against a store (check_plan_current does) nor the positions (make_plan's and the
// references' checks do).
inline void check_plan_arrays(const Plan& plan, const char* where) {
  LAZYATTN_CHECK(plan.page_size >= 1, where, ": plan.page_size ", plan.page_size,
                 ", expected >= 1");
  LAZYATTN_CHECK(!plan.request_segment_indptr.empty() && !plan.request_query_indptr.empty() &&
                     !plan.segment_page_indptr.empty(),
                 where, ": plan.request_segment_indptr, request_query_indptr and ",
                 "segment_page_indptr must each hold at least one entry (0)");
  const std::size_t requests = plan.request_segment_indptr.size() - 1;
  const std::size_t segments = plan.segment_length.size();
  detail::check_plan_indptr(where, "request_segment_indptr", plan.request_segment_indptr, requests,
                            segments);
  detail::check_plan_indptr(where, "request_query_indptr", plan.request_query_indptr, requests,
                            static_cast<std::size_t>(plan.request_query_indptr.back()));
  detail::check_plan_indptr(where, "segment_page_indptr", plan.segment_page_indptr, segments,
                            plan.page_ids.size());
  detail::check_plan_count(where, "request_tail_segment", plan.request_tail_segment.size(),
                           requests, "num_requests");
  detail::check_plan_count(where, "request_kv_length", plan.request_kv_length.size(), requests,
                           "num_requests");
  detail::check_plan_count(where, "request_query_position", plan.request_query_position.size(),
                           requests, "num_requests");
  detail::check_plan_count(where, "request_rope_length", plan.request_rope_length.size(), requests,
                           "num_requests");
  detail::check_plan_count(where, "segment_start", plan.segment_start.size(), segments,
                           "num_segments");
  detail::check_plan_count(where, "segment_form", plan.segment_form.size(), segments,
                           "num_segments");
  detail::check_plan_count(where, "segment_kind", plan.segment_kind.size(), segments,
                           "num_segments");
  for (std::size_t b = 0; b < requests; ++b) {
    const std::int32_t tail = plan.request_tail_segment[b];
    LAZYATTN_CHECK(
        tail >= plan.request_segment_indptr[b] && tail < plan.request_segment_indptr[b + 1], where,
        ": request ", b, " tail segment ", tail, ", expected one of its segments [",
        plan.request_segment_indptr[b], ", ", plan.request_segment_indptr[b + 1], ")");
    LAZYATTN_CHECK(plan.segment_kind[static_cast<std::size_t>(tail)] ==
                       static_cast<std::uint8_t>(SegmentKind::kTail),
                   where, ": request ", b, " tail segment ", tail, " has kind ",
                   static_cast<int>(plan.segment_kind[static_cast<std::size_t>(tail)]),
                   ", expected 1 (tail)");
  }
}

// Document encodings as a plan: request j is documents[j] whole, its pages as the request's tail
// (causal) at start 0 in the document's form, every token a query. This is the standalone
// forward that writes a document's K and V (documents are encoded as Block-Attention does, from
// position 0), batched like any prefill. A document allocate()d and not yet committed is
// accepted: these are the plans that fill it. Records the documents for check_plan_current.
inline Plan encode_plan(const KvBookkeeping& store, std::span<const DocHandle> documents) {
  constexpr const char* w = "encode_plan";
  LAZYATTN_CHECK(static_cast<std::int64_t>(documents.size()) < detail::kMaxPlanIndex, w, ": ",
                 documents.size(), " documents, expected fewer than 2^31 - 1");
  Plan p;
  p.page_size = store.config().page_size;
  p.store_id = store.id();
  p.store_removals = store.removals();  // before any document is read, as make_plan does
  std::int64_t queries = 0;
  for (std::size_t j = 0; j < documents.size(); ++j) {
    DocInfo d;
    try {
      d = store.info(documents[j]);
    } catch (const Error& e) {
      detail::throw_error(w, ": document ", j, ": ", e.what());
    }
    queries += d.length;
    LAZYATTN_CHECK(queries <= detail::kMaxPlanIndex, w, ": document ", j, " of length ", d.length,
                   " brings the plan to ", queries, " queries, expected at most 2^31 - 1");
    LAZYATTN_CHECK(
        static_cast<std::int64_t>(p.page_ids.size() + d.pages.size()) <= detail::kMaxPlanIndex, w,
        ": document ", j, " brings the plan past 2^31 - 1 pages");
    p.page_ids.insert(p.page_ids.end(), d.pages.begin(), d.pages.end());
    p.segment_page_indptr.push_back(static_cast<std::int32_t>(p.page_ids.size()));
    p.segment_length.push_back(static_cast<std::int32_t>(d.length));
    p.segment_start.push_back(0);
    p.segment_form.push_back(static_cast<std::uint8_t>(d.form));
    p.segment_kind.push_back(static_cast<std::uint8_t>(SegmentKind::kTail));
    p.request_tail_segment.push_back(p.num_segments() - 1);
    p.request_segment_indptr.push_back(p.num_segments());
    p.request_query_indptr.push_back(static_cast<std::int32_t>(queries));
    p.request_kv_length.push_back(d.length);
    p.request_query_position.push_back(0);
    p.request_rope_length.push_back(d.length);
    p.sources.push_back(PlanSource{SegmentKind::kDocument, documents[j], {}, d.length});
  }
  return p;
}

// Appends src's requests to dst's, shifting src's segment, page and query indices: one plan, and
// one launch, for two batches (document encodings and a step's requests, say). The plans must
// share the page size (a default-constructed dst, page_size 0, takes src's) and come from one
// store: the result's sources are both plans', checked at use against the older removal count. A
// plan built by hand (store_id 0) joins a store's plan unchecked, as it would be alone.
inline void append_plan(Plan& dst, const Plan& src) {
  constexpr const char* w = "append_plan";
  check_plan_arrays(src, "append_plan: src");
  const bool dst_empty =
      dst.page_size == 0 && dst.num_segments() == 0 && dst.request_segment_indptr.size() == 1;
  if (!dst_empty) check_plan_arrays(dst, "append_plan: dst");
  LAZYATTN_CHECK(dst_empty || dst.page_size == src.page_size, w, ": src page_size ", src.page_size,
                 ", expected dst's ", dst.page_size);
  LAZYATTN_CHECK(dst.store_id == 0 || src.store_id == 0 || dst.store_id == src.store_id, w,
                 ": src was made from store ", src.store_id, ", dst from store ", dst.store_id,
                 ", expected plans of one store (page ids index one pool)");
  auto fits = [&](const char* what, std::int64_t a, std::int64_t b) {
    LAZYATTN_CHECK(a + b <= detail::kMaxPlanIndex, w, ": ", a, " + ", b, " ", what,
                   ", expected at most 2^31 - 1 in one plan");
  };
  fits("requests", dst.num_requests(), src.num_requests());
  fits("segments", dst.num_segments(), src.num_segments());
  fits("queries", dst.num_queries(), src.num_queries());
  fits("pages", static_cast<std::int64_t>(dst.page_ids.size()),
       static_cast<std::int64_t>(src.page_ids.size()));
  // Built aside and moved in: an allocation failure leaves dst as it was.
  Plan out = dst;
  out.page_size = src.page_size;
  const std::int32_t s0 = dst.num_segments(), q0 = dst.num_queries();
  const auto p0 = static_cast<std::int32_t>(dst.page_ids.size());
  for (std::int32_t b = 0; b < src.num_requests(); ++b) {
    const auto i = static_cast<std::size_t>(b);
    out.request_segment_indptr.push_back(src.request_segment_indptr[i + 1] + s0);
    out.request_query_indptr.push_back(src.request_query_indptr[i + 1] + q0);
    out.request_tail_segment.push_back(src.request_tail_segment[i] + s0);
    out.request_kv_length.push_back(src.request_kv_length[i]);
    out.request_query_position.push_back(src.request_query_position[i]);
    out.request_rope_length.push_back(src.request_rope_length[i]);
  }
  for (std::int32_t s = 0; s < src.num_segments(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    out.segment_page_indptr.push_back(src.segment_page_indptr[i + 1] + p0);
    out.segment_length.push_back(src.segment_length[i]);
    out.segment_start.push_back(src.segment_start[i]);
    out.segment_form.push_back(src.segment_form[i]);
    out.segment_kind.push_back(src.segment_kind[i]);
  }
  out.page_ids.insert(out.page_ids.end(), src.page_ids.begin(), src.page_ids.end());
  if (src.store_id != 0) {
    out.store_removals =
        dst.store_id == 0 ? src.store_removals : std::min(dst.store_removals, src.store_removals);
    out.store_id = src.store_id;
  }
  out.sources.insert(out.sources.end(), src.sources.begin(), src.sources.end());
  dst = std::move(out);
}

// Merges neighbouring document segments of one request that hold keys in local form at the same
// start, where the first one fills its last page: the merged segment's pages are the two lists
// back to back and its keys carry the same rotations, so attention is unchanged, with one query
// rotation and one schedule item instead of two. That is how Block-Attention's private copies,
// position-aware documents and prefix blocks (all keys at their absolute positions, start 0)
// become the one contiguous KV run a conventional cache gives them. Documents at their own
// starts stay apart; raw-form segments never merge (their keys are rotated by slot in the
// kernel), nor does a merge pass 2^31 - 1 keys.
inline void coalesce_document_segments(Plan& plan) {
  check_plan_arrays(plan, "coalesce_document_segments");
  const auto local = static_cast<std::uint8_t>(StorageForm::kLocal);
  const auto document = static_cast<std::uint8_t>(SegmentKind::kDocument);
  Plan out;
  out.page_size = plan.page_size;
  out.store_id = plan.store_id;  // the same pages from the same documents and tails
  out.store_removals = plan.store_removals;
  out.sources = plan.sources;
  out.request_query_indptr = plan.request_query_indptr;
  out.request_kv_length = plan.request_kv_length;
  out.request_query_position = plan.request_query_position;
  out.request_rope_length = plan.request_rope_length;
  for (std::int32_t b = 0; b < plan.num_requests(); ++b) {
    const auto rb = static_cast<std::size_t>(b);
    for (std::int32_t s = plan.request_segment_indptr[rb]; s < plan.request_segment_indptr[rb + 1];
         ++s) {
      const auto i = static_cast<std::size_t>(s);
      const auto p0 = static_cast<std::ptrdiff_t>(plan.segment_page_indptr[i]),
                 p1 = static_cast<std::ptrdiff_t>(plan.segment_page_indptr[i + 1]);
      const bool merge =
          s > plan.request_segment_indptr[rb] && plan.segment_kind[i] == document &&
          plan.segment_form[i] == local && out.segment_kind.back() == document &&
          out.segment_form.back() == local && out.segment_start.back() == plan.segment_start[i] &&
          out.segment_length.back() % plan.page_size == 0 &&
          std::int64_t{out.segment_length.back()} + plan.segment_length[i] <= detail::kMaxPlanIndex;
      out.page_ids.insert(out.page_ids.end(), plan.page_ids.begin() + p0,
                          plan.page_ids.begin() + p1);
      if (merge) {
        out.segment_page_indptr.back() = static_cast<std::int32_t>(out.page_ids.size());
        out.segment_length.back() += plan.segment_length[i];
        continue;
      }
      if (s == plan.request_tail_segment[rb])
        out.request_tail_segment.push_back(out.num_segments());
      out.segment_page_indptr.push_back(static_cast<std::int32_t>(out.page_ids.size()));
      out.segment_length.push_back(plan.segment_length[i]);
      out.segment_start.push_back(plan.segment_start[i]);
      out.segment_form.push_back(plan.segment_form[i]);
      out.segment_kind.push_back(plan.segment_kind[i]);
    }
    out.request_segment_indptr.push_back(out.num_segments());
  }
  plan = std::move(out);
}

}  // namespace lazyattn
