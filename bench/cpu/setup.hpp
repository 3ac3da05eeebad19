// One benchmark problem: a KvStore filled for a Shape (over several layers, so that a run can
// rotate through more K/V than the last-level cache holds), its plans in local and raw form, the
// queries, and the no-RoPE peer's contiguous, pre-rotated copy of the same keys.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "lazyattn/lazyattn.hpp"
#include "lazyattn/ref.hpp"
#include "plain_attention.hpp"
#include "shapes.hpp"

namespace lazyattn::bench {

// Fills fast and reproducibly (xorshift64*): gigabytes of N(0,1) would take longer than the run.
class Uniform {
 public:
  explicit Uniform(std::uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  float operator()() {  // in [-1, 1)
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    const std::uint64_t x = s_ * 0x2545f4914f6cdd1dull;
    return static_cast<float>(static_cast<std::int64_t>(x) >> 40) * (1.0f / 8388608.0f);
  }

 private:
  std::uint64_t s_;
};

// Layers needed so that a run rotating through them touches at least `rotate_bytes` of K/V.
inline int layers_for(const Shape& s, DType dtype, std::int64_t rotate_bytes) {
  const std::int64_t per_layer = work_of(s, dtype).kv_bytes;
  return static_cast<int>(
      std::clamp<std::int64_t>((rotate_bytes + per_layer - 1) / per_layer, 1, 64));
}

struct Problem {
  Shape shape;
  DType dtype = DType::kFloat32;
  int layers = 1;
  RopePolicy rope = llama3_rope();
  AttentionParams params;
  std::unique_ptr<KvStore> store;
  // The same pages read two ways: local (keys hold R(i) k, the query turns once per segment) and
  // raw (the reference rotates every key at its position). Only the plan's segment_form differs,
  // so both read exactly the same bytes and differ only in where the rotation happens.
  Plan plan_local, plan_raw;
  std::vector<float> q;  // [num_queries, num_qo_heads, head_dim]
  std::vector<float> out, lse;
  // Peer (decode shapes only, built by add_peer): per layer and request, K and V
  // [num_kv_heads, keys, head_dim] with K rotated at its logical position, read as local form.
  std::vector<std::vector<float>> peer_k, peer_v;  // [layers * batch]
  double peer_diff_local = -1;  // max |ref::eigen deferred - peer| on layer 0, local reading
  double peer_diff_raw = -1;    // the same for the raw reading (peer rebuilt for it)

  std::int64_t keys_of(int b) const {
    return plan_local.request_kv_length[static_cast<std::size_t>(b)];
  }
  std::int64_t position_of(int b) const {
    return plan_local.request_query_position[static_cast<std::size_t>(b)];
  }
};

// Builds the store (documents in local form; values uniform in [-1, 1)), the layouts and plans.
inline std::unique_ptr<Problem> make_problem(const Shape& shape, DType dtype, int layers) {
  auto p = std::make_unique<Problem>();
  p->shape = shape;
  p->dtype = dtype;
  p->layers = layers;
  const std::int64_t pages_per_request = [&] {
    std::int64_t n = (shape.tail_length + kPageSize - 1) / kPageSize;
    for (std::int64_t l : shape.doc_lengths) n += (l + kPageSize - 1) / kPageSize;
    return n;
  }();
  KvStoreConfig cfg{layers, kKvHeads, kHeadDim, kPageSize, dtype, pages_per_request * shape.batch};
  p->store = std::make_unique<KvStore>(cfg);
  KvStore& store = *p->store;

  std::mt19937_64 rng(7);
  std::vector<RequestLayout> layouts;
  for (int b = 0; b < shape.batch; ++b) {
    std::vector<DocHandle> docs;
    for (std::size_t j = 0; j < shape.doc_lengths.size(); ++j) {
      InsertResult r = store.allocate(DocKey{static_cast<std::uint64_t>(b) + 1, j},
                                      StorageForm::kLocal, shape.doc_lengths[j]);
      store.commit(r.handle);
      docs.push_back(r.handle);
    }
    TailHandle tail = store.create_tail(StorageForm::kLocal);
    store.reserve(tail, shape.tail_length);
    // Back-to-back slots, handed out in a shuffled order for RAG.
    std::vector<std::size_t> order(docs.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (shape.shuffled) std::shuffle(order.begin(), order.end(), rng);
    std::vector<std::int64_t> starts(docs.size());
    std::int64_t end = 0;
    for (std::size_t o : order) {
      starts[o] = end;
      end += shape.doc_lengths[o];
    }
    layouts.push_back(layouts::gapped(store, docs, starts, tail, end, shape.num_queries));
  }
  p->plan_local = make_plan(store, std::span<const RequestLayout>(layouts));
  p->plan_raw = p->plan_local;
  std::fill(p->plan_raw.segment_form.begin(), p->plan_raw.segment_form.end(),
            static_cast<std::uint8_t>(StorageForm::kRaw));

  // The pool holds exactly the request pages: fill all of it, every layer.
  const std::int64_t n = store.geometry().elements();
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* k = store.k_pool<T>();
    T* v = store.v_pool<T>();
    Uniform u(11);
    for (std::int64_t i = 0; i < n; ++i) {
      k[i] = from_float<T>(u());
      v[i] = from_float<T>(u());
    }
  });

  Uniform uq(13);
  p->q.resize(static_cast<std::size_t>(p->plan_local.num_queries()) * kQoHeads * kHeadDim);
  for (float& x : p->q) x = uq();
  p->out.resize(p->q.size());
  p->lse.resize(static_cast<std::size_t>(p->plan_local.num_queries()) * kQoHeads);
  return p;
}

namespace detail {

// The keys of request b in `layer`, as the peer holds them: [num_kv_heads, keys, head_dim], K
// rotated at its logical position. Local reading: the stored key is R(i) k, so R(start) turns it
// to R(start + i) k; raw reading: the stored key is k, turned by R(start + i).
inline void gather_peer(const Problem& p, const Plan& plan, int layer, int b, bool raw,
                        std::vector<float>& k_out, std::vector<float>& v_out) {
  const RopeFrequencies& f = p.rope.base_frequencies();
  const PoolGeometry& geo = p.store->geometry();
  const std::int64_t keys = p.keys_of(b);
  k_out.assign(static_cast<std::size_t>(kKvHeads * keys * kHeadDim), 0.0f);
  v_out.assign(k_out.size(), 0.0f);
  std::vector<double> cs(static_cast<std::size_t>(2 * f.num_pairs()));
  auto set_angle = [&](std::int64_t position) {
    for (int i = 0; i < f.num_pairs(); ++i) {
      rope::CosSin c = rope::cos_sin(position, f.turns[static_cast<std::size_t>(i)]);
      cs[static_cast<std::size_t>(2 * i)] = c.cos;
      cs[static_cast<std::size_t>(2 * i + 1)] = c.sin;
    }
  };
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* kp = p.store->k_pool<T>();
    const T* vp = p.store->v_pool<T>();
    std::int64_t j = 0;
    for (int s = plan.request_segment_indptr[b]; s < plan.request_segment_indptr[b + 1]; ++s) {
      const std::int64_t start = plan.segment_start[s];
      if (!raw) set_angle(start);
      for (std::int64_t i = 0; i < plan.segment_length[s]; ++i, ++j) {
        if (raw) set_angle(start + i);
        const std::int64_t page =
            plan.page_ids[static_cast<std::size_t>(plan.segment_page_indptr[s] + i / kPageSize)];
        for (int g = 0; g < kKvHeads; ++g) {
          const std::int64_t at = geo.offset(layer, page, g, static_cast<int>(i % kPageSize));
          float* kd = &k_out[static_cast<std::size_t>((g * keys + j) * kHeadDim)];
          float* vd = &v_out[static_cast<std::size_t>((g * keys + j) * kHeadDim)];
          for (int d = 0; d < kHeadDim; ++d) {
            kd[d] = to_float(kp[at + d]);
            vd[d] = to_float(vp[at + d]);
          }
          for (int pi = 0; pi < f.num_pairs(); ++pi) {
            rope::PairDims pd = rope::pair_dims(f.pair_layout, f.rotary_dim, pi);
            const double a = kd[pd.first], bb = kd[pd.second];
            const double c = cs[static_cast<std::size_t>(2 * pi)];
            const double sn = cs[static_cast<std::size_t>(2 * pi + 1)];
            kd[pd.first] = static_cast<float>(a * c - bb * sn);
            kd[pd.second] = static_cast<float>(a * sn + bb * c);
          }
        }
      }
    }
  });
}

}  // namespace detail

// The peer's decode of every request of the batch from the arrays of `layer`.
template <int kKeyBlock>
void peer_decode(Problem& p, const std::vector<std::vector<float>>& k,
                 const std::vector<std::vector<float>>& v, int layer, PlainWorkspace& w) {
  const auto scale = static_cast<float>(p.params.scale());
  for (int b = 0; b < p.shape.batch; ++b) {
    const std::size_t at = static_cast<std::size_t>(layer * p.shape.batch + b);
    plain_decode<kKeyBlock>(p.rope.base_frequencies(),
                            &p.q[static_cast<std::size_t>(b) * kQoHeads * kHeadDim],
                            p.position_of(b), k[at].data(), v[at].data(), p.keys_of(b), scale,
                            &p.out[static_cast<std::size_t>(b) * kQoHeads * kHeadDim],
                            &p.lse[static_cast<std::size_t>(b) * kQoHeads], w);
  }
}

inline void ref_decode(Problem& p, const Plan& plan, int layer) {
  ref::eigen::decode(*p.store, plan, layer, p.rope, p.params, p.q, p.out, p.lse,
                     ref::Method::kDeferred);
}

// Builds the peer's arrays for every layer (local reading) and checks on layer 0 that the peer
// and ref::eigen::decode agree, in both readings: the two compute the same attention.
inline void add_peer(Problem& p) {
  const int B = p.shape.batch;
  p.peer_k.resize(static_cast<std::size_t>(p.layers * B));
  p.peer_v.resize(p.peer_k.size());
  for (int l = 0; l < p.layers; ++l) {
    for (int b = 0; b < B; ++b) {
      const std::size_t at = static_cast<std::size_t>(l * B + b);
      detail::gather_peer(p, p.plan_local, l, b, false, p.peer_k[at], p.peer_v[at]);
    }
  }
  PlainWorkspace w;
  auto max_diff = [&](const Plan& plan, const std::vector<std::vector<float>>& k,
                      const std::vector<std::vector<float>>& v) {
    ref_decode(p, plan, 0);
    std::vector<float> ours = p.out;
    peer_decode<64>(p, k, v, 0, w);
    double d = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      d = std::max(d, static_cast<double>(std::fabs(ours[i] - p.out[i])));
      if (std::isnan(ours[i]) || std::isnan(p.out[i])) d = INFINITY;
    }
    return d;
  };
  p.peer_diff_local = max_diff(p.plan_local, p.peer_k, p.peer_v);
  std::vector<std::vector<float>> rk(static_cast<std::size_t>(B)), rv(rk.size());
  for (int b = 0; b < B; ++b) {
    detail::gather_peer(p, p.plan_raw, 0, b, true, rk[static_cast<std::size_t>(b)],
                        rv[static_cast<std::size_t>(b)]);
  }
  p.peer_diff_raw = max_diff(p.plan_raw, rk, rv);
}

}  // namespace lazyattn::bench
