// Paged prefill with deferred RoPE on tensor cores (FlashAttention-2 style, mma.sync m16n8k16):
// a request's new tail tokens attend fully to every document segment and causally to the tail.
// Covers tail prefill (the RAG question), chunked prefill (a chunk appended to an existing tail:
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/wgmma.cuh"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

struct PrefillParams {
  const void* q = nullptr;     // [num_queries, num_qo_heads, head_dim], un-rotated
  void* o = nullptr;           // [num_queries, num_qo_heads, head_dim]
  float* maybe_lse = nullptr;  // [num_queries, num_qo_heads], natural log; may be null
  // 1: each query row arrives rotated at its own position m_i (a model's q), so every row's
  // rotation counts from 0 rather than from m_i: R(m_i - s) q = R(-s) R(m_i) q.
  std::int32_t query_rotated = 0;
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  std::int64_t page_stride = 0;
  std::int64_t head_stride = 0;
  PlanView plan;
  DecodeScheduleView sched;
  RopeView rope;
  float sm_scale_log2 = 0.0f;
  std::int32_t num_qo_heads = 0;
  std::int32_t group_size = 0;
  std::int32_t page_size_log2 = 0;
  // Split-KV (kv_splits > 1): each CTA (blockIdx.z = split) writes its normalised fp32 output
  // and log2-sum-exp to [split][query * num_qo_heads + head], merged by prefill_merge_kernel.
  std::int32_t kv_splits = 1;
  float* partial_o = nullptr;    // [kv_splits][num_queries * num_qo_heads][head_dim]
  float* partial_lse = nullptr;  // [kv_splits][num_queries * num_qo_heads], log2 units
};

namespace detail {

inline constexpr int kPrefillRows = kPrefillRowsPerQtile;

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

// The end of the key tiles a query tile reads: the request's, less the tail tiles wholly past its
// last visible tail key. Those exist only when the tail is the request's last segment; then its
// tiles close the request's run at keys 0, 64, 128, ... (make_prefill_schedule), so their count
// follows from the last record alone: one load. Dropping them one record at a time was a chain
// of dependent loads before every CTA's first tile (up to 63 at encode 4096, half that on
// average), where Nsight Compute found 10-11% of the warp-specialised kernel's stall samples.
__device__ __forceinline__ int visible_tile_end(const TileInfo* tiles, int tile_begin,
                                                int tile_end, int max_visible_tail) {
  if (tile_end <= tile_begin) return tile_end;
  const TileInfo last = tiles[tile_end - 1];
  if (!last.is_tail || last.key0 <= max_visible_tail) return tile_end;
  return tile_end - (last.key0 / kTileKeys - max_visible_tail / kTileKeys);
}

// The key tiles a CTA of request b reads, [tile_begin, tile_end): one work item per request spans
// all its tiles; the tail tiles none of the CTA's rows sees are dropped (visible_tile_end), and
// split blockIdx.z takes its share of the rest.
__device__ __forceinline__ void cta_tile_range(const PrefillParams& p, int b, int max_visible_tail,
                                               int& tile_begin, int& tile_end) {
  tile_begin = p.sched.work_tile_begin[b];
  tile_end =
      visible_tile_end(p.sched.tiles, tile_begin, p.sched.work_tile_end[b], max_visible_tail);
  if (p.kv_splits > 1) {
    const int n = tile_end - tile_begin, z = blockIdx.z;
    tile_end = tile_begin + static_cast<int>(static_cast<std::int64_t>(n) * (z + 1) / p.kv_splits);
    tile_begin += static_cast<int>(static_cast<std::int64_t>(n) * z / p.kv_splits);
  }
}

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
  {
    constexpr int kChunks = D / 8;
    const int chunk = tid % kChunks;
    const T* q = static_cast<const T*>(p.q);
    for (int r = tid / kChunks; r < kPrefillRows; r += kThreads / kChunks) {
      bool valid = r < rows_here;
      int rr = valid ? r : 0;
      std::int64_t src = (static_cast<std::int64_t>(q_row0 + i_first + rr / G) * p.num_qo_heads +
                          kv_head * G + rr % G) *
                             D +
                         chunk * 8;
      ptx::cp_async_16(ptx::smem_addr(q_raw + swizzle<D>(r, chunk)), q + src, valid);
    }
  }

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
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(sc[mt][n][2 * h], sc[mt][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(row_max[mt][h], mx);
        float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: exp2 -> 0, no NaN
        float scale = ptx::exp2_approx(row_max[mt][h] - m_use);
        row_max[mt][h] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          sc[mt][n][2 * h] = ptx::exp2_approx(sc[mt][n][2 * h] - m_use);
          sc[mt][n][2 * h + 1] = ptx::exp2_approx(sc[mt][n][2 * h + 1] - m_use);
          sum += sc[mt][n][2 * h] + sc[mt][n][2 * h + 1];
        }
        row_sum[mt][h] = row_sum[mt][h] * scale + sum;
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
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = row_sum[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = warp_row0 + 16 * mt + g + 8 * h;
      if (r >= rows_here) continue;
      const int R = row_begin + r;
      const std::int64_t out_row = static_cast<std::int64_t>(q_row0 + R / G) * p.num_qo_heads +
                                   kv_head * G + R % G;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const float lse2 = sum > 0.0f ? row_max[mt][h] + log2f(sum) : -INFINITY;
      if (p.kv_splits > 1) {
        const std::int64_t slot =
            static_cast<std::int64_t>(blockIdx.z) * p.plan.num_queries * p.num_qo_heads + out_row;
        float* o = p.partial_o + slot * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(o + n * 8 + 2 * t4) =
              make_float2(acc[mt][n][2 * h] * inv, acc[mt][n][2 * h + 1] * inv);
        if (t4 == 0) p.partial_lse[slot] = lse2;
        continue;
      }
      T* o = static_cast<T*>(p.o) + out_row * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        std::uint32_t v = ptx::pack2<T>(acc[mt][n][2 * h] * inv, acc[mt][n][2 * h + 1] * inv);
        *reinterpret_cast<std::uint32_t*>(o + n * 8 + 2 * t4) = v;
      }
      if (t4 == 0 && p.maybe_lse) p.maybe_lse[out_row] = lse2 * 0.6931471805599453f;
    }
  }
}

// The same prefill on Hopper's warpgroup MMA (PrefillKernel::kWgmma; kAuto picks its
// warp-specialised form, kWgmmaWs, described after this list, where it applies): head dim 128,
// 16-bit, local form with full rotate-half rotary dims (everything else runs on the mma.sync
// kernel above). Two warpgroups own 64 query rows each of the CTA's 128.
//  - K/V: a ring of kWgmmaStages tiles loaded by cp.async (all threads) in the blocked
//    128-byte-swizzle layout wgmma's descriptors read; K issued two tiles ahead, V one; one CTA
//    barrier per tile.
//  - Query: wgmma's A operand comes from registers (each thread's fragments, kept in
//    thread-private shared memory between S issues). Once per CTA each thread rotates its own
//    query elements to their absolute positions m (R(m) q, scaled, fp32) into shared memory; a
//    segment starting at s then needs R(m - s) q = R(-s) (R(m) q): one cos/sin per rotary pair,
//    the same for every row, and one rounding to 16 bits. A new segment's query is built
//    between the loops over two segments' tiles (no wgmma in flight; one warpgroup barrier), so
//    the loop over a segment's tiles has no RoPE code.
//  - Overlap inside a warpgroup (FlashAttention-3's order): S(j) and P(j-1) V(j-1) are issued
//    back to back; tile j's softmax runs under P V; O is rescaled after the wait.
//  - Overlap between the warpgroups (FlashAttention-3's ping-pong): warpgroup 0 passes tile
//    j's CTA barrier before issuing its wgmmas, warpgroup 1 right after issuing them, so one's
//    softmax runs while the other's wgmmas do.
//  Measured on the H200: docs/performance.md ("the Hopper kernel").
inline constexpr int kWgmmaPrefillThreads = 256;
inline constexpr int kWgmmaStages = 4;
// Warp-specialised variant (PrefillKernel::kWgmmaWs): a third warpgroup loads the K/V ring.
inline constexpr int kWgmmaWsThreads = kWgmmaPrefillThreads + 128;
// Variants of the warp-specialised kernel measured on the H200 and dropped
// (bench/results/2026-11-30-h200-prefill-ws/): the computing warpgroups issuing without turns
// (RAG tail 1-2% slower), the query fragments in thread-private shared memory between tiles as
// in the two-warpgroup form (2-4% slower with RoPE on), a CTA within one segment choosing at run
// time, inline in the general kernel, to rotate its query straight to R(m - s) into the fragments
// (encode 4096 equal, RAG tail 1% slower; the one-segment form, kOneSeg below, does it out of
// line in a kernel of its own: 2.8% faster), the loader retiring and fencing its own copies before it arrives on full
// (the computing warps' per-tile fence gone: 2-5% slower).
struct WgmmaPrefillShape {
  static constexpr int D = 128;
  static constexpr int kTileBytes = kTileKeys * D * 2;      // 16 KiB
  static constexpr int kStages = 0;                         // [stage][K, V] tiles
  // Until the prologue has read them, the raw query tile (blocked layout, 32 KiB) lies in the
  // last ring stage and the query's cos/sin tables in the one before (the K/V stream fills
  // those two after the prologue).
  static constexpr int kQRaw = kStages + (kWgmmaStages - 1) * 2 * kTileBytes;
  // [8][64] float2: R(m_first + 16a), in the V slot of the stage before
  static constexpr int kCsQ = kStages + (kWgmmaStages - 2) * 2 * kTileBytes + kTileBytes;
  static constexpr int kCsOff = kCsQ + 8 * (D / 2) * 8;     // [16][64] float2: R(0 .. 15)
  // [32][kWgmmaPrefillThreads] float2: thread t's query elements R(m) q at [i][t] (64 KiB)
  static constexpr int kQPre = kStages + kWgmmaStages * 2 * kTileBytes;
  // [8][kWgmmaPrefillThreads] uint4: thread t's A fragments of k-step kk at [kk][t] (32 KiB)
  static constexpr int kQFrag = kQPre + 32 * kWgmmaPrefillThreads * 8;
  // [wg][64] float2: R(-s) for the segment being built
  static constexpr int kCsSeg = kQFrag + 8 * kWgmmaPrefillThreads * 16;
  static constexpr int kTurns = kCsSeg + 2 * (D / 2) * 8;   // [64] Q0.64 angles per position
  static constexpr int kSmemBytes = kTurns + (D / 2) * 8;
  // Warp-specialised variant: mbarriers full[stage] (the loading warpgroup's copies landed) and
  // empty[stage] (both computing warpgroups are done with the stage), after everything else.
  static constexpr int kWsBars = kSmemBytes;
  static constexpr int kWsSmemBytes = kWsBars + 2 * kWgmmaStages * 8;
  static_assert(kCsOff + 16 * (D / 2) * 8 <= kQRaw, "the cos/sin tables fit their V slot");
  static_assert(kPrefillRows * D * 2 == 2 * kTileBytes, "the raw query fills one ring stage");
};

// Keeps the compiler from moving reads or writes of registers an in-flight wgmma owns across
// the issue and the wait (the asm statements below are ordered with the wgmma ones).
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// The wgmma kernel's raw query (blocked_swizzle layout in shared memory, head dim 128): the
// pairs at dims col, col + 1 and col + 64, col + 65 of `row`, in fp32.
template <class T>
__device__ __forceinline__ void wgmma_query_pairs(const T* q_raw, int row, int col, float2& x,
                                                  float2& y) {
  constexpr int D = 128;
  const T* x_at = q_raw + blocked_swizzle<D, kPrefillRows>(row, col >> 3) + (col & 7);
  const T* y_at = q_raw + blocked_swizzle<D, kPrefillRows>(row, (col + D / 2) >> 3) + (col & 7);
  x = ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(x_at));
  y = ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(y_at));
}

// Index of this thread's q_pre entry for A fragment (kk, r): dims col, col + 1 (hi = 0) or
// col + 64, col + 65 (hi = 1), col = 16 kk + 2 t4 + 8 (r / 2).
__device__ __forceinline__ int wgmma_q_pre_index(int kk, int r, int hi, int tid) {
  return (2 * (4 * kk + r) + hi) * kWgmmaPrefillThreads + tid;
}

// A-fragment entry (kk, r) of the thread owning rows row_a, row_a + 8 (queries ia, ib) and
// columns 16 kk + 2 t4 + {0, 1, 8, 9}: the raw pairs (col, col + 64) and (col + 1, col + 65) times
// `scale`, rotated in fp32 by their query's angle, the coarse table at 16 (i / 16) combined with
// the offset table at i % 16 (x: dims col, col + 1; y: dims col + 64, col + 65).
template <class T>
__device__ __forceinline__ void wgmma_rotated_query_pairs(const T* q_raw, const float2* cs_q,
                                                          const float2* cs_off, int row_a, int ia,
                                                          int ib, int t4, int kk, int r,
                                                          float scale, float2& x, float2& y) {
  constexpr int kHalf = 64;
  const int col = 16 * kk + 2 * t4 + 8 * (r >> 1);
  wgmma_query_pairs(q_raw, row_a + 8 * (r & 1), col, x, y);
  x.x *= scale, x.y *= scale, y.x *= scale, y.y *= scale;
  const int i = (r & 1) ? ib : ia;
  const float2* coarse = cs_q + (i >> 4) * kHalf + col;
  const float2* fine = cs_off + (i & 15) * kHalf + col;
  rotate_pair(x.x, y.x, combine_angles(coarse[0], fine[0]));
  rotate_pair(x.y, y.y, combine_angles(coarse[1], fine[1]));
}

// The wgmma kernel's prologue rotation, out of line: R(m) q * scale into q_pre, the angle of
// query row i (= row / G) from the coarse table at 16 (i / 16) combined with the offset table at
// i % 16. Thread `tid` owns rows row_a and row_a + 8 and the A-fragment columns
// 16 kk + 2 t4 + {0, 1, 8, 9} (+ 64), stored at wgmma_q_pre_index.
// __noinline__: ptxas allocates its registers apart from the kernel's. Inlined, this code moved
// the schedule of the RoPE build's tile loop: 1-2% slower on the RAG tail and the encodings on
// the H200. The segment rebuild stays inline: out of line, a call at every rebuild cost 5-11%
// (bench/results/2026-11-30-h200-prefill-rebuild/).
template <class T>
__device__ __noinline__ void wgmma_rotate_query(const T* q_raw, float2* q_pre, const float2* cs_q,
                                                const float2* cs_off, int row_a, int G, int t4,
                                                int tid, float q_scale) {
  constexpr int D = 128;
  const int ia = row_a / G, ib = (row_a + 8) / G;
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float2 x, y;
      wgmma_rotated_query_pairs(q_raw, cs_q, cs_off, row_a, ia, ib, t4, kk, r, q_scale, x, y);
      q_pre[wgmma_q_pre_index(kk, r, 0, tid)] = x;
      q_pre[wgmma_q_pre_index(kk, r, 1, tid)] = y;
    }
  }
}

// The one-segment prologue's rotation, out of line (as wgmma_rotate_query, whose tables it
// reads): R(m - s) q, the scale folded into the coarse table, rounded once into the A fragments
// of this thread (q_frag[kk][tid] as store_fragments lays them out), for a CTA whose keys all lie
// in one segment: no fp32 R(m) q and no build pass.
template <class T>
__device__ __noinline__ void wgmma_rotate_query_frag(const T* q_raw, uint4* q_frag,
                                                     const float2* cs_q, const float2* cs_off,
                                                     int row_a, int G, int t4, int tid) {
  constexpr int D = 128;
  const int ia = row_a / G, ib = (row_a + 8) / G;
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
    std::uint32_t lo[4], hi[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float2 x, y;  // the scale is in cs_q (x 1.0f folds away)
      wgmma_rotated_query_pairs(q_raw, cs_q, cs_off, row_a, ia, ib, t4, kk, r, 1.0f, x, y);
      lo[r] = ptx::pack2<T>(x.x, x.y);
      hi[r] = ptx::pack2<T>(y.x, y.y);
    }
    q_frag[kk * kWgmmaPrefillThreads + tid] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    q_frag[(kk + D / 32) * kWgmmaPrefillThreads + tid] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  }
}

// kWs (PrefillKernel::kWgmmaWs): warp-specialised, FlashAttention-3's division of labour.
// Warpgroups 0 and 1 compute as above; warpgroup 2 (24 registers; the others take 240 with
// setmaxnreg) streams the K/V tiles into the ring with cp.async and signals each stage on an
// mbarrier (full); the computing warps release a stage on another (empty) once both its wgmmas
// are done. The computing warpgroups no longer meet at a CTA barrier per tile nor issue loads;
// they take turns issuing their wgmmas (two named barriers), so one's softmax runs under the
// other's tensor-core work.
// kOneSeg (warp-specialised, RoPE on; the launcher picks it when every request has at most one
// segment: document encodings, chunks of a tail without documents): the query is rotated once,
// straight to R(m - s), and the code that rebuilds it between segments is compiled out. On the
// H200: encode 4096 2.8% faster, encode 16384 0.1-1% (bench/results/
// 2026-11-30-h200-prefill-prologue/, call o).
template <class T, bool kRope, bool kWs = false, bool kOneSeg = false>
__global__ void __launch_bounds__(kWs ? kWgmmaWsThreads : kWgmmaPrefillThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(!kOneSeg || (kRope && kWs), "the one-segment form is warp-specialised, RoPE on");
  using Shape = WgmmaPrefillShape;
  constexpr int D = Shape::D;
  constexpr int kThreads = kWgmmaPrefillThreads;
  constexpr int S = kWgmmaStages;
  constexpr int KSteps = D / 16;
  constexpr int kHalf = D / 2;  // rotary pairs (rotary_dim == D here)
  extern __shared__ __align__(1024) unsigned char smem[];
  if ((ptx::smem_addr(smem) & 1023u) != 0) __trap();  // the swizzle keys on address bits
  T* q_raw = reinterpret_cast<T*>(smem + Shape::kQRaw);
  float2* q_pre = reinterpret_cast<float2*>(smem + Shape::kQPre);
  uint4* q_frag = reinterpret_cast<uint4*>(smem + Shape::kQFrag);
  float2* cs_seg = reinterpret_cast<float2*>(smem + Shape::kCsSeg);  // [wg][pair]
  float2* cs_q = reinterpret_cast<float2*>(smem + Shape::kCsQ);      // [8][pair]
  float2* cs_off = reinterpret_cast<float2*>(smem + Shape::kCsOff);  // [16][pair]
  std::uint64_t* s_turns = reinterpret_cast<std::uint64_t*>(smem + Shape::kTurns);

  // Heaviest query tiles first (the last ones see the most keys under causal masks), every KV
  // head of a query tile before the next: the longest-processing-time order over the whole grid.
  const int num_kv_heads = p.num_qo_heads / p.group_size;
  const int qtile = p.sched.num_qtiles - 1 - static_cast<int>(blockIdx.x / num_kv_heads);
  const int kv_head = static_cast<int>(blockIdx.x % num_kv_heads);
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int wg = warp >> 2;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  // This thread's two rows of the CTA's 128: warpgroup wg owns 64, its warps 16 each.
  const int row_a = wg * 64 + (warp & 3) * 16 + g;  // and row_a + 8

  const int b = p.sched.qtile_request[qtile];
  const int row_begin = p.sched.qtile_row_begin[qtile];
  const int G = p.group_size;
  const int q_row0 = p.plan.request_query_indptr[b];
  const int nq = p.plan.request_query_indptr[b + 1] - q_row0;
  const int rows_here = min(kPrefillRows, nq * G - row_begin);
  const int i_first = row_begin / G;
  // As in prefill_kernel: 0 and no per-row step for queries rotated at their own positions.
  const std::int64_t m_first = p.query_rotated ? 0 : p.plan.request_query_position[b] + i_first;
  const int row_step = p.query_rotated ? 0 : 1;
  const int causal_offset = p.plan.segment_length[p.plan.request_tail_segment[b]] - nq;
  const int max_visible_tail = causal_offset + (row_begin + rows_here - 1) / G;
  const int rope_set = p.rope.per_request ? b : 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * kHalf;
  const float2* offset_cs =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * kHalf;

  int tile_begin, tile_end;
  cta_tile_range(p, b, max_visible_tail, tile_begin, tile_end);

  // Warp-specialised: barriers; then warpgroup 2 loads the ring and leaves.
  const std::uint32_t ws_bars = ptx::smem_addr(smem + Shape::kWsBars);
  auto full_bar = [&](int stage) { return ws_bars + 8u * static_cast<unsigned>(stage); };
  auto empty_bar = [&](int stage) { return ws_bars + 8u * static_cast<unsigned>(S + stage); };
  if constexpr (kWs) {
    if (tid == 0) {
      for (int st = 0; st < S; ++st) {
        ptx::mbarrier_init(full_bar(st), 128);  // the loading threads' cp.async arrivals
        ptx::mbarrier_init(empty_bar(st), 8);   // one per computing warp
      }
      ptx::fence_barrier_init();
    }
    __syncthreads();
    if (tid >= kThreads) {
      ptx::setmaxnreg_dec<24>();
      // Stages 2 and 3 hold the prologue's tables and raw query until the computing warps have
      // read them: a CTA barrier (here in hand_over before stage 2, there after the prologue)
      // orders their reads before these writes.
      const int ltid = tid - kThreads;
      const int lwarp = ltid >> 5;
      const T* k_head = static_cast<const T*>(p.k_pool) + kv_head * p.head_stride;
      const T* v_head = static_cast<const T*>(p.v_pool) + kv_head * p.head_stride;
      T* stages = reinterpret_cast<T*>(smem + Shape::kStages);
      const int chunk = lane % (D / 8);      // the 16-byte chunk of a row this thread copies
      const int row_in = 2 * lwarp + lane / (D / 8);  // its first row; then every 8 rows
      const int at_row_in = blocked_swizzle<D, kTileKeys>(row_in, chunk);
      const int slot_mask = (1 << p.page_size_log2) - 1;
      prefetch_tile_records(p.sched.tiles, tile_begin, tile_end, ltid, 128);
      // The hand-over: this warpgroup also passes the computing warps' prologue barriers (the
      // tables' inputs stored; the raw query landed), CTA barriers, then the one that lets it
      // write stages 2 and 3. With the first two over the computing warps alone (named
      // barriers), or over the whole CTA with this warpgroup arriving (bar.arrive),
      // compute-sanitizer racecheck reported the prologue's reads against these writes as WAR
      // hazards; so it did in the hand-over probe (tests/cuda/test_handover.cu), a race-free
      // program, whenever its readers passed a named barrier before the CTA barrier.
      auto hand_over = [&] {
        if constexpr (kRope && !kOneSeg) __syncthreads();
        if (tile_begin < tile_end) __syncthreads();
        __syncthreads();
      };
      for (int tile = tile_begin, it = 0; tile < tile_end; ++tile, ++it) {
        const int stage = it % S;
        if (it == 2) hand_over();
        if (it >= S)
          ptx::mbarrier_wait(empty_bar(stage), static_cast<std::uint32_t>((it / S - 1) & 1));
        const TileInfo ti = p.sched.tiles[tile];
        // TileStream::issue's gather without its page id per row (8 registers the loader does
        // not have): the tile's pages (key0 is a multiple of 64, so at most 64 / page_size of
        // them), lane j reading page j, the rows taking theirs by shuffle. Written here, not as
        // a TileStream member or a helper: both compiled with 3x the loader's spills.
        const int first = ti.page_base + (ti.key0 >> p.page_size_log2);
        const int npages = ((ti.rows - 1) >> p.page_size_log2) + 1;
        const int my_page = lane < npages ? p.plan.page_ids[first + lane] : 0;
        T* ks = stages + stage * 2 * kTileKeys * D;
        T* vs = ks + kTileKeys * D;
        // Row r = row_in + 8 i, addressed from this tile's key_r = key0 + row_in: with r or
        // row_in + 8 i in the loop, ptxas hoisted the seven row numbers out of it and, with 24
        // registers, spilled lane, at_row_in and a flag (three local loads per tile, RoPE builds).
        const int key_r = ti.key0 + row_in;
        const int left = ti.rows - row_in;  // rows of the tile from row_in on
        const int page0 = ti.key0 >> p.page_size_log2;
#pragma unroll
        for (int i = 0; i < kTileKeys / 8; ++i) {
          const int key = key_r + 8 * i;
          const bool valid = 8 * i < left;
          // Past the tile's rows the copy reads 0 bytes (valid false); its address stays in the
          // pool: one of the tile's pages, or page 0 from a lane past npages.
          const int page = __shfl_sync(0xffffffffu, my_page, (key >> p.page_size_log2) - page0);
          const std::int64_t off = static_cast<std::int64_t>(page) * p.page_stride +
                                   static_cast<std::int64_t>(key & slot_mask) * D + chunk * 8;
          // Row r's swizzle phase (r % 8) is row_in's, so its offset is row_in's plus 8 i rows,
          // a constant. Computed per row, ptxas kept eight offsets live across the loop and
          // spilled them (11 local loads per tile in the RoPE build).
          const int at = at_row_in + blocked_swizzle<D, kTileKeys>(8 * i, 0);
          ptx::cp_async_16(ptx::smem_addr(ks + at), k_head + off, valid);
          ptx::cp_async_16(ptx::smem_addr(vs + at), v_head + off, valid);
        }
        ptx::cp_async_mbarrier_arrive_noinc(full_bar(stage));
      }
      if (tile_end - tile_begin <= 2) hand_over();  // the loop did not reach it == 2
      ptx::cp_async_wait<0>();
      return;
    }
    ptx::setmaxnreg_inc<240>();
  }

  // ---- the raw query tile (blocked layout), zero past the request: joins the first tile's group
  {
    constexpr int kChunks = D / 8;
    const int chunk = tid % kChunks;
    const T* q = static_cast<const T*>(p.q);
    for (int r = tid / kChunks; r < kPrefillRows; r += kThreads / kChunks) {
      bool valid = r < rows_here;
      int rr = valid ? r : 0;
      std::int64_t src = (static_cast<std::int64_t>(q_row0 + i_first + rr / G) * p.num_qo_heads +
                          kv_head * G + rr % G) *
                             D +
                         chunk * 8;
      ptx::cp_async_16(ptx::smem_addr(q_raw + blocked_swizzle<D, kPrefillRows>(r, chunk)), q + src,
                       valid);
    }
  }

  // K/V ring of S stages: tile j's iteration reads K(j) and V(j - 1) (P(j - 1) V(j - 1) runs
  // under tile j's softmax). TileStream's split lead: K two tiles ahead, V one. Until the
  // prologue has read them, the raw query lies in stage 3, the cos/sin tables in stage 2's V.
  static_assert(S == 4, "the split lead and the prologue's staging assume four stages");
  using Stream = TileStream<T, D, kThreads, S, true>;
  Stream stream = Stream::for_head(p, kv_head, tile_end, tid,
                                   reinterpret_cast<T*>(smem + Shape::kStages));
  if constexpr (kWs) {
    ptx::cp_async_commit();  // the raw query's copies (the loading warpgroup streams K/V)
  } else {
    stream.prefetch_records(tile_begin, tid);
    if (tile_begin < tile_end) stream.start_split(tile_begin);
    else ptx::cp_async_commit();  // the raw query's copies, waited for at the end
  }

  // cos/sin of -s (segment start s) for every rotary pair, into this warpgroup's buffer (its
  // first 64 threads; the caller syncs the warpgroup before anyone reads).
  const int wg_tid = tid % 128;
  auto compute_seg = [&](std::int64_t seg_start) {
    if (wg_tid < kHalf) cs_seg[wg * kHalf + wg_tid] = rope_cos_sin(-seg_start, s_turns[wg_tid]);
  };
  // Tile records rolled two tiles ahead (cur, next, n2: each read two tiles before it is needed;
  // two-warpgroup form: the last from the stream). Warp-specialised: only what the softmax
  // needs of a tile (its keys, whether it is the tail's), the whole record only for the next
  // run's first tile, ti_run (rolling whole records cost its RoPE build 3% more instructions
  // per tile than RoPE off). Two-warpgroup form: whole records, next being the run's first
  // (the keys-only form ran it 9% slower on the H200: ptxas scheduled its loop differently).
  struct TileKeys {
    int key0, rows, is_tail;
  };
  using Rolled = std::conditional_t<kWs, TileKeys, TileInfo>;
  auto roll = [](const TileInfo& t) {
    if constexpr (kWs) return TileKeys{t.key0, t.rows, t.is_tail};
    else return t;
  };
  auto load_keys = [&](int t) {  // past the end: no keys (as TileStream::info_nb)
    const TileInfo* r = p.sched.tiles + min(t, tile_end - 1);
    return TileKeys{r->key0, t < tile_end ? r->rows : 0, r->is_tail};
  };
  const TileInfo first = stream.info(tile_begin);
  TileInfo ti_run = stream.info(tile_begin + 1);
  Rolled r_cur = roll(first), r_next = roll(ti_run), r_n2;
  // The record of the tile that starts the next run.
  auto run_record = [&]() -> const TileInfo& {
    if constexpr (kWs) return ti_run;
    else return r_next;
  };
  std::int64_t q_seg_start = first.seg_start;  // the segment the query is built for
  constexpr bool kQReg = kWs;  // qf holds the query between tiles (warp-specialised form)
  const float q_scale = kRope ? p.sm_scale_log2 * p.rope.query_scale : p.sm_scale_log2;
  if constexpr (kOneSeg) {
    // Tables for R(m - s), the scale folded into the coarse one, each thread's angle steps read
    // from global memory: no barrier before the raw query's (run's first), which orders these
    // writes before every read (the loader passes one barrier fewer in its hand_over).
    // (Offset row 0 is the identity: every row of a pre-rotated query takes it.)
    for (int i = tid; i < 16 * kHalf; i += kThreads)
      cs_off[i] = offset_cs[row_step ? i : i % kHalf];
    const int coarse_rows = (kPrefillRows / G + 15) / 16;
    const std::int64_t base = m_first - first.seg_start;
    for (int i = tid; i < coarse_rows * kHalf; i += kThreads) {
      const float2 c = rope_cos_sin(base + 16 * row_step * (i / kHalf), turns[i % kHalf]);
      cs_q[i] = make_float2(c.x * q_scale, c.y * q_scale);
    }
  } else if (kRope) {
    for (int i = tid; i < 16 * kHalf; i += kThreads)
      cs_off[i] = offset_cs[row_step ? i : i % kHalf];
    for (int j = tid; j < kHalf; j += kThreads) s_turns[j] = turns[j];
    __syncthreads();  // warp-specialised: the loader too (its hand_over)
    const int coarse_rows = (kPrefillRows / G + 15) / 16;
    for (int i = tid; i < coarse_rows * kHalf; i += kThreads)
      cs_q[i] = rope_cos_sin(m_first + 16 * row_step * (i / kHalf), s_turns[i % kHalf]);
    compute_seg(q_seg_start);  // read after the prologue's barrier
  }

  // This thread's query elements, as wgmma's A fragments (mma.sync's A layout): k-step kk,
  // [0] (row_a, c..c+1), [1] (row_a + 8, c..), [2] (row_a, c+8..), [3] (row_a + 8, c+8..),
  // c = 16 kk + 2 t4, packed in q_frag[kk][tid] and loaded right before each S: held in registers
  // only while an S is in flight, they leave the softmax and a segment's rebuild their room.
  // Pair (col, col + 64) of fragment (kk, r), kk < 4, is q_pre entry 2 (4 kk + r) (dims col,
  // col + 1) and 2 (4 kk + r) + 1 (dims col + 64, col + 65).
  std::uint32_t qf[KSteps][4];
  auto store_fragments = [&] {
    if constexpr (!kQReg) {
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk)
        q_frag[kk * kThreads + tid] = make_uint4(qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
    }
  };
  // Prologue (the raw query landed): R(m) q * scale into q_pre (kRope, out of line), or
  // q * scale into qf; kOneSeg: R(m - s) q * scale into qf, through this thread's q_frag entries
  // (out of line; its own entries, so no barrier).
  auto prepare_query = [&] {
    if constexpr (kOneSeg) {
      wgmma_rotate_query_frag<T>(q_raw, q_frag, cs_q, cs_off, row_a, G, t4, tid);
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        const uint4 f = q_frag[kk * kThreads + tid];
        qf[kk][0] = f.x, qf[kk][1] = f.y, qf[kk][2] = f.z, qf[kk][3] = f.w;
      }
    } else if constexpr (kRope) {
      wgmma_rotate_query<T>(q_raw, q_pre, cs_q, cs_off, row_a, G, t4, tid, q_scale);
    } else {
#pragma unroll
      for (int kk = 0; kk < KSteps / 2; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = row_a + 8 * (r & 1);
          const int col = 16 * kk + 2 * t4 + 8 * (r >> 1);
          float2 x, y;
          wgmma_query_pairs(q_raw, row, col, x, y);
          qf[kk][r] = ptx::pack2<T>(x.x * q_scale, x.y * q_scale);
          qf[kk + KSteps / 2][r] = ptx::pack2<T>(y.x * q_scale, y.y * q_scale);
        }
      }
      store_fragments();
    }
  };
  // q_frag = R(-s) (R(m) q) for the segment whose cos/sin are in this warpgroup's buffer
  // (kRope only). Reads and writes this thread's own entries: no barrier with the prologue. The
  // four k-steps unrolled: a rebuild sits on both warpgroups' paths between two runs, so its
  // latency counts, not its registers (the loop's peak is higher); one k-step at a time ran the
  // RAG tail 2% slower on the H200 (bench/results/2026-11-30-h200-prefill-rebuild/).
  auto build_query = [&] {
    const float2* cs = cs_seg + wg * kHalf;
#pragma unroll
    for (int kk = 0; kk < KSteps / 2; ++kk) {
      std::uint32_t lo[4], hi[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = 16 * kk + 2 * t4 + 8 * h;
        const float4 c = *reinterpret_cast<const float4*>(cs + col);  // pairs col, col + 1
#pragma unroll
        for (int r = 2 * h; r < 2 * h + 2; ++r) {
          float2 x = q_pre[wgmma_q_pre_index(kk, r, 0, tid)];
          float2 y = q_pre[wgmma_q_pre_index(kk, r, 1, tid)];
          rotate_pair(x.x, y.x, make_float2(c.x, c.y));
          rotate_pair(x.y, y.y, make_float2(c.z, c.w));
          lo[r] = ptx::pack2<T>(x.x, x.y);
          hi[r] = ptx::pack2<T>(y.x, y.y);
        }
      }
      if constexpr (kQReg) {
#pragma unroll
        for (int r = 0; r < 4; ++r) qf[kk][r] = lo[r], qf[kk + KSteps / 2][r] = hi[r];
      } else {
        q_frag[kk * kThreads + tid] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        q_frag[(kk + KSteps / 2) * kThreads + tid] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      }
    }
  };
  // S = Q K^T for this warpgroup's 64 rows against the tile in ring stage `stage` (issued, not
  // waited for).
  auto issue_qk = [&](float (&s)[32], int stage) {
    const std::uint32_t k_addr = ptx::smem_addr(stream.k_stage(stage));
    if constexpr (!kQReg) {
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        const uint4 f = q_frag[kk * kThreads + tid];
        qf[kk][0] = f.x, qf[kk][1] = f.y, qf[kk][2] = f.z, qf[kk][3] = f.w;
      }
    }
    fence_operands(s);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
      const std::uint32_t kstep = (kk / 4) * (kTileKeys * 128) + (kk % 4) * 32;
      ptx::wgmma_rs_m64n64k16<T, false>(s, qf[kk], ptx::wgmma_desc(k_addr + kstep, 16, 1024),
                                        kk > 0);
    }
    ptx::wgmma_commit();
  };

  float o[D / 2];  // m64n128 accumulator: 16 column blocks x 4
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float s[32];
  std::uint32_t pa[4][4];  // P of the previous tile, wgmma's A operand for O += P V

  // O += P V for the tile in ring stage `stage` (issued, not waited for).
  auto issue_pv = [&](int stage) {
    const std::uint32_t v_addr = ptx::smem_addr(stream.v_stage(stage));
    fence_operands(o);
    ptx::wgmma_fence();
#pragma unroll
    for (int kv = 0; kv < 4; ++kv) {
      const std::uint64_t dv = ptx::wgmma_desc(v_addr + kv * 16 * 128, kTileKeys * 128, 1024);
      ptx::wgmma_rs_m64n128k16<T, true>(o, pa[kv], dv, 1);
    }
    ptx::wgmma_commit();
  };

  // The last tail key each of this thread's two rows sees, relative to the tail's first key.
  const int last_visible[2] = {causal_offset + i_first + row_a / G,
                               causal_offset + i_first + (row_a + 8) / G};
  [[maybe_unused]] const int first_visible = causal_offset + i_first;  // its first row's: least
  // Masks S for tile `ti` (keys past its rows; the tail's causal bound), takes the new row maxima
  // and turns S into P = 2^(S - max) with the row sums; returns the factors that rescale O.
  // No branches between the wait for S and the exponentials: at a branch ptxas waits for every
  // wgmma in flight (P V too), and the softmax no longer runs under it (seen in the SASS).
  // `masked` (compile time): false for a tile every row sees whole (warp-specialised form).
  auto softmax = [&](const Rolled& ti, float (&scale)[2], auto masked) {
    if constexpr (decltype(masked)::value) {
      int bound[2];  // keys [0, bound) of the tile are visible to the row
#pragma unroll
      for (int h = 0; h < 2; ++h)
        bound[h] = ti.is_tail ? min(ti.rows, last_visible[h] - ti.key0 + 1) : ti.rows;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[4 * n + e] = 8 * n + 2 * t4 + (e & 1) < bound[e >> 1] ? s[4 * n + e] : -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[h], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      scale[h] = ptx::exp2_approx(row_max[h] - m_use);
      row_max[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        s[4 * n + 2 * h] = ptx::exp2_approx(s[4 * n + 2 * h] - m_use);
        s[4 * n + 2 * h + 1] = ptx::exp2_approx(s[4 * n + 2 * h + 1] - m_use);
        sum += s[4 * n + 2 * h] + s[4 * n + 2 * h + 1];
      }
      row_sum[h] = row_sum[h] * scale[h] + sum;
    }
  };
  // O *= scale (no wgmma owns O), then P into pa.
  auto rescale_and_pack = [&](const float (&scale)[2]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[4 * n + e] *= scale[e >> 1];
#pragma unroll
    for (int kv = 0; kv < 4; ++kv)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kv][r] = ptx::pack2<T>(s[8 * kv + 2 * r], s[8 * kv + 2 * r + 1]);
  };
  // Between two tiles of different segments (no wgmma in flight): the query for the segment
  // starting at `seg_start`. Only here, outside the loop over a segment's tiles, which then has
  // no RoPE code at all (with it, the RoPE build ran 5-15% slower per tile).
  auto wg_barrier = [&] {
    if (wg == 0) ptx::named_barrier_sync<1, 128>();
    else ptx::named_barrier_sync<2, 128>();
  };
  auto rebuild_query = [&](std::int64_t seg_start) {
    wg_barrier();  // the last build's reads of the buffer are done (warpgroup 0 passes no CTA
                   // barrier between the prologue's build and the first run)
    compute_seg(seg_start);
    wg_barrier();
    build_query();
    q_seg_start = seg_start;
  };

  // ---- the tile loop, ping-pong between the warpgroups ----------------------------------------
  // CTA barrier B(t): every thread's loads of K(t) and V(t - 1) (issued at B(t - 2)) landed;
  // then K(t + 2) and V(t + 1) are issued (stage slots no in-flight wgmma of either warpgroup
  // reads, given where each passes the barrier). Warpgroup 0 passes B(t) before issuing tile
  // t's S and P V; warpgroup 1 passes B(t + 1) right after issuing them. So one warpgroup's
  // wgmmas run while the other computes its softmax (FlashAttention-3's ping-pong), with one
  // CTA barrier per tile.
  // Barrier 3 over the whole CTA (1 and 2 are the warpgroups' own).
  auto barrier_step = [&](int tile, int it) {
    ptx::cp_async_wait<1>();
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync<3, kThreads>();
    stream.step_split(tile, it);
  };
  // Warp-specialised: iteration it's stage landed (the loading warpgroup's cp.async writes, seen
  // by this thread's wgmmas through the async proxy).
  auto wait_full = [&](int it) {
    ptx::mbarrier_wait(full_bar(it % S), static_cast<std::uint32_t>((it / S) & 1));
    ptx::fence_proxy_async_smem();
  };
  // Warp-specialised turns: warpgroup w issues after bar.sync 5 + w and hands over with
  // bar.arrive 6 - w (warpgroup 1 hands warpgroup 0 the first turn; warpgroup 0 takes one extra
  // turn at the end, so every arrival is waited for). `late`: warpgroup 1, a compile-time
  // choice (a branch while wgmmas are in flight would make ptxas wait for them there).
  auto take_turn = [&](auto late) {
    if constexpr (decltype(late)::value) ptx::named_barrier_sync<6, kThreads>();
    else ptx::named_barrier_sync<5, kThreads>();
  };
  auto pass_turn = [&](auto late) {
    if constexpr (decltype(late)::value) ptx::named_barrier_arrive<5, kThreads>();
    else ptx::named_barrier_arrive<6, kThreads>();
  };
  auto run = [&](auto late) {
    constexpr bool kLate = decltype(late)::value;  // warpgroup 1
    // ---- tile_begin: S, softmax; no P V yet ----------------------------------------------------
    if constexpr (kWs) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // everyone's raw query landed (the loader passes it in its hand_over)
      // K(tile_begin) before the query's rotation: after it, the RoPE builds ran 0.4-2.8% slower
      // on the H200 though the computing warps wait here (bench/results/
      // 2026-11-30-h200-prefill-prologue/, call p).
      wait_full(0);
      r_n2 = load_keys(tile_begin + 2);
    } else {
      barrier_step(tile_begin, 0);  // the raw query and K(tile_begin) landed
      r_n2 = stream.v_info;  // tile_begin + 2
    }
    prepare_query();  // reads the raw query (stage 3) and the cos/sin tables (stage 2's V slot)
    if constexpr (kWs) __syncthreads();  // with the loader: it may refill stages 2 and 3
    if (kRope && !kOneSeg) build_query();
    if constexpr (kWs) {
      if constexpr (kLate) pass_turn(late);  // warpgroup 0 goes first
      take_turn(late);
    }
    issue_qk(s, 0);
    if constexpr (kWs) pass_turn(late);
    if constexpr (kLate && !kWs) barrier_step(tile_begin + 1, 1);  // after everyone's prepare_query
    ptx::wgmma_wait<0>();
    fence_operands(s);
    float scale[2];
    softmax(r_cur, scale, std::true_type{});
    rescale_and_pack(scale);

    // Runs of tiles of one segment; between two runs (no wgmma in flight), the next segment's
    // query. The loop over a run has no RoPE code and counts to a bound known at its start (a
    // per-tile segment test in the loop cost 3-8% per tile on the H200).
    int tile = tile_begin + 1, it = 1;
    while (tile < tile_end) {
      int run_end = tile_end;
      if (kRope && !kOneSeg) {
        const TileInfo& rec = run_record();  // tile's
        const int seg_length = p.plan.segment_length[rec.segment];  // lands during the rebuild
        if (rec.seg_start != q_seg_start) rebuild_query(rec.seg_start);
        run_end = min(tile_end, tile + (seg_length - rec.key0 + kTileKeys - 1) / kTileKeys);
        if constexpr (kWs) ti_run = stream.info_nb(run_end);  // lands under this run
      }
      // One tile of the run; `masked` as softmax's.
      auto tile_step = [&](auto masked) {
        if constexpr (kWs) wait_full(it);
        else if constexpr (!kLate) barrier_step(tile, it);
        r_cur = r_next;
        r_next = r_n2;
        if constexpr (kWs) r_n2 = load_keys(tile + 2);
        else r_n2 = stream.v_info;  // tile + 2, fetched two tiles ago
        // S(tile) and P(tile - 1) V(tile - 1) back to back; the softmax of S runs under P V.
        if constexpr (kWs) take_turn(late);
        issue_qk(s, it % S);
        issue_pv((it - 1) % S);
        if constexpr (kWs) pass_turn(late);
        if constexpr (kLate && !kWs) barrier_step(tile + 1, it + 1);
        ptx::wgmma_wait<1>();
        fence_operands(s);
        softmax(r_cur, scale, masked);
        ptx::wgmma_wait<0>();
        fence_operands(o);
        // Stage it - 1 (K read by S(tile - 1), V by P V just now) is free for this warp.
        if constexpr (kWs) {
          if (lane == 0) ptx::mbarrier_arrive(empty_bar((it - 1) % S));
        }
        rescale_and_pack(scale);
      };
      // Warp-specialised: the body without the mask where every row sees the whole tile (1-3%
      // faster on the H200 than one masked body, both builds: bench/results/
      // 2026-11-30-h200-prefill-trim/, call m). The two-warpgroup form keeps one body.
      for (; tile < run_end; ++tile, ++it) {
        if constexpr (kWs) {
          // r_next is this tile's (tile_step shifts it into r_cur). The test is the same for the
          // whole CTA (its first row sees the fewest tail keys), so both warpgroups take the
          // same body, and nothing is in flight at this branch.
          const bool whole = r_next.rows == kTileKeys &&
                             (!r_next.is_tail || r_next.key0 + kTileKeys - 1 <= first_visible);
          if (whole) tile_step(std::false_type{});
          else tile_step(std::true_type{});
        } else {
          tile_step(std::true_type{});
        }
      }
    }
    // B(tile_end): warpgroup 1 passed it in its last iteration (or the prologue).
    if constexpr (!kLate && !kWs) barrier_step(tile_end, tile_end - tile_begin);
    issue_pv((tile_end - 1 - tile_begin) % S);  // the last tile's P V (its V landed at B(end))
    ptx::wgmma_wait<0>();
    fence_operands(o);
    if constexpr (kWs && !kLate) take_turn(late);  // warpgroup 1's last hand-over
  };
  if (tile_begin < tile_end) {
    if (wg == 0) run(std::false_type{});
    else run(std::true_type{});
  } else if constexpr (kWs) {
    __syncthreads();  // no prologue: the loader has nothing to do
  }
  ptx::cp_async_wait<0>();

  // ---- outputs -----------------------------------------------------------------------------------
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = row_a + 8 * h;
    if (r >= rows_here) continue;
    const int R = row_begin + r;
    const std::int64_t out_row =
        static_cast<std::int64_t>(q_row0 + R / G) * p.num_qo_heads + kv_head * G + R % G;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const float lse2 = sum > 0.0f ? row_max[h] + log2f(sum) : -INFINITY;
    if (p.kv_splits > 1) {
      const std::int64_t slot =
          static_cast<std::int64_t>(blockIdx.z) * p.plan.num_queries * p.num_qo_heads + out_row;
      float* dst = p.partial_o + slot * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8 + 2 * t4) =
            make_float2(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
      if (t4 == 0) p.partial_lse[slot] = lse2;
      continue;
    }
    T* dst = static_cast<T*>(p.o) + out_row * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<std::uint32_t*>(dst + n * 8 + 2 * t4) =
          ptx::pack2<T>(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
    if (t4 == 0 && p.maybe_lse) p.maybe_lse[out_row] = lse2 * 0.6931471805599453f;
  }
}

// Merges the splits' partial states of one output row per warp: weights 2^(lse_z - max).
template <class T, int D>
__global__ void prefill_merge_kernel(const float* partial_o, const float* partial_lse, T* out,
                                     float* maybe_lse, std::int64_t rows, int splits) {
  const std::int64_t row = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float mx = -INFINITY;
  for (int z = 0; z < splits; ++z) mx = fmaxf(mx, partial_lse[z * rows + row]);
  constexpr int kPer = D / 32;
  float o[kPer] = {};
  float total = 0.0f;
  if (mx != -INFINITY) {
    for (int z = 0; z < splits; ++z) {
      const float w = exp2f(partial_lse[z * rows + row] - mx);
      total += w;
      const float* src = partial_o + (z * rows + row) * D + lane * kPer;
#pragma unroll
      for (int i = 0; i < kPer; ++i) o[i] += w * src[i];
    }
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  T* dst = out + row * D + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; i += 2)
    *reinterpret_cast<std::uint32_t*>(dst + i) = ptx::pack2<T>(o[i] * inv, o[i + 1] * inv);
  if (lane == 0 && maybe_lse)
    maybe_lse[row] = total > 0.0f ? (mx + log2f(total)) * 0.6931471805599453f : -INFINITY;
}

}  // namespace detail

// Partial outputs of split-KV prefill; grows on demand (size it once before graph capture).
struct PrefillWorkspace {
  DeviceBuffer<float> partial_o;
  DeviceBuffer<float> partial_lse;
};

// Split-KV scratch in memory the caller owns, with room for `max_splits` splits: partial_o
// [max_splits][num_queries * num_qo_heads][head_dim] and partial_lse [max_splits][num_queries *
// num_qo_heads] floats. max_splits 0 (or 1): no splits.
struct PrefillScratch {
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  int max_splits = 0;
};

// The prefill kernels: the FlashAttention-2-style mma.sync kernel (every head dim, form and
// rotary layout) and the Hopper wgmma kernel (head dim 128, local form, rotate-half), in two
// forms: kWgmmaWs (a loading warpgroup and two computing ones, FlashAttention-3's warp
// specialisation; what kAuto takes) and kWgmma (two warpgroups that load and compute, the
// earlier form, kept for comparison; same inputs).
enum class PrefillKernel : std::uint8_t { kAuto, kMmaSync, kWgmma, kWgmmaWs };

inline const char* to_string(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kAuto: return "auto";
    case PrefillKernel::kMmaSync: return "mma_sync";
    case PrefillKernel::kWgmma: return "wgmma";
    case PrefillKernel::kWgmmaWs: return "wgmma_ws";
  }
  return "?";
}

struct PrefillArgs {
  DType dtype = DType::kBFloat16;
  const void* q = nullptr;     // [num_queries, num_qo_heads, head_dim], dtype
  void* o = nullptr;           // [num_queries, num_qo_heads, head_dim], dtype
  float* maybe_lse = nullptr;  // [num_queries, num_qo_heads]
  int layer = 0;
  AttentionParams params;
  bool rope = true;  // false: the RoPE-off baseline (queries and keys pre-rotated)
  // true: each query row is already rotated at its own position (a model's q); the kernels
  // apply R(-s_j) per local segment and R(-n) per raw key instead of R(m_i - s_j), R(m_i - n).
  bool query_rotated = false;
  // true: q and the keys carry the schedule's attention factor on their rotary dims already (a
  // model's own rotation: YaRN, LongRoPE), so the query is not scaled by it again.
  bool inputs_scaled = false;
  // Key-range splits per query tile: 0 picks (enough CTAs to fill the GPU when the query tiles
  // alone do not), 1 none, N forces N. Splits need a workspace.
  int kv_splits = 0;
  // Which kernel: kAuto takes the Hopper kernel in its warp-specialised form (kWgmmaWs) where it
  // applies (head dim 128, local-form segments only, rotate-half over all head dims or RoPE off)
  // and the mma.sync kernel otherwise; kWgmmaWs and kWgmma insist (and throw, naming what does
  // not fit), kMmaSync forces the FlashAttention-2-style kernel.
  PrefillKernel kernel = PrefillKernel::kAuto;
};

// Why the wgmma kernel cannot take this prefill, or nullptr when it can.
inline const char* wgmma_prefill_mismatch(const PrefillArgs& args, const DevicePlan& plan,
                                          const DeviceRope& rope) {
  if (args.params.head_dim != 128) return "head_dim is not 128";
  if (plan.has_raw_segments()) return "the plan has raw-form segments (local form only)";
  const RopeView& rv = rope.view();
  if (args.rope && (rv.rotary_dim != 128 || rv.interleaved))
    return "the rotary dims are not all 128 in the rotate-half layout";
  return nullptr;
}

// The kernel prefill() launches for these arguments (kAuto resolved; throws where kWgmma or
// kWgmmaWs is asked for and does not apply).
inline PrefillKernel resolve_prefill_kernel(const PrefillArgs& args, const DevicePlan& plan,
                                            const DeviceRope& rope) {
  const char* mismatch = wgmma_prefill_mismatch(args, plan, rope);
  switch (args.kernel) {
    case PrefillKernel::kMmaSync:
      return PrefillKernel::kMmaSync;
    case PrefillKernel::kWgmma:
    case PrefillKernel::kWgmmaWs:
      LAZYATTN_CHECK(!mismatch, "cuda::prefill: kernel = ", to_string(args.kernel), ", but ",
                     mismatch ? mismatch : "", " (head_dim ", args.params.head_dim,
                     ", rotary_dim ", rope.view().rotary_dim,
                     rope.view().interleaved ? " interleaved" : "", ")");
      return args.kernel;
    case PrefillKernel::kAuto:
      return mismatch ? PrefillKernel::kMmaSync : PrefillKernel::kWgmmaWs;
  }
  ::lazyattn::detail::throw_error("cuda::prefill: kernel ", static_cast<int>(args.kernel),
                      ", expected auto (0), mma_sync (1), wgmma (2) or wgmma_ws (3)");
}

// The key-range splits per query tile that kv_splits = 0 picks: enough CTAs for one full wave,
// each split at least 4 key tiles, at most 16 (the GPU's SM count is read each call).
inline int prefill_auto_splits(const PrefillArgs& args, const DevicePlan& plan,
                               const DeviceRope& rope) {
  const PrefillKernel chosen = resolve_prefill_kernel(args, plan, rope);
  const bool wgmma = chosen == PrefillKernel::kWgmma || chosen == PrefillKernel::kWgmmaWs;
  const DecodeScheduleView& sv = plan.schedule();
  const std::int64_t ctas =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(sv.num_qtiles) * args.params.num_kv_heads);
  const std::int64_t capacity =
      std::int64_t{device_sm_count()} * (args.params.head_dim <= 128 && !wgmma ? 2 : 1);
  const std::int64_t tiles = sv.num_tiles / std::max(1, plan.view().num_requests);
  return static_cast<int>(std::clamp<std::int64_t>(std::min(capacity / ctas, tiles / 4), 1, 16));
}

// Launches the prefill for one layer over a plan uploaded with make_prefill_schedule. The K/V of
// the new tail tokens must already be in their pages (write_tokens). No host synchronisation.
// Query tiles too few to fill the GPU split their key range (args.kv_splits; automatic splits
// take at most the scratch's max_splits).
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, const PrefillScratch& scratch,
                    cudaStream_t stream = nullptr) {
  const char* w = "cuda::prefill";
  const AttentionParams& ap = args.params;
  ap.check(w);
  const PoolGeometry& geo = pool.geometry();
  LAZYATTN_CHECK(ap.num_kv_heads == geo.num_kv_heads, w, ": num_kv_heads ", ap.num_kv_heads,
                 ", expected the pool's ", geo.num_kv_heads);
  LAZYATTN_CHECK(ap.head_dim == geo.head_dim, w, ": head_dim ", ap.head_dim,
                 ", expected the pool's ", geo.head_dim);
  LAZYATTN_CHECK(args.dtype == pool.dtype(), w, ": dtype ", to_string(args.dtype),
                 ", expected the pool's ", to_string(pool.dtype()));
  LAZYATTN_CHECK(args.dtype != DType::kFloat32, w,
                 ": dtype float32, expected bfloat16 or float16 (tensor-core kernels)");
  LAZYATTN_CHECK(detail::kPrefillRows % ap.group_size() == 0, w, ": GQA group size ",
                 ap.group_size(), ", expected a divisor of ", detail::kPrefillRows);
  LAZYATTN_CHECK(ap.logits_soft_cap == 0.0, w, ": logits_soft_cap ", ap.logits_soft_cap,
                 ", expected 0 (soft cap is not implemented in the CUDA kernels)");
  LAZYATTN_CHECK(args.q && args.o, w, ": q and o must be device pointers, got null");
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0, w,
                 ": q must be 16-byte aligned (it is read in 16-byte vectors), its address is ",
                 reinterpret_cast<std::uintptr_t>(args.q) % 16, " mod 16");
  LAZYATTN_CHECK(args.kv_splits >= 0 && args.kv_splits <= 64, w, ": kv_splits ", args.kv_splits,
                 ", expected 0 (automatic) to 64");
  LAZYATTN_CHECK(args.kv_splits <= 1 || args.kv_splits <= scratch.max_splits, w,
                 ": kv_splits ", args.kv_splits, " needs scratch for as many splits, got room for ",
                 scratch.max_splits);
  LAZYATTN_CHECK(scratch.max_splits <= 1 || (scratch.partial_o && scratch.partial_lse), w,
                 ": scratch for ", scratch.max_splits, " splits has a null buffer");
  const PlanView& pv = plan.view();
  const DecodeScheduleView& sv = plan.schedule();
  LAZYATTN_CHECK(sv.rows_per_qtile == detail::kPrefillRows, w, ": schedule rows_per_qtile ",
                 sv.rows_per_qtile, ", expected ", detail::kPrefillRows,
                 " (upload the plan with make_prefill_schedule)");
  LAZYATTN_CHECK(pv.page_size == geo.page_size, w, ": plan page_size ", pv.page_size,
                 ", expected the pool's ", geo.page_size);
  const RopeView& rv = rope.view();
  if (args.rope) {
    rope.check_prepared(pv.num_requests, w);
    LAZYATTN_CHECK(rope.policy().head_dim() == ap.head_dim, w, ": rope head_dim ",
                   rope.policy().head_dim(), ", expected ", ap.head_dim);
    LAZYATTN_CHECK(rv.rotary_dim % (rv.interleaved ? 16 : 32) == 0, w, ": rotary_dim ",
                   rv.rotary_dim, ", expected a multiple of ", rv.interleaved ? 16 : 32,
                   " for the CUDA kernels");
    LAZYATTN_CHECK(rv.offset_rows >= 16, w, ": rope offset table of ", rv.offset_rows,
                   " rows, expected >= 16 (DeviceRope's offset_rows)");
  }
  if (sv.num_qtiles == 0) return;

  PrefillParams p;
  p.q = args.q;
  p.o = args.o;
  p.maybe_lse = args.maybe_lse;
  p.query_rotated = args.query_rotated ? 1 : 0;
  p.k_pool = pool.k_layer(args.layer);
  p.v_pool = pool.v_layer(args.layer);
  p.page_stride = geo.page_stride();
  p.head_stride = geo.head_stride();
  p.plan = pv;
  p.sched = sv;
  p.rope = rv;
  if (args.inputs_scaled) p.rope.query_scale = 1.0f;
  p.sm_scale_log2 = static_cast<float>(ap.scale() * 1.4426950408889634);
  p.num_qo_heads = ap.num_qo_heads;
  p.group_size = ap.group_size();
  int log2_page = 0;
  while ((1 << log2_page) < geo.page_size) ++log2_page;
  p.page_size_log2 = log2_page;
  const PrefillKernel chosen = resolve_prefill_kernel(args, plan, rope);
  const bool wgmma = chosen == PrefillKernel::kWgmma || chosen == PrefillKernel::kWgmmaWs;
  int splits = args.kv_splits;
  if (splits == 0)
    splits = scratch.max_splits > 1
                 ? std::min(prefill_auto_splits(args, plan, rope), scratch.max_splits)
                 : 1;
  const std::int64_t out_rows = static_cast<std::int64_t>(pv.num_queries) * ap.num_qo_heads;
  if (splits > 1) {
    p.kv_splits = splits;
    p.partial_o = scratch.partial_o;
    p.partial_lse = scratch.partial_lse;
  }

  dispatch_dtype(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(ap.head_dim, w, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        using Shape = detail::PrefillShape<D>;
        auto launch = [&](auto kernel) {
          prepare_kernel(kernel, Shape::kSmemBytes);
          dim3 grid(static_cast<unsigned>(sv.num_qtiles), static_cast<unsigned>(ap.num_kv_heads),
                    static_cast<unsigned>(splits));
          kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
          LAZYATTN_CUDA_CHECK_LAUNCH();
        };
        bool launched = false;
        if constexpr (D == 128) {
          if (wgmma) {
            using WShape = detail::WgmmaPrefillShape;
            const bool ws = chosen == PrefillKernel::kWgmmaWs;
            const int smem = ws ? WShape::kWsSmemBytes : WShape::kSmemBytes;
            auto launch_wgmma = [&](auto kernel) {
              prepare_kernel(kernel, smem);
              dim3 grid(static_cast<unsigned>(sv.num_qtiles * ap.num_kv_heads), 1,
                        static_cast<unsigned>(splits));
              kernel<<<grid, ws ? detail::kWgmmaWsThreads : detail::kWgmmaPrefillThreads, smem,
                       stream>>>(p);
              LAZYATTN_CUDA_CHECK_LAUNCH();
            };
            if (ws) {
              if (args.rope && plan.single_segment_requests())
                launch_wgmma(detail::prefill_wgmma_kernel<T, true, true, true>);
              else if (args.rope) launch_wgmma(detail::prefill_wgmma_kernel<T, true, true>);
              else launch_wgmma(detail::prefill_wgmma_kernel<T, false, true>);
            } else {
              if (args.rope) launch_wgmma(detail::prefill_wgmma_kernel<T, true>);
              else launch_wgmma(detail::prefill_wgmma_kernel<T, false>);
            }
            launched = true;
          }
        }
        if (!launched) {
          if (args.rope) launch(detail::prefill_kernel<T, D, true>);
          else launch(detail::prefill_kernel<T, D, false>);
        }
        if (splits > 1) {
          constexpr int kMergeThreads = 256;
          const std::int64_t blocks = (out_rows * 32 + kMergeThreads - 1) / kMergeThreads;
          detail::prefill_merge_kernel<T, D><<<static_cast<unsigned>(blocks), kMergeThreads, 0,
                                               stream>>>(p.partial_o, p.partial_lse,
                                                         static_cast<T*>(args.o), args.maybe_lse,
                                                         out_rows, splits);
          LAZYATTN_CUDA_CHECK_LAUNCH();
        }
      });
    }
  });
}

// With a workspace that grows to the splits (automatic ones or args.kv_splits); null: no
// key-range splits (kv_splits must be 0 or 1). Before a graph capture, run once uncaptured so
// that the workspace has grown.
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, PrefillWorkspace* ws, cudaStream_t stream = nullptr) {
  PrefillScratch scratch;
  PrefillArgs a = args;  // the split count fixed here, so the launch does not choose it again
  if (ws && args.kv_splits != 1 && plan.schedule().num_qtiles > 0) {
    args.params.check("cuda::prefill");
    const int splits = args.kv_splits > 0 ? args.kv_splits : prefill_auto_splits(args, plan, rope);
    a.kv_splits = splits;
    if (splits > 1) {
      const std::int64_t out_rows =
          static_cast<std::int64_t>(plan.view().num_queries) * args.params.num_qo_heads;
      ws->partial_o.reserve(static_cast<std::size_t>(splits * out_rows * args.params.head_dim));
      ws->partial_lse.reserve(static_cast<std::size_t>(splits * out_rows));
      scratch = PrefillScratch{ws->partial_o.data(), ws->partial_lse.data(), splits};
    }
  }
  LAZYATTN_CHECK(ws || args.kv_splits <= 1, "cuda::prefill: kv_splits ", args.kv_splits,
                 " needs a PrefillWorkspace, got none");
  prefill(a, pool, plan, rope, scratch, stream);
}

// Without a workspace: no key-range splits (kv_splits must be 0 or 1).
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, cudaStream_t stream = nullptr) {
  prefill(args, pool, plan, rope, static_cast<PrefillWorkspace*>(nullptr), stream);
}

}  // namespace lazyattn::cuda
