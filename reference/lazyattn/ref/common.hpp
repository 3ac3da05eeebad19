// Shared vocabulary of the CPU reference (Method) and the input checks that the scalar and the
// Eigen reference both run before they read a byte: shapes, plan structure, head dims, positions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/rope/policy.hpp"
#include "lazyattn/rope/types.hpp"

namespace lazyattn::ref {

// How positions reach the logits (DESIGN.md section 1).
//   kEager    materialize every key rotated at its logical position, then plain attention.
//   kDeferred keep the stored keys and correct the query: by m - n per key (raw form) or by
//             m - s once per segment (local form). Same math, different rounding.
enum class Method : std::uint8_t { kEager, kDeferred };

constexpr std::string_view to_string(Method m) {
  return m == Method::kEager ? "eager" : "deferred";
}

namespace detail {

// A Method set from an integer by hand must still be one of the two.
inline void check_method(const char* where, Method m) {
  LAZYATTN_CHECK(m == Method::kEager || m == Method::kDeferred, where, ": method ",
                 static_cast<int>(m), ", expected 0 (eager) or 1 (deferred)");
}

// One named dimension of a tensor shape, for messages like "[num_queries 5, head_dim 128]".
struct Dim {
  const char* name;
  std::int64_t size;
};

inline std::string shape_string(std::initializer_list<Dim> dims) {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (const Dim& d : dims) {
    os << (first ? "" : ", ") << d.name << " " << d.size;
    first = false;
  }
  os << "]";
  return os.str();
}

// The element count of a shape; -1 when a dimension is negative or the product passes int64.
inline std::int64_t elements_of(std::initializer_list<Dim> dims) {
  std::int64_t n = 1;
  for (const Dim& d : dims) {
    if (d.size < 0 || __builtin_mul_overflow(n, d.size, &n)) return -1;
  }
  return n;
}

// Throws unless `size` (a span's element count) matches the shape `dims`, whose product is
// checked: a shape too large to count is an error, not a wrapped number that a span might match.
inline void check_size(const char* where, const char* name, std::size_t size,
                       std::initializer_list<Dim> dims) {
  std::int64_t expected = elements_of(dims);
  LAZYATTN_CHECK(expected >= 0, where, ": ", name, " of shape ", shape_string(dims),
                 " has a negative dimension or more than 2^63 - 1 elements, expected a shape "
                 "that fits in memory");
  LAZYATTN_CHECK(static_cast<std::int64_t>(size) == expected, where, ": ", name, " has ", size,
                 " elements, expected ", shape_string(dims), " = ", expected);
}

// The head counts and head dim of params, rope and (optionally) the store must agree.
inline void check_heads(const char* where, const RopePolicy& rope, const AttentionParams& params) {
  params.check(where);
  LAZYATTN_CHECK(rope.head_dim() == params.head_dim, where, ": rope head_dim ", rope.head_dim(),
                 ", expected params.head_dim ", params.head_dim);
}

inline void check_store(const char* where, const KvStore& store, const AttentionParams& params,
                        int layer) {
  const KvStoreConfig& c = store.config();
  LAZYATTN_CHECK(c.head_dim == params.head_dim, where, ": store head_dim ", c.head_dim,
                 ", expected params.head_dim ", params.head_dim);
  LAZYATTN_CHECK(c.num_kv_heads == params.num_kv_heads, where, ": store num_kv_heads ",
                 c.num_kv_heads, ", expected params.num_kv_heads ", params.num_kv_heads);
  LAZYATTN_CHECK(layer >= 0 && layer < c.num_layers, where, ": layer ", layer,
                 ", expected in [0, num_layers ", c.num_layers, ")");
}

// A CSR pointer array: `size` + 1 entries, starting at 0, never decreasing, ending at `total`.
template <class I>
void check_indptr(const char* where, const char* name, const std::vector<I>& indptr,
                  std::int64_t count, std::int64_t total, const char* total_name) {
  LAZYATTN_CHECK(static_cast<std::int64_t>(indptr.size()) == count + 1, where, ": plan.", name,
                 " has ", indptr.size(), " entries, expected ", count + 1);
  LAZYATTN_CHECK(indptr.front() == 0, where, ": plan.", name, "[0] is ", indptr.front(),
                 ", expected 0");
  for (std::size_t i = 1; i < indptr.size(); ++i) {
    LAZYATTN_CHECK(indptr[i] >= indptr[i - 1], where, ": plan.", name, "[", i, "] ", indptr[i],
                   " is below plan.", name, "[", i - 1, "] ", indptr[i - 1]);
  }
  LAZYATTN_CHECK(indptr.back() == total, where, ": plan.", name, " ends at ", indptr.back(),
                 ", expected ", total_name, " ", total);
}

template <class V>
void check_count(const char* where, const char* name, const V& v, std::int64_t expected,
                 const char* what) {
  LAZYATTN_CHECK(static_cast<std::int64_t>(v.size()) == expected, where, ": plan.", name, " has ",
                 v.size(), " entries, expected ", what, " ", expected);
}

// Checks that a plan is well formed against the store and the policy, so that the references can
// index it without bounds checks: a plan of this store whose documents and tails are still the
// ones it read (check_plan_current), array sizes, page ids inside the pool, enough pages per
// segment, one tail per request holding its queries at the positions the plan states, positions
// below 2^62, and local-form segments only with schedules that allow them.
inline void check_plan(const char* where, const KvStore& store, const Plan& plan,
                       const RopePolicy& rope) {
  check_plan_current(store, plan, where);
  const KvStoreConfig& c = store.config();
  LAZYATTN_CHECK(plan.page_size == c.page_size, where, ": plan.page_size ", plan.page_size,
                 ", expected the store's page_size ", c.page_size);
  LAZYATTN_CHECK(!plan.request_segment_indptr.empty(), where,
                 ": plan.request_segment_indptr is empty, expected num_requests + 1 entries");
  LAZYATTN_CHECK(!plan.request_query_indptr.empty(), where,
                 ": plan.request_query_indptr is empty, expected num_requests + 1 entries");
  LAZYATTN_CHECK(!plan.segment_page_indptr.empty(), where,
                 ": plan.segment_page_indptr is empty, expected num_segments + 1 entries");
  const std::int64_t num_requests =
      static_cast<std::int64_t>(plan.request_segment_indptr.size()) - 1;
  const std::int64_t num_segments = static_cast<std::int64_t>(plan.segment_length.size());
  check_indptr(where, "request_segment_indptr", plan.request_segment_indptr, num_requests,
               num_segments, "num_segments");
  check_indptr(where, "request_query_indptr", plan.request_query_indptr, num_requests,
               plan.request_query_indptr.back(), "num_queries");
  check_indptr(where, "segment_page_indptr", plan.segment_page_indptr, num_segments,
               static_cast<std::int64_t>(plan.page_ids.size()), "page_ids.size()");
  check_count(where, "request_tail_segment", plan.request_tail_segment, num_requests,
              "num_requests");
  check_count(where, "request_kv_length", plan.request_kv_length, num_requests, "num_requests");
  check_count(where, "request_query_position", plan.request_query_position, num_requests,
              "num_requests");
  check_count(where, "request_rope_length", plan.request_rope_length, num_requests, "num_requests");
  check_count(where, "segment_start", plan.segment_start, num_segments, "num_segments");
  check_count(where, "segment_form", plan.segment_form, num_segments, "num_segments");
  check_count(where, "segment_kind", plan.segment_kind, num_segments, "num_segments");
  for (std::size_t i = 0; i < plan.page_ids.size(); ++i) {
    LAZYATTN_CHECK(plan.page_ids[i] >= 0 && plan.page_ids[i] < c.num_pages, where,
                   ": plan.page_ids[", i, "] ", plan.page_ids[i], ", expected in [0, num_pages ",
                   c.num_pages, ")");
  }
  for (std::int64_t s = 0; s < num_segments; ++s) {
    const std::int64_t len = plan.segment_length[s];
    const std::int64_t start = plan.segment_start[s];
    LAZYATTN_CHECK(len >= 0, where, ": segment ", s, " length ", len, ", expected >= 0");
    LAZYATTN_CHECK(start >= 0 && start < kMaxPosition && len <= kMaxPosition - start, where,
                   ": segment ", s, " start ", start, " + length ", len,
                   ", expected positions in [0, 2^62)");
    const std::int64_t pages = plan.segment_page_indptr[s + 1] - plan.segment_page_indptr[s];
    const std::int64_t needed = (len + c.page_size - 1) / c.page_size;
    LAZYATTN_CHECK(pages >= needed, where, ": segment ", s, " of length ", len, " has ", pages,
                   " pages, expected at least ", needed, " (page_size ", c.page_size, ")");
    LAZYATTN_CHECK(plan.segment_form[s] <= static_cast<std::uint8_t>(StorageForm::kAbsolute),
                   where, ": segment ", s, " form ", int{plan.segment_form[s]},
                   ", expected 0 (raw), 1 (local) or 2 (absolute)");
    LAZYATTN_CHECK(plan.segment_form[s] != static_cast<std::uint8_t>(StorageForm::kAbsolute) ||
                       plan.segment_kind[s] == static_cast<std::uint8_t>(SegmentKind::kTail),
                   where, ": segment ", s, " is a document in absolute form, expected a tail");
    LAZYATTN_CHECK(plan.segment_kind[s] <= static_cast<std::uint8_t>(SegmentKind::kTail), where,
                   ": segment ", s, " kind ", int{plan.segment_kind[s]},
                   ", expected 0 (document) or 1 (tail)");
    rope.check_form(static_cast<StorageForm>(plan.segment_form[s]), where);
  }
  for (std::int64_t b = 0; b < num_requests; ++b) {
    const std::int64_t seg_begin = plan.request_segment_indptr[b];
    const std::int64_t seg_end = plan.request_segment_indptr[b + 1];
    const std::int64_t tail = plan.request_tail_segment[b];
    LAZYATTN_CHECK(tail >= seg_begin && tail < seg_end, where, ": request ", b, " tail segment ",
                   tail, ", expected one of its segments [", seg_begin, ", ", seg_end, ")");
    std::int64_t kv_length = 0;
    std::int64_t end_position = 0;
    for (std::int64_t s = seg_begin; s < seg_end; ++s) {
      const bool is_tail = plan.segment_kind[s] == static_cast<std::uint8_t>(SegmentKind::kTail);
      LAZYATTN_CHECK(is_tail == (s == tail), where, ": request ", b, " segment ", s, " has kind ",
                     is_tail ? "tail" : "document", ", expected ",
                     s == tail ? "tail (request_tail_segment)" : "document (one tail per request)");
      kv_length += plan.segment_length[s];
      if (plan.segment_length[s] > 0) {
        end_position = std::max(end_position, plan.segment_start[s] + plan.segment_length[s]);
      }
    }
    LAZYATTN_CHECK(plan.request_kv_length[b] == kv_length, where, ": request ", b, " kv_length ",
                   plan.request_kv_length[b], ", expected the sum of its ", "segment lengths ",
                   kv_length);
    const std::int64_t num_queries =
        plan.request_query_indptr[b + 1] - plan.request_query_indptr[b];
    const std::int64_t tail_length = plan.segment_length[tail];
    LAZYATTN_CHECK(num_queries >= 1 && num_queries <= tail_length, where, ": request ", b, " has ",
                   num_queries, " queries, expected in [1, tail length ", tail_length, "]");
    const std::int64_t query_position = plan.segment_start[tail] + tail_length - num_queries;
    LAZYATTN_CHECK(plan.request_query_position[b] == query_position, where, ": request ", b,
                   " query_position ", plan.request_query_position[b],
                   ", expected the tail's last ", num_queries, " positions from ", query_position);
    LAZYATTN_CHECK(plan.request_rope_length[b] >= end_position &&
                       plan.request_rope_length[b] <= kMaxPosition,
                   where, ": request ", b, " rope_length ", plan.request_rope_length[b],
                   ", expected at least 1 + its largest position = ", end_position,
                   " and at most 2^62");
  }
}

// Everything attend() checks before it reads: params against rope and store, the layer, the plan,
// and the sizes of q [num_queries, num_qo_heads, head_dim], out (same) and lse
// [num_queries, num_qo_heads].
inline void check_attend(const char* where, const KvStore& store, const Plan& plan, int layer,
                         const RopePolicy& rope, const AttentionParams& params, std::size_t q_size,
                         std::size_t out_size, std::size_t lse_size) {
  check_heads(where, rope, params);
  check_store(where, store, params, layer);
  check_plan(where, store, plan, rope);
  const std::int64_t nq = plan.request_query_indptr.back();
  check_size(
      where, "q", q_size,
      {{"num_queries", nq}, {"num_qo_heads", params.num_qo_heads}, {"head_dim", params.head_dim}});
  check_size(
      where, "out", out_size,
      {{"num_queries", nq}, {"num_qo_heads", params.num_qo_heads}, {"head_dim", params.head_dim}});
  check_size(where, "lse", lse_size, {{"num_queries", nq}, {"num_qo_heads", params.num_qo_heads}});
}

// decode() is attend() with exactly one query per request.
inline void check_decode(const char* where, const Plan& plan) {
  for (std::size_t b = 0; b + 1 < plan.request_query_indptr.size(); ++b) {
    const std::int64_t n = plan.request_query_indptr[b + 1] - plan.request_query_indptr[b];
    LAZYATTN_CHECK(n == 1, where, ": request ", b, " has ", n,
                   " queries, expected 1 for a decode step (prefill takes any number)");
  }
}

inline void check_positions(const char* where, const char* name,
                            std::span<const std::int64_t> positions) {
  for (std::size_t i = 0; i < positions.size(); ++i) {
    LAZYATTN_CHECK(positions[i] >= 0 && positions[i] < kMaxPosition, where, ": ", name, "[", i,
                   "] ", positions[i], ", expected in [0, 2^62)");
  }
}

// dense_attention's inputs; returns the rope length to take frequencies for (0 in the call: one
// past the largest position).
inline std::int64_t check_dense(const char* where, const RopePolicy& rope,
                                const AttentionParams& params, std::size_t q_size,
                                std::span<const std::int64_t> q_positions, std::size_t k_size,
                                std::span<const std::int64_t> k_positions, std::size_t v_size,
                                std::size_t mask_size, std::size_t out_size, std::size_t lse_size,
                                std::int64_t rope_length) {
  check_heads(where, rope, params);
  const auto nq = static_cast<std::int64_t>(q_positions.size());
  const auto nk = static_cast<std::int64_t>(k_positions.size());
  const Dim hq{"num_qo_heads", params.num_qo_heads};
  const Dim hk{"num_kv_heads", params.num_kv_heads};
  const Dim d{"head_dim", params.head_dim};
  check_size(where, "q", q_size, {{"num_queries (q_positions.size())", nq}, hq, d});
  check_size(where, "k", k_size, {{"num_keys (k_positions.size())", nk}, hk, d});
  check_size(where, "v", v_size, {{"num_keys (k_positions.size())", nk}, hk, d});
  if (mask_size != 0) check_size(where, "mask", mask_size, {{"num_queries", nq}, {"num_keys", nk}});
  check_size(where, "out", out_size, {{"num_queries", nq}, hq, d});
  check_size(where, "lse", lse_size, {{"num_queries", nq}, hq});
  check_positions(where, "q_positions", q_positions);
  check_positions(where, "k_positions", k_positions);
  std::int64_t end = 0;
  for (std::int64_t p : q_positions) end = std::max(end, p + 1);
  for (std::int64_t p : k_positions) end = std::max(end, p + 1);
  LAZYATTN_CHECK(rope_length == 0 || rope_length >= end, where, ": rope_length ", rope_length,
                 ", expected 0 (one past the largest position) or at least ", end);
  return rope_length == 0 ? end : rope_length;
}

inline void check_encode(const char* where, const RopePolicy& rope, const AttentionParams& params,
                         std::int64_t length, std::size_t q_size, std::size_t k_size,
                         std::size_t v_size, std::size_t out_size, std::size_t lse_size,
                         std::size_t k_stored_size, StorageForm k_stored_form) {
  check_heads(where, rope, params);
  LAZYATTN_CHECK(length >= 0 && length < kMaxPosition, where, ": length ", length,
                 ", expected in [0, 2^62)");
  const Dim n{"length", length};
  const Dim hq{"num_qo_heads", params.num_qo_heads};
  const Dim hk{"num_kv_heads", params.num_kv_heads};
  const Dim d{"head_dim", params.head_dim};
  check_size(where, "q", q_size, {n, hq, d});
  check_size(where, "k", k_size, {n, hk, d});
  check_size(where, "v", v_size, {n, hk, d});
  check_size(where, "out", out_size, {n, hq, d});
  check_size(where, "lse", lse_size, {n, hq});
  if (k_stored_size != 0) {
    check_size(where, "k_stored", k_stored_size, {n, hk, d});
    LAZYATTN_CHECK(k_stored_form == StorageForm::kRaw || k_stored_form == StorageForm::kLocal,
                   where, ": k_stored storage form ", static_cast<int>(k_stored_form),
                   ", expected raw (0) or local (1)");
    rope.check_form(k_stored_form, where);
  }
}

}  // namespace detail
}  // namespace lazyattn::ref
