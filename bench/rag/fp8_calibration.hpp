// The scales of an fp8 (e4m3) KV pool, calibrated as a server calibrates before it serves, the
// same way by both backends (cpu_backend.hpp, cuda_backend.cuh): the model encodes kDocuments
// sequences of kLength random tokens (drawn as the workload draws its documents, from a stream of
// their own) into a pool of a wider type, and each (layer, KV head) gets
//   K: the largest norm of a rotary pair (what either of its dims can reach under any rotation:
//      keys are stored rotated by their positions) or |k| of a dim past the rotary ones;
//   V: the largest |v|;
// each times kHeadroom / 448, so that what calibration saw uses 1 / kHeadroom of e4m3's range and
// values up to kHeadroom times larger still fit. Host code only (no Eigen, no CUDA).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/rope/rotate.hpp"
#include "random.hpp"

namespace lazyattn::rag::fp8 {

inline constexpr int kDocuments = 4;
inline constexpr int kLength = 256;
inline constexpr float kHeadroom = 2.0f;

struct Scales {
  std::vector<float> k, v;  // [num_layers][num_kv_heads]
};

// The calibration documents' tokens for a model of `vocab` tokens and weight seed `seed`.
inline std::vector<std::vector<std::int32_t>> documents(int vocab, std::uint64_t seed) {
  std::vector<std::vector<std::int32_t>> docs(kDocuments);
  for (int i = 0; i < kDocuments; ++i) {
    SplitMix64 g(mix_seed(seed, 300, static_cast<std::uint64_t>(i)));
    for (int t = 0; t < kLength; ++t)
      docs[static_cast<std::size_t>(i)].push_back(
          static_cast<std::int32_t>(g.below(static_cast<std::uint64_t>(vocab))));
  }
  return docs;
}

// The scales from the calibration documents' K/V in `store` (a pool of element type T, float or
// bfloat16), each document's pages in `pages`, keys rotated as `f` lays out its pairs.
template <class T>
Scales scales_from(const KvStore& store, std::span<const std::vector<std::int32_t>> pages,
                   const RopeFrequencies& f) {
  const PoolGeometry& geo = store.geometry();
  const int layers = geo.num_layers, heads = geo.num_kv_heads, D = geo.head_dim;
  const int P = geo.page_size;
  const T* kp = store.k_pool<T>();
  const T* vp = store.v_pool<T>();
  Scales s;
  s.k.assign(static_cast<std::size_t>(layers) * static_cast<std::size_t>(heads), 0.0f);
  s.v = s.k;
  std::vector<float> k(static_cast<std::size_t>(D));
  for (const std::vector<std::int32_t>& doc : pages) {
    for (int l = 0; l < layers; ++l) {
      for (int h = 0; h < heads; ++h) {
        float& ks = s.k[static_cast<std::size_t>(l * heads + h)];
        float& vs = s.v[static_cast<std::size_t>(l * heads + h)];
        for (int t = 0; t < kLength; ++t) {
          const std::int64_t at = geo.offset(l, doc[static_cast<std::size_t>(t / P)], h, t % P);
          for (int d = 0; d < D; ++d) {
            k[static_cast<std::size_t>(d)] = to_float(kp[at + d]);
            vs = std::max(vs, std::fabs(to_float(vp[at + d])));
          }
          for (int d = f.rotary_dim; d < D; ++d) ks = std::max(ks, std::fabs(k[d]));
          for (int p = 0; p < f.num_pairs(); ++p) {
            const rope::PairDims pd = rope::pair_dims(f.pair_layout, f.rotary_dim, p);
            ks = std::max(ks, std::hypot(k[pd.first], k[pd.second]));
          }
        }
      }
    }
  }
  for (std::vector<float>* x : {&s.k, &s.v}) {
    for (float& e : *x) e = e > 0.0f ? e * kHeadroom / 448.0f : 1.0f;
  }
  return s;
}

}  // namespace lazyattn::rag::fp8
