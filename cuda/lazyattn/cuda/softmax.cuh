// The online softmax step shared by the decode and prefill kernels, in log2 units (the softmax
// scale times log2(e) is folded into the query), over one row of an MMA accumulator fragment.
//
// Fragment rows: mma.sync's m16n8 C layout and wgmma's m64nN accumulator give each thread, per
// 8-column block n, two adjacent scores of each of its rows, and the four threads of a quad
// (lanes 4g .. 4g + 3) hold the rest of those rows: a row's maximum and sum are reduced over the
// quad with two shuffles.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "lazyattn/cuda/ptx.cuh"

namespace lazyattn::cuda::detail {

// One step for one row: `score(n, e)` is this thread's score e (0, 1) of the row in column block
// n < N (a reference into the fragment). Takes the new row maximum, turns the scores into
// P = 2^(S - max), adds their sum into row_sum, and returns the factor 2^(old max - new max) that
// rescales the row's accumulated output. A row that has seen only masked keys keeps max = -inf;
// 0 is subtracted then, so exp2 gives 0, not NaN from (-inf) - (-inf).
// kFtz: ex2.approx.ftz, subnormal results flushed to zero (the prefill kernels); false: exp2f
// (the decode).
template <int N, bool kFtz, class Score>
__device__ __forceinline__ float online_softmax_row(Score&& score, float& row_max, float& row_sum) {
  auto exp2 = [](float x) {
    if constexpr (kFtz) return ptx::exp2_approx(x);
    else return exp2f(x);
  };
  float mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < N; ++n) mx = fmaxf(mx, fmaxf(score(n, 0), score(n, 1)));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(row_max, mx);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float scale = exp2(row_max - m_use);
  row_max = m_new;
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    score(n, 0) = exp2(score(n, 0) - m_use);
    score(n, 1) = exp2(score(n, 1) - m_use);
    sum += score(n, 0) + score(n, 1);
  }
  row_sum = row_sum * scale + sum;
  return scale;
}

}  // namespace lazyattn::cuda::detail
