// The prefill kernels' query input and output rows. A CTA's 128 rows are (query, head) pairs of
// one request and one KV head: row r is query i_first + r / G, head kv_head * G + r % G, so one
// K/V tile serves the whole GQA group.
//  - load_query_tile: the raw query tile into shared memory (cp.async, 16-byte chunks, in the
//    kernel's layout), zero past the request's rows;
//  - store_output_row: a row's normalised output and natural-log LSE, or, under a key-range
//    split, its fp32 partial output and log2-sum-exp for the merge.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/ptx.cuh"

namespace lazyattn::cuda::detail {

// Rows [0, kPrefillRows) of the query tile into q_raw at layout(row, chunk); rows from
// rows_here on read zero. kThreads threads (tid) share the copies.
template <class T, int D, int kThreads, class Layout>
__device__ __forceinline__ void load_query_tile(const PrefillParams& p, T* q_raw, int tid,
                                                int q_row0, int i_first, int rows_here, int G,
                                                int kv_head, Layout&& layout) {
  constexpr int kChunks = D / 8;
  const int chunk = tid % kChunks;
  const T* q = static_cast<const T*>(p.q);
  for (int r = tid / kChunks; r < kPrefillRows; r += kThreads / kChunks) {
    bool valid = r < rows_here;
    int rr = valid ? r : 0;
    std::int64_t src = (static_cast<std::int64_t>(q_row0 + i_first + rr / G) * p.num_qo_heads +
                        kv_head * G + rr % G) *
                           D +
                       chunk * 8;
    ptx::cp_async_16(ptx::smem_addr(q_raw + layout(r, chunk)), q + src, valid);
  }
}

// Row r of the CTA (request row row_begin + r) from this thread's share of its accumulator:
// acc(n, e), e = 0, 1, the output's dims 8 n + 2 t4 + e, with the row's maximum and this
// thread's share of its sum (reduced over the quad here: every lane of the quad calls this, also
// for rows past rows_here, which write nothing).
template <class T, int D, class Acc>
__device__ __forceinline__ void store_output_row(const PrefillParams& p, Acc&& acc, float row_max,
                                                 float row_sum, int r, int rows_here,
                                                 int row_begin, int q_row0, int kv_head, int G,
                                                 int t4) {
  float sum = row_sum;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (r >= rows_here) return;
  const int R = row_begin + r;
  const std::int64_t out_row =
      static_cast<std::int64_t>(q_row0 + R / G) * p.num_qo_heads + kv_head * G + R % G;
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float lse2 = sum > 0.0f ? row_max + log2f(sum) : -INFINITY;
  if (p.kv_splits > 1) {
    const std::int64_t slot =
        static_cast<std::int64_t>(blockIdx.z) * p.plan.num_queries * p.num_qo_heads + out_row;
    float* dst = p.partial_o + slot * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8 + 2 * t4) =
          make_float2(acc(n, 0) * inv, acc(n, 1) * inv);
    if (t4 == 0) p.partial_lse[slot] = lse2;
    return;
  }
  T* dst = static_cast<T*>(p.o) + out_row * D;
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
    *reinterpret_cast<std::uint32_t*>(dst + n * 8 + 2 * t4) =
        ptx::pack2<T>(acc(n, 0) * inv, acc(n, 1) * inv);
  if (t4 == 0 && p.maybe_lse) p.maybe_lse[out_row] = lse2 * 0.6931471805599453f;
}

}  // namespace lazyattn::cuda::detail
