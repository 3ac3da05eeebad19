// The prefill's split-KV merge: a query tile whose key range was split over CTAs (too few query
// tiles to fill the GPU) leaves one normalised partial output and log2-sum-exp per split; one
// warp per output row combines them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/cuda/ptx.cuh"

namespace lazyattn::cuda::detail {

// Merges the splits' partial states of one output row per warp: weights 2^(lse_z - max).
template <class T, int D>
__global__ void prefill_merge_kernel(const float* partial_o, const float* partial_lse, T* out,
                                     float* maybe_lse, std::int64_t rows, int splits) {
  const std::int64_t row = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float mx = -INFINITY;
  for (int z = 0; z < splits; ++z) mx = fmaxf(mx, partial_lse[z * rows + row]);
  constexpr int kPer = D / 32;
  float o[kPer] = {};
  float total = 0.0f;
  if (mx != -INFINITY) {
    for (int z = 0; z < splits; ++z) {
      const float w = exp2f(partial_lse[z * rows + row] - mx);
      total += w;
      const float* src = partial_o + (z * rows + row) * D + lane * kPer;
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[i] += w * src[i];
    }
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  T* dst = out + row * D + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; i += 2)
    *reinterpret_cast<std::uint32_t*>(dst + i) = ptx::pack2<T>(o[i] * inv, o[i + 1] * inv);
  if (lane == 0 && maybe_lse)
    maybe_lse[row] = total > 0.0f ? (mx + log2f(total)) * 0.6931471805599453f : -INFINITY;
}

}  // namespace lazyattn::cuda::detail
