// The CPU backend: the Llama-shaped decoder with random weights, GEMMs through Eigen (one thread),
// attention through lazyattn::ref::eigen over a float32 KvStore. For tests and CPU figures; the
// `tiny` and `micro` configurations are its intended sizes.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend.hpp"
#include "fp8_calibration.hpp"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/ref/eigen.hpp"
#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/policy.hpp"
#include "lazyattn/rope/rotate.hpp"
#include "model_config.hpp"
#include "random.hpp"

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define LAZYATTN_RAG_HAS_MXCSR 1
#else
#define LAZYATTN_RAG_HAS_MXCSR 0
#endif

namespace lazyattn::rag {

// Flushes denormals to zero (FTZ) and reads denormal inputs as zero (DAZ) while alive, restoring
// the caller's mode after. Why: Eigen 3.4's vectorized exp(-inf) is 2.9e-39, a denormal, not 0,
// so every masked logit of ref::eigen's causal tail becomes a denormal weight, and x86 runs the
// P.V GEMM over them about 10x slower (a 2-layer 800-token prefill: 2.7 s against 0.27 s). With
// DAZ those weights read as the 0 they stand for; GPUs flush denormals in their GEMMs as well.
class FlushDenormals {
 public:
  FlushDenormals() {
#if LAZYATTN_RAG_HAS_MXCSR
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
#endif
  }
  ~FlushDenormals() {
#if LAZYATTN_RAG_HAS_MXCSR
    _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
};

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::RowVectorXf;

// Random weights, a pure function of (config, seed). Linear layers are [out, in] (PyTorch's
// nn.Linear), uniform with unit output variance for unit inputs; norms are ones.
struct LayerWeights {
  RowVector attn_norm;  // [hidden]
  Matrix wqkv;          // [q_width + 2 kv_width, hidden]: q, then k, then v
  Matrix wo;            // [hidden, q_width]
  RowVector mlp_norm;   // [hidden]
  Matrix w_gate_up;     // [2 intermediate, hidden]: gate, then up
  Matrix w_down;        // [hidden, intermediate]
};

struct ModelWeights {
  Matrix embedding;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  RowVector final_norm;  // [hidden]
  Matrix lm_head;        // [vocab, hidden]; empty when tied to the embedding

  static ModelWeights random(const ModelConfig& c, std::uint64_t seed) {
    std::uint64_t stream = 0;
    auto uniform = [&](Eigen::Index rows, Eigen::Index cols, float bound) {
      SplitMix64 g(mix_seed(seed, 100, stream++));
      Matrix m(rows, cols);
      for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = g.symmetric(bound);
      return m;
    };
    auto linear = [&](int out, int in) {
      return uniform(out, in, std::sqrt(3.0f / static_cast<float>(in)));
    };
    ModelWeights w;
    w.embedding = uniform(c.vocab_size, c.hidden_size, std::sqrt(3.0f));
    for (int l = 0; l < c.num_layers; ++l) {
      LayerWeights lw;
      lw.attn_norm = RowVector::Ones(c.hidden_size);
      lw.wqkv = linear(c.q_width() + 2 * c.kv_width(), c.hidden_size);
      lw.wo = linear(c.hidden_size, c.q_width());
      lw.mlp_norm = RowVector::Ones(c.hidden_size);
      lw.w_gate_up = linear(2 * c.intermediate_size, c.hidden_size);
      lw.w_down = linear(c.hidden_size, c.intermediate_size);
      w.layers.push_back(std::move(lw));
    }
    w.final_norm = RowVector::Ones(c.hidden_size);
    if (!c.tie_word_embeddings) w.lm_head = linear(c.vocab_size, c.hidden_size);
    return w;
  }
  const Matrix& head() const { return lm_head.size() ? lm_head : embedding; }
};

// cos/sin of one position's rotation, computed once and applied to many head vectors (all heads
// and layers of a token, or every key of a copied document), in double like rope::rotate.
class PositionRotation {
 public:
  PositionRotation(const RopeFrequencies& f, std::int64_t position) : f_(&f) {
    for (int k = 0; k < f.num_pairs(); ++k) cs_.push_back(rope::cos_sin(position, f.turns[k]));
  }
  void apply(float* x) const {
    for (int k = 0; k < f_->num_pairs(); ++k) {
      const rope::PairDims p = rope::pair_dims(f_->pair_layout, f_->rotary_dim, k);
      const double a = x[p.first], b = x[p.second];
      x[p.first] = static_cast<float>(a * cs_[k].cos - b * cs_[k].sin);
      x[p.second] = static_cast<float>(a * cs_[k].sin + b * cs_[k].cos);
    }
  }

 private:
  const RopeFrequencies* f_;
  std::vector<rope::CosSin> cs_;
};

class CpuBackend final : public Backend {
 public:
  // kv_dtype: the pool's element type, float32 (the default), bfloat16 or float8_e4m3. An fp8
  // pool's scales are calibrated first (calibrate_fp8).
  CpuBackend(const ModelConfig& config, std::int64_t num_pages, int page_size, std::uint64_t seed,
             EvictionPolicy eviction = EvictionPolicy::kLru, DType kv_dtype = DType::kFloat32)
      : config_(config),
        rope_(config.rope),
        params_(config.attention()),
        weights_(ModelWeights::random(config, seed)),
        store_(store_config(config, num_pages, page_size, seed, eviction, kv_dtype)) {}

  std::string name() const override {
    return "cpu (Eigen GEMMs, ref::eigen attention, " + std::string(to_string(kv_dtype())) + " KV)";
  }
  const ModelConfig& model() const override { return config_; }
  KvStore& store() override { return store_; }
  DType kv_dtype() const { return store_.config().dtype; }
  // fp8 pools: K/V values written so far whose x / scale fell outside what e4m3 holds (|x / scale|
  // >= 464, the bound KvStore::insert refuses); they were stored as +-448, as the device's
  // saturating conversion does. 0 when the calibration covered every value.
  std::int64_t fp8_saturated() const { return fp8_saturated_; }

  // The scales of an fp8 pool, [num_layers][num_kv_heads] each for K and V (fp8_calibration.hpp):
  // this model, over a float32 pool, encodes the calibration documents.
  static fp8::Scales calibrate_fp8(const ModelConfig& c, int page_size, std::uint64_t seed) {
    const std::int64_t pages_per_doc = (fp8::kLength + page_size - 1) / page_size;
    CpuBackend scratch(c, fp8::kDocuments * pages_per_doc, page_size, seed);
    KvStore& store = scratch.store();
    const std::vector<std::vector<std::int32_t>> docs = fp8::documents(c.vocab_size, seed);
    StepBatch batch;
    std::vector<std::vector<std::int32_t>> pages;
    for (const std::vector<std::int32_t>& d : docs) {
      const DocHandle h =
          store.allocate(DocKey::from_tokens(d), StorageForm::kLocal, fp8::kLength).handle;
      batch.encodes.push_back(EncodeItem{h, d});
      pages.push_back(store.info(h).pages);
    }
    StepOutput out;
    scratch.forward(batch, out, false);
    return fp8::scales_from<float>(store, pages, scratch.rope_.base_frequencies());
  }

  void forward(const StepBatch& batch, StepOutput& out, bool want_logits) override {
    const FlushDenormals flush;
    const ModelConfig& c = config_;
    const int D = c.head_dim, Hq = c.num_qo_heads, Hkv = c.num_kv_heads;
    const int qw = c.q_width(), kw = c.kv_width();
    // Rows: every encode's tokens, then every extend's, in batch order.
    std::vector<Eigen::Index> first_row;
    Eigen::Index rows = 0;
    for (const EncodeItem& e : batch.encodes) {
      first_row.push_back(rows);
      rows += static_cast<Eigen::Index>(e.tokens.size());
    }
    const Eigen::Index ext_row0 = rows;
    for (const ExtendItem& e : batch.extends) {
      first_row.push_back(rows);
      rows += static_cast<Eigen::Index>(e.tokens.size());
    }
    const Eigen::Index ext_rows = rows - ext_row0;
    LAZYATTN_CHECK(batch.extends.empty() ||
                       (batch.plan && batch.plan->request_query_indptr.back() == ext_rows),
                   "rag::CpuBackend::forward: the plan's query rows do not match the extends' ",
                   ext_rows, " tokens");
    if (batch.plan) check_plan_current(store_, *batch.plan, "rag::CpuBackend::forward");
    if (rows == 0) return;

    // Page lists and K rotations of the new tokens, fixed for the whole step.
    const RopeFrequencies& f = rope_.base_frequencies();
    std::vector<std::vector<std::int32_t>> enc_pages, ext_pages;
    for (const EncodeItem& e : batch.encodes) enc_pages.push_back(store_.info(e.doc).pages);
    std::vector<PositionRotation> tail_rot;
    for (const ExtendItem& e : batch.extends) {
      ext_pages.push_back(store_.info(e.tail).pages);
      for (std::size_t i = 0; i < e.tokens.size(); ++i)
        tail_rot.emplace_back(f, e.first + static_cast<std::int64_t>(i));
    }

    x_.resize(rows, c.hidden_size);
    for (Eigen::Index r = 0; r < rows; ++r) x_.row(r) = weights_.embedding.row(token_at(batch, r));
    for (int l = 0; l < c.num_layers; ++l) {
      const LayerWeights& w = weights_.layers[static_cast<std::size_t>(l)];
      rms_norm(x_, w.attn_norm, h_);
      qkv_.noalias() = h_ * w.wqkv.transpose();
      attn_.resize(rows, qw);

      // Documents: standalone causal encoding; K back in local form (rotated at 0..len-1).
      for (std::size_t i = 0; i < batch.encodes.size(); ++i) {
        const EncodeItem& e = batch.encodes[i];
        const auto len = static_cast<Eigen::Index>(e.tokens.size());
        split_qkv(first_row[i], len);
        k_stored_.resize(k_.size());
        lse_.resize(static_cast<std::size_t>(len * Hq));
        out_.resize(q_.size());
        ref::eigen::encode_document(rope_, params_, len, q_, k_, v_, out_, lse_, k_stored_,
                                    StorageForm::kLocal);
        if (e.rotate_by != 0) {
          const PositionRotation by(f, e.rotate_by);
          for (Eigen::Index t = 0; t < len * Hkv; ++t) by.apply(&k_stored_[t * D]);
        }
        write_tokens(enc_pages[i], l, 0, len, k_stored_.data(), v_.data());
        attn_.middleRows(first_row[i], len) = Eigen::Map<const Matrix>(out_.data(), len, qw);
      }

      // Requests: tail K in local form at tail positions, then attention through the plan.
      if (ext_rows > 0) {
        split_qkv(ext_row0, ext_rows);
        std::size_t token = 0;
        for (std::size_t b = 0; b < batch.extends.size(); ++b) {
          const ExtendItem& e = batch.extends[b];
          const Eigen::Index r0 = first_row[batch.encodes.size() + b] - ext_row0;
          const auto n = static_cast<Eigen::Index>(e.tokens.size());
          for (Eigen::Index t = 0; t < n; ++t, ++token) {
            for (int g = 0; g < Hkv; ++g) tail_rot[token].apply(&k_[((r0 + t) * Hkv + g) * D]);
          }
          write_tokens(ext_pages[b], l, e.first, n, &k_[r0 * kw], &v_[r0 * kw]);
        }
        out_.resize(q_.size());
        lse_.resize(static_cast<std::size_t>(ext_rows * Hq));
        ref::eigen::prefill(store_, *batch.plan, l, rope_, params_, q_, out_, lse_);
        attn_.middleRows(ext_row0, ext_rows) = Eigen::Map<const Matrix>(out_.data(), ext_rows, qw);
      }
      x_.noalias() += attn_ * w.wo.transpose();

      rms_norm(x_, w.mlp_norm, h_);
      gate_up_.noalias() = h_ * w.w_gate_up.transpose();
      const int I = c.intermediate_size;
      auto gate = gate_up_.leftCols(I).array();
      act_ = ((gate / (1.0f + (-gate).exp())) * gate_up_.rightCols(I).array()).matrix();
      x_.noalias() += act_ * w.w_down.transpose();
    }

    // The LM head on each extend's last row only.
    const auto nb = static_cast<Eigen::Index>(batch.extends.size());
    last_.resize(nb, c.hidden_size);
    for (Eigen::Index b = 0; b < nb; ++b) {
      const ExtendItem& e = batch.extends[static_cast<std::size_t>(b)];
      last_.row(b) = x_.row(first_row[batch.encodes.size() + b] +
                            static_cast<Eigen::Index>(e.tokens.size()) - 1);
    }
    rms_norm(last_, weights_.final_norm, h_);
    logits_.noalias() = h_ * weights_.head().transpose();
    out.next_tokens.resize(static_cast<std::size_t>(nb));
    for (Eigen::Index b = 0; b < nb; ++b) {
      Eigen::Index best = 0;
      logits_.row(b).maxCoeff(&best);  // the first of equal maxima, as torch.argmax
      out.next_tokens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(best);
    }
    if (want_logits) out.logits.assign(logits_.data(), logits_.data() + logits_.size());
  }

  void copy_rotated(std::span<const std::int32_t> src, std::int64_t src_first,
                    std::span<const std::int32_t> dst, std::int64_t length,
                    std::int64_t delta) override {
    const PoolGeometry& geo = store_.geometry();
    const int P = geo.page_size, D = geo.head_dim;
    const PositionRotation by(rope_.base_frequencies(), delta);
    dispatch_pool_dtype(kv_dtype(), [&]<class T>(T) {
      T* k = store_.k_pool<T>();
      T* v = store_.v_pool<T>();
      std::vector<float> row(static_cast<std::size_t>(D));
      for (int l = 0; l < geo.num_layers; ++l) {
        for (std::int64_t i = 0; i < length; ++i) {
          const std::int64_t s = src_first + i;
          for (int g = 0; g < geo.num_kv_heads; ++g) {
            const std::int64_t from =
                geo.offset(l, src[static_cast<std::size_t>(s / P)], g, static_cast<int>(s % P));
            const std::int64_t to =
                geo.offset(l, dst[static_cast<std::size_t>(i / P)], g, static_cast<int>(i % P));
            std::copy_n(v + from, D, v + to);  // same layer and head: same scale
            if (delta == 0) {
              std::copy_n(k + from, D, k + to);
              continue;
            }
            // K re-rotated from the values the pool holds, then stored again (rounded again).
            const float scale = store_.k_scale(l, g);
            for (int d = 0; d < D; ++d) row[d] = to_float(k[from + d]) * scale;
            by.apply(row.data());
            put(k + to, row.data(), D, scale);
          }
        }
      }
    });
  }

 private:
  static void rms_norm(const Matrix& x, const RowVector& weight, Matrix& y, double eps) {
    y.resize(x.rows(), x.cols());
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      const float inv = 1.0f / std::sqrt(x.row(r).squaredNorm() / static_cast<float>(x.cols()) +
                                         static_cast<float>(eps));
      y.row(r) = x.row(r).cwiseProduct(weight) * inv;
    }
  }
  void rms_norm(const Matrix& x, const RowVector& weight, Matrix& y) const {
    rms_norm(x, weight, y, config_.rms_norm_eps);
  }

  static std::int32_t token_at(const StepBatch& batch, Eigen::Index row) {
    for (const EncodeItem& e : batch.encodes) {
      if (row < static_cast<Eigen::Index>(e.tokens.size())) return e.tokens[row];
      row -= static_cast<Eigen::Index>(e.tokens.size());
    }
    for (const ExtendItem& e : batch.extends) {
      if (row < static_cast<Eigen::Index>(e.tokens.size())) return e.tokens[row];
      row -= static_cast<Eigen::Index>(e.tokens.size());
    }
    return 0;  // unreachable: rows are counted from the same items
  }

  // q_, k_, v_ <- rows [r0, r0 + n) of qkv_, as [n, heads, head_dim] each.
  void split_qkv(Eigen::Index r0, Eigen::Index n) {
    const int qw = config_.q_width(), kw = config_.kv_width();
    q_.resize(static_cast<std::size_t>(n * qw));
    k_.resize(static_cast<std::size_t>(n * kw));
    v_.resize(static_cast<std::size_t>(n * kw));
    Eigen::Map<Matrix>(q_.data(), n, qw) = qkv_.block(r0, 0, n, qw);
    Eigen::Map<Matrix>(k_.data(), n, kw) = qkv_.block(r0, qw, n, kw);
    Eigen::Map<Matrix>(v_.data(), n, kw) = qkv_.block(r0, qw + kw, n, kw);
  }

  static KvStoreConfig store_config(const ModelConfig& c, std::int64_t num_pages, int page_size,
                                    std::uint64_t seed, EvictionPolicy eviction, DType kv_dtype) {
    LAZYATTN_CHECK(kv_dtype != DType::kFloat16,
                   "rag::CpuBackend: kv_dtype float16, expected "
                   "float32, bfloat16 or float8_e4m3 (the models compute in float32 or bfloat16)");
    KvStoreConfig sc{.num_layers = c.num_layers,
                     .num_kv_heads = c.num_kv_heads,
                     .head_dim = c.head_dim,
                     .page_size = page_size,
                     .dtype = kv_dtype,
                     .num_pages = num_pages,
                     .eviction = eviction};
    if (kv_dtype == DType::kFloat8E4M3) {
      fp8::Scales s = calibrate_fp8(c, page_size, seed);
      sc.k_scale = std::move(s.k);
      sc.v_scale = std::move(s.v);
    }
    return sc;
  }

  // n values into the pool at dst as its element type (fp8: x / scale, saturating to +-448 and
  // counted in fp8_saturated_ as KvStore::insert would refuse them).
  template <class T>
  void put(T* dst, const float* x, int n, float scale) {
    for (int d = 0; d < n; ++d) {
      if constexpr (std::is_same_v<T, float8_e4m3>) {
        const float q = x[d] / scale;
        fp8_saturated_ += !(std::fabs(q) < 464.0f);
        dst[d] = from_float<T>(q);
      } else {
        dst[d] = from_float<T>(x[d]);
      }
    }
  }

  // Tokens [first, first + n) of a page list, in one layer: k and v are [n, num_kv_heads,
  // head_dim], stored as the pool's element type.
  void write_tokens(const std::vector<std::int32_t>& pages, int layer, std::int64_t first,
                    std::int64_t n, const float* k, const float* v) {
    const PoolGeometry& geo = store_.geometry();
    const int P = geo.page_size, D = geo.head_dim, Hkv = geo.num_kv_heads;
    dispatch_pool_dtype(kv_dtype(), [&]<class T>(T) {
      T* kp = store_.k_pool<T>();
      T* vp = store_.v_pool<T>();
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t i = first + t;
        for (int g = 0; g < Hkv; ++g) {
          const std::int64_t at =
              geo.offset(layer, pages[static_cast<std::size_t>(i / P)], g, static_cast<int>(i % P));
          put(kp + at, k + (t * Hkv + g) * D, D, store_.k_scale(layer, g));
          put(vp + at, v + (t * Hkv + g) * D, D, store_.v_scale(layer, g));
        }
      }
    });
  }

  ModelConfig config_;
  RopePolicy rope_;
  AttentionParams params_;
  ModelWeights weights_;
  KvStore store_;
  // Step buffers, kept between steps so that steady decoding does not allocate.
  Matrix x_, h_, qkv_, attn_, gate_up_, act_, last_, logits_;
  std::vector<float> q_, k_, v_, out_, lse_, k_stored_;
  std::int64_t fp8_saturated_ = 0;
};

}  // namespace lazyattn::rag
