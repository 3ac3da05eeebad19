// Request layouts: an ordered list of segments (a stored document or the request's tail, each with
// a length and a logical start), and helpers for the layouts of docs/04-layouts.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <span>
#include <string_view>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/bookkeeping.hpp"

namespace lazyattn {

// Positions stay below 2^62, so that any difference of two positions fits in int64.
inline constexpr std::int64_t kMaxPosition = std::int64_t{1} << 62;

enum class SegmentKind : std::uint8_t { kDocument, kTail };

constexpr std::string_view to_string(SegmentKind k) {
  return k == SegmentKind::kDocument ? "document" : "tail";
}

// One run of keys in a request. Key i of the segment (0 <= i < length) sits at logical position
// start + i. A document segment may take a prefix of its document (length <= document length).
struct Segment {
  SegmentKind kind = SegmentKind::kDocument;
  DocHandle doc;    // kind == kDocument
  TailHandle tail;  // kind == kTail
  std::int64_t length = 0;
  std::int64_t start = 0;

  static Segment document(DocHandle h, std::int64_t length, std::int64_t start) {
    Segment s;
    s.kind = SegmentKind::kDocument;
    s.doc = h;
    s.length = length;
    s.start = start;
    return s;
  }
  static Segment of_tail(TailHandle h, std::int64_t length, std::int64_t start) {
    Segment s;
    s.kind = SegmentKind::kTail;
    s.tail = h;
    s.length = length;
    s.start = start;
    return s;
  }
};

// A request: its segments in key order, exactly one of them the tail. The last `num_queries`
// tokens of the tail are the queries (1 for a decode step, the new tokens for a prefill); they
// attend fully to every document segment and causally to the tail.
struct RequestLayout {
  std::vector<Segment> segments;
  std::int64_t num_queries = 1;
};

inline std::ostream& operator<<(std::ostream& os, const RequestLayout& r) {
  os << "[";
  for (std::size_t i = 0; i < r.segments.size(); ++i) {
    const Segment& s = r.segments[i];
    os << (i ? ", " : "") << to_string(s.kind) << "(len " << s.length << " @ " << s.start << ")";
  }
  return os << "] queries " << r.num_queries;
}

namespace layouts {
namespace detail {

// A document's or tail's length, with the helper's name and the item's place prefixed to the
// store's message when the handle is stale.
inline std::int64_t length_of(const KvBookkeeping& store, DocHandle h, const char* where,
                              std::size_t j) {
  try {
    return store.info(h).length;
  } catch (const Error& e) {
    ::lazyattn::detail::throw_error(where, ": document ", j, ": ", e.what());
  }
}
inline std::int64_t length_of(const KvBookkeeping& store, TailHandle h, const char* where) {
  try {
    return store.info(h).length;
  } catch (const Error& e) {
    ::lazyattn::detail::throw_error(where, ": tail: ", e.what());
  }
}
inline void check_start(std::int64_t start, const char* where, const char* name) {
  LAZYATTN_CHECK(start >= 0 && start < kMaxPosition, where, ": ", name, " ", start,
                 ", expected in [0, 2^62)");
}

}  // namespace detail

// Block-Attention: documents back to back from `first_start`, then the tail. Lengths come from the
// store; start_j is first_start plus the lengths before j. Positions past 2^62 are make_plan's
// to refuse; a start here is checked so that the running sum cannot overflow.
inline RequestLayout back_to_back(const KvBookkeeping& store, std::span<const DocHandle> docs,
                                  TailHandle tail, std::int64_t num_queries = 1,
                                  std::int64_t first_start = 0) {
  constexpr const char* w = "layouts::back_to_back";
  detail::check_start(first_start, w, "first_start");
  RequestLayout r;
  r.num_queries = num_queries;
  std::int64_t pos = first_start;
  for (std::size_t j = 0; j < docs.size(); ++j) {
    std::int64_t len = detail::length_of(store, docs[j], w, j);
    r.segments.push_back(Segment::document(docs[j], len, pos));
    pos += len;
    LAZYATTN_CHECK(pos <= kMaxPosition, w, ": document ", j, " ends at position ", pos,
                   ", expected at most 2^62");
  }
  r.segments.push_back(Segment::of_tail(tail, detail::length_of(store, tail, w), pos));
  return r;
}

// Parallel (APE-style): every document starts at `start`; the tail follows the longest.
inline RequestLayout parallel(const KvBookkeeping& store, std::span<const DocHandle> docs,
                              TailHandle tail, std::int64_t num_queries = 1,
                              std::int64_t start = 0) {
  constexpr const char* w = "layouts::parallel";
  detail::check_start(start, w, "start");
  RequestLayout r;
  r.num_queries = num_queries;
  std::int64_t longest = 0;
  for (std::size_t j = 0; j < docs.size(); ++j) {
    std::int64_t len = detail::length_of(store, docs[j], w, j);
    r.segments.push_back(Segment::document(docs[j], len, start));
    longest = std::max(longest, len);
  }
  r.segments.push_back(Segment::of_tail(tail, detail::length_of(store, tail, w), start + longest));
  return r;
}

// Gapped (Prompt Cache-style): document j at starts[j], the tail at tail_start.
inline RequestLayout gapped(const KvBookkeeping& store, std::span<const DocHandle> docs,
                            std::span<const std::int64_t> starts, TailHandle tail,
                            std::int64_t tail_start, std::int64_t num_queries = 1) {
  constexpr const char* w = "layouts::gapped";
  LAZYATTN_CHECK(docs.size() == starts.size(), w, ": ", docs.size(), " documents and ",
                 starts.size(), " starts, expected one start per document");
  RequestLayout r;
  r.num_queries = num_queries;
  for (std::size_t j = 0; j < docs.size(); ++j) {
    r.segments.push_back(
        Segment::document(docs[j], detail::length_of(store, docs[j], w, j), starts[j]));
  }
  r.segments.push_back(Segment::of_tail(tail, detail::length_of(store, tail, w), tail_start));
  return r;
}

}  // namespace layouts
}  // namespace lazyattn
