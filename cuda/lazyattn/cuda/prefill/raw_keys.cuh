// The Hopper prefill's raw-form keys: before the attention kernel, every raw-form K tile of the
// plan is rotated once into local form (R(key0 + row) k: what a local-form page holds for the
// key at offset key0 + row of its segment) in a scratch of [tile][kv head][64][head dim], from
// which the kernel's loading warpgroup reads it as it reads local pages. V stays in the pool.
//
// Why a pass of its own: every query tile of a request reads all of its key tiles, so a rotation
// inside the attention kernel is done once per query tile (16 times per tile at the RAG tail, up
// to 256 times in a 16384-token encoding), by the loading warpgroup's four warps. Done there
// (rotate in shared memory after the copies land, 56 registers), the raw form ran 62-79% over
// RoPE off on the H200: the loader, issue-bound on the rotation, starved the matrix units. Once
// per tile, the pass reads and writes the raw K once (36 MB at the RAG tail).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

inline constexpr int kRawPassThreads = 128;

// The request whose key tiles hold `tile` (the prefill schedule's one work item per request).
__device__ __forceinline__ int request_of_tile(const PrefillParams& p, int tile) {
  int lo = 0, hi = p.sched.num_work - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.sched.work_tile_begin[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Element offset of (tile, kv head, row 0) in the rotated-K scratch.
__device__ __forceinline__ std::int64_t rotated_k_tile(const PrefillParams& p, int tile,
                                                       int kv_head, int head_dim) {
  const int num_kv_heads = p.num_qo_heads / p.group_size;
  return (static_cast<std::int64_t>(tile) * num_kv_heads + kv_head) * kTileKeys * head_dim;
}

// One CTA per (tile, KV head); tiles of other forms return at once. Each thread takes whole
// 16-byte chunks of a row straight from its page: in the rotate-half layout a chunk of 8 first
// members and the chunk of their partners (8 pairs), interleaved a chunk of 4 pairs, past the
// rotary dims a chunk to copy; rotates them in fp32 and stores them rounded once. A key's angle
// is the exact one of key0 + 16 a (a = row / 16) combined with the offset table's row % 16, as
// the local form's pages were written; both tables are in shared memory (the CTA computes the
// first and copies the second there), read 16 bytes (two pairs) at a time. Rows past the tile's
// keys are not written (the kernel does not read them).
// Measured at the RAG tail (1088 CTAs, Nsight Compute): with the offset table read from global
// memory at each use, 8-byte loads scattered over its rows, the pass was L1-bound (89% of its
// throughput, DRAM 14%) and took 28 us; with every item's loads issued before any rotation (72
// registers: two waves of CTAs instead of one), 34 us. (Element by element through a
// shared-memory copy of the tile, the RAG tail's raw form ran 221 us against 201 so.)
template <class T, int D>
__global__ void __launch_bounds__(kRawPassThreads)
    rotate_raw_tiles_kernel(const __grid_constant__ PrefillParams p) {
  // The attention kernel after this pass may start launching (its loading warpgroup waits for
  // this grid before it reads the scratch; prefill/launch.cuh).
  ptx::launch_dependents();
  const int tile = blockIdx.x, kv_head = blockIdx.y, tid = threadIdx.x;
  const TileInfo ti = p.sched.tiles[tile];
  if (ti.form != static_cast<std::int32_t>(StorageForm::kRaw) || ti.rows == 0) return;
  // [row / 16][pair] and [row % 16][pair]; float4 (two pairs) entries, so 16-byte aligned.
  __shared__ float4 coarse_v[kTileKeys / 16][D / 4];
  __shared__ float4 fine_v[16][D / 4];
  constexpr int kChunks = D / 8;
  const int rot_half = p.rope.rotary_dim / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const int rope_set = p.rope.per_request ? request_of_tile(p, tile) : 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * rot_half;
  const float2* offsets =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;
  {
    float2* coarse = reinterpret_cast<float2*>(coarse_v);
    float2* fine = reinterpret_cast<float2*>(fine_v);
    for (int i = tid; i < 16 * rot_half; i += kRawPassThreads)
      fine[(i / rot_half) * (D / 2) + i % rot_half] = offsets[i];
    for (int i = tid; i < (kTileKeys / 16) * rot_half; i += kRawPassThreads)
      coarse[(i / rot_half) * (D / 2) + i % rot_half] =
          rope_cos_sin(ti.key0 + 16 * (i / rot_half), turns[i % rot_half]);
  }
  __syncthreads();

  const T* k_head = static_cast<const T*>(p.k_pool) + kv_head * p.head_stride;
  T* out = static_cast<T*>(p.rotated_k) + rotated_k_tile(p, tile, kv_head, D);
  const int mask = (1 << p.page_size_log2) - 1;
  // Work items per row: the rotate-half layout's first-half chunks (each with its partners),
  // then the chunks past the rotary dims; interleaved, every chunk.
  const int half_chunks = interleaved ? 0 : rot_half / 8;
  const int items = interleaved ? kChunks : kChunks - half_chunks;
  for (int i = tid; i < ti.rows * items; i += kRawPassThreads) {
    const int r = i / items, u = i % items, key = ti.key0 + r;
    const int page = p.plan.page_ids[ti.page_base + (key >> p.page_size_log2)];
    const T* src = k_head + static_cast<std::int64_t>(page) * p.page_stride +
                   static_cast<std::int64_t>(key & mask) * D;
    T* dst = out + static_cast<std::int64_t>(r) * D;
    const float4* cq = coarse_v[r / 16];
    const float4* cf = fine_v[r % 16];
    if (!interleaved && u < half_chunks) {  // dims 8u.. and their partners rot_half + 8u..
      uint4 xa = __ldg(reinterpret_cast<const uint4*>(src + 8 * u));
      uint4 ya = __ldg(reinterpret_cast<const uint4*>(src + rot_half + 8 * u));
      std::uint32_t* xw = reinterpret_cast<std::uint32_t*>(&xa);
      std::uint32_t* yw = reinterpret_cast<std::uint32_t*>(&ya);
#pragma unroll
      for (int w = 0; w < 4; ++w) {  // pairs j = 8u + 2w, j + 1
        const float4 c = cq[4 * u + w], f = cf[4 * u + w];
        float2 x = ptx::unpack2<T>(xw[w]), y = ptx::unpack2<T>(yw[w]);
        rotate_pair(x.x, y.x, combine_angles(make_float2(c.x, c.y), make_float2(f.x, f.y)));
        rotate_pair(x.y, y.y, combine_angles(make_float2(c.z, c.w), make_float2(f.z, f.w)));
        xw[w] = ptx::pack2<T>(x.x, x.y);
        yw[w] = ptx::pack2<T>(y.x, y.y);
      }
      *reinterpret_cast<uint4*>(dst + 8 * u) = xa;
      *reinterpret_cast<uint4*>(dst + rot_half + 8 * u) = ya;
    } else {
      // A chunk of 4 interleaved pairs, or one past the rotary dims (copied).
      const int c = interleaved ? u : u + half_chunks;  // rotate-half: u >= half_chunks here
      uint4 xa = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
      if (8 * c < 2 * rot_half) {
        std::uint32_t* xw = reinterpret_cast<std::uint32_t*>(&xa);
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // pairs j = 4c + 2h, j + 1
          const float4 a = cq[2 * c + h], f = cf[2 * c + h];
          float2 x0 = ptx::unpack2<T>(xw[2 * h]), x1 = ptx::unpack2<T>(xw[2 * h + 1]);
          rotate_pair(x0.x, x0.y, combine_angles(make_float2(a.x, a.y), make_float2(f.x, f.y)));
          rotate_pair(x1.x, x1.y, combine_angles(make_float2(a.z, a.w), make_float2(f.z, f.w)));
          xw[2 * h] = ptx::pack2<T>(x0.x, x0.y);
          xw[2 * h + 1] = ptx::pack2<T>(x1.x, x1.y);
        }
      }
      *reinterpret_cast<uint4*>(dst + 8 * c) = xa;
    }
  }
}

}  // namespace lazyattn::cuda::detail
