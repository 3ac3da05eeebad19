// Prefill benchmarks on the GPU (protocol: docs/performance.md): Llama-3-8B attention (32 query heads, 8 KV
// heads, head dim 128, bf16, page size 16), CUDA-event timing per call, medians of repetitions.
//
//   rag_tail     512 queries over 16 documents x 512 tokens + their own 512 (kv 8704), documents at
//                shuffled back-to-back starts; FLOPs 4 * q * kv * d * heads
//   encode_N     causal document encoding, N = 4096 and 16384 (one tail of N tokens from 0, all
//                its tokens queries); FLOPs halved for the causal square
//   modes        local (documents and tail in local form), raw (keys rotated in the kernel), and
//                rope_off (pre-rotated keys and queries), each with the kernel PrefillKernel::kAuto
//                picks (the label names it); local_mma, raw_mma and rope_off_mma force the
//                mma.sync kernel; *_interleaved (GPT-J pairs) and *_partial (half the dims rotary,
//                rotate-half) the other rotary layouts, in both forms (their RoPE-off baseline is
//                rope_off: without RoPE the layout does not matter)
//   *_fp8        local, raw and rope_off over an fp8 (e4m3) pool of the same pages (random codes,
//                scales 1): the Hopper kernel after its dequantizing pass (prefill/fp8_tiles.cuh)
//   splits       automatic key-range splits (a workspace is passed); LAZYATTN_BENCH_PREFILL_SPLITS=N
//                forces N
//   *_d64        the same shapes at head dim 64 (Llama-3.2-1B's attention: 32 query heads, 8 KV
//                heads); half the dims rotary is 32 of them there
//   *_d256       the same shapes at head dim 256 (Gemma's head dim, with the same head counts)
//   chunk_N      chunked prefill: the last N of a tail of 1024 + N tokens (N = 1, 17, 129, 2049)
//                over 16 documents x 512, causal within the tail; FLOPs of the keys each query
//                sees (documents and the tail up to itself); local, raw, rope_off and raw_mma
//   LAZYATTN_BENCH_PAGE_SIZE=N   pages of N keys instead of 16
//   host_us      counter: the host's time inside one cuda::prefill call (checks, tensor maps,
//                launches; the calls are timed back to back, so where it nears the GPU time per
//                call the shape measures the host, not the kernels)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
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

constexpr int kQoHeads = 32, kKvHeads = 8;

// Keys per page: 16 (the protocol's), or LAZYATTN_BENCH_PAGE_SIZE (a power of two, 1 to 1024;
// the store checks it). The pages of a document, and of the tail, are consecutive in the pool.
int page_size() {
  static const int n = [] {
    const char* e = std::getenv("LAZYATTN_BENCH_PAGE_SIZE");
    return e ? std::atoi(e) : 16;
  }();
  return n;
}

struct Shape {
  std::string name;
  int num_docs;      // documents of doc_len before the tail
  int doc_len;
  int tail_len;      // the request's own tokens
  int head_dim = 128;
  int queries = 0;   // the tail's last `queries` tokens are the queries (0: all of them)
  int num_queries() const { return queries > 0 ? queries : tail_len; }
};

// *Mma: the mma.sync kernel forced (kAuto takes the wgmma kernel at head dims 64, 128 and 256).
enum class Mode {
  kLocal, kRaw, kRopeOff, kLocalMma, kRawMma, kRopeOffMma,
  kLocalInterleaved, kRawInterleaved, kLocalPartial, kRawPartial,
  kLocalFp8, kRawFp8, kRopeOffFp8
};

const char* name(Mode m) {
  switch (m) {
    case Mode::kLocal: return "local";
    case Mode::kRaw: return "raw";
    case Mode::kRopeOff: return "rope_off";
    case Mode::kLocalMma: return "local_mma";
    case Mode::kRawMma: return "raw_mma";
    case Mode::kRopeOffMma: return "rope_off_mma";
    case Mode::kLocalInterleaved: return "local_interleaved";
    case Mode::kRawInterleaved: return "raw_interleaved";
    case Mode::kLocalPartial: return "local_partial";
    case Mode::kRawPartial: return "raw_partial";
    case Mode::kLocalFp8: return "local_fp8";
    case Mode::kRawFp8: return "raw_fp8";
    case Mode::kRopeOffFp8: return "rope_off_fp8";
  }
  return "?";
}
bool raw_mode(Mode m) {
  return m == Mode::kRaw || m == Mode::kRawMma || m == Mode::kRawInterleaved ||
         m == Mode::kRawPartial || m == Mode::kRawFp8;
}
bool fp8_mode(Mode m) {
  return m == Mode::kLocalFp8 || m == Mode::kRawFp8 || m == Mode::kRopeOffFp8;
}

struct Setup {
  std::string shape;
  std::unique_ptr<KvStore> store;
  std::unique_ptr<cuda::DevicePool> pool, pool_fp8;
  std::unique_ptr<cuda::DeviceRope> rope, rope_interleaved, rope_partial;
  cuda::DevicePlan plan_local, plan_raw;
  cuda::DeviceBuffer<__nv_bfloat16> q, o;
  cuda::DeviceBuffer<float> lse;
  cuda::PrefillWorkspace ws;
  double flops = 0;
};

RopePolicy llama3_rope(int head_dim, PairLayout pairs = PairLayout::kHalf,
                       double partial = 1.0) {
  RopeConfig c;
  c.pair_layout = pairs;
  c.partial_rotary_factor = partial;
  c.head_dim = head_dim;
  c.rope_theta = 500000.0;
  c.max_position_embeddings = 131072;
  c.rope_scaling.rope_type = RopeType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return RopePolicy(c);
}

std::unique_ptr<Setup> build(const Shape& sh) {
  auto s = std::make_unique<Setup>();
  s->shape = sh.name;
  const int ps = page_size();
  std::int64_t pages = std::int64_t{sh.num_docs} * ((sh.doc_len + ps - 1) / ps) +
                       (sh.tail_len + ps - 1) / ps;
  const int D = sh.head_dim;
  KvStoreConfig cfg{1, kKvHeads, D, ps, DType::kBFloat16, pages};
  s->store = std::make_unique<KvStore>(cfg);
  s->pool = std::make_unique<cuda::DevicePool>(cfg);
  s->pool->fill_uniform(4321);
  KvStoreConfig cfg8 = cfg;
  cfg8.dtype = DType::kFloat8E4M3;
  s->pool_fp8 = std::make_unique<cuda::DevicePool>(cfg8);
  s->pool_fp8->fill_uniform(4321);
  s->rope = std::make_unique<cuda::DeviceRope>(llama3_rope(D));
  s->rope_interleaved =
      std::make_unique<cuda::DeviceRope>(llama3_rope(D, PairLayout::kInterleaved));
  s->rope_partial = std::make_unique<cuda::DeviceRope>(llama3_rope(D, PairLayout::kHalf, 0.5));
  std::vector<DocHandle> docs;
  for (int j = 0; j < sh.num_docs; ++j) {
    auto r = s->store->allocate(DocKey{7, static_cast<std::uint64_t>(j)}, StorageForm::kLocal,
                                sh.doc_len);
    s->store->commit(r.handle);
    docs.push_back(r.handle);
  }
  std::mt19937_64 rng(11);
  std::shuffle(docs.begin(), docs.end(), rng);
  TailHandle tail = s->store->create_tail(StorageForm::kLocal);
  s->store->reserve(tail, sh.tail_len);
  const int nq = sh.num_queries();
  RequestLayout layout = layouts::back_to_back(*s->store, docs, tail, nq);
  Plan plan = make_plan(*s->store, layout);
  s->plan_local.upload(plan, cuda::prefill_schedule(plan, {kQoHeads, kKvHeads, D}));
  Plan raw = plan;
  std::fill(raw.segment_form.begin(), raw.segment_form.end(),
            static_cast<std::uint8_t>(StorageForm::kRaw));
  s->plan_raw.upload(raw, cuda::prefill_schedule(raw, {kQoHeads, kKvHeads, D}));
  std::size_t q_elems = static_cast<std::size_t>(nq) * kQoHeads * D;
  s->q = cuda::DeviceBuffer<__nv_bfloat16>(q_elems);
  s->o = cuda::DeviceBuffer<__nv_bfloat16>(q_elems);
  s->lse = cuda::DeviceBuffer<float>(static_cast<std::size_t>(nq) * kQoHeads);
  cuda::fill_uniform(s->q.data(), DType::kBFloat16, static_cast<std::int64_t>(q_elems), 5);
  const double kv = double(sh.num_docs) * sh.doc_len + sh.tail_len;
  s->flops = 4.0 * sh.tail_len * kv * D * kQoHeads;
  if (sh.num_docs == 0) s->flops /= 2;  // causal square
  if (sh.queries > 0) {  // a chunk: query i sees the documents and the tail up to its own key
    const double q = nq, before = kv - q;
    s->flops = 4.0 * (q * before + q * (q + 1) / 2) * D * kQoHeads;
  }
  LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
  return s;
}

Setup& setup_for(const Shape& sh) {
  static std::unique_ptr<Setup> current;
  if (!current || current->shape != sh.name) {
    current.reset();
    current = build(sh);
  }
  return *current;
}

void bench_prefill(benchmark::State& state, Shape sh, Mode mode) {
  Setup& s = setup_for(sh);
  cuda::PrefillArgs a;
  a.q = s.q.data();
  a.o = s.o.data();
  a.maybe_lse = s.lse.data();
  a.params.num_qo_heads = kQoHeads;
  a.params.num_kv_heads = kKvHeads;
  a.params.head_dim = sh.head_dim;
  a.rope = mode != Mode::kRopeOff && mode != Mode::kRopeOffMma && mode != Mode::kRopeOffFp8;
  a.kernel = mode == Mode::kLocalMma || mode == Mode::kRawMma || mode == Mode::kRopeOffMma
                 ? cuda::PrefillKernel::kMmaSync
                 : cuda::PrefillKernel::kAuto;
  const cuda::DevicePlan& plan = raw_mode(mode) ? s.plan_raw : s.plan_local;
  const cuda::DeviceRope& rope = mode == Mode::kLocalInterleaved || mode == Mode::kRawInterleaved
                                     ? *s.rope_interleaved
                                 : mode == Mode::kLocalPartial || mode == Mode::kRawPartial
                                     ? *s.rope_partial
                                     : *s.rope;
  const cuda::DevicePool& pool = fp8_mode(mode) ? *s.pool_fp8 : *s.pool;
  state.SetLabel(cuda::to_string(cuda::resolve_prefill_kernel(a, plan, rope, pool.dtype())));
  if (const char* e = std::getenv("LAZYATTN_BENCH_PREFILL_SPLITS")) a.kv_splits = std::atoi(e);
  for (int i = 0; i < 3; ++i) cuda::prefill(a, pool, plan, rope, &s.ws);
  bench::EventTimer timer;
  double host_seconds = 0;
  std::int64_t calls = 0;
  for (auto _ : state)
    state.SetIterationTime(timer.seconds_per_call([&](int) {
      const auto t0 = std::chrono::steady_clock::now();
      cuda::prefill(a, pool, plan, rope, &s.ws);
      host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++calls;
    }));
  state.counters["host_us"] = calls > 0 ? host_seconds * 1e6 / static_cast<double>(calls) : 0.0;
  state.counters["flops"] = s.flops;
  state.counters["TFLOPs"] =
      benchmark::Counter(s.flops * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes{{"rag_tail", 16, 512, 512},
                            {"encode_4096", 0, 0, 4096},
                            {"encode_16384", 0, 0, 16384},
                            {"rag_tail_d64", 16, 512, 512, 64},
                            {"encode_4096_d64", 0, 0, 4096, 64},
                            {"encode_16384_d64", 0, 0, 16384, 64},
                            {"rag_tail_d256", 16, 512, 512, 256},
                            {"encode_4096_d256", 0, 0, 4096, 256},
                            {"encode_16384_d256", 0, 0, 16384, 256},
                            {"chunk_1", 16, 512, 1024 + 1, 128, 1},
                            {"chunk_17", 16, 512, 1024 + 17, 128, 17},
                            {"chunk_129", 16, 512, 1024 + 129, 128, 129},
                            {"chunk_2049", 16, 512, 1024 + 2049, 128, 2049}};
  for (const Shape& sh : shapes) {
    const std::vector<Mode> modes{Mode::kLocal,           Mode::kRaw,
                                  Mode::kRopeOff,         Mode::kLocalMma,
                                  Mode::kRawMma,          Mode::kRopeOffMma,
                                  Mode::kLocalInterleaved, Mode::kRawInterleaved,
                                  Mode::kLocalPartial,    Mode::kRawPartial,
                                  Mode::kLocalFp8,        Mode::kRawFp8,
                                  Mode::kRopeOffFp8};
    for (Mode m : modes) {
      // Chunks: the three forms, and the raw form on the mma.sync kernel, which rotates raw
      // keys inside its loop where the Hopper kernel's key pass positions every key for a few
      // queries.
      if (sh.queries > 0 && m != Mode::kLocal && m != Mode::kRaw && m != Mode::kRopeOff &&
          m != Mode::kRawMma)
        continue;
      std::string n = "prefill/" + sh.name + "/" + name(m);
      benchmark::RegisterBenchmark(n.c_str(), bench_prefill, sh, m)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(10)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
