// Tests for rotate.hpp: R(p) is a rotation (norm, composition, inverse), the relative identity the
// library rests on, partial rotary, the two pair layouts, and int64 overflow at the edges.
#include <fmt/format.h>

#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "lazyattn/rope.hpp"
#include "rope/model_configs.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

using namespace lazyattn;
using lazyattn::test::Tolerance;
using lazyattn::test::rope::all_schedules;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

std::vector<double> random_vector(std::size_t n, test::Rng& rng) {
  auto v = test::random_normal(n, rng);
  return std::vector<double>(v.begin(), v.end());
}

std::vector<double> rotated(const RopeFrequencies& f, std::int64_t p, std::vector<double> x) {
  rope::rotate(f, p, std::span<double>(x));
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

std::vector<std::int64_t> some_positions(test::Rng& rng) {
  std::vector<std::int64_t> p = {
      0, 1, -1, 17, 4095, -4096, (1 << 24) - 1, std::int64_t{1} << 40, -(std::int64_t{1} << 50)};
  std::uniform_int_distribution<std::int64_t> any(-(std::int64_t{1} << 40), std::int64_t{1} << 40);
  for (int i = 0; i < 8; ++i) p.push_back(any(rng));
  return p;
}

}  // namespace

TEST_CASE("rotation preserves the norm", "[rope][rotate]") {
  test::Rng rng(1);
  for (const auto& s : all_schedules()) {
    RopeFrequencies f = compute_rope_frequencies(s.config, s.seq_len);
    auto x = random_vector(static_cast<std::size_t>(f.head_dim), rng);
    for (std::int64_t p : some_positions(rng)) {
      auto y = rotated(f, p, x);
      INFO(s.name << " position " << p);
      CHECK(std::sqrt(dot(y, y)) == Approx(std::sqrt(dot(x, x))).epsilon(1e-13));
    }
  }
}

TEST_CASE("R(a) R(b) = R(a + b) and R(p)^-1 R(p) = I", "[rope][rotate]") {
  test::Rng rng(2);
  for (const auto& s : all_schedules()) {
    RopeFrequencies f = compute_rope_frequencies(s.config, s.seq_len);
    auto x = random_vector(static_cast<std::size_t>(f.head_dim), rng);
    auto positions = some_positions(rng);
    for (std::int64_t a : positions) {
      for (std::int64_t b : {std::int64_t{3}, std::int64_t{-1000}, positions.back()}) {
        INFO(s.name << " a " << a << " b " << b);
        LAZYATTN_CHECK_CLOSE(rotated(f, a, rotated(f, b, x)), rotated(f, a + b, x),
                             (Tolerance{1e-13, 1e-13}));
      }
      auto back = rotated(f, a, x);
      rope::inverse_rotate(f, a, std::span<double>(back));
      INFO(s.name << " inverse at " << a);
      LAZYATTN_CHECK_CLOSE(back, x, (Tolerance{1e-14, 1e-14}));
    }
  }
}

TEST_CASE("<R(m)q, R(n)k> = <R(m-s)q, R(n-s)k> = <R(m-n)q, k>", "[rope][rotate]") {
  test::Rng rng(3);
  for (const auto& s : all_schedules()) {
    RopeFrequencies f = compute_rope_frequencies(s.config, s.seq_len);
    auto n_dim = static_cast<std::size_t>(f.head_dim);
    auto q = random_vector(n_dim, rng);
    auto k = random_vector(n_dim, rng);
    std::uniform_int_distribution<std::int64_t> pos(0, (std::int64_t{1} << 24) - 1);
    for (int trial = 0; trial < 20; ++trial) {
      std::int64_t m = pos(rng);
      std::int64_t n = pos(rng);
      std::int64_t shift = pos(rng) - (std::int64_t{1} << 23);
      double eager = dot(rotated(f, m, q), rotated(f, n, k));
      // Keys stored rotated at their document-local position n - s, the query corrected by m - s.
      auto q_rel = q;
      rope::relative_rotate(f, m, shift, std::span<double>(q_rel));
      double local = dot(q_rel, rotated(f, n - shift, k));
      // Keys stored raw, the query rotated by the difference.
      double raw = dot(rotated(f, rope::checked_difference(m, n, "test"), q), k);
      double scale = std::sqrt(dot(q, q) * dot(k, k));
      INFO(s.name << " m " << m << " n " << n << " s " << shift);
      CHECK(std::fabs(eager - local) <= 1e-12 * scale);
      CHECK(std::fabs(eager - raw) <= 1e-12 * scale);
    }
  }
}

TEST_CASE("partial rotary leaves dims [rotary_dim, head_dim) untouched", "[rope][rotate]") {
  test::Rng rng(4);
  for (double partial : {0.25, 0.5}) {
    for (PairLayout layout : {PairLayout::kHalf, PairLayout::kInterleaved}) {
      RopeConfig c;
      c.head_dim = 128;
      c.partial_rotary_factor = partial;
      c.pair_layout = layout;
      RopeFrequencies f = compute_rope_frequencies(c);
      REQUIRE(f.rotary_dim == static_cast<int>(128 * partial));
      REQUIRE(f.num_pairs() == f.rotary_dim / 2);
      auto x = random_vector(128, rng);
      auto y = rotated(f, 123457, x);
      INFO("partial " << partial << " layout " << to_string(layout));
      for (int d = f.rotary_dim; d < f.head_dim; ++d) REQUIRE(y[d] == x[d]);
      int changed = 0;
      for (int d = 0; d < f.rotary_dim; ++d) changed += y[d] != x[d];
      CHECK(changed == f.rotary_dim);
    }
  }
}

TEST_CASE("half and interleaved layouts are one rotation up to a permutation of dims",
          "[rope][rotate]") {
  test::Rng rng(5);
  RopeConfig c = rope_config_from_json(test::rope::kGptJ6B);  // 64 of 256 dims, interleaved
  RopeConfig half_config = c;
  half_config.pair_layout = PairLayout::kHalf;
  RopeFrequencies inter = compute_rope_frequencies(c);
  RopeFrequencies half = compute_rope_frequencies(half_config);
  REQUIRE(inter.pair_layout == PairLayout::kInterleaved);
  const int h = inter.num_pairs();
  // perm maps an interleaved dim to the half-layout dim playing the same role.
  std::vector<int> perm(static_cast<std::size_t>(inter.head_dim));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = 0; i < static_cast<std::size_t>(h); ++i) {
    perm[2 * i] = static_cast<int>(i);
    perm[2 * i + 1] = static_cast<int>(i) + h;
  }
  auto x = random_vector(static_cast<std::size_t>(inter.head_dim), rng);
  std::vector<double> x_half(x.size());
  for (std::size_t d = 0; d < x.size(); ++d) x_half[perm[d]] = x[d];
  for (std::int64_t p : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2047}, std::int64_t{-99},
                         std::int64_t{1} << 30}) {
    auto y = rotated(inter, p, x);
    auto y_half = rotated(half, p, x_half);
    INFO("position " << p);
    for (std::size_t d = 0; d < x.size(); ++d) REQUIRE(y_half[perm[d]] == y[d]);
  }
  // And pair_dims says the same thing.
  for (int i = 0; i < h; ++i) {
    auto pi = rope::pair_dims(PairLayout::kInterleaved, inter.rotary_dim, i);
    auto ph = rope::pair_dims(PairLayout::kHalf, inter.rotary_dim, i);
    CHECK(perm[pi.first] == ph.first);
    CHECK(perm[pi.second] == ph.second);
  }
}

TEST_CASE("a single pair rotates by p * w (hand check)", "[rope][rotate]") {
  RopeConfig c;
  c.head_dim = 4;  // inv_freq [1, 0.01]
  RopeFrequencies f = compute_rope_frequencies(c);
  std::vector<double> x = {1.0, 0.0, 0.0, 0.0};  // half layout: pair 0 is dims (0, 2)
  auto y = rotated(f, 3, x);
  CHECK(y[0] == Approx(std::cos(3.0)).margin(1e-15));
  CHECK(y[2] == Approx(std::sin(3.0)).margin(1e-15));
  CHECK(y[1] == 0.0);
  CHECK(y[3] == 0.0);
  std::vector<float> xf = {0.0f, 1.0f, 0.0f, 0.0f};  // pair 1 is dims (1, 3), w = 0.01
  rope::rotate(f, 100, std::span<float>(xf));
  CHECK(xf[1] == Approx(std::cos(1.0)).margin(1e-7));
  CHECK(xf[3] == Approx(std::sin(1.0)).margin(1e-7));
}

TEST_CASE("position differences that overflow int64 throw", "[rope][rotate][error]") {
  RopeFrequencies f = compute_rope_frequencies(RopeConfig{});
  std::vector<double> x(static_cast<std::size_t>(f.head_dim), 1.0);
  std::span<double> xs(x);
  CHECK_THROWS_WITH(rope::relative_rotate(f, kMax, -1, xs),
                    Catch::Contains("9223372036854775807 - -1 overflows int64"));
  CHECK_THROWS_WITH(rope::relative_rotate(f, kMin, 1, xs),
                    Catch::Contains("-9223372036854775808 - 1 overflows int64"));
  CHECK_THROWS_WITH(rope::relative_rotate(f, -2, kMax, xs), Catch::Contains("overflows int64"));
  CHECK_THROWS_AS(rope::checked_difference(0, kMin, "here"), Error);
  CHECK_NOTHROW(rope::relative_rotate(f, kMin, kMin, xs));
  CHECK_NOTHROW(rope::relative_rotate(f, kMax, kMax - 5, xs));
  CHECK(rope::checked_difference(kMax, 0, "here") == kMax);
  CHECK(rope::checked_difference(-1, kMax, "here") == kMin);
  CHECK_THROWS_WITH(rope::inverse_rotate(f, kMin, xs),
                    Catch::Contains("position -9223372036854775808 has no negation"));
  CHECK_NOTHROW(rope::inverse_rotate(f, kMax, xs));
  CHECK_NOTHROW(rope::rotate(f, kMin, xs));  // a rotation at INT64_MIN itself is fine
}

TEST_CASE("rotate checks the vector and the frequencies it is given", "[rope][rotate][error]") {
  RopeFrequencies f = compute_rope_frequencies(RopeConfig{});
  std::vector<double> short_x(100, 1.0);
  CHECK_THROWS_WITH(rope::rotate(f, 1, std::span<double>(short_x)),
                    Catch::Contains("vector of size 100, expected head_dim 128"));
  RopeFrequencies broken = f;
  broken.turns.pop_back();
  std::vector<double> x(128, 1.0);
  CHECK_THROWS_WITH(rope::rotate(broken, 1, std::span<double>(x)),
                    Catch::Contains("with 63 turns for head_dim 128"));
}
