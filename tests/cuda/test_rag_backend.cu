// [cuda][rag] tests of the RAG harness's CUDA backend (bench/rag/cuda_backend.cuh): its logits
// against the CPU backend's with the same weights (and decode steps through cuda::decode against
// cuda::prefill), the serving modes on the GPU (lazy computes block-attention's tokens), and the
// configurations the kernels cannot run. The backends come
// compiled from lazyattn_rag_backends (bench/rag/backends.cmake), so this translation unit holds
// neither the kernels nor Eigen; where that library is not built, it compiles to nothing.
#include "support/catch.hpp"

#if __has_include("backends.hpp")

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backends.hpp"
#include "budget.hpp"
#include "engine.hpp"
#include "lazyattn/kv/plan.hpp"
#include "random.hpp"
#include "rag/small_workload.hpp"
#include "workload.hpp"

using namespace lazyattn;
using namespace lazyattn::rag;

namespace {

// The CPU and GPU backends compute the same model, in float32 and in bf16. The tolerance comes
// from bf16's unit roundoff u = 2^-8 and the number of roundings a logit goes through. Every
// GEMM rounds its weights and its input to bf16 (relative rms error about u / 3 each: rounding
// to nearest is uniform within half a spacing), so one dot product of n random-signed terms
// carries a relative rms error of about sqrt(2) u / 3, plus one more rounding where its output is
// stored in bf16 (q, k, v, gate/up, the activation); attention adds the bf16 K/V, the rotated
// query and P. Per layer that is about 8 such roundings, on a residual stream whose scale the
// norms keep at 1; over tiny-d64's 2 layers, the embedding and the LM head about 20, adding in
// quadrature: sqrt(20) u / 3 = 1.5 u = 0.006 rms relative to the logits' rms. The largest of
// the ~7000 logits compared sits near 4 sigma: 6 u. The bound is 16 u x rms(row), 2.7x that.
// A greedy token can only flip where the CPU's top two logits are within 2 x the bound; where
// they are farther apart the tokens must agree.
constexpr double kUnit = 0x1p-8;
constexpr double kCpuGpuBound = 16 * kUnit;
// Two modes on the GPU differ only in attention's roundings (deferred: R(m - s) q rounded once
// against bf16 R(i) k; eager: R(m) q against a bf16 copy of R(s) applied to the bf16 R(i) k);
// their GEMMs see the same inputs. That is about 3 roundings per layer, 6 in all: sqrt(6) u / 3
// = 0.8 u rms at most (attention's share of the residual stream dilutes it further), 3.5 u at
// 4 sigma over ~15000 logits. Half the bound above, 8 u, leaves more than 2x.
constexpr double kModeBound = 8 * kUnit;

double rms(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(std::max<std::size_t>(x.size(), 1)));
}

struct Top2 {
  int best = 0;
  double gap = 0;  // largest minus second largest
};

Top2 top2(std::span<const float> row) {
  Top2 t;
  double first = -1e300, second = -1e300;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const double v = row[i];
    if (v > first) {
      second = first;
      first = v;
      t.best = static_cast<int>(i);
    } else if (v > second) {
      second = v;
    }
  }
  t.gap = first - second;
  return t;
}

// Every |got - ref| <= bound x rms(ref row); "" or the first mismatches as (row, index, ref, got).
std::string compare_rows(std::span<const float> ref, std::span<const float> got, int vocab,
                         double bound, double& worst_ratio) {
  std::ostringstream os;
  int shown = 0;
  if (ref.size() != got.size()) return "sizes differ";
  for (std::size_t r = 0; r * static_cast<std::size_t>(vocab) < ref.size(); ++r) {
    const auto row =
        ref.subspan(r * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
    const double tol = bound * rms(row);
    for (int i = 0; i < vocab; ++i) {
      const std::size_t k = r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(i);
      const double err = std::fabs(static_cast<double>(got[k]) - ref[k]);
      worst_ratio = std::max(worst_ratio, err / tol);
      if (!(err <= tol) && shown++ < 8)
        os << "(row " << r << ", " << i << ", ref " << ref[k] << ", got " << got[k] << ", tol "
           << tol << ") ";
    }
  }
  return os.str();
}

std::vector<std::int32_t> random_tokens(SplitMix64& g, int n, int vocab) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<std::int32_t>(g.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// One backend and its handles; both sides get the same store operations in the same order.
struct Side {
  Backend* backend = nullptr;
  std::vector<DocHandle> docs;
  std::vector<TailHandle> tails;
  std::vector<std::int64_t> tail_start;
};

// A request of the comparison: documents (index, start) and the tokens it feeds next.
struct Request {
  std::vector<std::pair<int, std::int64_t>> docs;
  std::int64_t tail_start = 0;
  std::vector<std::int32_t> next_input;
};

}  // namespace

TEST_CASE("rag cuda backend: logits match the CPU backend's with the same weights", "[cuda][rag]") {
  const ModelConfig model = model_config("tiny-d64");
  const int vocab = model.vocab_size;
  const std::uint64_t seed = 7;
  const int page = 16;
  const std::int64_t pages = 96;
  const HostWeights weights = cpu_backend_weights(model, seed);
  std::unique_ptr<Backend> cpu = make_cpu_backend(model, pages, page, seed);
  CudaBackendOptions co;
  co.page_size = page;
  co.host_weights = &weights;
  co.max_pages = pages;
  co.max_step_tokens = 256;
  co.max_batch = 4;
  std::unique_ptr<DeviceBackend> gpu = make_cuda_backend(model, co);
  co.decode_kernel = false;  // decode steps through cuda::prefill too (--decode-attention prefill)
  std::unique_ptr<DeviceBackend> gpu_prefill = make_cuda_backend(model, co);
  Side sides[3];
  sides[0].backend = cpu.get();
  sides[1].backend = gpu.get();
  sides[2].backend = gpu_prefill.get();

  // Documents of awkward lengths; the third stored as position-aware caching does (K rotated at
  // absolute positions 101..200), which the GPU writes after the encoding's attention.
  SplitMix64 g(11);
  const std::vector<int> lengths{37, 64, 100};
  const std::vector<std::int64_t> rotate_by{0, 0, 101};
  std::vector<std::vector<std::int32_t>> doc_tokens;
  for (int n : lengths) doc_tokens.push_back(random_tokens(g, n, vocab));
  for (Side& s : sides) {
    StepBatch batch;
    KvStore& store = s.backend->store();
    for (std::size_t j = 0; j < lengths.size(); ++j) {
      s.docs.push_back(store.allocate(DocKey{1, j}, StorageForm::kLocal, lengths[j]).handle);
      batch.encodes.push_back(EncodeItem{s.docs.back(), doc_tokens[j], rotate_by[j]});
    }
    StepOutput out;
    s.backend->forward(batch, out, true);
    CHECK(out.next_tokens.empty());
    for (DocHandle h : s.docs) store.commit(h);
  }

  // r0: lazy layout of docs 0 and 1, then doc 2 at its stored positions (start 0, eager);
  // r1: docs 1 and 0 swapped; r2 joins later with doc 0 only.
  std::vector<Request> requests(3);
  requests[0].docs = {{0, 0}, {1, 37}, {2, 0}};
  requests[0].tail_start = 201;
  requests[0].next_input = random_tokens(g, 20, vocab);
  requests[1].docs = {{1, 0}, {0, 64}};
  requests[1].tail_start = 101;
  requests[1].next_input = random_tokens(g, 9, vocab);
  requests[2].docs = {{0, 0}};
  requests[2].tail_start = 37;
  requests[2].next_input = random_tokens(g, 5, vocab);
  for (Side& s : sides) {
    for (std::size_t i = 0; i < requests.size(); ++i)
      s.tails.push_back(s.backend->store().create_tail(StorageForm::kLocal));
  }

  // Steps: both prefill (prefill kernel), three decode steps (decode kernel), r2's prefill beside
  // two decodes (prefill kernel, one-token queries), and a decode of all three. Each step feeds
  // both sides the CPU's argmax (teacher forcing), so the sequences never part.
  const std::vector<std::vector<int>> steps{{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1, 2}, {0, 1, 2}};
  double worst = 0, worst_kernels = 0;
  int rows = 0, tokens_checked = 0;
  for (std::size_t st = 0; st < steps.size(); ++st) {
    StepOutput outs[3];
    for (int side = 0; side < 3; ++side) {
      Side& s = sides[side];
      KvStore& store = s.backend->store();
      StepBatch batch;
      std::vector<RequestLayout> layouts;
      for (int r : steps[st]) {
        const Request& q = requests[static_cast<std::size_t>(r)];
        const TailHandle tail = s.tails[static_cast<std::size_t>(r)];
        const auto n = static_cast<std::int64_t>(q.next_input.size());
        const std::int64_t first = store.reserve(tail, n);
        RequestLayout layout;
        for (auto [d, start] : q.docs) {
          layout.segments.push_back(Segment::document(s.docs[static_cast<std::size_t>(d)],
                                                      lengths[static_cast<std::size_t>(d)], start));
        }
        layout.segments.push_back(Segment::of_tail(tail, first + n, q.tail_start));
        layout.num_queries = n;
        layouts.push_back(layout);
        batch.extends.push_back(ExtendItem{tail, first, q.next_input});
      }
      const Plan plan = make_plan(store, layouts);
      batch.plan = &plan;
      s.backend->forward(batch, outs[side], true);
    }
    const StepOutput& ref = outs[0];
    const StepOutput& got = outs[1];
    REQUIRE(ref.next_tokens.size() == steps[st].size());
    REQUIRE(got.next_tokens.size() == steps[st].size());
    const std::string mismatches = compare_rows(ref.logits, got.logits, vocab, kCpuGpuBound, worst);
    INFO("step " << st << ": " << mismatches);
    CHECK(mismatches.empty());
    // The decode kernel and the prefill kernel on one-token steps: attention's roundings only.
    const std::string kernels =
        compare_rows(got.logits, outs[2].logits, vocab, kModeBound, worst_kernels);
    INFO("step " << st << ", decode against prefill kernel: " << kernels);
    CHECK(kernels.empty());
    for (std::size_t b = 0; b < steps[st].size(); ++b) {
      const auto row =
          std::span<const float>(ref.logits)
              .subspan(b * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      const Top2 t = top2(row);
      CHECK(t.best == ref.next_tokens[b]);
      ++rows;
      if (t.gap > 2 * kCpuGpuBound * rms(row)) {
        INFO("step " << st << " request " << steps[st][b] << ": top-2 gap " << t.gap);
        CHECK(got.next_tokens[b] == ref.next_tokens[b]);
        ++tokens_checked;
      }
      requests[static_cast<std::size_t>(steps[st][b])].next_input = {ref.next_tokens[b]};
    }
  }
  // The logits' largest error as a fraction of the bound: the figure to watch when tuning it.
  WARN("CPU vs GPU logits: largest error "
       << worst << " of the bound (" << kCpuGpuBound << " x row rms); greedy tokens compared on "
       << tokens_checked << " of " << rows << " rows; decode vs prefill kernel: " << worst_kernels
       << " of " << kModeBound << " x row rms");
  CHECK(tokens_checked * 3 >= rows);  // not vacuous: most rows are far from a tie
}

namespace {

RunResult run_mode(DeviceBackend& gpu, const Workload& w, Mode mode, std::int64_t cache_docs,
                   EngineConfig ec) {
  gpu.reset_store(kv_pages_for_cache(w.config, 16, cache_docs));
  ec.mode = mode;
  ec.lfu_capacity = cache_docs;
  Engine engine(gpu, w, ec);
  RunResult r = engine.run();
  KvStore& store = gpu.store();
  store.validate();
  CHECK(store.stats().tails == 0);
  CHECK(store.stats().pinned_documents == 0);
  for (const RequestRecord& q : r.requests)
    CHECK(q.tokens.size() == static_cast<std::size_t>(w.config.output_tokens));
  return r;
}

// Two runs' tokens per request: equal up to the first difference, which may only come where the
// first run's top two logits are within 2 x bound (a near tie either side may take); the logits
// agree within the bound up to and including it. Returns the requests that agree throughout.
int compare_runs(const RunResult& a, const RunResult& b, int vocab, double bound) {
  int identical = 0;
  REQUIRE(a.requests.size() == b.requests.size());
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    const RequestRecord& x = a.requests[i];
    const RequestRecord& y = b.requests[i];
    std::size_t k = 0;
    while (k < x.tokens.size() && x.tokens[k] == y.tokens[k]) ++k;
    const std::size_t compared = std::min(k + 1, x.tokens.size()) * static_cast<std::size_t>(vocab);
    double worst = 0;
    const std::string mismatches =
        compare_rows(std::span<const float>(x.logits).first(compared),
                     std::span<const float>(y.logits).first(compared), vocab, bound, worst);
    INFO("request " << i << " first differing token " << k << ": " << mismatches);
    CHECK(mismatches.empty());
    if (k == x.tokens.size()) {
      ++identical;
      continue;
    }
    const auto row = std::span<const float>(x.logits).subspan(k * static_cast<std::size_t>(vocab),
                                                              static_cast<std::size_t>(vocab));
    const Top2 t = top2(row);
    INFO("request " << i << " token " << k << ": " << x.tokens[k] << " against " << y.tokens[k]
                    << ", top-2 gap " << t.gap);
    CHECK(t.gap <= 2 * bound * rms(row));
  }
  return identical;
}

}  // namespace

TEST_CASE("rag cuda backend: the modes complete, lazy computes block-attention's tokens",
          "[cuda][rag]") {
  const ModelConfig model = model_config("tiny-d64");
  const int vocab = model.vocab_size;
  CudaBackendOptions co;
  co.max_pages = 64;
  co.max_step_tokens = 256;
  co.max_batch = 4;
  std::unique_ptr<DeviceBackend> gpu = make_cuda_backend(model, co);  // device-drawn weights

  SECTION("every mode completes with requests batched and queued") {
    WorkloadConfig c =
        lazyattn::rag::test::small_workload(vocab, /*num_requests=*/6, /*output_tokens=*/5);
    c.rate = 1000;  // arrivals faster than service: requests batch, queue and share steps
    const Workload w = make_workload(c);
    for (Mode mode : kAllModes) {
      INFO("mode " << to_string(mode));
      EngineConfig ec;
      ec.max_batch = 4;
      ec.max_step_tokens = 100;  // several steps per burst of encodes
      const RunResult r = run_mode(*gpu, w, mode, 3, ec);
      CHECK((r.tokens_copied > 0) == (mode == Mode::kBlockAttention || mode == Mode::kPrefix));
    }
  }

  SECTION("lazy, block-attention and position-aware emit the same tokens; prefix as full") {
    // Requests far apart: each runs alone, so every mode runs the same GEMM shapes.
    WorkloadConfig c =
        lazyattn::rag::test::small_workload(vocab, /*num_requests=*/6, /*output_tokens=*/5);
    c.rate = 0.05;
    const Workload w = make_workload(c);
    EngineConfig ec;
    ec.record_logits = true;
    const RunResult lazy = run_mode(*gpu, w, Mode::kLazy, 4, ec);
    const RunResult block = run_mode(*gpu, w, Mode::kBlockAttention, 4, ec);
    const RunResult aware = run_mode(*gpu, w, Mode::kPositionAware, 4, ec);
    const RunResult full = run_mode(*gpu, w, Mode::kFull, 4, ec);
    const RunResult prefix = run_mode(*gpu, w, Mode::kPrefix, 4, ec);
    CHECK(block.tokens_copied > 0);
    const int same_block = compare_runs(lazy, block, vocab, kModeBound);
    const int same_aware = compare_runs(lazy, aware, vocab, kModeBound);
    // Prefix reuses blocks copied out of earlier tails (K re-rotated by a negative delta) and its
    // prefills have other GEMM shapes than full's: the CPU/GPU bound, not the modes' one.
    const int same_prefix = compare_runs(full, prefix, vocab, kCpuGpuBound);
    WARN("requests with identical tokens (of " << w.requests.size() << "): block-attention "
                                               << same_block << ", position-aware " << same_aware
                                               << ", prefix vs full " << same_prefix);
  }

  SECTION("the store's segmented LRU: evictions change which documents stay, not the tokens") {
    CudaBackendOptions so = co;
    so.eviction = EvictionPolicy::kSegmentedLru;
    std::unique_ptr<DeviceBackend> slru_gpu = make_cuda_backend(model, so);
    WorkloadConfig c =
        lazyattn::rag::test::small_workload(vocab, /*num_requests=*/6, /*output_tokens=*/5);
    c.rate = 0.05;  // one request at a time, as above: the same GEMM shapes in both runs
    const Workload w = make_workload(c);
    EngineConfig ec;
    ec.record_logits = true;
    const RunResult lru = run_mode(*gpu, w, Mode::kLazy, 1, ec);
    ec.eviction = Eviction::kSegmentedLru;
    const RunResult slru = run_mode(*slru_gpu, w, Mode::kLazy, 1, ec);
    CHECK(slru_gpu->store().config().eviction == EvictionPolicy::kSegmentedLru);  // reset kept it
    CHECK(gpu->store().config().eviction == EvictionPolicy::kLru);
    CHECK(lru.store.evictions > 0);  // one cached document: the budget is tight
    CHECK(slru.store.evictions > 0);
    compare_runs(lru, slru, vocab, kModeBound);
  }
}

TEST_CASE("rag cuda backend over an fp8 pool: calibrated as the CPU's, logits moved as little",
          "[cuda][rag][fp8]") {
  const ModelConfig model = model_config("tiny-d64");
  const int vocab = model.vocab_size;
  const std::uint64_t seed = 7;
  const HostWeights weights = cpu_backend_weights(model, seed);
  CudaBackendOptions co;
  co.host_weights = &weights;
  co.max_pages = 64;
  co.max_step_tokens = 256;
  co.max_batch = 4;
  std::unique_ptr<DeviceBackend> gpu16 = make_cuda_backend(model, co);
  co.kv_dtype = DType::kFloat8E4M3;
  std::unique_ptr<DeviceBackend> gpu8 = make_cuda_backend(model, co);
  CHECK(gpu8->kv_dtype() == DType::kFloat8E4M3);
  CHECK(gpu8->page_bytes() * 2 == gpu16->page_bytes());
  CHECK(gpu16->fp8_scales(true).empty());

  WorkloadConfig c =
      lazyattn::rag::test::small_workload(vocab, /*num_requests=*/6, /*output_tokens=*/3);
  c.rate = 0.05;  // one request at a time: every run makes the same store calls
  const Workload w = make_workload(c);
  const std::int64_t cache_docs = 4;
  const std::int64_t pages = kv_pages_for_cache(c, 16, cache_docs);
  std::unique_ptr<Backend> cpu32 = make_cpu_backend(model, pages, 16, seed);
  std::unique_ptr<Backend> cpu8 = make_cpu_backend(model, pages, 16, seed, DType::kFloat8E4M3);

  // The scales: the same calibration over the same weights, the GPU's in bf16 (weights,
  // activations, the bf16 pool it measures): each within 5% of the CPU's float32 one, where a
  // calibrated maximum's bf16 error is about 1%.
  const KvStore& s8 = cpu8->store();
  for (bool k : {true, false}) {
    const std::vector<float> g = gpu8->fp8_scales(k);
    REQUIRE(g.size() == static_cast<std::size_t>(model.num_layers * model.num_kv_heads));
    for (int l = 0; l < model.num_layers; ++l) {
      for (int h = 0; h < model.num_kv_heads; ++h) {
        const float want = k ? s8.k_scale(l, h) : s8.v_scale(l, h);
        const float got = g[static_cast<std::size_t>(l * model.num_kv_heads + h)];
        INFO((k ? "K" : "V") << " scale of layer " << l << " head " << h << ": GPU " << got
                             << ", CPU " << want);
        CHECK(std::fabs(got / want - 1.0f) < 0.05f);
      }
    }
  }

  EngineConfig ec;
  ec.record_logits = true;
  ec.mode = Mode::kLazy;
  ec.lfu_capacity = cache_docs;
  auto cpu_run = [&](Backend& b) { return Engine(b, w, ec).run(); };
  const RunResult r32 = cpu_run(*cpu32), r8c = cpu_run(*cpu8);
  const RunResult r16 = run_mode(*gpu16, w, Mode::kLazy, cache_docs, ec);
  const RunResult r8 = run_mode(*gpu8, w, Mode::kLazy, cache_docs, ec);
  const RunResult b8 = run_mode(*gpu8, w, Mode::kBlockAttention, cache_docs, ec);
  CHECK(b8.tokens_copied > 0);
  CHECK(gpu8->fp8_saturated() == 0);

  // First tokens' logits (every run feeds the same inputs up to there): the fp8 pool moves the
  // GPU's by at most twice what it moves the CPU's (float32 against fp8 of the same model),
  // plus the bf16 noise of two GPU runs (kModeBound); and it moves them at all.
  auto first_diff = [&](const RunResult& a, const RunResult& b, double& sum2) {
    double d = 0;
    for (std::size_t i = 0; i < w.requests.size(); ++i) {
      const std::vector<float>& x = a.requests[i].logits;
      const std::vector<float>& y = b.requests[i].logits;
      REQUIRE(x.size() >= static_cast<std::size_t>(vocab));
      REQUIRE(y.size() >= static_cast<std::size_t>(vocab));
      for (std::size_t j = 0; j < static_cast<std::size_t>(vocab); ++j) {
        d = std::max(d, static_cast<double>(std::fabs(x[j] - y[j])));
        sum2 += static_cast<double>(x[j]) * x[j];
      }
    }
    return d;
  };
  double sum_cpu = 0, sum_gpu = 0, unused = 0;
  const double d_cpu = first_diff(r32, r8c, sum_cpu);
  const double d_gpu = first_diff(r16, r8, sum_gpu);
  const double d_block = first_diff(r8, b8, unused);
  const auto n = static_cast<double>(w.requests.size()) * vocab;
  const double rms_cpu = std::sqrt(sum_cpu / n), rms_gpu = std::sqrt(sum_gpu / n);
  INFO("max |first-token logit diff|: CPU float32 vs fp8 " << d_cpu << " (rms " << rms_cpu
       << "), GPU bf16 vs fp8 " << d_gpu << " (rms " << rms_gpu << "), GPU fp8 lazy vs "
       << "block-attention " << d_block);
  CHECK(d_cpu > 0);
  CHECK(d_gpu > 0);
  CHECK(d_gpu <= 2 * d_cpu * rms_gpu / rms_cpu + kModeBound * rms_gpu);
  // Block-attention's copies quantize K once more after rotating it: about one more fp8 rounding.
  CHECK(d_block <= 2 * d_cpu * rms_gpu / rms_cpu + kModeBound * rms_gpu);
  WARN("fp8 pools, first-token logits: CPU float32 vs fp8 " << d_cpu / rms_cpu
       << " x rms, GPU bf16 vs fp8 " << d_gpu / rms_gpu << " x rms, GPU fp8 lazy vs block "
       << d_block / rms_gpu << " x rms");
}

TEST_CASE("rag cuda backend: configurations the kernels cannot run throw, naming the value",
          "[cuda][rag]") {
  auto message = [](const ModelConfig& c, const CudaBackendOptions& o = {}) -> std::string {
    try {
      make_cuda_backend(c, o);
    } catch (const lazyattn::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  ModelConfig c = model_config("tiny-d64");
  c.head_dim = 96;
  c.rope.head_dim = 96;
  std::string m = message(c);
  INFO(m);
  CHECK(m.find("head_dim 96") != std::string::npos);
  CHECK(m.find("64, 128, 256") != std::string::npos);

  m = message(model_config("tiny"));  // head dim 32: the CPU's tiny does not run on the GPU
  INFO(m);
  CHECK(m.find("head_dim 32") != std::string::npos);

  c = model_config("tiny-d64");
  c.num_qo_heads = 64;  // group of 32 query heads per KV head
  m = message(c);
  INFO(m);
  CHECK(m.find("GQA group size 32") != std::string::npos);

  c = model_config("tiny-d64");
  c.rope.rope_scaling.rope_type = RopeType::kDynamic;
  m = message(c);
  INFO(m);
  CHECK(m.find("dynamic") != std::string::npos);

  CudaBackendOptions o;
  o.gpu_memory_utilization = 1.5;
  m = message(model_config("tiny-d64"), o);
  INFO(m);
  CHECK(m.find("gpu_memory_utilization 1.5") != std::string::npos);

  o = CudaBackendOptions{};
  o.kv_dtype = DType::kFloat16;
  m = message(model_config("tiny-d64"), o);
  INFO(m);
  CHECK(m.find("kv_dtype float16") != std::string::npos);
}

#endif  // __has_include("backends.hpp")
