// Element types of the KV store: float, IEEE fp16 and bf16 as 16-bit host-safe storage types, and
// fp8 E4M3 (`float8_e4m3`), a pool type only: fp8 pools hold K and V divided by a scale per layer
// and KV head (KvStoreConfig::k_scale, v_scale) and take float, fp16 or bf16 on the way in.
//
// `float16`, `bfloat16` and `float8_e4m3` are bit-compatible with CUDA's `__half`,
// `__nv_bfloat16` and `__nv_fp8_e4m3`, so a page written on the host can be copied to the device
// unchanged. Conversions round to nearest even.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "lazyattn/config.hpp"
#include "lazyattn/error.hpp"

namespace lazyattn {

enum class DType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kFloat8E4M3 };

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat8E4M3: return "float8_e4m3";
  }
  return "unknown";
}

constexpr int size_of(DType t) {
  return t == DType::kFloat32 ? 4 : t == DType::kFloat8E4M3 ? 1 : 2;
}

struct float16 {
  std::uint16_t bits = 0;
};
struct bfloat16 {
  std::uint16_t bits = 0;
};
// fp8 E4M3 as OCP's "E4M3FN" and CUDA's __nv_fp8_e4m3: 1 sign, 4 exponent (bias 7) and 3
// mantissa bits; no infinities, S.1111.111 is NaN, the largest finite magnitude 448, the smallest
// subnormal 2^-9.
struct float8_e4m3 {
  std::uint8_t bits = 0;
};

namespace detail {

constexpr std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

constexpr float bf16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

constexpr std::uint16_t float_to_fp16_bits(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  std::uint32_t sign = (u >> 16) & 0x8000u;
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs >= 0x38800000u) {  // normal half: rebias exponent 127 -> 15, round the 13 dropped bits
    std::uint32_t m = abs - 0x38000000u;
    m += 0x0fffu + ((m >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (m >> 13));
  }
  if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: shift the full mantissa (with its hidden bit) and round to nearest even.
  std::uint32_t exp = abs >> 23;
  std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  std::uint32_t shift = 126u - exp;  // 14..24
  std::uint32_t half = mant >> shift;
  std::uint32_t rem = mant & ((1u << shift) - 1u);
  std::uint32_t mid = 1u << (shift - 1u);
  if (rem > mid || (rem == mid && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

constexpr float fp16_bits_to_float(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

constexpr float fp8_e4m3_bits_to_float(std::uint8_t b) {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t exp = (b >> 3) & 0xfu;
  const std::uint32_t mant = b & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return std::bit_cast<float>(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1p-9f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
}

// Round to nearest even, saturating to +-448 as CUDA's cvt.rn.satfinite.e4m3x2.f32 does (a
// format without infinities: an overflow, infinities included, gives the largest finite value of
// its sign, not NaN); NaN stays NaN.
constexpr std::uint8_t float_to_fp8_e4m3_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);  // NaN
  if (abs >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7eu);  // >= 448: saturate
  if (abs >= 0x3c800000u) {  // normal (>= 2^-6): rebias exponent 127 -> 7, round 20 dropped bits
    std::uint32_t m = abs - 0x3c000000u;
    m += 0x7ffffu + ((m >> 20) & 1u);  // below 448 this never rounds past 0x7e (448)
    return static_cast<std::uint8_t>(sign | (m >> 20));
  }
  if (abs <= 0x3a800000u) return sign;  // up to half the smallest subnormal (a tie goes to 0)
  // Subnormal: mant * 2^-9, mant = the float's full mantissa shifted, rounded to nearest even
  // (8 rounds up into the smallest normal, 0x08).
  const std::uint32_t exp = abs >> 23;  // 117..120
  const std::uint32_t full = (abs & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 141u - exp;  // 21..24
  std::uint32_t q = full >> shift;
  const std::uint32_t rem = full & ((1u << shift) - 1u);
  const std::uint32_t mid = 1u << (shift - 1u);
  if (rem > mid || (rem == mid && (q & 1u))) ++q;
  return static_cast<std::uint8_t>(sign | q);
}

}  // namespace detail

constexpr float to_float(float x) { return x; }
constexpr float to_float(float16 x) { return detail::fp16_bits_to_float(x.bits); }
constexpr float to_float(bfloat16 x) { return detail::bf16_bits_to_float(x.bits); }
constexpr float to_float(float8_e4m3 x) { return detail::fp8_e4m3_bits_to_float(x.bits); }

template <class T>
constexpr T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, float16>) {
    return float16{detail::float_to_fp16_bits(x)};
  } else if constexpr (std::is_same_v<T, float8_e4m3>) {
    return float8_e4m3{detail::float_to_fp8_e4m3_bits(x)};
  } else {
    static_assert(std::is_same_v<T, bfloat16>,
                  "from_float: T must be float, float16, bfloat16 or float8_e4m3");
    return bfloat16{detail::float_to_bf16_bits(x)};
  }
}

// Round a float through T and back: what storing it in T does to the value.
template <class T>
constexpr float round_to(float x) {
  return to_float(from_float<T>(x));
}

// What insert() and append() take (and the CUDA kernels' pools hold).
template <class T>
concept StorageElement =
    std::is_same_v<T, float> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;
// What a host pool may hold: those, or fp8 E4M3 (scaled).
template <class T>
concept PoolElement = StorageElement<T> || std::is_same_v<T, float8_e4m3>;

template <PoolElement T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, float16>) return DType::kFloat16;
  if constexpr (std::is_same_v<T, float8_e4m3>) return DType::kFloat8E4M3;
  return DType::kBFloat16;
}

// Calls f(T{}) with T the element type named by `t`, one of the StorageElement types: the one
// place a runtime DType becomes a type. fp8 E4M3 is a host pool's type only (dispatch_pool_dtype):
// here it throws.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16: return f(float16{});
    case DType::kBFloat16: return f(bfloat16{});
    case DType::kFloat8E4M3:
      detail::throw_error("dtype float8_e4m3: a host pool's element type only, expected float32, "
                          "float16 or bfloat16 here");
    case DType::kFloat32: break;
  }
  return f(float{});
}
// The same over a host pool's element types: fp8 E4M3 as float8_e4m3 too.
template <class F>
decltype(auto) dispatch_pool_dtype(DType t, F&& f) {
  if (t == DType::kFloat8E4M3) return f(float8_e4m3{});
  return dispatch_dtype(t, static_cast<F&&>(f));
}

}  // namespace lazyattn
