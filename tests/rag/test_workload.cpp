// The workload generator: the Zipf sampler draws the Zipf law (a chi-square test that a wrong
// exponent fails), Poisson arrivals at the rate, documents with and without replacement, seeds.
#include "support/catch.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../../bench/rag/metrics.hpp"
#include "../../bench/rag/workload.hpp"

using namespace lazyattn::rag;

namespace {

// Pearson's chi-square of `counts` against n * P(k) for P the Zipf(s) law over counts.size()
// ranks, with ranks whose expected count is below 5 pooled into one bin (the usual validity rule).
struct ChiSquare {
  double statistic = 0;
  int dof = 0;
};

ChiSquare chi_square(const std::vector<std::int64_t>& counts, double s) {
  const int n_ranks = static_cast<int>(counts.size());
  std::int64_t n = 0;
  for (auto c : counts) n += c;
  const double h = harmonic(n_ranks, s);
  ChiSquare x;
  double pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (int k = 0; k < n_ranks; ++k) {
    const double expected = static_cast<double>(n) * std::pow(k + 1.0, -s) / h;
    const auto observed = static_cast<double>(counts[static_cast<std::size_t>(k)]);
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += observed;
      continue;
    }
    x.statistic += (observed - expected) * (observed - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    x.statistic +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  x.dof = bins - 1;
  return x;
}

// The chi-square quantile at upper tail 1e-3, by the Wilson-Hilferty approximation (within 1% of
// the exact value for dof >= 10).
double chi_square_critical(int dof) {
  const double z = 3.0902;  // standard normal upper 1e-3 point
  const double k = dof, a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

std::vector<std::int64_t> draw(int n_ranks, double s, int samples, std::uint64_t seed) {
  const ZipfSampler zipf(n_ranks, s);
  SplitMix64 g(seed);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n_ranks));
  for (int i = 0; i < samples; ++i) ++counts[static_cast<std::size_t>(zipf(g))];
  return counts;
}

// 4000 requests of 5 documents among num_documents, Zipf 2.1, 4 per second.
WorkloadConfig zipf_workload(int num_documents, int doc_length, int question_length) {
  WorkloadConfig c;
  c.num_documents = num_documents;
  c.docs_per_request = 5;
  c.doc_length = doc_length;
  c.question_length = question_length;
  c.rate = 4;
  c.num_requests = 4000;
  c.zipf = 2.1;
  return c;
}

}  // namespace

TEST_CASE("rag: the Zipf sampler draws the Zipf law, and the test rejects a wrong exponent",
          "[rag]") {
  // 100000 draws over 100 ranks: the paper's exponent, a milder one, and uniform (s = 0).
  for (double s : {2.1, 1.0, 0.0}) {
    const std::vector<std::int64_t> counts = draw(100, s, 100000, 42);
    const ChiSquare right = chi_square(counts, s);
    INFO("s " << s << ": chi-square " << right.statistic << " on " << right.dof << " dof, critical "
              << chi_square_critical(right.dof));
    CHECK(right.statistic < chi_square_critical(right.dof));
    // The same draws against the law of a slightly different exponent must fail: the test can
    // tell s from s +- 0.1.
    for (double wrong : {s - 0.1, s + 0.1}) {
      if (wrong < 0) continue;
      const ChiSquare x = chi_square(counts, wrong);
      INFO("against s " << wrong << ": chi-square " << x.statistic << " on " << x.dof << " dof");
      CHECK(x.statistic > chi_square_critical(x.dof));
    }
  }
}

TEST_CASE("rag: the sampler's probabilities are H-normalized", "[rag]") {
  const ZipfSampler z(100, 2.1);
  double sum = 0;
  for (int k = 0; k < 100; ++k) sum += z.probability(k);
  CHECK(sum == Approx(1.0).epsilon(1e-12));
  CHECK(z.probability(0) == Approx(1.0 / harmonic(100, 2.1)).epsilon(1e-12));
  CHECK(analytic_hit_ratio(100, 100, 2.1) == Approx(1.0));
  CHECK(analytic_hit_ratio(10, 100, 0.0) == Approx(0.1));
}

TEST_CASE("rag: workloads: Poisson arrivals, documents per request, determinism", "[rag]") {
  WorkloadConfig c = zipf_workload(10, 7, 3);
  const Workload w = make_workload(c);
  REQUIRE(w.requests.size() == 4000);
  REQUIRE(w.documents.size() == 10);
  for (const auto& d : w.documents) CHECK(d.size() == 7);
  // Mean inter-arrival 1/rate; its standard error is 1/(rate sqrt(n)) = 0.004.
  CHECK(w.requests.back().arrival / 4000.0 == Approx(0.25).margin(0.016));
  for (std::size_t i = 1; i < w.requests.size(); ++i)
    CHECK(w.requests[i].arrival >= w.requests[i - 1].arrival);
  for (const RagRequest& r : w.requests) {
    REQUIRE(r.docs.size() == 5);
    REQUIRE(r.question.size() == 3);
    std::vector<int> d = r.docs;
    std::sort(d.begin(), d.end());
    CHECK(std::adjacent_find(d.begin(), d.end()) == d.end());  // without replacement: distinct
  }
  c.with_replacement = true;
  const Workload wr = make_workload(c);
  int repeats = 0;
  for (const RagRequest& r : wr.requests) {
    std::vector<int> d = r.docs;
    std::sort(d.begin(), d.end());
    repeats += std::adjacent_find(d.begin(), d.end()) != d.end();
  }
  CHECK(repeats > 3000);  // P(document 0) = 0.64 per draw: most requests repeat it
  // The same seed gives the same workload; another seed another one.
  const Workload again = make_workload(c);
  CHECK(again.requests[17].docs == wr.requests[17].docs);
  CHECK(again.requests[17].question == wr.requests[17].question);
  c.seed = 2;
  CHECK(make_workload(c).documents[0] != wr.documents[0]);
}

TEST_CASE("rag: the ideal static cache's hit ratio on a workload's own draws", "[rag]") {
  // By hand: the cache holds documents 0 and 1; request 0 is warm-up; 3 of the other 6 lookups
  // ask for 0 or 1.
  Workload w;
  for (const std::vector<int>& docs : {std::vector<int>{0, 1, 2}, {3, 4, 0}, {5, 0, 1}}) {
    RagRequest q;
    q.id = static_cast<int>(w.requests.size());
    q.docs = docs;
    w.requests.push_back(q);
  }
  CHECK(top_c_hit_ratio(w, 2, 1) == Approx(0.5));
  CHECK(top_c_hit_ratio(w, 2, 0) == Approx(5.0 / 9.0));
  CHECK(top_c_hit_ratio(w, 0, 0) == 0.0);
  CHECK(top_c_hit_ratio(w, 6, 0) == 1.0);
  // Independent draws: the formula H(C, s) / H(N, s) within four binomial standard errors.
  // Without replacement a request asks for each popular document once at most, so the same
  // cache hits far less often than the formula says.
  WorkloadConfig c = zipf_workload(100, 1, 1);
  const std::int64_t C = 10;
  const double formula = analytic_hit_ratio(C, c.num_documents, c.zipf);
  c.with_replacement = true;
  const double independent = top_c_hit_ratio(make_workload(c), C, 100);
  const double sigma = std::sqrt(formula * (1 - formula) / (3900.0 * 5));
  INFO("formula " << formula << ", independent draws " << independent << ", sigma " << sigma);
  CHECK(std::fabs(independent - formula) <= 4 * sigma);
  c.with_replacement = false;
  const double distinct = top_c_hit_ratio(make_workload(c), C, 100);
  INFO("without replacement " << distinct);
  CHECK(distinct < formula - 0.05);
}
