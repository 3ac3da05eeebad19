// [cuda] tests of the prefill kernel against the float64 scalar reference: tail prefill over random
// layouts and query counts (1, 17, 128, 129, 512, 2049), chunked prefill against one-shot, and
// document encoding (pages written on the device, then causal attention from position 0).
#include "support/catch.hpp"

#include <numeric>
#include <random>
#include <string>

#include "cuda/harness.cuh"
#include "support/options.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using lazyattn::test::ref::LayoutKind;
using lazyattn::test::ref::ScenarioSpec;

namespace {

// Whether the wgmma kernel takes this scenario (cuda::wgmma_prefill_mismatch's conditions:
// head dim 64, 128 or 256, every storage form and rotary layout).
bool wgmma_applies(const ScenarioSpec& s) {
  return s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256;
}

// Deferred prefill against the float64 reference, with the eager baseline's error as the bar.
// reversed_pages: the device pool holds the pages in reverse order (DeviceScenario::reverse_pages).
void check_prefill(const test::ref::Scenario& sc, bool reversed_pages = false) {
  const ScenarioSpec& spec = sc.spec;
  std::vector<float> q = gpu::rounded_queries(sc);
  test::ref::Result ref{std::vector<float>(sc.out_size()), std::vector<float>(sc.lse_size())};
  lazyattn::ref::scalar::prefill(*sc.store, sc.plan, spec.layer, sc.rope, spec.params(), q,
                                 ref.out, ref.lse);
  const double scale = gpu::max_abs(ref.out);
  const gpu::ErrorBars bars = gpu::eager_error_bars(sc, -1, ref.out, ref.lse);
  REQUIRE(bars.eager_unwritten == 0);
  const double eager_out = bars.out, eager_lse = bars.lse;
  // Every output written, outputs and log-sum-exps under the error rule. extra_out: more absolute
  // tolerance on the outputs.
  auto check_result = [&](const gpu::GpuResult& got, double extra_out = 0.0) {
    CHECK(got.unwritten == 0);
    std::string r1 =
        gpu::check_error_rule(got.out, ref.out, eager_out, 1e-3 * scale + 1e-5 + extra_out);
    INFO(r1);
    CHECK(r1.empty());
    std::string r2 = gpu::check_error_rule(got.lse, ref.lse, eager_lse, 1e-3);
    INFO(r2);
    CHECK(r2.empty());
  };
  // The eager baseline is the bar, so it is checked too: its error (above: kAuto's kernel, the
  // Hopper one where it applies, RoPE off over re-encoded pages) within the rule's bound on the
  // mma.sync kernel's eager error; NaN counts as unwritten (required 0 above). Not under the
  // schedules that depend on the request's length, which eager_error_bars does not run.
  if (wgmma_applies(spec) && spec.schedule != RopeType::kDynamic &&
      spec.schedule != RopeType::kLongrope) {
    gpu::DeviceScenario es(sc, -1);
    es.prefill_kernel = cuda::PrefillKernel::kMmaSync;
    const gpu::GpuResult mma = es.eager();
    INFO("eager baseline, RoPE off: kAuto's error against mma_sync's");
    CHECK(eager_out <= 2.0 * gpu::max_abs_error(mma.out, ref.out) + 1e-3 * scale + 1e-5);
    CHECK(eager_lse <= 2.0 * gpu::max_abs_error(mma.lse, ref.lse) + 1e-3);
  }
  gpu::DeviceScenario ds(sc, -1);
  if (reversed_pages) ds.reverse_pages();
  // Each kernel that takes the scenario (the mma.sync one always, the wgmma one where it applies:
  // then it is what kAuto picks), each with the automatic split choice, no split and a forced
  // 3-way split of every key range (most of these small scenarios get one split automatically,
  // so 3 exercises the merge).
  std::vector<cuda::PrefillKernel> kernels{cuda::PrefillKernel::kMmaSync};
  if (wgmma_applies(spec)) kernels.push_back(cuda::PrefillKernel::kWgmmaWs);
  for (cuda::PrefillKernel kernel : kernels) {
    ds.prefill_kernel = kernel;
    for (int splits : {0, 1, 3}) {
      ds.prefill_kv_splits = splits;
      gpu::GpuResult got = ds.deferred();
      INFO("kernel " << cuda::to_string(kernel) << ", kv_splits " << splits);
      check_result(got);
      if (splits == 0) {
        // A query rotated at its own position comes rounded to 16 bits, and the kernels round it
        // again after R(-s) (R(-n)): one rounding more than the eager baseline's query, so its
        // outputs get one rounding of the largest output more (half an ulp at its magnitude; a
        // one-ulp flip at a rounding boundary went past the plain bar once in 331,776 outputs).
        INFO("queries rotated at their own positions (query_rotated)");
        const double ulp = spec.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
        check_result(ds.deferred_rotated(), ulp * scale);
      }
    }
  }
  // Without a workspace (no tile scratch): where local-form plans over several segments read
  // keys the key pass positioned (head dims 64 and 256; 128 in any rotary layout but rotate-half
  // over every dim), they rebuild each segment's query in the kernel instead; raw-form plans take
  // the mma.sync kernel.
  if (spec.head_dim != 128 || spec.partial_rotary != 1.0 ||
      spec.pair_layout != PairLayout::kHalf) {
    ds.prefill_kernel = cuda::PrefillKernel::kAuto;
    ds.prefill_workspace = false;
    ds.prefill_kv_splits = 1;
    INFO("no workspace");
    check_result(ds.deferred());
    const double ulp = spec.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
    check_result(ds.deferred_rotated(), ulp * scale);
  }
}

}  // namespace

namespace {

// A RAG-tail scenario the wgmma kernels take: two requests over shuffled documents (300, 129, 64
// and 1 tokens: partial tiles, a one-token segment), nq and 33 queries, pages of `page_size`.
ScenarioSpec wgmma_rag_spec(std::int64_t nq, int page_size = 16, int head_dim = 128) {
  ScenarioSpec spec;
  spec.page_size = page_size;
  spec.num_qo_heads = 32;
  spec.num_kv_heads = 8;
  spec.head_dim = head_dim;
  spec.dtype = nq % 2 ? DType::kBFloat16 : DType::kFloat16;
  spec.schedule = RopeType::kLlama3;
  spec.doc_form = spec.tail_form = StorageForm::kLocal;
  spec.layout = LayoutKind::kShuffled;
  spec.doc_lengths = {300, 129, 64, 1};
  spec.docs_per_request = 4;
  spec.prefixes = false;
  spec.num_requests = 2;
  spec.num_queries = {nq, 33};
  spec.max_tail_extra = 40;
  spec.seed = 300 + static_cast<std::uint64_t>(nq);
  return spec;
}

// A scenario the wgmma kernels take, checked on every kernel and split count (check_prefill);
// one_segment: every request must have one segment (the warp-specialised one-segment form).
void check_wgmma_spec(const ScenarioSpec& spec, bool one_segment = false,
                      bool reversed_pages = false) {
  REQUIRE(wgmma_applies(spec));
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  if (one_segment)
    for (const RequestLayout& r : sc.layouts) REQUIRE(r.segments.size() == 1);
  INFO(spec << "\n" << sc.layout_text);
  check_prefill(sc, reversed_pages);
}

// Scenario i of a sweep over storage forms and rotary layouts (the caller sets the forms):
// 40 or 129 queries, page sizes 16, 32 and 64, GQA groups 1, 4 and 8, Llama 3's or YaRN's
// schedule, positions near 2^40 and 2^24, in turn; seed seed0 + i.
ScenarioSpec layout_sweep_spec(int i, int head_dim, PairLayout pairs, double partial,
                               std::uint64_t seed0) {
  const std::array<std::pair<int, int>, 3> heads{{{8, 8}, {16, 4}, {32, 4}}};
  ScenarioSpec spec = wgmma_rag_spec(i % 2 ? 129 : 40, 16 << (i % 3), head_dim);
  spec.pair_layout = pairs;
  spec.partial_rotary = partial;
  spec.num_qo_heads = heads[i % 3].first;
  spec.num_kv_heads = heads[i % 3].second;
  spec.schedule = i % 4 == 3 ? RopeType::kYarn : RopeType::kLlama3;
  spec.base_position = i % 2 ? (std::int64_t{1} << 24) - 3000 : std::int64_t{1} << 40;
  spec.seed = seed0 + static_cast<std::uint64_t>(i);
  return spec;
}

}  // namespace

// Small enough for compute-sanitizer (scripts/gpu-check runs memcheck and racecheck on it): the
// warp-specialised kernel's loader / computing-warpgroup hand-overs, one and several query tiles,
// at every head dim (at 256 the query in shared memory, two stages, and K positioned by the key
// pass; without a workspace each segment's query rebuilt).
TEST_CASE("the wgmma prefill kernels on short RAG tails", "[cuda][prefill][hopper]") {
  for (int head_dim : {128, 64, 256}) {
    for (std::int64_t nq : {17, 130}) {
      check_wgmma_spec(wgmma_rag_spec(nq, 16, head_dim));
    }
  }
}

TEST_CASE("the wgmma prefill kernel on RAG tails and long query runs", "[cuda][prefill][hopper]") {
  // Page sizes 16, 32 and 64 in turn (a 64-key tile spans four, two or one page); head dims 128,
  // 64 and 256 in turn.
  int i = 0;
  for (std::int64_t nq : {1, 17, 128, 129, 512, 2049, 33, 300}) {
    check_wgmma_spec(wgmma_rag_spec(nq, 16 << (i % 3), std::array{128, 64, 256}[i % 3]));
    ++i;
  }
}

// Page sizes off the sweeps' 16 to 64 (4, 8, 128, 256), and 16 with the pages in reverse order
// in the pool. At head dims 64 and 128 whole tiles come by the TMA: in one box per 64 columns
// where the tile's pages follow one another in the pool (the store allocates a document's so),
// else in a box per page (the RAG tails here, whose pages are reversed), or in boxes of 64 rows
// at a page's slot 64, 128 or 192 (pages of 128 and 256 keys hold several tiles); under 8 keys,
// and at head dim 256, the kernel gathers with cp.async. RAG tails (partial tiles, one-token
// segments) and one-segment requests, local and raw form. (No commas in the name:
// scripts/gpu-check passes it to Catch2, which reads a comma as "or".)
TEST_CASE("the wgmma prefill kernel over pages of 4 to 256 keys", "[cuda][prefill][hopper]") {
  int i = 0;
  for (int page_size : {8, 16, 128, 256, 4}) {
    for (bool one_segment : {false, true}) {
      ScenarioSpec spec =
          wgmma_rag_spec(std::array<std::int64_t, 3>{129, 40, 300}[i % 3], page_size,
                         std::array{128, 256, 64}[i % 3]);
      if (one_segment) {
        spec.docs_per_request = 0;
        spec.num_queries = {spec.num_queries[0], 33, 70};
        spec.num_requests = 3;
      }
      // Raw-form documents (RAG tails at pages of 8, 128 and 4) or tails (one-segment requests
      // at 16 and 256): every K tile comes from the key pass's scratch.
      if ((i / 2) % 2 == (one_segment ? 1 : 0)) {
        spec.doc_form = StorageForm::kRaw;
        if (one_segment) spec.tail_form = StorageForm::kRaw;
      }
      spec.seed += 1000 * static_cast<std::uint64_t>(page_size);
      INFO("page size " << page_size << (one_segment ? "" : ", pages reversed"));
      check_wgmma_spec(spec, one_segment, /*reversed_pages=*/!one_segment);
      ++i;
    }
  }
}

// Requests of one segment each (their tails, no documents), at large positions: the plan the
// warp-specialised kernel's one-segment form takes (the encodings' case, here with tails that
// start past 0 and queries that start past the tail's first key). scripts/gpu-check runs it under
// memcheck and racecheck (`oneseg`).
TEST_CASE("the wgmma prefill kernels on requests of one segment", "[cuda][prefill][hopper]") {
  int i = 0;
  for (std::int64_t nq : {1, 17, 129, 300, 64, 200, 130, 40}) {
    ScenarioSpec spec = wgmma_rag_spec(nq, 16 << (i % 3), i < 4 ? 128 : i < 6 ? 64 : 256);
    spec.docs_per_request = 0;
    spec.num_requests = 3;
    spec.num_queries = {nq, 33, 70};
    spec.base_position = i++ % 2 ? std::int64_t{1} << 40 : (std::int64_t{1} << 24) - 3000;
    check_wgmma_spec(spec, true);
  }
}

// Requests of one segment (the encodings' case) in both storage forms and every rotary layout
// (the local ones take the one-segment builds over pages, the raw ones over K the key pass
// positioned): raw and
// local tails (local ones also as absolute-form tails: local from position 0),
// rotate-half and interleaved pairs, every dim rotary, half or a quarter of them, at head dims
// 128 and 64 (at 64 a quarter of the dims, 16, is no rotate-half layout the kernels take); GQA
// groups 1, 4 and 8, page sizes 16, 32 and 64, positions near 2^24 and 2^40, and the queries'
// first row past the tail's first key, in turn.
TEST_CASE("the wgmma prefill kernel on one-segment requests in every storage form and rotary layout",
          "[cuda][prefill][hopper]") {
  int i = 0;
  for (int head_dim : {128, 64}) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        for (double partial : {1.0, 0.5, 0.25}) {
          if (head_dim == 64 && partial == 0.25 && pairs == PairLayout::kHalf) continue;
          ScenarioSpec spec = layout_sweep_spec(i, head_dim, pairs, partial, 820);
          spec.docs_per_request = 0;
          spec.num_requests = 2;
          spec.num_queries = {i % 2 ? 129 : 40, 1 + 16 * (i % 4)};
          spec.doc_form = form;
          spec.tail_form = form == StorageForm::kLocal && i % 4 == 1 ? StorageForm::kAbsolute : form;
          ++i;
          check_wgmma_spec(spec, true);
        }
      }
    }
  }
}

// The wgmma kernel over every storage form and rotary layout: documents and tails local, raw,
// mixed (local documents, raw tail and the reverse) and absolute, rotate-half and interleaved
// pairs, every dim rotary, half or a quarter of them; GQA groups 1, 4 and 8, page sizes 16, 32
// and 64 and positions near 2^24 and 2^40 in turn; one-token documents and empty segments; head
// dims 128, 64 and 256 (at 64 a quarter of the dims, 16, is no rotate-half layout the kernels
// take, so the interleaved one alone).
TEST_CASE("the wgmma prefill kernel in every storage form and rotary layout",
          "[cuda][prefill][hopper]") {
  struct Forms {
    StorageForm doc, tail;
  };
  const std::array<Forms, 4> forms{{{StorageForm::kRaw, StorageForm::kRaw},
                                    {StorageForm::kLocal, StorageForm::kRaw},
                                    {StorageForm::kRaw, StorageForm::kLocal},
                                    {StorageForm::kLocal, StorageForm::kAbsolute}}};
  int i = 0;
  for (int head_dim : {128, 64, 256}) {
    for (const Forms& f : forms) {
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        for (double partial : {1.0, 0.5, 0.25}) {
          if (head_dim == 64 && partial == 0.25 && pairs == PairLayout::kHalf) continue;
          ScenarioSpec spec = layout_sweep_spec(i, head_dim, pairs, partial, 700);
          spec.doc_form = f.doc;
          spec.tail_form = f.tail;
          spec.empty_segment = i % 5 == 2;
          ++i;
          check_wgmma_spec(spec);
        }
      }
    }
  }
}

// Raw keys under a length-dependent schedule (dynamic NTK: one frequency set per request), and
// raw-form requests of one segment each (a raw document's encoding), over K the key pass
// positioned.
TEST_CASE("the wgmma prefill kernel on raw keys under dynamic RoPE and in one-segment requests",
          "[cuda][prefill][hopper]") {
  for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
    ScenarioSpec spec = wgmma_rag_spec(70, 32, pairs == PairLayout::kHalf ? 128 : 256);
    spec.schedule = RopeType::kDynamic;
    spec.doc_form = spec.tail_form = StorageForm::kRaw;
    spec.pair_layout = pairs;
    spec.seed = 760 + (pairs == PairLayout::kHalf);
    check_wgmma_spec(spec);
    ScenarioSpec one = wgmma_rag_spec(130, 16, pairs == PairLayout::kHalf ? 256 : 128);
    one.docs_per_request = 0;
    one.num_requests = 3;
    one.num_queries = {130, 33, 70};
    one.doc_form = one.tail_form = StorageForm::kRaw;
    one.pair_layout = pairs;
    one.partial_rotary = pairs == PairLayout::kHalf ? 1.0 : 0.5;
    one.base_position = (std::int64_t{1} << 24) - 3000;
    one.seed = 770 + (pairs == PairLayout::kHalf);
    check_wgmma_spec(one, true);
  }
}

namespace {

// A scenario whose requests each hold at least `docs` documents and the tail, checked on every
// kernel and split count (check_prefill).
void check_many_segments(const ScenarioSpec& spec, int docs) {
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  for (const RequestLayout& r : sc.layouts)
    REQUIRE(r.segments.size() >= static_cast<std::size_t>(docs) + 1);
  INFO(spec << "\n" << sc.layout_text);
  check_prefill(sc);
}

}  // namespace

// Requests of many short segments, in the builds that keep a table of the segments' query
// rotations (the other rotary layouts, per dim): they compute every segment's R(-s) in the
// prologue when the CTA's tiles span at most 32 segments (31 documents and the tail), and per
// segment between two runs when they span more (32 and 70 documents and the tail); local
// documents with local, absolute or raw tails (a raw one makes the plan's K positioned by the key
// pass, as a workspace makes it at head dim 64, whose table check_prefill's run without a
// workspace reaches), interleaved pairs at head dim 64 and half the dims rotary at 128.
TEST_CASE("the wgmma prefill kernel on requests of more segments than its table holds",
          "[cuda][prefill][hopper]") {
  int i = 0;
  for (int docs : {31, 32, 70}) {
    for (int head_dim : {128, 64}) {
      ScenarioSpec spec = wgmma_rag_spec(i % 2 ? 129 : 40, 16 << (i % 3), head_dim);
      spec.doc_lengths = {1, 16, 17, 40, 65};
      spec.docs_per_request = docs;
      spec.doc_form = StorageForm::kLocal;
      spec.tail_form = i % 3 == 2 ? StorageForm::kRaw
                       : i % 2    ? StorageForm::kAbsolute
                                  : StorageForm::kLocal;
      spec.pair_layout = head_dim == 64 ? PairLayout::kInterleaved : PairLayout::kHalf;
      spec.partial_rotary = head_dim == 64 ? 1.0 : 0.5;
      spec.empty_segment = i == 4;
      spec.seed = 790 + static_cast<std::uint64_t>(i++);
      check_many_segments(spec, docs);
    }
  }
}

// The local form's rotate-half layout at head dim 64 over CTAs whose tiles span 64 and 71
// segments (63 and 70 documents and the tail): K positioned by the key pass, and without a
// workspace (check_prefill) the query rebuilt between every two runs of tiles.
TEST_CASE("the wgmma prefill kernel at head dim 64 on requests of 64 and 71 segments",
          "[cuda][prefill][hopper]") {
  int i = 0;
  for (int docs : {63, 70}) {
    ScenarioSpec spec = wgmma_rag_spec(i % 2 ? 129 : 40, 16, 64);
    spec.doc_lengths = {1, 16, 17, 40, 65};
    spec.docs_per_request = docs;
    spec.seed = 800 + static_cast<std::uint64_t>(i++);
    check_many_segments(spec, docs);
  }
}

TEST_CASE("prefill matches the float64 reference within 2x the eager error", "[cuda][prefill]") {
  const int kCases = std::max(1, test::options().cuda_cases / 2);
  for (int c = 0; c < kCases; ++c) {
    ScenarioSpec spec = gpu::random_prefill_spec(5000 + c);
    test::ref::Scenario sc = test::ref::make_scenario(spec);
    INFO("case " << c << ": " << spec << "\n" << sc.layout_text);
    check_prefill(sc);
  }
}

TEST_CASE("prefill handles long query runs (512, 2049 queries)", "[cuda][prefill]") {
  for (std::int64_t nq : {512, 2049}) {
    for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
      ScenarioSpec spec;
      spec.num_qo_heads = 8;
      spec.num_kv_heads = 2;
      spec.head_dim = 64;
      spec.dtype = DType::kBFloat16;
      spec.schedule = RopeType::kLlama3;
      spec.doc_form = spec.tail_form = form;
      spec.layout = LayoutKind::kShuffled;
      spec.doc_lengths = {300, 129};
      spec.docs_per_request = 2;
      spec.prefixes = false;
      spec.num_requests = 1;
      spec.num_queries = {nq};
      spec.max_tail_extra = 5;
      spec.seed = 91 + static_cast<std::uint64_t>(nq);
      test::ref::Scenario sc = test::ref::make_scenario(spec);
      INFO(spec << "\n" << sc.layout_text);
      check_prefill(sc);
    }
  }
}

TEST_CASE("chunked prefill equals one-shot prefill", "[cuda][prefill]") {
  RopeConfig rc;
  rc.head_dim = 128;
  rc.rope_theta = 500000.0;
  RopePolicy rope(rc);
  const int Hq = 16, Hk = 4, D = 128, P = 16;
  KvStoreConfig cfg{1, Hk, D, P, DType::kBFloat16, 128};
  KvStore store(cfg);
  Rng rng(3);
  const std::int64_t doc_len = 200, t1 = 170, t2 = 130;
  auto local = [&](std::vector<float> k, std::int64_t n) {
    return test::ref::to_local(rope.base_frequencies(), k, 1, n, Hk, D);
  };
  auto dk = random_normal(static_cast<std::size_t>(doc_len * Hk * D), rng);
  auto dv = random_normal(dk.size(), rng);
  DocHandle doc = store.insert(DocKey{1, 1}, StorageForm::kLocal, doc_len,
                               std::span<const float>(local(dk, doc_len)),
                               std::span<const float>(dv), true)
                      .handle;
  auto tk = random_normal(static_cast<std::size_t>((t1 + t2) * Hk * D), rng);
  auto tv = random_normal(tk.size(), rng);
  std::vector<float> tk_local = local(tk, t1 + t2);
  auto q = random_normal(static_cast<std::size_t>((t1 + t2) * Hq * D), rng);
  std::vector<bfloat16> qb = gpu::to_storage<bfloat16>(q);
  TailHandle tail = store.create_tail(StorageForm::kLocal);
  const std::size_t row = static_cast<std::size_t>(Hk * D);
  store.append(tail, t1, std::span<const float>(tk_local.data(), t1 * row),
               std::span<const float>(tv.data(), t1 * row));

  cuda::DevicePool pool(cfg);
  cuda::DeviceRope drope(rope);
  AttentionParams ap{Hq, Hk, D};
  auto run = [&](std::int64_t tail_len, std::int64_t nq, std::int64_t first_query) {
    std::vector<std::int32_t> all(static_cast<std::size_t>(cfg.num_pages));
    std::iota(all.begin(), all.end(), 0);
    pool.upload_pages(store, all);
    RequestLayout r;
    r.num_queries = nq;
    r.segments = {Segment::document(doc, doc_len, 7), Segment::of_tail(tail, tail_len, 7 + doc_len)};
    Plan plan = make_plan(store, r);
    cuda::DevicePlan dp;
    dp.upload(plan, cuda::prefill_schedule(plan, AttentionParams{Hq, Hk, D}));
    const std::size_t n = static_cast<std::size_t>(nq * Hq * D);
    cuda::DeviceBuffer<bfloat16> dq(n), dout(n);
    dq.upload(std::span<const bfloat16>(qb.data() + first_query * Hq * D, n));
    cuda::PrefillArgs a;
    a.q = dq.data();
    a.o = dout.data();
    a.params = ap;
    cuda::prefill(a, pool, dp, drope);
    std::vector<bfloat16> out = dout.download();
    std::vector<float> f(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) f[i] = to_float(out[i]);
    return f;
  };
  std::vector<float> chunk1 = run(t1, t1, 0);
  store.append(tail, t2, std::span<const float>(tk_local.data() + t1 * row, t2 * row),
               std::span<const float>(tv.data() + t1 * row, t2 * row));
  std::vector<float> chunk2 = run(t1 + t2, t2, t1);
  std::vector<float> whole = run(t1 + t2, t1 + t2, 0);
  std::vector<float> chunked = chunk1;
  chunked.insert(chunked.end(), chunk2.begin(), chunk2.end());
  REQUIRE(chunked.size() == whole.size());
  // Same keys, same tiles, but each query's rotation is built as cos/sin(m_first - s) (x)
  // cos/sin(offset) from a different first query in the two runs, so the 16-bit queries can
  // differ by one rounding: outputs agree to a few 16-bit ulps, not to the bit.
  const double bound = 4 * 0x1p-8 * gpu::max_abs(whole);
  std::string report = gpu::check_error_rule(chunked, whole, 0.0, bound);
  INFO(report);
  CHECK(report.empty());
}

TEST_CASE("document encoding on the device matches the reference's", "[cuda][prefill]") {
  for (std::int64_t n : {1, 77, 300, 1000}) {
    for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
      INFO("length " << n << " form " << to_string(form));
      RopeConfig rc;
      rc.head_dim = 128;
      rc.rope_theta = 500000.0;
      RopePolicy rope(rc);
      const int Hq = 8, Hk = 2, D = 128, P = 16;
      KvStoreConfig cfg{1, Hk, D, P, DType::kBFloat16, (n + P - 1) / P + 2};
      KvStore store(cfg);
      Rng rng(static_cast<std::uint64_t>(n) * 7 + (form == StorageForm::kRaw));
      auto round = [](std::vector<float> x) {
        for (float& v : x) v = round_to<bfloat16>(v);
        return x;
      };
      auto q = round(random_normal(static_cast<std::size_t>(n * Hq * D), rng));
      auto k = round(random_normal(static_cast<std::size_t>(n * Hk * D), rng));
      auto v = round(random_normal(k.size(), rng));
      AttentionParams ap{Hq, Hk, D};
      std::vector<float> ref_out(q.size()), ref_lse(static_cast<std::size_t>(n * Hq));
      lazyattn::ref::scalar::encode_document(rope, ap, n, q, k, v, ref_out, ref_lse);

      // The document's tokens written into its pages on the device, in the chosen form, then
      // prefilled as a tail of its own from position 0.
      TailHandle tail = store.create_tail(form);
      store.reserve(tail, n);
      auto pages = store.info(tail).pages;
      cuda::DevicePool pool(cfg);
      cuda::DeviceRope drope(rope);
      auto dst = cuda::token_destinations(pages, P, 0, n, form);
      cuda::DeviceBuffer<std::int32_t> d_page(dst.page.size()), d_slot(dst.slot.size());
      cuda::DeviceBuffer<std::int64_t> d_pos(std::max<std::size_t>(dst.rotate_position.size(), 1));
      d_page.upload(dst.page);
      d_slot.upload(dst.slot);
      if (!dst.rotate_position.empty()) d_pos.upload(dst.rotate_position);
      auto kb = gpu::to_storage<bfloat16>(k), vb = gpu::to_storage<bfloat16>(v);
      auto qb = gpu::to_storage<bfloat16>(q);
      cuda::DeviceBuffer<bfloat16> dk(kb.size()), dv(vb.size()), dq(qb.size()), dout(qb.size());
      dk.upload(std::span<const bfloat16>(kb.data(), kb.size()));
      dv.upload(std::span<const bfloat16>(vb.data(), vb.size()));
      dq.upload(std::span<const bfloat16>(qb.data(), qb.size()));
      cuda::write_tokens(pool, 0, dk.data(), dv.data(), static_cast<std::int32_t>(n), d_page.data(),
                         d_slot.data(), dst.rotate_position.empty() ? nullptr : d_pos.data(),
                         drope);
      RequestLayout r;
      r.num_queries = n;
      r.segments = {Segment::of_tail(tail, n, 0)};
      Plan plan = make_plan(store, r);
      cuda::DevicePlan dp;
      dp.upload(plan, cuda::prefill_schedule(plan, AttentionParams{Hq, Hk, D}));
      cuda::DeviceBuffer<float> dlse(ref_lse.size());
      // kAuto (the warp-specialised wgmma kernel, both forms: with a workspace, which holds the
      // raw form's rotated keys), then the mma.sync kernel forced.
      cuda::PrefillWorkspace ws;
      for (cuda::PrefillKernel kernel : {cuda::PrefillKernel::kAuto, cuda::PrefillKernel::kMmaSync}) {
        cuda::PrefillArgs a;
        a.q = dq.data();
        a.o = dout.data();
        a.maybe_lse = dlse.data();
        a.params = ap;
        a.kernel = kernel;
        const cuda::PrefillKernel used =
            cuda::resolve_prefill_kernel(a, dp, drope, DType::kBFloat16);
        INFO("kernel " << cuda::to_string(kernel) << " -> " << cuda::to_string(used));
        CHECK(used == (kernel == cuda::PrefillKernel::kAuto ? cuda::PrefillKernel::kWgmmaWs
                                                             : cuda::PrefillKernel::kMmaSync));
        LAZYATTN_CUDA_CHECK(cudaMemset(dout.data(), 0xff, dout.bytes()));
        LAZYATTN_CUDA_CHECK(cudaMemset(dlse.data(), 0xff, dlse.bytes()));
        cuda::prefill(a, pool, dp, drope, &ws);
        std::vector<bfloat16> out = dout.download();
        std::vector<float> got(out.size());
        for (std::size_t i = 0; i < out.size(); ++i) got[i] = to_float(out[i]);
        std::vector<float> lse = dlse.download();
        // Keys rounded to 16 bits after rotation (local form), queries after rotation, P before
        // P V, the output at the end: a few 16-bit rounding steps, bounded as for the eager path.
        double scale = gpu::max_abs(ref_out);
        std::string r1 = gpu::check_error_rule(got, ref_out, 2 * 0x1p-8 * scale, 1e-3 * scale);
        INFO(r1);
        CHECK(r1.empty());
        std::string r2 = gpu::check_error_rule(lse, ref_lse, 8 * 0x1p-8, 1e-3);
        INFO(r2);
        CHECK(r2.empty());
      }
    }
  }
}

TEST_CASE("prefill's kernel choice: kAuto takes wgmma_ws where it applies, kWgmmaWs names the misfit",
          "[cuda][prefill][errors]") {
  const int Hq = 8, Hk = 2, P = 16;
  // A store of head dim D with one document in `form`, its plan uploaded for prefill, and the
  // choice for a given rope, kernel and rope switch.
  auto choose = [&](int D, StorageForm form, const RopeConfig& rc, cuda::PrefillKernel kernel,
                    bool rope_on, std::int64_t tile_room = -1,
                    DType kv_dtype = DType::kBFloat16, std::int64_t* tile_elems = nullptr) {
    RopePolicy rope(rc);
    KvStoreConfig cfg{1, Hk, D, P, DType::kBFloat16, 8};
    KvStore store(cfg);
    std::vector<float> k(static_cast<std::size_t>(40 * Hk * D), 0.5f);
    DocHandle doc = store.insert(DocKey{1, 1}, form, 40, std::span<const float>(k),
                                 std::span<const float>(k), true)
                        .handle;
    RequestLayout r;
    r.num_queries = 0;
    r.segments = {Segment::document(doc, 40, 3)};
    TailHandle tail = store.create_tail(StorageForm::kLocal);
    store.append(tail, 5, std::span<const float>(k.data(), 5 * Hk * D),
                 std::span<const float>(k.data(), 5 * Hk * D));
    r.segments.push_back(Segment::of_tail(tail, 5, 43));
    r.num_queries = 5;
    Plan plan = make_plan(store, r);
    cuda::DevicePlan dp;
    dp.upload(plan, cuda::prefill_schedule(plan, AttentionParams{Hq, Hk, D}));
    cuda::DeviceRope drope(rope);
    cuda::PrefillArgs a;
    a.params = AttentionParams{Hq, Hk, D};
    a.kernel = kernel;
    a.rope = rope_on;
    if (tile_elems) *tile_elems = cuda::prefill_tile_elems(a, dp, drope, kv_dtype);
    return cuda::resolve_prefill_kernel(a, dp, drope, kv_dtype, tile_room);
  };
  RopeConfig full;
  full.head_dim = 128;
  RopeConfig partial = full;
  partial.partial_rotary_factor = 0.5;
  RopeConfig interleaved = full;
  interleaved.pair_layout = PairLayout::kInterleaved;
  RopeConfig d64 = full, d64_interleaved = interleaved, d256 = full, d256_partial = partial;
  d64.head_dim = d64_interleaved.head_dim = 64;
  d256.head_dim = d256_partial.head_dim = 256;
  using K = cuda::PrefillKernel;
  // Head dims 64, 128 and 256: the Hopper kernel in every form and rotary layout.
  for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
    for (const RopeConfig* rc :
         {&full, &partial, &interleaved, &d64, &d64_interleaved, &d256, &d256_partial}) {
      INFO("head_dim " << rc->head_dim << ", form " << static_cast<int>(form));
      CHECK(choose(rc->head_dim, form, *rc, K::kAuto, true) == K::kWgmmaWs);
      CHECK(choose(rc->head_dim, form, *rc, K::kWgmmaWs, true) == K::kWgmmaWs);
      CHECK(choose(rc->head_dim, form, *rc, K::kAuto, false) == K::kWgmmaWs);  // RoPE off
      CHECK(choose(rc->head_dim, form, *rc, K::kMmaSync, true) == K::kMmaSync);
    }
  }
  // Raw form without room for its rotated keys (no workspace): kAuto takes mma.sync, kWgmmaWs
  // names what is missing; RoPE off or local form need none.
  CHECK(choose(128, StorageForm::kRaw, full, K::kAuto, true, 0) == K::kMmaSync);
  CHECK_THROWS_WITH(choose(128, StorageForm::kRaw, full, K::kWgmmaWs, true, 0),
                    Catch::Contains("no tile scratch to rotate them into"));
  // fp8 pools: only the Hopper kernel reads them, after dequantizing into the tile scratch, so
  // without room for it (every form, RoPE on or off) or with mma.sync forced the call is refused.
  const DType e4m3 = DType::kFloat8E4M3;
  for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
    for (bool rope_on : {true, false}) {
      INFO("fp8, form " << static_cast<int>(form) << ", rope " << rope_on);
      CHECK(choose(128, form, full, K::kAuto, rope_on, -1, e4m3) == K::kWgmmaWs);
      CHECK(choose(64, form, d64, K::kWgmmaWs, rope_on, -1, e4m3) == K::kWgmmaWs);
      CHECK_THROWS_WITH(choose(128, form, full, K::kAuto, rope_on, 0, e4m3),
                        Catch::Contains("float8_e4m3") && Catch::Contains("no tile scratch"));
      CHECK_THROWS_WITH(choose(128, form, full, K::kMmaSync, rope_on, -1, e4m3),
                        Catch::Contains("mma_sync over a float8_e4m3 pool"));
    }
  }
  CHECK(choose(128, StorageForm::kRaw, full, K::kAuto, false, 0) == K::kWgmmaWs);
  CHECK(choose(128, StorageForm::kLocal, full, K::kAuto, true, 0) == K::kWgmmaWs);
  CHECK(choose(256, StorageForm::kRaw, d256, K::kAuto, true, 0) == K::kMmaSync);
  // Head dim 256 over two segments (the document and the tail): a workspace holds every K tile
  // positioned by the key pass (64 rows x 2 KV heads x 256 per key tile: one tile of the
  // document's 40 keys, one of the tail's 5), in both forms; local form runs without it too, raw
  // form does not. Head dim 128's local form takes none.
  for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
    std::int64_t elems = -1;
    choose(256, form, d256, K::kAuto, true, -1, DType::kBFloat16, &elems);
    CHECK(elems == 2 * 64 * Hk * 256);
    choose(256, form, d256, K::kAuto, false, -1, DType::kBFloat16, &elems);
    CHECK(elems == 0);  // RoPE off
  }
  CHECK(choose(256, StorageForm::kLocal, d256, K::kWgmmaWs, true, 0) == K::kWgmmaWs);
  CHECK_THROWS_WITH(choose(256, StorageForm::kRaw, d256, K::kWgmmaWs, true, 0),
                    Catch::Contains("no tile scratch to rotate them into"));
  std::int64_t elems64 = -1, elems128 = -1;
  choose(64, StorageForm::kLocal, d64, K::kAuto, true, -1, DType::kBFloat16, &elems64);
  CHECK(elems64 == 2 * 64 * Hk * 64);  // head dim 64's local form over segments: positioned too
  // Head dim 128's local form over segments: the rotate-half layout over every dim rebuilds its
  // query in registers (no scratch); interleaved pairs and partial rotary take positioned K.
  choose(128, StorageForm::kLocal, full, K::kAuto, true, -1, DType::kBFloat16, &elems128);
  CHECK(elems128 == 0);
  for (const RopeConfig* rc : {&partial, &interleaved}) {
    INFO("head dim 128, local form, " << (rc == &partial ? "partial rotary" : "interleaved"));
    elems128 = -1;
    choose(128, StorageForm::kLocal, *rc, K::kAuto, true, -1, DType::kBFloat16, &elems128);
    CHECK(elems128 == 2 * 64 * Hk * 128);
    CHECK(choose(128, StorageForm::kLocal, *rc, K::kWgmmaWs, true, 0) == K::kWgmmaWs);
  }
  CHECK_THROWS_WITH(choose(128, StorageForm::kLocal, full, static_cast<K>(7), true),
                    Catch::Contains("kernel 7"));
  // 2, the retired two-warpgroup Hopper kernel, is no kernel now.
  CHECK_THROWS_WITH(choose(128, StorageForm::kLocal, full, static_cast<K>(2), true),
                    Catch::Contains("kernel 2"));
}
