// The mma.sync prefill's deferred rotation in shared memory: the query tile's rows rotated (and
// scaled) for a segment, and a raw-form K tile rotated at its keys' logical positions, both in
// fp32 from exact per-segment angles combined with a table of small offsets.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"

namespace lazyattn::cuda::detail {

// Writes a warp's rows of the rotated, scaled query (rows [row0, row0 + nrows) of q_rot) from the
// raw ones: row r, at offset i = r / G from the CTA's first query, is rotated by the segment's
// angle at 16 (i / 16) (`coarse`, per pair) combined with the offset i % 16 (`fine`), in fp32,
// and rounded once. Each lane takes two pairs per access (32-bit pieces of both halves in the
// half layout, 64 bits in the interleaved one); the dims past rotary_dim are only scaled.
// rotary = 0 scales everything (the RoPE-off baseline). G (a divisor of 128) is a power of two.
// fine_mask 15 takes the offset's row of `fine`; 0 takes row 0 (the identity) for every row, as
// queries already rotated at their own positions need (the coarse table then holds one angle).
template <class T, int D>
__device__ __forceinline__ void rotate_query_rows(const T* q_raw, T* q_rot, int row0, int nrows,
                                                  int lane, const float2* coarse,
                                                  const float2* fine, int fine_mask, int rotary,
                                                  bool interleaved, int log2_group,
                                                  float rot_scale, float scale) {
  const int half = rotary / 2;
  auto at = [](int row, int d) { return swizzle<D>(row, d >> 3) + (d & 7); };
  // Lane u takes pairs (2u, 2u + 1) of every row; the G rows of one query share their angles.
  const int i_lo = row0 >> log2_group, i_hi = (row0 + nrows - 1) >> log2_group;
  for (int u = lane; u < half / 2; u += 32) {
    const int j = 2 * u;
    for (int i = i_lo; i <= i_hi; ++i) {
      const float4 a = *reinterpret_cast<const float4*>(coarse + (i >> 4) * half + j);
      const float4 b = *reinterpret_cast<const float4*>(fine + (i & fine_mask) * half + j);
      const float2 c0 = combine_angles(make_float2(a.x, a.y), make_float2(b.x, b.y));
      const float2 c1 = combine_angles(make_float2(a.z, a.w), make_float2(b.z, b.w));
      const int r_end = min(row0 + nrows, (i + 1) << log2_group);
#pragma unroll 4
      for (int row = max(row0, i << log2_group); row < r_end; ++row) {
        if (interleaved) {
          const int d = 2 * j;
          uint2 v = *reinterpret_cast<const uint2*>(q_raw + at(row, d));
          float2 x = ptx::unpack2<T>(v.x), y = ptx::unpack2<T>(v.y);
          rotate_pair(x.x, x.y, c0);
          rotate_pair(y.x, y.y, c1);
          v.x = ptx::pack2<T>(x.x * rot_scale, x.y * rot_scale);
          v.y = ptx::pack2<T>(y.x * rot_scale, y.y * rot_scale);
          *reinterpret_cast<uint2*>(q_rot + at(row, d)) = v;
        } else {
          auto* xs = reinterpret_cast<const std::uint32_t*>(q_raw + at(row, j));
          auto* ys = reinterpret_cast<const std::uint32_t*>(q_raw + at(row, j + half));
          float2 x = ptx::unpack2<T>(*xs), y = ptx::unpack2<T>(*ys);
          rotate_pair(x.x, y.x, c0);
          rotate_pair(x.y, y.y, c1);
          *reinterpret_cast<std::uint32_t*>(q_rot + at(row, j)) =
              ptx::pack2<T>(x.x * rot_scale, x.y * rot_scale);
          *reinterpret_cast<std::uint32_t*>(q_rot + at(row, j + half)) =
              ptx::pack2<T>(y.x * rot_scale, y.y * rot_scale);
        }
      }
    }
  }
  for (int u = lane; u < (D - rotary) / 2; u += 32) {  // 32-bit pieces past the rotary dims
    const int d = rotary + 2 * u;
    for (int row = row0; row < row0 + nrows; ++row) {
      float2 x = ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(q_raw + at(row, d)));
      *reinterpret_cast<std::uint32_t*>(q_rot + at(row, d)) =
          ptx::pack2<T>(x.x * scale, x.y * scale);
    }
  }
}

// Rotates one thread's share of a raw K tile in shared memory at its keys' logical positions:
// cos/sin of key (16 a + b) = base[a] combined with offset[b]. Two pairs per 32-bit access in
// the half layout, one in the interleaved.
template <class T, int D, int kThreads>
__device__ __forceinline__ void rotate_key_tile(T* ks, const float2* kbase, const float2* koff,
                                                int half, bool interleaved, int tid) {
  const int per_key = interleaved ? half : half / 2;
  for (int i = tid; i < kTileKeys * per_key; i += kThreads) {
    const int key = i / per_key, u = i % per_key;
    const float2* kb = kbase + (key >> 4) * half;
    const float2* ko = koff + (key & 15) * half;
    if (interleaved) {
      const int d = 2 * u;
      auto* x = reinterpret_cast<std::uint32_t*>(ks + swizzle<D>(key, d >> 3) + (d & 7));
      float2 v = ptx::unpack2<T>(*x);
      rotate_pair(v.x, v.y, combine_angles(kb[u], ko[u]));
      *x = ptx::pack2<T>(v.x, v.y);
    } else {
      const int j = 2 * u, d1 = j + half;
      auto* x = reinterpret_cast<std::uint32_t*>(ks + swizzle<D>(key, j >> 3) + (j & 7));
      auto* y = reinterpret_cast<std::uint32_t*>(ks + swizzle<D>(key, d1 >> 3) + (d1 & 7));
      float2 a = ptx::unpack2<T>(*x), b = ptx::unpack2<T>(*y);
      rotate_pair(a.x, b.x, combine_angles(kb[j], ko[j]));
      rotate_pair(a.y, b.y, combine_angles(kb[j + 1], ko[j + 1]));
      *x = ptx::pack2<T>(a.x, a.y);
      *y = ptx::pack2<T>(b.x, b.y);
    }
  }
}

}  // namespace lazyattn::cuda::detail
