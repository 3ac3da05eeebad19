// The demo (scripts/demo): documents stored once in a KvStore and reused at several positions,
// deferred RoPE checked against eager re-encoding and full attention on the CPU reference.
//
// What it does, step by step:
//   1. RoPE from a Llama-3.1-8B config.json (llama3 schedule, theta 500000).
//   2. Four synthetic documents (random K/V from a fixed seed). K goes into the store in local
//      form: rotated at document-local positions 0..len-1, what a standalone prefill produces.
//   3. Six requests place the same documents at different positions, each with its own tail.
//      Every placement looks its document up by content key; only the first one stores it.
//   4. One decode step for the whole batch with ref::eigen: deferred (the position is applied to
//      the query inside attention) and eager (every key re-rotated at its logical position first).
//      Full attention from the original float K/V at the same positions is the ground truth.
//   5. Prints memory, errors and times, all measured in this run.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <lazyattn/lazyattn.hpp>
#include <lazyattn/ref/eigen.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace lazyattn;

// The RoPE part of meta-llama/Llama-3.1-8B's config.json (head_dim = 4096 / 32 = 128).
constexpr std::string_view kLlama31Config = R"({
  "model_type": "llama",
  "hidden_size": 4096,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "max_position_embeddings": 131072,
  "rope_theta": 500000.0,
  "rope_scaling": {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192
  }
})";

// Attention sizes: CPU-friendly, with Llama's head dim and a GQA group of 4.
constexpr int kQoHeads = 8;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 128;
constexpr int kPageSize = 16;
constexpr std::int64_t kTailLength = 24;  // each request's own tokens; the last one queries
constexpr int kTimingRuns = 25;
constexpr std::uint64_t kSeed = 2024;

// One sequence of tokens with its original (un-rotated) K and V, [length, num_kv_heads, head_dim].
struct Tokens {
  std::string name;
  std::vector<std::int32_t> ids;
  std::vector<float> k;
  std::vector<float> v;
  std::int64_t length() const { return static_cast<std::int64_t>(ids.size()); }
};

Tokens random_tokens(std::string name, std::int64_t length, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int32_t> vocab(0, 128255);
  Tokens t{std::move(name), {}, {}, {}};
  t.ids.resize(static_cast<std::size_t>(length));
  for (auto& id : t.ids) id = vocab(rng);
  t.k.resize(static_cast<std::size_t>(length * kKvHeads * kHeadDim));
  t.v.resize(t.k.size());
  for (auto& x : t.k) x = normal(rng);
  for (auto& x : t.v) x = normal(rng);
  return t;
}

// K in local form: token i rotated at position i, the keys a standalone prefill would cache.
std::vector<float> local_form(const RopeFrequencies& f, const Tokens& t) {
  std::vector<float> k = t.k;
  for (std::int64_t i = 0; i < t.length(); ++i) {
    for (int h = 0; h < kKvHeads; ++h) {
      auto at = static_cast<std::size_t>((i * kKvHeads + h) * kHeadDim);
      rope::rotate(f, i, std::span<float>(&k[at], kHeadDim));
    }
  }
  return k;
}

struct Request {
  std::string what;         // the layout, in words
  RequestLayout layout;     // segments: documents at their starts, then the tail
  std::vector<int> source;  // per segment: index into `documents`, or -1 for the tail
  int tail = 0;             // index into `tails`
};

std::string describe(const Request& r, const std::vector<Tokens>& documents) {
  std::string s;
  for (std::size_t j = 0; j < r.layout.segments.size(); ++j) {
    const Segment& seg = r.layout.segments[j];
    std::string who = r.source[j] < 0 ? "tail" : documents[r.source[j]].name;
    s += fmt::format("{}{}@{}", j ? " " : "", who, seg.start);
  }
  return s;
}

struct Errors {
  double max_abs = 0;
  double max_ref = 0;
  void add(std::span<const float> got, std::span<const float> ref) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[i]) - ref[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    }
  }
  std::string str() const {
    return fmt::format("{:.1e} ({:.1e})", max_abs, max_ref > 0 ? max_abs / max_ref : 0.0);
  }
};

struct Timing {
  double median_ms;
  double min_ms;
};

// Milliseconds of f and g over kTimingRuns runs each, interleaved, so that a change in the
// machine's load (other processes, clocks) hits both alike. The minimum is the least disturbed.
template <class F, class G>
std::pair<Timing, Timing> time_both(F&& f, G&& g) {
  std::vector<double> ms_f, ms_g;
  auto time = [](auto& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  for (int i = 0; i < kTimingRuns; ++i) {
    ms_f.push_back(time(f));
    ms_g.push_back(time(g));
  }
  std::sort(ms_f.begin(), ms_f.end());
  std::sort(ms_g.begin(), ms_g.end());
  return {Timing{ms_f[ms_f.size() / 2], ms_f.front()}, Timing{ms_g[ms_g.size() / 2], ms_g.front()}};
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }

int run() {
  // ---- 1. RoPE --------------------------------------------------------------------------------
  const RopePolicy rope = rope_policy_from_json(kLlama31Config);
  const RopeFrequencies& freqs = rope.base_frequencies();
  const AttentionParams params{
      .num_qo_heads = kQoHeads, .num_kv_heads = kKvHeads, .head_dim = kHeadDim};

  // ---- 2. documents, stored once --------------------------------------------------------------
  std::mt19937_64 rng(kSeed);
  std::vector<Tokens> documents;
  for (auto [name, len] :
       {std::pair{"A", 300}, std::pair{"B", 420}, std::pair{"C", 257}, std::pair{"D", 384}}) {
    documents.push_back(random_tokens(name, len, rng));
  }
  std::vector<std::vector<float>> documents_local;
  for (const Tokens& d : documents) documents_local.push_back(local_form(freqs, d));

  KvStore store(KvStoreConfig{.num_layers = 1,
                              .num_kv_heads = kKvHeads,
                              .head_dim = kHeadDim,
                              .page_size = kPageSize,
                              .dtype = DType::kFloat32,
                              .num_pages = 512});

  // What a server does per placement: look the document up by content; compute and store its K/V
  // only on a miss. Either way the handle comes back pinned, so it cannot be evicted in use.
  std::vector<DocHandle> pinned;
  auto place = [&](int d) {
    const DocKey key = DocKey::from_tokens(documents[d].ids);
    std::optional<DocHandle> h = store.find(key, StorageForm::kLocal, /*pin=*/true);
    if (!h) {
      h = store
              .insert(key, StorageForm::kLocal, documents[d].length(), documents_local[d],
                      documents[d].v, /*pin=*/true)
              .handle;
    }
    pinned.push_back(*h);
    return *h;
  };

  // ---- 3. requests: the same documents at several positions -----------------------------------
  std::vector<Tokens> tails;
  std::vector<TailHandle> tail_handles;
  auto new_tail = [&](int index) {
    tails.push_back(random_tokens(fmt::format("tail {}", index), kTailLength, rng));
    TailHandle t = store.create_tail(StorageForm::kLocal);
    store.append(t, kTailLength, local_form(freqs, tails.back()), tails.back().v);
    tail_handles.push_back(t);
    return t;
  };
  std::vector<Request> requests;
  auto add = [&](std::string what, std::vector<int> docs, auto make_layout) {
    std::vector<DocHandle> handles;
    for (int d : docs) handles.push_back(place(d));
    const int index = static_cast<int>(requests.size());
    TailHandle tail = new_tail(index);
    Request r{std::move(what), make_layout(handles, tail), std::move(docs), index};
    r.source.push_back(-1);  // the layout helpers put the tail last
    requests.push_back(std::move(r));
  };
  using Handles = const std::vector<DocHandle>&;
  add("back to back", {0, 1, 2},
      [&](Handles h, TailHandle t) { return layouts::back_to_back(store, h, t); });
  add("other order", {2, 0, 1},
      [&](Handles h, TailHandle t) { return layouts::back_to_back(store, h, t); });
  add("gapped", {1, 3, 0}, [&](Handles h, TailHandle t) {
    const std::vector<std::int64_t> starts{2000, 9000, 30000};
    return layouts::gapped(store, h, starts, t, /*tail_start=*/40000);
  });
  add("B twice", {1, 0, 1},
      [&](Handles h, TailHandle t) { return layouts::back_to_back(store, h, t); });
  add("parallel", {0, 1, 2, 3},
      [&](Handles h, TailHandle t) { return layouts::parallel(store, h, t); });
  add("far (100000)", {3, 2}, [&](Handles h, TailHandle t) {
    return layouts::back_to_back(store, h, t, /*num_queries=*/1, /*first_start=*/100000);
  });

  std::vector<RequestLayout> batch;
  for (const Request& r : requests) batch.push_back(r.layout);
  const Plan plan = make_plan(store, batch);

  // One decode query per request: the last tail token's, un-rotated.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(plan.num_queries()) * kQoHeads * kHeadDim);
  for (auto& x : q) x = normal(rng);

  // ---- 4. attention: deferred, eager, full -----------------------------------------------------
  std::vector<float> out_deferred(q.size()), out_eager(q.size());
  std::vector<float> lse(static_cast<std::size_t>(plan.num_queries()) * kQoHeads);
  auto deferred = [&] {
    ref::eigen::decode(store, plan, 0, rope, params, q, out_deferred, lse, ref::Method::kDeferred);
  };
  auto eager = [&] {
    ref::eigen::decode(store, plan, 0, rope, params, q, out_eager, lse, ref::Method::kEager);
  };
  deferred();
  eager();

  // Full attention per request, from the original float K/V placed at the same positions.
  const std::size_t row = static_cast<std::size_t>(kQoHeads) * kHeadDim;
  std::vector<Errors> vs_eager(requests.size()), vs_full(requests.size()),
      eager_vs_full(requests.size());
  Errors all_vs_eager, all_vs_full, all_eager_vs_full;
  for (std::size_t b = 0; b < requests.size(); ++b) {
    const Request& r = requests[b];
    std::vector<float> k, v;
    std::vector<std::int64_t> k_positions;
    for (std::size_t j = 0; j < r.layout.segments.size(); ++j) {
      const Segment& seg = r.layout.segments[j];
      const Tokens& t = r.source[j] < 0 ? tails[r.tail] : documents[r.source[j]];
      k.insert(k.end(), t.k.begin(), t.k.begin() + seg.length * kKvHeads * kHeadDim);
      v.insert(v.end(), t.v.begin(), t.v.begin() + seg.length * kKvHeads * kHeadDim);
      for (std::int64_t i = 0; i < seg.length; ++i) k_positions.push_back(seg.start + i);
    }
    const std::int64_t q_position = plan.request_query_position[b];
    const std::size_t at = static_cast<std::size_t>(plan.request_query_indptr[b]) * row;
    std::span<const float> q_b(&q[at], row);
    std::vector<float> out_full(row), lse_full(kQoHeads);
    // The query is the tail's last token, so it sees every key: no mask needed.
    ref::eigen::dense_attention(rope, params, q_b, std::span(&q_position, 1), k, k_positions, v, {},
                                out_full, lse_full);
    std::span<const float> d(&out_deferred[at], row), e(&out_eager[at], row);
    vs_eager[b].add(d, e);
    vs_full[b].add(d, out_full);
    eager_vs_full[b].add(e, out_full);
    all_vs_eager.add(d, e);
    all_vs_full.add(d, out_full);
    all_eager_vs_full.add(e, out_full);
  }

  // For scale: the same batch with every document one position late.
  std::vector<RequestLayout> shifted = batch;
  for (RequestLayout& l : shifted) {
    for (Segment& s : l.segments) s.start += s.kind == SegmentKind::kDocument ? 1 : 0;
  }
  std::vector<float> out_shifted(q.size());
  ref::eigen::decode(store, make_plan(store, shifted), 0, rope, params, q, out_shifted, lse);
  Errors shifted_vs_deferred;
  shifted_vs_deferred.add(out_shifted, out_deferred);

  const auto [t_deferred, t_eager] = time_both(deferred, eager);

  // ---- 5. report ------------------------------------------------------------------------------
  fmt::print("lazyattn demo: documents stored once, reused at several positions\n");
  fmt::print("CPU reference ref::eigen, float32 store, one thread\n\n");
  fmt::print(
      "RoPE       {} from a Llama-3.1-8B config.json: theta {:.0f}, factor {:.0f}, "
      "head_dim {}\n",
      to_string(rope.rope_type()), rope.config().rope_theta, *rope.config().rope_scaling.factor,
      rope.head_dim());
  fmt::print("attention  {} query heads, {} KV heads (GQA {}), page size {}\n\n", kQoHeads,
             kKvHeads, params.group_size(), kPageSize);

  fmt::print("documents (K stored in local form: rotated at 0..len-1)\n");
  std::int64_t doc_pages = 0;
  for (const Tokens& d : documents) {
    fmt::print("  {}  {:>4} tokens  {:>3} pages\n", d.name, d.length(),
               store.pages_for(d.length()));
    doc_pages += store.pages_for(d.length());
  }

  fmt::print("\nrequests (one decode query each, after its own {}-token tail)\n", kTailLength);
  fmt::print("  #  {:<13} {:<40} {:>6} {:>9}\n", "layout", "segments (name@start)", "keys",
             "query at");
  std::int64_t placements = 0, placement_pages = 0;
  for (std::size_t b = 0; b < requests.size(); ++b) {
    const Request& r = requests[b];
    for (const Segment& s : r.layout.segments) {
      if (s.kind != SegmentKind::kDocument) continue;
      ++placements;
      placement_pages += store.pages_for(s.length);
    }
    fmt::print("  {}  {:<13} {:<40} {:>6} {:>9}\n", b, r.what, describe(r, documents),
               plan.request_kv_length[b], plan.request_query_position[b]);
  }

  const KvStoreStats st = store.stats();
  const std::int64_t page_bytes = store.page_bytes();
  const std::int64_t tail_pages = st.pages_in_use - doc_pages;
  fmt::print("\nstore      {} lookups by content key: {} hits, {} misses; {} documents stored\n",
             st.hits + st.misses, st.hits, st.misses, st.documents);
  fmt::print("           pages in use {} of {} ({} documents + {} tails), {} each\n",
             st.pages_in_use, st.pages_total, doc_pages, tail_pages,
             fmt::format("{} KiB", page_bytes / 1024));

  fmt::print("\nmemory for the documents' K and V (tails are the same either way)\n");
  fmt::print("  lazyattn, one copy per document        {:>2} copies {:>4} pages  {:>10}\n",
             st.documents, doc_pages, mib(doc_pages * page_bytes));
  fmt::print(
      "  eager, one copy per placement          {:>2} copies {:>4} pages  {:>10}  "
      "({:.1f}x)\n",
      placements, placement_pages, mib(placement_pages * page_bytes),
      static_cast<double>(placement_pages) / static_cast<double>(doc_pages));

  fmt::print("\naccuracy: max |diff| of the outputs (relative to max |reference|)\n");
  fmt::print("  #  {:<13} {:>18} {:>18} {:>18}\n", "layout", "deferred vs eager",
             "deferred vs full", "eager vs full");
  for (std::size_t b = 0; b < requests.size(); ++b) {
    fmt::print("  {}  {:<13} {:>18} {:>18} {:>18}\n", b, requests[b].what, vs_eager[b].str(),
               vs_full[b].str(), eager_vs_full[b].str());
  }
  fmt::print("     {:<13} {:>18} {:>18} {:>18}\n", "all", all_vs_eager.str(), all_vs_full.str(),
             all_eager_vs_full.str());
  fmt::print("  for scale: every document one position late differs by {}\n",
             shifted_vs_deferred.str());

  fmt::print("\ntime of one decode step for all {} requests ({} runs each, interleaved)\n",
             requests.size(), kTimingRuns);
  fmt::print("                                             median      min\n");
  fmt::print("  deferred (position applied to the query)  {:>6.2f} ms {:>6.2f} ms\n",
             t_deferred.median_ms, t_deferred.min_ms);
  fmt::print("  eager (every key re-rotated, then attend) {:>6.2f} ms {:>6.2f} ms\n",
             t_eager.median_ms, t_eager.min_ms);
  fmt::print(
      "  (plain Eigen, one thread, not tuned; the GPU kernels and their numbers are in\n"
      "   docs/06-cuda.md and docs/performance.md)\n\n");

  for (DocHandle h : pinned) store.unpin(h);
  for (TailHandle t : tail_handles) store.release(t);

  // Float32 throughout: anything above 1e-4 would mean a wrong position, not rounding.
  const bool ok = all_vs_eager.max_abs < 1e-4 && all_vs_full.max_abs < 1e-4;
  fmt::print("{}\n", ok ? "ok: deferred == eager == full attention, from one copy per document"
                        : "MISMATCH: deferred attention differs from the references");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const lazyattn::Error& e) {
    fmt::print(stderr, "lazyattn error: {}\n", e.what());
    return 2;
  }
}
