// Tests for dtype.hpp: round-to-nearest-even conversions of fp16, bf16 and fp8 E4M3, specials
// included.
#include "support/catch.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"

using namespace lazyattn;

TEST_CASE("bf16 rounds to nearest even and keeps specials", "[dtype]") {
  CHECK(to_float(from_float<bfloat16>(1.0f)) == 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  CHECK(to_float(from_float<bfloat16>(1.0f + 0x1p-8f)) == 1.0f);
  CHECK(to_float(from_float<bfloat16>(1.0f + 0x1p-7f + 0x1p-8f)) == 1.0f + 0x1p-6f);
  CHECK(std::isinf(to_float(from_float<bfloat16>(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(to_float(from_float<bfloat16>(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(to_float(from_float<bfloat16>(-3.0f)) == -3.0f);
}

TEST_CASE("fp16 rounds to nearest even, overflows to inf and keeps subnormals", "[dtype]") {
  CHECK(to_float(from_float<float16>(65504.0f)) == 65504.0f);
  CHECK(std::isinf(to_float(from_float<float16>(65520.0f))));
  CHECK(to_float(from_float<float16>(1.0f + 0x1p-11f)) == 1.0f);  // tie to even
  CHECK(to_float(from_float<float16>(1.0f + 0x1p-10f + 0x1p-11f)) == 1.0f + 0x1p-9f);
  CHECK(to_float(from_float<float16>(0x1p-24f)) == 0x1p-24f);  // smallest subnormal
  CHECK(to_float(from_float<float16>(0x1p-26f)) == 0.0f);
  CHECK(to_float(from_float<float16>(-0x1.8p-20f)) == -0x1.8p-20f);
  CHECK(std::isnan(to_float(from_float<float16>(std::numeric_limits<float>::quiet_NaN()))));
  // Every fp16 value survives a round trip through float.
  for (std::uint32_t bits = 0; bits < 0x7c00u; ++bits) {
    float16 h{static_cast<std::uint16_t>(bits)};
    REQUIRE(from_float<float16>(to_float(h)).bits == bits);
  }
}

namespace {

// An fp8 E4M3 code's value from its fields, in double (independent of dtype.hpp's bit tricks).
double e4m3_value(std::uint32_t code) {
  const double sign = (code & 0x80u) ? -1.0 : 1.0;
  const int exp = static_cast<int>((code >> 3) & 0xfu);
  const int mant = static_cast<int>(code & 0x7u);
  if (exp == 0) return sign * std::ldexp(mant, -9);
  return sign * std::ldexp(8 + mant, exp - 10);
}

// The nearest finite E4M3 code by search, ties to the even code (mantissa bit 0), magnitudes
// past 448 saturated: what float_to_fp8_e4m3_bits must return for a finite x.
std::uint8_t e4m3_nearest(double x) {
  const std::uint32_t sign = std::signbit(x) ? 0x80u : 0u;
  const double a = std::fabs(x);
  std::uint32_t best = 0;
  for (std::uint32_t c = 1; c <= 0x7eu; ++c) {
    const double d = std::fabs(e4m3_value(c) - a), db = std::fabs(e4m3_value(best) - a);
    if (d < db || (d == db && (c & 1u) == 0)) best = c;
  }
  return static_cast<std::uint8_t>(sign | best);
}

}  // namespace

TEST_CASE("fp8 e4m3: every code's value, NaN and no infinities", "[dtype][fp8]") {
  for (std::uint32_t c = 0; c < 256; ++c) {
    INFO("code 0x" << std::hex << c);
    const float v = to_float(float8_e4m3{static_cast<std::uint8_t>(c)});
    if ((c & 0x7fu) == 0x7fu) {
      CHECK(std::isnan(v));
      continue;
    }
    CHECK(static_cast<double>(v) == e4m3_value(c));
    CHECK(std::signbit(v) == ((c & 0x80u) != 0));  // -0 too
    // Every finite code survives a round trip through float.
    CHECK(from_float<float8_e4m3>(v).bits == c);
  }
  CHECK(to_float(float8_e4m3{0x7e}) == 448.0f);
  CHECK(to_float(float8_e4m3{0x01}) == 0x1p-9f);
  CHECK(to_float(float8_e4m3{0x08}) == 0x1p-6f);
}

TEST_CASE("fp8 e4m3 rounds to nearest even and saturates to +-448", "[dtype][fp8]") {
  const float inf = std::numeric_limits<float>::infinity();
  auto bits = [](float x) { return static_cast<int>(from_float<float8_e4m3>(x).bits); };
  // Ties between consecutive codes go to the even one; just off the tie, to the nearer.
  for (std::uint32_t c = 0; c < 0x7eu; ++c) {
    const float lo = static_cast<float>(e4m3_value(c)), hi = static_cast<float>(e4m3_value(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact in float
    INFO("codes 0x" << std::hex << c << ", 0x" << c + 1);
    CHECK(bits(mid) == static_cast<int>((c & 1u) ? c + 1 : c));
    CHECK(bits(std::nextafter(mid, 0.0f)) == static_cast<int>(c));
    CHECK(bits(std::nextafter(mid, inf)) == static_cast<int>(c + 1));
    CHECK(bits(-mid) == static_cast<int>(0x80u | ((c & 1u) ? c + 1 : c)));
  }
  // 464 is the tie between 448 (even) and the NaN pattern's 480: past 448 everything saturates.
  for (float x : {448.0f, 464.0f, 465.0f, 1e6f, 3.4e38f, inf}) {
    CHECK(bits(x) == 0x7e);
    CHECK(bits(-x) == 0xfe);
  }
  CHECK(bits(0x1p-10f) == 0x00);  // half the smallest subnormal: the tie goes to 0
  CHECK(bits(std::nextafter(0x1p-10f, 1.0f)) == 0x01);
  CHECK(bits(1e-30f) == 0x00);
  CHECK(bits(-1e-30f) == 0x80);
  CHECK(bits(-0.0f) == 0x80);
  CHECK((bits(std::numeric_limits<float>::quiet_NaN()) & 0x7f) == 0x7f);
  CHECK(std::isnan(round_to<float8_e4m3>(-std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fp8 e4m3 matches a nearest-code search on random floats", "[dtype][fp8]") {
  std::mt19937 rng(20261203);
  std::uniform_real_distribution<float> log2_mag(-14.0f, 10.0f);  // below 2^-10 .. past 448
  std::vector<float> xs;
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(log2_mag(rng));
    xs.push_back((i & 1) ? -x : x);
  }
  int mismatches = 0;
  for (float x : xs) {
    const int got = from_float<float8_e4m3>(x).bits, want = e4m3_nearest(x);
    if (got != want && ++mismatches <= 5) FAIL_CHECK("x " << x << ": got " << got << ", want " << want);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("LAZYATTN_CHECK throws lazyattn::Error with the message", "[error]") {
  auto f = [](int v) { LAZYATTN_CHECK(v > 0, "f: v ", v, ", expected > 0"); };
  CHECK_NOTHROW(f(1));
  CHECK_THROWS_WITH(f(-2), "f: v -2, expected > 0");
  CHECK_THROWS_AS(f(0), Error);
}
