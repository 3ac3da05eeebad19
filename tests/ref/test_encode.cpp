// Standalone document encoding: encode_document vs dense_attention with a causal mask, its k in
// storage form, and the round trip "encode standalone, store local, attend deferred" == raw.
#include "support/catch.hpp"
#include <cstdint>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;

namespace {

struct Document {
  std::int64_t length;
  std::vector<float> q, k, v;  // q [length, qo heads, dim], k, v [length, kv heads, dim]
};

Document random_document(std::int64_t length, const AttentionParams& p, Rng& rng) {
  auto n = static_cast<std::size_t>(length);
  return {length, random_normal(n * static_cast<std::size_t>(p.num_qo_heads * p.head_dim), rng),
          random_normal(n * static_cast<std::size_t>(p.num_kv_heads * p.head_dim), rng),
          random_normal(n * static_cast<std::size_t>(p.num_kv_heads * p.head_dim), rng)};
}

RopePolicy policy(RopeType type, int head_dim, PairLayout pairs, Rng& rng) {
  return RopePolicy(make_rope_config(type, head_dim, 1.0, pairs, rng));
}

AttentionParams params_of(int qo, int kv, int d) {
  AttentionParams p;
  p.num_qo_heads = qo;
  p.num_kv_heads = kv;
  p.head_dim = d;
  return p;
}

}  // namespace

TEST_CASE("encode_document == dense_attention with a causal mask", "[ref][encode]") {
  Rng rng(5);
  for (RopeType type : kAllSchedules) {
    for (std::int64_t length : {std::int64_t{1}, std::int64_t{17}, std::int64_t{130}}) {
      if (kSanitized && length > 100 && type != RopeType::kDynamic) continue;
      const PairLayout pairs = length == 17 ? PairLayout::kInterleaved : PairLayout::kHalf;
      RopePolicy rope = policy(type, 64, pairs, rng);
      AttentionParams p = params_of(8, 2, 64);
      INFO("rope " << to_string(type) << " length " << length << " pairs " << to_string(pairs));
      Document doc = random_document(length, p, rng);
      std::vector<std::int64_t> positions(static_cast<std::size_t>(length));
      for (std::int64_t i = 0; i < length; ++i) positions[static_cast<std::size_t>(i)] = i;
      std::vector<std::uint8_t> causal(static_cast<std::size_t>(length * length));
      for (std::int64_t i = 0; i < length; ++i) {
        for (std::int64_t j = 0; j < length; ++j) {
          causal[static_cast<std::size_t>(i * length + j)] = j <= i;
        }
      }
      const std::size_t n_out = doc.q.size(), n_lse = static_cast<std::size_t>(length * 8);
      for (const Impl* enc : {&kScalar, &kEigen}) {
        std::vector<float> out(n_out, -7.0f), lse(n_lse, -7.0f);
        enc->encode(rope, p, length, doc.q, doc.k, doc.v, out, lse, {}, StorageForm::kLocal);
        for (const Impl* den : {&kScalar, &kEigen}) {
          INFO("encode " << enc->name << " vs dense " << den->name);
          std::vector<float> d_out(n_out, -7.0f), d_lse(n_lse, -7.0f);
          den->dense(rope, p, doc.q, positions, doc.k, positions, doc.v, causal, d_out, d_lse, 0);
          LAZYATTN_CHECK_CLOSE(out, d_out, float_tolerance());
          LAZYATTN_CHECK_CLOSE(lse, d_lse, float_tolerance());
        }
      }
    }
  }
}

TEST_CASE("encode_document returns k as stored: a raw copy or R(i) k_i", "[ref][encode]") {
  Rng rng(6);
  for (PairLayout pairs : {PairLayout::kHalf, PairLayout::kInterleaved}) {
    RopePolicy rope = policy(RopeType::kYarn, 128, pairs, rng);
    AttentionParams p = params_of(4, 2, 128);
    const std::int64_t length = 40;
    Document doc = random_document(length, p, rng);
    std::vector<float> expected_local = to_local(rope.base_frequencies(), doc.k, 1, length, 2, 128);
    for (const Impl* impl : {&kScalar, &kEigen}) {
      INFO(impl->name << " " << to_string(pairs));
      std::vector<float> out(doc.q.size()), lse(static_cast<std::size_t>(length * 4));
      std::vector<float> raw(doc.k.size(), -7.0f), local(doc.k.size(), -7.0f);
      impl->encode(rope, p, length, doc.q, doc.k, doc.v, out, lse, raw, StorageForm::kRaw);
      CHECK(raw == doc.k);
      impl->encode(rope, p, length, doc.q, doc.k, doc.v, out, lse, local, StorageForm::kLocal);
      LAZYATTN_CHECK_CLOSE(local, expected_local, (Tolerance{1e-6, 1e-6}));
    }
  }
}

TEST_CASE("standalone encoding stored local, attended deferred, equals attending the raw keys",
          "[ref][encode]") {
  Rng rng(7);
  for (RopeType type : {RopeType::kDefault, RopeType::kYarn, RopeType::kLlama3}) {
    for (const Impl* enc : {&kScalar, &kEigen}) {
      RopePolicy rope = policy(type, 64, PairLayout::kHalf, rng);
      AttentionParams p = params_of(8, 2, 64);
      const std::int64_t length = 37, tail_length = 6, num_queries = 3;
      INFO("rope " << to_string(type) << " encoded by " << enc->name);
      Document doc = random_document(length, p, rng);
      std::vector<float> out(doc.q.size()), lse(static_cast<std::size_t>(length * 8));
      std::vector<float> k_local(doc.k.size());
      enc->encode(rope, p, length, doc.q, doc.k, doc.v, out, lse, k_local, StorageForm::kLocal);

      KvStoreConfig c;
      c.num_layers = 1;
      c.num_kv_heads = 2;
      c.head_dim = 64;
      c.page_size = 16;
      c.dtype = DType::kFloat32;
      c.num_pages = 32;
      KvStore store(c);
      DocKey key = DocKey::from_tokens(random_tokens(8, rng));
      DocHandle local = store
                            .insert(key, StorageForm::kLocal, length,
                                    std::span<const float>(k_local), std::span<const float>(doc.v))
                            .handle;
      DocHandle raw = store
                          .insert(key, StorageForm::kRaw, length, std::span<const float>(doc.k),
                                  std::span<const float>(doc.v))
                          .handle;
      std::vector<float> tail_k =
          random_normal(static_cast<std::size_t>(tail_length * 2 * 64), rng);
      std::vector<float> tail_v = random_normal(tail_k.size(), rng);
      TailHandle tail = store.create_tail(StorageForm::kRaw);
      store.append(tail, tail_length, std::span<const float>(tail_k),
                   std::span<const float>(tail_v));
      // The document twice, at two starts, then the tail.
      auto layout_of = [&](DocHandle d) {
        RequestLayout r;
        r.num_queries = num_queries;
        r.segments = {Segment::document(d, length, 1000), Segment::document(d, length, 1200),
                      Segment::of_tail(tail, tail_length, 1300)};
        return r;
      };
      Plan plan_local = make_plan(store, layout_of(local));
      Plan plan_raw = make_plan(store, layout_of(raw));
      std::vector<float> q = random_normal(static_cast<std::size_t>(num_queries * 8 * 64), rng);
      for (const Impl* att : {&kScalar, &kEigen}) {
        INFO("attended by " << att->name);
        std::vector<float> o_local(q.size()), l_local(static_cast<std::size_t>(num_queries * 8));
        std::vector<float> o_raw(q.size()), l_raw(l_local.size());
        att->attend(store, plan_local, 0, rope, p, q, o_local, l_local, Method::kDeferred);
        att->attend(store, plan_raw, 0, rope, p, q, o_raw, l_raw, Method::kDeferred);
        LAZYATTN_CHECK_CLOSE(o_local, o_raw, float_tolerance());
        LAZYATTN_CHECK_CLOSE(l_local, l_raw, float_tolerance());
      }
    }
  }
}

TEST_CASE("encode_document == prefill of the document as a request's only segment",
          "[ref][encode]") {
  // A request whose tail is the whole document at start 0, every token a query, is exactly the
  // document's standalone causal encoding.
  Rng rng(8);
  for (StorageForm form : {StorageForm::kRaw, StorageForm::kLocal}) {
    for (const Impl* impl : {&kScalar, &kEigen}) {
      INFO(to_string(form) << " " << impl->name);
      RopePolicy rope = policy(RopeType::kLlama3, 64, PairLayout::kInterleaved, rng);
      AttentionParams p = params_of(4, 1, 64);
      const std::int64_t length = 45;
      Document doc = random_document(length, p, rng);
      std::vector<float> enc_out(doc.q.size()), enc_lse(static_cast<std::size_t>(length * 4));
      std::vector<float> k_stored(doc.k.size());
      impl->encode(rope, p, length, doc.q, doc.k, doc.v, enc_out, enc_lse, k_stored, form);

      KvStoreConfig c;
      c.num_layers = 1;
      c.num_kv_heads = 1;
      c.head_dim = 64;
      c.page_size = 8;
      c.dtype = DType::kFloat32;
      c.num_pages = 8;
      KvStore store(c);
      TailHandle tail = store.create_tail(form);
      store.append(tail, length, std::span<const float>(k_stored), std::span<const float>(doc.v));
      RequestLayout r;
      r.num_queries = length;
      r.segments = {Segment::of_tail(tail, length, 0)};
      Plan plan = make_plan(store, r);
      for (Method method : {Method::kDeferred, Method::kEager}) {
        INFO(lazyattn::ref::to_string(method));
        std::vector<float> out(doc.q.size()), lse(enc_lse.size());
        impl->attend(store, plan, 0, rope, p, doc.q, out, lse, method);
        LAZYATTN_CHECK_CLOSE(out, enc_out, float_tolerance());
        LAZYATTN_CHECK_CLOSE(lse, enc_lse, float_tolerance());
      }
    }
  }
}
