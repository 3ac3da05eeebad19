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
// per tile it is a memory-bound pass of 2 x the raw K bytes.
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

// One CTA per (tile, KV head); tiles of other forms return at once. The tile's rows are read from
// their pages into shared memory, rotated in fp32 (exact angles of key0 + 16 a per pair, combined
// with the offset table's row r % 16, as the local form's pages were written) and stored, rounded
// once; rows past the tile's keys are not written (the kernel does not read them).
template <class T, int D>
__global__ void __launch_bounds__(kRawPassThreads)
    rotate_raw_tiles_kernel(const __grid_constant__ PrefillParams p) {
  const int tile = blockIdx.x, kv_head = blockIdx.y, tid = threadIdx.x;
  const TileInfo ti = p.sched.tiles[tile];
  if (ti.form != static_cast<std::int32_t>(StorageForm::kRaw) || ti.rows == 0) return;
  __shared__ __align__(16) T rows[kTileKeys][D];
  __shared__ float2 coarse[kTileKeys / 16][D / 2];
  constexpr int kChunks = D / 8;
  const int rot_half = p.rope.rotary_dim / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const int rope_set = p.rope.per_request ? request_of_tile(p, tile) : 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * rot_half;
  const float2* fine =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;

  const T* k_head = static_cast<const T*>(p.k_pool) + kv_head * p.head_stride;
  const int mask = (1 << p.page_size_log2) - 1;
  for (int i = tid; i < ti.rows * kChunks; i += kRawPassThreads) {
    const int r = i / kChunks, c = i % kChunks, key = ti.key0 + r;
    const int page = p.plan.page_ids[ti.page_base + (key >> p.page_size_log2)];
    const std::int64_t off =
        static_cast<std::int64_t>(page) * p.page_stride + static_cast<std::int64_t>(key & mask) * D;
    *reinterpret_cast<uint4*>(&rows[r][c * 8]) =
        __ldg(reinterpret_cast<const uint4*>(k_head + off) + c);
  }
  for (int i = tid; i < (kTileKeys / 16) * rot_half; i += kRawPassThreads)
    coarse[i / rot_half][i % rot_half] =
        rope_cos_sin(ti.key0 + 16 * (i / rot_half), turns[i % rot_half]);
  __syncthreads();

  T* out = static_cast<T*>(p.rotated_k) + rotated_k_tile(p, tile, kv_head, D);
  for (int i = tid; i < ti.rows * kChunks; i += kRawPassThreads) {
    const int r = i / kChunks, c = i % kChunks;
    alignas(16) T v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int d = c * 8 + e;
      float x = ptx::to_f32(rows[r][d]);
      if (d < 2 * rot_half) {
        const RotaryPair pr = rotary_pair(d, rot_half, interleaved);
        const float2 cs = combine_angles(coarse[r / 16][pr.j], fine[(r % 16) * rot_half + pr.j]);
        x = rotate_element(x, ptx::to_f32(rows[r][pr.partner]), cs, pr.first);
      }
      v[e] = ptx::from_f32<T>(x);
    }
    *reinterpret_cast<uint4*>(out + static_cast<std::int64_t>(r) * D + c * 8) =
        *reinterpret_cast<const uint4*>(v);
  }
}

}  // namespace lazyattn::cuda::detail
