// The RAG workload: a pool of documents with Zipf (or uniform) popularity, requests that each
// retrieve a few of them plus a question, arriving as a Poisson process. Everything follows from
// the seed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lazyattn/error.hpp"
#include "random.hpp"

namespace lazyattn::rag {

struct WorkloadConfig {
  int num_documents = 100;
  int docs_per_request = 5;
  bool with_replacement = false;  // true: a request may retrieve the same document twice
  int doc_length = 2048;          // tokens
  int question_length = 32;
  int output_tokens = 16;
  double zipf = 2.1;  // popularity of rank k proportional to k^-zipf; 0 is uniform
  double rate = 1.0;  // requests per second (Poisson arrivals)
  int num_requests = 120;
  std::uint64_t seed = 1;
  int vocab_size = 512;  // token ids are drawn in [0, vocab_size)

  void check() const {
    const char* w = "rag::WorkloadConfig";
    LAZYATTN_CHECK(num_documents >= 1, w, ": num_documents ", num_documents, ", expected >= 1");
    LAZYATTN_CHECK(docs_per_request >= 1, w, ": docs_per_request ", docs_per_request,
                   ", expected >= 1");
    LAZYATTN_CHECK(with_replacement || docs_per_request <= num_documents, w, ": docs_per_request ",
                   docs_per_request, " without replacement from ", num_documents,
                   " documents, expected at most that many");
    LAZYATTN_CHECK(doc_length >= 1 && question_length >= 1 && output_tokens >= 1, w,
                   ": lengths doc ", doc_length, ", question ", question_length, ", output ",
                   output_tokens, ", expected >= 1 each");
    LAZYATTN_CHECK(zipf >= 0 && std::isfinite(zipf), w, ": zipf ", zipf, ", expected >= 0");
    LAZYATTN_CHECK(rate > 0 && std::isfinite(rate), w, ": rate ", rate, ", expected > 0");
    LAZYATTN_CHECK(num_requests >= 1, w, ": num_requests ", num_requests, ", expected >= 1");
    LAZYATTN_CHECK(vocab_size >= 2, w, ": vocab_size ", vocab_size, ", expected >= 2");
  }
};

// Draws ranks 0..n-1 with P(k) = (k+1)^-s / H(n, s), by inverting the cumulative distribution.
class ZipfSampler {
 public:
  ZipfSampler(int n, double s) : cdf_(static_cast<std::size_t>(n)) {
    LAZYATTN_CHECK(n >= 1, "rag::ZipfSampler: n ", n, ", expected >= 1");
    double sum = 0;
    for (int k = 0; k < n; ++k) cdf_[static_cast<std::size_t>(k)] = sum += std::pow(k + 1.0, -s);
    for (double& c : cdf_) c /= sum;
    cdf_.back() = 1.0;
  }
  int operator()(SplitMix64& g) const {
    const double u = g.uniform();
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<int>(
        std::min<std::ptrdiff_t>(it - cdf_.begin(), static_cast<std::ptrdiff_t>(cdf_.size()) - 1));
  }
  double probability(int k) const {
    const auto i = static_cast<std::size_t>(k);
    return cdf_[i] - (i ? cdf_[i - 1] : 0.0);
  }
  int size() const { return static_cast<int>(cdf_.size()); }

 private:
  std::vector<double> cdf_;
};

// H(n, s) = sum_{k=1..n} k^-s, the generalized harmonic number.
inline double harmonic(std::int64_t n, double s) {
  double h = 0;
  for (std::int64_t k = n; k >= 1; --k) h += std::pow(static_cast<double>(k), -s);  // small first
  return h;
}

struct RagRequest {
  int id = 0;
  double arrival = 0;     // seconds since the start
  std::vector<int> docs;  // document ids in prompt order (document id = popularity rank)
  std::vector<std::int32_t> question;
};

struct Workload {
  WorkloadConfig config;
  std::vector<std::vector<std::int32_t>> documents;  // [num_documents][doc_length] token ids
  std::vector<RagRequest> requests;                  // by arrival
};

inline Workload make_workload(const WorkloadConfig& c) {
  c.check();
  Workload w;
  w.config = c;
  auto token = [&](SplitMix64& g) { return static_cast<std::int32_t>(g.below(c.vocab_size)); };
  w.documents.resize(static_cast<std::size_t>(c.num_documents));
  for (int d = 0; d < c.num_documents; ++d) {
    SplitMix64 g(mix_seed(c.seed, 1, static_cast<std::uint64_t>(d)));
    for (int i = 0; i < c.doc_length; ++i)
      w.documents[static_cast<std::size_t>(d)].push_back(token(g));
  }
  const ZipfSampler zipf(c.num_documents, c.zipf);
  SplitMix64 arrivals(mix_seed(c.seed, 2)), picks(mix_seed(c.seed, 3)), words(mix_seed(c.seed, 4));
  double t = 0;
  for (int r = 0; r < c.num_requests; ++r) {
    RagRequest q;
    q.id = r;
    t += arrivals.exponential(c.rate);
    q.arrival = t;
    while (static_cast<int>(q.docs.size()) < c.docs_per_request) {
      const int d = zipf(picks);
      // Without replacement: redraw a document already taken, which keeps the order of the
      // draws (the prompt order) random and each draw's popularity Zipf among the rest.
      if (!c.with_replacement && std::find(q.docs.begin(), q.docs.end(), d) != q.docs.end())
        continue;
      q.docs.push_back(d);
    }
    for (int i = 0; i < c.question_length; ++i) q.question.push_back(token(words));
    w.requests.push_back(std::move(q));
  }
  return w;
}

}  // namespace lazyattn::rag
