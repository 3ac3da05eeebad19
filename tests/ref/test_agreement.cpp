// Scalar vs Eigen on the same inputs: the two references share no index math and no trigonometry
// (long double cosl/sinl of the reduced angle vs rope::cos_sin and float tiles), so agreement
// checks both at once. Both reduce angles with the library's Q0.64 turns per position, which
// tests/rope/test_angle.cpp checks against binary128.
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

void check_agreement(const ScenarioSpec& spec) {
  INFO(spec);
  Scenario sc = make_scenario(spec);
  INFO(sc.layout_text);
  for (Method method : {Method::kDeferred, Method::kEager}) {
    INFO(lazyattn::ref::to_string(method));
    Result s = run_attend(kScalar, sc, method);
    Result e = run_attend(kEigen, sc, method);
    LAZYATTN_CHECK_CLOSE(e.out, s.out, float_tolerance());
    LAZYATTN_CHECK_CLOSE(e.lse, s.lse, float_tolerance());
  }
  INFO("dense_attention");
  Result s = run_dense(kScalar, sc);
  Result e = run_dense(kEigen, sc);
  LAZYATTN_CHECK_CLOSE(e.out, s.out, float_tolerance());
  LAZYATTN_CHECK_CLOSE(e.lse, s.lse, float_tolerance());
}

}  // namespace

TEST_CASE("scalar and eigen agree: schedules x forms x pair layouts x layouts", "[ref][agree]") {
  Rng rng(99);
  int n = 0;
  const int stride = sweep(1, 3);
  for (RopeType schedule : kAllSchedules) {
    const bool local_ok = schedule != RopeType::kDynamic && schedule != RopeType::kLongrope;
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      if (form == StorageForm::kLocal && !local_ok) continue;
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        for (LayoutKind layout : kAllLayouts) {
          if (n++ % stride != 0) continue;
          ScenarioSpec s;
          s.schedule = schedule;
          s.doc_form = form;
          s.tail_form = local_ok && rng() % 2 ? StorageForm::kLocal : StorageForm::kRaw;
          s.pair_layout = pairs;
          s.layout = layout;
          s.seed = rng();
          s.num_kv_heads = 1 + static_cast<int>(rng() % 2);
          const int groups[] = {1, 4, 8};
          s.num_qo_heads = s.num_kv_heads * groups[rng() % 3];
          s.head_dim = rng() % 2 ? 64 : 128;
          s.partial_rotary = rng() % 3 == 0 ? 0.5 : 1.0;
          const int pages[] = {1, 8, 16};
          s.page_size = pages[rng() % 3];
          s.doc_lengths = {static_cast<std::int64_t>(1 + rng() % 40),
                           static_cast<std::int64_t>(1 + rng() % 40), 16};
          s.docs_per_request = 2;
          s.num_queries = {1, rng() % 2 ? 17 : 3};
          const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
          s.dtype = dtypes[rng() % 3];
          const std::int64_t bases[] = {0, 500, (std::int64_t{1} << 24) - 30,
                                        std::int64_t{1} << 40};
          s.base_position = bases[rng() % 4];
          if (rng() % 4 == 0) s.logits_soft_cap = 2.0;
          check_agreement(s);
        }
      }
    }
  }
}

TEST_CASE("scalar and eigen agree: GQA 1/4/8 x head dims 64/128/256", "[ref][agree]") {
  for (int group : {1, 4, 8}) {
    for (int head_dim : {64, 128, 256}) {
      ScenarioSpec s;
      s.num_kv_heads = 2;
      s.num_qo_heads = 2 * group;
      s.head_dim = head_dim;
      s.doc_form = head_dim == 128 ? StorageForm::kRaw : StorageForm::kLocal;
      s.schedule = RopeType::kLlama3;
      s.num_queries = {1, 5};
      s.doc_lengths = {17, 33};
      s.docs_per_request = 2;
      s.seed = static_cast<std::uint64_t>(group * 1000 + head_dim);
      check_agreement(s);
    }
  }
}

// ref::eigen's deferred path gathers up to 64 keys of a segment into one tile (several pages, or
// part of one when pages are larger) and turns raw keys by angles combined from a per-tile base and
// a table of offsets: segments longer than a tile, pages smaller and larger than it, a tail whose
// causal mask spans two tiles, and positions up to 2^40.
TEST_CASE("scalar and eigen agree: key tiles across pages, long segments, far positions",
          "[ref][agree]") {
  int n = 0;
  const int stride = sweep(1, 3);
  for (int page_size : {1, 32, 128}) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        if (n++ % stride != 0) continue;
        ScenarioSpec s;
        s.page_size = page_size;
        s.doc_form = form;
        s.tail_form = form;
        s.pair_layout = pairs;
        s.schedule = RopeType::kLlama3;
        s.layout = LayoutKind::kGapped;
        s.head_dim = 128;
        s.partial_rotary = pairs == PairLayout::kHalf ? 1.0 : 0.5;
        s.num_qo_heads = 8;
        s.num_kv_heads = 2;
        s.doc_lengths = {65, 130, 200, 1};
        s.docs_per_request = 3;
        s.num_queries = {1, 70};
        s.base_position = n % 2 ? (std::int64_t{1} << 40) + 12345 : 0;
        s.seed = static_cast<std::uint64_t>(n);
        check_agreement(s);
      }
    }
  }
}
