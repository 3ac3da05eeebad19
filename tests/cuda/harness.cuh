// Test harness for the CUDA kernels: runs a reference-test Scenario on the device with the decode or
// the prefill kernel (deferred, and the eager baseline: re-encode + rotated queries + RoPE-off
// kernel) and applies the error rule of docs/06-cuda.md.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "lazyattn/cuda.cuh"
#include "ref/scenario.hpp"

namespace lazyattn::test::gpu {

using test::ref::Scenario;
using test::ref::ScenarioSpec;

// One of `options` (an array), drawn uniformly from `rng`: the random scenarios' choices.
template <class Options>
auto pick_one(std::mt19937_64& rng, const Options& options) {
  return options[std::uniform_int_distribution<std::size_t>(0, std::size(options) - 1)(rng)];
}

// A random decode scenario of the [cuda][decode] sweep: head dims, GQA ratios, page sizes, element
// types, rotary layouts, schedules, storage forms, layouts, positions and lengths drawn from `seed`.
inline ScenarioSpec random_decode_spec(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](auto const& options) { return pick_one(rng, options); };
  ScenarioSpec s;
  s.seed = seed;
  s.head_dim = pick(std::array{64, 128, 128, 256});
  const std::array<std::pair<int, int>, 5> heads{{{8, 8}, {16, 4}, {32, 8}, {16, 2}, {32, 4}}};
  auto [hq, hk] = pick(heads);  // group sizes 1, 4, 4, 8, 8
  s.num_qo_heads = hq;
  s.num_kv_heads = hk;
  s.page_size = pick(std::array{16, 32, 64});
  s.dtype = pick(std::array{DType::kBFloat16, DType::kBFloat16, DType::kFloat16});
  s.pair_layout = pick(std::array{PairLayout::kHalf, PairLayout::kHalf, PairLayout::kInterleaved});
  s.partial_rotary = pick(std::array{1.0, 1.0, 0.5});
  s.schedule = pick(std::array{RopeType::kDefault, RopeType::kLlama3, RopeType::kYarn,
                               RopeType::kLinear, RopeType::kDynamic, RopeType::kLongrope});
  s.doc_form = pick(std::array{StorageForm::kLocal, StorageForm::kRaw});
  s.tail_form = pick(std::array{StorageForm::kLocal, StorageForm::kRaw, StorageForm::kAbsolute});
  if (s.schedule == RopeType::kDynamic || s.schedule == RopeType::kLongrope) {
    s.doc_form = s.tail_form = StorageForm::kRaw;  // length-dependent: raw form only
  }
  s.layout = pick(ref::kAllLayouts);
  s.base_position =
      pick(std::array<std::int64_t, 4>{0, 0, (std::int64_t{1} << 24) - 3000, std::int64_t{1} << 40});
  s.doc_lengths.clear();
  const std::array<std::int64_t, 12> lengths{1, 15, 16, 17, 31, 63, 64, 65, 129, 200, 257, 333};
  int num_docs = std::uniform_int_distribution<int>(1, 6)(rng);
  for (int i = 0; i < num_docs; ++i) s.doc_lengths.push_back(pick(lengths));
  s.docs_per_request = std::uniform_int_distribution<int>(1, 5)(rng);
  s.num_requests = std::uniform_int_distribution<int>(1, 4)(rng);
  s.num_queries = {1};
  s.max_tail_extra = pick(std::array<std::int64_t, 3>{0, 20, 70});
  s.num_layers = pick(std::array{1, 2});
  s.layer = s.num_layers - 1;
  s.empty_segment = pick(std::array{false, false, true});
  return s;
}

// A random prefill scenario (the prefill sweep's): head dims 64 to 256, GQA groups 1 to 8, page
// sizes 16 to 64, every storage form, rotary layout and schedule, 1 to 4 documents of 1 to 257
// tokens, 1 to 3 requests of 1 to 129 queries, positions near 2^24 and 2^40.
inline ScenarioSpec random_prefill_spec(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](auto const& options) { return pick_one(rng, options); };
  ScenarioSpec s;
  s.seed = seed;
  s.head_dim = pick(std::array{64, 128, 128, 256});
  const std::array<std::pair<int, int>, 4> heads{{{4, 4}, {8, 2}, {16, 4}, {16, 2}}};
  auto [hq, hk] = pick(heads);  // group sizes 1, 4, 4, 8
  s.num_qo_heads = hq;
  s.num_kv_heads = hk;
  s.page_size = pick(std::array{16, 32, 64});
  s.dtype = pick(std::array{DType::kBFloat16, DType::kBFloat16, DType::kFloat16});
  s.pair_layout = pick(std::array{PairLayout::kHalf, PairLayout::kHalf, PairLayout::kInterleaved});
  s.partial_rotary = pick(std::array{1.0, 1.0, 0.5});
  s.schedule = pick(std::array{RopeType::kDefault, RopeType::kLlama3, RopeType::kYarn,
                               RopeType::kDynamic});
  s.doc_form = pick(std::array{StorageForm::kLocal, StorageForm::kRaw});
  s.tail_form = pick(std::array{StorageForm::kLocal, StorageForm::kRaw, StorageForm::kAbsolute});
  if (s.schedule == RopeType::kDynamic) s.doc_form = s.tail_form = StorageForm::kRaw;
  s.layout = pick(test::ref::kAllLayouts);
  s.base_position = pick(std::array<std::int64_t, 3>{0, (std::int64_t{1} << 24) - 3000,
                                                     std::int64_t{1} << 40});
  s.doc_lengths.clear();
  const std::array<std::int64_t, 8> lengths{1, 16, 17, 63, 65, 129, 200, 257};
  int num_docs = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int i = 0; i < num_docs; ++i) s.doc_lengths.push_back(pick(lengths));
  s.docs_per_request = std::uniform_int_distribution<int>(1, 4)(rng);
  s.num_requests = std::uniform_int_distribution<int>(1, 3)(rng);
  s.num_queries = {pick(std::array<std::int64_t, 4>{1, 17, 128, 129}),
                   pick(std::array<std::int64_t, 3>{1, 17, 33})};
  s.max_tail_extra = pick(std::array<std::int64_t, 3>{0, 20, 70});
  s.empty_segment = pick(std::array{false, false, true});
  return s;
}

// The page-write tests' scene: a store of `cfg` (2 layers, 4 KV heads, head dim 128, pages of 16)
// with one document of kTokens tokens allocated in local form, a device pool of the same config,
// the document's destinations on the device (rotated at 0..kTokens-1), Llama-3-like RoPE with
// `pairs`, and random normal K and V [kTokens, 4, 128].
struct WriteScene {
  static constexpr std::int64_t kTokens = 77;
  RopePolicy rope;
  KvStore store;
  DocInfo info;
  cuda::DevicePool pool;
  cuda::DeviceRope drope;
  cuda::DeviceBuffer<std::int32_t> page, slot;
  cuda::DeviceBuffer<std::int64_t> pos;
  std::vector<float> k, v;

  WriteScene(const KvStoreConfig& cfg, PairLayout pairs)
      : rope(rope_config(pairs)), store(cfg), pool(cfg), drope(rope) {
    Rng rng(5);
    k = random_normal(static_cast<std::size_t>(kTokens * 4 * 128), rng);
    v = random_normal(k.size(), rng);
    info = store.info(store.allocate(DocKey{9, 9}, StorageForm::kLocal, kTokens).handle);
    const cuda::TokenDestinations dst =
        cuda::token_destinations(info.pages, 16, 0, kTokens, StorageForm::kLocal);
    page = cuda::DeviceBuffer<std::int32_t>(dst.page.size());
    slot = cuda::DeviceBuffer<std::int32_t>(dst.slot.size());
    pos = cuda::DeviceBuffer<std::int64_t>(dst.rotate_position.size());
    page.upload(dst.page);
    slot.upload(dst.slot);
    pos.upload(dst.rotate_position);
  }
  static RopeConfig rope_config(PairLayout pairs) {
    RopeConfig rc;
    rc.head_dim = 128;
    rc.rope_theta = 500000.0;
    rc.pair_layout = pairs;
    return rc;
  }
  // K of token i, head h rotated at i in float64, from its 16-bit (or float) values `ks`.
  template <class E>
  std::vector<double> rotated_k(const std::vector<E>& ks, std::int64_t i, int h) const {
    std::vector<double> x(128);
    for (int d = 0; d < 128; ++d) x[d] = to_float(ks[(i * 4 + h) * 128 + d]);
    rope::rotate(rope.base_frequencies(), i, std::span<double>(x.data(), x.size()));
    return x;
  }
  // Element offset of token i, head h in `layer` of the store's pool.
  std::int64_t at(int layer, std::int64_t i, int h) const {
    return store.geometry().offset(layer, info.pages[i / 16], h, static_cast<int>(i % 16));
  }
};

// Host copies of a device result.
struct GpuResult {
  std::vector<float> out;
  std::vector<float> lse;
  std::size_t unwritten = 0;  // output elements still holding the poison (NaN) pattern
};

template <class E>
std::vector<E> to_storage(const std::vector<float>& x) {
  std::vector<E> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = from_float<E>(x[i]);
  return out;
}

// The queries as the kernel sees them: rounded to the storage element type.
// The scenario's queries rounded to `dtype` (the spec's where not given: an fp8 store's queries
// come in 16 bits, so its callers name theirs).
inline std::vector<float> rounded_queries(const Scenario& sc, std::optional<DType> dtype = {}) {
  std::vector<float> q = sc.q;
  dispatch_dtype(dtype.value_or(sc.spec.dtype), [&](auto tag) {
    for (float& x : q) x = round_to<decltype(tag)>(x);
  });
  return q;
}

// The store's geometry plus one spare page per page the plan reads: room for the eager
// baseline's copies (a document used by several segments is copied once per segment).
inline KvStoreConfig with_spare_pages(KvStoreConfig c, const Plan& plan) {
  c.num_pages += static_cast<std::int64_t>(plan.page_ids.size());
  return c;
}

// Device buffers for one scenario: the pool with every page uploaded, the plan, the rope.
struct DeviceScenario {
  const Scenario& sc;
  cuda::DevicePool pool;
  cuda::DeviceRope rope;
  cuda::DevicePlan plan;
  cuda::DecodeSchedule schedule;
  cuda::DeviceBuffer<std::byte> q;
  cuda::DeviceBuffer<std::byte> o;
  cuda::DeviceBuffer<float> lse;
  cuda::DecodeWorkspace ws;
  cuda::PrefillWorkspace pws;
  int prefill_kv_splits = 0;  // cuda::PrefillArgs::kv_splits
  // false: cuda::prefill without a workspace (no splits, no tile scratch: raw-form plans take
  // the mma.sync kernel, local ones over segments that would read K positioned by the key pass
  // rebuild each segment's query in the kernel).
  bool prefill_workspace = true;

  bool use_prefill = false;
  bool pdl = true;   // cuda::DecodeArgs::pdl (the default)
  bool query_rotated = false;  // cuda::DecodeArgs / PrefillArgs::query_rotated
  bool inputs_scaled = false;  // ... ::inputs_scaled
  bool packed_raw_rotation = false;  // cuda::DecodeArgs::packed_raw_rotation (opt-in)
  cuda::PrefillKernel prefill_kernel = cuda::PrefillKernel::kAuto;  // cuda::PrefillArgs::kernel
  DType io;  // the queries' and outputs' type: the spec's, or an fp8 store's 16-bit one

  // forced_splits < 0: the prefill kernel (its own schedule); otherwise decode with that many
  // splits (0: the heuristic). io_dtype: the queries' and outputs' type where the store's is fp8.
  DeviceScenario(const Scenario& s, int forced_splits, std::optional<DType> io_dtype = {})
      : sc(s), pool(with_spare_pages(s.store->config(), s.plan)), rope(s.rope),
        io(io_dtype.value_or(s.spec.dtype)) {
    use_prefill = forced_splits < 0;
    std::vector<std::int32_t> all(static_cast<std::size_t>(s.store->config().num_pages));
    std::iota(all.begin(), all.end(), 0);
    pool.upload_pages(*s.store, all);
    rope.prepare(s.plan);
    if (use_prefill) {
      schedule = cuda::prefill_schedule(s.plan, s.spec.params());
    } else {
      cuda::ScheduleOptions opt;
      opt.forced_splits = forced_splits;
      schedule = cuda::decode_schedule(s.plan, s.spec.params(), io, opt);
    }
    plan.upload(s.plan, schedule);
    std::vector<float> qr = rounded_queries(s, io);
    dispatch_dtype(io, [&](auto tag) {
      using E = decltype(tag);
      auto qs = to_storage<E>(qr);
      q = cuda::DeviceBuffer<std::byte>(qs.size() * sizeof(E));
      LAZYATTN_CUDA_CHECK(cudaMemcpy(q.data(), qs.data(), q.bytes(), cudaMemcpyHostToDevice));
      o = cuda::DeviceBuffer<std::byte>(qs.size() * sizeof(E));
    });
    lse = cuda::DeviceBuffer<float>(s.lse_size());
  }

  // Moves host page i to device page n - 1 - i (n: the host store's pages) and uploads the plan
  // with its page ids so mapped: a tile's pages then run backwards in the pool, never forwards
  // (the prefill's TMA loader takes one box per page instead of one per run of pages).
  void reverse_pages() {
    const KvStoreConfig& c = sc.store->config();
    const std::int64_t n = c.num_pages;
    const PoolGeometry& geo = pool.geometry();
    const std::size_t page_bytes =
        static_cast<std::size_t>(geo.page_stride()) * static_cast<std::size_t>(size_of(c.dtype));
    for (int layer = 0; layer < c.num_layers; ++layer) {
      const std::size_t host_layer = static_cast<std::size_t>(layer) *
                                     static_cast<std::size_t>(n) * page_bytes;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::size_t to = static_cast<std::size_t>(n - 1 - i) * page_bytes;
        const std::size_t from = host_layer + static_cast<std::size_t>(i) * page_bytes;
        LAZYATTN_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(pool.k_layer(layer)) + to,
                                       sc.store->k_bytes() + from, page_bytes,
                                       cudaMemcpyHostToDevice));
        LAZYATTN_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(pool.v_layer(layer)) + to,
                                       sc.store->v_bytes() + from, page_bytes,
                                       cudaMemcpyHostToDevice));
      }
    }
    Plan reversed = sc.plan;
    for (std::int32_t& id : reversed.page_ids) id = static_cast<std::int32_t>(n - 1 - id);
    plan.upload(reversed, schedule);
  }

  cuda::DecodeArgs args(bool rope_on, const void* q_ptr) {
    cuda::DecodeArgs a;
    a.dtype = io;
    a.q = q_ptr;
    a.o = o.data();
    a.maybe_lse = lse.data();
    a.layer = sc.spec.layer;
    a.params = sc.spec.params();
    a.rope = rope_on;
    a.pdl = pdl;
    a.query_rotated = query_rotated;
    a.inputs_scaled = inputs_scaled;
    a.packed_raw_rotation = packed_raw_rotation;
    return a;
  }

  // NaN in every output element and lse, so an unwritten element cannot pass.
  void poison() {
    LAZYATTN_CUDA_CHECK(cudaMemset(o.data(), 0xff, o.bytes()));
    LAZYATTN_CUDA_CHECK(cudaMemset(lse.data(), 0xff, lse.bytes()));
  }

  GpuResult fetch() {
    LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
    GpuResult r;
    r.lse = lse.download();
    dispatch_dtype(io, [&](auto tag) {
      using E = decltype(tag);
      std::vector<E> host(o.bytes() / sizeof(E));
      LAZYATTN_CUDA_CHECK(cudaMemcpy(host.data(), o.data(), o.bytes(), cudaMemcpyDeviceToHost));
      r.out.resize(host.size());
      for (std::size_t i = 0; i < host.size(); ++i) r.out[i] = to_float(host[i]);
    });
    for (float x : r.out) r.unwritten += std::isnan(x) ? 1 : 0;
    for (float x : r.lse) r.unwritten += std::isnan(x) ? 1 : 0;
    return r;
  }

  // One launch of the kernel under test on a plan.
  void launch(bool rope_on, const void* q_ptr, const cuda::DevicePlan& on) {
    if (use_prefill) {
      cuda::PrefillArgs a;
      cuda::DecodeArgs d = args(rope_on, q_ptr);
      a.dtype = d.dtype;
      a.q = d.q;
      a.o = d.o;
      a.maybe_lse = d.maybe_lse;
      a.layer = d.layer;
      a.params = d.params;
      a.rope = d.rope;
      a.kv_splits = prefill_kv_splits;
      a.kernel = prefill_kernel;
      a.query_rotated = d.query_rotated;
      a.inputs_scaled = d.inputs_scaled;
      cuda::prefill(a, pool, on, rope, prefill_workspace ? &pws : nullptr);
    } else {
      cuda::decode(args(rope_on, q_ptr), pool, on, rope, ws);
    }
  }

  GpuResult deferred() {
    poison();
    launch(true, q.data(), plan);
    return fetch();
  }

  // The same with the queries rotated at their own positions first, as models hand them over
  // (rotate_queries, which folds the attention factor in: inputs_scaled): the kernels' query_rotated
  // path, R(-s) per local segment and R(-n) per raw key.
  GpuResult deferred_rotated() {
    cuda::DeviceBuffer<std::byte> q_rot(q.bytes());
    cuda::rotate_queries(io, q.data(), q_rot.data(), plan.view(), sc.spec.num_qo_heads,
                         sc.spec.head_dim, rope);
    query_rotated = inputs_scaled = true;
    poison();
    launch(true, q_rot.data(), plan);
    query_rotated = inputs_scaled = false;
    return fetch();
  }

  // Block-Attention eager: every segment (tail too) copied into fresh pages rotated at its
  // logical positions, queries rotated at theirs, then the same kernel with RoPE off. The fresh
  // pages are the device pool's spare ids past the store's.
  GpuResult eager() {
    const Plan& p = sc.plan;
    cuda::ReencodeJob job;
    Plan eager_plan = p;
    std::int32_t next = static_cast<std::int32_t>(sc.store->config().num_pages);
    for (std::int32_t s = 0; s < p.num_segments(); ++s) {
      std::int32_t n_pages = p.segment_page_indptr[s + 1] - p.segment_page_indptr[s];
      std::vector<std::int32_t> dst(static_cast<std::size_t>(n_pages));
      std::iota(dst.begin(), dst.end(), next);
      next += n_pages;
      std::span<const std::int32_t> src(p.page_ids.data() + p.segment_page_indptr[s],
                                        static_cast<std::size_t>(n_pages));
      job.add(src, dst, p.segment_length[s], p.segment_start[s],
              static_cast<StorageForm>(p.segment_form[s]));
      std::copy(dst.begin(), dst.end(), eager_plan.page_ids.begin() + p.segment_page_indptr[s]);
    }
    LAZYATTN_CHECK(next <= pool.config().num_pages, "eager: ", next, " pages needed");
    cuda::DeviceReencode re;
    re.upload(job);
    re.run(pool, sc.spec.layer, rope);
    cuda::DevicePlan dplan;
    dplan.upload(eager_plan, schedule);
    cuda::DeviceBuffer<std::byte> q_rot(q.bytes());
    cuda::rotate_queries(io, q.data(), q_rot.data(), plan.view(), sc.spec.num_qo_heads,
                         sc.spec.head_dim, rope);
    poison();
    launch(false, q_rot.data(), dplan);
    return fetch();
  }
};

// The error rule (docs/06-cuda.md): per element, |got - ref| <= 2 * (max eager error) + atol, and nothing
// unwritten or NaN. Returns a report (empty when it holds) naming the first offenders.
inline std::string check_error_rule(const std::vector<float>& got, const std::vector<float>& ref,
                                    double eager_max_error, double atol) {
  double bound = 2.0 * eager_max_error + atol;
  std::string report;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= bound)) {  // NaN fails
      if (bad < 8)
        report += test::format("  [%zu] ref %.6g got %.6g |diff| %.3g\n", i, ref[i], got[i], e);
      ++bad;
    }
  }
  if (bad)
    report = test::format("%zu of %zu elements over the bound %.3g (2 x eager %.3g + %.3g):\n",
                          bad, got.size(), bound, eager_max_error, atol) +
             report;
  return report;
}

inline double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

inline double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a)
    if (std::isfinite(x)) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// The bars of the error rule for a deferred kernel's output and log-sum-exp against the float64
// reference `ref`: the eager baseline's errors in the same precision (forced_splits as for
// DeviceScenario: -1 the prefill kernel, >= 0 decode); schedules that depend on the request
// length have no eager kernel, so they get a fixed 16-bit bound instead (eager_unwritten 0).
struct ErrorBars {
  double out = 0;
  double lse = 0;
  std::size_t eager_unwritten = 0;  // the eager run's unwritten outputs (callers require 0)
};
inline ErrorBars eager_error_bars(const Scenario& sc, int forced_splits,
                                  const std::vector<float>& ref_out,
                                  const std::vector<float>& ref_lse) {
  ErrorBars bars;
  const RopeType schedule = sc.spec.schedule;
  if (schedule != RopeType::kDynamic && schedule != RopeType::kLongrope) {
    DeviceScenario ds(sc, forced_splits);
    GpuResult eager = ds.eager();
    bars.eager_unwritten = eager.unwritten;
    bars.out = max_abs_error(eager.out, ref_out);
    bars.lse = max_abs_error(eager.lse, ref_lse);
  } else {
    const double ulp = sc.spec.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
    bars.out = 2 * ulp * max_abs(ref_out);
    bars.lse = 8 * ulp;
  }
  return bars;
}

}  // namespace lazyattn::test::gpu
