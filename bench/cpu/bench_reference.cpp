// CPU benchmarks of the reference (Google Benchmark, single-threaded): ref::eigen against
// ref::scalar, Eigen deferred RoPE against a no-RoPE Eigen peer on pre-rotated keys, and decode
// K+V bytes/s next to the memory bandwidth measured in the same run. Medians over repetitions;
// decode inputs rotate over >= 1 GiB of K/V so that every call reads from DRAM, as a decode step
// of a many-layer model does.
//
//   Bandwidth/*    stream_read: sum of a 1 GiB float buffer (the read-bandwidth floor); memcpy:
//                  512 MiB copied (bytes counted once). Run first and last, to see drift.
//   Ref/*          scalar vs eigen (decode / prefill, deferred) on the same store and plan, warm
//   RopeCost/*     paired: per iteration one call each of eigen local, eigen raw, peer with 64-key
//                  blocks, peer with 16-key blocks (order rotated); medians per variant
//   DecodeBytes/*  ref::eigen::decode (local form) K+V bytes/s, float and bf16 stores, each call
//                  followed by a stream_sum of as many bytes (floor_ms, over_floor)
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "lazyattn/lazyattn.hpp"
#include "lazyattn/ref.hpp"
#include "plain_attention.hpp"
#include "setup.hpp"
#include "shapes.hpp"

namespace {

using namespace lazyattn;
using namespace lazyattn::bench;

constexpr std::int64_t kRotateBytes = std::int64_t{1} << 30;  // K/V touched before a layer repeats
constexpr std::int64_t kStreamBytes = std::int64_t{1} << 30;  // bandwidth peer buffers
constexpr int kRepetitions = 5;

// One problem alive at a time (the largest holds ~2 GiB with its peer copy); benchmarks that share
// one are registered next to each other.
Problem& problem(const Shape& s, DType dtype, int layers, bool with_peer) {
  static std::unique_ptr<Problem> current;
  if (!current || current->shape.name != s.name || current->dtype != dtype ||
      current->layers != layers) {
    current.reset();
    current = make_problem(s, dtype, layers);
  }
  if (with_peer && current->peer_k.empty()) add_peer(*current);
  return *current;
}

void set_rates(benchmark::State& state, const Work& w) {
  const auto n = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(n) * w.kv_bytes);
  state.counters["FLOP/s"] = benchmark::Counter(w.flops * n, benchmark::Counter::kIsRate);
  state.counters["keys"] = static_cast<double>(w.keys);
}

// ---- memory bandwidth peers ---------------------------------------------------------------------

float* stream_buffer(int which) {
  static std::vector<std::unique_ptr<float[]>> buffers;
  while (static_cast<int>(buffers.size()) <= which) {
    const std::size_t n = static_cast<std::size_t>(kStreamBytes / sizeof(float));
    auto b = std::make_unique<float[]>(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<float>(i & 1023) * 1e-3f;
    buffers.push_back(std::move(b));
  }
  return buffers[static_cast<std::size_t>(which)].get();
}

// Sum of n floats with 16 independent sums (4 SSE registers): enough adds in flight that memory,
// not the adder, is the limit.
float stream_sum(const float* x, std::size_t n) {
  float acc[16] = {};
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + static_cast<std::size_t>(j)];
  }
  float total = 0;
  for (float a : acc) total += a;
  return total;
}

void BM_StreamRead(benchmark::State& state) {
  const float* x = stream_buffer(0);
  const std::size_t n = static_cast<std::size_t>(kStreamBytes / sizeof(float));
  for (auto _ : state) benchmark::DoNotOptimize(stream_sum(x, n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * kStreamBytes);
}

void BM_Memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(kStreamBytes / 2);
  const float* src = stream_buffer(0);
  float* dst = stream_buffer(1);
  int half = 0;
  for (auto _ : state) {
    // Alternate halves of the 1 GiB source so that no byte read is still in cache.
    std::memcpy(dst, reinterpret_cast<const char*>(src) + half * bytes, bytes);
    half ^= 1;
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// ---- 1: eigen vs scalar -------------------------------------------------------------------------

enum class Impl { kScalar, kEigen };

void BM_Ref(benchmark::State& state, const Shape& shape, Impl impl, StorageForm form) {
  Problem& p = problem(shape, DType::kFloat32, 1, false);
  const Plan& plan = form == StorageForm::kLocal ? p.plan_local : p.plan_raw;
  for (auto _ : state) {
    const bool decode = shape.num_queries == 1;
    if (impl == Impl::kScalar) {
      (decode ? ref::scalar::decode : ref::scalar::prefill)(
          *p.store, plan, 0, p.rope, p.params, p.q, p.out, p.lse, ref::Method::kDeferred);
    } else {
      (decode ? ref::eigen::decode : ref::eigen::prefill)(*p.store, plan, 0, p.rope, p.params, p.q,
                                                          p.out, p.lse, ref::Method::kDeferred);
    }
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, work_of(shape, DType::kFloat32));
}

// ---- 2: deferred RoPE vs the no-RoPE peer, paired -----------------------------------------------

// CPU time of this thread: unlike wall time, it does not count time the scheduler gave to the
// other builds sharing the two cores.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void BM_RopeCost(benchmark::State& state, const Shape& shape, bool cold) {
  const int layers = cold ? layers_for(shape, DType::kFloat32, kRotateBytes) : 1;
  Problem& p = problem(shape, DType::kFloat32, layers, true);
  if (!(p.peer_diff_local < 1e-4 && p.peer_diff_raw < 1e-4)) {
    state.SkipWithError("the peer and ref::eigen::decode disagree (see peer_diff_*)");
  }
  PlainWorkspace w;
  constexpr int kVariants = 4;  // eigen local, eigen raw, peer 64-key blocks, peer 16-key blocks
  std::vector<double> t[kVariants], c[kVariants];  // wall and thread CPU seconds per call
  int store_layer = 0, peer_layer = 0, it = 0;
  for (auto _ : state) {
    double total = 0;
    for (int k = 0; k < kVariants; ++k) {
      const int v = (it + k) % kVariants;
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_seconds();
      switch (v) {
        case 0:
          ref_decode(p, p.plan_local, store_layer++ % layers);
          break;
        case 1:
          ref_decode(p, p.plan_raw, store_layer++ % layers);
          break;
        case 2:
          peer_decode<64>(p, p.peer_k, p.peer_v, peer_layer++ % layers, w);
          break;
        default:
          peer_decode<16>(p, p.peer_k, p.peer_v, peer_layer++ % layers, w);
          break;
      }
      benchmark::ClobberMemory();
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      t[v].push_back(dt);
      c[v].push_back(thread_seconds() - c0);
      total += dt;
    }
    ++it;
    state.SetIterationTime(total);
  }
  const double local = median(t[0]), raw = median(t[1]), peer = median(t[2]), peer16 = median(t[3]);
  const Work wk = work_of(shape, DType::kFloat32);
  state.counters["local_ms"] = local * 1e3;
  state.counters["raw_ms"] = raw * 1e3;
  state.counters["peer_ms"] = peer * 1e3;
  state.counters["peer16_ms"] = peer16 * 1e3;
  state.counters["local_ratio"] = local / peer;
  state.counters["raw_ratio"] = raw / peer;
  // Median of the per-iteration ratios: the calls of one iteration run back to back, so a slow
  // spell of the machine (other builds) scales both sides of each ratio alike.
  std::vector<double> local_over_peer, raw_over_peer;
  for (std::size_t i = 0; i < t[0].size(); ++i) {
    local_over_peer.push_back(t[0][i] / t[2][i]);
    raw_over_peer.push_back(t[1][i] / t[2][i]);
  }
  state.counters["local_ratio_paired"] = median(local_over_peer);
  state.counters["raw_ratio_paired"] = median(raw_over_peer);
  state.counters["local_vs_peer16"] = local / peer16;
  state.counters["raw_vs_peer16"] = raw / peer16;
  // The same ratios from thread CPU time: close to the wall ones when nothing else ran.
  state.counters["cpu_local_ratio"] = median(c[0]) / median(c[2]);
  state.counters["cpu_raw_ratio"] = median(c[1]) / median(c[2]);
  state.counters["local_GBps"] = static_cast<double>(wk.kv_bytes) / local * 1e-9;
  state.counters["peer_GBps"] = static_cast<double>(wk.kv_bytes) / peer * 1e-9;
  state.counters["peer_diff_local"] = p.peer_diff_local;
  state.counters["peer_diff_raw"] = p.peer_diff_raw;
  state.counters["rotated_MiB"] = static_cast<double>(wk.kv_bytes * layers) / (1 << 20);
  state.counters["samples"] = static_cast<double>(t[0].size());
}

// ---- 3: decode bytes/s --------------------------------------------------------------------------

// Each iteration times one decode (the benchmark's time) and then one stream_sum over as many
// bytes as the decode read, from the next slice of a 1 GiB buffer: the floor for those bytes,
// measured next to the decode so that both see the same machine state.
void BM_DecodeBytes(benchmark::State& state, const Shape& shape, DType dtype, int layers) {
  Problem& p = problem(shape, dtype, layers, false);
  const Work wk = work_of(shape, dtype);
  const float* buffer = stream_buffer(0);
  const auto floats = static_cast<std::size_t>(wk.kv_bytes) / sizeof(float);
  const auto slices = static_cast<std::size_t>(kStreamBytes) / sizeof(float) / floats;
  std::vector<double> decode_s, stream_s;
  int layer = 0;
  std::size_t slice = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    ref_decode(p, p.plan_local, layer++ % layers);
    benchmark::ClobberMemory();
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(stream_sum(buffer + slice * floats, floats));
    auto t2 = std::chrono::steady_clock::now();
    slice = (slice + 1) % std::max<std::size_t>(slices, 1);
    decode_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    stream_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    state.SetIterationTime(decode_s.back());
  }
  set_rates(state, wk);
  state.counters["floor_ms"] = median(stream_s) * 1e3;
  state.counters["over_floor"] = median(decode_s) / median(stream_s);
  state.counters["stream_GBps"] = static_cast<double>(wk.kv_bytes) / median(stream_s) * 1e-9;
  state.counters["rotated_MiB"] = static_cast<double>(wk.kv_bytes * layers) / (1 << 20);
}

// ---- registration -------------------------------------------------------------------------------

std::string form_name(StorageForm f) { return f == StorageForm::kLocal ? "local" : "raw"; }

void register_bandwidth(const char* when) {
  benchmark::RegisterBenchmark((std::string("Bandwidth/stream_read/") + when).c_str(),
                               BM_StreamRead)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true);
  benchmark::RegisterBenchmark((std::string("Bandwidth/memcpy/") + when).c_str(), BM_Memcpy)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true);
}

void register_all() {
  register_bandwidth("first");

  // 1: scalar vs eigen at sizes the scalar finishes in well under a second.
  for (const Shape& s : {decode_shape(1, 1024), decode_shape(1, 4096), prefill_shape(1024, 64)}) {
    for (StorageForm f : {StorageForm::kLocal, StorageForm::kRaw}) {
      for (Impl impl : {Impl::kScalar, Impl::kEigen}) {
        const std::string name = "Ref/" + s.name + "/" + form_name(f) + "/" +
                                 (impl == Impl::kScalar ? "scalar" : "eigen");
        benchmark::RegisterBenchmark(name.c_str(), BM_Ref, s, impl, f)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(impl == Impl::kScalar ? 0.05 : 0.3)
            ->UseRealTime()
            ->Repetitions(kRepetitions)
            ->ReportAggregatesOnly(true);
      }
    }
  }

  // 2 and 3, one shape at a time (they share its store).
  const std::vector<Shape> shapes = {decode_shape(1, 4096), decode_shape(1, 8192),
                                     decode_shape(4, 4096), decode_shape(4, 8192),
                                     rag_shape(1),          rag_shape(4)};
  for (const Shape& s : shapes) {
    benchmark::RegisterBenchmark(("RopeCost/" + s.name + "/cold").c_str(), BM_RopeCost, s, true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(40);
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      benchmark::RegisterBenchmark(
          ("DecodeBytes/" + s.name + "/" + std::string(to_string(t))).c_str(), BM_DecodeBytes, s, t,
          layers_for(s, t, kRotateBytes))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Repetitions(kRepetitions)
          ->ReportAggregatesOnly(true);
    }
  }
  // The same comparison with every input in cache: what the arithmetic alone costs.
  benchmark::RegisterBenchmark("RopeCost/b1x4096/warm", BM_RopeCost, decode_shape(1, 4096), false)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(60);

  register_bandwidth("last");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
  benchmark::AddCustomContext("eigen_version", std::to_string(EIGEN_WORLD_VERSION) + "." +
                                                   std::to_string(EIGEN_MAJOR_VERSION) + "." +
                                                   std::to_string(EIGEN_MINOR_VERSION));
  benchmark::AddCustomContext("shape", "Llama-3-8B heads: 32 q, 8 kv, head_dim 128, page 16");
  benchmark::AddCustomContext("rotate_bytes", std::to_string(kRotateBytes));
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
