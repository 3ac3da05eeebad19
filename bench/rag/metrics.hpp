// Metrics of a run: TTFT percentiles, time per output token, throughput, document hit ratio next
// to the analytic ones, KV memory; and the JSON they are written as.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "engine.hpp"
#include "workload.hpp"

namespace lazyattn::rag {

// The p-th percentile (0..100) by linear interpolation between order statistics (numpy's default).
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// Hit ratio of a cache holding the `capacity` most popular of n Zipf(s) items, under independent
// requests: H(capacity, s) / H(n, s). The position-aware form passes floor(C / D) as capacity.
inline double analytic_hit_ratio(std::int64_t capacity, std::int64_t n, double s) {
  return harmonic(std::min(capacity, n), s) / harmonic(n, s);
}

// Che's approximation of an LRU cache's hit ratio for `capacity` items under independent requests
// with probabilities p: the characteristic time T solves sum_i (1 - exp(-p_i T)) = capacity, and
// item i hits with probability 1 - exp(-p_i T). Accurate to about 1% for Zipf popularity.
inline double che_lru_hit_ratio(const std::vector<double>& p, double capacity) {
  if (capacity >= static_cast<double>(p.size())) return 1.0;
  auto filled = [&](double t) {
    double s = 0;
    for (double q : p) s += 1 - std::exp(-q * t);
    return s;
  };
  double lo = 0, hi = 1;
  while (filled(hi) < capacity) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (filled(mid) < capacity ? lo : hi) = mid;
  }
  double h = 0;
  for (double q : p) h += q * (1 - std::exp(-q * lo));
  return h;
}

struct Analytic {
  std::int64_t capacity_docs = 0;  // C: documents cached beside one request's working set
  double position_free = 0;        // H(C, s) / H(N, s)
  double position_aware = 0;       // H(floor(C / D), s) / H(N, s)
  double lru_position_free = 0;    // Che's approximation for LRU over C + D document slots
  double lru_position_aware = 0;   // the same, items (document, position) of probability p_d / D
  double top_c_same_draws = 0;     // top_c_hit_ratio on the run's own requests (main.cpp sets it)
};

// The hit ratio of the ideal static cache, the one always holding the C most popular documents
// (ids 0..C-1: a document's id is its popularity rank), on a workload's own draws: the share of
// the document lookups of requests id >= warmup that ask for one of them. Under independent
// draws (with_replacement) it tends to H(C, s) / H(N, s); without replacement (a request's
// documents distinct, the default) a request asks for each popular document at most once, so
// the lookups lean to less popular ones and this is lower than the formula. It counts every
// lookup as a hit or a miss as a position-free cache would (lazy, block-attention), not the
// position-aware or prefix modes' cache.
inline double top_c_hit_ratio(const Workload& w, std::int64_t capacity, int warmup) {
  std::int64_t lookups = 0, hits = 0;
  for (const RagRequest& q : w.requests) {
    if (q.id < warmup) continue;
    lookups += static_cast<std::int64_t>(q.docs.size());
    for (int d : q.docs) hits += d < capacity;
  }
  return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
}

inline Analytic analytic(const WorkloadConfig& w, std::int64_t capacity_docs) {
  Analytic a;
  a.capacity_docs = capacity_docs;
  a.position_free = analytic_hit_ratio(capacity_docs, w.num_documents, w.zipf);
  a.position_aware =
      analytic_hit_ratio(capacity_docs / w.docs_per_request, w.num_documents, w.zipf);
  const ZipfSampler z(w.num_documents, w.zipf);
  std::vector<double> p, pd;
  for (int k = 0; k < w.num_documents; ++k) {
    p.push_back(z.probability(k));
    for (int j = 0; j < w.docs_per_request; ++j)
      pd.push_back(z.probability(k) / w.docs_per_request);
  }
  // LRU caches in every document page, the working set's D included.
  const auto slots = static_cast<double>(capacity_docs + w.docs_per_request);
  a.lru_position_free = che_lru_hit_ratio(p, slots);
  a.lru_position_aware = che_lru_hit_ratio(pd, slots);
  return a;
}

struct Summary {
  int requests = 0;  // counted (after the warm-up)
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0, ttft_mean = 0;
  double tpot_mean = 0, tpot_p50 = 0;             // (finish - first token) / (output tokens - 1)
  double queue_p50 = 0;                           // admission - arrival
  double throughput_rps = 0, throughput_tps = 0;  // over the whole run
  // Requests per second once warm: the requests that finished after the first `warmup` to
  // finish, over the time from that finish to the last; the whole run's without a warm-up.
  double throughput_steady_rps = 0;
  double hit_ratio = 0;                           // document hits / lookups
  std::int64_t doc_lookups = 0, doc_hits = 0;
  double prefill_fraction = 0;  // prompt tokens computed by requests / prompt tokens
  double duration = 0, busy = 0;
};

// Statistics over requests id >= warmup (hit ratio, latencies); throughput over all, and over
// the completions after the first `warmup` (throughput_steady_rps: the cold start's compulsory
// misses left out).
inline Summary summarize(const RunResult& r, int warmup = 0) {
  Summary s;
  std::vector<double> ttft, tpot, queue;
  std::int64_t prompt = 0, computed = 0, out_tokens = 0;
  for (const RequestRecord& q : r.requests) {
    out_tokens += static_cast<std::int64_t>(q.tokens.size());
    if (q.id < warmup) continue;
    ++s.requests;
    ttft.push_back(q.first_token - q.arrival);
    queue.push_back(q.admitted - q.arrival);
    if (q.tokens.size() > 1)
      tpot.push_back((q.finished - q.first_token) / static_cast<double>(q.tokens.size() - 1));
    s.doc_lookups += q.doc_lookups;
    s.doc_hits += q.doc_hits;
    prompt += q.prompt_tokens;
    computed += q.computed_tokens;
  }
  s.ttft_p50 = percentile(ttft, 50);
  s.ttft_p90 = percentile(ttft, 90);
  s.ttft_p99 = percentile(ttft, 99);
  for (double t : ttft) s.ttft_mean += t / static_cast<double>(ttft.size());
  for (double t : tpot) s.tpot_mean += t / static_cast<double>(tpot.size());
  s.tpot_p50 = percentile(tpot, 50);
  s.queue_p50 = percentile(queue, 50);
  s.duration = r.duration;
  s.busy = r.busy;
  s.throughput_rps = r.duration > 0 ? static_cast<double>(r.requests.size()) / r.duration : 0;
  s.throughput_tps = r.duration > 0 ? static_cast<double>(out_tokens) / r.duration : 0;
  s.throughput_steady_rps = s.throughput_rps;
  const std::size_t n = r.requests.size(), w = warmup > 0 ? static_cast<std::size_t>(warmup) : 0;
  if (w > 0 && w < n) {
    std::vector<double> finish;
    finish.reserve(n);
    for (const RequestRecord& q : r.requests) finish.push_back(q.finished);
    std::sort(finish.begin(), finish.end());
    const double span = finish[n - 1] - finish[w - 1];
    s.throughput_steady_rps = span > 0 ? static_cast<double>(n - w) / span : 0;
  }
  s.hit_ratio =
      s.doc_lookups ? static_cast<double>(s.doc_hits) / static_cast<double>(s.doc_lookups) : 0;
  s.prefill_fraction = prompt ? static_cast<double>(computed) / static_cast<double>(prompt) : 0;
  return s;
}

// A minimal JSON writer: objects and arrays with commas placed for the caller.
class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& os) : os_(os) {}
  JsonWriter& open(const char* key = nullptr, char bracket = '{') {
    comma(key);
    os_ << bracket;
    first_ = true;
    ++depth_;
    return *this;
  }
  JsonWriter& close(char bracket = '}') {
    --depth_;
    os_ << '\n' << std::string(static_cast<std::size_t>(2 * depth_), ' ') << bracket;
    first_ = false;
    return *this;
  }
  JsonWriter& field(const char* key, const std::string& v) {
    comma(key);
    os_ << '"';
    for (char ch : v) {
      if (ch == '"' || ch == '\\') os_ << '\\';
      os_ << ch;
    }
    os_ << '"';
    return *this;
  }
  JsonWriter& field(const char* key, const char* v) { return field(key, std::string(v)); }
  JsonWriter& field(const char* key, bool v) {
    comma(key);
    os_ << (v ? "true" : "false");
    return *this;
  }
  JsonWriter& field(const char* key, double v) {
    comma(key);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", std::isfinite(v) ? v : 0.0);
    os_ << buf;
    return *this;
  }
  template <class I>
  requires std::is_integral_v<I> JsonWriter& field(const char* key, I v) {
    comma(key);
    os_ << static_cast<long long>(v);
    return *this;
  }

 private:
  void comma(const char* key) {
    if (depth_ > 0)
      os_ << (first_ ? "" : ",") << '\n' << std::string(static_cast<std::size_t>(2 * depth_), ' ');
    if (key) os_ << '"' << key << "\": ";
    first_ = false;
  }
  std::ostream& os_;
  bool first_ = true;
  int depth_ = 0;
};

inline void write_summary(JsonWriter& j, const Summary& s, const RunResult& r, const Analytic& a) {
  j.field("requests_counted", s.requests)
      .field("ttft_p50_s", s.ttft_p50)
      .field("ttft_p90_s", s.ttft_p90)
      .field("ttft_p99_s", s.ttft_p99)
      .field("ttft_mean_s", s.ttft_mean)
      .field("tpot_mean_s", s.tpot_mean)
      .field("tpot_p50_s", s.tpot_p50)
      .field("queue_p50_s", s.queue_p50)
      .field("throughput_rps", s.throughput_rps)
      .field("throughput_steady_rps", s.throughput_steady_rps)
      .field("throughput_output_tps", s.throughput_tps)
      .field("duration_s", s.duration)
      .field("busy_s", s.busy)
      .field("steps", r.steps)
      .field("doc_lookups", s.doc_lookups)
      .field("doc_hits", s.doc_hits)
      .field("hit_ratio", s.hit_ratio)
      .field("analytic_hit_ratio_position_free", a.position_free)
      .field("analytic_hit_ratio_position_aware", a.position_aware)
      .field("che_lru_hit_ratio_position_free", a.lru_position_free)
      .field("che_lru_hit_ratio_position_aware", a.lru_position_aware)
      .field("top_c_hit_ratio_same_draws", a.top_c_same_draws)
      .field("capacity_docs", a.capacity_docs)
      .field("prefill_fraction", s.prefill_fraction)
      .field("documents_encoded", r.documents_encoded)
      .field("tokens_encoded", r.tokens_encoded)
      .field("tokens_copied", r.tokens_copied)
      .field("kv_pages_total", r.pages_total)
      .field("kv_pages_peak", r.peak_pages)
      .field("kv_pages_mean", r.mean_pages)
      .field("kv_bytes_peak", r.peak_pages * r.page_bytes)
      .field("kv_page_bytes", r.page_bytes)
      .field("evictions", r.store.evictions);
}

// Per request, in id order: arrival and TTFT (simulated seconds) and document hits, for
// latency distributions and plots (the warm-up requests included; `warmup_requests` says how many).
inline void write_requests(JsonWriter& j, const RunResult& r) {
  j.open("request_arrival_s", '[');
  for (const RequestRecord& q : r.requests) j.field(nullptr, q.arrival);
  j.close(']');
  j.open("request_ttft_s", '[');
  for (const RequestRecord& q : r.requests) j.field(nullptr, q.first_token - q.arrival);
  j.close(']');
  j.open("request_doc_hits", '[');
  for (const RequestRecord& q : r.requests) j.field(nullptr, q.doc_hits);
  j.close(']');
}

}  // namespace lazyattn::rag
