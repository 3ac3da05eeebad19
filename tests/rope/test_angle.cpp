// Tests for angle.hpp: Q0.64 turns per position, and cos/sin against long-double truth for every
// schedule at the positions where float32 angles break down.
#include <fmt/format.h>

#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "lazyattn/rope.hpp"
#include "rope/model_configs.hpp"

using namespace lazyattn;
using lazyattn::test::rope::all_schedules;

namespace {

// Positions below 2^24 that stress the reduction: the top of the range, around every power of two,
// random ones, and all of them negated (inverse rotations).
std::vector<std::int64_t> stress_positions() {
  std::vector<std::int64_t> p;
  const std::int64_t top = (std::int64_t{1} << 24) - 1;
  p.push_back(top);
  p.push_back(top - 1);
  for (int k = 0; k < 24; ++k) {
    std::int64_t two_k = std::int64_t{1} << k;
    for (std::int64_t d : {-1, 0, 1}) {
      if (two_k + d >= 0 && two_k + d <= top) p.push_back(two_k + d);
    }
  }
  std::mt19937_64 rng(20260611);
  std::uniform_int_distribution<std::int64_t> any(0, top);
  for (int i = 0; i < 200; ++i) p.push_back(any(rng));
  std::size_t n = p.size();
  for (std::size_t i = 0; i < n; ++i) p.push_back(-p[i]);
  return p;
}

struct AngleError {
  double max_error = 0;
  std::int64_t worst_position = 0;
  int worst_pair = 0;
};

// Largest |cos - cosl(p w)|, |sin - sinl(p w)| over positions and pairs. p * w in long double
// (64-bit mantissa) is within 2^24 * 2^-64 rad of the exact product of the doubles.
AngleError angle_error(const RopeFrequencies& f, const std::vector<std::int64_t>& positions) {
  AngleError e;
  for (std::int64_t p : positions) {
    for (int i = 0; i < f.num_pairs(); ++i) {
      rope::CosSin cs = rope::cos_sin(p, f.turns[i]);
      long double a = static_cast<long double>(p) * static_cast<long double>(f.inv_freq[i]);
      double err =
          static_cast<double>(std::max(std::fabs(cs.cos - cosl(a)), std::fabs(cs.sin - sinl(a))));
      if (!(err <= e.max_error)) {  // also catches NaN
        e.max_error = err;
        e.worst_position = p;
        e.worst_pair = i;
      }
    }
  }
  return e;
}

}  // namespace

TEST_CASE("cos/sin are within 1e-6 of float64 truth for every schedule below 2^24",
          "[rope][angle]") {
  auto positions = stress_positions();
  for (const auto& s : all_schedules()) {
    RopeFrequencies f = compute_rope_frequencies(s.config, s.seq_len);
    AngleError e = angle_error(f, positions);
    INFO(fmt::format("{}: max error {:.3g} at position {} pair {}", s.name, e.max_error,
                     e.worst_position, e.worst_pair));
    CHECK(e.max_error <= 1e-6);  // the angle rule of docs/02-math.md
    // What the exact reduction actually gives (angle.hpp: < 3e-12 rad of reduction error), so a
    // regression that stays under the contract still shows.
    CHECK(e.max_error <= 1e-10);
  }
}

TEST_CASE("the same check fails for float32 angles, so it can tell", "[rope][angle]") {
  RopeFrequencies f = compute_rope_frequencies(all_schedules().front().config);
  const std::int64_t p = (std::int64_t{1} << 24) - 1;
  double worst = 0;
  for (int i = 0; i < f.num_pairs(); ++i) {
    float a = static_cast<float>(p) * static_cast<float>(f.inv_freq[i]);
    long double truth = static_cast<long double>(p) * static_cast<long double>(f.inv_freq[i]);
    worst = std::max(worst, static_cast<double>(std::fabs(std::cos(a) - cosl(truth))));
  }
  CHECK(worst > 1e-6);
}

// The exact fraction of a turn, frac(w / 2pi), needs more than long double's 64 bits once w > 1
// (the integer part eats them), so use binary128 where the compiler has it: 1 / 2pi as a sum of
// three doubles (106+ bits), times w, floored. Without it, only w <= 1 is checked.
#if defined(__SIZEOF_FLOAT128__)
using Wide = __float128;
constexpr bool kWideIsExact = true;
#else
using Wide = long double;
constexpr bool kWideIsExact = false;
#endif

Wide turns_truth(double w) {
  const Wide inv_two_pi = static_cast<Wide>(0.15915494309189535) +
                          static_cast<Wide>(-9.839338337591243e-18) +
                          static_cast<Wide>(-5.360718141446502e-34);
  Wide t = static_cast<Wide>(w) * inv_two_pi;
  return t - static_cast<Wide>(static_cast<std::int64_t>(t));  // w >= 0: truncation is floor
}

TEST_CASE("turns_per_position is inv_freq / 2pi modulo one turn, to 2^-63", "[rope][angle]") {
  std::vector<double> freqs = {1.0, 0.5, 1e-9, 3.0e-7, 0.8659643530845642, std::numbers::pi / 2};
  if (kWideIsExact) {
    for (double w : {6.0, 7.0, 100.0, 12345.678, std::numbers::pi, 2 * std::numbers::pi}) {
      freqs.push_back(w);
    }
  }
  for (const auto& s : all_schedules()) {
    for (double w : compute_rope_frequencies(s.config, s.seq_len).inv_freq) freqs.push_back(w);
  }
  for (double w : freqs) {
    Wide truth = turns_truth(w);
    Wide got = static_cast<Wide>(rope::turns_per_position(w)) / static_cast<Wide>(0x1p64);
    Wide diff = got - truth;
    if (diff > static_cast<Wide>(0.5)) diff -= 1;   // modulo one turn: 0.999.. and 0.000.. are
    if (diff < static_cast<Wide>(-0.5)) diff += 1;  // neighbours
    INFO(fmt::format("inv_freq {:.17g}: turns {:#018x}, error {:.3g} turns", w,
                     rope::turns_per_position(w), static_cast<double>(diff)));
    // Rounding to Q0.64 is worth 2^-65; allow one more unit of slack for the double-double.
    CHECK(std::fabs(static_cast<double>(diff)) <= 0x1p-63);
  }
  CHECK(rope::turns_per_position(0.0) == 0);
  // fl(pi/2) is 6.1e-17 below pi/2, i.e. 179.7 units of 2^-64 turn short of a quarter turn.
  CHECK(rope::turns_per_position(std::numbers::pi / 2) == (std::uint64_t{1} << 62) - 180);
}

TEST_CASE("angles wrap exactly: negation and sums are exact in Q0.64", "[rope][angle]") {
  RopeFrequencies f = compute_rope_frequencies(all_schedules().front().config);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> any(std::int64_t{-1} << 62, std::int64_t{1} << 62);
  for (int trial = 0; trial < 100; ++trial) {
    std::int64_t a = any(rng);
    std::int64_t b = any(rng);
    for (std::uint64_t t : f.turns) {
      REQUIRE(rope::angle_turns_q64(-a, t) == std::uint64_t{0} - rope::angle_turns_q64(a, t));
      REQUIRE(rope::angle_turns_q64(a + b, t) ==
              rope::angle_turns_q64(a, t) + rope::angle_turns_q64(b, t));
    }
  }
  // INT64_MIN has no negation but still has an angle; the product wraps instead of overflowing.
  std::uint64_t t = f.turns[1];
  CHECK(rope::angle_turns_q64(std::numeric_limits<std::int64_t>::min(), t) ==
        (std::uint64_t{1} << 63) * t);
  // The signed fraction lies in [-0.5, 0.5).
  for (std::int64_t p : stress_positions()) {
    double x = rope::angle_turns(p, t);
    REQUIRE(x >= -0.5);
    REQUIRE(x < 0.5);
  }
}

TEST_CASE("cos_sin at position 0 is exactly (1, 0) and matches hand values", "[rope][angle]") {
  for (std::uint64_t t : {std::uint64_t{0}, std::uint64_t{12345}, ~std::uint64_t{0}}) {
    rope::CosSin cs = rope::cos_sin(0, t);
    CHECK(cs.cos == 1.0);
    CHECK(cs.sin == 0.0);
  }
  // A quarter turn per position: position 1 is 90 degrees, position 2 is 180, position -1 is -90.
  std::uint64_t quarter = std::uint64_t{1} << 62;
  CHECK(rope::cos_sin(1, quarter).sin == Approx(1.0).margin(1e-15));
  CHECK(rope::cos_sin(1, quarter).cos == Approx(0.0).margin(1e-15));
  CHECK(rope::cos_sin(2, quarter).cos == Approx(-1.0).margin(1e-15));
  CHECK(rope::cos_sin(-1, quarter).sin == Approx(-1.0).margin(1e-15));
}
