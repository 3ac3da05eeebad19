// Request layouts: an ordered list of segments (a stored document or the request's tail, each with
// a length and a logical start), and helpers for the layouts DESIGN.md section 2 names.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/kv/store.hpp"

namespace lazyattn {

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

// Block-Attention: documents back to back from `first_start`, then the tail. Lengths come from the
// store; start_j is first_start plus the lengths before j.
inline RequestLayout back_to_back(const KvStore& store, std::span<const DocHandle> docs,
                                  TailHandle tail, std::int64_t num_queries = 1,
                                  std::int64_t first_start = 0) {
  RequestLayout r;
  r.num_queries = num_queries;
  std::int64_t pos = first_start;
  for (DocHandle d : docs) {
    std::int64_t len = store.info(d).length;
    r.segments.push_back(Segment::document(d, len, pos));
    pos += len;
  }
  r.segments.push_back(Segment::of_tail(tail, store.info(tail).length, pos));
  return r;
}

// Parallel (APE-style): every document starts at `start`; the tail follows the longest.
inline RequestLayout parallel(const KvStore& store, std::span<const DocHandle> docs,
                              TailHandle tail, std::int64_t num_queries = 1,
                              std::int64_t start = 0) {
  RequestLayout r;
  r.num_queries = num_queries;
  std::int64_t longest = 0;
  for (DocHandle d : docs) {
    std::int64_t len = store.info(d).length;
    r.segments.push_back(Segment::document(d, len, start));
    longest = std::max(longest, len);
  }
  r.segments.push_back(Segment::of_tail(tail, store.info(tail).length, start + longest));
  return r;
}

// Gapped (Prompt Cache-style): document j at starts[j], the tail at tail_start.
inline RequestLayout gapped(const KvStore& store, std::span<const DocHandle> docs,
                            std::span<const std::int64_t> starts, TailHandle tail,
                            std::int64_t tail_start, std::int64_t num_queries = 1) {
  LAZYATTN_CHECK(docs.size() == starts.size(), "layouts::gapped: ", docs.size(),
                 " documents and ", starts.size(), " starts, expected one start per document");
  RequestLayout r;
  r.num_queries = num_queries;
  for (std::size_t j = 0; j < docs.size(); ++j) {
    r.segments.push_back(Segment::document(docs[j], store.info(docs[j]).length, starts[j]));
  }
  r.segments.push_back(Segment::of_tail(tail, store.info(tail).length, tail_start));
  return r;
}

}  // namespace layouts
}  // namespace lazyattn
