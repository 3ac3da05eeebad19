// The end of a decode CTA: the four warps' online-softmax states merged through shared memory
// into the CTA's output rows (or, under split-KV, its partial state), and, for split-KV, the
// last CTA of a (request, KV head) to finish merging every split's state.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/cuda/decode/params.cuh"
#include "lazyattn/cuda/ptx.cuh"

namespace lazyattn::cuda::detail {

// Merges the warps' states (acc, row_max, this thread's row_sum share) and writes the group's
// rows: the output and LSE when the request has one split, else this split's partial state,
// times out_scale (an fp8 pool's V scale). Every thread of the CTA calls it, after its last tile.
// kFp8Cols: acc[n] in the fp8 build's column order (decode/kernel.cuh): acc[2 c + e][0] and [1]
// are dims 16 c + 4 t4 + e and that + 2; else acc[n][0] and [1] are dims 8 n + 2 t4 and + 1.
template <class T, int D, bool kFp8Cols = false>
__device__ __forceinline__ void merge_warps_and_store(const DecodeParams& p, unsigned char* smem,
                                                      const float (&acc)[D / 8][4],
                                                      const float (&row_max)[2],
                                                      float (&row_sum)[2], int num_splits,
                                                      int partial, int kv_head, int q_row0,
                                                      float out_scale = 1.0f) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int G = p.group_size;
  // ---- merge the four warps' states through shared memory ----------------------------------
  ptx::cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory is free for reuse
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  float* merge = reinterpret_cast<float*>(smem);  // [warp][row][D + 4]: acc, max, sum, pad
  constexpr int kRowStride = D + 4;  // acc, max, sum, pad: rows at 16-byte boundaries
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = kFp8Cols ? 8 * (n & ~1) + 4 * t4 + (n & 1) : n * 8 + 2 * t4;
    constexpr int kNext = kFp8Cols ? 2 : 1;  // the column of acc[n][1]
    float* r0 = merge + (warp * kRows + g) * kRowStride;
    float* r1 = merge + (warp * kRows + g + 8) * kRowStride;
    r0[col] = acc[n][0];
    r0[col + kNext] = acc[n][1];
    r1[col] = acc[n][2];
    r1[col + kNext] = acc[n][3];
  }
  if (t4 == 0) {
    merge[(warp * kRows + g) * kRowStride + D] = row_max[0];
    merge[(warp * kRows + g) * kRowStride + D + 1] = row_sum[0];
    merge[(warp * kRows + g + 8) * kRowStride + D] = row_max[1];
    merge[(warp * kRows + g + 8) * kRowStride + D + 1] = row_sum[1];
  }
  __syncthreads();

  const float kLn2 = 0.6931471805599453f;
  // Four dims of one row per thread (16-byte shared loads and partial stores).
  for (int i = tid; i < G * D / 4; i += kDecodeThreads) {
    const int row = (4 * i) / D, d = (4 * i) % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w)
      m_all = fmaxf(m_all, merge[(w * kRows + row) * kRowStride + D]);
    float l_all = 0.0f;
    float4 o_all = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (m_all != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float* r = merge + (w * kRows + row) * kRowStride;
        const float wgt = exp2f(r[D] - m_all);  // a warp that saw no key has r[D] = -inf: weight 0
        const float4 a = *reinterpret_cast<const float4*>(r + d);
        l_all += r[D + 1] * wgt;
        o_all.x += a.x * wgt;
        o_all.y += a.y * wgt;
        o_all.z += a.z * wgt;
        o_all.w += a.w * wgt;
      }
    }
    const float inv = l_all > 0.0f ? out_scale / l_all : 0.0f;
    const float4 out = make_float4(o_all.x * inv, o_all.y * inv, o_all.z * inv, o_all.w * inv);
    const float lse2 = l_all > 0.0f ? m_all + log2f(l_all) : -INFINITY;
    const int head = kv_head * G + row;
    if (num_splits == 1) {
      store4(static_cast<T*>(p.o) + (static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head) * D + d,
             out);
      if (d == 0 && p.maybe_lse)
        p.maybe_lse[static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head] = lse2 * kLn2;
    } else {
      const std::int64_t base = static_cast<std::int64_t>(partial) * p.num_qo_heads + head;
      *reinterpret_cast<float4*>(p.partial_o + base * D + d) = out;
      if (d == 0) p.partial_lse[base] = lse2;
    }
  }
}

// Split-KV: the CTAs of one (request, KV head) count in; the last one merges every split's
// partial state into the output rows. Every thread of the CTA calls it, after its own partial
// state is stored.
template <class T, int D>
__device__ __forceinline__ void merge_splits(const DecodeParams& p, unsigned char* smem, int b,
                                             int num_splits, int kv_head, int q_row0) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int G = p.group_size;
  const float kLn2 = 0.6931471805599453f;
  // Writers publish their partials (fence) before counting in; the last one fences again before
  // reading, and reads through L2 (__ldcg): other multiprocessors wrote those lines.
  __threadfence();
  __syncthreads();
  __shared__ int is_last_static;
  int* is_last = &is_last_static;
  if (tid == 0) {
    int* counter = p.split_counters + static_cast<std::int64_t>(b) * p.num_kv_heads + kv_head;
    int done = atomicAdd(counter, 1);
    *is_last = done == num_splits - 1;
    if (*is_last) *counter = 0;  // ready for the next launch (CUDA graph replays too)
  }
  __syncthreads();
  if (!*is_last) return;
  __threadfence();
  const std::int64_t first = p.sched.request_partial_offset[b];
  // Each split's weight 2^(lse - max) / sum per row, one warp per row (lanes over splits,
  // shuffles), into shared memory; then the outputs four dims per thread (16-byte loads) with up
  // to kMergeBatch splits' loads in flight, the first batch issued before the weights pass so
  // that the two L2 round trips overlap: this merge runs after every other CTA of the step has
  // finished, so its latency is the step's tail.
  constexpr int kMergeBatch = 16;
  float* w_s = reinterpret_cast<float*>(smem);  // [num_splits][G], in the free pipeline space
  float* row_m = w_s + num_splits * G;
  float* row_l = row_m + kRows;
  const std::int64_t split_stride = static_cast<std::int64_t>(p.num_qo_heads) * D;
  auto load_batch = [&](int i, int sp0, float4 (&v)[kMergeBatch]) {
    const float* src = p.partial_o + (first * p.num_qo_heads + kv_head * G) * D + 4 * i;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u)
      v[u] = sp0 + u < num_splits
                 ? __ldcg(reinterpret_cast<const float4*>(src + (sp0 + u) * split_stride))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  float4 v[kMergeBatch];
  if (tid < G * D / 4) load_batch(tid, 0, v);
  for (int row = warp; row < G; row += kDecodeWarps) {
    const float* lse = p.partial_lse + first * p.num_qo_heads + kv_head * G + row;
    float mx = -INFINITY;
    for (int sp = lane; sp < num_splits; sp += 32) {
      const float l = __ldcg(lse + sp * p.num_qo_heads);
      w_s[sp * G + row] = l;  // this lane's entries: read back below by the same lane
      mx = fmaxf(mx, l);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    if (mx != -INFINITY)
      for (int sp = lane; sp < num_splits; sp += 32) sum += exp2f(w_s[sp * G + row] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    // Every split empty: weights 0, output 0, lse -inf, no NaN.
    for (int sp = lane; sp < num_splits; sp += 32)
      w_s[sp * G + row] = sum > 0.0f ? exp2f(w_s[sp * G + row] - mx) / sum : 0.0f;
    if (lane == 0) {
      row_m[row] = mx;
      row_l[row] = sum;
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D / 4; i += kDecodeThreads) {
    const int row = (4 * i) / D, d = (4 * i) % D;
    const int head = kv_head * G + row;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int sp0 = 0; sp0 < num_splits; sp0 += kMergeBatch) {
      if (i != tid || sp0 != 0) load_batch(i, sp0, v);  // the first batch is in v already
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        const float w = sp0 + u < num_splits ? w_s[(sp0 + u) * G + row] : 0.0f;
        acc.x += w * v[u].x;
        acc.y += w * v[u].y;
        acc.z += w * v[u].z;
        acc.w += w * v[u].w;
      }
    }
    store4(static_cast<T*>(p.o) + (static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head) * D + d,
           acc);
    if (d == 0 && p.maybe_lse) {
      const float m_all = row_m[row], l_all = row_l[row];
      p.maybe_lse[static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head] =
          l_all > 0.0f ? (m_all + log2f(l_all)) * kLn2 : -INFINITY;
    }
  }
  __syncthreads();
}

}  // namespace lazyattn::cuda::detail
