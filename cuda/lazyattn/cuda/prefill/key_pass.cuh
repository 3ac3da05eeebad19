// The Hopper prefill's key pass: before the attention kernel, every K tile of the plan is rotated
// once to its position in the request, into a scratch of [tile][kv head][64][head dim] from which
// the kernel's loading warpgroup reads it (KvTiles::kPositionedK); V stays in the pool. A raw key
// at offset j of a segment starting at s becomes R(s + j) k; a local-form key R(j) k is turned by
// R(s) alone; an absolute-form tail's key (its start 0) is copied. The kernel then rotates its
// query once, R(m) q, and runs the loop of one segment starting at 0, with no rotation between
// segments. This is the eager baseline's re-encoding, done per call into the workspace; the
// store keeps its one position-free copy. Where it runs (launch.cuh, positioned_keys): raw-form
// plans, and local-form plans over segments at head dims 64 and 256, and at 128 in every rotary
// layout but rotate-half over all dims. (Over fp8 pools the dequantizing pass positions K:
// prefill/fp8_tiles.cuh.)
//
// Why a pass of its own for raw keys: every query tile of a request reads all of its key tiles,
// so a rotation inside the attention kernel is done once per query tile (16 times per tile at the
// RAG tail, up to 256 times in a 16384-token encoding), by the loading warpgroup's four warps.
// Done there (rotate in shared memory after the copies land, 56 registers), the raw form ran
// 62-79% over RoPE off on the H200: the loader, issue-bound on the rotation, starved the matrix
// units. Once per tile, the pass reads and writes K once (36 MB each way at the RAG tail, head
// dim 128). Why local-form keys too: over several segments the kernel otherwise rebuilds the
// query for each segment between two runs of tiles, which cost +26% over RoPE off at head dim 64
// and +35% at 256 on the RAG tail (17 segments per CTA; at 256 the query lives in shared memory
// with no room for the raw query), and +12-14% at 128 with interleaved pairs or partial rotary,
// against +3-7% at 128 in the rotate-half layout, where the pass would cost more than the rebuild
// (docs/performance.md, "K positioned by the key pass").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

inline constexpr int kKeyPassThreads = 128;

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

// Element offset of (tile, kv head, row 0) in a tile scratch (PrefillParams::tile_k, tile_v).
__device__ __forceinline__ std::int64_t scratch_tile(const PrefillParams& p, int tile, int kv_head,
                                                     int head_dim) {
  const int num_kv_heads = p.num_qo_heads / p.group_size;
  return (static_cast<std::int64_t>(tile) * num_kv_heads + kv_head) * kTileKeys * head_dim;
}

// Rows of a tile one CTA of the pass takes (16 at head dim 128, 32 at 64: 128 or 256 work items
// of 16 bytes per KV head), so a tile's rows spread over 64 / kKeyPassRows CTAs.
template <int D>
inline constexpr int kKeyPassRows = 16 * 128 / D;

// Grid (tile, row group). A thread takes one 16-byte work
// item of a row (rotate-half: a chunk of 8 first members and the chunk of their partners, 8
// pairs; interleaved: a chunk of 4 pairs; past the rotary dims a chunk to copy) in every KV head:
// the item's angles are the same in every head, so it computes them once, then loads the item of
// kHeads heads at a time (independent 16-byte loads, all in flight together), rotates them in
// fp32 and stores them rounded once. A raw key's angle is the exact one of s + key0 + 16 (row /
// 16) combined with the offset table's row row % 16, as the local form's pages are written; a
// local-form key's the exact one of s. Rows past the tile's keys are not written (the kernel does
// not read them).
// Measured at the RAG tail (1088 CTAs of one tile and KV head each, Nsight Compute): with the
// angle tables in shared memory, built per CTA (so once per KV head), 23.5 us, L1-bound (83%);
// with the offset table read from global memory at each use, 28 us (L1 89%, DRAM 14%).
template <class T, int D>
__global__ void __launch_bounds__(kKeyPassThreads)
    rotate_key_tiles_kernel(const __grid_constant__ PrefillParams p) {
  // The attention kernel after this pass may start launching (its loading warpgroup waits for
  // this grid before it reads the scratch; prefill/launch.cuh).
  ptx::launch_dependents();
  constexpr int kRows = kKeyPassRows<D>;
  constexpr int kChunks = D / 8;
  constexpr int kHeads = 4;  // heads whose loads are in flight together
  const int tile = blockIdx.x, tid = threadIdx.x;
  const TileInfo ti = p.sched.tiles[tile];
  const int row0 = kRows * static_cast<int>(blockIdx.y);
  const bool raw = ti.form == static_cast<std::int32_t>(StorageForm::kRaw);
  if (ti.rows <= row0) return;
  const int rot_half = p.rope.rotary_dim / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const int rope_set = p.rope.per_request ? request_of_tile(p, tile) : 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * rot_half;
  const float2* offsets =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;
  const int num_kv_heads = p.num_qo_heads / p.group_size;
  const int mask = (1 << p.page_size_log2) - 1;
  // Work items per row: the rotate-half layout's first-half chunks (each with its partners),
  // then the chunks past the rotary dims; interleaved, every chunk.
  const int half_chunks = interleaved ? 0 : rot_half / 8;
  const int items = interleaved ? kChunks : kChunks - half_chunks;
  const int rows = min(kRows, ti.rows - row0);
  // Head 0's scratch tile; head h's is h x kTileKeys x D elements on.
  T* const out_tile = static_cast<T*>(p.tile_k) + scratch_tile(p, tile, 0, D);
  constexpr std::int64_t kOutHead = static_cast<std::int64_t>(kTileKeys) * D;
  for (int i = tid; i < rows * items; i += kKeyPassThreads) {
    const int r = row0 + i / items, u = i % items, key = ti.key0 + r;
    const int page = p.plan.page_ids[ti.page_base + (key >> p.page_size_log2)];
    const std::int64_t src_row = static_cast<std::int64_t>(page) * p.page_stride +
                                 static_cast<std::int64_t>(key & mask) * D;
    // The item's dims: rotate-half, x at 8u.. and y (the partners) at rot_half + 8u..; else
    // the chunk c (interleaved pairs 4c.., or past the rotary dims: copied).
    const bool pairs_half = !interleaved && u < half_chunks;
    const int c = interleaved || pairs_half ? u : u + half_chunks;
    const int x_at = 8 * c, y_at = pairs_half ? rot_half + 8 * u : 8 * c;
    const bool rotary = pairs_half || 8 * c < 2 * rot_half;
    // The item's cos/sin: 8 pairs (rotate-half: j = 8u + w) or 4 (interleaved: j = 4c + w). A
    // raw key's angle is its position's, a local-form key's its segment's start alone.
    float2 cs[8];
    if (rotary) {
      const int j0 = pairs_half ? 8 * u : 4 * c;
      const int npairs = pairs_half ? 8 : 4;
      const std::int64_t coarse_pos =
          ti.seg_start + (raw ? ti.key0 + 16 * (r / 16) : 0);
      const float2* fine = offsets + (r % 16) * rot_half + j0;
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        if (w >= npairs) continue;
        const float2 coarse = rope_cos_sin(coarse_pos, turns[j0 + w]);
        cs[w] = raw ? combine_angles(coarse, fine[w]) : coarse;
      }
    }
    const T* k0 = static_cast<const T*>(p.k_pool) + src_row;
    T* out0 = out_tile + static_cast<std::int64_t>(r) * D;
    for (int h0 = 0; h0 < num_kv_heads; h0 += kHeads) {
      uint4 xa[kHeads], ya[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h0 + h >= num_kv_heads) break;
        const T* src = k0 + static_cast<std::int64_t>(h0 + h) * p.head_stride;
        xa[h] = __ldg(reinterpret_cast<const uint4*>(src + x_at));
        if (pairs_half) ya[h] = __ldg(reinterpret_cast<const uint4*>(src + y_at));
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h0 + h >= num_kv_heads) break;
        std::uint32_t* xw = reinterpret_cast<std::uint32_t*>(&xa[h]);
        std::uint32_t* yw = reinterpret_cast<std::uint32_t*>(&ya[h]);
        if (pairs_half) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {  // pairs 8u + 2w, + 1: dims (8u + 2w, rot_half + ...)
            float2 x = ptx::unpack2<T>(xw[w]), y = ptx::unpack2<T>(yw[w]);
            rotate_pair(x.x, y.x, cs[2 * w]);
            rotate_pair(x.y, y.y, cs[2 * w + 1]);
            xw[w] = ptx::pack2<T>(x.x, x.y);
            yw[w] = ptx::pack2<T>(y.x, y.y);
          }
        } else if (rotary) {
#pragma unroll
          for (int w = 0; w < 4; ++w) {  // pair 4c + w: dims 8c + 2w, + 1
            float2 x = ptx::unpack2<T>(xw[w]);
            rotate_pair(x.x, x.y, cs[w]);
            xw[w] = ptx::pack2<T>(x.x, x.y);
          }
        }
        T* dst = out0 + (h0 + h) * kOutHead;
        *reinterpret_cast<uint4*>(dst + x_at) = xa[h];
        if (pairs_half) *reinterpret_cast<uint4*>(dst + y_at) = ya[h];
      }
    }
  }
}

}  // namespace lazyattn::cuda::detail
