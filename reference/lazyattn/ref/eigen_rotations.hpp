// lazyattn::ref::eigen's rotation tables: the Eigen types the reference computes in, its tile
// sizes, the cos/sin of per-vector rotations (Rotations) and the angle-addition table that rotates
// a tile's raw-form keys with no trig per key (KeyRotations). Included by ref/eigen.hpp.
//
// Needs Eigen 3.3+; without it this header defines nothing.
#pragma once

#if __has_include(<Eigen/Core>)

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/frequencies.hpp"
#include "lazyattn/rope/rotate.hpp"

namespace lazyattn::ref::eigen::detail {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;
using Index = Eigen::Index;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys per block: big enough for a real GEMM, small enough that the logits block of a long document
// stays in cache. Deferred attention gathers this many keys of a segment (several pages, or part of
// one) into a tile; one GEMM pair and one online-softmax update per 16-key page cost up to 1.16x.
inline constexpr Index kKeyBlock = 64;
inline constexpr Index kRowBlock = 64;

// cos/sin of the rotation each of `rows` vectors gets, [rows, num_pairs], from the exact Q0.64
// angles. Sized once per call; set() writes one row.
class Rotations {
 public:
  void reserve(Index rows, int pairs) {
    pairs_ = pairs;
    cos_.resize(static_cast<std::size_t>(rows * pairs));
    sin_.resize(static_cast<std::size_t>(rows * pairs));
  }
  void set(Index row, const RopeFrequencies& f, std::int64_t position) {
    for (int k = 0; k < f.num_pairs(); ++k) {
      rope::CosSin cs = rope::cos_sin(position, f.turns[static_cast<std::size_t>(k)]);
      cos_[static_cast<std::size_t>(row * pairs_ + k)] = cs.cos;
      sin_[static_cast<std::size_t>(row * pairs_ + k)] = cs.sin;
    }
  }
  // x <- R x with row `row`'s angles; x is one head vector, dims past rotary_dim untouched.
  void apply(Index row, const RopeFrequencies& f, float* x) const {
    const double* c = &cos_[static_cast<std::size_t>(row * pairs_)];
    const double* s = &sin_[static_cast<std::size_t>(row * pairs_)];
    for (int k = 0; k < f.num_pairs(); ++k) {
      rope::PairDims p = rope::pair_dims(f.pair_layout, f.rotary_dim, k);
      double a = x[p.first], b = x[p.second];
      x[p.first] = static_cast<float>(a * c[k] - b * s[k]);
      x[p.second] = static_cast<float>(a * s[k] + b * c[k]);
    }
  }

 private:
  int pairs_ = 0;
  std::vector<double> cos_;
  std::vector<double> sin_;
};

// cos/sin of R(base + t) for the keys t in [0, kKeyBlock) of a tile, with no trig per key: the
// exact angles of t * w (a table built once per frequency set) are combined with the exact angle of
// `base` (once per tile) by angle addition, cos(b + t) = cb ct - sb st, sin(b + t) = sb ct + cb st.
// Both angles come from Q0.64 turns, whose wrapping sum is the angle of base + t modulo one turn,
// so the identity is exact at every position; the only error is rounding. Inputs and sums are in
// float, like the rotation and the GEMMs after it: within 1.5e-7 of rope::cos_sin(base + t) for
// bases up to 2^62 (measured; 3e-8 in double, at twice the cost), against ~1e-6 for an angle error
// to show in the tests' 1e-5 tolerance.
class KeyRotations {
 public:
  using Array = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  void reserve(int pairs) {
    offset_cos_.resize(kKeyBlock, pairs);
    offset_sin_.resize(kKeyBlock, pairs);
    base_cos_.resize(1, pairs);
    base_sin_.resize(1, pairs);
    cos_.resize(kKeyBlock, pairs);
    sin_.resize(kKeyBlock, pairs);
  }
  // The table of t * w, t in [0, kKeyBlock), for f's frequencies.
  void set_frequencies(const RopeFrequencies& f) {
    for (Index t = 0; t < kKeyBlock; ++t) {
      for (int k = 0; k < f.num_pairs(); ++k) {
        rope::CosSin cs = rope::cos_sin(t, f.turns[static_cast<std::size_t>(k)]);
        offset_cos_(t, k) = static_cast<float>(cs.cos);
        offset_sin_(t, k) = static_cast<float>(cs.sin);
      }
    }
  }
  // Angles of the n keys at base, base + 1, ..., base + n - 1.
  void set_base(const RopeFrequencies& f, std::int64_t base, Index n) {
    const int pairs = f.num_pairs();
    for (int k = 0; k < pairs; ++k) {
      rope::CosSin cs = rope::cos_sin(base, f.turns[static_cast<std::size_t>(k)]);
      base_cos_(0, k) = static_cast<float>(cs.cos);
      base_sin_(0, k) = static_cast<float>(cs.sin);
    }
    const float* __restrict cb = base_cos_.data();
    const float* __restrict sb = base_sin_.data();
    for (Index t = 0; t < n; ++t) {
      const float* __restrict ct = &offset_cos_(t, 0);
      const float* __restrict st = &offset_sin_(t, 0);
      float* __restrict c = &cos_(t, 0);
      float* __restrict s = &sin_(t, 0);
      for (int k = 0; k < pairs; ++k) {
        c[k] = cb[k] * ct[k] - sb[k] * st[k];
        s[k] = sb[k] * ct[k] + cb[k] * st[k];
      }
    }
  }
  // Rows t in [0, n) of one head's tile (x: [n, head_dim] floats) <- R(base + t) of themselves, in
  // float, one SIMD register of pairs at a time for the half layout, whose pairs are two contiguous
  // runs; dims past rotary_dim untouched.
  void rotate(const RopeFrequencies& f, Index n, float* x) const {
    constexpr int kWidth = Eigen::internal::packet_traits<float>::size;  // 4 with SSE, 16 AVX-512
    using Packet = Eigen::Array<float, kWidth, 1>;
    const int pairs = f.num_pairs();
    const int D = f.head_dim;
    const int vectorized = f.pair_layout == PairLayout::kHalf ? pairs / kWidth * kWidth : 0;
    for (Index t = 0; t < n; ++t, x += D) {
      const float* c = &cos_(t, 0);
      const float* s = &sin_(t, 0);
      for (int i = 0; i < vectorized; i += kWidth) {
        const Packet cv = Eigen::Map<const Packet>(c + i), sv = Eigen::Map<const Packet>(s + i);
        Eigen::Map<Packet> x1(x + i), x2(x + pairs + i);
        const Packet a = x1, b = x2;
        x1 = a * cv - b * sv;
        x2 = a * sv + b * cv;
      }
      for (int i = vectorized; i < pairs; ++i) {
        rope::PairDims p = rope::pair_dims(f.pair_layout, f.rotary_dim, i);
        const float a = x[p.first], b = x[p.second];
        x[p.first] = a * c[i] - b * s[i];
        x[p.second] = a * s[i] + b * c[i];
      }
    }
  }

 private:
  Array offset_cos_, offset_sin_;  // [kKeyBlock, pairs] angle t * w
  Array base_cos_, base_sin_;      // [1, pairs] angle base * w
  Array cos_, sin_;                // [kKeyBlock, pairs] angle (base + t) * w
};

}  // namespace lazyattn::ref::eigen::detail

#endif  // __has_include(<Eigen/Core>)
