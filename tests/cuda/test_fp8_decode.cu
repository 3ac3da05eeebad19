// [cuda] fp8 (e4m3) pools on the device: the decode over local-form (and absolute) pages of fp8
// codes, and over raw-form ones (bfloat16 queries), against the float64 reference over the same
// dequantized values, with the error rule's bar set by the eager baseline in 16 bits over those
// values; page writes that quantize on the way in; the eager baseline's re-encoding copy
// re-quantizing K; and the calls that do not take fp8 pools, refused by name (the prefill's:
// test_fp8_prefill.cu).
#include "support/catch.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "cuda/harness.cuh"
#include "support/options.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using lazyattn::test::ref::ScenarioSpec;

namespace {

// A scenario of the decode sweep (gpu::random_decode_spec) with local-form documents, local or
// absolute tails and a schedule that does not depend on the request length; or (raw) with
// raw-form documents, tails as drawn and every schedule.
ScenarioSpec fp8_decode_spec(std::uint64_t seed, bool raw = false) {
  ScenarioSpec s = gpu::random_decode_spec(seed);
  if (raw) {
    s.doc_form = StorageForm::kRaw;
    return s;
  }
  s.doc_form = StorageForm::kLocal;
  if (s.tail_form == StorageForm::kRaw) s.tail_form = StorageForm::kLocal;
  if (s.schedule == RopeType::kDynamic || s.schedule == RopeType::kLongrope)
    s.schedule = RopeType::kLlama3;
  return s;
}

// The fp8 decode of `spec` (its dtype is the queries' and outputs') at `splits` forced splits (0:
// the heuristic): host copies of the output and LSE.
gpu::GpuResult fp8_decode(const test::ref::Scenario& sc8, DType qdtype,
                          const std::vector<float>& q, int splits) {
  const ScenarioSpec& spec = sc8.spec;
  cuda::DevicePool pool(sc8.store->config());
  std::vector<std::int32_t> all(static_cast<std::size_t>(sc8.store->config().num_pages));
  std::iota(all.begin(), all.end(), 0);
  pool.upload_pages(*sc8.store, all);
  cuda::DeviceRope rope(sc8.rope);
  rope.prepare(sc8.plan);
  cuda::ScheduleOptions opt;
  opt.forced_splits = splits;
  cuda::DevicePlan plan;
  plan.upload(sc8.plan, cuda::decode_schedule(sc8.plan, spec.params(), qdtype, opt));
  cuda::DecodeWorkspace ws;
  cuda::DeviceBuffer<float> lse(sc8.lse_size());
  gpu::GpuResult r;
  dispatch_dtype(qdtype, [&](auto tag) {
    using E = decltype(tag);
    const std::vector<E> qs = gpu::to_storage<E>(q);
    cuda::DeviceBuffer<E> dq(qs.size()), o(qs.size());
    dq.upload(std::span<const E>(qs.data(), qs.size()));
    LAZYATTN_CUDA_CHECK(cudaMemset(o.data(), 0xff, o.bytes()));  // NaN: unwritten cannot pass
    LAZYATTN_CUDA_CHECK(cudaMemset(lse.data(), 0xff, lse.bytes()));
    cuda::DecodeArgs a;
    a.dtype = qdtype;
    a.q = dq.data();
    a.o = o.data();
    a.maybe_lse = lse.data();
    a.layer = spec.layer;
    a.params = spec.params();
    cuda::decode(a, pool, plan, rope, ws);
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    for (const E& x : o.download()) r.out.push_back(to_float(x));
  });
  r.lse = lse.download();
  for (float x : r.out) r.unwritten += std::isnan(x) ? 1 : 0;
  for (float x : r.lse) r.unwritten += std::isnan(x) ? 1 : 0;
  return r;
}

// The fp8 decode of `base` at 0, 1 and 3 forced splits against the float64 reference over the
// same fp8 values, within the error rule's bar of the eager 16-bit baseline.
void check_fp8_decode(const ScenarioSpec& base, DType qdtype) {
  // The same scenario three ways (the same draws, so the same values and page ids): an fp8
  // store (the codes the kernel reads), a float store of their values (the reference's), and
  // a 16-bit store of them (the eager baseline's, which rounds them once more).
  ScenarioSpec s8 = base, sf = base, sb = base;
  s8.dtype = DType::kFloat8E4M3;
  sf.dtype = DType::kFloat32;
  sf.fp8_values = true;
  sb.dtype = qdtype;
  sb.fp8_values = true;
  const test::ref::Scenario sc8 = test::ref::make_scenario(s8);
  const test::ref::Scenario scf = test::ref::make_scenario(sf);
  const test::ref::Scenario scb = test::ref::make_scenario(sb);
  INFO(s8 << " queries " << to_string(qdtype) << "\n" << sc8.layout_text);
  REQUIRE(sc8.plan.page_ids == scf.plan.page_ids);
  REQUIRE(sc8.plan.page_ids == scb.plan.page_ids);

  const std::vector<float> q = gpu::rounded_queries(scb);
  test::ref::Result ref{std::vector<float>(scf.out_size()), std::vector<float>(scf.lse_size())};
  lazyattn::ref::scalar::decode(*scf.store, scf.plan, base.layer, scf.rope, base.params(), q,
                                ref.out, ref.lse);
  const double scale = gpu::max_abs(ref.out);
  const gpu::ErrorBars bars = gpu::eager_error_bars(scb, 0, ref.out, ref.lse);
  REQUIRE(bars.eager_unwritten == 0);
  for (int splits : {0, 1, 3}) {
    INFO("forced splits " << splits << " (0: heuristic)");
    const gpu::GpuResult got = fp8_decode(sc8, qdtype, q, splits);
    CHECK(got.unwritten == 0);
    const std::string out_report =
        gpu::check_error_rule(got.out, ref.out, bars.out, 1e-3 * scale + 1e-5);
    INFO(out_report);
    CHECK(out_report.empty());
    const std::string lse_report = gpu::check_error_rule(got.lse, ref.lse, bars.lse, 1e-3);
    INFO(lse_report);
    CHECK(lse_report.empty());
  }
}

}  // namespace

TEST_CASE("decode over fp8 pools: within 2x the 16-bit eager error over the same fp8 values",
          "[cuda][fp8][decode]") {
  // Half the sweeps' count (each case runs three scenarios and the eager baseline).
  const int cases = std::max(1, test::options().cuda_cases / 2);
  for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(cases); ++seed)
    check_fp8_decode(fp8_decode_spec(seed), seed % 3 == 0 ? DType::kFloat16 : DType::kBFloat16);
}

TEST_CASE("decode over fp8 pools of raw-form keys: within 2x the 16-bit eager error",
          "[cuda][fp8][decode][raw]") {
  // Raw documents in every plan (tails of every form), so every plan takes the raw-capable
  // build; rotate-half, interleaved and partial rotary, every schedule, head dims 64 to 256.
  const int cases = std::max(1, test::options().cuda_cases / 2);
  for (std::uint64_t seed = 1; seed <= static_cast<std::uint64_t>(cases); ++seed)
    check_fp8_decode(fp8_decode_spec(seed, /*raw=*/true), DType::kBFloat16);  // (its only build)
}

// Pages of 1 to 1024 keys over fp8 pools (the sweep's are 16 to 64; test_decode.cu has the
// 16-bit case): the tile loader's page ids below and above a tile's size, both forms, head dims
// 64 and 128.
TEST_CASE("decode over fp8 pools of pages of 1 to 1024 keys", "[cuda][fp8][decode][pages]") {
  std::uint64_t seed = 300;
  for (int page_size : {1, 8, 256, 1024})
    for (bool raw : {false, true}) {
      INFO("page size " << page_size << (raw ? " raw" : " local"));
      ScenarioSpec spec = fp8_decode_spec(++seed, raw);
      spec.page_size = page_size;
      spec.head_dim = page_size == 8 ? 64 : 128;
      check_fp8_decode(spec, DType::kBFloat16);
    }
}

TEST_CASE("write_tokens into an fp8 pool quantizes K after its rotation, and V", "[cuda][fp8]") {
  for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
    INFO(to_string(pairs));
    KvStoreConfig cfg{2, 4, 128, 16, DType::kFloat8E4M3, 64};
    cfg.k_scale = test::ref::fp8_scales(true, 2, 4);
    cfg.v_scale = test::ref::fp8_scales(false, 2, 4);
    // Values of about 1: |x / scale| up to about 4 / 0.015, inside e4m3's 448.
    gpu::WriteScene w(cfg, pairs);
    const std::int64_t n = gpu::WriteScene::kTokens;
    const auto ks = gpu::to_storage<bfloat16>(w.k), vs = gpu::to_storage<bfloat16>(w.v);
    cuda::DeviceBuffer<bfloat16> dk(ks.size()), dv(vs.size());
    dk.upload(std::span<const bfloat16>(ks.data(), ks.size()));
    dv.upload(std::span<const bfloat16>(vs.data(), vs.size()));
    // Tokens of the pool's own type are refused: an fp8 pool takes 16-bit tokens.
    CHECK_THROWS_WITH(cuda::write_tokens(w.pool, 1, dk.data(), dv.data(),
                                         static_cast<std::int32_t>(n), w.page.data(),
                                         w.slot.data(), w.pos.data(), w.drope),
                      Catch::Contains("float8_e4m3") &&
                          Catch::Contains("bfloat16 or float16"));
    cuda::write_tokens(w.pool, 1, DType::kBFloat16, dk.data(), dv.data(),
                       static_cast<std::int32_t>(n), w.page.data(), w.slot.data(), w.pos.data(),
                       w.drope);
    w.pool.download_pages(w.store, w.info.pages);
    CHECK(w.pool.fp8_saturated() == 0);
    const float8_e4m3* kp = w.store.k_pool<float8_e4m3>();
    const float8_e4m3* vp = w.store.v_pool<float8_e4m3>();
    int k_bad = 0, v_bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      for (int h = 0; h < 4; ++h) {
        const double k_s = w.store.k_scale(1, h), v_s = w.store.v_scale(1, h);
        const std::vector<double> x = w.rotated_k(ks, i, h);
        const std::int64_t at = w.at(1, i, h);
        for (int d = 0; d < 128; ++d) {
          // V: the host's rounding of the same float quotient, bit for bit.
          const float vq = to_float(vs[(i * 4 + h) * 128 + d]) / static_cast<float>(v_s);
          v_bad += vp[at + d].bits != from_float<float8_e4m3>(vq).bits;
          // K: rotated in fp32 on the device, so within half an e4m3 ulp of the exact rotation
          // (2^-4 relative; 2^-10 of the scale among subnormals), plus the rotation's 1e-6.
          const double got = to_float(kp[at + d]) * k_s;
          k_bad += !(std::fabs(got - x[d]) <= 0x1p-4 * std::fabs(x[d]) + 0x1p-10 * k_s + 1e-5);
        }
      }
    }
    CHECK(k_bad == 0);
    CHECK(v_bad == 0);

    // A value past the range: stored as 448 and counted.
    std::vector<bfloat16> big(static_cast<std::size_t>(4 * 128), from_float<bfloat16>(0.0f));
    big[5] = from_float<bfloat16>(100.0f);  // / 0.015 is far past 464
    cuda::DeviceBuffer<bfloat16> dbig(big.size());
    dbig.upload(std::span<const bfloat16>(big.data(), big.size()));
    cuda::copy_tokens(w.pool, 0, DType::kBFloat16, dbig.data(), dbig.data(), 1, w.page.data(),
                      w.slot.data());
    CHECK(w.pool.fp8_saturated() == 2);  // K and V
  }
}

TEST_CASE("DeviceReencode over fp8 pools re-quantizes K after its rotation and copies V's codes",
          "[cuda][fp8]") {
  for (StorageForm form : {StorageForm::kLocal, StorageForm::kRaw}) {
    INFO("documents in " << (form == StorageForm::kRaw ? "raw" : "local") << " form");
    ScenarioSpec s = fp8_decode_spec(17);
    s.dtype = DType::kFloat8E4M3;
    s.doc_form = s.tail_form = form;
    const test::ref::Scenario sc = test::ref::make_scenario(s);
    const Plan& plan = sc.plan;
    const KvStoreConfig cfg = gpu::with_spare_pages(sc.store->config(), plan);
    cuda::DevicePool pool(cfg);
    std::vector<std::int32_t> all(static_cast<std::size_t>(sc.store->config().num_pages));
    std::iota(all.begin(), all.end(), 0);
    pool.upload_pages(*sc.store, all);
    cuda::DeviceRope rope(sc.rope);
    rope.prepare(plan);
    // Every segment copied into fresh pages past the store's, as the eager baseline does.
    cuda::ReencodeJob job;
    std::vector<std::int32_t> dst_all;
    std::int32_t next = static_cast<std::int32_t>(sc.store->config().num_pages);
    for (std::int32_t g = 0; g < plan.num_segments(); ++g) {
      const std::int32_t n = plan.segment_page_indptr[g + 1] - plan.segment_page_indptr[g];
      std::vector<std::int32_t> dst(static_cast<std::size_t>(n));
      std::iota(dst.begin(), dst.end(), next);
      next += n;
      dst_all.insert(dst_all.end(), dst.begin(), dst.end());
      job.add(std::span<const std::int32_t>(plan.page_ids.data() + plan.segment_page_indptr[g],
                                            static_cast<std::size_t>(n)),
              dst, plan.segment_length[g], plan.segment_start[g],
              static_cast<StorageForm>(plan.segment_form[g]));
    }
    cuda::DeviceReencode re;
    re.upload(job);
    re.run(pool, s.layer, rope);
    KvStore host(cfg);
    pool.download_pages(host, dst_all);
    // The expected codes, from the source codes: K dequantized, rotated in double (R(start) on a
    // local-form key, R(start + i) on a raw one), quantized with the same scale; V's as stored.
    const int H = cfg.num_kv_heads, D = cfg.head_dim, P = cfg.page_size;
    // Element offset of (page, head, slot) of the layer in a pool of `pages` pages (the source
    // store has the spare pages' fewer).
    auto at_in = [&](std::int64_t pages, std::int32_t page, int h, std::int64_t slot) {
      const std::int64_t head = (std::int64_t{s.layer} * pages + page) * H + h;
      return static_cast<std::size_t>(head * P * D + slot * D);
    };
    auto src_at = [&](std::int32_t page, int h, std::int64_t slot) {
      return at_in(sc.store->config().num_pages, page, h, slot);
    };
    auto at = [&](std::int32_t page, int h, std::int64_t slot) {
      return at_in(cfg.num_pages, page, h, slot);
    };
    const auto* src_k = reinterpret_cast<const float8_e4m3*>(sc.store->k_bytes());
    const auto* src_v = reinterpret_cast<const float8_e4m3*>(sc.store->v_bytes());
    const auto* got_k = reinterpret_cast<const float8_e4m3*>(host.k_bytes());
    const auto* got_v = reinterpret_cast<const float8_e4m3*>(host.v_bytes());
    std::int64_t checked = 0, exact = 0, off_by_more = 0, v_differ = 0;
    for (std::int32_t g = 0; g < job.num_segments(); ++g) {
      const bool raw = job.seg_form[g] == static_cast<std::uint8_t>(StorageForm::kRaw);
      for (std::int32_t i = 0; i < job.seg_length[g]; ++i) {
        const std::int32_t sp = job.src_pages[job.seg_src_begin[g] + i / P];
        const std::int32_t dp = job.dst_pages[job.seg_dst_begin[g] + i / P];
        for (int h = 0; h < H; ++h) {
          const float scale = cfg.k_scale[static_cast<std::size_t>(s.layer * H + h)];
          std::vector<double> k(static_cast<std::size_t>(D));
          for (int d = 0; d < D; ++d)
            k[d] = to_float(src_k[src_at(sp, h, i % P) + d]) * double{scale};
          lazyattn::rope::rotate(sc.rope.base_frequencies(), job.seg_start[g] + (raw ? i : 0),
                                 std::span<double>(k));
          for (int d = 0; d < D; ++d) {
            // (saturating at +-448, as the device's conversion does)
            const double q = std::clamp(k[d] / scale, -448.0, 448.0);
            const float want = to_float(from_float<float8_e4m3>(static_cast<float>(q)));
            const float got = to_float(got_k[at(dp, h, i % P) + d]);
            ++checked;
            exact += got == want ? 1 : 0;
            // One e4m3 step at most (the device's fp32 angles against double), 2^-3 relative.
            off_by_more += std::fabs(got - want) <= std::fabs(want) * 0x1p-3f + 0x1p-9f ? 0 : 1;
            const bool same_v =
                got_v[at(dp, h, i % P) + d].bits == src_v[src_at(sp, h, i % P) + d].bits;
            v_differ += same_v ? 0 : 1;
          }
        }
      }
    }
    INFO(exact << " of " << checked << " K codes exact");
    REQUIRE(checked > 0);
    CHECK(off_by_more == 0);
    CHECK(exact >= checked * 99 / 100);
    CHECK(v_differ == 0);
  }
}

TEST_CASE("fp8 pools: calls that do not take them say so", "[cuda][fp8][errors]") {
  ScenarioSpec s = fp8_decode_spec(3);
  s.dtype = DType::kFloat8E4M3;
  s.doc_form = StorageForm::kRaw;
  const test::ref::Scenario sc = test::ref::make_scenario(s);
  cuda::DevicePool pool(sc.store->config());
  cuda::DeviceRope rope(sc.rope);
  rope.prepare(sc.plan);
  cuda::DevicePlan plan;
  plan.upload(sc.plan, cuda::decode_schedule(sc.plan, s.params(), DType::kBFloat16));
  cuda::DeviceBuffer<bfloat16> q(static_cast<std::size_t>(sc.out_size())), o(q.size());
  cuda::DecodeArgs a;
  a.dtype = DType::kBFloat16;
  a.q = q.data();
  a.o = o.data();
  a.layer = s.layer;
  a.params = s.params();
  cuda::DecodeWorkspace ws;
  a.dtype = DType::kFloat16;  // the raw-form fp8 decode is built for bfloat16 queries alone
  CHECK_THROWS_WITH(cuda::decode(a, pool, plan, rope, ws),
                    Catch::Contains("float16 queries, expected bfloat16"));
  a.dtype = DType::kFloat32;
  CHECK_THROWS_WITH(cuda::decode(a, pool, plan, rope, ws),
                    Catch::Contains("dtype float32 over a float8_e4m3 pool"));
}
