// lazyattn::ref::eigen: the fast CPU reference. Float, tiled (up to 64 keys of a segment, gathered
// from its pages), GQA-grouped (the query heads of a group form one matrix against each K tile),
// with the library's exact angles (rope::cos_sin). Deferred rotates the query once per segment for
// local form and each key (once for all heads of its group) for raw form.
//
// Needs Eigen 3.3+; without it this header defines nothing and LAZYATTN_REF_HAS_EIGEN is 0, so the
// umbrella <lazyattn/ref.hpp> still offers the scalar reference.
#pragma once

#if __has_include(<Eigen/Core>)
#define LAZYATTN_REF_HAS_EIGEN 1

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/attention/variants.hpp"
#include "lazyattn/dtype.hpp"
#include "lazyattn/kv/layout.hpp"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/ref/common.hpp"
#include "lazyattn/ref/eigen_rotations.hpp"
#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/frequencies.hpp"
#include "lazyattn/rope/policy.hpp"
#include "lazyattn/rope/rotate.hpp"

namespace lazyattn::ref::eigen {
namespace detail {

// Rows [0, n) of the tiles <- keys [i0, i0 + n) of one segment's KV head g, converted to float
// (times the head's scales: an fp8 store's) and gathered page by page: a page's head is
// [page_size, head_dim] contiguous, so each page (or the part of it inside the tile) is one run
// of rows. With maybe_rot (raw form), the keys are then turned to base + row, in the tile.
template <class T>
void gather_tile(const T* k_pool, const T* v_pool, float k_scale, float v_scale,
                 const PoolGeometry& geo, int layer, const std::int32_t* pages, int page_size,
                 int g, std::int64_t i0, Index n, const RopeFrequencies& f,
                 const KeyRotations* maybe_rot, Matrix& k_tile, Matrix& v_tile) {
  const Index D = k_tile.cols();
  for (Index t = 0; t < n;) {
    const std::int64_t i = i0 + t;
    const auto slot = static_cast<int>(i % page_size);
    const Index run = std::min<Index>(page_size - slot, n - t);
    const std::int64_t at = geo.offset(layer, pages[i / page_size], g, slot);
    const std::int64_t count = run * D;
    float* kd = k_tile.row(t).data();
    float* vd = v_tile.row(t).data();
    if constexpr (std::is_same_v<T, float>) {  // (float pools have no scales)
      std::copy_n(k_pool + at, count, kd);
      std::copy_n(v_pool + at, count, vd);
    } else {
      for (std::int64_t e = 0; e < count; ++e) {
        kd[e] = to_float(k_pool[at + e]) * k_scale;
        vd[e] = to_float(v_pool[at + e]) * v_scale;
      }
    }
    t += run;
  }
  if (maybe_rot) maybe_rot->rotate(f, n, k_tile.data());
}

// The frequencies of one request: shared base ones, or per-request ones for length-dependent
// schedules (computed into `scratch`).
inline const RopeFrequencies& frequencies_for(const RopePolicy& rope, std::int64_t rope_length,
                                              RopeFrequencies& scratch) {
  if (!rope.depends_on_length()) return rope.base_frequencies();
  scratch = rope.frequencies(rope_length);
  return scratch;
}

// q.k -> logit, in place on a block of dot products (variants.hpp).
inline void to_logits(Eigen::Ref<Matrix> s, const AttentionParams& p) {
  const auto scale = static_cast<float>(p.scale());
  if (p.logits_soft_cap > 0) {
    SoftCapAttention v{scale, static_cast<float>(p.logits_soft_cap)};
    s = s.unaryExpr([v](float x) { return v.logit(x); });
  } else {
    s *= scale;
  }
}

// One flash-attention step for a block of rows: s [rows, n] holds logits (masked ones -inf) and is
// overwritten with P = exp(s - m_new); O, m_i, l_i are rescaled to the new running max.
inline void online_update(Eigen::Ref<Matrix> s, const Eigen::Ref<const Matrix>& v,
                          Eigen::Ref<Matrix> o, Eigen::Ref<Vector> m, Eigen::Ref<Vector> l) {
  for (Index r = 0; r < s.rows(); ++r) {
    const float m_new = std::max(m[r], s.row(r).maxCoeff());
    if (m_new == kNegInf) {  // nothing visible yet: exp(-inf - -inf) would be NaN
      s.row(r).setZero();
      continue;
    }
    const float alpha = std::exp(m[r] - m_new);  // 0 when m[r] is still -inf
    // Weights under FLT_MIN are flushed to 0: Eigen's vectorised exp returns a denormal (about
    // 3e-39), not 0, for masked (-inf) logits, and denormal operands slow the P V product on x86
    // by an order of magnitude. Next to the row's largest weight, 1, they are below float's
    // resolution anyway.
    s.row(r) = (s.row(r).array() - m_new).exp().matrix();
    s.row(r) = (s.row(r).array() < std::numeric_limits<float>::min())
                   .select(0.0f, s.row(r).array())
                   .matrix();
    l[r] = l[r] * alpha + s.row(r).sum();
    o.row(r) *= alpha;
    m[r] = m_new;
  }
  o.noalias() += s * v;
}

inline void reset(Eigen::Ref<Matrix> o, Eigen::Ref<Vector> m, Eigen::Ref<Vector> l) {
  o.setZero();
  m.setConstant(kNegInf);
  l.setZero();
}

// O_i / l_i and lse_i = m_i + log l_i; a row that saw no key gives 0 and -inf.
inline void finish_row(const Eigen::Ref<const Matrix>& o, Index r, float m, float l, float* out,
                       float* lse) {
  if (l == 0.0f) {
    std::fill(out, out + o.cols(), 0.0f);
    *lse = kNegInf;
    return;
  }
  Eigen::Map<Eigen::RowVectorXf>(out, o.cols()) = o.row(r) / l;
  *lse = m + std::log(l);
}

// Contiguous keys in blocks: rows of q (row = query * group + head in group) against k, v [n, D],
// masked by visible(query, key). Queries below first_query(j0) see no key of the block at j0 and
// are skipped (the causal square's upper half). Rows go kRowBlock at a time so that Eigen's GEMM
// packs them on the stack instead of allocating per block.
template <class Visible, class FirstQuery>
void attend_contiguous(const Eigen::Ref<const Matrix>& q, int group,
                       const Eigen::Ref<const Matrix>& k, const Eigen::Ref<const Matrix>& v,
                       const AttentionParams& params, Visible visible, FirstQuery first_query,
                       Matrix& s_buf, Eigen::Ref<Matrix> o, Eigen::Ref<Vector> m,
                       Eigen::Ref<Vector> l) {
  const Index n = k.rows();
  for (Index j0 = 0; j0 < n; j0 += kKeyBlock) {
    const Index nb = std::min(kKeyBlock, n - j0);
    const Index first = std::min<Index>(static_cast<Index>(first_query(j0)) * group, q.rows());
    for (Index r0 = first; r0 < q.rows(); r0 += kRowBlock) {
      const Index rows = std::min(kRowBlock, q.rows() - r0);
      auto s = s_buf.topLeftCorner(rows, nb);
      s.noalias() = q.middleRows(r0, rows) * k.middleRows(j0, nb).transpose();
      to_logits(s, params);
      for (Index r = 0; r < rows; ++r) {
        const Index query = (r0 + r) / group;
        for (Index t = 0; t < nb; ++t) {
          if (!visible(query, j0 + t)) s(r, t) = kNegInf;
        }
      }
      online_update(s, v.middleRows(j0, nb), o.middleRows(r0, rows), m.segment(r0, rows),
                    l.segment(r0, rows));
    }
  }
}

// Query rows of one request in group order: row (g * capacity + r * group + j) holds query r of
// head g * group + j, with the rotary dims scaled by attention_factor^2 (applied once, here).
inline void load_queries(std::span<const float> q, std::int64_t q_begin, std::int64_t num_queries,
                         const AttentionParams& p, const RopeFrequencies& f, Index capacity,
                         Matrix& qs) {
  const int Hq = p.num_qo_heads, D = p.head_dim, group = p.group_size();
  const auto qscale = static_cast<float>(f.query_scale());
  for (int g = 0; g < p.num_kv_heads; ++g) {
    for (std::int64_t r = 0; r < num_queries; ++r) {
      for (int j = 0; j < group; ++j) {
        const Index row = g * capacity + r * group + j;
        const float* src = &q[static_cast<std::size_t>(((q_begin + r) * Hq + g * group + j) * D)];
        qs.row(row) = Eigen::Map<const Eigen::RowVectorXf>(src, D);
        qs.row(row).head(f.rotary_dim) *= qscale;
      }
    }
  }
}

// dst = R(position(r)) src for every query row: one angle table per query, shared by all heads.
template <class PositionOf>
void rotate_queries(const Matrix& src, std::int64_t num_queries, const AttentionParams& p,
                    const RopeFrequencies& f, Index capacity, PositionOf position_of,
                    Rotations& rot, Matrix& dst) {
  const int group = p.group_size();
  for (std::int64_t r = 0; r < num_queries; ++r) rot.set(r, f, position_of(r));
  for (int g = 0; g < p.num_kv_heads; ++g) {
    for (std::int64_t r = 0; r < num_queries; ++r) {
      for (int j = 0; j < group; ++j) {
        const Index row = g * capacity + r * group + j;
        dst.row(row) = src.row(row);
        rot.apply(r, f, dst.row(row).data());
      }
    }
  }
}

// Reusable buffers of one attend() call, sized for its largest request before the loops start.
struct Workspace {
  Index capacity = 0;                  // rows per KV head: max over requests of num_queries * group
  Matrix q_scaled, q_at_m, q_rot, o;   // [num_kv_heads * capacity, head_dim]
  Vector m, l;                         // [num_kv_heads * capacity]
  Matrix k_tile, v_tile;               // [kKeyBlock, head_dim] (deferred)
  Matrix k_all, v_all;                 // [num_kv_heads * max_kv, head_dim] (eager)
  std::vector<std::int64_t> key_tail;  // [max_kv] index within the tail, -1 for documents
  Matrix s;                            // [kRowBlock, kKeyBlock] logits
  Rotations rot;
  KeyRotations key_rot;  // raw-form keys of one tile (deferred)
};

template <class T>
void attend_typed(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                  const AttentionParams& params, std::span<const float> q, std::span<float> out,
                  std::span<float> lse, Method method) {
  const int Hq = params.num_qo_heads, Hkv = params.num_kv_heads, D = params.head_dim;
  const int group = params.group_size();
  const int P = store.config().page_size;
  const PoolGeometry& geo = store.geometry();
  const T* k_pool = store.k_pool<T>();
  const T* v_pool = store.v_pool<T>();

  Workspace w;
  std::int64_t max_queries = 0, max_kv = 0;
  for (int b = 0; b < plan.num_requests(); ++b) {
    max_queries = std::max<std::int64_t>(
        max_queries, plan.request_query_indptr[b + 1] - plan.request_query_indptr[b]);
    max_kv = std::max(max_kv, plan.request_kv_length[b]);
  }
  w.capacity = max_queries * group;
  const Index rows_all = Hkv * w.capacity;
  w.q_scaled.resize(rows_all, D);
  w.q_at_m.resize(rows_all, D);
  w.q_rot.resize(rows_all, D);
  w.o.resize(rows_all, D);
  w.m.resize(rows_all);
  w.l.resize(rows_all);
  w.s.resize(kRowBlock, kKeyBlock);
  // At least two rows: eager uses row 0 for a segment start and row 1 for a key position.
  w.rot.reserve(std::max<std::int64_t>(max_queries, 2), rope.rotary_dim() / 2);
  if (method == Method::kDeferred) {
    w.k_tile.resize(kKeyBlock, D);
    w.v_tile.resize(kKeyBlock, D);
    w.key_rot.reserve(rope.rotary_dim() / 2);
  } else {
    w.k_all.resize(Hkv * max_kv, D);
    w.v_all.resize(Hkv * max_kv, D);
    w.key_tail.resize(static_cast<std::size_t>(max_kv));
  }

  RopeFrequencies scratch;
  bool have_key_table = false;  // w.key_rot holds the offsets of the current frequencies
  for (int b = 0; b < plan.num_requests(); ++b) {
    const RopeFrequencies& f = frequencies_for(rope, plan.request_rope_length[b], scratch);
    if (rope.depends_on_length()) have_key_table = false;
    const std::int64_t q_begin = plan.request_query_indptr[b];
    const std::int64_t nq = plan.request_query_indptr[b + 1] - q_begin;
    const Index rows = nq * group;
    const int tail = plan.request_tail_segment[b];
    const std::int64_t tail_length = plan.segment_length[tail];
    const std::int64_t m0 = plan.request_query_position[b];
    // Query r sees tail key t iff t <= tail_length - nq + r.
    const std::int64_t tail_visible_base = tail_length - nq;

    load_queries(q, q_begin, nq, params, f, w.capacity, w.q_scaled);
    for (int g = 0; g < Hkv; ++g) {
      reset(w.o.middleRows(g * w.capacity, rows), w.m.segment(g * w.capacity, rows),
            w.l.segment(g * w.capacity, rows));
    }
    auto at_m = [m0](std::int64_t r) { return m0 + r; };

    if (method == Method::kDeferred) {
      bool have_q_at_m = false;
      for (int s = plan.request_segment_indptr[b]; s < plan.request_segment_indptr[b + 1]; ++s) {
        const std::int64_t len = plan.segment_length[s];
        const auto form = static_cast<StorageForm>(plan.segment_form[s]);
        const bool raw = form == StorageForm::kRaw;
        // Raw keys turn at their logical positions start + i; stored rotations count from
        // rotation_start (the segment's start, or 0 for absolute form).
        const std::int64_t start = rotation_start(form, plan.segment_start[s]);
        const bool is_tail = s == tail;
        if (len == 0) continue;
        const Matrix* qcur = &w.q_at_m;
        if (raw) {
          // Key-side: keys turn to their positions n below, the query to m (once per request).
          if (!have_q_at_m) {
            rotate_queries(w.q_scaled, nq, params, f, w.capacity, at_m, w.rot, w.q_at_m);
            have_q_at_m = true;
          }
          if (!have_key_table) {
            w.key_rot.set_frequencies(f);
            have_key_table = true;
          }
        } else {
          // Query-side: keys hold R(i) k, so R(m - s) q against them gives <R(m) q, R(s + i) k>.
          rotate_queries(
              w.q_scaled, nq, params, f, w.capacity,
              [&](std::int64_t r) {
                return rope::checked_difference(m0 + r, start, "eigen::attend");
              },
              w.rot, w.q_rot);
          qcur = &w.q_rot;
        }
        const std::int32_t* pages =
            &plan.page_ids[static_cast<std::size_t>(plan.segment_page_indptr[s])];
        for (std::int64_t i0 = 0; i0 < len; i0 += kKeyBlock) {
          const Index n = std::min<std::int64_t>(kKeyBlock, len - i0);
          if (raw) w.key_rot.set_base(f, start + i0, n);
          for (int g = 0; g < Hkv; ++g) {
            gather_tile(k_pool, v_pool, store.k_scale(layer, g), store.v_scale(layer, g), geo,
                        layer, pages, P, g, i0, n, f, raw ? &w.key_rot : nullptr, w.k_tile,
                        w.v_tile);
            // The group's query rows against this tile, kRowBlock rows at a time (see
            // attend_contiguous).
            for (Index r0 = 0; r0 < rows; r0 += kRowBlock) {
              const Index nr = std::min(kRowBlock, rows - r0);
              const Index at_row = g * w.capacity + r0;
              auto s_blk = w.s.topLeftCorner(nr, n);
              s_blk.noalias() = qcur->middleRows(at_row, nr) * w.k_tile.topRows(n).transpose();
              to_logits(s_blk, params);
              if (is_tail) {
                for (Index r = 0; r < nr; ++r) {
                  const std::int64_t last = tail_visible_base + (r0 + r) / group;
                  for (Index t = 0; t < n; ++t) {
                    if (i0 + t > last) s_blk(r, t) = kNegInf;
                  }
                }
              }
              online_update(s_blk, w.v_tile.topRows(n), w.o.middleRows(at_row, nr),
                            w.m.segment(at_row, nr), w.l.segment(at_row, nr));
            }
          }
        }
      }
    } else {
      // Eager: materialize every key rotated at its logical position, R(n) k for raw keys and
      // R(s) (R(i) k) for local ones, then attend with R(m) q.
      const std::int64_t kv = plan.request_kv_length[b];
      std::int64_t j = 0;
      for (int s = plan.request_segment_indptr[b]; s < plan.request_segment_indptr[b + 1]; ++s) {
        const std::int64_t len = plan.segment_length[s];
        const auto form = static_cast<StorageForm>(plan.segment_form[s]);
        const bool raw = form == StorageForm::kRaw;
        // Raw keys turn at their logical positions start + i; stored rotations count from
        // rotation_start (the segment's start, or 0 for absolute form).
        const std::int64_t start = rotation_start(form, plan.segment_start[s]);
        if (!raw) w.rot.set(0, f, start);
        for (std::int64_t i = 0; i < len; ++i, ++j) {
          const std::int64_t page =
              plan.page_ids[static_cast<std::size_t>(plan.segment_page_indptr[s] + i / P)];
          const int slot = static_cast<int>(i % P);
          if (raw) w.rot.set(1, f, start + i);
          for (int g = 0; g < Hkv; ++g) {
            const std::int64_t at = geo.offset(layer, page, g, slot);
            const Index row = g * max_kv + j;
            const float k_scale = store.k_scale(layer, g), v_scale = store.v_scale(layer, g);
            for (int d = 0; d < D; ++d) {
              w.k_all(row, d) = to_float(k_pool[at + d]) * k_scale;
              w.v_all(row, d) = to_float(v_pool[at + d]) * v_scale;
            }
            w.rot.apply(raw ? 1 : 0, f, w.k_all.row(row).data());
          }
          w.key_tail[static_cast<std::size_t>(j)] = s == tail ? i : -1;
        }
      }
      rotate_queries(w.q_scaled, nq, params, f, w.capacity, at_m, w.rot, w.q_at_m);
      auto visible = [&](Index query, Index key) {
        const std::int64_t t = w.key_tail[static_cast<std::size_t>(key)];
        return t < 0 || t <= tail_visible_base + query;
      };
      for (int g = 0; g < Hkv; ++g) {
        attend_contiguous(
            w.q_at_m.middleRows(g * w.capacity, rows), group, w.k_all.middleRows(g * max_kv, kv),
            w.v_all.middleRows(g * max_kv, kv), params, visible, [](Index) { return Index{0}; },
            w.s, w.o.middleRows(g * w.capacity, rows), w.m.segment(g * w.capacity, rows),
            w.l.segment(g * w.capacity, rows));
      }
    }

    for (int g = 0; g < Hkv; ++g) {
      for (std::int64_t r = 0; r < nq; ++r) {
        for (int jj = 0; jj < group; ++jj) {
          const Index row = g * w.capacity + r * group + jj;
          const std::int64_t oi = (q_begin + r) * Hq + g * group + jj;
          finish_row(w.o, row, w.m[row], w.l[row], &out[static_cast<std::size_t>(oi * D)],
                     &lse[static_cast<std::size_t>(oi)]);
        }
      }
    }
  }
}

// Dense attention core shared by dense_attention and encode_document: rotates q and k at their
// positions (both raw), then attends each KV head's query rows over all its keys.
template <class Visible, class FirstQuery>
void dense(const RopeFrequencies& f, const AttentionParams& params, std::span<const float> q,
           std::span<const std::int64_t> q_positions, std::span<const float> k,
           std::span<const std::int64_t> k_positions, std::span<const float> v, Visible visible,
           FirstQuery first_query, std::span<float> out, std::span<float> lse,
           Matrix* k_rotated_out) {
  const int Hq = params.num_qo_heads, Hkv = params.num_kv_heads, D = params.head_dim;
  const int group = params.group_size();
  const auto nq = static_cast<Index>(q_positions.size());
  const auto nk = static_cast<Index>(k_positions.size());
  const Index capacity = nq * group;
  Rotations rot;
  rot.reserve(std::max<Index>({nq, nk, 1}), f.num_pairs());
  Matrix qs(Hkv * capacity, D), qr(Hkv * capacity, D);
  load_queries(q, 0, nq, params, f, capacity, qs);
  rotate_queries(
      qs, nq, params, f, capacity, [&](std::int64_t r) { return q_positions[r]; }, rot, qr);
  Matrix kr(Hkv * nk, D), vm(Hkv * nk, D);
  for (Index j = 0; j < nk; ++j) rot.set(j, f, k_positions[static_cast<std::size_t>(j)]);
  for (int g = 0; g < Hkv; ++g) {
    for (Index j = 0; j < nk; ++j) {
      const std::size_t at = static_cast<std::size_t>((j * Hkv + g) * D);
      kr.row(g * nk + j) = Eigen::Map<const Eigen::RowVectorXf>(&k[at], D);
      vm.row(g * nk + j) = Eigen::Map<const Eigen::RowVectorXf>(&v[at], D);
      rot.apply(j, f, kr.row(g * nk + j).data());
    }
  }
  Matrix o(Hkv * capacity, D), s_buf(kRowBlock, kKeyBlock);
  Vector m(Hkv * capacity), l(Hkv * capacity);
  reset(o, m, l);
  for (int g = 0; g < Hkv; ++g) {
    attend_contiguous(qr.middleRows(g * capacity, capacity), group, kr.middleRows(g * nk, nk),
                      vm.middleRows(g * nk, nk), params, visible, first_query, s_buf,
                      o.middleRows(g * capacity, capacity), m.segment(g * capacity, capacity),
                      l.segment(g * capacity, capacity));
    for (Index r = 0; r < nq; ++r) {
      for (int jj = 0; jj < group; ++jj) {
        const Index row = g * capacity + r * group + jj;
        const Index oi = r * Hq + g * group + jj;
        finish_row(o, row, m[row], l[row], &out[static_cast<std::size_t>(oi * D)],
                   &lse[static_cast<std::size_t>(oi)]);
      }
    }
  }
  if (k_rotated_out) *k_rotated_out = std::move(kr);
}

}  // namespace detail

// Same contract as ref::scalar::attend (see there): q, out [num_queries, num_qo_heads, head_dim]
// in plan order, lse [num_queries, num_qo_heads].
inline void attend(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                   const AttentionParams& params, std::span<const float> q, std::span<float> out,
                   std::span<float> lse, Method method = Method::kDeferred) {
  ref::detail::check_method("ref::eigen::attend", method);
  ref::detail::check_attend("ref::eigen::attend", store, plan, layer, rope, params, q.size(),
                            out.size(), lse.size());
  dispatch_pool_dtype(store.config().dtype, [&](auto tag) {
    detail::attend_typed<decltype(tag)>(store, plan, layer, rope, params, q, out, lse, method);
  });
}

inline void decode(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                   const AttentionParams& params, std::span<const float> q, std::span<float> out,
                   std::span<float> lse, Method method = Method::kDeferred) {
  ref::detail::check_decode("ref::eigen::decode", plan);
  attend(store, plan, layer, rope, params, q, out, lse, method);
}

inline void prefill(const KvStore& store, const Plan& plan, int layer, const RopePolicy& rope,
                    const AttentionParams& params, std::span<const float> q, std::span<float> out,
                    std::span<float> lse, Method method = Method::kDeferred) {
  attend(store, plan, layer, rope, params, q, out, lse, method);
}

// Same contract as ref::scalar::dense_attention.
inline void dense_attention(const RopePolicy& rope, const AttentionParams& params,
                            std::span<const float> q, std::span<const std::int64_t> q_positions,
                            std::span<const float> k, std::span<const std::int64_t> k_positions,
                            std::span<const float> v, std::span<const std::uint8_t> mask,
                            std::span<float> out, std::span<float> lse,
                            std::int64_t rope_length = 0) {
  rope_length = ref::detail::check_dense("ref::eigen::dense_attention", rope, params, q.size(),
                                         q_positions, k.size(), k_positions, v.size(), mask.size(),
                                         out.size(), lse.size(), rope_length);
  const RopeFrequencies f = rope.frequencies(rope_length);
  const auto nk = static_cast<detail::Index>(k_positions.size());
  auto visible = [&](detail::Index query, detail::Index key) {
    return mask.empty() || mask[static_cast<std::size_t>(query * nk + key)] != 0;
  };
  detail::dense(
      f, params, q, q_positions, k, k_positions, v, visible,
      [](detail::Index) { return detail::Index{0}; }, out, lse, nullptr);
}

// Same contract as ref::scalar::encode_document; computed key-side (R(i) q against R(j) k), with
// the upper half of the causal square skipped block by block.
inline void encode_document(const RopePolicy& rope, const AttentionParams& params,
                            std::int64_t length, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<float> out, std::span<float> lse,
                            std::span<float> k_stored = {},
                            StorageForm k_stored_form = StorageForm::kLocal) {
  ref::detail::check_encode("ref::eigen::encode_document", rope, params, length, q.size(), k.size(),
                            v.size(), out.size(), lse.size(), k_stored.size(), k_stored_form);
  const RopeFrequencies f = rope.frequencies(length);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(length));
  for (std::int64_t i = 0; i < length; ++i) positions[static_cast<std::size_t>(i)] = i;
  detail::Matrix k_rotated;  // [num_kv_heads * length, head_dim], R(i) k_i
  detail::dense(
      f, params, q, positions, k, positions, v,
      [](detail::Index query, detail::Index key) { return key <= query; },
      [](detail::Index j0) { return j0; }, out, lse, &k_rotated);
  if (k_stored.empty()) return;
  const int Hkv = params.num_kv_heads, D = params.head_dim;
  for (std::int64_t i = 0; i < length; ++i) {
    for (int g = 0; g < Hkv; ++g) {
      const std::size_t at = static_cast<std::size_t>((i * Hkv + g) * D);
      if (k_stored_form == StorageForm::kRaw) {
        std::copy(&k[at], &k[at] + D, &k_stored[at]);
      } else {
        Eigen::Map<Eigen::RowVectorXf>(&k_stored[at], D) = k_rotated.row(g * length + i);
      }
    }
  }
}

}  // namespace lazyattn::ref::eigen

#else
#define LAZYATTN_REF_HAS_EIGEN 0
#endif  // __has_include(<Eigen/Core>)
