// The RAG engine on the CPU backend: the five modes complete, lazy and block-attention (and
// position-aware) compute the same function, prefix caching reuses exact prefixes only,
// block-attention frees its private pages, and hit ratios match the analytic ones.
#include "support/catch.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../bench/rag/rag.hpp"
#include "rag/small_workload.hpp"
#include "support/random.hpp"

using namespace lazyattn;
using namespace lazyattn::rag;
using lazyattn::rag::test::small_workload;

namespace {

struct Run {
  std::unique_ptr<CpuBackend> backend;
  RunResult result;
};

Run run(const std::string& model_name, const Workload& w, Mode mode, std::int64_t cache_docs,
        EngineConfig ec = {}, int page_size = 16) {
  const ModelConfig model = model_config(model_name);
  REQUIRE(w.config.vocab_size == model.vocab_size);
  Run r;
  r.backend = std::make_unique<CpuBackend>(
      model, kv_pages_for_cache(w.config, page_size, cache_docs), page_size, 7,
      store_policy(ec.eviction));
  ec.mode = mode;
  ec.lfu_capacity = cache_docs;
  Engine engine(*r.backend, w, ec);
  r.result = engine.run();
  return r;
}

// Every request done, in order of time, and nothing left pinned or held by a tail.
void check_complete(const Run& r, const Workload& w) {
  REQUIRE(r.result.requests.size() == w.requests.size());
  for (const RequestRecord& q : r.result.requests) {
    CHECK(q.tokens.size() == static_cast<std::size_t>(w.config.output_tokens));
    CHECK(q.admitted >= q.arrival);
    CHECK(q.first_token > q.admitted);
    CHECK(q.finished >= q.first_token);
  }
  KvStore& store = r.backend->store();
  store.validate();
  const KvStoreStats s = store.stats();
  CHECK(s.tails == 0);
  CHECK(s.pinned_documents == 0);
  CHECK(r.result.peak_pages <= s.pages_total);
}

// Largest |a - b| over two runs' logits, and the smallest gap between the two largest logits of
// any step (how far each argmax is from a tie).
struct LogitsComparison {
  double max_diff = 0;
  double min_margin = 1e30;
};

LogitsComparison compare_logits(const RunResult& a, const RunResult& b, int vocab) {
  LogitsComparison c;
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    const auto& la = a.requests[i].logits;
    const auto& lb = b.requests[i].logits;
    REQUIRE(la.size() == lb.size());
    for (std::size_t j = 0; j < la.size(); ++j)
      c.max_diff = std::max(c.max_diff, static_cast<double>(std::fabs(la[j] - lb[j])));
    for (std::size_t t = 0; t < la.size(); t += static_cast<std::size_t>(vocab)) {
      std::vector<float> row(la.begin() + static_cast<std::ptrdiff_t>(t),
                             la.begin() + static_cast<std::ptrdiff_t>(t) + vocab);
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
      c.min_margin = std::min(c.min_margin, static_cast<double>(row[0] - row[1]));
    }
  }
  return c;
}

}  // namespace

TEST_CASE("rag: the five modes complete on tiny", "[rag]") {
  WorkloadConfig c = small_workload(model_config("tiny").vocab_size);
  c.rate = 50;  // arrivals faster than service: requests batch, queue and share steps
  c.num_requests = 6;
  const Workload w = make_workload(c);
  for (Mode mode : kAllModes) {
    INFO("mode " << to_string(mode));
    EngineConfig ec;
    ec.max_batch = 4;
    ec.max_step_tokens = 100;  // several steps per burst of encodes
    const Run r = run("tiny", w, mode, /*cache_docs=*/3, ec);
    check_complete(r, w);
    const Summary s = summarize(r.result);
    CHECK(s.doc_lookups == 18);
    if (mode == Mode::kFull) CHECK(s.doc_hits == 0);
    if (mode == Mode::kLazy) CHECK(s.doc_hits > 0);
  }
}

TEST_CASE("rag: lazy and block-attention emit identical tokens (and position-aware too)", "[rag]") {
  // Requests far apart (0.05/s against steps of milliseconds): each runs alone, so every mode
  // runs the same GEMM shapes, and logits differ only by attention's rounding.
  const int vocab = model_config("tiny").vocab_size;
  WorkloadConfig c = small_workload(vocab);
  c.rate = 0.05;
  c.num_requests = 6;
  c.output_tokens = 6;
  const Workload w = make_workload(c);
  EngineConfig ec;
  ec.record_logits = true;
  const Run lazy = run("tiny", w, Mode::kLazy, 4, ec);
  const Run block = run("tiny", w, Mode::kBlockAttention, 4, ec);
  const Run aware = run("tiny", w, Mode::kPositionAware, 4, ec);
  const Run full = run("tiny", w, Mode::kFull, 4, ec);
  const Run prefix = run("tiny", w, Mode::kPrefix, 4, ec);
  // Deferred rotation (R(m - s) q against R(i) k) and eager (R(m) q against R(s) R(i) k) agree
  // to float rounding, about 1e-6 here. The tolerance is 1e-4; a token could legitimately flip
  // only where the top two logits are within it, so the test also requires every step's margin
  // to be far above it: with these seeds no step is near a tie, and if a change made one, this
  // says so instead of failing on a token.
  const double tolerance = 1e-4;
  for (const Run* other : {&block, &aware}) {
    const LogitsComparison x = compare_logits(lazy.result, other->result, vocab);
    INFO("max |logit diff| " << x.max_diff << ", smallest top-2 margin " << x.min_margin);
    CHECK(x.max_diff < tolerance);
    CHECK(x.min_margin > 10 * tolerance);
    for (std::size_t i = 0; i < w.requests.size(); ++i)
      CHECK(lazy.result.requests[i].tokens == other->result.requests[i].tokens);
  }
  // Prefix caching reuses full-attention K/V: it computes what full does.
  const LogitsComparison fp = compare_logits(full.result, prefix.result, vocab);
  INFO("full vs prefix: max |logit diff| " << fp.max_diff);
  CHECK(fp.max_diff < tolerance);
  for (std::size_t i = 0; i < w.requests.size(); ++i)
    CHECK(full.result.requests[i].tokens == prefix.result.requests[i].tokens);
  // And the comparison has power: block attention (documents encoded apart) is another function
  // than full attention.
  CHECK(compare_logits(lazy.result, full.result, vocab).max_diff > 1e-2);
}

TEST_CASE("rag: prefix mode reuses exact block prefixes only", "[rag]") {
  const int vocab = model_config("micro").vocab_size;
  WorkloadConfig c;
  c.num_documents = 5;
  c.docs_per_request = 3;
  c.doc_length = 20;  // 16-token blocks straddle documents
  c.question_length = 6;
  c.output_tokens = 2;
  c.rate = 0.01;
  c.num_requests = 5;
  c.vocab_size = vocab;
  Workload w = make_workload(c);
  const std::vector<std::vector<int>> docs{{0, 1, 2}, {0, 1, 3}, {1, 0, 2}, {0, 1, 2}, {0, 1, 2}};
  for (std::size_t i = 0; i < docs.size(); ++i) w.requests[i].docs = docs[i];
  w.requests[4].question = w.requests[0].question;  // request 4 repeats request 0 exactly
  const Run r = run("micro", w, Mode::kPrefix, 20);
  check_complete(r, w);
  const auto reused = [&](int i) {
    return r.result.requests[static_cast<std::size_t>(i)].reused_tokens;
  };
  CHECK(reused(0) == 0);
  CHECK(reused(1) == 32);  // shares 40 tokens (documents 0, 1): two whole blocks
  CHECK(reused(2) == 0);   // same documents, another order: nothing
  CHECK(reused(3) == 48);  // shares 60 tokens (documents 0, 1, 2): three blocks
  CHECK(reused(4) == 64);  // 66 equal tokens, but the last prompt token is always computed
  CHECK(r.result.requests[1].doc_hits == 1);  // document 0 ends at 20, document 1 at 40 > 32
  CHECK(r.result.requests[3].doc_hits == 2);
}

TEST_CASE("rag: prefix reuse equals the longest block-aligned common prefix", "[rag]") {
  const int vocab = model_config("micro").vocab_size;
  WorkloadConfig c;
  c.num_documents = 4;
  c.docs_per_request = 3;
  c.doc_length = 24;
  c.question_length = 4;
  c.output_tokens = 1;
  c.zipf = 1.0;
  c.rate = 0.01;  // one request at a time: every earlier prompt is cached when the next arrives
  c.num_requests = 40;
  c.vocab_size = vocab;
  const Workload w = make_workload(c);
  const Run r = run("micro", w, Mode::kPrefix, 100);  // large: nothing evicted
  check_complete(r, w);
  auto prompt = [&](const RagRequest& q) {
    std::vector<std::int32_t> p;
    for (int d : q.docs) p.insert(p.end(), w.documents[d].begin(), w.documents[d].end());
    p.insert(p.end(), q.question.begin(), q.question.end());
    return p;
  };
  for (std::size_t i = 0; i < w.requests.size(); ++i) {
    const std::vector<std::int32_t> p = prompt(w.requests[i]);
    std::int64_t longest = 0;
    for (std::size_t j = 0; j < i; ++j) {
      const std::vector<std::int32_t> q = prompt(w.requests[j]);
      const auto common = std::mismatch(p.begin(), p.end(), q.begin(), q.end()).first - p.begin();
      longest = std::max<std::int64_t>(longest, common);
    }
    const std::int64_t cap = static_cast<std::int64_t>(p.size()) - 1;
    const std::int64_t expected = std::min(longest, cap) / 16 * 16;
    INFO("request " << i);
    CHECK(r.result.requests[i].reused_tokens == expected);
  }
}

TEST_CASE("rag: block-attention frees its private pages", "[rag]") {
  WorkloadConfig c = small_workload(model_config("micro").vocab_size);
  c.rate = 20;
  c.num_requests = 12;
  const Workload w = make_workload(c);
  EngineConfig ec;
  ec.max_batch = 3;
  const Run r = run("micro", w, Mode::kBlockAttention, 4, ec);
  check_complete(r, w);
  const KvStoreStats s = r.backend->store().stats();
  // Every request copied its 3 documents; afterwards only cached documents hold pages, each at
  // most once per document id: no private copy is left.
  CHECK(r.result.tokens_copied == std::int64_t{12} * 3 * 40);
  CHECK(s.documents <= c.num_documents);
  CHECK(s.pages_in_use == s.documents * r.backend->store().pages_for(40));
  // While running, the copies came out of the same budget.
  CHECK(r.result.peak_pages > s.pages_in_use);
}

namespace {

// The hit-ratio workloads: independent draws (with replacement) from num_documents documents, 5
// per request, one request at a time, 600 requests of tiny documents.
WorkloadConfig hit_workload(int num_documents) {
  WorkloadConfig c;
  c.num_documents = num_documents;
  c.docs_per_request = 5;
  c.with_replacement = true;
  c.doc_length = 16;
  c.question_length = 4;
  c.output_tokens = 1;
  c.rate = 0.01;
  c.num_requests = 600;
  c.vocab_size = model_config("micro").vocab_size;
  return c;
}

}  // namespace

TEST_CASE("rag: hit ratios match the analytic ones within sampling error", "[rag]") {
  // Independent draws (with replacement) from N = 100 documents, D = 5 per request, one request at
  // a time, the first 100 left out as warm-up. LFU keeping C entries holds the C most requested
  // documents: H(C,s)/H(N,s), or H(floor(C/D),s)/H(N,s) for (document, position) entries. LRU
  // over its C + D slots follows Che's approximation (accurate to about 0.01).
  WorkloadConfig c = hit_workload(100);
  const int warmup = 100;
  const std::int64_t C = 10;
  for (double s : {1.0, 2.1}) {
    c.zipf = s;
    c.seed = static_cast<std::uint64_t>(s * 10);
    const Workload w = make_workload(c);
    const Analytic a = analytic(c, C);
    struct Case {
      Mode mode;
      Eviction eviction;
      double expected;
      double model_error;  // of the analytic value itself
    };
    const Case cases[] = {
        {Mode::kLazy, Eviction::kLfu, a.position_free, 0.0},
        {Mode::kPositionAware, Eviction::kLfu, a.position_aware, 0.0},
        {Mode::kLazy, Eviction::kLru, a.lru_position_free, 0.01},
        {Mode::kPositionAware, Eviction::kLru, a.lru_position_aware, 0.01},
    };
    for (const Case& k : cases) {
      EngineConfig ec;
      ec.eviction = k.eviction;
      const Run r = run("micro", w, k.mode, C, ec);
      const Summary sum = summarize(r.result, warmup);
      // Four binomial standard errors of the measured ratio.
      const double sigma =
          std::sqrt(k.expected * (1 - k.expected) / static_cast<double>(sum.doc_lookups));
      INFO("s " << s << ", " << to_string(k.mode) << ", " << to_string(k.eviction) << ": measured "
                << sum.hit_ratio << " over " << sum.doc_lookups << " lookups, analytic "
                << k.expected << ", sigma " << sigma);
      CHECK(std::fabs(sum.hit_ratio - k.expected) <= 4 * sigma + k.model_error);
    }
  }
}

TEST_CASE("rag: the store's segmented LRU hits more often than its LRU", "[rag]") {
  // The hit-ratio workload above at s = 2.1 over 5000 documents instead of 100: most of the long
  // tail is asked for once, and under LRU those documents push out popular ones.
  WorkloadConfig c = hit_workload(5000);
  c.zipf = 2.1;
  c.seed = 21;
  const Workload w = make_workload(c);
  double hit[2] = {};
  for (int p = 0; p < 2; ++p) {
    EngineConfig ec;
    ec.eviction = p ? Eviction::kSegmentedLru : Eviction::kLru;
    const Run r = run("micro", w, Mode::kLazy, 10, ec);
    check_complete(r, w);
    r.backend->store().validate();
    hit[p] = summarize(r.result, 100).hit_ratio;
  }
  INFO("LRU " << hit[0] << ", segmented LRU " << hit[1]);
  CHECK(hit[1] > hit[0]);
}

TEST_CASE("rag: the steady throughput counts the completions after the warm-up", "[rag]") {
  // Five requests finishing at 1, 2, 2.5, 4 and 6 s, listed out of finish order (by id):
  // without a warm-up both throughputs are 5 / duration; after a warm-up of 2 the last three
  // completions span 6 - 2 = 4 s.
  RunResult r;
  const double finish[] = {2.0, 1.0, 4.0, 2.5, 6.0};
  for (int i = 0; i < 5; ++i) {
    RequestRecord q;
    q.id = i;
    q.arrival = 0.1 * i;
    q.admitted = q.first_token = q.arrival;
    q.finished = finish[i];
    r.requests.push_back(q);
  }
  r.duration = 6.0;
  const Summary all = summarize(r);
  CHECK(all.throughput_rps == Approx(5.0 / 6.0));
  CHECK(all.throughput_steady_rps == all.throughput_rps);
  const Summary warm = summarize(r, 2);
  CHECK(warm.requests == 3);
  CHECK(warm.throughput_rps == Approx(5.0 / 6.0));
  CHECK(warm.throughput_steady_rps == Approx(3.0 / 4.0));
  // A warm-up of every request leaves nothing to count: the whole run's figure stays.
  CHECK(summarize(r, 5).throughput_steady_rps == all.throughput_rps);
}

TEST_CASE("rag: coalescing same-start local document segments keeps attention", "[rag]") {
  // Four documents of 32, 32, 20 and 32 tokens (page size 16) and a tail: segments 0 and 1 share
  // start 0 (keys at their own positions, as block-attention's copies), segment 2 too but follows
  // a full document, segment 3 has its own start (a lazy document), segment 4 is raw-form.
  constexpr int P = 16, D = 32, H = 2, G = 2;
  KvStore store(KvStoreConfig{.num_layers = 1, .num_kv_heads = H, .head_dim = D, .page_size = P,
                              .dtype = DType::kFloat32, .num_pages = 64});
  lazyattn::test::Rng rng(11);
  auto doc = [&](std::uint64_t id, std::int64_t len, StorageForm form) {
    const auto n = static_cast<std::size_t>(len * H * D);
    return store.insert(DocKey{id, id}, form, len, lazyattn::test::random_normal(n, rng),
                        lazyattn::test::random_normal(n, rng)).handle;
  };
  const DocHandle a = doc(1, 32, StorageForm::kLocal), b = doc(2, 32, StorageForm::kLocal),
                  c = doc(3, 20, StorageForm::kLocal), d = doc(4, 32, StorageForm::kLocal),
                  e = doc(5, 32, StorageForm::kRaw);
  const TailHandle t = store.create_tail(StorageForm::kLocal);
  const std::int64_t tail_len = 5;
  store.append(t, tail_len, lazyattn::test::random_normal(tail_len * H * D, rng),
               lazyattn::test::random_normal(tail_len * H * D, rng));
  RequestLayout r;
  r.segments = {Segment::document(a, 32, 0),   Segment::document(b, 32, 0),
                Segment::document(c, 20, 0),   Segment::document(d, 32, 0),
                Segment::document(e, 32, 300), Segment::of_tail(t, tail_len, 400)};
  r.num_queries = 3;
  RequestLayout lazy = r;  // every start its own: nothing merges
  for (std::size_t j = 0; j + 1 < lazy.segments.size(); ++j)
    lazy.segments[j].start = 100 * static_cast<std::int64_t>(j);
  lazy.segments.back().start = 1000;
  const std::vector<RequestLayout> layouts{lazy, r};
  const Plan plan = make_plan(store, layouts);
  Plan merged = plan;
  coalesce_document_segments(merged);

  // Request 0 untouched; request 1: {a, b, c} merged (a and b fill their pages; c follows at
  // the same start), then d apart although its start is 0 too (c's 20 tokens end mid-page), e
  // apart (raw form), the tail.
  REQUIRE(merged.num_requests() == 2);
  CHECK(merged.request_segment_indptr == std::vector<std::int32_t>{0, 6, 10});
  CHECK(merged.request_tail_segment == std::vector<std::int32_t>{5, 9});
  CHECK(std::vector<std::int32_t>(merged.segment_length.begin() + 6, merged.segment_length.end()) ==
        std::vector<std::int32_t>{84, 32, 32, 5});
  CHECK(merged.page_ids == plan.page_ids);
  CHECK(merged.segment_page_indptr.back() == plan.segment_page_indptr.back());
  CHECK(merged.segment_page_indptr[7] - merged.segment_page_indptr[6] == 2 + 2 + 2);
  CHECK(merged.request_kv_length == plan.request_kv_length);

  // The attention is the same, to float rounding (the softmax blocks differ).
  RopeConfig rope_config;
  rope_config.head_dim = D;
  const RopePolicy rope(rope_config);
  const AttentionParams params{.num_qo_heads = H * G, .num_kv_heads = H, .head_dim = D};
  const std::vector<float> q = lazyattn::test::random_normal(static_cast<std::size_t>(6 * H * G * D), rng);
  std::vector<float> o1(q.size()), o2(q.size()), l1(6 * H * G), l2(6 * H * G);
  ref::eigen::prefill(store, plan, 0, rope, params, q, o1, l1);
  ref::eigen::prefill(store, merged, 0, rope, params, q, o2, l2);
  double diff = 0;
  for (std::size_t i = 0; i < o1.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(o1[i] - o2[i])));
  CHECK(diff < 1e-5);
  for (std::size_t i = 0; i < l1.size(); ++i) CHECK(l1[i] == Approx(l2[i]).epsilon(1e-5));
}
