// Hand-computed cases, head_dim 2 or 4 and a key or three, with the softmax written out: positions
// and gaps, local form, pair layouts, partial rotary with the attention factor, soft cap, the GQA
// head mapping, positions at 2^40, and rows that see no key.
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

RopePolicy default_rope(int head_dim, PairLayout layout = PairLayout::kHalf) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.pair_layout = layout;
  return RopePolicy(c);
}

AttentionParams tiny_params(int qo, int kv, int d, double scale = 1.0) {
  AttentionParams p;
  p.num_qo_heads = qo;
  p.num_kv_heads = kv;
  p.head_dim = d;
  p.softmax_scale = scale;
  return p;
}

KvStore make_store(int kv_heads, int head_dim) {
  KvStoreConfig c;
  c.num_layers = 1;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.page_size = 16;
  c.dtype = DType::kFloat32;
  c.num_pages = 8;
  return KvStore(c);
}

DocHandle put_doc(KvStore& store, StorageForm form, std::int64_t length,
                  const std::vector<float>& k, const std::vector<float>& v, std::int32_t id) {
  std::vector<std::int32_t> tokens{id};
  return store
      .insert(DocKey::from_tokens(tokens), form, length, std::span<const float>(k),
              std::span<const float>(v), true)
      .handle;
}

TailHandle put_tail(KvStore& store, StorageForm form, std::int64_t length,
                    const std::vector<float>& k, const std::vector<float>& v) {
  TailHandle t = store.create_tail(form);
  store.append(t, length, std::span<const float>(k), std::span<const float>(v));
  return t;
}

// Every reference and method must give the hand-computed out and lse.
void expect_all(const KvStore& store, const RequestLayout& layout, const RopePolicy& rope,
                const AttentionParams& params, const std::vector<float>& q,
                const std::vector<double>& out, const std::vector<double>& lse,
                Tolerance tol = {1e-6, 1e-6}) {
  INFO(layout);
  Plan plan = make_plan(store, layout);
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (Method method : {Method::kDeferred, Method::kEager}) {
      INFO(impl->name << " " << lazyattn::ref::to_string(method));
      std::vector<float> got_out(out.size(), -7.0f), got_lse(lse.size(), -7.0f);
      impl->attend(store, plan, 0, rope, params, q, got_out, got_lse, method);
      LAZYATTN_CHECK_CLOSE(got_out, out, tol);
      LAZYATTN_CHECK_CLOSE(got_lse, lse, tol);
    }
  }
}

// softmax over logits s with value rows v (one per logit): out and lse.
void softmax(const std::vector<double>& s, const std::vector<std::vector<double>>& v,
             std::vector<double>& out, double& lse) {
  double sum = 0;
  for (double x : s) sum += std::exp(x);
  out.assign(v[0].size(), 0.0);
  for (std::size_t j = 0; j < s.size(); ++j) {
    for (std::size_t d = 0; d < out.size(); ++d) out[d] += std::exp(s[j]) / sum * v[j][d];
  }
  lse = std::log(sum);
}

}  // namespace

TEST_CASE("tiny: one document key and one tail key, head_dim 2", "[ref][tiny]") {
  // Pair 0 of head_dim 2 turns at w = 1 rad per position. Document key k1 = (1, 0) at n, the query
  // q = (2, 0) at m is the tail's only token, whose key k2 = (0, 1) it sees at distance 0:
  //   s1 = <R(m) q, R(n) k1> = 2 cos(m - n),  s2 = <q, k2> = 0, both times 1/sqrt(2).
  for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
    for (auto [n, m] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {5, 6}, {0, 10}, {3, 40}}) {
      INFO("form " << to_string(form) << " n " << n << " m " << m);
      KvStore store = make_store(1, 2);
      DocHandle doc = put_doc(store, form, 1, {1, 0}, {1, 2}, 1);
      TailHandle tail = put_tail(store, form, 1, {0, 1}, {3, -1});
      RequestLayout layout;
      layout.segments = {Segment::document(doc, 1, n), Segment::of_tail(tail, 1, m)};
      double a = 2 * std::cos(static_cast<double>(m - n)) / std::sqrt(2.0);
      double p1 = std::exp(a) / (std::exp(a) + 1);
      std::vector<double> out{p1 * 1 + (1 - p1) * 3, p1 * 2 + (1 - p1) * -1};
      std::vector<double> lse{std::log(std::exp(a) + 1)};
      expect_all(store, layout, default_rope(2), tiny_params(1, 1, 2, 0.0), {2, 0}, out, lse);
    }
  }
}

TEST_CASE("tiny: a local-form document of two keys at start 7", "[ref][tiny]") {
  // Raw keys ka = (1, 0), kb = (0, 2); stored local as R(0) ka = ka and R(1) kb. Query (1, 0) at
  // m = 9 (tail key (1, 1) at 9, raw). Logits, scale 1:
  //   sa = <R(9) q, R(7) ka> = cos 2,  sb = <R(9) q, R(8) kb> = <R(1) q, kb> = 2 sin 1,  st = 1.
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);
  KvStore store = make_store(1, 2);
  std::vector<float> k_local{1, 0, static_cast<float>(-2 * s1), static_cast<float>(2 * c1)};
  DocHandle doc = put_doc(store, StorageForm::kLocal, 2, k_local, {1, 0, 0, 1}, 1);
  TailHandle tail = put_tail(store, StorageForm::kRaw, 1, {1, 1}, {0, 0});
  RequestLayout layout;
  layout.segments = {Segment::of_tail(tail, 1, 9), Segment::document(doc, 2, 7)};
  std::vector<double> out;
  double lse = 0;
  softmax({std::cos(2.0), 2 * s1, 1.0}, {{1, 0}, {0, 1}, {0, 0}}, out, lse);
  expect_all(store, layout, default_rope(2), tiny_params(1, 1, 2), {1, 0}, out, {lse});
}

TEST_CASE("tiny: half and interleaved pairs differ as written", "[ref][tiny]") {
  // head_dim 4: half pairs (0, 2) and (1, 3); interleaved (0, 1) and (2, 3). Pair 0 turns at 1 rad
  // per position. q = (1, 0, 0, 0) at m = 1 against k = (0, 1, 0, 0) at 0:
  //   half:        R(1) q = (cos 1, 0, sin 1, 0), logit 0
  //   interleaved: R(1) q = (cos 1, sin 1, 0, 0), logit sin 1
  // The tail's own key is zero, logit 0; values pick out which key won.
  for (PairLayout layout_kind : {PairLayout::kHalf, PairLayout::kInterleaved}) {
    INFO(to_string(layout_kind));
    KvStore store = make_store(1, 4);
    DocHandle doc = put_doc(store, StorageForm::kRaw, 1, {0, 1, 0, 0}, {1, 0, 0, 0}, 1);
    TailHandle tail = put_tail(store, StorageForm::kRaw, 1, {0, 0, 0, 0}, {0, 1, 0, 0});
    RequestLayout layout;
    layout.segments = {Segment::document(doc, 1, 0), Segment::of_tail(tail, 1, 1)};
    double s = layout_kind == PairLayout::kHalf ? 0.0 : std::sin(1.0);
    std::vector<double> out;
    double lse = 0;
    softmax({s, 0.0}, {{1, 0, 0, 0}, {0, 1, 0, 0}}, out, lse);
    expect_all(store, layout, default_rope(4, layout_kind), tiny_params(1, 1, 4), {1, 0, 0, 0}, out,
               {lse});
  }
}

TEST_CASE("tiny: partial rotary with attention factor 2 scales only the rotary logit, once",
          "[ref][tiny]") {
  // yarn, factor 1, attention_factor 2; head_dim 4, partial 0.5: dims 0, 1 turn (w = 1), 2, 3 pass.
  // transformers multiplies cos and sin by 2 for q and k: the rotary part of the logit grows 4x.
  // q = (1, 0, 1, 0) at 1, k = (1, 0, 0.5, 0) at 0: s = 4 cos 1 + 0.5; the tail key is 0.
  RopeConfig c;
  c.head_dim = 4;
  c.partial_rotary_factor = 0.5;
  c.rope_scaling.rope_type = RopeType::kYarn;
  c.rope_scaling.factor = 1.0;
  c.rope_scaling.attention_factor = 2.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  RopePolicy rope(c);
  REQUIRE(rope.base_frequencies().attention_factor == 2.0);
  for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
    INFO(to_string(form));
    KvStore store = make_store(1, 4);
    DocHandle doc = put_doc(store, form, 1, {1, 0, 0.5f, 0}, {1, 0, 0, 0}, 1);
    TailHandle tail = put_tail(store, form, 1, {0, 0, 0, 0}, {0, 0, 0, 1});
    RequestLayout layout;
    layout.segments = {Segment::document(doc, 1, 0), Segment::of_tail(tail, 1, 1)};
    std::vector<double> out;
    double lse = 0;
    softmax({4 * std::cos(1.0) + 0.5, 0.0}, {{1, 0, 0, 0}, {0, 0, 0, 1}}, out, lse);
    expect_all(store, layout, rope, tiny_params(1, 1, 4), {1, 0, 1, 0}, out, {lse});
  }
}

TEST_CASE("tiny: logits soft cap", "[ref][tiny]") {
  // Same problem as the first case at n = 0, m = 1, scale 1, cap 0.5: s1 = 0.5 tanh(2 cos 1 / 0.5).
  KvStore store = make_store(1, 2);
  DocHandle doc = put_doc(store, StorageForm::kRaw, 1, {1, 0}, {1, 2}, 1);
  TailHandle tail = put_tail(store, StorageForm::kRaw, 1, {0, 1}, {3, -1});
  RequestLayout layout;
  layout.segments = {Segment::document(doc, 1, 0), Segment::of_tail(tail, 1, 1)};
  AttentionParams p = tiny_params(1, 1, 2);
  p.logits_soft_cap = 0.5;
  std::vector<double> out;
  double lse = 0;
  softmax({0.5 * std::tanh(2 * std::cos(1.0) / 0.5), 0.0}, {{1, 2}, {3, -1}}, out, lse);
  expect_all(store, layout, default_rope(2), p, {2, 0}, out, {lse});
}

TEST_CASE("tiny: GQA, query head h reads KV head h / group", "[ref][tiny]") {
  // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0 (values all -10), heads 2, 3 read
  // KV head 1 (values all 10). Whatever the logits, each output is its KV head's constant.
  KvStore store = make_store(2, 2);
  std::vector<float> k{0.3f, -1.0f, 2.0f, 0.5f, -0.7f, 0.2f, 1.1f, 1.3f};  // [2 keys, 2 heads, 2]
  std::vector<float> v{-10, -10, 10, 10, -10, -10, 10, 10};
  DocHandle doc = put_doc(store, StorageForm::kRaw, 2, k, v, 1);
  TailHandle tail = put_tail(store, StorageForm::kLocal, 1, {1, 2, 3, 4}, {-10, -10, 10, 10});
  RequestLayout layout;
  layout.segments = {Segment::document(doc, 2, 4), Segment::of_tail(tail, 1, 6)};
  std::vector<float> q{1, 0.5f, -2, 1, 0.25f, 3, -1, -1};  // [1 query, 4 heads, 2]
  Plan plan = make_plan(store, layout);
  for (const Impl* impl : {&kScalar, &kEigen}) {
    for (Method method : {Method::kDeferred, Method::kEager}) {
      INFO(impl->name << " " << lazyattn::ref::to_string(method));
      std::vector<float> out(8), lse(4);
      impl->attend(store, plan, 0, default_rope(2), tiny_params(4, 2, 2), q, out, lse, method);
      std::vector<double> expected{-10, -10, -10, -10, 10, 10, 10, 10};
      LAZYATTN_CHECK_CLOSE(out, expected, (Tolerance{1e-5, 1e-6}));
    }
  }
}

TEST_CASE("tiny: positions at 2^40 keep the angle of the difference", "[ref][tiny]") {
  // k = (1, 0) at n = 2^40 - 3 (or a two-key local document ending there), q = (2, 0) at m = 2^40:
  // s = 2 cos(m - n) with m - n = 3 exactly, however large m and n are.
  const std::int64_t m = std::int64_t{1} << 40;
  for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
    INFO(to_string(form));
    KvStore store = make_store(1, 2);
    // Two keys, the first (0, 0) so that it adds e^0 to the sum; the second (1, 0) at 2^40 - 3,
    // stored local at document position 1 as R(1) (1, 0).
    std::vector<float> k = form == StorageForm::kRaw
                               ? std::vector<float>{0, 0, 1, 0}
                               : std::vector<float>{0, 0, static_cast<float>(std::cos(1.0)),
                                                    static_cast<float>(std::sin(1.0))};
    DocHandle doc = put_doc(store, form, 2, k, {0, 0, 1, 0}, 1);
    TailHandle tail = put_tail(store, form, 1, {0, 0}, {0, 1});
    RequestLayout layout;
    layout.segments = {Segment::document(doc, 2, m - 4), Segment::of_tail(tail, 1, m)};
    std::vector<double> out;
    double lse = 0;
    softmax({0.0, 2 * std::cos(3.0), 0.0}, {{0, 0}, {1, 0}, {0, 1}}, out, lse);
    // ref::eigen turns keys with float32 cos/sin (~1.5e-7 of rounding), and R(1) k is stored as
    // float.
    expect_all(store, layout, default_rope(2), tiny_params(1, 1, 2), {2, 0}, out, {lse},
               {2e-6, 2e-6});
  }
}

TEST_CASE("tiny: rows that see no key give out 0 and lse -inf, no NaN", "[ref][tiny]") {
  const float inf = std::numeric_limits<float>::infinity();
  RopePolicy rope = default_rope(2);
  AttentionParams p = tiny_params(1, 1, 2, 0.0);
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    // Two queries, two keys; query 0 sees nothing, query 1 sees key 1 only.
    std::vector<float> q{1, 0, 0.5f, 0.5f}, k{1, 0, 0, 1}, v{4, 5, 6, 7};
    std::vector<std::int64_t> qp{3, 4}, kp{1, 2};
    std::vector<std::uint8_t> mask{0, 0, 0, 1};
    std::vector<float> out(4, -7.0f), lse(2, -7.0f);
    impl->dense(rope, p, q, qp, k, kp, v, mask, out, lse, 0);
    CHECK(out[0] == 0.0f);
    CHECK(out[1] == 0.0f);
    CHECK(lse[0] == -inf);
    CHECK(out[2] == Approx(6.0f));
    CHECK(out[3] == Approx(7.0f));
    // <R(4) q1, R(2) k1> = <R(2) (0.5, 0.5), (0, 1)> = 0.5 (sin 2 + cos 2), scale 1/sqrt(2).
    CHECK(lse[1] == Approx((0.5 * (std::sin(2.0) + std::cos(2.0))) / std::sqrt(2.0)).epsilon(1e-5));
    // No keys at all.
    std::vector<float> out0(2, -7.0f), lse0(1, -7.0f);
    impl->dense(rope, p, std::span<const float>(q).first(2),
                std::span<const std::int64_t>(qp).first(1), {}, {}, {}, {}, out0, lse0, 0);
    CHECK(out0[0] == 0.0f);
    CHECK(out0[1] == 0.0f);
    CHECK(lse0[0] == -inf);
  }
}
