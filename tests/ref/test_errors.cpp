// Bad inputs to the references: each throws lazyattn::Error naming the bad value and what was
// expected, before anything is read or written.
#include "support/catch.hpp"
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "ref/scenario.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using namespace lazyattn::test::ref;
using Catch::Contains;

// Both the type and the message: a std::runtime_error with the right words would not do.
#define CHECK_ERROR(expr, text)               \
  do {                                        \
    CHECK_THROWS_AS(expr, ::lazyattn::Error); \
    CHECK_THROWS_WITH(expr, Contains(text));  \
  } while (0)

namespace {

ScenarioSpec small_spec() {
  ScenarioSpec s;
  s.num_qo_heads = 8;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.num_requests = 2;
  s.num_queries = {1};
  s.doc_lengths = {5, 20};
  s.docs_per_request = 2;
  s.num_layers = 2;
  s.layer = 1;
  return s;
}

}  // namespace

TEST_CASE("attend: wrong span sizes name the expected shape", "[ref][errors]") {
  Scenario sc = make_scenario(small_spec());
  const AttentionParams p = sc.spec.params();
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    auto attend = [&](std::span<const float> q, std::span<float> o, std::span<float> l) {
      impl->attend(*sc.store, sc.plan, 1, sc.rope, p, q, o, l, Method::kDeferred);
    };
    std::vector<float> short_q(sc.q.begin(), sc.q.end() - 1);
    CHECK_ERROR(
        attend(short_q, out, lse),
        "q has 1023 elements, expected [num_queries 2, num_qo_heads 8, head_dim 64] = 1024");
    std::vector<float> long_out(out.size() + 64);
    CHECK_ERROR(attend(sc.q, long_out, lse), "out has 1088 elements, expected [num_queries 2");
    std::vector<float> short_lse(lse.size() - 8);
    CHECK_ERROR(attend(sc.q, out, short_lse),
                "lse has 8 elements, expected [num_queries 2, num_qo_heads 8] = 16");
    CHECK_ERROR(impl->attend(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out, lse,
                             static_cast<Method>(9)),
                "method 9, expected 0 (eager) or 1 (deferred)");
  }
}

TEST_CASE("attend: head dims, head counts and layers must agree", "[ref][errors]") {
  Scenario sc = make_scenario(small_spec());
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    auto attend = [&](const RopePolicy& rope, const AttentionParams& p, int layer) {
      impl->attend(*sc.store, sc.plan, layer, rope, p, sc.q, out, lse, Method::kEager);
    };
    AttentionParams p = sc.spec.params();
    CHECK_ERROR(attend(sc.rope, p, 2), "layer 2, expected in [0, num_layers 2)");
    CHECK_ERROR(attend(sc.rope, p, -1), "layer -1, expected in [0, num_layers 2)");
    RopeConfig c128 = sc.rope.config();
    c128.head_dim = 128;
    CHECK_ERROR(attend(RopePolicy(c128), p, 1), "rope head_dim 128, expected params.head_dim 64");
    AttentionParams p128 = p;
    p128.head_dim = 128;
    CHECK_ERROR(attend(RopePolicy(c128), p128, 1),
                "store head_dim 64, expected params.head_dim 128");
    AttentionParams p_kv = p;
    p_kv.num_kv_heads = 4;
    CHECK_ERROR(attend(sc.rope, p_kv, 1), "store num_kv_heads 2, expected params.num_kv_heads 4");
    AttentionParams p_gqa = p;
    p_gqa.num_qo_heads = 7;
    CHECK_ERROR(attend(sc.rope, p_gqa, 1), "num_qo_heads 7, expected a multiple of num_kv_heads 2");
    // Finite, but past what float32 logits hold: refused rather than inf, then NaN or zeros.
    AttentionParams p_scale = p;
    p_scale.softmax_scale = 1e39;
    CHECK_ERROR(attend(sc.rope, p_scale, 1), "softmax_scale 1e+39, expected in [0, 1e+30]");
    AttentionParams p_cap = p;
    p_cap.logits_soft_cap = 1e300;
    CHECK_ERROR(attend(sc.rope, p_cap, 1), "logits_soft_cap 1e+300, expected in [0, 1e+30]");
  }
}

TEST_CASE("attend: a plan that does not fit the store or itself", "[ref][errors]") {
  Scenario sc = make_scenario(small_spec());
  const AttentionParams p = sc.spec.params();
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    auto attend = [&](const Plan& plan) {
      impl->attend(*sc.store, plan, 1, sc.rope, p, sc.q, out, lse, Method::kDeferred);
    };
    {
      Plan bad = sc.plan;
      bad.page_ids[0] = static_cast<std::int32_t>(sc.store->config().num_pages);
      CHECK_ERROR(attend(bad), "plan.page_ids[0] " + std::to_string(bad.page_ids[0]) +
                                   ", expected in [0, num_pages");
    }
    {
      Plan bad = sc.plan;
      bad.page_size = 32;
      CHECK_ERROR(attend(bad), "plan.page_size 32, expected the store's page_size 16");
    }
    {
      Plan bad = sc.plan;
      bad.segment_length[0] += 100;  // more keys than its pages hold
      CHECK_ERROR(attend(bad), "pages, expected at least");
    }
    {
      Plan bad = sc.plan;
      bad.request_query_position[1] += 1;
      CHECK_ERROR(attend(bad), "request 1 query_position");
    }
    {
      Plan bad = sc.plan;
      bad.segment_start.pop_back();
      CHECK_ERROR(attend(bad), "plan.segment_start has");
    }
    {
      Plan bad = sc.plan;
      bad.segment_form[0] = 7;
      CHECK_ERROR(attend(bad), "segment 0 form 7, expected 0 (raw), 1 (local) or 2 (absolute)");
    }
    {
      Plan bad = sc.plan;
      const auto doc = std::find(bad.segment_kind.begin(), bad.segment_kind.end(),
                                 static_cast<std::uint8_t>(SegmentKind::kDocument)) -
                       bad.segment_kind.begin();
      REQUIRE(doc < bad.num_segments());
      bad.segment_form[static_cast<std::size_t>(doc)] =
          static_cast<std::uint8_t>(StorageForm::kAbsolute);
      CHECK_ERROR(attend(bad), "is a document in absolute form, expected a tail");
    }
    {
      Plan bad = sc.plan;
      bad.request_tail_segment[0] = bad.request_segment_indptr[1];  // the next request's segment
      CHECK_ERROR(attend(bad), "request 0 tail segment");
    }
    {
      Plan bad = sc.plan;
      bad.request_rope_length[0] = 1;
      CHECK_ERROR(attend(bad), "request 0 rope_length 1, expected at least 1 + its largest");
    }
    {
      Plan bad = sc.plan;
      bad.request_rope_length[0] = std::numeric_limits<std::int64_t>::max();
      CHECK_ERROR(attend(bad), "request 0 rope_length 9223372036854775807, expected at least");
    }
  }
}

TEST_CASE("decode needs one query per request; prefill takes any number; both are attend",
          "[ref][errors]") {
  ScenarioSpec s = small_spec();
  s.num_queries = {1, 3};
  Scenario sc = make_scenario(s);
  const AttentionParams p = sc.spec.params();
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  CHECK_ERROR(lazyattn::ref::scalar::decode(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out, lse),
              "request 1 has 3 queries, expected 1 for a decode step");
  CHECK_ERROR(lazyattn::ref::eigen::decode(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out, lse),
              "request 1 has 3 queries, expected 1 for a decode step");
  std::vector<float> out2(out.size());
  lazyattn::ref::scalar::prefill(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out, lse);
  lazyattn::ref::eigen::prefill(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out2, lse);
  LAZYATTN_CHECK_CLOSE(out2, out, float_tolerance());

  // A plan with one query per request decodes, and decode is attend.
  Scenario one = make_scenario(small_spec());
  std::vector<float> d_out(one.out_size()), d_lse(one.lse_size());
  std::vector<float> a_out(one.out_size()), a_lse(one.lse_size());
  lazyattn::ref::scalar::decode(*one.store, one.plan, 1, one.rope, p, one.q, d_out, d_lse);
  lazyattn::ref::scalar::attend(*one.store, one.plan, 1, one.rope, p, one.q, a_out, a_lse);
  CHECK(d_out == a_out);
  lazyattn::ref::eigen::decode(*one.store, one.plan, 1, one.rope, p, one.q, d_out, d_lse);
  lazyattn::ref::eigen::attend(*one.store, one.plan, 1, one.rope, p, one.q, a_out, a_lse);
  CHECK(d_out == a_out);
}

TEST_CASE("local form with a length-dependent schedule is refused", "[ref][errors]") {
  for (RopeType type : {RopeType::kDynamic, RopeType::kLongrope}) {
    INFO(to_string(type));
    // Built with a schedule that allows local form, then attended with one that does not.
    ScenarioSpec s = small_spec();
    s.doc_form = StorageForm::kLocal;
    s.tail_form = StorageForm::kRaw;
    Scenario sc = make_scenario(s);
    Rng rng(3);
    RopePolicy dependent(make_rope_config(type, 64, 1.0, PairLayout::kHalf, rng));
    std::vector<float> out(sc.out_size()), lse(sc.lse_size());
    for (const Impl* impl : {&kScalar, &kEigen}) {
      INFO(impl->name);
      for (Method method : {Method::kDeferred, Method::kEager}) {
        CHECK_ERROR(
            impl->attend(*sc.store, sc.plan, 1, dependent, sc.spec.params(), sc.q, out, lse,
                         method),
            std::string("storage form local with rope_type ") + std::string(to_string(type)));
      }
      std::vector<float> q(8 * 64), k(2 * 64), v(2 * 64), o(8 * 64), l(8), ks(2 * 64);
      CHECK_ERROR(
          impl->encode(dependent, sc.spec.params(), 1, q, k, v, o, l, ks, StorageForm::kLocal),
          "storage form local with rope_type");
    }
  }
}

TEST_CASE("dense_attention and encode_document: sizes, positions, rope_length", "[ref][errors]") {
  RopeConfig c;
  c.head_dim = 4;
  RopePolicy rope(c);
  AttentionParams p;
  p.num_qo_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 4;
  std::vector<float> q(2 * 2 * 4), k(3 * 4), v(3 * 4), out(q.size()), lse(4);
  std::vector<std::int64_t> qp{5, 6}, kp{0, 1, 2};
  std::vector<std::uint8_t> mask(6, 1);
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    auto dense = [&](std::span<const float> q_, std::span<const std::int64_t> qp_,
                     std::span<const float> k_, std::span<const std::uint8_t> mask_,
                     std::int64_t rope_length) {
      impl->dense(rope, p, q_, qp_, k_, kp, v, mask_, out, lse, rope_length);
    };
    CHECK_NOTHROW(dense(q, qp, k, mask, 0));
    CHECK_NOTHROW(dense(q, qp, k, {}, 0));
    CHECK_ERROR(dense(std::span<const float>(q).first(10), qp, k, mask, 0),
                "q has 10 elements, expected [num_queries (q_positions.size()) 2, num_qo_heads 2, "
                "head_dim 4] = 16");
    CHECK_ERROR(dense(q, qp, std::span<const float>(k).first(8), mask, 0),
                "k has 8 elements, expected [num_keys (k_positions.size()) 3");
    CHECK_ERROR(dense(q, qp, k, std::span<const std::uint8_t>(mask).first(5), 0),
                "mask has 5 elements, expected [num_queries 2, num_keys 3] = 6");
    std::vector<std::int64_t> negative{5, -1};
    CHECK_ERROR(dense(q, negative, k, mask, 0), "q_positions[1] -1, expected in [0, 2^62)");
    CHECK_ERROR(dense(q, qp, k, mask, 6),
                "rope_length 6, expected 0 (one past the largest "
                "position) or at least 7");

    std::vector<float> ks(k.size());
    auto encode = [&](std::int64_t length, std::span<const float> k_, std::span<float> ks_) {
      impl->encode(rope, p, length,
                   std::span<const float>(q).first(static_cast<std::size_t>(length * 8)), k_,
                   std::span<const float>(v).first(static_cast<std::size_t>(length * 4)),
                   std::span<float>(out).first(static_cast<std::size_t>(length * 8)),
                   std::span<float>(lse).first(static_cast<std::size_t>(length * 2)), ks_,
                   StorageForm::kLocal);
    };
    std::span<const float> k2 = std::span<const float>(k).first(8);
    CHECK_NOTHROW(encode(2, k2, std::span<float>(ks).first(8)));
    CHECK_ERROR(encode(2, k, std::span<float>(ks).first(8)),
                "k has 12 elements, expected [length 2, num_kv_heads 1, head_dim 4] = 8");
    CHECK_ERROR(encode(2, k2, ks), "k_stored has 12 elements, expected [length 2");
    CHECK_ERROR(impl->encode(rope, p, -1, {}, {}, {}, {}, {}, {}, StorageForm::kRaw),
                "length -1, expected in [0, 2^62)");
    CHECK_ERROR(impl->encode(rope, p, 2, std::span<const float>(q).first(16), k2,
                             std::span<const float>(v).first(8), std::span<float>(out).first(16),
                             std::span<float>(lse).first(4), std::span<float>(ks).first(8),
                             static_cast<StorageForm>(7)),
                "storage form 7");
    // A length whose element count wraps int64 is refused, not matched against small buffers
    // (2^61 + 1 tokens x 2 heads x 4 dims wraps to 8 elements).
    const std::int64_t huge = (std::int64_t{1} << 61) + 1;
    CHECK_ERROR(impl->encode(rope, p, huge, std::span<const float>(q).first(8), k2,
                             std::span<const float>(v).first(4), std::span<float>(out).first(8),
                             std::span<float>(lse).first(2), {}, StorageForm::kRaw),
                "q of shape [length 2305843009213693953, num_qo_heads 2, head_dim 4] has a "
                "negative dimension or more than 2^63 - 1 elements");
  }
}

TEST_CASE("attend: a plan of another store, or one whose document was erased since, is refused",
          "[ref][errors]") {
  Scenario sc = make_scenario(small_spec());
  Scenario other = make_scenario(small_spec());  // the same geometry and page ids, another store
  const AttentionParams p = sc.spec.params();
  std::vector<float> out(sc.out_size()), lse(sc.lse_size());
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    CHECK_ERROR(impl->attend(*other.store, sc.plan, 1, sc.rope, p, sc.q, out, lse,
                             Method::kDeferred),
                "the plan was made from store " + std::to_string(sc.store->id()));
  }
  // Erase the first document the plan reads: its pages may be reused, so the plan is refused.
  erase_first_document(sc);
  for (const Impl* impl : {&kScalar, &kEigen}) {
    INFO(impl->name);
    CHECK_ERROR(impl->attend(*sc.store, sc.plan, 1, sc.rope, p, sc.q, out, lse,
                             Method::kDeferred),
                "was evicted or erased since the plan was made");
  }
}
