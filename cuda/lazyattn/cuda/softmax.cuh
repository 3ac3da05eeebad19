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

// How far (log2 units) a row's running maximum may trail its true maximum before the output is
// rescaled (FlashAttention-4's conditional rescaling). The softmax is the same whatever maximum
// it is taken against, as long as the output, the sum and the max agree; a stale max only lets
// P = 2^(S - max) reach 2^kRescaleSlack = 256 (far inside fp32, bf16 and fp16), so after a row's
// first tiles its O is almost never rescaled. The decode and the Hopper prefill skip the rescale
// of a warp whose rows all kept their max (warp_needs_rescale): D / 2 multiplications per thread
// and tile (64 at head dim 128), which measured up to 2% faster in the decode and 1.5-7.5% in the
// prefill on an H100 (docs/performance.md, "Conditional rescale").
inline constexpr float kRescaleSlack = 8.0f;

// One step for one row: `score(n, e)` is this thread's score e (0, 1) of the row in column block
// n < N (a reference into the fragment). Takes the new row maximum where it exceeds the running
// one by more than kRescaleSlack (else the running one stays), turns the scores into
// P = 2^(S - max), adds their sum into row_sum, and returns the factor 2^(old max - new max) that
// rescales the row's accumulated output: exactly 1 where the max stayed. A row that has seen only
// masked keys keeps max = -inf; 0 is subtracted then, so exp2 gives 0, not NaN from
// (-inf) - (-inf).
// Exponentials are one ex2.approx.ftz each (ptx::exp2_approx; subnormal results flush to 0, far
// below a 16-bit P's resolution): exp2f's range handling costs three more instructions per
// score, which the decode's issue-bound loops (fp8, raw form) measured.
// kScaled: score_scale (> 0) multiplies every score first (the fp8 decode's K scale), taken into
// the max once per row and into each exponent's FMA instead of into every score.
template <int N, bool kScaled = false, class Score>
__device__ __forceinline__ float online_softmax_row(Score&& score, float& row_max, float& row_sum,
                                                    float score_scale = 1.0f) {
  float mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < N; ++n) mx = fmaxf(mx, fmaxf(score(n, 0), score(n, 1)));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if constexpr (kScaled) mx *= score_scale;  // a positive scale keeps the maximum (-inf too)
  // -inf + slack is -inf: a row's first visible key always sets its max.
  const bool grow = mx > row_max + kRescaleSlack;
  const float m_new = grow ? mx : row_max;
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float scale = grow ? ptx::exp2_approx(row_max - m_new) : 1.0f;
  row_max = m_new;
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if constexpr (kScaled) {
      score(n, 0) = ptx::exp2_approx(fmaf(score(n, 0), score_scale, -m_use));
      score(n, 1) = ptx::exp2_approx(fmaf(score(n, 1), score_scale, -m_use));
    } else {
      score(n, 0) = ptx::exp2_approx(score(n, 0) - m_use);
      score(n, 1) = ptx::exp2_approx(score(n, 1) - m_use);
    }
    sum += score(n, 0) + score(n, 1);
  }
  row_sum = row_sum * scale + sum;
  return scale;
}

// Whether any row of the warp changed its max this step (a factor of online_softmax_row other
// than 1): the same answer in every lane, so the rescale it guards is one warp-uniform branch.
// Call it where the whole warp is converged and no asynchronous MMA owns the output.
__device__ __forceinline__ bool warp_needs_rescale(float scale0, float scale1) {
  return __any_sync(0xffffffffu, scale0 != 1.0f || scale1 != 1.0f);
}

}  // namespace lazyattn::cuda::detail
