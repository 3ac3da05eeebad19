// The Hopper prefill over fp8 (e4m3) pools: before the attention kernel, a pass dequantizes
// every K and V tile of the plan (code x its KV head's scale, rounded once to the queries' 16-bit
// type) into the tile scratch [tile][kv head][64][head dim] (PrefillParams::tile_k, tile_v). With
// RoPE on, over plans of more than one segment per request or with raw-form segments, it also
// rotates every K tile to its position in the request on the way, as the 16-bit pools' key pass
// does (prefill/key_pass.cuh): a raw key at offset j of a segment starting at s to R(s + j) k, a
// local-form key R(j) k by R(s), an absolute-form tail's copied. The attention kernel's loading
// warpgroup then reads every tile from the scratch (KvTiles::kScratch), and the computing
// warpgroups run the 16-bit kernel's one-segment code unchanged (PrefillParams::keys_positioned:
// one segment at 0), so the accuracy is the 16-bit kernel's over the fp8 values.
//
// Floor, written before any measurement (docs/06-cuda.md): the pass reads each tile's codes once
// and writes them in 16 bits (3 bytes per element); at the RAG tail (136 key tiles x 8 KV heads x
// 64 x 128, K and V: 17.8 M elements) 53 MB, about 12 us at the copy bandwidth, against the
// attention kernel's ~185 us, partly hidden under that kernel's launch (programmatic dependent
// launch). Rotating every K tile there adds arithmetic, not bytes. The in-loader conversion and
// fp8 wgmma are the later steps of the plan there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/key_pass.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

// The rotary layout of a pass over key rows (the same items and angles as
// rotate_key_tiles_kernel, whose tuned loop keeps them inline): a row's work items of 16 output
// bytes (rotate-half: a chunk of 8 first members with the chunk of their partners, then the chunks
// past the rotary dims; interleaved: every chunk of 4 pairs) and the angle tables of the tile's
// request.
struct KeyRowLayout {
  int rot_half;
  bool interleaved;
  int half_chunks;  // rotate-half: the first members' chunks (items 0 .. half_chunks - 1)
  int items;        // work items per row
  const std::uint64_t* turns;
  const float2* offsets;
};

template <int D>
__device__ __forceinline__ KeyRowLayout key_row_layout(const PrefillParams& p, int tile) {
  KeyRowLayout l;
  l.rot_half = p.rope.rotary_dim / 2;
  l.interleaved = p.rope.interleaved != 0;
  const int rope_set = p.rope.per_request ? request_of_tile(p, tile) : 0;
  l.turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * l.rot_half;
  l.offsets =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * l.rot_half;
  l.half_chunks = l.interleaved ? 0 : l.rot_half / 8;
  l.items = l.interleaved ? D / 8 : D / 8 - l.half_chunks;
  return l;
}

// Work item u of row r of a tile: its dims (x at x_at; rotate-half, the partners y at y_at) and,
// where it rotates, their cos/sin (8 pairs rotate-half, 4 interleaved). per_row (raw keys): the
// row's angle is the exact one of pos0 + 16 (r / 16) combined with the offset table's row
// r % 16, as the local form's pages are written (pos0 the tile's first key's position); else
// the whole tile's is pos0's (a local-form tile turned by its segment's start).
struct KeyItem {
  int x_at, y_at;
  bool pairs_half, rotary;
  float2 cs[8];
};

__device__ __forceinline__ KeyItem key_item(const KeyRowLayout& l, std::int64_t pos0, bool per_row,
                                            int r, int u) {
  KeyItem it;
  it.pairs_half = !l.interleaved && u < l.half_chunks;
  const int c = l.interleaved || it.pairs_half ? u : u + l.half_chunks;
  it.x_at = 8 * c;
  it.y_at = it.pairs_half ? l.rot_half + 8 * u : 8 * c;
  it.rotary = it.pairs_half || 8 * c < 2 * l.rot_half;
  if (it.rotary) {
    const int j0 = it.pairs_half ? 8 * u : 4 * c;
    const int npairs = it.pairs_half ? 8 : 4;
    const std::int64_t coarse_pos = pos0 + (per_row ? 16 * (r / 16) : 0);
    const float2* fine = l.offsets + (r % 16) * l.rot_half + j0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      if (w >= npairs) continue;
      const float2 coarse = rope_cos_sin(coarse_pos, l.turns[j0 + w]);
      it.cs[w] = per_row ? combine_angles(coarse, fine[w]) : coarse;
    }
  }
  return it;
}

// Rotates an item's 8 x values (and, rotate-half, its 8 partners y) in fp32.
__device__ __forceinline__ void rotate_item(const KeyItem& it, float* x, float* y) {
  if (it.pairs_half) {
#pragma unroll
    for (int w = 0; w < 8; ++w) rotate_pair(x[w], y[w], it.cs[w]);  // pair 8u + w
  } else if (it.rotary) {
#pragma unroll
    for (int w = 0; w < 4; ++w) rotate_pair(x[2 * w], x[2 * w + 1], it.cs[w]);  // pair 4c + w
  }
}

// Eight fp8 codes (one 8-byte load) as floats times `scale`.
__device__ __forceinline__ void dequantize8(uint2 codes, float scale, float* x) {
  const std::uint32_t words[2] = {codes.x, codes.y};
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      std::uint32_t pair = ptx::e4m3x2_to_half2(words[w] >> (16 * h));
      const float2 f = __half22float2(*reinterpret_cast<__half2*>(&pair));
      x[4 * w + 2 * h] = f.x * scale;
      x[4 * w + 2 * h + 1] = f.y * scale;
    }
  }
}

// Eight floats rounded to T, as one 16-byte store.
template <class T>
__device__ __forceinline__ void store8(T* dst, const float* x) {
  uint4 v;
  v.x = ptx::pack2<T>(x[0], x[1]);
  v.y = ptx::pack2<T>(x[2], x[3]);
  v.z = ptx::pack2<T>(x[4], x[5]);
  v.w = ptx::pack2<T>(x[6], x[7]);
  *reinterpret_cast<uint4*>(dst) = v;
}

// Grid (tile, row group of kKeyPassRows<D> rows), kKeyPassThreads threads; every tile of the
// schedule. A thread takes one work item of a row in every KV head, kHeads heads' loads in flight
// together: K's items first (kPosition and a tile to rotate: the key pass's items, rotated in
// fp32 after dequantizing; else 8 dims), then V's (8 dims). kPosition: every K tile to its
// position in the request (a raw key's angle s + key0 + r, a local-form tile's s, where s is its
// segment's start; an absolute-form tail, whose s is 0, is not rotated). Rows past the tile's
// keys are not written (the kernel does not read them).
template <class T, int D, bool kPosition>
__global__ void __launch_bounds__(kKeyPassThreads)
    dequantize_tiles_kernel(const __grid_constant__ PrefillParams p) {
  ptx::launch_dependents();  // as the key pass: the attention kernel's loader waits for this grid
  constexpr int kRows = kKeyPassRows<D>;
  constexpr int kChunks = D / 8;
  constexpr int kHeads = 4;
  const int tile = blockIdx.x, tid = threadIdx.x;
  const TileInfo ti = p.sched.tiles[tile];
  const int row0 = kRows * static_cast<int>(blockIdx.y);
  if (ti.rows <= row0) return;
  const bool raw = ti.form == static_cast<std::int32_t>(StorageForm::kRaw);
  const bool rotate = kPosition && (raw || ti.seg_start != 0);
  const std::int64_t pos0 = ti.seg_start + (raw ? ti.key0 : 0);
  KeyRowLayout l{};
  if (rotate) l = key_row_layout<D>(p, tile);
  const int k_items = rotate ? l.items : kChunks;
  const int num_kv_heads = p.num_qo_heads / p.group_size;
  const int mask = (1 << p.page_size_log2) - 1;
  const int rows = min(kRows, ti.rows - row0);
  constexpr std::int64_t kOutHead = static_cast<std::int64_t>(kTileKeys) * D;
  const std::int64_t out_tile = scratch_tile(p, tile, 0, D);
  for (int i = tid; i < rows * (k_items + kChunks); i += kKeyPassThreads) {
    const bool is_v = i >= rows * k_items;
    const int j = is_v ? i - rows * k_items : i;
    const int n = is_v ? kChunks : k_items;
    const int r = row0 + j / n, u = j % n, key = ti.key0 + r;
    const int page = p.plan.page_ids[ti.page_base + (key >> p.page_size_log2)];
    const std::int64_t src_row = static_cast<std::int64_t>(page) * p.page_stride +
                                 static_cast<std::int64_t>(key & mask) * D;
    KeyItem it;
    if (!is_v && rotate) {
      it = key_item(l, pos0, raw, r, u);
    } else {
      it.x_at = it.y_at = 8 * u;
      it.pairs_half = it.rotary = false;
    }
    const std::uint8_t* src0 =
        static_cast<const std::uint8_t*>(is_v ? p.v_pool : p.k_pool) + src_row;
    const float* scales = is_v ? p.v_scale : p.k_scale;
    T* out0 =
        static_cast<T*>(is_v ? p.tile_v : p.tile_k) + out_tile + static_cast<std::int64_t>(r) * D;
    for (int h0 = 0; h0 < num_kv_heads; h0 += kHeads) {
      uint2 xa[kHeads], ya[kHeads];
      float sc[kHeads];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h0 + h >= num_kv_heads) break;
        const std::uint8_t* src = src0 + static_cast<std::int64_t>(h0 + h) * p.head_stride;
        xa[h] = __ldg(reinterpret_cast<const uint2*>(src + it.x_at));
        if (it.pairs_half) ya[h] = __ldg(reinterpret_cast<const uint2*>(src + it.y_at));
        sc[h] = __ldg(scales + h0 + h);
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h0 + h >= num_kv_heads) break;
        float x[8], y[8];
        dequantize8(xa[h], sc[h], x);
        if (it.pairs_half) dequantize8(ya[h], sc[h], y);
        if (it.rotary) rotate_item(it, x, y);
        T* dst = out0 + (h0 + h) * kOutHead;
        store8<T>(dst + it.x_at, x);
        if (it.pairs_half) store8<T>(dst + it.y_at, y);
      }
    }
  }
}

}  // namespace lazyattn::cuda::detail
