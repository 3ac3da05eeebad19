// Exact angle reduction for RoPE: turns per position in Q0.64 fixed point, cos/sin of p * w.
//
// A frequency w (radians per position) is held as t = w / 2pi turns per position, scaled by 2^64
// and rounded to an unsigned 64-bit integer. The angle of position p, reduced to one turn, is then
// the wrapping product `uint64(p) * t`: integer arithmetic, exact modulo 2^64, for every int64 p,
// negative ones (inverse rotations) included. The only error is t's rounding, 2^-65 turns, so at
// p < 2^24 the angle is within 2^24 * 2^-65 * 2pi < 3e-12 rad of p * w. Float32 `p * w` would be
// off by up to 0.5 rad there (docs/02-math.md).
#pragma once

#include <cmath>
#include <cstdint>

#include "lazyattn/config.hpp"

namespace lazyattn::rope {

// 1 / (2 pi) as a double-double (hi + lo), to form w / 2pi to ~106 bits before rounding to Q0.64.
inline constexpr double kInvTwoPiHi = 0.15915494309189535;
inline constexpr double kInvTwoPiLo = -9.839338337591243e-18;
inline constexpr double kTwoPi = 6.283185307179586;

// Turns per position of frequency `inv_freq` (radians per position), Q0.64, modulo one turn.
inline std::uint64_t turns_per_position(double inv_freq) {
  // Double-double product inv_freq * (hi + lo); exact first term via fma.
  double p_hi = inv_freq * kInvTwoPiHi;
  double p_lo = std::fma(inv_freq, kInvTwoPiHi, -p_hi) + inv_freq * kInvTwoPiLo;
  // Drop whole turns: only the fraction matters.
  double whole = std::floor(p_hi);
  p_hi -= whole;
  constexpr double kTwo64 = 18446744073709551616.0;
  constexpr double kTwo63 = 9223372036854775808.0;
  // p_hi in [0, 1): scaled it is below 2^64; split at 2^63 so the conversion never overflows.
  double scaled = p_hi * kTwo64;
  std::uint64_t base = 0;
  if (scaled >= kTwo63) {
    base = std::uint64_t{1} << 63;
    scaled -= kTwo63;
  }
  base += static_cast<std::uint64_t>(scaled);
  double rest = (scaled - std::floor(scaled)) + p_lo * kTwo64;  // what truncation dropped, + lo
  return base + static_cast<std::uint64_t>(static_cast<std::int64_t>(std::llround(rest)));
}

// The angle of `position` at `turns` per position, as a Q0.64 fraction of a turn. Wraps exactly.
LAZYATTN_HOST_DEVICE std::uint64_t angle_turns_q64(std::int64_t position, std::uint64_t turns) {
  return static_cast<std::uint64_t>(position) * turns;
}

// The same angle as a signed fraction of a turn in [-0.5, 0.5), in double.
LAZYATTN_HOST_DEVICE double angle_turns(std::int64_t position, std::uint64_t turns) {
  return static_cast<double>(static_cast<std::int64_t>(angle_turns_q64(position, turns))) *
         (1.0 / 18446744073709551616.0);
}

struct CosSin {
  double cos;
  double sin;
};

// cos and sin of position * w, with w given as turns per position (see turns_per_position).
inline CosSin cos_sin(std::int64_t position, std::uint64_t turns) {
  double a = kTwoPi * angle_turns(position, turns);
  return {std::cos(a), std::sin(a)};
}

}  // namespace lazyattn::rope
