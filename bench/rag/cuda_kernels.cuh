// The small kernels of the CUDA RAG backend around cuBLAS and lazyattn's attention: weight
// initialisation, embedding, RMSNorm, the QKV split, SwiGLU, greedy argmax, and the
// block-attention / prefix copy of K/V pages with K re-rotated on the way. The kernels are static:
// include this header in one translation unit (cuda_backend.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/page_write.cuh"
#include "lazyattn/cuda/reencode.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/detail/splitmix.hpp"

namespace lazyattn::rag::kernels {

using bf16 = __nv_bfloat16;

// Uniform in [-bound, bound) from a hash of (seed, index): deterministic, any size, no host copy.
static __global__ void fill_uniform(bf16* w, std::int64_t n, std::uint64_t seed, float bound) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t z = lazyattn::detail::splitmix64_mix(
        seed + static_cast<std::uint64_t>(i) * lazyattn::detail::kGoldenGamma);
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;  // [0, 1)
    w[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * bound);
  }
}

static __global__ void fill_value(float* x, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = value;
}

// x[r, :] = embedding[tokens[r], :], widened to float (the residual stream stays in float).
static __global__ void embed(const std::int32_t* tokens, const bf16* embedding, float* x,
                             int hidden) {
  const std::int64_t r = blockIdx.x;
  const bf16* src = embedding + static_cast<std::int64_t>(tokens[r]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    x[r * hidden + i] = __bfloat162float(src[i]);
}

// Sum over the block; every thread gets it. blockDim.x is a multiple of 32, at most 1024.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// y[r, :] = x[row, :] * weight / sqrt(mean(x[row, :]^2) + eps), row = maybe_rows ? maybe_rows[r] :
// r; as the CPU backend's rms_norm, in float, rounded to bf16 once (the next GEMM's input).
static __global__ void rms_norm(const float* x, const std::int32_t* maybe_rows, const float* weight,
                                bf16* y, int hidden, float eps) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t row = maybe_rows ? maybe_rows[r] : r;
  const float* xr = x + row * hidden;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += xr[i] * xr[i];
  const float inv = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    y[r * hidden + i] = __float2bfloat16_rn(xr[i] * weight[i] * inv);
}

// qkv [rows, qw + 2 kw] -> q [rows, qw], k [rows, kw], v [rows, kw]: the contiguous
// [tokens, heads, head_dim] arrays write_tokens and the attention kernels take. 16-byte chunks
// (qw and kw are multiples of 64).
static __global__ void split_qkv(const bf16* qkv, bf16* q, bf16* k, bf16* v, int qw, int kw) {
  const std::int64_t r = blockIdx.x;
  const int width = qw + 2 * kw, chunks = width / 8;
  const uint4* src = reinterpret_cast<const uint4*>(qkv + r * width);
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const int e = c * 8;
    const uint4 val = src[c];
    if (e < qw)
      *reinterpret_cast<uint4*>(q + r * qw + e) = val;
    else if (e < qw + kw)
      *reinterpret_cast<uint4*>(k + r * kw + (e - qw)) = val;
    else
      *reinterpret_cast<uint4*>(v + r * kw + (e - qw - kw)) = val;
  }
}

// act[r, i] = silu(gate[r, i]) * up[r, i], gate_up [rows, 2 I] holding gate then up.
static __global__ void swiglu(const bf16* gate_up, bf16* act, int inter) {
  const std::int64_t r = blockIdx.x;
  const bf16* g = gate_up + r * 2 * inter;
  for (int i = threadIdx.x; i < inter; i += blockDim.x) {
    const float a = __bfloat162float(g[i]), b = __bfloat162float(g[inter + i]);
    act[r * inter + i] = __float2bfloat16_rn(a / (1.0f + __expf(-a)) * b);
  }
}

// out[r] = the first index of the largest logit of row r (torch.argmax's choice among equals).
static __global__ void argmax(const float* logits, int vocab, std::int32_t* out) {
  const std::int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  float best = -FLT_MAX;
  int index = vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best) {  // i grows within a thread: a later equal value never wins here
      best = v;
      index = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (ov > best || (ov == best && oi < index)) {
      best = ov;
      index = oi;
    }
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = index;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
      if (sv[w] > best || (sv[w] == best && si[w] < index)) {
        best = sv[w];
        index = si[w];
      }
    }
    out[r] = index < vocab ? index : 0;  // all NaN: 0
  }
}

// Token t of a copy batch: K and V of (src_page[t], src_slot[t]) to (dst_page[t], dst_slot[t]) in
// every layer and KV head, K rotated by delta[t] positions (on top of the rotation it carries).
// fp8 pools: K dequantized with its layer's and head's scale, rotated, quantized again with it
// (saturating and counted, as page writes do); V's codes and K's past the rotary dims copied.
struct CopyParams {
  void* k_pool;  // layer 0 of [num_layers, num_pages, num_kv_heads, page_size, head_dim]
  void* v_pool;
  const std::int32_t* src_page;
  const std::int32_t* src_slot;
  const std::int32_t* dst_page;
  const std::int32_t* dst_slot;
  const std::int64_t* delta;
  cuda::RopeView rope;
  std::int64_t layer_stride;
  std::int64_t page_stride;
  std::int64_t head_stride;
  std::int32_t first;  // tokens [first, first + count) of the arrays
  std::int32_t count;
  std::int32_t num_kv_heads;
  std::int32_t head_dim;
  const float* k_scale = nullptr;  // fp8: [num_layers][num_kv_heads]
  unsigned long long* saturated = nullptr;  // fp8: the pool's saturation counter
};

inline constexpr int kCopyTokens = 8;  // tokens per block; cos/sin shared by heads and layers

// Grid (ceil(count / kCopyTokens), num_layers). One thread owns a rotation pair, so a token may be
// copied onto itself (src == dst) safely; other overlaps between source and destination are not.
// T: the pool's element type (bf16, or fp8 storage).
template <class T>
static __global__ void copy_rotate(const __grid_constant__ CopyParams p) {
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_storage_t>;
  extern __shared__ float2 cs[];  // [kCopyTokens][rotary_dim / 2]
  const int t0 = blockIdx.x * kCopyTokens;
  const int ntok = min(kCopyTokens, p.count - t0);
  const int half = p.rope.rotary_dim / 2;
  for (int i = threadIdx.x; i < ntok * half; i += blockDim.x) {
    const int t = i / half, j = i % half;
    cs[i] = cuda::rope_cos_sin(p.delta[p.first + t0 + t], p.rope.turns[j]);
  }
  __syncthreads();
  const int D = p.head_dim, H = p.num_kv_heads, pairs = D / 2;
  const std::int64_t layer = static_cast<std::int64_t>(blockIdx.y) * p.layer_stride;
  T* kp = static_cast<T*>(p.k_pool);
  T* vp = static_cast<T*>(p.v_pool);
  for (int i = threadIdx.x; i < ntok * H * pairs; i += blockDim.x) {
    const int t = i / (H * pairs), h = (i / pairs) % H, j = i % pairs;
    const int tok = p.first + t0 + t;
    const std::int64_t src = layer + p.src_page[tok] * p.page_stride + h * p.head_stride +
                             static_cast<std::int64_t>(p.src_slot[tok]) * D;
    const std::int64_t dst = layer + p.dst_page[tok] * p.page_stride + h * p.head_stride +
                             static_cast<std::int64_t>(p.dst_slot[tok]) * D;
    // Pair j: dims (j, j + half) for rotate_half, (2j, 2j + 1) interleaved; pairs past the
    // rotary dims are plain copies of two dims.
    int a, b;
    if (p.rope.interleaved) {
      a = 2 * j;
      b = a + 1;
    } else if (j < half) {
      a = j;
      b = j + half;
    } else {  // dims [rotary_dim, D), two at a time
      a = 2 * half + 2 * (j - half);
      b = a + 1;
    }
    // Everything read before anything is written (src == dst).
    const T va = vp[src + a], vb = vp[src + b], ka = kp[src + a], kb = kp[src + b];
    vp[dst + a] = va;
    vp[dst + b] = vb;
    if (j < half) {
      const float ks = kFp8 ? p.k_scale[blockIdx.y * H + h] : 1.0f;
      const float x = cuda::detail::from_pool(ka, ks), y = cuda::detail::from_pool(kb, ks);
      const float2 c = cs[t * half + j];
      kp[dst + a] = cuda::detail::to_pool<T>(x * c.x - y * c.y, ks, p.saturated);
      kp[dst + b] = cuda::detail::to_pool<T>(x * c.y + y * c.x, ks, p.saturated);
    } else {
      kp[dst + a] = ka;
      kp[dst + b] = kb;
    }
  }
}

}  // namespace lazyattn::rag::kernels
