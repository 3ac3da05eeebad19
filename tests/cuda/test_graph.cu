// [cuda][graph] tests: one captured decode step that appends every request's new token to its
// tail pages (write_tokens) and then decodes, replayed for several steps with new inputs copied
// into the captured buffers, checked against the float64 CPU reference at every step.
//
// What a captured step may and may not change (docs/06-cuda.md, CUDA graphs): the launches hold
// device pointers (the plan's arrays, the write destinations, q, o, lse, the pool) and grid sizes
// (the schedule's work items, the number of new tokens). The *contents* behind those pointers are
// read at replay. So a decode loop captures once and, per step, copies into the captured buffers:
//   - the new tokens' K/V and their destinations (page, slot, and for local form the position K
//     is rotated at, the token's index in its tail);
//   - the queries;
//   - the plan: DevicePlan::upload of a plan of the same shape writes into the same device buffer
//     at the same offsets (one async copy from pinned memory), so the captured decode reads it.
// The plan's shape stays fixed because the tails' pages for all steps are reserved before the
// capture (the plan lists them all; a segment may list more pages than its keys need), and the
// tails stay inside one 64-key tile while they grow, so the schedule's tiles and work items keep
// their count; only a tile's key count, the tail's length and the query's position change. A tail
// that crosses into a new tile changes the grid: that step needs a new capture (or a schedule
// padded with empty tiles, which the library does not build today). The test checks that every
// upload left the plan at the captured addresses before it replays.
#include "support/catch.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda/harness.cuh"
#include "lazyattn/ref.hpp"

using namespace lazyattn;
using namespace lazyattn::test;
using lazyattn::test::ref::ScenarioSpec;

namespace {

constexpr int kSteps = 20;        // decode steps replayed from one capture
constexpr int kMaxQuestion = 30;  // tokens in a tail before the first step: 0..kMaxQuestion
static_assert(kSteps + kMaxQuestion <= 64, "the tails must stay inside one 64-key tile");

// Step t's plan: request b's tail cut to tail_length[b] tokens, the last of them the query. Made
// from the plan over the tails' full reserved length, so every array keeps its size; the tail
// segment keeps all its pages.
Plan step_plan(const Plan& full, const std::vector<std::int64_t>& tail_length) {
  Plan p = full;
  for (std::int32_t b = 0; b < full.num_requests(); ++b) {
    const std::int32_t tail = full.request_tail_segment[b];
    const std::int64_t cut = full.segment_length[tail] - tail_length[b];
    p.segment_length[tail] = static_cast<std::int32_t>(tail_length[b]);
    p.request_kv_length[b] -= cut;
    p.request_query_position[b] = full.segment_start[tail] + tail_length[b] - 1;
    p.request_query_indptr[b + 1] = b + 1;
    std::int64_t rope_length = 0;  // 1 + the largest key position, as make_plan counts it
    for (std::int32_t s = full.request_segment_indptr[b]; s < full.request_segment_indptr[b + 1];
         ++s) {
      if (p.segment_length[s] > 0)
        rope_length = std::max(rope_length, p.segment_start[s] + p.segment_length[s]);
    }
    p.request_rope_length[b] = rope_length;
  }
  return p;
}

// Whether an upload left every array of the plan and schedule at the addresses (and the grid at
// the size) a captured launch holds.
bool same_device_layout(const PlanView& a, const cuda::DecodeScheduleView& as, const PlanView& b,
                        const cuda::DecodeScheduleView& bs) {
  return a.num_requests == b.num_requests && a.num_segments == b.num_segments &&
         a.num_queries == b.num_queries && a.page_size == b.page_size &&
         a.request_segment_indptr == b.request_segment_indptr &&
         a.request_query_indptr == b.request_query_indptr &&
         a.request_tail_segment == b.request_tail_segment &&
         a.request_kv_length == b.request_kv_length &&
         a.request_query_position == b.request_query_position &&
         a.request_rope_length == b.request_rope_length &&
         a.segment_page_indptr == b.segment_page_indptr && a.segment_length == b.segment_length &&
         a.segment_start == b.segment_start && a.segment_form == b.segment_form &&
         a.segment_kind == b.segment_kind && a.page_ids == b.page_ids &&
         as.tile_keys == bs.tile_keys && as.num_tiles == bs.num_tiles &&
         as.num_work == bs.num_work && as.num_partials == bs.num_partials &&
         as.max_splits == bs.max_splits && as.tiles == bs.tiles &&
         as.work_request == bs.work_request && as.work_tile_begin == bs.work_tile_begin &&
         as.work_tile_end == bs.work_tile_end && as.work_split == bs.work_split &&
         as.request_num_splits == bs.request_num_splits &&
         as.request_partial_offset == bs.request_partial_offset &&
         as.qtile_request == bs.qtile_request && as.qtile_row_begin == bs.qtile_row_begin;
}

struct GraphCase {
  StorageForm tail_form;
  DType dtype;
  int head_dim;
  int forced_splits;  // 0: the heuristic
  std::uint64_t seed;
};

ScenarioSpec graph_spec(const GraphCase& c) {
  std::mt19937_64 rng(c.seed);
  auto pick = [&](auto const& options) { return gpu::pick_one(rng, options); };
  ScenarioSpec s;
  s.seed = c.seed;
  s.head_dim = c.head_dim;
  const std::array<std::pair<int, int>, 3> heads{{{8, 8}, {32, 8}, {16, 2}}};  // GQA 1, 4, 8
  auto [hq, hk] = pick(heads);
  s.num_qo_heads = hq;
  s.num_kv_heads = hk;
  s.page_size = pick(std::array{16, 32});  // the tails cross page boundaries while they grow
  s.dtype = c.dtype;
  // Local-form tails are rotated by write_tokens, which refuses length-dependent schedules.
  s.schedule = pick(std::array{RopeType::kDefault, RopeType::kLlama3, RopeType::kYarn});
  s.doc_form = pick(std::array{StorageForm::kLocal, StorageForm::kRaw});
  s.tail_form = c.tail_form;
  s.layout = pick(test::ref::kAllLayouts);
  s.base_position = pick(std::array<std::int64_t, 2>{0, (std::int64_t{1} << 24) - 3000});
  s.doc_lengths = {17, 64, 129, 200};
  s.docs_per_request = 3;
  s.num_requests = 3;
  // make_scenario stores tails of num_queries + [0, max_tail_extra] tokens: the extra part is the
  // question already there before the first step, the last kSteps slots are what the steps write
  // (their stored values are overwritten on the device before any query can see them).
  s.num_queries = {kSteps};
  s.max_tail_extra = kMaxQuestion;
  s.num_layers = 2;
  s.layer = 1;
  return s;
}

void run_graph_case(const GraphCase& c) {
  ScenarioSpec spec = graph_spec(c);
  test::ref::Scenario sc = test::ref::make_scenario(spec);
  INFO(spec << " forced_splits " << c.forced_splits << "\n" << sc.layout_text);
  const Plan full = sc.plan;
  const std::int32_t B = full.num_requests();
  const int Hq = spec.num_qo_heads, Hkv = spec.num_kv_heads, D = spec.head_dim;
  const int P = spec.page_size;
  const std::size_t esize = static_cast<std::size_t>(size_of(spec.dtype));

  // Per request: the tail's pages and the index of the first token the steps write.
  std::vector<std::vector<std::int32_t>> tail_pages(static_cast<std::size_t>(B));
  std::vector<std::int64_t> question(static_cast<std::size_t>(B));
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t s = full.request_tail_segment[b];
    tail_pages[b].assign(full.page_ids.begin() + full.segment_page_indptr[s],
                         full.page_ids.begin() + full.segment_page_indptr[s + 1]);
    question[b] = full.segment_length[s] - kSteps;
  }
  auto lengths_at = [&](int t) {
    std::vector<std::int64_t> len(static_cast<std::size_t>(B));
    for (std::int32_t b = 0; b < B; ++b) len[b] = question[b] + t + 1;
    return len;
  };

  cuda::ScheduleOptions opt;
  opt.num_sms = cuda::device_sm_count();
  opt.ctas_per_sm = cuda::decode_ctas_per_sm(spec.dtype, D);
  opt.forced_splits = c.forced_splits;

  // Step 0's plan and queries set up the device scenario (pool, rope, plan, q, o, lse).
  Rng rng(c.seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<float> q_step = random_normal(static_cast<std::size_t>(B) * Hq * D, rng);
  sc.plan = step_plan(full, lengths_at(0));
  sc.q = q_step;
  gpu::DeviceScenario ds(sc, c.forced_splits);

  // The captured buffers the steps refill: new K/V [B, Hkv, D] and their destinations.
  cuda::DeviceBuffer<std::byte> d_k(static_cast<std::size_t>(B) * Hkv * D * esize);
  cuda::DeviceBuffer<std::byte> d_v(d_k.bytes());
  cuda::DeviceBuffer<std::int32_t> d_page(static_cast<std::size_t>(B));
  cuda::DeviceBuffer<std::int32_t> d_slot(static_cast<std::size_t>(B));
  cuda::DeviceBuffer<std::int64_t> d_pos(static_cast<std::size_t>(B));
  const bool local = c.tail_form == StorageForm::kLocal;

  cudaStream_t stream;
  LAZYATTN_CUDA_CHECK(cudaStreamCreate(&stream));

  // Host side of one step: the new tokens (float originals and their storage bits), the
  // destinations, the rounded queries, and the plan uploaded into the captured buffer. Returns
  // the step's host plan.
  std::vector<float> k_new, v_new;
  std::vector<std::byte> k_bits, v_bits, q_bits;
  std::vector<std::int32_t> h_page(static_cast<std::size_t>(B)),
      h_slot(static_cast<std::size_t>(B));
  std::vector<std::int64_t> h_pos(static_cast<std::size_t>(B));
  auto prepare_step = [&](int t) {
    k_new = random_normal(static_cast<std::size_t>(B) * Hkv * D, rng);
    v_new = random_normal(k_new.size(), rng);
    q_step = random_normal(q_step.size(), rng);
    dispatch_dtype(spec.dtype, [&](auto tag) {
      using E = decltype(tag);
      auto pack = [](const std::vector<float>& x, std::vector<std::byte>& out) {
        auto s = gpu::to_storage<E>(x);
        out.resize(s.size() * sizeof(E));
        std::memcpy(out.data(), s.data(), out.size());
      };
      pack(k_new, k_bits);
      pack(v_new, v_bits);
      pack(q_step, q_bits);
    });
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int64_t tok = question[b] + t;
      h_page[b] = tail_pages[b][static_cast<std::size_t>(tok / P)];
      h_slot[b] = static_cast<std::int32_t>(tok % P);
      h_pos[b] = tok;  // local form: K rotated at its index in the tail
    }
    Plan plan = step_plan(full, lengths_at(t));
    cuda::DecodeSchedule sched = cuda::make_decode_schedule(plan, Hkv, opt);
    ds.plan.upload(plan, sched, stream);
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(d_k.data(), k_bits.data(), k_bits.size(), cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(d_v.data(), v_bits.data(), v_bits.size(), cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(ds.q.data(), q_bits.data(), q_bits.size(), cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(d_page.data(), h_page.data(), B * sizeof(std::int32_t),
                                        cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(d_slot.data(), h_slot.data(), B * sizeof(std::int32_t),
                                        cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(d_pos.data(), h_pos.data(), B * sizeof(std::int64_t),
                                        cudaMemcpyHostToDevice, stream));
    // Pageable sources: wait, so the host vectors may change for the next step.
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return plan;
  };
  auto poison = [&] {
    LAZYATTN_CUDA_CHECK(cudaMemsetAsync(ds.o.data(), 0xff, ds.o.bytes(), stream));
    LAZYATTN_CUDA_CHECK(cudaMemsetAsync(ds.lse.data(), 0xff, ds.lse.bytes(), stream));
  };
  // The step: append the new token of every request, then decode with it as the query.
  auto step = [&] {
    cuda::write_tokens(ds.pool, spec.layer, d_k.data(), d_v.data(), B, d_page.data(), d_slot.data(),
                       local ? d_pos.data() : nullptr, ds.rope, stream);
    cuda::decode(ds.args(true, ds.q.data()), ds.pool, ds.plan, ds.rope, ds.ws, stream);
  };

  // Warm once on the stream (kernel attributes, workspace sizing), then capture.
  prepare_step(0);
  step();
  LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const PlanView captured_plan = ds.plan.view();
  const cuda::DecodeScheduleView captured_sched = ds.plan.schedule();
  cudaGraph_t graph;
  LAZYATTN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  step();
  LAZYATTN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  LAZYATTN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int t = 0; t < kSteps; ++t) {
    INFO("step " << t);
    Plan plan = prepare_step(t);
    REQUIRE(same_device_layout(ds.plan.view(), ds.plan.schedule(), captured_plan, captured_sched));
    poison();
    LAZYATTN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    gpu::GpuResult got = ds.fetch();
    CHECK(got.unwritten == 0);

    // The host store takes the tails' pages as the device holds them now; the reference reads
    // them there. The new tokens are checked first, against the inputs, independently of the
    // kernel that wrote them.
    for (std::int32_t b = 0; b < B; ++b) ds.pool.download_pages(*sc.store, tail_pages[b]);
    double worst_k = 0;
    std::size_t v_mismatches = 0;
    dispatch_dtype(spec.dtype, [&](auto tag) {
      using E = decltype(tag);
      const PoolGeometry& geo = sc.store->geometry();
      const E* kp = sc.store->k_pool<E>();
      const E* vp = sc.store->v_pool<E>();
      const auto* k_in = reinterpret_cast<const E*>(k_bits.data());
      const auto* v_in = reinterpret_cast<const E*>(v_bits.data());
      for (std::int32_t b = 0; b < B; ++b) {
        for (int h = 0; h < Hkv; ++h) {
          const std::size_t in = (static_cast<std::size_t>(b) * Hkv + h) * D;
          std::vector<double> x(static_cast<std::size_t>(D));
          for (int d = 0; d < D; ++d) x[d] = to_float(k_in[in + d]);
          if (local)
            rope::rotate(sc.rope.base_frequencies(), h_pos[b],
                         std::span<double>(x.data(), x.size()));
          const std::int64_t at = geo.offset(spec.layer, h_page[b], h, h_slot[b]);
          for (int d = 0; d < D; ++d) {
            worst_k = std::max(worst_k,
                               std::fabs(to_float(kp[at + d]) - x[d]) / (std::fabs(x[d]) + 0.05));
            v_mismatches += to_float(vp[at + d]) == to_float(v_in[in + d]) ? 0 : 1;
          }
        }
      }
    });
    const double ulp = spec.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
    CHECK(worst_k <= 2 * ulp + 5e-5);  // the write test's bound (test_decode.cu)
    CHECK(v_mismatches == 0);

    // The float64 reference on the step's plan, with the queries as the kernel saw them.
    sc.plan = plan;
    sc.q = q_step;
    std::vector<float> q_rounded = gpu::rounded_queries(sc);
    test::ref::Result ref{std::vector<float>(sc.out_size()), std::vector<float>(sc.lse_size())};
    lazyattn::ref::scalar::decode(*sc.store, plan, spec.layer, sc.rope, spec.params(), q_rounded,
                                  ref.out, ref.lse);
    const double scale = gpu::max_abs(ref.out);

    // The error rule's bar: the eager baseline in the same precision, on the same step.
    gpu::DeviceScenario eager_ds(sc, 0);
    gpu::GpuResult eager = eager_ds.eager();
    REQUIRE(eager.unwritten == 0);
    const double eager_out = gpu::max_abs_error(eager.out, ref.out);
    const double eager_lse = gpu::max_abs_error(eager.lse, ref.lse);
    std::string out_report =
        gpu::check_error_rule(got.out, ref.out, eager_out, 1e-3 * scale + 1e-5);
    INFO(out_report);
    CHECK(out_report.empty());
    std::string lse_report = gpu::check_error_rule(got.lse, ref.lse, eager_lse, 1e-3);
    INFO(lse_report);
    CHECK(lse_report.empty());

    // A direct launch on the same inputs gives the replay's bits.
    poison();
    cuda::decode(ds.args(true, ds.q.data()), ds.pool, ds.plan, ds.rope, ds.ws, stream);
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    gpu::GpuResult direct = ds.fetch();
    CHECK(direct.out == got.out);
    CHECK(direct.lse == got.lse);
  }
  LAZYATTN_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LAZYATTN_CUDA_CHECK(cudaGraphDestroy(graph));
  LAZYATTN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

TEST_CASE("a captured step (append the new token, then decode) replays over growing tails",
          "[cuda][graph]") {
  const GraphCase cases[] = {
      {StorageForm::kLocal, DType::kBFloat16, 128, 0, 31},
      {StorageForm::kRaw, DType::kBFloat16, 128, 0, 32},
      {StorageForm::kLocal, DType::kFloat16, 64, 3, 33},
      {StorageForm::kRaw, DType::kFloat16, 256, 2, 34},
  };
  for (const GraphCase& c : cases) {
    INFO("tail " << to_string(c.tail_form) << " " << to_string(c.dtype) << " head_dim "
                 << c.head_dim << " seed " << c.seed);
    run_graph_case(c);
  }
}
