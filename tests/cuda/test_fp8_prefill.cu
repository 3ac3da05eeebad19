// [cuda] the prefill over fp8 (e4m3) pools: the Hopper kernel after its dequantizing pass
// (prefill/fp8_tiles.cuh), in every storage form (raw-form keys rotated by that pass), rotary
// layout, head dim and schedule of the prefill sweep, against the float64 reference over the same
// dequantized values, with the error rule's bar set by the eager baseline in 16 bits over those
// values; and the calls it refuses, by name.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "cuda/harness.cuh"
#include "support/options.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using lazyattn::test::ref::ScenarioSpec;

namespace {

// The scenario `base` three ways, the same draws (so the same values and page ids): an fp8
// store (the codes the kernel reads), a float store of their values (the reference's), and a
// 16-bit store of them in the queries' type (the eager baseline's, which rounds them once more).
struct Fp8Scenes {
  DType qdtype;
  test::ref::Scenario fp8, exact, eager;
  explicit Fp8Scenes(const ScenarioSpec& base)
      : qdtype(base.dtype), fp8(make(base, DType::kFloat8E4M3, false)),
        exact(make(base, DType::kFloat32, true)), eager(make(base, base.dtype, true)) {}
  static test::ref::Scenario make(ScenarioSpec s, DType dtype, bool fp8_values) {
    s.dtype = dtype;
    s.fp8_values = fp8_values;
    return test::ref::make_scenario(s);
  }
};

}  // namespace

TEST_CASE("prefill over fp8 pools: within 2x the 16-bit eager error over the same fp8 values",
          "[cuda][fp8][prefill]") {
  // Half the prefill sweep's count (each case runs three scenarios and the eager baseline); seeds
  // of their own, so the draws are not the 16-bit sweep's.
  const int cases = std::max(1, test::options().cuda_cases / 2);
  for (std::uint64_t seed = 501; seed < 501 + static_cast<std::uint64_t>(cases); ++seed) {
    ScenarioSpec base = gpu::random_prefill_spec(seed);
    // The first three cases at head dims 256, 128 and 64, so that the sanitizers' short run
    // (--cuda-cases 6: three cases) reaches every tile shape of the Hopper kernel over fp8
    // scratch tiles.
    if (seed < 504) base.head_dim = std::array{256, 128, 64}[seed - 501];
    const Fp8Scenes sc(base);
    INFO(sc.fp8.spec << " queries " << to_string(sc.qdtype) << "\n" << sc.fp8.layout_text);
    REQUIRE(sc.fp8.plan.page_ids == sc.exact.plan.page_ids);
    REQUIRE(sc.fp8.plan.page_ids == sc.eager.plan.page_ids);

    const std::vector<float> q = gpu::rounded_queries(sc.eager);
    test::ref::Result ref{std::vector<float>(sc.exact.out_size()),
                          std::vector<float>(sc.exact.lse_size())};
    lazyattn::ref::scalar::prefill(*sc.exact.store, sc.exact.plan, base.layer, sc.exact.rope,
                                   base.params(), q, ref.out, ref.lse);
    const double scale = gpu::max_abs(ref.out);
    const gpu::ErrorBars bars = gpu::eager_error_bars(sc.eager, -1, ref.out, ref.lse);
    REQUIRE(bars.eager_unwritten == 0);
    auto check_result = [&](const gpu::GpuResult& got, double extra_out) {
      CHECK(got.unwritten == 0);
      const std::string r1 =
          gpu::check_error_rule(got.out, ref.out, bars.out, 1e-3 * scale + 1e-5 + extra_out);
      INFO(r1);
      CHECK(r1.empty());
      const std::string r2 = gpu::check_error_rule(got.lse, ref.lse, bars.lse, 1e-3);
      INFO(r2);
      CHECK(r2.empty());
    };
    gpu::DeviceScenario ds(sc.fp8, -1, sc.qdtype);
    for (int splits : {0, 1, 3}) {
      INFO("kv_splits " << splits << " (0: automatic)");
      ds.prefill_kv_splits = splits;
      check_result(ds.deferred(), 0.0);
    }
    // Queries rotated at their own positions, as models hand them over: one rounding more than
    // the eager baseline's query (test_prefill.cu's check_prefill says why the extra half ulp).
    INFO("queries rotated at their own positions (query_rotated)");
    ds.prefill_kv_splits = 0;
    const double ulp = sc.qdtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
    check_result(ds.deferred_rotated(), ulp * scale);
  }
}

TEST_CASE("prefill over fp8 pools refuses what it cannot do, by name, before any launch",
          "[cuda][fp8][prefill][errors]") {
  ScenarioSpec base = gpu::random_prefill_spec(7);
  base.head_dim = 128;
  base.dtype = DType::kBFloat16;
  const Fp8Scenes sc(base);
  gpu::DeviceScenario ds(sc.fp8, -1, DType::kBFloat16);
  // The mma.sync kernel does not read fp8 pools.
  ds.prefill_kernel = cuda::PrefillKernel::kMmaSync;
  CHECK_THROWS_WITH(ds.deferred(), Catch::Contains("mma_sync over a float8_e4m3 pool"));
  // No workspace: no tile scratch to dequantize into.
  ds.prefill_kernel = cuda::PrefillKernel::kAuto;
  cuda::PrefillArgs a;
  a.dtype = DType::kBFloat16;
  a.q = ds.q.data();
  a.o = ds.o.data();
  a.layer = base.layer;
  a.params = base.params();
  CHECK_THROWS_WITH(cuda::prefill(a, ds.pool, ds.plan, ds.rope),
                    Catch::Contains("float8_e4m3") && Catch::Contains("no tile scratch"));
  // Scratch too small by one element, and a misaligned one.
  const std::int64_t need = cuda::prefill_tile_elems(a, ds.plan, ds.rope, DType::kFloat8E4M3);
  REQUIRE(need > 0);
  cuda::DeviceBuffer<std::uint16_t> tiles(static_cast<std::size_t>(need) + 8);
  cuda::PrefillScratch scratch;
  scratch.tiles = tiles.data();
  scratch.tiles_elems = need - 1;
  CHECK_THROWS_WITH(cuda::prefill(a, ds.pool, ds.plan, ds.rope, scratch),
                    Catch::Contains("no tile scratch"));
  scratch.tiles = tiles.data() + 1;
  scratch.tiles_elems = need;
  CHECK_THROWS_WITH(cuda::prefill(a, ds.pool, ds.plan, ds.rope, scratch),
                    Catch::Contains("16-byte aligned"));
  // fp8 queries: the queries and outputs are 16-bit.
  a.dtype = DType::kFloat8E4M3;
  scratch.tiles = tiles.data();
  CHECK_THROWS_WITH(cuda::prefill(a, ds.pool, ds.plan, ds.rope, scratch),
                    Catch::Contains("dtype float8_e4m3 over a float8_e4m3 pool"));
  // And with the right scratch it runs (the sweep above checks its values).
  a.dtype = DType::kBFloat16;
  cuda::prefill(a, ds.pool, ds.plan, ds.rope, scratch);
  LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
}
