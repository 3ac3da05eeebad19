// Random batches for the reference tests: documents and tails stored in a KvStore from original
// float K/V, a plan over them, queries, and per request the same problem as full attention
// (dense K/V at the logical positions with the causal tail mask).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "lazyattn/lazyattn.hpp"
#include "lazyattn/ref.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace lazyattn::test::ref {

using lazyattn::ref::Method;

// Where a request's documents sit (DESIGN.md section 2).
enum class LayoutKind : std::uint8_t {
  kBackToBack,  // Block-Attention: starts are the running sum of lengths
  kParallel,    // APE: every document at one start
  kGapped,      // Prompt Cache: gaps between documents
  kRepeated,    // back to back, with one document placed twice
  kShuffled,    // back-to-back slots handed out in a random order
};

inline const char* to_string(LayoutKind k) {
  switch (k) {
    case LayoutKind::kBackToBack:
      return "back_to_back";
    case LayoutKind::kParallel:
      return "parallel";
    case LayoutKind::kGapped:
      return "gapped";
    case LayoutKind::kRepeated:
      return "repeated";
    case LayoutKind::kShuffled:
      return "shuffled";
  }
  return "?";
}

inline constexpr LayoutKind kAllLayouts[] = {LayoutKind::kBackToBack, LayoutKind::kParallel,
                                             LayoutKind::kGapped, LayoutKind::kRepeated,
                                             LayoutKind::kShuffled};
inline constexpr RopeType kAllSchedules[] = {RopeType::kDefault, RopeType::kLinear,
                                             RopeType::kDynamic, RopeType::kYarn,
                                             RopeType::kLlama3,  RopeType::kLongrope};

// A RopeConfig of the given schedule with settings that make the schedule matter at the lengths
// the tests use (a few hundred positions): small original contexts, factors well above 1.
inline RopeConfig make_rope_config(RopeType type, int head_dim, double partial, PairLayout layout,
                                   Rng& rng) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.partial_rotary_factor = partial;
  c.pair_layout = layout;
  c.rope_theta = 10000.0;
  c.rope_scaling.rope_type = type;
  switch (type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      c.rope_scaling.factor = 4.0;
      break;
    case RopeType::kDynamic:
      c.rope_scaling.factor = 2.0;
      c.max_position_embeddings = 64;
      break;
    case RopeType::kYarn:
      c.rope_scaling.factor = 4.0;
      c.rope_scaling.original_max_position_embeddings = 64;
      c.max_position_embeddings = 256;
      break;
    case RopeType::kLlama3:
      c.rope_theta = 500000.0;
      c.rope_scaling.factor = 8.0;
      c.rope_scaling.low_freq_factor = 1.0;
      c.rope_scaling.high_freq_factor = 4.0;
      c.rope_scaling.original_max_position_embeddings = 64;
      break;
    case RopeType::kLongrope: {
      c.max_position_embeddings = 400;
      c.original_max_position_embeddings = 100;
      int half = static_cast<int>(head_dim * partial) / 2;
      std::uniform_real_distribution<double> u(1.0, 4.0);
      for (int i = 0; i < half; ++i) {
        c.rope_scaling.short_factor.push_back(u(rng));
        c.rope_scaling.long_factor.push_back(u(rng) * 2.0);
      }
      break;
    }
  }
  return c;
}

struct ScenarioSpec {
  int num_qo_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 64;
  double partial_rotary = 1.0;
  PairLayout pair_layout = PairLayout::kHalf;
  RopeType schedule = RopeType::kDefault;
  int page_size = 16;
  int num_layers = 1;
  int layer = 0;
  DType dtype = DType::kFloat32;
  StorageForm doc_form = StorageForm::kRaw;
  StorageForm tail_form = StorageForm::kLocal;
  LayoutKind layout = LayoutKind::kBackToBack;
  std::vector<std::int64_t> doc_lengths{17, 16, 1, 40};  // documents stored, shared by requests
  int docs_per_request = 3;
  std::vector<std::int64_t> num_queries{1};  // per request, cycled
  std::int64_t max_tail_extra = 12;          // tail length = num_queries + [0, max_tail_extra]
  int num_requests = 2;
  std::int64_t base_position = 0;  // added to every start: large positions
  bool prefixes = true;            // sometimes attend a prefix (possibly empty) of a document
  bool empty_segment = false;      // add an empty document segment far past the tail
  double softmax_scale = 0.0;
  double logits_soft_cap = 0.0;
  std::uint64_t seed = 1;
  // K and V rounded through fp8 e4m3 at fp8_scale's scales before they are stored: a float store
  // then holds exactly what a dtype kFloat8E4M3 store of the same spec reads (whose config gets
  // those scales).
  bool fp8_values = false;

  AttentionParams params() const {
    AttentionParams p;
    p.num_qo_heads = num_qo_heads;
    p.num_kv_heads = num_kv_heads;
    p.head_dim = head_dim;
    p.softmax_scale = softmax_scale;
    p.logits_soft_cap = logits_soft_cap;
    return p;
  }
};

inline std::ostream& operator<<(std::ostream& os, const ScenarioSpec& s) {
  os << "heads " << s.num_qo_heads << "/" << s.num_kv_heads << " head_dim " << s.head_dim
     << " partial " << s.partial_rotary << " pairs " << to_string(s.pair_layout) << " rope "
     << to_string(s.schedule) << " page " << s.page_size << " layer " << s.layer << "/"
     << s.num_layers << " " << to_string(s.dtype) << " docs " << to_string(s.doc_form) << " tail "
     << to_string(s.tail_form) << " layout " << to_string(s.layout) << " doc_lengths [";
  for (std::size_t i = 0; i < s.doc_lengths.size(); ++i) os << (i ? " " : "") << s.doc_lengths[i];
  os << "] per_request " << s.docs_per_request << " queries [";
  for (std::size_t i = 0; i < s.num_queries.size(); ++i) os << (i ? " " : "") << s.num_queries[i];
  os << "] requests " << s.num_requests << " base " << s.base_position << " scale "
     << s.softmax_scale << " cap " << s.logits_soft_cap << " seed " << s.seed
     << (s.fp8_values ? " fp8_values" : "");
  return os;
}

inline std::string describe(const ScenarioSpec& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// One request as full attention: raw q, k, v at their positions, the visibility mask.
struct DenseProblem {
  std::int64_t first_row = 0;  // its rows in the plan's query tensor
  std::int64_t num_queries = 0;
  std::vector<float> q;  // [num_queries, num_qo_heads, head_dim]
  std::vector<std::int64_t> q_positions;
  std::vector<float> k, v;  // [num_keys, num_kv_heads, head_dim], original (un-rotated, float)
  std::vector<std::int64_t> k_positions;
  std::vector<std::uint8_t> mask;  // [num_queries, num_keys]
};

struct Scenario {
  ScenarioSpec spec;
  RopePolicy rope;
  std::unique_ptr<KvStore> store;
  std::vector<RequestLayout> layouts;
  Plan plan;
  std::vector<float> q;  // [plan.num_queries(), num_qo_heads, head_dim]
  std::vector<DenseProblem> dense;
  std::string layout_text;  // the layouts, printed, for INFO()

  std::size_t out_size() const { return q.size(); }
  std::size_t lse_size() const {
    return static_cast<std::size_t>(plan.num_queries()) *
           static_cast<std::size_t>(spec.num_qo_heads);
  }
};

// The K (or V) scale of layer l, KV head h for fp8 values: distinct per layer and head, and large
// enough for random_normal's values (|x| / scale well under e4m3's 448).
inline float fp8_scale(bool k, int l, int h, int num_kv_heads) {
  const int i = l * num_kv_heads + h;
  return k ? 0.015f * (1.0f + 0.25f * static_cast<float>(i)) : 0.02f * (1.0f + 0.5f * (i % 3));
}
inline std::vector<float> fp8_scales(bool k, int num_layers, int num_kv_heads) {
  std::vector<float> out;
  for (int l = 0; l < num_layers; ++l)
    for (int h = 0; h < num_kv_heads; ++h) out.push_back(fp8_scale(k, l, h, num_kv_heads));
  return out;
}
// Tokens [num_layers, n, heads, head_dim] as an fp8 store reads them back: e4m3(x / scale) * scale.
inline std::vector<float> round_through_fp8(std::vector<float> x, bool k, int num_layers,
                                            std::int64_t n, int heads, int head_dim) {
  for (int l = 0; l < num_layers; ++l)
    for (std::int64_t i = 0; i < n; ++i)
      for (int h = 0; h < heads; ++h) {
        const float scale = fp8_scale(k, l, h, heads);
        float* at = &x[static_cast<std::size_t>(((l * n + i) * heads + h) * head_dim)];
        for (int d = 0; d < head_dim; ++d) at[d] = round_to<float8_e4m3>(at[d] / scale) * scale;
      }
  return x;
}

// K rotated at positions 0..n-1 (local form), for tokens laid out [num_layers, n, heads, head_dim].
// K rotated at first + i (local form: first 0; absolute form: the segment's logical start).
inline std::vector<float> to_local(const RopeFrequencies& f, const std::vector<float>& k,
                                   int num_layers, std::int64_t n, int heads, int head_dim,
                                   std::int64_t first = 0) {
  std::vector<float> out = k;
  for (int l = 0; l < num_layers; ++l) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (int h = 0; h < heads; ++h) {
        std::size_t at = static_cast<std::size_t>(((l * n + i) * heads + h) * head_dim);
        rope::rotate(f, first + i, std::span<float>(&out[at], static_cast<std::size_t>(head_dim)));
      }
    }
  }
  return out;
}

inline Scenario make_scenario(const ScenarioSpec& spec) {
  Rng rng(spec.seed);
  Scenario sc{spec,
              RopePolicy(make_rope_config(spec.schedule, spec.head_dim, spec.partial_rotary,
                                          spec.pair_layout, rng)),
              nullptr,
              {},
              {},
              {},
              {},
              {}};
  const int L = spec.num_layers, Hkv = spec.num_kv_heads, Hq = spec.num_qo_heads, D = spec.head_dim;
  const RopeFrequencies& base = sc.rope.base_frequencies();

  struct Tokens {
    std::int64_t length;
    std::vector<float> k, v;  // [num_layers, length, num_kv_heads, head_dim], original
  };
  auto make_tokens = [&](std::int64_t n) {
    std::size_t count = static_cast<std::size_t>(L * n * Hkv * D);
    return Tokens{n, random_normal(count, rng), random_normal(count, rng)};
  };

  std::vector<Tokens> docs;
  std::int64_t pages_needed = 0;
  auto pages = [&](std::int64_t n) { return (n + spec.page_size - 1) / spec.page_size; };
  for (std::int64_t len : spec.doc_lengths) {
    docs.push_back(make_tokens(len));
    pages_needed += pages(len);
  }
  std::vector<std::int64_t> nq(static_cast<std::size_t>(spec.num_requests));
  std::vector<Tokens> tails;
  for (int b = 0; b < spec.num_requests; ++b) {
    nq[b] = spec.num_queries[static_cast<std::size_t>(b) % spec.num_queries.size()];
    std::int64_t extra = std::uniform_int_distribution<std::int64_t>(0, spec.max_tail_extra)(rng);
    tails.push_back(make_tokens(nq[b] + extra));
    pages_needed += pages(nq[b] + extra);
  }

  KvStoreConfig cfg;
  cfg.num_layers = L;
  cfg.num_kv_heads = Hkv;
  cfg.head_dim = D;
  cfg.page_size = spec.page_size;
  cfg.dtype = spec.dtype;
  cfg.num_pages = pages_needed + 3;
  if (spec.dtype == DType::kFloat8E4M3) {
    cfg.k_scale = fp8_scales(true, L, Hkv);
    cfg.v_scale = fp8_scales(false, L, Hkv);
  }
  sc.store = std::make_unique<KvStore>(cfg);
  // What the store is given: the values themselves, or (fp8_values) rounded as an fp8 store would.
  auto stored = [&](const std::vector<float>& x, bool k, std::int64_t n) {
    return spec.fp8_values ? round_through_fp8(x, k, L, n, Hkv, D) : x;
  };

  std::vector<DocHandle> handles;
  for (const Tokens& d : docs) {
    DocKey key = DocKey::from_tokens(random_tokens(8, rng));
    std::vector<float> k =
        spec.doc_form == StorageForm::kLocal ? to_local(base, d.k, L, d.length, Hkv, D) : d.k;
    k = stored(k, true, d.length);
    const std::vector<float> v = stored(d.v, false, d.length);
    InsertResult r = sc.store->insert(key, spec.doc_form, d.length, std::span<const float>(k),
                                      std::span<const float>(v), /*pin=*/true);
    handles.push_back(r.handle);
  }

  auto pick = [&](std::int64_t n) {
    return std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
  };
  const auto num_docs = static_cast<std::int64_t>(docs.size());
  for (int b = 0; b < spec.num_requests; ++b) {
    // Which documents, and how much of each.
    std::vector<std::int64_t> which;
    for (int j = 0; j < spec.docs_per_request && num_docs > 0; ++j) which.push_back(pick(num_docs));
    if (spec.layout == LayoutKind::kRepeated && !which.empty()) which.push_back(which[0]);
    std::vector<std::int64_t> lengths;
    for (std::int64_t d : which) {
      std::int64_t len = docs[static_cast<std::size_t>(d)].length;
      if (spec.prefixes && pick(5) == 0) len = pick(len + 1);  // a prefix, possibly empty
      lengths.push_back(len);
    }
    // Where they sit.
    std::vector<std::int64_t> starts(which.size());
    std::int64_t end = spec.base_position;
    switch (spec.layout) {
      case LayoutKind::kBackToBack:
      case LayoutKind::kRepeated:
        for (std::size_t j = 0; j < which.size(); ++j) {
          starts[j] = end;
          end += lengths[j];
        }
        break;
      case LayoutKind::kParallel:
        for (std::size_t j = 0; j < which.size(); ++j) {
          starts[j] = spec.base_position;
          end = std::max(end, spec.base_position + lengths[j]);
        }
        break;
      case LayoutKind::kGapped:
        for (std::size_t j = 0; j < which.size(); ++j) {
          end += pick(3) == 0 ? pick(3000) : pick(40);
          starts[j] = end;
          end += lengths[j];
        }
        end += pick(40);
        break;
      case LayoutKind::kShuffled: {
        std::vector<std::size_t> order(which.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::shuffle(order.begin(), order.end(), rng);
        for (std::size_t o : order) {
          starts[o] = end;
          end += lengths[o];
        }
        break;
      }
    }
    const Tokens& tail_tokens = tails[static_cast<std::size_t>(b)];
    TailHandle tail = sc.store->create_tail(spec.tail_form);
    // Local: rotated at the tail's own indices; absolute: at its logical positions (end + i),
    // as a model's forward leaves them.
    std::vector<float> tk =
        spec.tail_form == StorageForm::kRaw
            ? tail_tokens.k
            : to_local(base, tail_tokens.k, L, tail_tokens.length, Hkv, D,
                       spec.tail_form == StorageForm::kAbsolute ? end : 0);
    tk = stored(tk, true, tail_tokens.length);
    const std::vector<float> tv = stored(tail_tokens.v, false, tail_tokens.length);
    sc.store->append(tail, tail_tokens.length, std::span<const float>(tk),
                     std::span<const float>(tv));
    const std::int64_t tail_start = end;

    RequestLayout layout;
    layout.num_queries = nq[b];
    std::vector<const Tokens*> sources;  // the original tokens of each segment
    for (std::size_t j = 0; j < which.size(); ++j) {
      const auto d = static_cast<std::size_t>(which[j]);
      layout.segments.push_back(Segment::document(handles[d], lengths[j], starts[j]));
      sources.push_back(&docs[d]);
    }
    // The tail goes in the middle now and then: segment order must not matter.
    auto tail_at = static_cast<std::ptrdiff_t>(pick(static_cast<std::int64_t>(which.size()) + 1));
    layout.segments.insert(layout.segments.begin() + tail_at,
                           Segment::of_tail(tail, tail_tokens.length, tail_start));
    sources.insert(sources.begin() + tail_at, &tail_tokens);
    if (spec.empty_segment && num_docs > 0) {
      layout.segments.push_back(Segment::document(handles[0], 0, end + 5000));
      sources.push_back(&docs[0]);
    }
    sc.layouts.push_back(layout);
    std::ostringstream os;
    os << "request " << b << ": " << layout << "\n";
    sc.layout_text += os.str();

    // The same request as full attention from the original float K/V of the tested layer.
    DenseProblem dp;
    dp.num_queries = nq[b];
    for (std::size_t j = 0; j < layout.segments.size(); ++j) {
      const Segment& s = layout.segments[j];
      const Tokens& t = *sources[j];
      for (std::int64_t i = 0; i < s.length; ++i) {
        std::size_t at = static_cast<std::size_t>(((spec.layer * t.length + i) * Hkv) * D);
        dp.k.insert(dp.k.end(), &t.k[at], &t.k[at] + Hkv * D);
        dp.v.insert(dp.v.end(), &t.v[at], &t.v[at] + Hkv * D);
        dp.k_positions.push_back(s.start + i);
      }
    }
    const auto nk = static_cast<std::int64_t>(dp.k_positions.size());
    dp.mask.assign(static_cast<std::size_t>(nq[b] * nk), 1);
    for (std::int64_t r = 0; r < nq[b]; ++r) {
      std::int64_t j = 0;
      for (const Segment& s : layout.segments) {
        for (std::int64_t i = 0; i < s.length; ++i, ++j) {
          if (s.kind == SegmentKind::kTail && i > tail_tokens.length - nq[b] + r) {
            dp.mask[static_cast<std::size_t>(r * nk + j)] = 0;
          }
        }
      }
      dp.q_positions.push_back(tail_start + tail_tokens.length - nq[b] + r);
    }
    sc.dense.push_back(std::move(dp));
  }

  sc.plan = make_plan(*sc.store, std::span<const RequestLayout>(sc.layouts));
  sc.q = random_normal(static_cast<std::size_t>(sc.plan.num_queries()) * Hq * D, rng);
  for (int b = 0; b < spec.num_requests; ++b) {
    DenseProblem& dp = sc.dense[static_cast<std::size_t>(b)];
    dp.first_row = sc.plan.request_query_indptr[b];
    auto first = sc.q.begin() + dp.first_row * Hq * D;
    dp.q.assign(first, first + dp.num_queries * Hq * D);
  }
  return sc;
}

// out and lse of one call.
struct Result {
  std::vector<float> out;
  std::vector<float> lse;
};

// The two references behind one interface, so that every check runs on both.
struct Impl {
  const char* name;
  void (*attend)(const KvStore&, const Plan&, int, const RopePolicy&, const AttentionParams&,
                 std::span<const float>, std::span<float>, std::span<float>, Method);
  void (*dense)(const RopePolicy&, const AttentionParams&, std::span<const float>,
                std::span<const std::int64_t>, std::span<const float>,
                std::span<const std::int64_t>, std::span<const float>,
                std::span<const std::uint8_t>, std::span<float>, std::span<float>, std::int64_t);
  void (*encode)(const RopePolicy&, const AttentionParams&, std::int64_t, std::span<const float>,
                 std::span<const float>, std::span<const float>, std::span<float>, std::span<float>,
                 std::span<float>, StorageForm);
};

inline const Impl kScalar{"scalar", &lazyattn::ref::scalar::attend,
                          &lazyattn::ref::scalar::dense_attention,
                          &lazyattn::ref::scalar::encode_document};
inline const Impl kEigen{"eigen", &lazyattn::ref::eigen::attend,
                         &lazyattn::ref::eigen::dense_attention,
                         &lazyattn::ref::eigen::encode_document};

inline Result run_attend(const Impl& impl, const Scenario& sc, Method method) {
  Result r{std::vector<float>(sc.out_size(), -7.0f), std::vector<float>(sc.lse_size(), -7.0f)};
  impl.attend(*sc.store, sc.plan, sc.spec.layer, sc.rope, sc.spec.params(), sc.q, r.out, r.lse,
              method);
  return r;
}

// Full attention for every request, assembled into the plan's row order. The rope length that
// length-dependent schedules see comes from the positions (one past the largest), not the plan.
inline Result run_dense(const Impl& impl, const Scenario& sc) {
  Result r{std::vector<float>(sc.out_size(), -7.0f), std::vector<float>(sc.lse_size(), -7.0f)};
  const std::size_t Hq = static_cast<std::size_t>(sc.spec.num_qo_heads);
  const std::size_t D = static_cast<std::size_t>(sc.spec.head_dim);
  for (const DenseProblem& dp : sc.dense) {
    const auto row = static_cast<std::size_t>(dp.first_row);
    const auto n = static_cast<std::size_t>(dp.num_queries);
    impl.dense(sc.rope, sc.spec.params(), dp.q, dp.q_positions, dp.k, dp.k_positions, dp.v, dp.mask,
               std::span<float>(r.out).subspan(row * Hq * D, n * Hq * D),
               std::span<float>(r.lse).subspan(row * Hq, n * Hq), 0);
  }
  return r;
}

// Built with -fsanitize (address or undefined): sweeps shrink, malloc counting is off.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define LAZYATTN_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define LAZYATTN_TEST_SANITIZED 1
#endif
#endif
#ifndef LAZYATTN_TEST_SANITIZED
#define LAZYATTN_TEST_SANITIZED 0
#endif
inline constexpr bool kSanitized = LAZYATTN_TEST_SANITIZED;

// Sweeps run `full` cases normally and `reduced` under the sanitizers (several times slower).
inline int sweep(int full, int reduced) { return kSanitized ? reduced : full; }

// Tolerances per element. Outputs are convex combinations of N(0,1) values and logits are O(1);
// float32 paths agree to ~3e-6 here (measured over the sweeps), 16-bit stores round K and V
// themselves (measured ~9e-4 for fp16 and ~5.5e-3 for bf16 against full attention in float).
inline Tolerance float_tolerance() { return {1e-5, 1e-5}; }
inline Tolerance stored_tolerance(DType t) {
  switch (t) {
    case DType::kFloat32:
      return float_tolerance();
    case DType::kFloat16:
      return {2.5e-3, 2.5e-3};
    case DType::kBFloat16:
      return {1.5e-2, 1.5e-2};
    case DType::kFloat8E4M3:  // (no bar against full attention in float: tests compare fp8 to fp8)
      break;
  }
  return {};
}

// Erases the first document request 0 reads (make_scenario inserts each one pinned once), so
// that sc.plan is no longer current in sc.store: its pages may be reused.
inline void erase_first_document(Scenario& sc) {
  const std::vector<Segment>& segs = sc.layouts.at(0).segments;
  const auto doc = std::find_if(segs.begin(), segs.end(), [](const Segment& s) {
    return s.kind == SegmentKind::kDocument;
  });
  LAZYATTN_CHECK(doc != segs.end(), "erase_first_document: request 0 reads no document");
  sc.store->unpin(doc->doc);
  sc.store->erase(doc->doc);
}

}  // namespace lazyattn::test::ref
