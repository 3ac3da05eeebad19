// Decode benchmarks on the GPU (protocol: docs/performance.md): Llama-3-8B attention (32 query heads, 8 KV
// heads, head dim 128, bf16, page size 16), timed per call with CUDA events, medians over
// repetitions, inputs rotated over layers so that they exceed L2.
//
//   modes:  local     deferred RoPE, keys stored in local form (query rotated once per segment)
//           raw       deferred RoPE, keys stored raw (the query rotated per tile by m - n0, each
//                     key in registers by its offset in the tile)
//           raw_packed  raw with the keys rotated in packed 16-bit math (opt-in:
//                     DecodeArgs::packed_raw_rotation)
//           rope_off  the same kernel without RoPE (pre-rotated keys): our own no-RoPE peer
//           reencode  Block-Attention's copy: every document re-rotated into private pages
//           local_no_pdl  local with DecodeArgs::pdl = false (every other mode runs with the
//                     default, programmatic dependent launch: each call's index loads overlap
//                     the previous call's tail)
//           local_fp8, raw_fp8, rope_off_fp8  local, raw and rope_off over an fp8 (e4m3) pool of
//                     the same pages (scales 1): half the bytes for the same keys; `keys_per_s`
//                     compares throughput across element types
//   shapes: batch x context in {1x32768, 16x16384, 64x4096, 128x8192}, each request one document
//           of context - 32 tokens and a 32-token tail; and "rag": 5 documents x 2048 tokens at
//           shuffled starts + 32-token tail, against "single": one segment of the same length.
//
// Environment (studies, not the protocol): LAZYATTN_BENCH_SHAPES="1x2112,1x10272r" replaces the
// shapes (r: the rag layout); LAZYATTN_BENCH_SPLITS=N forces N splits per request;
// LAZYATTN_BENCH_SHUFFLE_PAGES=1 permutes the plan's pages over the pool;
// LAZYATTN_BENCH_ROTARY=interleaved (GPT-J pairs) or partial (rotary over half the head dims,
// partial_rotary_factor 0.5) changes the RoPE layout of every mode.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lazyattn/cuda.cuh"
#include "lazyattn/lazyattn.hpp"
#include "event_timer.hpp"

namespace {

using namespace lazyattn;

constexpr int kQoHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageSize = 16, kTail = 32;
constexpr std::int64_t kRotateBytes = std::int64_t{1} << 30;  // >= 1 GiB of K/V per rotation

struct Shape {
  int batch;
  int context;  // keys per request
  bool rag;     // 5 x 2048 documents at shuffled starts instead of one document
};

enum class Mode {
  kLocal, kRaw, kRawPacked, kRopeOff, kReencode, kLocalNoPdl, kLocalFp8, kRawFp8, kRopeOffFp8
};

const char* name(Mode m) {
  switch (m) {
    case Mode::kLocal: return "local";
    case Mode::kRaw: return "raw";
    case Mode::kRawPacked: return "raw_packed";
    case Mode::kRopeOff: return "rope_off";
    case Mode::kReencode: return "reencode";
    case Mode::kLocalNoPdl: return "local_no_pdl";  // DecodeArgs::pdl = false
    case Mode::kLocalFp8: return "local_fp8";
    case Mode::kRawFp8: return "raw_fp8";
    case Mode::kRopeOffFp8: return "rope_off_fp8";
  }
  return "?";
}

bool fp8_mode(Mode m) {
  return m == Mode::kLocalFp8 || m == Mode::kRawFp8 || m == Mode::kRopeOffFp8;
}

// Everything one shape needs on the device; rebuilt when the shape changes.
struct Setup {
  Shape shape{};
  int layers = 1;
  std::unique_ptr<KvStore> store;
  std::unique_ptr<cuda::DevicePool> pool;
  std::unique_ptr<cuda::DevicePool> pool_fp8;  // the same pages, e4m3 codes
  std::unique_ptr<cuda::DeviceRope> rope;
  cuda::DevicePlan plan_local, plan_raw;
  cuda::DeviceReencode reencode;
  cuda::DeviceBuffer<__nv_bfloat16> q, o;
  cuda::DeviceBuffer<float> lse;
  cuda::DecodeWorkspace ws;
  std::int64_t kv_bytes = 0;   // K and V of one layer, as read by one decode call
  std::int64_t doc_bytes = 0;  // K and V of the document segments alone (what re-encode copies)
  int splits = 1;
};

RopePolicy llama3_rope() {
  RopeConfig c;
  c.head_dim = kHeadDim;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 131072;
  c.rope_scaling.rope_type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  if (const char* e = std::getenv("LAZYATTN_BENCH_ROTARY")) {
    const std::string v = e;
    if (v == "interleaved") c.pair_layout = PairLayout::kInterleaved;
    else if (v == "partial") c.partial_rotary_factor = 0.5;
    else if (v != "half")
      throw Error("LAZYATTN_BENCH_ROTARY: '" + v + "', expected half, interleaved or partial");
  }
  return RopePolicy(c);
}

std::unique_ptr<Setup> build(const Shape& shape) {
  auto s = std::make_unique<Setup>();
  s->shape = shape;
  const std::int64_t per_layer = std::int64_t{shape.batch} * shape.context * kKvHeads * kHeadDim * 2 * 2;
  s->kv_bytes = per_layer;
  s->layers = static_cast<int>(std::clamp<std::int64_t>(kRotateBytes / per_layer + 1, 1, 8));
  std::vector<std::vector<std::int64_t>> doc_lengths(shape.batch);
  std::int64_t pages = 0;
  for (int b = 0; b < shape.batch; ++b) {
    if (shape.rag) doc_lengths[b] = {2048, 2048, 2048, 2048, 2048};
    else doc_lengths[b] = {shape.context - kTail};
    for (auto l : doc_lengths[b]) {
      pages += (l + kPageSize - 1) / kPageSize;
      s->doc_bytes += l * kKvHeads * kHeadDim * 2 * 2;
    }
    pages += (kTail + kPageSize - 1) / kPageSize;
  }
  KvStoreConfig cfg{s->layers, kKvHeads, kHeadDim, kPageSize, DType::kBFloat16, pages};
  s->store = std::make_unique<KvStore>(cfg);
  KvStoreConfig dev_cfg = cfg;
  dev_cfg.num_pages = 2 * pages;  // spare pages: the re-encode copies land there
  s->pool = std::make_unique<cuda::DevicePool>(dev_cfg);
  s->pool->fill_uniform(12345);
  KvStoreConfig fp8_cfg = cfg;
  fp8_cfg.dtype = DType::kFloat8E4M3;
  s->pool_fp8 = std::make_unique<cuda::DevicePool>(fp8_cfg);
  s->pool_fp8->fill_uniform(12345);
  s->rope = std::make_unique<cuda::DeviceRope>(llama3_rope());

  std::mt19937_64 rng(7);
  std::vector<RequestLayout> layouts;
  for (int b = 0; b < shape.batch; ++b) {
    std::vector<DocHandle> docs;
    for (std::size_t j = 0; j < doc_lengths[b].size(); ++j) {
      auto r = s->store->allocate(DocKey{static_cast<std::uint64_t>(b), j}, StorageForm::kLocal,
                                  doc_lengths[b][j]);
      s->store->commit(r.handle);
      docs.push_back(r.handle);
    }
    TailHandle tail = s->store->create_tail(StorageForm::kLocal);
    s->store->reserve(tail, kTail);
    RequestLayout layout;
    if (shape.rag) {  // slots of a back-to-back layout handed out in a shuffled order
      std::vector<int> order(docs.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::int64_t pos = 0;
      std::vector<std::int64_t> starts(docs.size());
      for (int j : order) {
        starts[j] = pos;
        pos += doc_lengths[b][j];
      }
      layout = layouts::gapped(*s->store, docs, starts, tail, pos);
    } else {
      layout = layouts::back_to_back(*s->store, docs, tail);
    }
    layouts.push_back(layout);
  }
  Plan plan = make_plan(*s->store, layouts);
  // LAZYATTN_BENCH_SHUFFLE_PAGES=1 maps the plan's pages through a random permutation of the
  // pool, as a store fragmented by churn would hold them (the data is random either way).
  if (const char* f = std::getenv("LAZYATTN_BENCH_SHUFFLE_PAGES"); f && std::atoi(f) != 0) {
    std::vector<std::int32_t> perm(static_cast<std::size_t>(pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (auto& pid : plan.page_ids) pid = perm[static_cast<std::size_t>(pid)];
  }
  cuda::ScheduleOptions opt;
  // LAZYATTN_BENCH_SPLITS=N forces N splits per request (for studying the split heuristic).
  if (const char* f = std::getenv("LAZYATTN_BENCH_SPLITS")) opt.forced_splits = std::atoi(f);
  const AttentionParams params{kQoHeads, kKvHeads, kHeadDim};
  cuda::DecodeSchedule sched = cuda::decode_schedule(plan, params, DType::kBFloat16, opt);
  s->splits = sched.max_splits;
  s->plan_local.upload(plan, sched);
  Plan raw = plan;
  std::fill(raw.segment_form.begin(), raw.segment_form.end(),
            static_cast<std::uint8_t>(StorageForm::kRaw));
  // The raw plan needs its own schedule: the tile records carry each segment's storage form
  // (DevicePlan::upload refuses a plan with another plan's schedule).
  s->plan_raw.upload(raw, cuda::decode_schedule(raw, params, DType::kBFloat16, opt));

  // Block-Attention's per-request copy: every document segment into its own fresh pages.
  cuda::ReencodeJob job;
  std::int32_t next = static_cast<std::int32_t>(pages);
  for (std::int32_t seg = 0; seg < plan.num_segments(); ++seg) {
    if (plan.segment_kind[seg] != static_cast<std::uint8_t>(SegmentKind::kDocument)) continue;
    std::int32_t n = plan.segment_page_indptr[seg + 1] - plan.segment_page_indptr[seg];
    std::vector<std::int32_t> dst(static_cast<std::size_t>(n));
    std::iota(dst.begin(), dst.end(), next);
    next += n;
    job.add(std::span<const std::int32_t>(plan.page_ids.data() + plan.segment_page_indptr[seg],
                                          static_cast<std::size_t>(n)),
            dst, plan.segment_length[seg], plan.segment_start[seg], StorageForm::kLocal);
  }
  s->reencode.upload(job);

  std::size_t q_elems = static_cast<std::size_t>(shape.batch) * kQoHeads * kHeadDim;
  s->q = cuda::DeviceBuffer<__nv_bfloat16>(q_elems);
  s->o = cuda::DeviceBuffer<__nv_bfloat16>(q_elems);
  s->lse = cuda::DeviceBuffer<float>(static_cast<std::size_t>(shape.batch) * kQoHeads);
  cuda::fill_uniform(s->q.data(), DType::kBFloat16, static_cast<std::int64_t>(q_elems), 99);
  LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return s;
}

Setup& setup_for(const Shape& shape) {
  static std::unique_ptr<Setup> current;
  if (!current || current->shape.batch != shape.batch || current->shape.context != shape.context ||
      current->shape.rag != shape.rag) {
    current.reset();  // free the previous shape's memory first
    current = build(shape);
  }
  return *current;
}

void run_once(Setup& s, Mode mode, int layer, cudaStream_t stream) {
  if (mode == Mode::kReencode) {
    s.reencode.run(*s.pool, layer, *s.rope, stream);
    return;
  }
  cuda::DecodeArgs a;
  a.dtype = DType::kBFloat16;
  a.q = s.q.data();
  a.o = s.o.data();
  a.maybe_lse = s.lse.data();
  a.layer = layer;
  a.params.num_qo_heads = kQoHeads;
  a.params.num_kv_heads = kKvHeads;
  a.params.head_dim = kHeadDim;
  a.rope = mode != Mode::kRopeOff && mode != Mode::kRopeOffFp8;
  a.pdl = mode != Mode::kLocalNoPdl;
  a.packed_raw_rotation = mode == Mode::kRawPacked;
  const bool raw = mode == Mode::kRaw || mode == Mode::kRawPacked || mode == Mode::kRawFp8;
  const cuda::DevicePlan& plan = raw ? s.plan_raw : s.plan_local;
  cuda::decode(a, fp8_mode(mode) ? *s.pool_fp8 : *s.pool, plan, *s.rope, s.ws, stream);
}

void bench_decode(benchmark::State& state, Shape shape, Mode mode) {
  Setup& s = setup_for(shape);
  cudaStream_t stream = nullptr;
  for (int i = 0; i < 3; ++i) run_once(s, mode, i % s.layers, stream);  // warm-up
  bench::EventTimer timer;
  int it = 0;
  for (auto _ : state) {
    // Back to back over rotating layers (together several times L2, so each call reads HBM).
    state.SetIterationTime(timer.seconds_per_call(
        [&](int) { run_once(s, mode, it++ % s.layers, stream); }, stream));
  }
  // Bytes that define the figure: K and V read once (the copy moves them twice: read + write).
  const bool fp8 = fp8_mode(mode);
  double bytes = mode == Mode::kReencode ? 2.0 * static_cast<double>(s.doc_bytes)
                                         : static_cast<double>(s.kv_bytes) / (fp8 ? 2 : 1);
  state.counters["bytes"] = bytes;
  // Keys (of every KV head) per second: the figure that compares element types.
  state.counters["keys_per_s"] =
      benchmark::Counter(static_cast<double>(shape.batch) * shape.context * state.iterations(),
                         benchmark::Counter::kIsRate);
  state.counters["TBps"] = benchmark::Counter(bytes * 1e-12 * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.counters["batch"] = shape.batch;
  state.counters["context"] = shape.context;
  state.counters["splits"] = s.splits;
  state.counters["ctas_per_sm"] = cuda::decode_ctas_per_sm(DType::kBFloat16, kHeadDim);
}

// LAZYATTN_BENCH_SHAPES="BxL[r],..." (r: the rag layout), or the protocol's shapes.
std::vector<Shape> bench_shapes() {
  const char* env = std::getenv("LAZYATTN_BENCH_SHAPES");
  if (env == nullptr || *env == '\0')
    return {{1, 32768, false}, {16, 16384, false}, {64, 4096, false}, {128, 8192, false},
            {64, 10272, true}, {64, 10272, false}, {1, 10272, true},  {1, 10272, false}};
  std::vector<Shape> shapes;
  std::string list(env);
  std::size_t at = 0;
  while (at < list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(at, end - at);
    Shape sh{};
    char* rest = nullptr;
    sh.batch = static_cast<int>(std::strtol(item.c_str(), &rest, 10));
    if (rest == nullptr || *rest != 'x') throw Error("LAZYATTN_BENCH_SHAPES: '" + item + "', expected BxL or BxLr");
    sh.context = static_cast<int>(std::strtol(rest + 1, &rest, 10));
    sh.rag = *rest == 'r';
    if (sh.batch < 1 || sh.context <= kTail || (sh.rag && sh.context != 5 * 2048 + kTail))
      throw Error("LAZYATTN_BENCH_SHAPES: '" + item + "', expected batch >= 1 and context > 32 (rag: 10272)");
    shapes.push_back(sh);
    at = end + 1;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  for (const Shape& sh : bench_shapes()) {
    std::vector<Mode> modes{Mode::kLocal,      Mode::kRaw,       Mode::kRawPacked,
                            Mode::kRopeOff,    Mode::kReencode,  Mode::kLocalNoPdl,
                            Mode::kLocalFp8,   Mode::kRawFp8,    Mode::kRopeOffFp8};
    for (Mode m : modes) {
      std::string n = std::string("decode/B") + std::to_string(sh.batch) + "_L" +
                      std::to_string(sh.context) + (sh.rag ? "_rag" : "_single") + "/" + name(m);
      benchmark::RegisterBenchmark(n.c_str(), bench_decode, sh, m)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(30)
          ->Repetitions(7)
          ->ReportAggregatesOnly(true);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
