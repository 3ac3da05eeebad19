// The mma.sync prefill (FlashAttention-2 style, m16n8k16; every head dim, storage form and rotary
// layout, any architecture from sm_80): a request's new tail tokens attend fully to every
// document segment and causally to the tail, with RoPE deferred into the kernel. Covers tail prefill (the RAG question), chunked prefill (a chunk appended to an existing tail:
// queries are the last rows of the tail) and document encoding (a plan whose only segment is the
// document's own tail, causal from position 0).
//
// One CTA takes 128 query rows of one request and one KV head; rows are (query, head-of-group)
// pairs, so each K/V tile serves the whole GQA group. At head dims 64 and 128 four warps own 32
// rows each (two m16 tiles, so every K and V fragment read from shared memory feeds two MMAs);
// at 256 eight warps own 16 rows each. The CTA walks every 64-key tile of the request with one K
// and one V buffer, as FlashAttention-2 does: V of tile t streams in (cp.async, page-table
// gather) under Q K^T and the softmax of tile t, K of tile t + 1 under P V of tile t; two CTAs
// share an SM at head dim <= 128 (110.5 KiB of shared memory each at 128).
//
// Deferred rotation:
//   local form  the query is re-rotated when the segment changes, by (m_i - s_j) per row: each
//               warp rewrites its rows of the rotated, scaled query that Q K^T reads from the raw
//               ones, in fp32, with cos/sin of (m_first - s_j + 16a) (exact, per segment)
//               combined with the offset table's b, where m_i - m_first = 16a + b: rounded to 16
//               bits once;
//   raw form    the query is rotated by m_i once, and each K tile is rotated in fp32 at its keys'
//               logical positions, in shared memory, once for all warps (per-16-key base angles
//               computed a tile ahead, offsets 0..15 from the table).
// kRope = false is the RoPE-off baseline (pre-rotated queries and keys).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/prefill/io.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/rotate.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/softmax.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

// m16 row tiles per warp, and warps per CTA, for a head dim.
template <int D>
struct PrefillShape {
  static constexpr int kMTiles = D <= 128 ? 2 : 1;
  static constexpr int kWarps = kPrefillRows / (16 * kMTiles);
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = D <= 128 ? 2 : 1;
  static constexpr int kKSteps = D / 16;
  // Shared memory, bytes from the start: K tile, V tile, raw queries, rotated queries, cos/sin of
  // the segment rotation at row offsets 16a [8][pair], of the raw keys' 16-key bases [4][pair],
  // of the offsets 0..15 [16][pair] (both sides combine a base with these), and the frequencies.
  static constexpr int kTileBytes = kTileKeys * D * 2;
  static constexpr int kQBytes = kPrefillRows * D * 2;
  static constexpr int kK = 0;
  static constexpr int kV = kK + kTileBytes;
  static constexpr int kQRaw = kV + kTileBytes;
  static constexpr int kQRot = kQRaw + kQBytes;
  static constexpr int kCsBase = kQRot + kQBytes;
  static constexpr int kCsKBase = kCsBase + 8 * (D / 2) * 8;
  static constexpr int kCsKOff = kCsKBase + 4 * (D / 2) * 8;
  static constexpr int kTurns = kCsKOff + 16 * (D / 2) * 8;  // the frequencies [pair], Q0.64
  static constexpr int kSmemBytes = kTurns + (D / 2) * 8;
};

template <class T, int D, bool kRope>
__global__ void __launch_bounds__(PrefillShape<D>::kThreads, PrefillShape<D>::kMinBlocks)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  using Shape = PrefillShape<D>;
  constexpr int MT = Shape::kMTiles;
  constexpr int kThreads = Shape::kThreads;
  constexpr int KSteps = Shape::kKSteps;
  extern __shared__ __align__(128) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem + Shape::kK);
  T* vs = reinterpret_cast<T*>(smem + Shape::kV);
  T* q_raw = reinterpret_cast<T*>(smem + Shape::kQRaw);
  T* q_rot = reinterpret_cast<T*>(smem + Shape::kQRot);
  float2* cs_seg = reinterpret_cast<float2*>(smem + Shape::kCsBase);     // [8][pair]
  float2* cs_kbase = reinterpret_cast<float2*>(smem + Shape::kCsKBase);  // [4][pair]
  float2* cs_koff = reinterpret_cast<float2*>(smem + Shape::kCsKOff);    // [16][pair]
  std::uint64_t* s_turns = reinterpret_cast<std::uint64_t*>(smem + Shape::kTurns);

  // Heaviest query tiles first: in causal encoding the last rows see the most keys.
  const int qtile = p.sched.num_qtiles - 1 - blockIdx.x;
  const int kv_head = blockIdx.y;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int mi = lane >> 3;

  const int b = p.sched.qtile_request[qtile];
  const int row_begin = p.sched.qtile_row_begin[qtile];
  const int G = p.group_size;
  const int q_row0 = p.plan.request_query_indptr[b];
  const int nq = p.plan.request_query_indptr[b + 1] - q_row0;
  const int rows_here = min(kPrefillRows, nq * G - row_begin);
  const int i_first = row_begin / G;  // query index (within the request) of row 0
  // Where row 0's rotation counts from, and how it steps per query row: m_first + i for
  // un-rotated queries, 0 throughout for queries rotated at their own positions.
  const std::int64_t m_first = p.query_rotated ? 0 : p.plan.request_query_position[b] + i_first;
  const int row_step = p.query_rotated ? 0 : 1;
  // Tail key kt is visible to query i when kt <= causal_offset + i.
  const int causal_offset = p.plan.segment_length[p.plan.request_tail_segment[b]] - nq;
  const int max_visible_tail = causal_offset + (row_begin + rows_here - 1) / G;
  const int rope_set = p.rope.per_request ? b : 0;
  const int rotary = p.rope.rotary_dim;
  const int half = rotary / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * half;
  const float2* offset_cs =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * half;

  int tile_begin, tile_end;
  cta_tile_range(p, b, max_visible_tail, tile_begin, tile_end);

  // This thread's rows: m-tile mt, half h -> CTA row warp * 16 MT + 16 mt + g + 8 h.
  const int warp_row0 = warp * 16 * MT;

  // ---- the raw query tile: rows (query i_first + r / G, head r % G), zero past the request ----
  load_query_tile<T, D, kThreads>(p, q_raw, tid, q_row0, i_first, rows_here, G, kv_head,
                                  [](int r, int chunk) { return swizzle<D>(r, chunk); });

  using Stream = TileStream<T, D, kThreads, 1>;
  Stream stream = Stream::for_head(p, kv_head, tile_end, tid, nullptr);
  stream.prefetch_records(tile_begin, tid);
  TileInfo cur = stream.info(tile_begin);
  int pages[Stream::kRowsPerThread];
  stream.fetch_pages(cur, pages);
  if (tile_begin < tile_end) stream.issue_one(stream.k, cur, pages, ks);
  ptx::cp_async_commit();

  const std::uint8_t kRawForm = static_cast<std::uint8_t>(StorageForm::kRaw);
  // The query rotation a tile needs: by m_first for raw keys, by m_first - s for local ones.
  auto delta_of = [&](const TileInfo& ti) {
    return kRope && ti.form != kRawForm ? m_first - ti.seg_start : m_first;
  };
  // The segment rotation at the coarse row offsets this CTA's rows reach: exact angles of
  // delta + 16a, a < ceil(128 / G / 16).
  const int coarse_rows = (kPrefillRows / G + 15) / 16;
  auto compute_seg = [&](std::int64_t delta) {
    for (int i = tid; i < coarse_rows * half; i += kThreads)
      cs_seg[i] = rope_cos_sin(delta + 16 * row_step * (i / half), s_turns[i % half]);
  };
  auto compute_kbase = [&](const TileInfo& ti) {
    const std::int64_t n0 = ti.seg_start + ti.key0;
    for (int i = tid; i < 4 * half; i += kThreads) {
      int grp = i / half, j = i % half;
      cs_kbase[grp * half + j] = rope_cos_sin(n0 + 16 * grp, s_turns[j]);
    }
  };
  if (kRope) {
    for (int i = tid; i < 16 * half; i += kThreads) cs_koff[i] = offset_cs[i];
    for (int j = tid; j < half; j += kThreads) s_turns[j] = turns[j];
    __syncthreads();
    compute_seg(delta_of(cur));
    if (cur.form == kRawForm) compute_kbase(cur);
  }

  float acc[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }
  std::int64_t q_delta = 0;
  bool q_ready = false;

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    // K of this tile (and, the first time, the query tile) has landed; every warp is past the
    // previous P V, so the V buffer is free; the tables for this tile are visible.
    ptx::cp_async_wait<0>();
    __syncthreads();
    const TileInfo ti = cur;
    stream.issue_one(stream.v, ti, pages, vs);
    ptx::cp_async_commit();
    cur = stream.info(tile + 1);     // (its record was prefetched into L2)
    stream.fetch_pages(cur, pages);  // the next tile's page ids, in flight under Q K^T
    const bool raw = kRope && ti.form == kRawForm;

    // ---- raw form: rotate this K tile in shared memory, once for all warps --------------------
    if (raw) {
      rotate_key_tile<T, D, kThreads>(ks, cs_kbase, cs_koff, half, interleaved, tid);
      __syncthreads();
    }

    // ---- the rotated query: each warp (re)writes its own rows when the rotation changes ------
    const std::int64_t delta = delta_of(ti);
    if (!q_ready || (kRope && delta != q_delta)) {
      const float scale = p.sm_scale_log2;
      rotate_query_rows<T, D>(q_raw, q_rot, warp_row0, 16 * MT, lane, cs_seg, cs_koff,
                              15 * row_step, kRope ? rotary : 0, interleaved, __ffs(G) - 1,
                              kRope ? scale * p.rope.query_scale : scale, scale);
      __syncwarp();
      q_delta = delta;
      q_ready = true;
    }

    // ---- S = Q K^T: 16 MT rows x 64 keys per warp ------------------------------------------------
    float sc[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < 8; ++n) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
      std::uint32_t kb[4][4];
#pragma unroll
      for (int n2 = 0; n2 < 4; ++n2) {
        int key = 16 * n2 + (mi >> 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(kb[n2], ptx::smem_addr(ks + swizzle<D>(key, 2 * kk + (mi & 1))));
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        std::uint32_t qa[4];
        const int row = warp_row0 + 16 * mt + (mi & 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(qa, ptx::smem_addr(q_rot + swizzle<D>(row, 2 * kk + (mi >> 1))));
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          ptx::mma_16816<T>(sc[mt][2 * n2], qa, kb[n2][0], kb[n2][1]);
          ptx::mma_16816<T>(sc[mt][2 * n2 + 1], qa, kb[n2][2], kb[n2][3]);
        }
      }
    }

    // ---- masks: keys past the tile, and the causal tail -----------------------------------------
    const bool tail_mask = ti.is_tail && ti.key0 + ti.rows - 1 > causal_offset + i_first;
    if (ti.rows < kTileKeys || tail_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            int key = 8 * n + 2 * t4 + (e & 1);
            bool hidden = key >= ti.rows;
            if (tail_mask)
              hidden = hidden || ti.key0 + key > causal_offset + i_first +
                                     (warp_row0 + 16 * mt + g + 8 * (e >> 1)) / G;
            if (hidden) sc[mt][n][e] = -INFINITY;
          }
    }

    // ---- online softmax (log2 units: the scale is folded into the query) ----------------------
    // Every tile rescales (by exactly 1 where the max stayed): the skip of the other kernels
    // (warp_needs_rescale) has not been measured on this one.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float scale = online_softmax_row<8>(
            [&](int n, int e) -> float& { return sc[mt][n][2 * h + e]; }, row_max[mt][h],
            row_sum[mt][h]);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          acc[mt][n][2 * h] *= scale;
          acc[mt][n][2 * h + 1] *= scale;
        }
      }
    }

    // V of this tile has landed; every warp is past Q K^T, so the K buffer takes the next tile.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < tile_end) stream.issue_one(stream.k, cur, pages, ks);
    ptx::cp_async_commit();

    // ---- O += P V ------------------------------------------------------------------------------
#pragma unroll
    for (int kv = 0; kv < 4; ++kv) {
      std::uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = ptx::pack2<T>(sc[mt][2 * kv][0], sc[mt][2 * kv][1]);
        pa[mt][1] = ptx::pack2<T>(sc[mt][2 * kv][2], sc[mt][2 * kv][3]);
        pa[mt][2] = ptx::pack2<T>(sc[mt][2 * kv + 1][0], sc[mt][2 * kv + 1][1]);
        pa[mt][3] = ptx::pack2<T>(sc[mt][2 * kv + 1][2], sc[mt][2 * kv + 1][3]);
      }
      const int v_row = 16 * kv + (mi & 1) * 8 + (lane & 7);
#pragma unroll
      for (int c = 0; c < D / 8; c += 2) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, ptx::smem_addr(vs + swizzle<D>(v_row, c + (mi >> 1))));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ptx::mma_16816<T>(acc[mt][c], pa[mt], vb[0], vb[1]);
          ptx::mma_16816<T>(acc[mt][c + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }

    // The next tile's tables, read after the next top barrier (every warp is past this tile's
    // uses); computed here, where the scores are dead, to keep register pressure off the softmax.
    if (kRope && tile + 1 < tile_end) {
      const std::int64_t next_delta = delta_of(cur);
      if (next_delta != delta) compute_seg(next_delta);
      if (cur.form == kRawForm) compute_kbase(cur);
    }
  }
  ptx::cp_async_wait<0>();

  // ---- outputs: normalise and write this thread's rows ----------------------------------------
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store_output_row<T, D>(
          p, [&](int n, int e) { return acc[mt][n][2 * h + e]; }, row_max[mt][h], row_sum[mt][h],
          warp_row0 + 16 * mt + g + 8 * h, rows_here, row_begin, q_row0, kv_head, G, t4);
}

}  // namespace lazyattn::cuda::detail
