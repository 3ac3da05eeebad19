// Tests for frequencies.hpp and policy.hpp: schedule values small enough to work out by hand, the
// transformers rules each schedule follows, the policy's storage-form check, and bad configs.
#include <algorithm>
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "lazyattn/rope.hpp"
#include "rope/model_configs.hpp"

using namespace lazyattn;

namespace {

RopeConfig small(int head_dim, double theta) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  return c;
}

void check_freqs(const RopeFrequencies& f, const std::vector<double>& expected,
                 double rel = 1e-14) {
  REQUIRE(f.inv_freq.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("pair " << i);
    CHECK(f.inv_freq[i] == Approx(expected[i]).epsilon(rel));
    CHECK(f.turns[i] == rope::turns_per_position(f.inv_freq[i]));
  }
}

}  // namespace

TEST_CASE("default: theta 10000, d = 4 gives [1, 0.01]", "[rope][schedule]") {
  RopeFrequencies f = compute_rope_frequencies(small(4, 10000.0));
  check_freqs(f, {1.0, 0.01});
  CHECK(f.attention_factor == 1.0);
  CHECK(f.query_scale() == 1.0);
  CHECK(f.rotary_dim == 4);
  // d = 8: 10000^(-i/4) = [1, 0.1, 0.01, 0.001].
  check_freqs(compute_rope_frequencies(small(8, 10000.0)), {1.0, 0.1, 0.01, 0.001});
  // Partial rotary: the exponent's denominator is rotary_dim, not head_dim.
  RopeConfig partial = small(16, 10000.0);
  partial.partial_rotary_factor = 0.25;  // rotary_dim 4
  RopeFrequencies fp = compute_rope_frequencies(partial);
  CHECK(fp.head_dim == 16);
  CHECK(fp.rotary_dim == 4);
  check_freqs(fp, {1.0, 0.01});
}

TEST_CASE("linear divides every frequency by the factor", "[rope][schedule]") {
  RopeConfig c = small(4, 10000.0);
  c.rope_scaling.rope_type = RopeType::kLinear;
  c.rope_scaling.factor = 4.0;
  check_freqs(compute_rope_frequencies(c), {0.25, 0.0025});
}

TEST_CASE("dynamic equals default up to max_position_embeddings and grows the base beyond",
          "[rope][schedule]") {
  RopeConfig c = small(4, 10000.0);
  c.max_position_embeddings = 2048;
  c.rope_scaling.rope_type = RopeType::kDynamic;
  c.rope_scaling.factor = 2.0;
  for (std::int64_t len :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{2047}, std::int64_t{2048}}) {
    INFO("seq_len " << len);
    check_freqs(compute_rope_frequencies(c, len), {1.0, 0.01});
  }
  // seq_len 4096: base 10000 * (2 * 4096 / 2048 - 1)^(4 / 2) = 90000, so w_1 = 1 / 300.
  check_freqs(compute_rope_frequencies(c, 4096), {1.0, 1.0 / 300.0});

  // A real head size: equal below the limit, every non-zero pair strictly slower above it, more so
  // the longer the request.
  RopeConfig big = test::rope::all_schedules()[2].config;  // dynamic, head 128, max 4096
  REQUIRE(big.rope_scaling.rope_type == RopeType::kDynamic);
  RopeConfig plain = big;
  plain.rope_scaling = RopeScaling{};
  CHECK(compute_rope_frequencies(big, 4096).inv_freq == compute_rope_frequencies(plain).inv_freq);
  auto at_8k = compute_rope_frequencies(big, 8192).inv_freq;
  auto at_64k = compute_rope_frequencies(big, 65536).inv_freq;
  auto base = compute_rope_frequencies(plain).inv_freq;
  CHECK(at_8k[0] == 1.0);
  for (std::size_t i = 1; i < base.size(); ++i) {
    INFO("pair " << i);
    CHECK(at_8k[i] < base[i]);
    CHECK(at_64k[i] < at_8k[i]);
  }
}

TEST_CASE("llama3: keep high frequencies, divide low ones, blend the middle", "[rope][schedule]") {
  // d = 6, theta 1e6: w = [1, 0.01, 1e-4], wavelengths [2pi, 200pi, 20000pi]. With original 1000,
  // low_freq_factor 1 and high_freq_factor 4 the bands are < 250 (kept), > 1000 (divided by 8),
  // and in between blended with smooth = (1000 / (200 pi) - 1) / 3 = (5 / pi - 1) / 3.
  RopeConfig c = small(6, 1e6);
  c.rope_scaling.rope_type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 1000;
  double smooth = (5.0 / std::numbers::pi - 1.0) / 3.0;
  check_freqs(compute_rope_frequencies(c),
              {1.0, 0.01 * ((1.0 - smooth) / 8.0 + smooth), 1e-4 / 8.0}, 1e-13);

  // Llama-3.1-8B: pairs with wavelength < 2048 are the default ones, > 8192 are default / 8.
  RopeConfig llama = rope_config_from_json(test::rope::kLlama31_8B);
  RopeConfig plain = llama;
  plain.rope_scaling = RopeScaling{};
  auto got = compute_rope_frequencies(llama).inv_freq;
  auto base = compute_rope_frequencies(plain).inv_freq;
  int kept = 0, divided = 0, blended = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double wavelen = 2 * std::numbers::pi / base[i];
    INFO("pair " << i << " wavelength " << wavelen);
    if (wavelen < 2048) {
      CHECK(got[i] == base[i]);
      ++kept;
    } else if (wavelen > 8192) {
      CHECK(got[i] == Approx(base[i] / 8).epsilon(1e-15));
      ++divided;
    } else {
      CHECK(got[i] < base[i]);
      CHECK(got[i] > base[i] / 8);
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE("yarn: ramp between the correction dims, attention factor 0.1 ln(s) + 1",
          "[rope][schedule]") {
  // d = 8, theta 1e4: base^(2i/8) = 10^i, and the correction dim for r rotations is
  // 8 ln(L / (2 pi r)) / (2 ln 1e4) = log10(L / (2 pi r)). L = 6283: beta_fast 32 gives 1.49 ->
  // floor 1, beta_slow 1 gives 2.99998 -> ceil 3, so the ramp over pairs 0..3 is [0, 0, 0.5, 1].
  RopeConfig c = small(8, 10000.0);
  c.rope_scaling.rope_type = RopeType::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 6283;
  RopeFrequencies f = compute_rope_frequencies(c);
  check_freqs(f, {1.0, 0.1, 0.5 * 0.01 / 4 + 0.5 * 0.01, 0.001 / 4});
  CHECK(f.attention_factor == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  CHECK(f.query_scale() == Approx(std::pow(0.1 * std::log(4.0) + 1.0, 2)).epsilon(1e-15));

  SECTION("truncate false keeps the fractional correction range (gpt-oss)") {
    c.rope_scaling.truncate = false;
    double low = std::log10(6283.0 / (64 * std::numbers::pi));
    double high = std::log10(6283.0 / (2 * std::numbers::pi));
    double r1 = std::clamp((1 - low) / (high - low), 0.0, 1.0);
    double r2 = (2 - low) / (high - low);
    double r3 = std::clamp((3 - low) / (high - low), 0.0, 1.0);
    REQUIRE(r1 == 0.0);
    REQUIRE(r3 == 1.0);
    check_freqs(compute_rope_frequencies(c), {1.0, 0.1, r2 * 0.01 / 4 + (1 - r2) * 0.01, 0.001 / 4},
                1e-13);
  }
  SECTION("the range is clamped to rotary_dim - 1 (not the pair count) and widened when empty") {
    // L = 2 pi 1e9: low = floor(9 - log10(32)) = 7 and high = ceil(9) = 9 -> 7 = rotary_dim - 1.
    // low == high, so the ramp starts at 7 and every pair (0..3) keeps its original frequency.
    c.rope_scaling.original_max_position_embeddings = 6283185307;
    check_freqs(compute_rope_frequencies(c), {1.0, 0.1, 0.01, 0.001});
  }
  SECTION("beta_fast / beta_slow of 0 mean 32 / 1, as transformers' `or` reads them") {
    c.rope_scaling.beta_fast = 0.0;
    c.rope_scaling.beta_slow = 0.0;
    CHECK(compute_rope_frequencies(c).inv_freq == f.inv_freq);
  }
}

TEST_CASE("yarn keeps an explicit factor; an unset one is the ratio of the lengths",
          "[rope][schedule]") {
  // Qwen2.5: factor 4 with original == max_position_embeddings (32768). transformers 5 gives the
  // attention factor 0.1 ln 4 + 1; the older ratio rule would have given 1.
  RopeFrequencies qwen =
      compute_rope_frequencies(rope_config_from_json(test::rope::kQwen25_7B_Yarn));
  CHECK(qwen.attention_factor == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));

  RopeConfig c = small(8, 10000.0);
  c.max_position_embeddings = std::int64_t{8} * 6283;
  c.rope_scaling.rope_type = RopeType::kYarn;
  c.rope_scaling.original_max_position_embeddings = 6283;
  RopeFrequencies ratio = compute_rope_frequencies(c);  // factor unset: 8
  CHECK(ratio.attention_factor == Approx(0.1 * std::log(8.0) + 1.0).epsilon(1e-15));
  check_freqs(ratio, {1.0, 0.1, 0.5 * 0.01 / 8 + 0.5 * 0.01, 0.001 / 8});
  c.rope_scaling.factor = 2.0;  // explicit, disagreeing with the ratio: the explicit one is used
  RopeFrequencies explicit_factor = compute_rope_frequencies(c);
  CHECK(explicit_factor.attention_factor == Approx(0.1 * std::log(2.0) + 1.0).epsilon(1e-15));
  CHECK(explicit_factor.inv_freq[3] == Approx(0.001 / 2).epsilon(1e-14));

  SECTION("without any original length, max_position_embeddings is the original") {
    RopeConfig d = small(8, 10000.0);
    d.max_position_embeddings = 6283;
    d.rope_scaling.rope_type = RopeType::kYarn;
    d.rope_scaling.factor = 4.0;
    RopeConfig e = d;
    e.rope_scaling.original_max_position_embeddings = 6283;
    CHECK(compute_rope_frequencies(d).inv_freq == compute_rope_frequencies(e).inv_freq);
  }
  SECTION("a top-level original_max_position_embeddings wins over rope_scaling's") {
    RopeConfig top = c;
    top.original_max_position_embeddings = 1000;
    RopeConfig inner = c;
    inner.rope_scaling.original_max_position_embeddings = 1000;
    CHECK(compute_rope_frequencies(top).inv_freq == compute_rope_frequencies(inner).inv_freq);
    CHECK(compute_rope_frequencies(top).inv_freq != compute_rope_frequencies(c).inv_freq);
  }
}

TEST_CASE("yarn attention factor: explicit, mscale / mscale_all_dim, or 0.1 ln(s) + 1",
          "[rope][schedule]") {
  RopeConfig c = small(8, 10000.0);
  c.rope_scaling.rope_type = RopeType::kYarn;
  c.rope_scaling.factor = 40.0;
  c.rope_scaling.original_max_position_embeddings = 4096;
  auto af = [&] { return compute_rope_frequencies(c).attention_factor; };
  double l40 = std::log(40.0);
  CHECK(af() == Approx(0.1 * l40 + 1).epsilon(1e-15));
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;  // DeepSeek-V3
  CHECK(af() == 1.0);
  c.rope_scaling.mscale = 0.707;
  c.rope_scaling.mscale_all_dim = 0.707;  // DeepSeek-V2-Lite
  CHECK(af() == 1.0);
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.5;
  CHECK(af() == Approx((0.1 * l40 + 1) / (0.05 * l40 + 1)).epsilon(1e-15));
  c.rope_scaling.mscale_all_dim = 0.0;  // only used when both are non-zero
  CHECK(af() == Approx(0.1 * l40 + 1).epsilon(1e-15));
  c.rope_scaling.attention_factor = 0.75;
  CHECK(af() == 0.75);
  // DeepSeek-V3 as shipped: the rotary embedding's own factor is 1.
  CHECK(compute_rope_frequencies(rope_config_from_json(test::rope::kDeepSeekV3)).attention_factor ==
        1.0);
}

TEST_CASE("longrope switches from short to long factors past the original length",
          "[rope][schedule]") {
  // d = 4, theta 1e4: base^(2i/4) = [1, 100]. original 4096 at the top level, max 131072, no
  // factor: factor = 32, attention factor sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
  RopeConfig c = small(4, 10000.0);
  c.max_position_embeddings = 131072;
  c.original_max_position_embeddings = 4096;
  c.rope_scaling.rope_type = RopeType::kLongrope;
  c.rope_scaling.short_factor = {1.0, 2.0};
  c.rope_scaling.long_factor = {4.0, 8.0};
  for (std::int64_t len : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4096}}) {
    INFO("seq_len " << len);
    RopeFrequencies f = compute_rope_frequencies(c, len);
    check_freqs(f, {1.0, 0.005});
    CHECK(f.attention_factor == Approx(std::sqrt(17.0 / 12.0)).epsilon(1e-15));
  }
  for (std::int64_t len : {std::int64_t{4097}, std::int64_t{131072}, std::int64_t{1} << 40}) {
    INFO("seq_len " << len);
    RopeFrequencies f = compute_rope_frequencies(c, len);
    check_freqs(f, {0.25, 1.0 / 800});
    // The attention factor does not depend on the request length.
    CHECK(f.attention_factor == Approx(std::sqrt(17.0 / 12.0)).epsilon(1e-15));
  }
  c.rope_scaling.factor = 2.0;  // an explicit factor is used for the attention factor
  CHECK(compute_rope_frequencies(c).attention_factor ==
        Approx(std::sqrt(13.0 / 12.0)).epsilon(1e-15));
  c.rope_scaling.factor = 1.0;
  CHECK(compute_rope_frequencies(c).attention_factor == 1.0);
  c.rope_scaling.attention_factor = 1.5;
  CHECK(compute_rope_frequencies(c).attention_factor == 1.5);

  SECTION("rope_scaling's original length is used when the top level has none") {
    RopeConfig d = c;
    d.original_max_position_embeddings.reset();
    d.rope_scaling.original_max_position_embeddings = 1000;
    check_freqs(compute_rope_frequencies(d, 1000), {1.0, 0.005});
    check_freqs(compute_rope_frequencies(d, 1001), {0.25, 1.0 / 800});
  }
}

TEST_CASE("RopePolicy: length-dependent schedules refuse local storage", "[rope][policy]") {
  for (const auto& s : test::rope::all_schedules()) {
    RopePolicy policy(s.config);
    RopeType t = s.config.rope_scaling.rope_type;
    bool dependent = t == RopeType::kDynamic || t == RopeType::kLongrope;
    INFO(s.name);
    CHECK(policy.depends_on_length() == dependent);
    CHECK_NOTHROW(policy.check_form(StorageForm::kRaw, "test"));
    if (dependent) {
      CHECK_THROWS_WITH(policy.check_form(StorageForm::kLocal, "KvStore::insert"),
                        Catch::Contains("KvStore::insert: storage form local with rope_type " +
                                        std::string(to_string(t))));
    } else {
      CHECK_NOTHROW(policy.check_form(StorageForm::kLocal, "test"));
    }
    // Per-request frequencies are the schedule's for that length; base ones are for no request.
    CHECK(policy.frequencies(s.seq_len).inv_freq ==
          compute_rope_frequencies(s.config, s.seq_len).inv_freq);
    CHECK(policy.base_frequencies().inv_freq == compute_rope_frequencies(s.config, 0).inv_freq);
    CHECK(policy.head_dim() == s.config.head_dim);
    CHECK(policy.pair_layout() == s.config.pair_layout);
  }
  RopePolicy phi3(rope_config_from_json(test::rope::kPhi3_128k));
  CHECK(phi3.frequencies(4096).inv_freq == phi3.base_frequencies().inv_freq);
  CHECK(phi3.frequencies(4097).inv_freq != phi3.base_frequencies().inv_freq);
}

TEST_CASE("bad config values throw lazyattn::Error naming the value", "[rope][schedule][error]") {
  auto bad = [](auto edit) {
    RopeConfig c;
    c.max_position_embeddings = 4096;
    edit(c);
    return c;
  };
  using C = RopeConfig&;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    RopeConfig config;
    std::string message;
  };
  std::vector<Case> cases = {
      {bad([](C c) { c.head_dim = 0; }), "head_dim 0, expected a positive even number"},
      {bad([](C c) { c.rope_scaling.rope_type = static_cast<RopeType>(9); }),
       "rope_type 9, expected 0 (default) to 5 (longrope)"},
      {bad([](C c) { c.pair_layout = static_cast<PairLayout>(7); }),
       "pair_layout 7, expected 0 (half) or 1 (interleaved)"},
      {bad([](C c) { c.head_dim = 7; }), "head_dim 7"},
      {bad([](C c) { c.rope_theta = 0.5; }), "rope_theta 0.5"},
      {bad([&](C c) { c.rope_theta = inf; }), "rope_theta inf"},
      {bad([&](C c) { c.rope_theta = nan; }), "rope_theta nan"},
      {bad([](C c) { c.partial_rotary_factor = 1.5; }), "partial_rotary_factor 1.5"},
      {bad([](C c) { c.partial_rotary_factor = 0.0; }), "partial_rotary_factor 0"},
      {bad([](C c) {
         c.head_dim = 10;
         c.partial_rotary_factor = 0.3;
       }),
       "rotary_dim 3"},
      {bad([](C c) { c.max_position_embeddings = -1; }), "max_position_embeddings -1"},
      {bad([](C c) { c.original_max_position_embeddings = 0; }),
       "original_max_position_embeddings 0, expected > 0"},
      {bad([](C c) { c.rope_scaling.rope_type = RopeType::kLinear; }),
       "rope_type linear needs rope_scaling.factor"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLinear;
         c.rope_scaling.factor = 0.5;
       }),
       "rope_scaling.factor 0.5 for rope_type linear"},
      {bad([&](C c) {
         c.rope_scaling.rope_type = RopeType::kLinear;
         c.rope_scaling.factor = nan;
       }),
       "rope_scaling.factor nan"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kDynamic;
         c.rope_scaling.factor = 2.0;
         c.max_position_embeddings = 0;
       }),
       "max_position_embeddings 0 for rope_type dynamic"},
      {bad([](C c) {
         c.head_dim = 2;
         c.rope_scaling.rope_type = RopeType::kDynamic;
         c.rope_scaling.factor = 2.0;
       }),
       "rotary_dim 2 for rope_type dynamic"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLlama3;
         c.rope_scaling.factor = 8.0;
         c.rope_scaling.high_freq_factor = 4.0;
       }),
       "needs rope_scaling.low_freq_factor"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLlama3;
         c.rope_scaling.factor = 8.0;
         c.rope_scaling.low_freq_factor = 4.0;
         c.rope_scaling.high_freq_factor = 1.0;
       }),
       "high_freq_factor 1, expected a finite number > low_freq_factor 4"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLlama3;
         c.rope_scaling.factor = 8.0;
         c.rope_scaling.low_freq_factor = 0.0;
         c.rope_scaling.high_freq_factor = 1.0;
       }),
       "low_freq_factor 0"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLlama3;
         c.rope_scaling.factor = 8.0;
         c.rope_scaling.low_freq_factor = 1.0;
         c.rope_scaling.high_freq_factor = 4.0;
         c.rope_scaling.original_max_position_embeddings = -8192;
       }),
       "rope_scaling.original_max_position_embeddings -8192"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLlama3;
         c.rope_scaling.factor = 8.0;
         c.rope_scaling.low_freq_factor = 1.0;
         c.rope_scaling.high_freq_factor = 4.0;
         c.max_position_embeddings = 0;
       }),
       "rope_type llama3 needs original_max_position_embeddings"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 0.5;
       }),
       "rope_scaling.factor 0.5 for rope_type yarn"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.max_position_embeddings = 0;
         c.rope_scaling.original_max_position_embeddings = 4096;
       }),
       "max_position_embeddings is 0"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.max_position_embeddings = 2048;
         c.rope_scaling.original_max_position_embeddings = 4096;
       }),
       "yarn factor 0.5"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.beta_fast = -1.0;
       }),
       "rope_scaling.beta_fast -1"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.beta_fast = 1.0;
         c.rope_scaling.beta_slow = 2.0;
       }),
       "beta_fast 1 < beta_slow 2"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.attention_factor = -1.0;
       }),
       "rope_scaling.attention_factor -1"},
      {bad([&](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.mscale = inf;
       }),
       "rope_scaling.mscale inf"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLongrope;
         c.rope_scaling.short_factor = {1.0, 2.0, 3.0};
         c.rope_scaling.long_factor = std::vector<double>(64, 1.0);
       }),
       "short_factor has 3 entries, expected rotary_dim / 2 = 64"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLongrope;
         c.rope_scaling.short_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.long_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.long_factor[5] = 0.0;
       }),
       "long_factor[5] 0"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLongrope;
         c.rope_scaling.short_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.long_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.factor = -2.0;
       }),
       "rope_scaling.factor -2 for rope_type longrope"},
      // Values inside the ranges above whose arithmetic cannot be held (issue 24).
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kLongrope;
         c.rope_scaling.short_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.long_factor = std::vector<double>(64, 1.0);
         c.rope_scaling.short_factor[3] = 1e-310;  // subnormal: an infinite frequency
       }),
       "gives pair 3 the frequency inf"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.attention_factor = 1e20;
       }),
       "rope_scaling.attention_factor 1e+20, expected in (0, 10000]"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.mscale = -100.0;  // 0.1 * -100 * ln 4 + 1 < 0
         c.rope_scaling.mscale_all_dim = 1.0;
       }),
       "rope_type yarn gives attention factor -"},
      {bad([](C c) {
         c.rope_scaling.rope_type = RopeType::kYarn;
         c.rope_scaling.factor = 4.0;
         c.rope_scaling.mscale = 1.0;
         c.rope_scaling.mscale_all_dim = -1.0 / (0.1 * std::log(4.0));  // divides by zero
       }),
       "rope_type yarn gives attention factor"},
  };
  for (const auto& c : cases) {
    INFO("expected message: " << c.message);
    CHECK_THROWS_AS(compute_rope_frequencies(c.config), Error);
    CHECK_THROWS_WITH(compute_rope_frequencies(c.config), Catch::Contains(c.message));
    CHECK_THROWS_WITH(RopePolicy(c.config), Catch::Contains(c.message));
  }
  // The unchanged base config is fine, so each failure above comes from its one edit.
  CHECK_NOTHROW(compute_rope_frequencies(bad([](C) {})));
}
