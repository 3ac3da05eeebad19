// Merge of split-KV partial states: o = sum_s w_s o_s / sum_s w_s with w_s = 2^(lse_s - max lse).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/ptx.cuh"

namespace lazyattn::cuda {
namespace detail {

// One block per (request, query head), one thread per output dimension. Requests that were not
// split wrote their output directly and are skipped.
template <class T>
__global__ void merge_partials_kernel(const float* __restrict__ partial_o,
                                      const float* __restrict__ partial_lse,
                                      const std::int32_t* __restrict__ request_num_splits,
                                      const std::int32_t* __restrict__ request_partial_offset,
                                      const std::int32_t* __restrict__ request_query_indptr,
                                      T* __restrict__ o, float* __restrict__ maybe_lse,
                                      int num_qo_heads, int head_dim) {
  const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int n = request_num_splits[b];
  if (n <= 1) return;
  const std::int64_t first = request_partial_offset[b];
  float m = -INFINITY;
  for (int s = 0; s < n; ++s) m = fmaxf(m, partial_lse[(first + s) * num_qo_heads + h]);
  float sum = 0.0f, acc = 0.0f;
  if (m != -INFINITY) {  // every split empty: output 0, lse -inf, no NaN
    for (int s = 0; s < n; ++s) {
      std::int64_t row = (first + s) * num_qo_heads + h;
      float w = exp2f(partial_lse[row] - m);
      sum += w;
      acc += w * partial_o[row * head_dim + d];
    }
  }
  const std::int64_t q_row = request_query_indptr[b];
  o[(q_row * num_qo_heads + h) * head_dim + d] = ptx::from_f32<T>(sum > 0.0f ? acc / sum : 0.0f);
  if (d == 0 && maybe_lse)
    maybe_lse[q_row * num_qo_heads + h] =
        sum > 0.0f ? (m + log2f(sum)) * 0.6931471805599453f : -INFINITY;
}

}  // namespace detail

template <class T>
void merge_partials(const float* partial_o, const float* partial_lse,
                    const DecodeScheduleView& sched, void* o, float* maybe_lse, int num_requests,
                    int num_qo_heads, int head_dim, const std::int32_t* request_query_indptr,
                    cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(num_requests), static_cast<unsigned>(num_qo_heads));
  detail::merge_partials_kernel<T><<<grid, head_dim, 0, stream>>>(
      partial_o, partial_lse, sched.request_num_splits, sched.request_partial_offset,
      request_query_indptr, static_cast<T*>(o), maybe_lse, num_qo_heads, head_dim);
  LAZYATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace lazyattn::cuda
