// The core claim, on both references: deferred attention == eager re-encoding == full attention at
// the same positions, for random layouts, schedules, storage forms, pair layouts, GQA ratios, head
// dims, page sizes, query counts, element types and positions up to 2^40.
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

// Deferred vs eager on the same stored bytes (tight), and each vs full attention from the original
// float K/V (tolerance of the store's element type).
void check_equivalence(const Impl& impl, const ScenarioSpec& spec) {
  INFO(impl.name << ": " << spec);
  Scenario sc = make_scenario(spec);
  INFO(sc.layout_text);
  Result deferred = run_attend(impl, sc, Method::kDeferred);
  Result eager = run_attend(impl, sc, Method::kEager);
  Result full = run_dense(impl, sc);
  {
    INFO("deferred vs eager, out");
    LAZYATTN_CHECK_CLOSE(deferred.out, eager.out, float_tolerance());
  }
  {
    INFO("deferred vs eager, lse");
    LAZYATTN_CHECK_CLOSE(deferred.lse, eager.lse, float_tolerance());
  }
  Tolerance tol = stored_tolerance(spec.dtype);
  {
    INFO("deferred vs full attention, out");
    LAZYATTN_CHECK_CLOSE(deferred.out, full.out, tol);
  }
  {
    INFO("deferred vs full attention, lse");
    LAZYATTN_CHECK_CLOSE(deferred.lse, full.lse, tol);
  }
  {
    INFO("eager vs full attention, out");
    LAZYATTN_CHECK_CLOSE(eager.out, full.out, tol);
  }
}

template <class T, std::size_t N>
T one_of(Rng& rng, const T (&options)[N]) {
  return options[std::uniform_int_distribution<std::size_t>(0, N - 1)(rng)];
}

// A random case along the fixed axes; `small` keeps the scalar reference quick.
ScenarioSpec random_spec(Rng& rng, RopeType schedule, StorageForm doc_form, PairLayout pairs,
                         LayoutKind layout, bool small) {
  ScenarioSpec s;
  s.schedule = schedule;
  s.doc_form = doc_form;
  s.pair_layout = pairs;
  s.layout = layout;
  s.seed = rng();
  const int kv_heads[] = {1, 2};
  const int groups[] = {1, 4, 8};
  s.num_kv_heads = one_of(rng, kv_heads);
  s.num_qo_heads = s.num_kv_heads * one_of(rng, groups);
  const int dims_small[] = {64, 128};
  const int dims[] = {64, 128, 256};
  s.head_dim = small ? one_of(rng, dims_small) : one_of(rng, dims);
  const double partials[] = {1.0, 1.0, 0.5, 0.25};
  s.partial_rotary = one_of(rng, partials);
  const int pages[] = {1, 4, 16, 16, 32};
  s.page_size = one_of(rng, pages);
  const std::int64_t lengths[] = {1, 3, 15, 16, 17, 31, 32, 33, 64, 129};
  s.doc_lengths.clear();
  int num_docs = small ? 3 : 5;
  for (int i = 0; i < num_docs; ++i) s.doc_lengths.push_back(one_of(rng, lengths));
  s.docs_per_request = small ? 2 : 3;
  const std::int64_t queries[] = {1, 1, 2, 17, 33};
  const std::int64_t queries_small[] = {1, 1, 3, 17};
  s.num_queries = {small ? one_of(rng, queries_small) : one_of(rng, queries),
                   small ? one_of(rng, queries_small) : one_of(rng, queries)};
  s.num_requests = small ? 2 : 3;
  s.num_layers = std::uniform_int_distribution<int>(1, 2)(rng);
  s.layer = s.num_layers - 1;
  // Length-dependent schedules serve raw form only, tails included.
  const bool local_ok = schedule != RopeType::kDynamic && schedule != RopeType::kLongrope;
  const StorageForm tails[] = {StorageForm::kRaw, StorageForm::kLocal, StorageForm::kAbsolute};
  s.tail_form = local_ok ? one_of(rng, tails) : StorageForm::kRaw;
  const std::int64_t bases[] = {0, 0, 0, 1000, (std::int64_t{1} << 24) - 77};
  s.base_position = one_of(rng, bases);
  if (rng() % 4 == 0) s.logits_soft_cap = 3.0;
  if (rng() % 4 == 0) s.softmax_scale = 0.7 / std::sqrt(static_cast<double>(s.head_dim));
  const DType dtypes[] = {DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat16,
                          DType::kBFloat16};
  s.dtype = one_of(rng, dtypes);
  s.empty_segment = rng() % 6 == 0;
  return s;
}

// Every schedule x storage form x pair layout x layout kind (length-dependent schedules: raw only).
template <class F>
void for_each_axis(F f) {
  for (RopeType schedule : kAllSchedules) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      if (form == StorageForm::kLocal &&
          (schedule == RopeType::kDynamic || schedule == RopeType::kLongrope)) {
        continue;
      }
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        for (LayoutKind layout : kAllLayouts) f(schedule, form, pairs, layout);
      }
    }
  }
}

}  // namespace

TEST_CASE("eigen: deferred == eager == full attention over a random sweep", "[ref][eigen]") {
  Rng rng(20260601);
  const int repeats = sweep(2, 1);
  int cases = 0;
  for_each_axis([&](RopeType schedule, StorageForm form, PairLayout pairs, LayoutKind layout) {
    for (int i = 0; i < repeats; ++i) {
      check_equivalence(kEigen, random_spec(rng, schedule, form, pairs, layout, false));
      ++cases;
    }
  });
  CHECK(cases == 100 * repeats);
}

TEST_CASE("scalar: deferred == eager == full attention over a random sweep", "[ref][scalar]") {
  Rng rng(777);
  int n = 0;
  const int stride = sweep(1, 4);  // under sanitizers: every fourth combination
  for_each_axis([&](RopeType schedule, StorageForm form, PairLayout pairs, LayoutKind layout) {
    if (n++ % stride != 0) return;
    check_equivalence(kScalar, random_spec(rng, schedule, form, pairs, layout, true));
  });
}

TEST_CASE("deferred == eager == full: awkward structures", "[ref]") {
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      ScenarioSpec s;
      s.doc_form = form;
      s.tail_form = form;
      DYNAMIC_SECTION("one-token documents and a one-token tail, " << impl->name << ", "
                                                                   << to_string(form)) {
        s.doc_lengths = {1, 1, 1};
        s.docs_per_request = 3;
        s.num_queries = {1};
        s.max_tail_extra = 0;
        s.prefixes = false;
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("lengths on and off page boundaries, " << impl->name << ", "
                                                             << to_string(form)) {
        s.page_size = 16;
        s.doc_lengths = {15, 16, 17, 32, 33, 48};
        s.docs_per_request = 4;
        s.prefixes = false;
        check_equivalence(*impl, s);
        s.page_size = 1;
        s.seed = 2;
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("the same document twice in one request and across the batch, "
                      << impl->name << ", " << to_string(form)) {
        s.layout = LayoutKind::kRepeated;
        s.doc_lengths = {20, 35};
        s.num_requests = 4;
        s.docs_per_request = 2;
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("empty segments and prefixes, " << impl->name << ", " << to_string(form)) {
        s.empty_segment = true;
        s.doc_lengths = {9, 40, 16};
        s.num_queries = {2, 5};
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("no documents: the tail alone, " << impl->name << ", " << to_string(form)) {
        s.doc_lengths = {};
        s.num_queries = {4};
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("decode batch, " << impl->name << ", " << to_string(form)) {
        s.num_requests = 6;
        s.num_queries = {1};
        s.num_qo_heads = 16;
        s.num_kv_heads = 2;
        s.layout = LayoutKind::kShuffled;
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("prefill with 1, 17 and 33 queries in one batch, " << impl->name << ", "
                                                                         << to_string(form)) {
        s.num_requests = 3;
        s.num_queries = {1, 17, 33};
        s.max_tail_extra = 3;
        s.layout = LayoutKind::kGapped;
        check_equivalence(*impl, s);
      }
      DYNAMIC_SECTION("layer 2 of a three-layer store, " << impl->name << ", " << to_string(form)) {
        s.num_layers = 3;
        s.layer = 2;
        check_equivalence(*impl, s);
      }
    }
  }
}

TEST_CASE("deferred == eager == full at positions near 2^24 and at 2^40", "[ref]") {
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (std::int64_t base :
         {(std::int64_t{1} << 24) - 40, std::int64_t{1} << 40, (std::int64_t{1} << 40) + 123457}) {
      for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
        for (RopeType schedule : {RopeType::kDefault, RopeType::kYarn, RopeType::kLlama3}) {
          ScenarioSpec s;
          s.base_position = base;
          s.doc_form = form;
          s.tail_form = form;
          s.schedule = schedule;
          s.layout = LayoutKind::kGapped;
          s.num_queries = {1, 3};
          s.head_dim = 128;
          check_equivalence(*impl, s);
        }
      }
    }
  }
}

TEST_CASE("deferred == eager == full with fp16 and bf16 stores", "[ref]") {
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
        for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
          ScenarioSpec s;
          s.dtype = dtype;
          s.doc_form = form;
          s.tail_form = form;
          s.pair_layout = pairs;
          s.schedule = RopeType::kLlama3;
          s.num_queries = {1, 9};
          s.num_qo_heads = 8;
          s.num_kv_heads = 1;
          s.head_dim = 128;
          s.base_position = 3000;
          check_equivalence(*impl, s);
        }
      }
    }
  }
}

// The tolerances above must be tight enough to see a position error: moving ten keys by a single
// position (in the full-attention problem only) has to break the comparison.
TEST_CASE("a one-position shift is caught by the tolerances", "[ref]") {
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        ScenarioSpec s;
        s.doc_form = form;
        s.dtype = dtype;
        s.doc_lengths = {24, 24};
        s.docs_per_request = 2;
        s.prefixes = false;
        s.num_requests = 1;
        s.num_queries = {2};
        s.schedule = RopeType::kDefault;
        INFO(impl->name << ": " << s);
        Scenario sc = make_scenario(s);
        Result deferred = run_attend(*impl, sc, Method::kDeferred);
        REQUIRE(compare(std::span<const float>(deferred.out),
                        std::span<const float>(run_dense(*impl, sc).out), stored_tolerance(dtype))
                    .ok);
        for (int j = 0; j < 10; ++j) ++sc.dense[0].k_positions[static_cast<std::size_t>(j)];
        Comparison shifted =
            compare(std::span<const float>(deferred.out),
                    std::span<const float>(run_dense(*impl, sc).out), stored_tolerance(dtype));
        INFO(shifted.report);
        CHECK_FALSE(shifted.ok);
      }
    }
  }
}
