// Paged prefill with deferred RoPE on tensor cores (FlashAttention-2 style, mma.sync m16n8k16):
// a request's new tail tokens attend fully to every document segment and causally to the tail.
// Covers tail prefill (the RAG question), chunked prefill (a chunk appended to an existing tail:
// queries are the last rows of the tail) and document encoding (a plan whose only segment is the
// document's own tail, causal from position 0).
//
// One CTA takes 64 query rows of one request and one KV head; rows are (query, head-of-group)
// pairs, so each K/V tile serves the whole GQA group. Four warps own 16 rows each and walk every
// 64-key tile of the request through a two-stage cp.async ring (TileStream: page-table gather,
// records fetched a tile ahead), with online softmax in registers.
//
// Deferred rotation:
//   local form  the query fragments are re-rotated in registers when the segment changes, by
//               (m_i - s_j) per row: cos/sin of (m_first - s_j) per pair, combined with per-CTA
//               tables of the row offsets (m_i - m_first = 16a + b: a table for a and one for b);
//               rounded to 16 bits once;
//   raw form    the query is rotated by m_i once, and each K tile is rotated in fp32 at its keys'
//               logical positions, in shared memory, once for all four warps (per-16-key base
//               angles computed a tile ahead, offsets 0..15 from a table).
// kRope = false is the RoPE-off baseline (pre-rotated queries and keys).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

struct PrefillParams {
  const void* q = nullptr;     // [num_queries, num_qo_heads, head_dim], un-rotated
  void* o = nullptr;           // [num_queries, num_qo_heads, head_dim]
  float* maybe_lse = nullptr;  // [num_queries, num_qo_heads], natural log; may be null
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
  // Shared-memory layout, bytes from the start (depends on the group size).
  std::int32_t smem_q = 0;
  std::int32_t smem_cs_base = 0;
  std::int32_t smem_cs_rows = 0;  // [4 coarse + 16 fine][pair]
  std::int32_t smem_cs_kbase = 0;
  std::int32_t smem_cs_koff = 0;
};

namespace detail {

inline constexpr int kPrefillWarps = 4;
inline constexpr int kPrefillThreads = 32 * kPrefillWarps;
inline constexpr int kPrefillRows = 16 * kPrefillWarps;  // query rows per CTA
inline constexpr int kPrefillStages = 2;

template <int D>
struct PrefillShape {
  static constexpr int kKSteps = D / 16;
  static constexpr int kStageBytes = 2 * kTileKeys * D * 2;
  static constexpr int kPipeBytes = kPrefillStages * kStageBytes;
};

// Shared-memory layout for a head dim: K/V ring, the raw query tile, cos/sin of the segment
// rotation, of the row offsets (coarse 16a, a < 4, and fine b < 16), of the raw keys' bases and
// offsets. 100.5 KiB at head dim 128 (two CTAs per SM), 201 KiB at 256.
inline PrefillParams prefill_layout(PrefillParams p, int head_dim, int* total_bytes) {
  const int half = head_dim / 2;
  int at = 2 * kPrefillStages * kTileKeys * head_dim * 2;
  p.smem_q = at;
  at += kPrefillRows * head_dim * 2;
  p.smem_cs_base = at;
  at += half * 8;
  p.smem_cs_rows = at;
  at += (4 + 16) * half * 8;
  p.smem_cs_kbase = at;
  at += 2 * (kTileKeys / 16) * half * 8;
  p.smem_cs_koff = at;
  at += 16 * half * 8;
  *total_bytes = at;
  return p;
}

// cos/sin of pair j at row offset i (< 64) from the coarse (16a) and fine (b) tables.
__device__ __forceinline__ float2 row_cs(const float2* rows, int half, int i, int j) {
  return combine_angles(rows[(i >> 4) * half + j], rows[(4 + (i & 15)) * half + j]);
}

// Rotates, scales and re-packs one thread's query fragments. HS = rotary_dim / 32, the k-step
// distance between the two dims of a half-layout pair (a template so every index is static).
template <class T, int KSteps, int HS>
__device__ __forceinline__ void rotate_query_half(std::uint32_t (&qa)[KSteps][4], const float2* base,
                                                  const float2* rows, int half, int t4, int row_a,
                                                  int row_b, float rot_scale, float scale) {
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) {
    if (kk < HS) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = (e & 1) ? row_b : row_a;
        const int j0 = 16 * kk + 2 * t4 + (e >> 1) * 8;
        float2 x = ptx::unpack2<T>(qa[kk][e]);
        float2 y = ptx::unpack2<T>(qa[kk + HS][e]);
        float2 c0 = combine_angles(base[j0], row_cs(rows, half, row, j0));
        float2 c1 = combine_angles(base[j0 + 1], row_cs(rows, half, row, j0 + 1));
        rotate_pair(x.x, y.x, c0);
        rotate_pair(x.y, y.y, c1);
        qa[kk][e] = ptx::pack2<T>(x.x * rot_scale, x.y * rot_scale);
        qa[kk + HS][e] = ptx::pack2<T>(y.x * rot_scale, y.y * rot_scale);
      }
    } else if (kk >= 2 * HS) {  // pass-through dims
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float2 x = ptx::unpack2<T>(qa[kk][e]);
        qa[kk][e] = ptx::pack2<T>(x.x * scale, x.y * scale);
      }
    }
  }
}

template <class T, int KSteps>
__device__ __forceinline__ void rotate_query_interleaved(std::uint32_t (&qa)[KSteps][4],
                                                         const float2* base, const float2* rows,
                                                         int half, int rot_steps, int t4,
                                                         int row_a, int row_b, float rot_scale,
                                                         float scale) {
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float2 x = ptx::unpack2<T>(qa[kk][e]);
      if (kk < rot_steps) {  // the register's two halves are one pair (2i, 2i + 1)
        const int row = (e & 1) ? row_b : row_a;
        const int i = (16 * kk + 2 * t4 + (e >> 1) * 8) >> 1;
        rotate_pair(x.x, x.y, combine_angles(base[i], row_cs(rows, half, row, i)));
        qa[kk][e] = ptx::pack2<T>(x.x * rot_scale, x.y * rot_scale);
      } else {
        qa[kk][e] = ptx::pack2<T>(x.x * scale, x.y * scale);
      }
    }
  }
}

template <class T, int D, bool kRope>
__global__ void __launch_bounds__(kPrefillThreads, 2)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  using Shape = PrefillShape<D>;
  constexpr int S = kPrefillStages;
  constexpr int KSteps = Shape::kKSteps;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem + p.smem_q);
  float2* cs_base = reinterpret_cast<float2*>(smem + p.smem_cs_base);
  float2* cs_rows = reinterpret_cast<float2*>(smem + p.smem_cs_rows);
  float2* cs_kbase = reinterpret_cast<float2*>(smem + p.smem_cs_kbase);  // [2][4][pair]
  float2* cs_koff = reinterpret_cast<float2*>(smem + p.smem_cs_koff);    // [16][pair]

  const int qtile = blockIdx.x;
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
  const std::int64_t m_first = p.plan.request_query_position[b] + i_first;
  // Tail key kt is visible to query i when kt <= causal_offset + i.
  const int causal_offset = p.plan.segment_length[p.plan.request_tail_segment[b]] - nq;
  const int max_visible_tail = causal_offset + (row_begin + rows_here - 1) / G;
  const int rope_set = p.rope.per_request ? b : 0;
  const int rotary = p.rope.rotary_dim;
  const int half = rotary / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * half;

  // One work item per request spans all its tiles; drop trailing tail tiles no row can see.
  const int tile_begin = p.sched.work_tile_begin[b];
  int tile_end = p.sched.work_tile_end[b];
  while (tile_end > tile_begin) {
    TileInfo last = p.sched.tiles[tile_end - 1];
    if (!last.is_tail || last.key0 <= max_visible_tail) break;
    --tile_end;
  }

  // ---- the query tile: rows (query i_first + r / G, head r % G), zero past the request -------
  {
    constexpr int kChunks = D / 8;
    const int chunk = tid % kChunks;
    const T* q = static_cast<const T*>(p.q);
    for (int r = tid / kChunks; r < kPrefillRows; r += kPrefillThreads / kChunks) {
      bool valid = r < rows_here;
      int rr = valid ? r : 0;
      std::int64_t src = (static_cast<std::int64_t>(q_row0 + i_first + rr / G) * p.num_qo_heads +
                          kv_head * G + rr % G) *
                             D +
                         chunk * 8;
      ptx::cp_async_16(ptx::smem_addr(q_tile + swizzle<D>(r, chunk)), q + src, valid);
    }
    ptx::cp_async_commit();
  }

  using Stream = TileStream<T, D, kPrefillThreads, S>;
  Stream stream{p.sched.tiles,
                p.plan.page_ids,
                static_cast<const T*>(p.k_pool) + kv_head * p.head_stride,
                static_cast<const T*>(p.v_pool) + kv_head * p.head_stride,
                p.page_stride,
                p.page_size_log2,
                tile_end,
                tid % Stream::kChunks,
                tid / Stream::kChunks,
                reinterpret_cast<T*>(smem)};
  stream.prefetch_records(tile_begin, tid);
  stream.start(tile_begin);
  TileInfo cur = stream.info(tile_begin);
  TileInfo next = stream.info(tile_begin + 1);

  // cos/sin of the row offsets (m_i - m_first) = r / G < 64, as 16a + b: fixed for the CTA.
  if (kRope) {
    for (int i = tid; i < 20 * half; i += kPrefillThreads) {
      int t = i / half;
      cs_rows[i] = rope_cos_sin(t < 4 ? 16 * t : t - 4, turns[i % half]);
    }
  }

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  std::uint32_t qa[KSteps][4];
  std::int64_t q_delta = 0;
  bool q_ready = false;
  bool koff_ready = false;
  bool kbase_ready = false;
  const std::uint8_t kRawForm = static_cast<std::uint8_t>(StorageForm::kRaw);
  const int row_a = warp * 16 + g;  // this thread's two rows within the CTA's 64
  const int row_b = row_a + 8;
  const int i_a = row_a / G, i_b = row_b / G;  // their query offsets from i_first

  auto compute_kbase = [&](const TileInfo& ti, int parity) {
    const std::int64_t n0 = ti.seg_start + ti.key0;
    for (int i = tid; i < 4 * half; i += kPrefillThreads) {
      int grp = i / half, j = i % half;
      cs_kbase[(parity * 4 + grp) * half + j] = rope_cos_sin(n0 + 16 * grp, turns[j]);
    }
  };

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int it = tile - tile_begin;
    ptx::cp_async_wait<S - 2>();
    __syncthreads();  // tile `it` (and, the first time, the query tile) is in shared memory
    stream.step(tile, it);
    const TileInfo ti = cur;
    cur = next;
    next = stream.info(tile + 2);
    const bool raw = kRope && ti.form == kRawForm;
    T* ks = stream.k_stage(it % S);
    const T* vs = stream.v_stage(it % S);

    // ---- query fragments: (re)rotated when the rotation changes -------------------------------
    const std::int64_t delta = raw ? m_first : m_first - ti.seg_start;
    if (!q_ready || (kRope && delta != q_delta)) {
      if (kRope)
        for (int j = tid; j < half; j += kPrefillThreads) cs_base[j] = rope_cos_sin(delta, turns[j]);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        int row = warp * 16 + (mi & 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(qa[kk], ptx::smem_addr(q_tile + swizzle<D>(row, 2 * kk + (mi >> 1))));
      }
      const float scale = p.sm_scale_log2;
      if (!kRope) {
        rotate_query_interleaved<T, KSteps>(qa, cs_base, cs_rows, half, 0, t4, i_a, i_b, scale,
                                            scale);
      } else if (interleaved) {
        rotate_query_interleaved<T, KSteps>(qa, cs_base, cs_rows, half, rotary / 16, t4, i_a, i_b,
                                            scale * p.rope.query_scale, scale);
      } else {
        const float rs = scale * p.rope.query_scale;
        auto with_hs = [&](auto hs) {
          constexpr int HS = decltype(hs)::value;
          if constexpr (2 * HS <= KSteps)
            rotate_query_half<T, KSteps, HS>(qa, cs_base, cs_rows, half, t4, i_a, i_b, rs, scale);
        };
        switch (rotary / 32) {  // rotary_dim is a multiple of 32 here (checked on the host)
          case 1: with_hs(std::integral_constant<int, 1>{}); break;
          case 2: with_hs(std::integral_constant<int, 2>{}); break;
          case 3: with_hs(std::integral_constant<int, 3>{}); break;
          case 4: with_hs(std::integral_constant<int, 4>{}); break;
          case 5: with_hs(std::integral_constant<int, 5>{}); break;
          case 6: with_hs(std::integral_constant<int, 6>{}); break;
          case 7: with_hs(std::integral_constant<int, 7>{}); break;
          default: with_hs(std::integral_constant<int, 8>{}); break;
        }
      }
      q_delta = delta;
      q_ready = true;
    }

    // ---- raw form: rotate this K tile in shared memory, once for all warps --------------------
    if (raw) {
      if (!kbase_ready) {
        if (!koff_ready) {
          const float2* table =
              p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * half;
          for (int i = tid; i < 16 * half; i += kPrefillThreads) cs_koff[i] = table[i];
          koff_ready = true;
        }
        compute_kbase(ti, it & 1);
        __syncthreads();
      }
      const float2* kbase = cs_kbase + (it & 1) * 4 * half;
      for (int i = tid; i < kTileKeys * half; i += kPrefillThreads) {
        int key = i / half, j = i % half;
        int d0 = interleaved ? 2 * j : j;
        int d1 = interleaved ? 2 * j + 1 : j + half;
        T* x0 = ks + swizzle<D>(key, d0 >> 3) + (d0 & 7);
        T* x1 = ks + swizzle<D>(key, d1 >> 3) + (d1 & 7);
        float x = ptx::to_f32(*x0), y = ptx::to_f32(*x1);
        rotate_pair(x, y, combine_angles(kbase[(key >> 4) * half + j], cs_koff[(key & 15) * half + j]));
        *x0 = ptx::from_f32<T>(x);
        *x1 = ptx::from_f32<T>(y);
      }
      __syncthreads();
    }
    // The next raw tile's bases, into the other buffer; read after the next top barrier.
    kbase_ready = false;
    if (kRope && koff_ready && tile + 1 < tile_end && cur.form == kRawForm) {
      compute_kbase(cur, (it + 1) & 1);
      kbase_ready = true;
    }

    // ---- S = Q K^T: 16 rows x 64 keys per warp --------------------------------------------------
    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < 4; ++n2) {
        std::uint32_t kb[4];
        int key = 16 * n2 + (mi >> 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(kb, ptx::smem_addr(ks + swizzle<D>(key, 2 * kk + (mi & 1))));
        ptx::mma_16816<T>(sc[2 * n2], qa[kk], kb[0], kb[1]);
        ptx::mma_16816<T>(sc[2 * n2 + 1], qa[kk], kb[2], kb[3]);
      }
    }

    // ---- masks: keys past the tile, and the causal tail -----------------------------------------
    const bool tail_mask = ti.is_tail && ti.key0 + ti.rows - 1 > causal_offset + i_first;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key = 8 * n + 2 * t4 + (e & 1);
        bool hidden = key >= ti.rows;
        if (tail_mask) hidden = hidden || ti.key0 + key > causal_offset + i_first + ((e & 2) ? i_b : i_a);
        if (hidden) sc[n][e] = -INFINITY;
      }
    }

    // ---- online softmax (log2 units: the scale is folded into the query) ----------------------
    float scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n) mx = fmaxf(mx, fmaxf(sc[n][2 * h], sc[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float m_new = fmaxf(row_max[h], mx);
      float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: exp2 -> 0, no NaN
      scale[h] = exp2f(row_max[h] - m_use);
      row_max[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        sc[n][2 * h] = exp2f(sc[n][2 * h] - m_use);
        sc[n][2 * h + 1] = exp2f(sc[n][2 * h + 1] - m_use);
        sum += sc[n][2 * h] + sc[n][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * scale[h] + sum;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= scale[0];
      acc[n][1] *= scale[0];
      acc[n][2] *= scale[1];
      acc[n][3] *= scale[1];
    }

    // ---- O += P V ------------------------------------------------------------------------------
#pragma unroll
    for (int kv = 0; kv < 4; ++kv) {
      std::uint32_t pa[4] = {ptx::pack2<T>(sc[2 * kv][0], sc[2 * kv][1]),
                             ptx::pack2<T>(sc[2 * kv][2], sc[2 * kv][3]),
                             ptx::pack2<T>(sc[2 * kv + 1][0], sc[2 * kv + 1][1]),
                             ptx::pack2<T>(sc[2 * kv + 1][2], sc[2 * kv + 1][3])};
      const int v_row = 16 * kv + (mi & 1) * 8 + (lane & 7);
#pragma unroll
      for (int c = 0; c < D / 8; c += 2) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, ptx::smem_addr(vs + swizzle<D>(v_row, c + (mi >> 1))));
        ptx::mma_16816<T>(acc[c], pa, vb[0], vb[1]);
        ptx::mma_16816<T>(acc[c + 1], pa, vb[2], vb[3]);
      }
    }
  }
  ptx::cp_async_wait<0>();

  // ---- outputs: normalise and write this thread's two rows ------------------------------------
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h ? row_b : row_a;
    if (r >= rows_here) continue;
    const int R = row_begin + r;
    const std::int64_t out_row = static_cast<std::int64_t>(q_row0 + R / G) * p.num_qo_heads +
                                 kv_head * G + R % G;
    const float inv = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
    T* o = static_cast<T*>(p.o) + out_row * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      std::uint32_t v = ptx::pack2<T>(acc[n][2 * h] * inv, acc[n][2 * h + 1] * inv);
      *reinterpret_cast<std::uint32_t*>(o + n * 8 + 2 * t4) = v;
    }
    if (t4 == 0 && p.maybe_lse)
      p.maybe_lse[out_row] =
          row_sum[h] > 0.0f ? (row_max[h] + log2f(row_sum[h])) * 0.6931471805599453f : -INFINITY;
  }
}

}  // namespace detail

struct PrefillArgs {
  DType dtype = DType::kBFloat16;
  const void* q = nullptr;     // [num_queries, num_qo_heads, head_dim], dtype
  void* o = nullptr;           // [num_queries, num_qo_heads, head_dim], dtype
  float* maybe_lse = nullptr;  // [num_queries, num_qo_heads]
  int layer = 0;
  AttentionParams params;
  bool rope = true;  // false: the RoPE-off baseline (queries and keys pre-rotated)
};

// Launches the prefill for one layer over a plan uploaded with make_prefill_schedule. The K/V of
// the new tail tokens must already be in their pages (write_tokens). No host synchronisation.
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, cudaStream_t stream = nullptr) {
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
                   " rows, expected >= 16");
  }
  if (sv.num_qtiles == 0) return;

  PrefillParams p;
  p.q = args.q;
  p.o = args.o;
  p.maybe_lse = args.maybe_lse;
  p.k_pool = pool.k_layer(args.layer);
  p.v_pool = pool.v_layer(args.layer);
  p.page_stride = geo.page_stride();
  p.head_stride = geo.head_stride();
  p.plan = pv;
  p.sched = sv;
  p.rope = rv;
  p.sm_scale_log2 = static_cast<float>(ap.scale() * 1.4426950408889634);
  p.num_qo_heads = ap.num_qo_heads;
  p.group_size = ap.group_size();
  int log2_page = 0;
  while ((1 << log2_page) < geo.page_size) ++log2_page;
  p.page_size_log2 = log2_page;
  int smem = 0;
  p = detail::prefill_layout(p, ap.head_dim, &smem);

  dispatch_dtype(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(ap.head_dim, w, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        auto launch = [&](auto kernel) {
          prepare_kernel(kernel, smem);
          dim3 grid(static_cast<unsigned>(sv.num_qtiles), static_cast<unsigned>(ap.num_kv_heads));
          kernel<<<grid, detail::kPrefillThreads, smem, stream>>>(p);
          LAZYATTN_CUDA_CHECK_LAUNCH();
        };
        if (args.rope) launch(detail::prefill_kernel<T, D, true>);
        else launch(detail::prefill_kernel<T, D, false>);
      });
    }
  });
}

}  // namespace lazyattn::cuda
