// lazyattn::ref::scalar: the naive CPU reference. Float64 accumulation, its own indexing of the
// page pool and its own long double trigonometry, so that it checks the library instead of
// repeating it; angles are reduced exactly, with the library's Q0.64 turns (rope/angle.hpp).
//
// Per query Q_i (position m) and key K_j (position n), one head at a time:
//   pass 1  S_ij = logit(<R(m) Q_i, R(n) K_j>), rotated the way the method says (below)
//   pass 2  m_i = max_j S_ij
//   pass 3  l_i = sum_j exp(S_ij - m_i)
//   pass 4  O_i = sum_j exp(S_ij - m_i) V_j / l_i,   lse_i = m_i + log l_i
// eager:    <R(m) Q_i, K~_j> with K~_j = R(n) K_j (raw form) or R(s) K_j (local form, start s)
// deferred: <R(m - n) Q_i, K_j> (raw form) or <R(m - s) Q_i, K_j> (local form, once per segment)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/dtype.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/ref/common.hpp"
#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/frequencies.hpp"
#include "lazyattn/rope/policy.hpp"

namespace lazyattn::ref::scalar {
namespace detail {

using Vec = std::vector<double>;

// 2 pi / 2^64: one Q0.64 unit of a turn, in radians (the power of two scales 2 pi exactly).
inline constexpr long double kRadiansPerQ64 = 6.28318530717958647692528676655900577L * 0x1p-64L;

// cos and sin of delta * w_k for every pair k, in long double. The angle is reduced exactly
// before any rounding: delta times the pair's Q0.64 turns per position (f.turns, checked against
// binary128 in tests/rope/test_angle.cpp), wrapping modulo 2^64 = one turn, is the angle modulo
// 2 pi for every int64 delta, so R(m) and R(n) compose to R(m - n) however far m and n are. The
// signed fraction converts to long double exactly; the angle in [-pi, pi) is then within 4e-19
// rad. (delta * inv_freq in long double rounds the unreduced product: up to 0.06 rad at 2^60.)
struct Angles {
  std::vector<long double> cos;
  std::vector<long double> sin;

  void set(const RopeFrequencies& f, std::int64_t delta) {
    const std::size_t pairs = static_cast<std::size_t>(f.rotary_dim / 2);
    cos.resize(pairs);
    sin.resize(pairs);
    for (std::size_t k = 0; k < pairs; ++k) {
      const auto turn = static_cast<std::int64_t>(rope::angle_turns_q64(delta, f.turns[k]));
      const long double a = static_cast<long double>(turn) * kRadiansPerQ64;
      cos[k] = cosl(a);
      sin[k] = sinl(a);
    }
  }
};

// Pair k rotates dims (k, k + rotary_dim/2) in the half layout ("rotate_half", Llama) and
// (2k, 2k + 1) in the interleaved one (GPT-J). Dims past rotary_dim never rotate.
inline int first_dim(PairLayout layout, int rotary_dim, int k) {
  (void)rotary_dim;
  return layout == PairLayout::kHalf ? k : 2 * k;
}
inline int second_dim(PairLayout layout, int rotary_dim, int k) {
  return layout == PairLayout::kHalf ? k + rotary_dim / 2 : 2 * k + 1;
}

// y = R(delta) x for one head vector of f.head_dim doubles. y may alias x: each pair reads both
// of its dims before writing them, and no other pair touches them.
inline void rotate(const RopeFrequencies& f, const Angles& a, const double* x, double* y) {
  for (int d = f.rotary_dim; d < f.head_dim; ++d) y[d] = x[d];
  for (int k = 0; k < f.rotary_dim / 2; ++k) {
    const int i = first_dim(f.pair_layout, f.rotary_dim, k);
    const int j = second_dim(f.pair_layout, f.rotary_dim, k);
    const long double xi = x[i], xj = x[j], c = a.cos[k], s = a.sin[k];
    y[i] = static_cast<double>(xi * c - xj * s);
    y[j] = static_cast<double>(xi * s + xj * c);
  }
}

// transformers scales cos and sin by attention_factor for q and for k, so the rotary part of each
// logit carries attention_factor^2: applied here, once, to the query's rotary dims.
inline void scale_query(const RopeFrequencies& f, double* q) {
  const double af = f.attention_factor;
  for (int d = 0; d < f.rotary_dim; ++d) q[d] *= af * af;
}

inline double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

inline double logit(const AttentionParams& p, double q_dot_k) {
  double s = q_dot_k * p.scale();
  return p.logits_soft_cap > 0 ? p.logits_soft_cap * std::tanh(s / p.logits_soft_cap) : s;
}

// Passes 2-4 for one query and head over its visible keys: S[j] the logits, V[j] the value rows.
// No visible key: O_i = 0, lse_i = -inf (a partial state that merges as empty), never NaN.
inline void softmax_row(const Vec& S, const std::vector<const double*>& V, int head_dim, float* out,
                        float* lse) {
  if (S.empty()) {
    for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
    *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  double m_i = -std::numeric_limits<double>::infinity();
  for (double s : S) m_i = std::max(m_i, s);
  double l_i = 0;
  for (double s : S) l_i += std::exp(s - m_i);
  Vec O_i(static_cast<std::size_t>(head_dim), 0.0);
  for (std::size_t j = 0; j < S.size(); ++j) {
    double p = std::exp(S[j] - m_i);
    for (int d = 0; d < head_dim; ++d) O_i[d] += p * V[j][d];
  }
  for (int d = 0; d < head_dim; ++d) out[d] = static_cast<float>(O_i[d] / l_i);
  *lse = static_cast<float>(m_i + std::log(l_i));
}

// The keys of one request, gathered in segment order as they sit in the store (float64).
struct Context {
  std::int64_t n = 0;
  Vec K;                                 // [n, num_kv_heads, head_dim] as stored
  Vec V;                                 // [n, num_kv_heads, head_dim]
  std::vector<std::int64_t> position;    // [n] logical position n_j
  std::vector<std::int64_t> start;       // [n] rotation start of the key's segment (s_j, or 0
                                         //     for absolute form: rotation_start)
  std::vector<StorageForm> form;         // [n]
  std::vector<std::int64_t> tail_index;  // [n] index within the tail, -1 for document keys
};

// Element 0 of key i of segment s, KV head g: the pool is
// [num_layers, num_pages, num_kv_heads, page_size, head_dim] and key i lives in slot i % page_size
// of the segment's (i / page_size)-th page.
inline std::int64_t pool_index(const KvStoreConfig& c, const Plan& plan, int layer, int s,
                               std::int64_t i, int g) {
  std::int64_t page =
      plan.page_ids[static_cast<std::size_t>(plan.segment_page_indptr[s] + i / c.page_size)];
  std::int64_t slot = i % c.page_size;
  return ((((static_cast<std::int64_t>(layer) * c.num_pages + page) * c.num_kv_heads + g) *
               c.page_size +
           slot) *
          c.head_dim);
}

template <class T>
Context gather(const KvStore& store, const Plan& plan, int layer, int b) {
  const KvStoreConfig& c = store.config();
  const T* k_pool = store.k_pool<T>();
  const T* v_pool = store.v_pool<T>();
  const int H = c.num_kv_heads, D = c.head_dim;
  Context ctx;
  for (int s = plan.request_segment_indptr[b]; s < plan.request_segment_indptr[b + 1]; ++s) {
    const bool is_tail = s == plan.request_tail_segment[b];
    for (std::int64_t i = 0; i < plan.segment_length[s]; ++i) {
      for (int g = 0; g < H; ++g) {
        std::int64_t at = pool_index(c, plan, layer, s, i, g);
        // An fp8 store's values are the stored codes times their layer's and head's scale (1
        // elsewhere: the products are the stored values themselves).
        const float k_scale = store.k_scale(layer, g), v_scale = store.v_scale(layer, g);
        for (int d = 0; d < D; ++d) {
          ctx.K.push_back(to_float(k_pool[at + d]) * k_scale);
          ctx.V.push_back(to_float(v_pool[at + d]) * v_scale);
        }
      }
      ctx.position.push_back(plan.segment_start[s] + i);
      const auto form = static_cast<StorageForm>(plan.segment_form[s]);
      ctx.start.push_back(rotation_start(form, plan.segment_start[s]));
      ctx.form.push_back(form);
      ctx.tail_index.push_back(is_tail ? i : -1);
      ++ctx.n;
    }
  }
  return ctx;
}

template <class T>
void attend_typed(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                  const AttentionParams& params, std::span<const float> q, std::span<float> out,
                  std::span<float> lse, Method method) {
  const int Hq = params.num_qo_heads, Hkv = params.num_kv_heads, D = params.head_dim;
  const int group = Hq / Hkv;
  for (int b = 0; b < plan.num_requests(); ++b) {
    const RopeFrequencies f = rope.frequencies(plan.request_rope_length[b]);
    const Context ctx = gather<T>(store, plan, layer, b);
    const std::int64_t q_begin = plan.request_query_indptr[b];
    const std::int64_t num_queries = plan.request_query_indptr[b + 1] - q_begin;
    const std::int64_t tail_length = plan.segment_length[plan.request_tail_segment[b]];

    // Eager: K~_j = R(n_j) K_j for raw keys, R(s_j) K_j for local ones (K_j = R(n_j - s_j) k_j).
    Vec K_eager;
    if (method == Method::kEager) {
      K_eager.resize(ctx.K.size());
      Angles a;
      for (std::int64_t j = 0; j < ctx.n; ++j) {
        a.set(f, ctx.form[j] == StorageForm::kRaw ? ctx.position[j] : ctx.start[j]);
        for (int g = 0; g < Hkv; ++g) {
          std::size_t at = static_cast<std::size_t>((j * Hkv + g) * D);
          rotate(f, a, &ctx.K[at], &K_eager[at]);
        }
      }
    }

    Vec Q(static_cast<std::size_t>(Hq * D));      // Q_i, all heads, query-scaled
    Vec Q_rot(static_cast<std::size_t>(Hq * D));  // Q_i rotated for the current key
    std::vector<Vec> S(static_cast<std::size_t>(Hq));
    std::vector<std::vector<const double*>> V(static_cast<std::size_t>(Hq));
    auto Q_h = [&](int h) { return &Q[static_cast<std::size_t>(h) * D]; };
    auto Q_rot_h = [&](int h) { return &Q_rot[static_cast<std::size_t>(h) * D]; };
    Angles a;
    for (std::int64_t r = 0; r < num_queries; ++r) {
      const std::int64_t row = q_begin + r;
      const std::int64_t m = plan.request_query_position[b] + r;
      for (int x = 0; x < Hq * D; ++x) Q[x] = q[static_cast<std::size_t>(row * Hq * D + x)];
      for (int h = 0; h < Hq; ++h) scale_query(f, Q_h(h));
      for (int h = 0; h < Hq; ++h) {
        S[h].clear();
        V[h].clear();
      }
      if (method == Method::kEager) {
        a.set(f, m);
        for (int h = 0; h < Hq; ++h) rotate(f, a, Q_h(h), Q_rot_h(h));
      }
      bool have_delta = false;
      std::int64_t delta = 0;
      // pass 1: S_ij over the visible keys: every document key, tail keys up to this query's own.
      for (std::int64_t j = 0; j < ctx.n; ++j) {
        if (ctx.tail_index[j] >= 0 && ctx.tail_index[j] > tail_length - num_queries + r) continue;
        const double* K_j = nullptr;
        if (method == Method::kEager) {
          K_j = &K_eager[static_cast<std::size_t>(j * Hkv * D)];
        } else {
          // Deferred: the query turns by m - n (raw) or m - s (local); stored keys stay as they
          // are.
          std::int64_t want =
              m - (ctx.form[j] == StorageForm::kRaw ? ctx.position[j] : ctx.start[j]);
          if (!have_delta || want != delta) {
            delta = want;
            have_delta = true;
            a.set(f, delta);
            for (int h = 0; h < Hq; ++h) rotate(f, a, Q_h(h), Q_rot_h(h));
          }
          K_j = &ctx.K[static_cast<std::size_t>(j * Hkv * D)];
        }
        for (int h = 0; h < Hq; ++h) {
          const int g = h / group;
          S[h].push_back(logit(params, dot(Q_rot_h(h), K_j + g * D, D)));
          V[h].push_back(&ctx.V[static_cast<std::size_t>((j * Hkv + g) * D)]);
        }
      }
      // passes 2-4
      for (int h = 0; h < Hq; ++h) {
        softmax_row(S[h], V[h], D, &out[static_cast<std::size_t>((row * Hq + h) * D)],
                    &lse[static_cast<std::size_t>(row * Hq + h)]);
      }
    }
  }
}

}  // namespace detail

// Attention of the plan's query rows over their requests' segments in `layer` of the store.
//   q   [num_queries, num_qo_heads, head_dim] un-rotated queries, rows in plan order
//   out [num_queries, num_qo_heads, head_dim]
//   lse [num_queries, num_qo_heads] natural-log log-sum-exp of the logits
// Queries see every key of every document segment and the tail keys causally.
inline void attend(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                   const AttentionParams& params, std::span<const float> q, std::span<float> out,
                   std::span<float> lse, Method method = Method::kDeferred) {
  ref::detail::check_method("ref::scalar::attend", method);
  ref::detail::check_attend("ref::scalar::attend", store, plan, layer, rope, params, q.size(),
                            out.size(), lse.size());
  dispatch_pool_dtype(store.config().dtype, [&](auto tag) {
    detail::attend_typed<decltype(tag)>(store, plan, layer, rope, params, q, out, lse, method);
  });
}

// One decode step: exactly one query per request.
inline void decode(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                   const AttentionParams& params, std::span<const float> q, std::span<float> out,
                   std::span<float> lse, Method method = Method::kDeferred) {
  ref::detail::check_decode("ref::scalar::decode", plan);
  attend(store, plan, layer, rope, params, q, out, lse, method);
}

// Tail prefill: the last num_queries tail tokens of each request, any number.
inline void prefill(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                    const AttentionParams& params, std::span<const float> q, std::span<float> out,
                    std::span<float> lse, Method method = Method::kDeferred) {
  attend(store, plan, layer, rope, params, q, out, lse, method);
}

// Full attention from raw (un-rotated) tensors at explicit positions: R(p) Q against R(p) K.
//   q [num_queries, num_qo_heads, head_dim] at q_positions [num_queries]
//   k, v [num_keys, num_kv_heads, head_dim] at k_positions [num_keys]
//   mask [num_queries, num_keys], nonzero = visible; empty = everything visible
//   rope_length: what length-dependent schedules see; 0 = one past the largest position
inline void dense_attention(const RopePolicy& rope, const AttentionParams& params,
                            std::span<const float> q, std::span<const std::int64_t> q_positions,
                            std::span<const float> k, std::span<const std::int64_t> k_positions,
                            std::span<const float> v, std::span<const std::uint8_t> mask,
                            std::span<float> out, std::span<float> lse,
                            std::int64_t rope_length = 0) {
  using detail::Vec;
  const char* where = "ref::scalar::dense_attention";
  rope_length =
      ref::detail::check_dense(where, rope, params, q.size(), q_positions, k.size(), k_positions,
                               v.size(), mask.size(), out.size(), lse.size(), rope_length);
  const RopeFrequencies f = rope.frequencies(rope_length);
  const int Hq = params.num_qo_heads, Hkv = params.num_kv_heads, D = params.head_dim;
  const int group = Hq / Hkv;
  const auto nq = static_cast<std::int64_t>(q_positions.size());
  const auto nk = static_cast<std::int64_t>(k_positions.size());
  detail::Angles a;
  Vec K_rot(k.begin(), k.end());  // R(n_j) K_j
  Vec V(v.begin(), v.end());
  for (std::int64_t j = 0; j < nk; ++j) {
    a.set(f, k_positions[j]);
    for (int g = 0; g < Hkv; ++g) {
      double* x = &K_rot[static_cast<std::size_t>((j * Hkv + g) * D)];
      detail::rotate(f, a, x, x);
    }
  }
  Vec Q_i(static_cast<std::size_t>(D));
  detail::Vec S;
  std::vector<const double*> V_rows;
  for (std::int64_t i = 0; i < nq; ++i) {
    a.set(f, q_positions[i]);
    for (int h = 0; h < Hq; ++h) {
      const int g = h / group;
      for (int d = 0; d < D; ++d) Q_i[d] = q[static_cast<std::size_t>((i * Hq + h) * D + d)];
      detail::scale_query(f, Q_i.data());
      detail::rotate(f, a, Q_i.data(), Q_i.data());
      S.clear();
      V_rows.clear();
      for (std::int64_t j = 0; j < nk; ++j) {
        if (!mask.empty() && mask[static_cast<std::size_t>(i * nk + j)] == 0) continue;
        S.push_back(detail::logit(
            params,
            detail::dot(Q_i.data(), &K_rot[static_cast<std::size_t>((j * Hkv + g) * D)], D)));
        V_rows.push_back(&V[static_cast<std::size_t>((j * Hkv + g) * D)]);
      }
      detail::softmax_row(S, V_rows, D, &out[static_cast<std::size_t>((i * Hq + h) * D)],
                          &lse[static_cast<std::size_t>(i * Hq + h)]);
    }
  }
}

// Standalone, causal encoding of a document from position 0 (what a model's prefill of the document
// alone computes), over raw q [length, num_qo_heads, head_dim], k, v [length, num_kv_heads,
// head_dim]. Computed the deferred way: query i turns by i - j against the raw key j.
// k_stored (optional, [length, num_kv_heads, head_dim]) receives k in k_stored_form: a copy (raw)
// or R(i) k_i at document-local positions (local), ready for KvStore::insert with one layer.
inline void encode_document(const RopePolicy& rope, const AttentionParams& params,
                            std::int64_t length, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<float> out, std::span<float> lse,
                            std::span<float> k_stored = {},
                            StorageForm k_stored_form = StorageForm::kLocal) {
  using detail::Vec;
  const char* where = "ref::scalar::encode_document";
  ref::detail::check_encode(where, rope, params, length, q.size(), k.size(), v.size(), out.size(),
                            lse.size(), k_stored.size(), k_stored_form);
  const RopeFrequencies f = rope.frequencies(length);
  const int Hq = params.num_qo_heads, Hkv = params.num_kv_heads, D = params.head_dim;
  const int group = Hq / Hkv;
  const Vec K(k.begin(), k.end());
  const Vec V(v.begin(), v.end());
  // Angles of every distance i - j in [0, length): the causal square needs no others.
  std::vector<detail::Angles> by_distance(static_cast<std::size_t>(length));
  for (std::int64_t t = 0; t < length; ++t) by_distance[static_cast<std::size_t>(t)].set(f, t);
  Vec Q_i(static_cast<std::size_t>(D)), Q_rot(static_cast<std::size_t>(D));
  Vec S;
  std::vector<const double*> V_rows;
  for (std::int64_t i = 0; i < length; ++i) {
    for (int h = 0; h < Hq; ++h) {
      const int g = h / group;
      for (int d = 0; d < D; ++d) Q_i[d] = q[static_cast<std::size_t>((i * Hq + h) * D + d)];
      detail::scale_query(f, Q_i.data());
      S.clear();
      V_rows.clear();
      for (std::int64_t j = 0; j <= i; ++j) {
        detail::rotate(f, by_distance[static_cast<std::size_t>(i - j)], Q_i.data(), Q_rot.data());
        const std::size_t at = static_cast<std::size_t>((j * Hkv + g) * D);
        S.push_back(detail::logit(params, detail::dot(Q_rot.data(), &K[at], D)));
        V_rows.push_back(&V[at]);
      }
      detail::softmax_row(S, V_rows, D, &out[static_cast<std::size_t>((i * Hq + h) * D)],
                          &lse[static_cast<std::size_t>(i * Hq + h)]);
    }
  }
  if (k_stored.empty()) return;
  Vec x(static_cast<std::size_t>(D));
  for (std::int64_t i = 0; i < length; ++i) {
    for (int g = 0; g < Hkv; ++g) {
      const std::size_t at = static_cast<std::size_t>((i * Hkv + g) * D);
      for (int d = 0; d < D; ++d) x[d] = K[at + d];
      if (k_stored_form == StorageForm::kLocal)
        detail::rotate(f, by_distance[i], x.data(), x.data());
      for (int d = 0; d < D; ++d) k_stored[at + d] = static_cast<float>(x[d]);
    }
  }
}

}  // namespace lazyattn::ref::scalar
