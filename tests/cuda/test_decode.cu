// [cuda] tests of the decode kernel against the float64 scalar reference: a sweep over layouts,
// head dims, GQA ratios, page sizes, forms, schedules, positions and forced split counts, with the
// error rule of docs/06-cuda.md; graph capture; bad input.
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/harness.cuh"
#include "support/options.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using lazyattn::test::ref::LayoutKind;
using lazyattn::test::ref::ScenarioSpec;
using lazyattn::test::gpu::random_decode_spec;

namespace {

// Deferred decode of one scenario against the float64 reference, the eager baseline's error as
// the bar, at the heuristic's split count and forced ones. packed: raw-form keys rotated in packed
// 16-bit math (DecodeArgs::packed_raw_rotation, opt-in).
void check_decode(const ScenarioSpec& spec, bool packed = false) {
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  INFO(spec << "\n" << sc.layout_text);
  std::vector<float> q64 = gpu::rounded_queries(sc);
  test::ref::Result ref{std::vector<float>(sc.out_size()), std::vector<float>(sc.lse_size())};
  lazyattn::ref::scalar::decode(*sc.store, sc.plan, spec.layer, sc.rope, spec.params(), q64,
                                ref.out, ref.lse);
  const double scale = gpu::max_abs(ref.out);
  // The eager baseline in the same precision sets the bar.
  const gpu::ErrorBars bars = gpu::eager_error_bars(sc, 0, ref.out, ref.lse);
  REQUIRE(bars.eager_unwritten == 0);
  const double eager_out_err = bars.out, eager_lse_err = bars.lse;
  for (int splits : {0, 1, 2, 3, 7}) {
    INFO("forced splits " << splits << " (0: heuristic)");
    gpu::DeviceScenario ds(sc, splits);
    ds.packed_raw_rotation = packed;
    gpu::GpuResult got = ds.deferred();
    CHECK(got.unwritten == 0);
    std::string out_report =
        gpu::check_error_rule(got.out, ref.out, eager_out_err, 1e-3 * scale + 1e-5);
    INFO(out_report);
    CHECK(out_report.empty());
    std::string lse_report = gpu::check_error_rule(got.lse, ref.lse, eager_lse_err, 1e-3);
    INFO(lse_report);
    CHECK(lse_report.empty());
    if (splits == 0 || splits == 3) {  // queries rotated at their own positions
      gpu::GpuResult rot = ds.deferred_rotated();
      CHECK(rot.unwritten == 0);
      std::string r1 = gpu::check_error_rule(rot.out, ref.out, eager_out_err, 1e-3 * scale + 1e-5);
      INFO("query_rotated: " << r1);
      CHECK(r1.empty());
      std::string r2 = gpu::check_error_rule(rot.lse, ref.lse, eager_lse_err, 1e-3);
      INFO("query_rotated: " << r2);
      CHECK(r2.empty());
    }
  }
}

// One query per request over shuffled documents, all of them and the tails in `form`; every
// document in every request.
ScenarioSpec shuffled_spec(std::uint64_t seed, int head_dim, StorageForm form,
                           std::vector<std::int64_t> doc_lengths, int num_requests,
                           int max_tail_extra) {
  ScenarioSpec spec;
  spec.seed = seed;
  spec.head_dim = head_dim;
  spec.doc_form = spec.tail_form = form;
  spec.layout = LayoutKind::kShuffled;
  spec.docs_per_request = static_cast<int>(doc_lengths.size());
  spec.doc_lengths = std::move(doc_lengths);
  spec.num_requests = num_requests;
  spec.num_queries = {1};
  spec.max_tail_extra = max_tail_extra;
  return spec;
}

}  // namespace

TEST_CASE("decode matches the float64 reference within 2x the eager error", "[cuda][decode]") {
  const int kCases = test::options().cuda_cases;
  for (int c = 0; c < kCases; ++c) {
    INFO("case " << c);
    check_decode(random_decode_spec(1000 + c));
  }
}

// The opt-in packed rotation of raw-form 16-bit keys (two pairs per four HMUL2/HFMA2, angles
// in the keys' type): the sweep's scenarios with raw-form documents (tails of every form, every
// schedule, both pair layouts, partial rotary, head dims 64 to 256), under the same rule.
TEST_CASE("decode of raw-form keys rotated in packed 16-bit math, within 2x the eager error",
          "[cuda][decode][raw][packed]") {
  const int kCases = test::options().cuda_cases;
  for (int c = 0; c < kCases; ++c) {
    INFO("case " << c);
    ScenarioSpec spec = random_decode_spec(1000 + c);
    spec.doc_form = StorageForm::kRaw;
    spec.dtype = DType::kBFloat16;  // the packed builds: bfloat16 at head dims 64 and 128
    if (spec.head_dim > 128) spec.head_dim = 128;
    check_decode(spec, /*packed=*/true);
  }
}

TEST_CASE("decode refuses packed_raw_rotation where it has no build", "[cuda][decode][errors]") {
  ScenarioSpec spec = random_decode_spec(1001);
  spec.doc_form = StorageForm::kRaw;
  for (auto [dtype, head_dim] : {std::pair{DType::kFloat16, 128}, {DType::kBFloat16, 256}}) {
    spec.dtype = dtype;
    spec.head_dim = head_dim;
    const test::ref::Scenario sc = test::ref::make_scenario(spec);
    gpu::DeviceScenario ds(sc, 0);
    ds.packed_raw_rotation = true;
    CHECK_THROWS_WITH(ds.deferred(), Catch::Contains("packed_raw_rotation over a") &&
                                         Catch::Contains("expected bfloat16 at head dim 64 or 128"));
  }
}

// The query built a tile ahead (registers, no barrier) in each rotary layout it takes: rotate-half
// and interleaved pairs, all dims or half of them rotary, head dims 64 and 128; raw form (a new
// query every tile) and local form (one per segment), over documents of several tiles.
TEST_CASE("decode's look-ahead query build in every rotary layout", "[cuda][decode]") {
  std::uint64_t seed = 5000;
  for (int head_dim : {64, 128})
    for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved})
      for (double partial : {1.0, 0.5})
        for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
          ScenarioSpec spec = shuffled_spec(++seed, head_dim, form, {200, 333, 65}, 2, 70);
          spec.dtype = head_dim == 64 ? DType::kFloat16 : DType::kBFloat16;
          spec.num_qo_heads = 32;
          spec.num_kv_heads = 8;
          spec.pair_layout = pairs;
          spec.partial_rotary = partial;
          spec.schedule = RopeType::kYarn;  // an attention factor: rotary and other dims differ
          spec.base_position = (std::int64_t{1} << 24) - 3000;
          check_decode(spec);
        }
}

// The largest GQA group the decode takes (16: every row of the query operand is a head; the
// sweep's groups are 1, 4 and 8), in both forms, every head dim, one page size each.
TEST_CASE("decode with a GQA group of 16", "[cuda][decode]") {
  std::uint64_t seed = 6000;
  for (int head_dim : {64, 128, 256})
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      ScenarioSpec spec = shuffled_spec(++seed, head_dim, form, {129, 65, 200}, 3, 20);
      spec.dtype = head_dim == 128 ? DType::kBFloat16 : DType::kFloat16;
      spec.num_qo_heads = 32;
      spec.num_kv_heads = 2;
      spec.page_size = head_dim == 64 ? 64 : 16;
      check_decode(spec);
    }
}

// Pages of 1 to 1024 keys (the sweep's are 16 to 64): below 16 keys a page, the rows a thread
// copies for one tile lie in different pages; above 64 a tile lies inside one page. Documents of
// several tiles and partial last tiles, both forms, both 16-bit types (fp8 pools:
// test_fp8_decode.cu).
TEST_CASE("decode over pages of 1 to 1024 keys", "[cuda][decode][pages]") {
  std::uint64_t seed = 6500;
  for (int page_size : {1, 4, 8, 128, 1024})
    for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw})
      for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
        INFO("page size " << page_size);
        ScenarioSpec spec =
            shuffled_spec(++seed, page_size == 4 ? 64 : 128, form, {130, 64, 77}, 2, 40);
        spec.dtype = dtype;
        spec.num_qo_heads = 16;
        spec.num_kv_heads = 4;
        spec.page_size = page_size;
        check_decode(spec);
      }
}

TEST_CASE("decode over a long context splits and merges correctly", "[cuda][decode]") {
  for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
    ScenarioSpec spec;
    spec.num_qo_heads = 32;
    spec.num_kv_heads = 8;
    spec.head_dim = 128;
    spec.dtype = DType::kBFloat16;
    spec.schedule = RopeType::kLlama3;
    spec.doc_form = spec.tail_form = form;
    spec.layout = LayoutKind::kShuffled;
    spec.doc_lengths = {2048, 2048, 2048, 2000, 2049};
    spec.docs_per_request = 5;
    spec.prefixes = false;
    spec.num_requests = 2;
    spec.max_tail_extra = 40;
    spec.seed = 77;
    test::ref::Scenario sc = test::ref::make_scenario(spec);
    INFO(spec << "\n" << sc.layout_text);
    std::vector<float> q = gpu::rounded_queries(sc);
    test::ref::Result ref{std::vector<float>(sc.out_size()), std::vector<float>(sc.lse_size())};
    lazyattn::ref::scalar::decode(*sc.store, sc.plan, 0, sc.rope, spec.params(), q, ref.out,
                                  ref.lse);
    gpu::DeviceScenario eager_ds(sc, 0);
    gpu::GpuResult eager = eager_ds.eager();
    double e_out = gpu::max_abs_error(eager.out, ref.out);
    double e_lse = gpu::max_abs_error(eager.lse, ref.lse);
    for (int splits : {0, 1, 16, 64}) {
      INFO("splits " << splits);
      gpu::DeviceScenario ds(sc, splits);
      gpu::GpuResult got = ds.deferred();
      CHECK(got.unwritten == 0);
      auto r1 = gpu::check_error_rule(got.out, ref.out, e_out, 1e-3 * gpu::max_abs(ref.out));
      INFO(r1);
      CHECK(r1.empty());
      auto r2 = gpu::check_error_rule(got.lse, ref.lse, e_lse, 1e-3);
      INFO(r2);
      CHECK(r2.empty());
    }
  }
}

TEST_CASE("decode captures into a CUDA graph and replays to the same result", "[cuda][decode]") {
  ScenarioSpec spec = random_decode_spec(4242);
  spec.schedule = RopeType::kDefault;
  spec.doc_form = StorageForm::kLocal;
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  gpu::DeviceScenario ds(sc, 0);
  ds.pdl = false;  // the reference run: a plain launch
  gpu::GpuResult direct = ds.deferred();
  REQUIRE(direct.unwritten == 0);

  cudaStream_t stream;
  LAZYATTN_CUDA_CHECK(cudaStreamCreate(&stream));
  ds.poison();
  ds.pdl = true;  // captured as launched by default: with programmatic dependent launch
  // Warm once on the stream (function attributes, workspace sizing), then capture.
  cuda::decode(ds.args(true, ds.q.data()), ds.pool, ds.plan, ds.rope, ds.ws, stream);
  LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  LAZYATTN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cuda::decode(ds.args(true, ds.q.data()), ds.pool, ds.plan, ds.rope, ds.ws, stream);
  LAZYATTN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  LAZYATTN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    ds.poison();
    LAZYATTN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    gpu::GpuResult replayed = ds.fetch();
    CHECK(replayed.unwritten == 0);
    CHECK(replayed.out == direct.out);  // same kernels, same inputs: bitwise equal
    CHECK(replayed.lse == direct.lse);
  }
  LAZYATTN_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LAZYATTN_CUDA_CHECK(cudaGraphDestroy(graph));
  LAZYATTN_CUDA_CHECK(cudaStreamDestroy(stream));
}

namespace {
// Copies `bytes` bytes after spinning for about `spin_ns`, letting the next grid launch first
// (programmatic dependent launch): a decode that read q before this grid finished would see the
// garbage q held before the copy.
__global__ void slow_copy_kernel(std::byte* dst, const std::byte* src, std::size_t bytes,
                                 unsigned long long spin_ns) {
  cuda::ptx::launch_dependents();
  const unsigned long long t0 = cuda::ptx::globaltimer();
  do {
    __nanosleep(1000);
  } while (cuda::ptx::globaltimer() - t0 < spin_ns);
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < bytes;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
}  // namespace

TEST_CASE("decode under programmatic dependent launch reads q after the grid before it",
          "[cuda][decode]") {
  ScenarioSpec spec = random_decode_spec(5151);
  spec.doc_form = spec.tail_form = StorageForm::kLocal;
  spec.schedule = RopeType::kLlama3;
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  INFO(spec << "\n" << sc.layout_text);
  gpu::DeviceScenario ds(sc, 0);
  ds.pdl = false;  // the reference run: a plain launch
  gpu::GpuResult direct = ds.deferred();
  REQUIRE(direct.unwritten == 0);

  cuda::DeviceBuffer<std::byte> q_live(ds.q.size());  // what the decode reads, garbage at first
  cudaStream_t stream;
  LAZYATTN_CUDA_CHECK(cudaStreamCreate(&stream));
  for (int round = 0; round < 3; ++round) {
    ds.poison();
    LAZYATTN_CUDA_CHECK(cudaMemset(q_live.data(), 0x7f, q_live.bytes()));  // NaN-like bf16/fp16
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    slow_copy_kernel<<<4, 128, 0, stream>>>(q_live.data(), ds.q.data(), ds.q.bytes(),
                                            200'000ull);
    LAZYATTN_CUDA_CHECK(cudaGetLastError());
    cuda::DecodeArgs a = ds.args(true, q_live.data());
    a.pdl = true;
    cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws, stream);
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    gpu::GpuResult got = ds.fetch();
    CHECK(got.unwritten == 0);
    CHECK(got.out == direct.out);  // same kernel, same inputs once q is written: bitwise equal
    CHECK(got.lse == direct.lse);
  }
  LAZYATTN_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("write_tokens stores K rotated at local positions and V as given", "[cuda][write]") {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
      INFO(to_string(dtype) << " " << to_string(pairs));
      gpu::WriteScene w(KvStoreConfig{2, 4, 128, 16, dtype, 64}, pairs);
      const std::int64_t n = gpu::WriteScene::kTokens;
      dispatch_dtype(dtype, [&](auto tag) {
        using E = decltype(tag);
        auto ks = gpu::to_storage<E>(w.k), vs = gpu::to_storage<E>(w.v);
        cuda::DeviceBuffer<E> dk(ks.size()), dv(vs.size());
        dk.upload(std::span<const E>(ks.data(), ks.size()));
        dv.upload(std::span<const E>(vs.data(), vs.size()));
        cuda::write_tokens(w.pool, 1, dk.data(), dv.data(), static_cast<std::int32_t>(n),
                           w.page.data(), w.slot.data(), w.pos.data(), w.drope);
        w.pool.download_pages(w.store, w.info.pages);
        const E* kp = w.store.k_pool<E>();
        const E* vp = w.store.v_pool<E>();
        double worst = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          for (int h = 0; h < 4; ++h) {
            const std::vector<double> x = w.rotated_k(ks, i, h);
            const std::int64_t at = w.at(1, i, h);
            for (int d = 0; d < 128; ++d) {
              double got = to_float(kp[at + d]);
              // Relative to the vector's scale (|k| ~ 1): the device's cos/sin carry ~3e-7
              // absolute error, which dominates for float32 storage.
              worst = std::max(worst, std::fabs(got - x[d]) / (std::fabs(x[d]) + 0.05));
              REQUIRE(to_float(vp[at + d]) == to_float(vs[(i * 4 + h) * 128 + d]));
            }
          }
        }
        double ulp = dtype == DType::kBFloat16 ? 0x1p-8 : dtype == DType::kFloat16 ? 0x1p-11
                                                                                   : 0x1p-23;
        CHECK(worst <= 2 * ulp + 5e-5);
      });
    }
  }
}

TEST_CASE("decode rejects bad input naming the value", "[cuda][decode][errors]") {
  ScenarioSpec spec = random_decode_spec(7);
  spec.head_dim = 128;
  spec.num_qo_heads = 8;
  spec.num_kv_heads = 2;
  spec.dtype = DType::kBFloat16;
  spec.schedule = RopeType::kDefault;
  spec.doc_form = spec.tail_form = StorageForm::kLocal;
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  gpu::DeviceScenario ds(sc, 0);
  auto args = ds.args(true, ds.q.data());
  {
    auto a = args;
    a.params.head_dim = 96;
    CHECK_THROWS_WITH(cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws),
                      Catch::Contains("head_dim 96"));
  }
  {
    auto a = args;
    a.dtype = DType::kFloat16;
    CHECK_THROWS_WITH(cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws),
                      Catch::Contains("dtype float16"));
  }
  {
    auto a = args;
    a.params.num_qo_heads = 2 * 17;
    CHECK_THROWS_WITH(cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws),
                      Catch::Contains("group size 17"));
  }
  {
    auto a = args;
    a.o = nullptr;
    CHECK_THROWS_WITH(cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws), Catch::Contains("null"));
  }
  {
    auto a = args;
    a.params.logits_soft_cap = 30.0;
    CHECK_THROWS_WITH(cuda::decode(a, ds.pool, ds.plan, ds.rope, ds.ws),
                      Catch::Contains("logits_soft_cap 30"));
  }
  {
    // A plan uploaded for the prefill (its query tiles, one split per request) is refused.
    cuda::PrefillArgs pa;
    pa.params = sc.spec.params();
    cuda::DevicePlan for_prefill;
    cuda::upload_for_prefill(for_prefill, sc.plan, pa);
    CHECK_THROWS_WITH(cuda::decode(args, ds.pool, for_prefill, ds.rope, ds.ws),
                      Catch::Contains("prefill schedule") &&
                          Catch::Contains("upload_for_decode"));
  }
  {
    // A plan uploaded with its store is refused once a document it reads is erased (its pages
    // may hold another document's keys by then); here, after a launch that runs.
    cuda::DevicePlan checked;
    cuda::upload_for_decode(checked, *sc.store, sc.plan, args);
    cuda::decode(args, ds.pool, checked, ds.rope, ds.ws);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    erase_first_document(sc);
    CHECK_THROWS_WITH(cuda::decode(args, ds.pool, checked, ds.rope, ds.ws),
                      Catch::Contains("cuda::decode") &&
                          Catch::Contains("was evicted or erased since the plan was made"));
  }
  {
    // Raw-form keys are rotated by their offsets in a 64-key tile: a 16-row offset table is
    // refused, naming its size.
    cuda::DeviceRope short_table(sc.rope, 16);
    CHECK_THROWS_WITH(cuda::decode(args, ds.pool, ds.plan, short_table, ds.ws),
                      Catch::Contains("offset table of 16 rows") && Catch::Contains(">= 64"));
  }
  {
    // A schedule made for the same layout in another storage form: its tile records say local
    // where the plan says raw. Refused, naming the tile; the device plan keeps its contents.
    Plan relabelled = sc.plan;
    std::fill(relabelled.segment_form.begin(), relabelled.segment_form.end(),
              static_cast<std::uint8_t>(StorageForm::kRaw));
    cuda::ScheduleOptions opt;
    cuda::DecodeSchedule local_sched = cuda::make_decode_schedule(sc.plan, spec.num_kv_heads, opt);
    CHECK_THROWS_WITH(ds.plan.upload(relabelled, local_sched),
                      Catch::Contains("does not match the plan's segment") &&
                          Catch::Contains("form 1") && Catch::Contains("form 0"));
    gpu::GpuResult again = ds.deferred();
    CHECK(again.unwritten == 0);
  }
}

namespace {

__global__ void device_cos_sin_kernel(const std::int64_t* positions, int n,
                                      const std::uint64_t* turns, int pairs, float2* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * pairs) out[i] = cuda::rope_cos_sin(positions[i / pairs], turns[i % pairs]);
}

}  // namespace

TEST_CASE("device cos/sin are within 1e-6 of float64 truth below 2^24", "[cuda][rope]") {
  RopeConfig rc;
  rc.head_dim = 128;
  rc.rope_theta = 500000.0;
  rc.rope_scaling.rope_type = RopeType::kLlama3;
  rc.rope_scaling.factor = 8.0;
  rc.rope_scaling.low_freq_factor = 1.0;
  rc.rope_scaling.high_freq_factor = 4.0;
  rc.rope_scaling.original_max_position_embeddings = 8192;
  const RopeFrequencies f = RopePolicy(rc).base_frequencies();
  std::vector<std::int64_t> pos{0, 1, 2, 1000, 65535, 65536, (1 << 23) + 1, (1 << 24) - 1,
                                -1, -((1 << 24) - 1)};
  Rng rng(17);
  std::uniform_int_distribution<std::int64_t> u(0, (std::int64_t{1} << 24) - 1);
  for (int i = 0; i < 200; ++i) pos.push_back(u(rng));
  const int pairs = f.num_pairs(), n = static_cast<int>(pos.size());
  cuda::DeviceBuffer<std::int64_t> dpos(pos.size());
  cuda::DeviceBuffer<std::uint64_t> dturns(f.turns.size());
  cuda::DeviceBuffer<float2> dout(pos.size() * pairs);
  dpos.upload(std::span<const std::int64_t>(pos.data(), pos.size()));
  dturns.upload(std::span<const std::uint64_t>(f.turns.data(), f.turns.size()));
  device_cos_sin_kernel<<<(n * pairs + 255) / 256, 256>>>(dpos.data(), n, dturns.data(), pairs,
                                                         dout.data());
  LAZYATTN_CUDA_CHECK_LAUNCH();
  std::vector<float2> got = dout.download();
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < pairs; ++j) {
      long double a = static_cast<long double>(pos[i]) * static_cast<long double>(f.inv_freq[j]);
      float2 c = got[static_cast<std::size_t>(i) * pairs + j];
      worst = std::max({worst, std::fabs(static_cast<double>(c.x) - static_cast<double>(cosl(a))),
                        std::fabs(static_cast<double>(c.y) - static_cast<double>(sinl(a)))});
    }
  }
  INFO("worst |device - truth| " << worst);
  CHECK(worst <= 1e-6);
}
