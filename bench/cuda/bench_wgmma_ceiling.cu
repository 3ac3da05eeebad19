// The ceiling of the Hopper prefill's tile loop (prefill/wgmma_ws.cuh) at head dim 128: the
// wgmmas one computing warpgroup issues per key tile, with nothing loaded (K, V and the query sit
// in shared memory from the start), so the rate is what the tensor cores, the turns and the
// softmax leave. A question for issue 26 before rebuilding the kernel around another tile: how
// much of the gap to FlashAttention-3 is the tile shape itself?
//
//   keys64          the kernel's shape: per 64 keys, S as 8 x m64n64k16 (query from registers),
//                   P V as 4 x m64n128k16 (P from registers)
//   keys128_ss      FlashAttention-3's hdim-128 shape: per 128 keys, S as 8 x m64n128k16 with the
//                   query from shared memory, P V as 8 x m64n128k16
//   /mma            the wgmmas alone (P repacked from S); /softmax adds the kernel's online
//                   softmax (online_softmax_row) and O's rescale, every step
//   /pingpong       the two computing warpgroups take turns issuing (two named barriers), as the
//                   kernel does; /solo each issues when ready
// The same query rows per CTA (128, two warpgroups of 64) and 16384 keys per warpgroup; FLOPs
// 4 x 128 x 16384 x 128 per CTA, the grid 4 CTAs per SM. With the query in registers, 128-key
// steps (S 64, P 32, O 64 and the query 32 registers a thread) make ptxas serialize the wgmmas
// (C7512), whether S is one m64n128 or two m64n64 per k-step (the kernel's two-tiles-per-step
// experiment, docs/performance.md), so those forms are not measured.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "event_timer.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/softmax.cuh"
#include "lazyattn/cuda/wgmma.cuh"

namespace {

using namespace lazyattn::cuda;
using T = __nv_bfloat16;
constexpr int kD = 128;
constexpr int kKeys = 16384;  // per warpgroup
constexpr int kSmem = 96 * 1024;  // K (32 KiB), V (32 KiB), the query (32 KiB)

enum class Shape { kKeys64, kKeys128Ss };

template <Shape kShape, bool kSoftmax, bool kPingPong>
__global__ void __launch_bounds__(384, 1) tile_loop_kernel(float* sink) {
  constexpr int kStep = kShape == Shape::kKeys64 ? 64 : 128;  // keys per step
  constexpr int kS = kStep / 2;                               // S accumulators per thread
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;
  // Small finite values everywhere (the products' inputs do not change their speed).
  for (int i = tid; i < kSmem / 2; i += 384)
    reinterpret_cast<T*>(smem)[i] = __float2bfloat16(0.001f * ((i * 37) % 17 - 8));
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (wg == 2) {  // the kernel's loading warpgroup, idle here
    ptx::setmaxnreg_dec<24>();
    return;
  }
  ptx::setmaxnreg_inc<240>();
  const std::uint32_t k_addr = ptx::smem_addr(smem), v_addr = k_addr + 32768,
                      q_addr = k_addr + 65536 + wg * 64 * 128;
  std::uint32_t qf[kShape == Shape::kKeys64 ? 8 : 1][4];
#pragma unroll
  for (int kk = 0; kk < (kShape == Shape::kKeys64 ? 8 : 1); ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) qf[kk][r] = 0x3a803a80u + lane + kk + r;
  float s[kS], o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  std::uint32_t pa[kStep / 16][4];
#pragma unroll
  for (int kv = 0; kv < kStep / 16; ++kv)
#pragma unroll
    for (int r = 0; r < 4; ++r) pa[kv][r] = 0x3a803a80u;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  if (kPingPong && wg == 1) ptx::named_barrier_arrive<5, 256>();  // warpgroup 0 goes first
  for (int step = 0; step < kKeys / kStep; ++step) {
    if (kPingPong) {
      if (wg == 0) ptx::named_barrier_sync<5, 256>();
      else ptx::named_barrier_sync<6, 256>();
    }
    ptx::fence_operands(s);
    ptx::fence_operands(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const std::uint32_t kstep = (kk / 4) * (kStep * 128) + (kk % 4) * 32;
      const std::uint64_t kd = ptx::wgmma_desc(k_addr + kstep, 16, 1024);
      if constexpr (kShape == Shape::kKeys64) {
        ptx::wgmma_rs_m64n64k16<T, false>(s, qf[kk], kd, kk > 0);
      } else {
        const std::uint32_t qstep = (kk / 4) * (128 * 128) + (kk % 4) * 32;
        ptx::wgmma_ss_m64n128k16<T, false>(s, ptx::wgmma_desc(q_addr + qstep, 16, 1024), kd,
                                           kk > 0);
      }
    }
    ptx::wgmma_commit();
#pragma unroll
    for (int kv = 0; kv < kStep / 16; ++kv)
      ptx::wgmma_rs_m64n128k16<T, true>(
          o, pa[kv], ptx::wgmma_desc(v_addr + kv * 16 * 128, kStep * 128, 1024), 1);
    ptx::wgmma_commit();
    if (kPingPong) {
      if (wg == 0) ptx::named_barrier_arrive<6, 256>();
      else ptx::named_barrier_arrive<5, 256>();
    }
    ptx::wgmma_wait<1>();  // S landed; P V still running
    ptx::fence_operands(s);
    float scale[2] = {1.0f, 1.0f};
    if constexpr (kSoftmax) {  // the kernel's online softmax (softmax.cuh) over the step's keys
#pragma unroll
      for (int h = 0; h < 2; ++h)
        scale[h] = detail::online_softmax_row<kS / 4>(
            [&](int n, int e) -> float& { return s[4 * n + 2 * h + e]; }, row_max[h], row_sum[h]);
    }
    ptx::wgmma_wait<0>();
    ptx::fence_operands(o);
    // O rescaled every step, as the kernel's build over fp8 scratch tiles does at head dim 128
    // (here the conditional form, warp_needs_rescale's branch, made ptxas serialize the 64-key
    // ping-pong loop's wgmmas: C7520).
    if constexpr (kSoftmax) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= scale[(i >> 1) & 1];
    }
#pragma unroll
    for (int kv = 0; kv < kStep / 16; ++kv)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kv][r] = ptx::pack2<T>(s[8 * kv + 2 * r], s[8 * kv + 2 * r + 1]);
  }
  if (kPingPong && wg == 0) ptx::named_barrier_sync<5, 256>();  // warpgroup 1's last hand-over
  float acc = row_sum[0] + row_sum[1];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc += o[i];
  if (acc == 12345.0f) sink[tid] = acc;  // keeps the loop's results live
}

template <Shape kShape, bool kSoftmax, bool kPingPong>
void bench_tile_loop(benchmark::State& state) {
  auto* kernel = tile_loop_kernel<kShape, kSoftmax, kPingPong>;
  LAZYATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int sms = 0;
  LAZYATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = 4 * sms;
  float* sink = nullptr;
  LAZYATTN_CUDA_CHECK(cudaMalloc(&sink, 384 * sizeof(float)));
  lazyattn::bench::EventTimer timer;
  for (auto _ : state) {
    state.SetIterationTime(timer.seconds_per_call(
        [&](int) { kernel<<<grid, 384, kSmem>>>(sink); }, nullptr, 1));
  }
  LAZYATTN_CUDA_CHECK(cudaGetLastError());
  LAZYATTN_CUDA_CHECK(cudaFree(sink));
  const double flop = 4.0 * grid * 128.0 * kKeys * kD;  // two products, 128 rows per CTA
  state.counters["TFLOPs"] =
      benchmark::Counter(flop * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
}

template <Shape kShape>
void register_shape(const std::string& shape) {
  auto reg = [&](const std::string& rest, auto fn) {
    benchmark::RegisterBenchmark(("wgmma_ceiling/" + shape + "/" + rest).c_str(), fn)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(10)
        ->Repetitions(5)
        ->ReportAggregatesOnly(true);
  };
  reg("mma/solo", bench_tile_loop<kShape, false, false>);
  reg("mma/pingpong", bench_tile_loop<kShape, false, true>);
  reg("softmax/solo", bench_tile_loop<kShape, true, false>);
  reg("softmax/pingpong", bench_tile_loop<kShape, true, true>);
}

}  // namespace

int main(int argc, char** argv) {
  register_shape<Shape::kKeys64>("keys64");
  register_shape<Shape::kKeys128Ss>("keys128_ss");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
