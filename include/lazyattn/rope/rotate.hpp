// Rotating one head vector: rotate at a position, undo a rotation, rotate by a difference (m - s).
#pragma once

#include <concepts>
#include <cstddef>
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
// Computes in double and rounds each element once; 16-bit types go through float first, which
// would round twice, so they are left to callers that convert explicitly.
template <std::floating_point T>
void rotate(const RopeFrequencies& f, std::int64_t position, std::span<T> x) {
  LAZYATTN_CHECK(static_cast<int>(x.size()) == f.head_dim, "rope::rotate: vector of size ",
                 x.size(), ", expected head_dim ", f.head_dim);
  // RopeFrequencies is plain data that callers may fill by hand: check it before indexing.
  LAZYATTN_CHECK(f.rotary_dim >= 0 && f.rotary_dim % 2 == 0 && f.rotary_dim <= f.head_dim &&
                     f.turns.size() == static_cast<std::size_t>(f.num_pairs()),
                 "rope::rotate: rotary_dim ", f.rotary_dim, " with ", f.turns.size(),
                 " turns for head_dim ", f.head_dim,
                 ", expected an even rotary_dim <= head_dim and rotary_dim / 2 turns");
  for (int i = 0; i < f.num_pairs(); ++i) {
    CosSin cs = cos_sin(position, f.turns[i]);
    PairDims p = pair_dims(f.pair_layout, f.rotary_dim, i);
    auto a = static_cast<double>(x[p.first]);
    auto b = static_cast<double>(x[p.second]);
    x[p.first] = static_cast<T>(a * cs.cos - b * cs.sin);
    x[p.second] = static_cast<T>(a * cs.sin + b * cs.cos);
  }
}

// x <- R(position)^-1 x = R(-position) x.
template <std::floating_point T>
void inverse_rotate(const RopeFrequencies& f, std::int64_t position, std::span<T> x) {
  LAZYATTN_CHECK(position != std::numeric_limits<std::int64_t>::min(),
                 "rope::inverse_rotate: position ", position, " has no negation in int64");
  rotate(f, -position, x);
}

// x <- R(m - s) x: what a query at m needs against keys held rotated relative to start s.
template <std::floating_point T>
void relative_rotate(const RopeFrequencies& f, std::int64_t m, std::int64_t s, std::span<T> x) {
  rotate(f, checked_difference(m, s, "rope::relative_rotate"), x);
}

}  // namespace lazyattn::rope
