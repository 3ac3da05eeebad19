// Tests for dtype.hpp: round-to-nearest-even conversions of fp16 and bf16, specials included.
#include "support/catch.hpp"

#include <cmath>
#include <limits>

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

TEST_CASE("LAZYATTN_CHECK throws lazyattn::Error with the message", "[error]") {
  auto f = [](int v) { LAZYATTN_CHECK(v > 0, "f: v ", v, ", expected > 0"); };
  CHECK_NOTHROW(f(1));
  CHECK_THROWS_WITH(f(-2), "f: v -2, expected > 0");
  CHECK_THROWS_AS(f(0), Error);
}
