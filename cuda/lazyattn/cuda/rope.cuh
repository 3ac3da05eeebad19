// RoPE on the device: cos/sin of an exactly reduced angle (rope/angle.hpp's Q0.64 turns).
//
// The wrapping 64-bit product position * turns is the angle modulo one turn, exactly. Its top bits,
// read as a signed fraction in [-1/2, 1/2), go to float (abs error 2^-25 turns) and sincospif
// (about one ulp), so cos/sin are within ~3e-7 of float64 truth at every int64 position.
#pragma once

#include <cstdint>

#include "lazyattn/rope/angle.hpp"

namespace lazyattn::cuda {

__device__ __forceinline__ float2 rope_cos_sin(std::int64_t position, std::uint64_t turns) {
  std::uint64_t a = rope::angle_turns_q64(position, turns);
  // Signed top 32 bits, scaled by 2^-31: a fraction of a half-turn in [-1, 1), for sincospif.
  float half_turns = static_cast<float>(static_cast<std::int32_t>(a >> 32)) * 0x1p-31f;
  float s, c;
  sincospif(half_turns, &s, &c);
  return make_float2(c, s);
}

// Where rotary dimension d (< rotary_dim) sits in its pair: the pair index j (the frequency), the
// partner dimension, and whether d is the pair's first member. Interleaved (GPT-J) pairs are
// (2j, 2j + 1); rotate-half (Llama, NeoX) pairs are (j, j + half), half = rotary_dim / 2.
struct RotaryPair {
  int j;
  int partner;
  bool first;
};
__device__ __forceinline__ RotaryPair rotary_pair(int d, int half, bool interleaved) {
  int j, partner;
  bool first;
  if (interleaved) {
    j = d >> 1;
    first = (d & 1) == 0;
    partner = first ? d + 1 : d - 1;
  } else {
    first = d < half;
    j = first ? d : d - half;
    partner = first ? d + half : d - half;
  }
  return {j, partner, first};
}

// One element of a rotated pair: x is the element, y its partner, cs the pair's (cos, sin).
__device__ __forceinline__ float rotate_element(float x, float y, float2 cs, bool first) {
  return first ? x * cs.x - y * cs.y : x * cs.x + y * cs.y;
}

// Rotates a pair (x, y) in place by (cos, sin).
__device__ __forceinline__ void rotate_pair(float& x, float& y, float2 cs) {
  float nx = x * cs.x - y * cs.y;
  float ny = x * cs.y + y * cs.x;
  x = nx;
  y = ny;
}

// cos/sin of a sum of two angles from the cos/sin of each.
__device__ __forceinline__ float2 combine_angles(float2 a, float2 b) {
  return make_float2(a.x * b.x - a.y * b.y, a.y * b.x + a.x * b.y);
}

}  // namespace lazyattn::cuda
