// The no-RoPE peer of ref::eigen::decode: plain attention of one query (all heads) over one
// contiguous K/V array already rotated at its positions, with the reference's GQA grouping and
// float math (a logits GEMM per key block, the same online softmax, a P.V GEMM), written here
// because the reference has no path that skips RoPE.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lazyattn/rope.hpp"
#include "shapes.hpp"

namespace lazyattn::bench {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const Matrix>;

// Buffers of one call, sized on first use and kept: the peer allocates nothing per call.
struct PlainWorkspace {
  Matrix q;  // [num_qo_heads, head_dim] query rotated at its position
  Matrix o;  // [group, head_dim]
  Matrix s;  // [group, key_block] logits, then probabilities
  Eigen::VectorXf m, l;
  std::vector<double> cos, sin;  // [num_pairs] of the query's angle
};

// out [num_qo_heads, head_dim], lse [num_qo_heads] of one decode query at position `position`:
//   q [num_qo_heads, head_dim] un-rotated (the peer turns it to `position`, as the reference does)
//   k, v [num_kv_heads, n, head_dim], k rotated at each key's logical position.
// Key blocks of kKeyBlock rows (64 matches ref::eigen's contiguous paths; 16 matches its pages).
template <int kKeyBlock>
void plain_decode(const RopeFrequencies& f, const float* q, std::int64_t position, const float* k,
                  const float* v, std::int64_t n, float scale, float* out, float* lse,
                  PlainWorkspace& w) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int pairs = f.num_pairs();
  w.q = ConstMatrixMap(q, kQoHeads, kHeadDim);
  w.cos.resize(static_cast<std::size_t>(pairs));
  w.sin.resize(static_cast<std::size_t>(pairs));
  for (int i = 0; i < pairs; ++i) {
    rope::CosSin cs = rope::cos_sin(position, f.turns[static_cast<std::size_t>(i)]);
    w.cos[static_cast<std::size_t>(i)] = cs.cos;
    w.sin[static_cast<std::size_t>(i)] = cs.sin;
  }
  const auto qscale = static_cast<float>(f.query_scale());
  for (int h = 0; h < kQoHeads; ++h) {
    float* x = w.q.row(h).data();
    for (int d = 0; d < f.rotary_dim; ++d) x[d] *= qscale;
    for (int i = 0; i < pairs; ++i) {
      rope::PairDims p = rope::pair_dims(f.pair_layout, f.rotary_dim, i);
      const double a = x[p.first], b = x[p.second];
      const double c = w.cos[static_cast<std::size_t>(i)], s = w.sin[static_cast<std::size_t>(i)];
      x[p.first] = static_cast<float>(a * c - b * s);
      x[p.second] = static_cast<float>(a * s + b * c);
    }
  }
  w.o.resize(kGroup, kHeadDim);
  w.s.resize(kGroup, kKeyBlock);
  w.m.resize(kGroup);
  w.l.resize(kGroup);
  for (int g = 0; g < kKvHeads; ++g) {
    const ConstMatrixMap K(k + static_cast<std::int64_t>(g) * n * kHeadDim, n, kHeadDim);
    const ConstMatrixMap V(v + static_cast<std::int64_t>(g) * n * kHeadDim, n, kHeadDim);
    const auto Q = w.q.middleRows(g * kGroup, kGroup);
    w.o.setZero();
    w.m.setConstant(kNegInf);
    w.l.setZero();
    for (std::int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
      const auto nb = static_cast<Eigen::Index>(std::min<std::int64_t>(kKeyBlock, n - j0));
      auto s = w.s.leftCols(nb);
      s.noalias() = Q * K.middleRows(j0, nb).transpose();
      s *= scale;
      for (int r = 0; r < kGroup; ++r) {
        const float m_new = std::max(w.m[r], s.row(r).maxCoeff());
        const float alpha = std::exp(w.m[r] - m_new);
        s.row(r) = (s.row(r).array() - m_new).exp().matrix();
        w.l[r] = w.l[r] * alpha + s.row(r).sum();
        w.o.row(r) *= alpha;
        w.m[r] = m_new;
      }
      w.o.noalias() += s * V.middleRows(j0, nb);
    }
    for (int r = 0; r < kGroup; ++r) {
      const int h = g * kGroup + r;
      Eigen::Map<Eigen::RowVectorXf>(out + static_cast<std::int64_t>(h) * kHeadDim, kHeadDim) =
          w.o.row(r) / w.l[r];
      lse[h] = w.m[r] + std::log(w.l[r]);
    }
  }
}

}  // namespace lazyattn::bench
