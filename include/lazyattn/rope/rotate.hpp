// Rotating one head vector: rotate at a position, undo a rotation, rotate by a difference (m - s).
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "lazyattn/error.hpp"
#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/frequencies.hpp"

namespace lazyattn::rope {

// The two dimensions pair `i` rotates, for a head whose first `rotary_dim` dimensions rotate.
struct PairDims {
  int first;
  int second;
};

LAZYATTN_HOST_DEVICE PairDims pair_dims(PairLayout layout, int rotary_dim, int i) {
  return layout == PairLayout::kHalf ? PairDims{i, i + rotary_dim / 2} : PairDims{2 * i, 2 * i + 1};
}

// m - s, throwing when the difference does not fit in int64.
inline std::int64_t checked_difference(std::int64_t m, std::int64_t s, const char* where) {
  std::int64_t d = 0;
  LAZYATTN_CHECK(!__builtin_sub_overflow(m, s, &d), where, ": position difference ", m, " - ", s,
                 " overflows int64");
  return d;
}

// x <- R(position) x, in place. x is one head vector [head_dim]; dims past rotary_dim pass through.
template <class T>
void rotate(const RopeFrequencies& f, std::int64_t position, std::span<T> x) {
  LAZYATTN_CHECK(static_cast<int>(x.size()) == f.head_dim, "rope::rotate: vector of size ",
                 x.size(), ", expected head_dim ", f.head_dim);
  for (int i = 0; i < f.num_pairs(); ++i) {
    CosSin cs = cos_sin(position, f.turns[i]);
    PairDims p = pair_dims(f.pair_layout, f.rotary_dim, i);
    double a = static_cast<double>(x[p.first]);
    double b = static_cast<double>(x[p.second]);
    x[p.first] = static_cast<T>(a * cs.cos - b * cs.sin);
    x[p.second] = static_cast<T>(a * cs.sin + b * cs.cos);
  }
}

// x <- R(position)^-1 x = R(-position) x.
template <class T>
void inverse_rotate(const RopeFrequencies& f, std::int64_t position, std::span<T> x) {
  LAZYATTN_CHECK(position != std::numeric_limits<std::int64_t>::min(),
                 "rope::inverse_rotate: position ", position, " has no negation in int64");
  rotate(f, -position, x);
}

// x <- R(m - s) x: what a query at m needs against keys held rotated relative to start s.
template <class T>
void relative_rotate(const RopeFrequencies& f, std::int64_t m, std::int64_t s, std::span<T> x) {
  rotate(f, checked_difference(m, s, "rope::relative_rotate"), x);
}

}  // namespace lazyattn::rope
