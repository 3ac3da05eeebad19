// [cuda][hopper] probes of the wgmma building blocks (lazyattn/cuda/wgmma.cuh) before any kernel
// rests on them: one warpgroup multiplies bf16 tiles stored as the TMA's 128-byte swizzle stores
// them, with A from shared memory or from registers, B K-major (Q K^T) or MN-major (P V), at the
// head dims the prefill needs, and the products are compared with a CPU product of the same
// bf16 values. A wrong descriptor field (LBO, SBO, the k-step advance, the swizzle mode) or a
// wrong fragment layout scrambles whole 8x8 blocks, far above the tolerance.
#include "support/catch.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/wgmma.cuh"

namespace {

using bf16 = __nv_bfloat16;
namespace ptx = lazyattn::cuda::ptx;

enum class Form { kSS, kRS, kPV };  // A smem / A registers (B K-major) / A registers, B MN-major

// Element (row, col) of a [kRows][kCols] tile in the kernels' blocked 128-byte-swizzle layout
// (lazyattn/cuda/kv_tile.cuh): the function under test together with the descriptors.
template <int kRows, int kCols>
__device__ __forceinline__ int swizzled(int row, int col) {
  return lazyattn::cuda::detail::blocked_swizzle<kCols, kRows>(row, col >> 3) + (col & 7);
}

// C[64][N] = A[64][K] B, with B given as b_nk [N][K] (K-major, kSS / kRS: C = A b_nk^T) or
// b_kn [K][N] (MN-major, kPV: C = A b_kn). One CTA of 128 threads (one warpgroup).
template <int K, int N, Form kForm>
__global__ void wgmma_probe(const bf16* a, const bf16* b, float* c) {
  extern __shared__ __align__(1024) unsigned char smem[];
  if ((ptx::smem_addr(smem) & 1023u) != 0) __trap();
  bf16* sa = reinterpret_cast<bf16*>(smem);
  bf16* sb = sa + 64 * K;
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * K; i += 128) sa[swizzled<64, K>(i / K, i % K)] = a[i];
  if constexpr (kForm == Form::kPV) {
    for (int i = tid; i < K * N; i += 128) sb[swizzled<K, N>(i / N, i % N)] = b[i];  // [K][N]
  } else {
    for (int i = tid; i < N * K; i += 128) sb[swizzled<N, K>(i / K, i % K)] = b[i];  // [N][K]
  }
  ptx::fence_proxy_async_smem();
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  const std::uint32_t a0 = ptx::smem_addr(sa), b0 = ptx::smem_addr(sb);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    // K-major: block kk / 4 of the K dimension, 32 bytes per k-step within it.
    const std::uint32_t a_at = a0 + (kk / 4) * 64 * 128 + (kk % 4) * 32;
    std::uint64_t db;
    if constexpr (kForm == Form::kPV) {
      // MN-major: 16 K-rows further per k-step; the next 64 N-columns one block (K rows) on.
      db = ptx::wgmma_desc(b0 + kk * 16 * 128, K * 128, 1024);
    } else {
      db = ptx::wgmma_desc(b0 + (kk / 4) * N * 128 + (kk % 4) * 32, 16, 1024);
    }
    if constexpr (kForm == Form::kSS) {
      const std::uint64_t da = ptx::wgmma_desc(a_at, 16, 1024);
      if constexpr (N == 64) ptx::wgmma_ss_m64n64k16<bf16, false>(d, da, db, 1);
      else ptx::wgmma_ss_m64n128k16<bf16, false>(d, da, db, 1);
    } else {
      // This thread's A fragment of rows 16 warp + g (+8), columns 16 kk + 2t (+1, +8, +9),
      // read back from the swizzled tile (as a kernel would after rotating a query in place).
      std::uint32_t af[4];
      const int r0 = 16 * warp + g, c0 = 16 * kk + 2 * t;
      auto pair = [&](int r, int col) {
        return *reinterpret_cast<const std::uint32_t*>(sa + swizzled<64, K>(r, col));
      };
      af[0] = pair(r0, c0);
      af[1] = pair(r0 + 8, c0);
      af[2] = pair(r0, c0 + 8);
      af[3] = pair(r0 + 8, c0 + 8);
      constexpr bool kTrans = kForm == Form::kPV;
      if constexpr (N == 64) ptx::wgmma_rs_m64n64k16<bf16, kTrans>(d, af, db, 1);
      else ptx::wgmma_rs_m64n128k16<bf16, kTrans>(d, af, db, 1);
    }
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int r = 16 * warp + g, col = 8 * j + 2 * t;
    c[r * N + col] = d[4 * j];
    c[r * N + col + 1] = d[4 * j + 1];
    c[(r + 8) * N + col] = d[4 * j + 2];
    c[(r + 8) * N + col + 1] = d[4 * j + 3];
  }
}

template <int K, int N, Form kForm>
void check_probe(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  const std::size_t b_elems = static_cast<std::size_t>(N) * K;
  std::vector<bf16> a(64 * K), b(b_elems);
  std::vector<float> af(a.size()), bfv(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = __float2bfloat16_rn(dist(rng));
    af[i] = __bfloat162float(a[i]);
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    b[i] = __float2bfloat16_rn(dist(rng));
    bfv[i] = __bfloat162float(b[i]);
  }
  lazyattn::cuda::DeviceBuffer<bf16> da(a.size()), db(b.size());
  lazyattn::cuda::DeviceBuffer<float> dc(static_cast<std::size_t>(64) * N);
  LAZYATTN_CUDA_CHECK(cudaMemcpy(da.data(), a.data(), da.bytes(), cudaMemcpyHostToDevice));
  LAZYATTN_CUDA_CHECK(cudaMemcpy(db.data(), b.data(), db.bytes(), cudaMemcpyHostToDevice));
  LAZYATTN_CUDA_CHECK(cudaMemset(dc.data(), 0xff, dc.bytes()));  // NaN: unwritten stays visible
  const int smem = static_cast<int>((a.size() + b.size()) * sizeof(bf16));
  auto kernel = wgmma_probe<K, N, kForm>;
  LAZYATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(da.data(), db.data(), dc.data());
  LAZYATTN_CUDA_CHECK(cudaGetLastError());
  LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> c(dc.size());
  LAZYATTN_CUDA_CHECK(cudaMemcpy(c.data(), dc.data(), dc.bytes(), cudaMemcpyDeviceToHost));

  // The products of bf16 values are exact in fp32; only the order of the K additions differs.
  int bad = 0;
  double worst = 0;
  for (int r = 0; r < 64; ++r) {
    for (int n = 0; n < N; ++n) {
      double want = 0;
      for (int k = 0; k < K; ++k) {
        const double bv = kForm == Form::kPV ? bfv[static_cast<std::size_t>(k) * N + n]
                                             : bfv[static_cast<std::size_t>(n) * K + k];
        want += static_cast<double>(af[static_cast<std::size_t>(r) * K + k]) * bv;
      }
      const double got = c[static_cast<std::size_t>(r) * N + n];
      const double err = std::fabs(got - want);
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      if (!(err <= 1e-3 * std::sqrt(static_cast<double>(K)) + 1e-4 * std::fabs(want))) {
        if (bad < 4) UNSCOPED_INFO("C[" << r << "][" << n << "] = " << got << ", expected " << want);
        ++bad;
      }
    }
  }
  INFO("K " << K << ", N " << N << ", form " << static_cast<int>(kForm) << ": " << bad
            << " of " << 64 * N << " elements off, largest error " << worst);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("wgmma: Q K^T from shared memory (K-major A and B, 128-byte swizzle)", "[cuda][hopper]") {
  check_probe<64, 64, Form::kSS>(1);
  check_probe<128, 64, Form::kSS>(2);
  check_probe<128, 128, Form::kSS>(3);
}

TEST_CASE("wgmma: Q K^T with the query in registers", "[cuda][hopper]") {
  check_probe<64, 64, Form::kRS>(4);
  check_probe<128, 64, Form::kRS>(5);
}

TEST_CASE("wgmma: P V with V MN-major (transposed B)", "[cuda][hopper]") {
  check_probe<64, 64, Form::kPV>(6);
  check_probe<64, 128, Form::kPV>(7);
}
