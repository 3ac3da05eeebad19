// Both references at far positions: RoPE depends only on position differences, so shifting a whole
// layout (every segment start and every query position) must leave the output as it was, by
// 2^40, 2^60 and up to the 2^62 the references accept. Exact angle reduction makes that hold for
// eager re-encoding and full attention too, which rotate at absolute positions.
#include "support/catch.hpp"
#include <cstdint>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

// The unshifted layouts start at 1000, past every schedule's original context here, so that
// longrope takes its long factors at every shift. The largest shift leaves 2^20 positions below
// 2^62 for the layout (gaps, tails and the empty segment 5000 past the tail).
inline constexpr std::int64_t kBase = 1000;
inline constexpr std::int64_t kShifts[] = {std::int64_t{1} << 40, std::int64_t{1} << 60,
                                           (std::int64_t{1} << 62) - (std::int64_t{1} << 20)};

// Schedules whose frequencies do not move with the shift (dynamic's grow with the request length,
// so a shifted layout is a different rotation, not the same one moved).
inline constexpr RopeType kShiftInvariant[] = {
    RopeType::kDefault, RopeType::kLinear, RopeType::kYarn, RopeType::kLlama3, RopeType::kLongrope};

// Raw or local documents and tails: the absolute tail form is left out, as its stored bytes are
// rotated at the absolute positions and so differ (by float rounding) from one shift to another.
ScenarioSpec far_spec(RopeType schedule, StorageForm form, PairLayout pairs, LayoutKind layout,
                      std::uint64_t seed) {
  ScenarioSpec s;
  s.schedule = schedule;
  s.doc_form = form;
  s.tail_form = form;
  s.pair_layout = pairs;
  s.layout = layout;
  s.head_dim = 128;
  s.partial_rotary = pairs == PairLayout::kHalf ? 1.0 : 0.5;
  s.num_qo_heads = 4;
  s.num_kv_heads = 2;
  s.num_queries = {1, 5};
  s.empty_segment = layout == LayoutKind::kGapped;
  s.base_position = kBase;
  s.seed = seed;
  return s;
}

// Each of the impl's three paths (deferred, eager, full attention) on the spec shifted by `shift`
// against the same path unshifted. make_scenario draws the same data, lengths and gaps whatever
// the base, so the two differ in their positions only.
void check_shift(const Impl& impl, ScenarioSpec spec, std::int64_t shift, Tolerance tol) {
  Scenario near = make_scenario(spec);
  spec.base_position += shift;
  Scenario far = make_scenario(spec);
  INFO(impl.name << ": " << spec);
  INFO(far.layout_text);
  for (Method method : {Method::kDeferred, Method::kEager}) {
    INFO(lazyattn::ref::to_string(method));
    Result a = run_attend(impl, near, method);
    Result b = run_attend(impl, far, method);
    LAZYATTN_CHECK_CLOSE(b.out, a.out, tol);
    LAZYATTN_CHECK_CLOSE(b.lse, a.lse, tol);
  }
  INFO("dense_attention");
  Result a = run_dense(impl, near);
  Result b = run_dense(impl, far);
  LAZYATTN_CHECK_CLOSE(b.out, a.out, tol);
  LAZYATTN_CHECK_CLOSE(b.lse, a.lse, tol);
}

// Schedules x forms (longrope: raw only) x pair layouts x two layouts, each at every shift; under
// the sanitizers every third combination.
template <class F>
void for_each_far_case(F f) {
  std::uint64_t seed = 1;
  int n = 0;
  const int stride = sweep(1, 3);
  for (RopeType schedule : kShiftInvariant) {
    for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
      if (form == StorageForm::kLocal && schedule == RopeType::kLongrope) continue;
      for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
        for (LayoutKind layout : {LayoutKind::kGapped, LayoutKind::kParallel}) {
          if (n++ % stride != 0) continue;
          for (std::int64_t shift : kShifts) {
            f(far_spec(schedule, form, pairs, layout, seed++), shift);
          }
        }
      }
    }
  }
}

}  // namespace

// The outputs are float32: 1e-12 asks for the same float, which angles rounded before they are
// reduced do not give (p * w in long double is up to 0.06 rad off at 2^60).
TEST_CASE("scalar: a layout shifted by 2^40, 2^60 and 2^62 - 2^20 gives the same output",
          "[ref][far]") {
  for_each_far_case([](const ScenarioSpec& s, std::int64_t shift) {
    check_shift(kScalar, s, shift, Tolerance{1e-12, 1e-12});
  });
}

// ref::eigen computes in float32 (tiles' angles combined in float): the shift may move its
// output by its own rounding, never more.
TEST_CASE("eigen: a layout shifted by 2^40, 2^60 and 2^62 - 2^20 gives the same output",
          "[ref][far][eigen]") {
  for_each_far_case([](const ScenarioSpec& s, std::int64_t shift) {
    check_shift(kEigen, s, shift, float_tolerance());
  });
}
