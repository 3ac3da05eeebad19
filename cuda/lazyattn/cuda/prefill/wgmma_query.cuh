// The Hopper prefill's query side: its shared-memory layout (WgmmaPrefillShape) and the
// rotation of each thread's query elements into wgmma's A fragments, once per CTA (R(m) q into
// fp32, or straight to R(m - s) q for a CTA within one segment), from exact per-position angle
// tables combined with a table of offsets 0..15. At head dim 256 the query is wgmma's A operand
// in shared memory instead (its fragments would not fit the registers beside a 64 x 256
// accumulator), rotated for each segment straight from the raw query (wgmma_query_tile).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/wgmma_ring.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"

namespace lazyattn::cuda::detail {

// Threads of the two computing warpgroups (each owns 64 of the CTA's 128 query rows), the K/V
// ring's stages (at head dims 64 and 128), and the whole CTA with the loading warpgroup.
inline constexpr int kWgmmaPrefillThreads = 256;
inline constexpr int kWgmmaStages = 4;
inline constexpr int kWgmmaWsThreads = kWgmmaPrefillThreads + 128;

// Head dims the Hopper prefill takes (the others run on the mma.sync kernel).
constexpr bool wgmma_prefill_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

// Byte offsets in the kernel's shared memory for head dim kD (sizes at 128; 64 halves each).
// kQInSmem: the query is an A operand in shared memory (head dim 256, the specialisation below).
template <int kD>
struct WgmmaPrefillShape {
  static_assert(kD == 64 || kD == 128, "the Hopper prefill's head dims with the query in registers");
  static constexpr int D = kD;
  static constexpr bool kQInSmem = false;
  static constexpr int kRing = kWgmmaStages;                // K/V stages
  static constexpr int kTileBytes = kTileKeys * D * 2;      // 16 KiB
  static constexpr int kStages = 0;                         // [stage][K, V] tiles
  // Until the prologue has read them, the raw query tile (blocked layout, 32 KiB) lies in the
  // last ring stage and the query's cos/sin tables in the one before (the K/V stream fills
  // those two after the prologue).
  static constexpr int kQRaw = kStages + (kWgmmaStages - 1) * 2 * kTileBytes;
  // [8][D / 2] float2: R(m_first + 16a), in the V slot of the stage before
  static constexpr int kCsQ = kStages + (kWgmmaStages - 2) * 2 * kTileBytes + kTileBytes;
  static constexpr int kCsOff = kCsQ + 8 * (D / 2) * 8;     // [16][D / 2] float2: R(0 .. 15)
  // [D / 4][kWgmmaPrefillThreads] float2: thread t's query elements R(m) q at [i][t] (64 KiB)
  static constexpr int kQPre = kStages + kWgmmaStages * 2 * kTileBytes;
  // [D / 16][kWgmmaPrefillThreads] uint4: thread t's A fragments of k-step kk at [kk][t]
  static constexpr int kQFrag = kQPre + (D / 4) * kWgmmaPrefillThreads * 8;
  // [wg][D / 2] float2: R(-s) for the segment being built
  static constexpr int kCsSeg = kQFrag + (D / 16) * kWgmmaPrefillThreads * 16;
  static constexpr int kTurns = kCsSeg + 2 * (D / 2) * 8;   // [D / 2] Q0.64 angles per position
  // mbarriers full[stage] (the loading warpgroup's copies landed) and empty[stage] (both
  // computing warpgroups are done with the stage), after everything else.
  static constexpr bool kSplitKV = false;  // a stage's K and V land and go back together
  static constexpr int kBars = kTurns + (D / 2) * 8;
  static constexpr int kSmemBytes = kBars + WgmmaRing<kRing, kSplitKV>::kBarriers * 8;
  static_assert(kCsOff + 16 * (D / 2) * 8 <= kQRaw, "the cos/sin tables fit their V slot");
  static_assert(kPrefillRows * D * 2 == 2 * kTileBytes, "the raw query fills one ring stage");
};

// Head dim 256: a ring of two K/V stages of 64 KiB (four would not fit beside the query), the
// rotated query tile (the A operand of S = Q K^T, blocked layout, 64 KiB), and the angle tables:
// 217 KiB of the 227 a CTA may have. There is no room for the raw query or an fp32 R(m) q, so
// each segment's query is rotated from the raw query in global memory (wgmma_query_tile).
template <>
struct WgmmaPrefillShape<256> {
  static constexpr int D = 256;
  static constexpr bool kQInSmem = true;
  static constexpr int kRing = 2;
  static constexpr int kTileBytes = kTileKeys * D * 2;      // 32 KiB
  static constexpr int kStages = 0;                         // [stage][K, V] tiles
  static constexpr int kQOp = kRing * 2 * kTileBytes;       // [128][D] 16-bit, blocked layout
  // [wg][4][D / 2] float2: R(m_first - s + 16 a) for the coarse rows a of warpgroup wg's queries
  static constexpr int kCsQ = kQOp + kPrefillRows * D * 2;
  static constexpr int kCsOff = kCsQ + 2 * 4 * (D / 2) * 8; // [16][D / 2] float2: R(0 .. 15)
  static constexpr int kTurns = kCsOff + 16 * (D / 2) * 8;  // [D / 2] Q0.64 angles per position
  // With two stages, a stage released whole (after P V read its V) is refilled only when the
  // next tile is already due, so the loads would not overlap the products. K and V of a stage
  // land and go back apart instead (WgmmaRing's kSplitKV; prefill_wgmma_kernel says when K's
  // slot goes back).
  static constexpr bool kSplitKV = true;
  static constexpr int kBars = kTurns + (D / 2) * 8;
  static constexpr int kSmemBytes = kBars + WgmmaRing<kRing, kSplitKV>::kBarriers * 8;
  // The register-query builds' buffers, which this one compiles out (named for the pointers the
  // kernel takes of them).
  static constexpr int kQRaw = kQOp, kQPre = kQOp, kQFrag = kQOp, kCsSeg = kQOp;
  static_assert(kSmemBytes <= 227 * 1024, "head dim 256: shared memory");
};

// The wgmma kernel's raw query (blocked_swizzle layout in shared memory): the pairs at dims
// col, col + 1 and col + D / 2, col + D / 2 + 1 of `row`, in fp32.
template <class T, int D>
__device__ __forceinline__ void wgmma_query_pairs(const T* q_raw, int row, int col, float2& x,
                                                  float2& y) {
  const T* x_at = q_raw + blocked_swizzle<D, kPrefillRows>(row, col >> 3) + (col & 7);
  const T* y_at = q_raw + blocked_swizzle<D, kPrefillRows>(row, (col + D / 2) >> 3) + (col & 7);
  x = ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(x_at));
  y = ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(y_at));
}

// Index of this thread's q_pre entry for A fragment (kk, r), kk < D / 32: dims col, col + 1
// (hi = 0) or col + D / 2, col + D / 2 + 1 (hi = 1), col = 16 kk + 2 t4 + 8 (r / 2).
__device__ __forceinline__ int wgmma_q_pre_index(int kk, int r, int hi, int tid) {
  return (2 * (4 * kk + r) + hi) * kWgmmaPrefillThreads + tid;
}

// A-fragment entry (kk, r) of the thread owning rows row_a, row_a + 8 (queries ia, ib) and
// columns 16 kk + 2 t4 + {0, 1, 8, 9}: the raw pairs (col, col + D / 2) and (col + 1,
// col + D / 2 + 1) times `scale`, rotated in fp32 by their query's angle, the coarse table at
// 16 (i / 16) combined with the offset table at i % 16 (x: dims col, col + 1; y: their partners).
template <class T, int D>
__device__ __forceinline__ void wgmma_rotated_query_pairs(const T* q_raw, const float2* cs_q,
                                                          const float2* cs_off, int row_a, int ia,
                                                          int ib, int t4, int kk, int r,
                                                          float scale, float2& x, float2& y) {
  constexpr int kHalf = D / 2;
  const int col = 16 * kk + 2 * t4 + 8 * (r >> 1);
  wgmma_query_pairs<T, D>(q_raw, row_a + 8 * (r & 1), col, x, y);
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
// 16 kk + 2 t4 + {0, 1, 8, 9} (+ D / 2), stored at wgmma_q_pre_index.
// __noinline__: ptxas allocates its registers apart from the kernel's (inlined, this code moves
// the schedule of the RoPE build's tile loop, which then runs slower). The segment rebuild stays
// inline: it runs at every segment change, where a call costs more than it saves.
template <class T, int D>
__device__ __noinline__ void wgmma_rotate_query(const T* q_raw, float2* q_pre, const float2* cs_q,
                                                const float2* cs_off, int row_a, int G, int t4,
                                                int tid, float q_scale) {
  const int ia = row_a / G, ib = (row_a + 8) / G;
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float2 x, y;
      wgmma_rotated_query_pairs<T, D>(q_raw, cs_q, cs_off, row_a, ia, ib, t4, kk, r, q_scale, x,
                                      y);
      q_pre[wgmma_q_pre_index(kk, r, 0, tid)] = x;
      q_pre[wgmma_q_pre_index(kk, r, 1, tid)] = y;
    }
  }
}

// The one-segment prologue's rotation, out of line (as wgmma_rotate_query, whose tables it
// reads): R(m - s) q, the scale folded into the coarse table, rounded once into the A fragments
// of this thread (q_frag[kk][tid] as store_fragments lays them out), for a CTA whose keys all lie
// in one segment: no fp32 R(m) q and no build pass.
template <class T, int D>
__device__ __noinline__ void wgmma_rotate_query_frag(const T* q_raw, uint4* q_frag,
                                                     const float2* cs_q, const float2* cs_off,
                                                     int row_a, int G, int t4, int tid) {
  const int ia = row_a / G, ib = (row_a + 8) / G;
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
    std::uint32_t lo[4], hi[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float2 x, y;  // the scale is in cs_q (x 1.0f folds away)
      wgmma_rotated_query_pairs<T, D>(q_raw, cs_q, cs_off, row_a, ia, ib, t4, kk, r, 1.0f, x, y);
      lo[r] = ptx::pack2<T>(x.x, x.y);
      hi[r] = ptx::pack2<T>(y.x, y.y);
    }
    q_frag[kk * kWgmmaPrefillThreads + tid] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    q_frag[(kk + D / 32) * kWgmmaPrefillThreads + tid] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  }
}

// RoPE off: this thread's A fragments of q * scale, straight from the raw query (fragment kk
// holds dims col, col + 1 and fragment kk + D / 32 their partners col + D / 2, col + D / 2 + 1,
// as wgmma_query_pairs reads them).
template <class T, int D>
__device__ __forceinline__ void wgmma_scaled_query(std::uint32_t (&qf)[D / 16][4], const T* q_raw,
                                                   int row_a, int t4, float q_scale) {
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row_a + 8 * (r & 1);
      const int col = 16 * kk + 2 * t4 + 8 * (r >> 1);
      float2 x, y;
      wgmma_query_pairs<T, D>(q_raw, row, col, x, y);
      qf[kk][r] = ptx::pack2<T>(x.x * q_scale, x.y * q_scale);
      qf[kk + D / 32][r] = ptx::pack2<T>(y.x * q_scale, y.y * q_scale);
    }
  }
}

// A segment's query, qf = R(-s) (R(m) q), from this thread's own q_pre entries
// (wgmma_rotate_query) and the segment's cos/sin `cs` per pair, rotate-half over all D dims.
// The k-steps unrolled: a rebuild sits on both warpgroups' paths between two runs, so its
// latency counts, not its registers (one k-step at a time is slower on the RAG tail).
template <class T, int D>
__device__ __forceinline__ void wgmma_segment_query(std::uint32_t (&qf)[D / 16][4],
                                                    const float2* q_pre, const float2* cs, int t4,
                                                    int tid) {
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
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
#pragma unroll
    for (int r = 0; r < 4; ++r) qf[kk][r] = lo[r], qf[kk + D / 32][r] = hi[r];
  }
}

// ---- other rotary layouts: interleaved (GPT-J) pairs, partial rotary dims -------------------
// Fragment (kk, r), kk < D / 16, of the thread owning rows row_a, row_a + 8 holds dims d, d + 1
// with d = 16 kk + 2 t4 + 8 (r / 2) of row row_a + 8 (r % 2). A rotary dim's partner is in the
// same entry (interleaved: d, d + 1 are one pair) or in fragment (kk +- rotary / 32, r)
// (rotate-half: partner d +- rotary / 2), so every thread rotates its own elements; dims from
// rotary_dim on pass through, scaled by sm_scale alone. Whether a fragment's dims are rotary, and
// which half of a pair they are, depends on kk only (rotary dims come in multiples of 32 in the
// rotate-half layout, of 16 interleaved).
//  - The prologue (wgmma_rotate_query_any, out of line) writes q_pre in shared memory, so its
//    loops count to run-time bounds, one loop per layout, and each rotate-half pair is rotated
//    once for both its members.
//  - The segment rebuild (wgmma_segment_query_any, inline) writes the A fragments, registers, so
//    its k-steps are unrolled; the segment's rotation comes per dim (the kernel's table: cos and
//    a signed sin for each dim, the identity past the rotary ones), so it has the same few
//    operations for every dim of every layout and no branch: an entry, its partners' entry (or
//    itself), the dims' cos/sin, four multiply-adds and one rounding.

// Slot of fragment (kk, r) of this thread in q_pre for the other layouts: [4 kk + r][thread].
__device__ __forceinline__ int wgmma_q_pre_slot(int kk, int r, int tid) {
  return (4 * kk + r) * kWgmmaPrefillThreads + tid;
}

// Dims dim, dim + 1 of the raw query's row `row` (blocked_swizzle layout), in fp32.
template <class T, int D>
__device__ __forceinline__ float2 wgmma_query_dims(const T* q_raw, int row, int dim) {
  const T* at = q_raw + blocked_swizzle<D, kPrefillRows>(row, dim >> 3) + (dim & 7);
  return ptx::unpack2<T>(*reinterpret_cast<const std::uint32_t*>(at));
}

// Where wgmma_rotate_query_any puts fragment kk (kk < D / 16; its four entries r) of this
// thread's query: fp32 into q_pre (wgmma_q_pre_slot, for the segment rebuild), or rounded once
// into the A fragments of q_frag (the one-segment form: the query is final).
struct QueryToPre {
  float2* q_pre;
  int tid;
  __device__ __forceinline__ void operator()(int kk, const float2 (&v)[4]) const {
#pragma unroll
    for (int r = 0; r < 4; ++r) q_pre[wgmma_q_pre_slot(kk, r, tid)] = v[r];
  }
};
template <class T>
struct QueryToFrag {
  uint4* q_frag;
  int tid;
  __device__ __forceinline__ void operator()(int kk, const float2 (&v)[4]) const {
    q_frag[kk * kWgmmaPrefillThreads + tid] =
        make_uint4(ptx::pack2<T>(v[0].x, v[0].y), ptx::pack2<T>(v[1].x, v[1].y),
                   ptx::pack2<T>(v[2].x, v[2].y), ptx::pack2<T>(v[3].x, v[3].y));
  }
};

// wgmma_rotate_query for the other layouts: fragment kk of R(m) q (or R(m - s) q, with the
// tables at m - s) through `store` (QueryToPre, QueryToFrag), rotary dims scaled by q_scale, the
// others by pass_scale; query row i's angle from the coarse table at 16 (i / 16) combined with
// the offset table at i % 16 (both [row][pair], a row stride of D / 2 pairs). The loops over
// k-steps count to run-time bounds (the rotary k-steps, then the rest): the destinations are in
// shared memory, so no fragment index needs to be known at compile time here.
template <class T, int D, class Store>
__device__ __noinline__ void wgmma_rotate_query_any(const T* q_raw, Store store,
                                                    const float2* cs_q, const float2* cs_off,
                                                    int row_a, int G, int t4, int rotary,
                                                    bool interleaved, float q_scale,
                                                    float pass_scale) {
  constexpr int kStride = D / 2;
  const int ia = row_a / G, ib = (row_a + 8) / G;
  const int rot_steps = rotary / 16;
  auto angle = [&](int r, int j) {
    const int i = (r & 1) ? ib : ia;
    return combine_angles(cs_q[(i >> 4) * kStride + j], cs_off[(i & 15) * kStride + j]);
  };
  auto scaled = [](float2 v, float f) { return make_float2(v.x * f, v.y * f); };
  if (interleaved) {
    for (int kk = 0; kk < rot_steps; ++kk) {
      float2 x[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = 16 * kk + 2 * t4 + 8 * (r >> 1);
        x[r] = scaled(wgmma_query_dims<T, D>(q_raw, row_a + 8 * (r & 1), d), q_scale);
        rotate_pair(x[r].x, x[r].y, angle(r, d >> 1));
      }
      store(kk, x);
    }
  } else {
    // Pairs (j, j + rotary / 2): the first half's fragment kk with its partners' fragment
    // kk + rotary / 32, both rotated and stored here.
    const int half = rotary / 2, shift = rotary / 32;
    for (int kk = 0; kk < shift; ++kk) {
      float2 x[4], y[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int d = 16 * kk + 2 * t4 + 8 * (r >> 1);
        const int row = row_a + 8 * (r & 1);
        x[r] = scaled(wgmma_query_dims<T, D>(q_raw, row, d), q_scale);
        y[r] = scaled(wgmma_query_dims<T, D>(q_raw, row, d + half), q_scale);
        rotate_pair(x[r].x, y[r].x, angle(r, d));
        rotate_pair(x[r].y, y[r].y, angle(r, d + 1));
      }
      store(kk, x);
      store(kk + shift, y);
    }
  }
  for (int kk = rot_steps; kk < D / 16; ++kk) {
    float2 x[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int d = 16 * kk + 2 * t4 + 8 * (r >> 1);
      x[r] = scaled(wgmma_query_dims<T, D>(q_raw, row_a + 8 * (r & 1), d), pass_scale);
    }
    store(kk, x);
  }
}

// wgmma_segment_query for the other layouts: qf = R(-s) (R(m) q) from this thread's q_pre
// (wgmma_rotate_query_any through QueryToPre) and the segment's rotation per dim, cs_dims[d] =
// (cos, sin) with the sin signed for d's place in its pair (first -, second +; (1, 0) past the
// rotary dims): dim d's entry x, its partner's y, x cos + y sin.
template <class T, int D>
__device__ __forceinline__ void wgmma_segment_query_any(std::uint32_t (&qf)[D / 16][4],
                                                        const float2* q_pre,
                                                        const float2* cs_dims, int t4, int tid,
                                                        int rotary, bool interleaved) {
  const int half = rotary / 2, shift = rotary / 32;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // The k-step of this one's partners: rotate-half, kk +- rotary / 32; itself where the
    // partners are in the same entry (interleaved) or there are none (dims past the rotary).
    const int kp = interleaved || 16 * kk >= rotary ? kk : 16 * kk < half ? kk + shift : kk - shift;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float2 x = q_pre[wgmma_q_pre_slot(kk, r, tid)];
      const float2 y = q_pre[wgmma_q_pre_slot(kp, r, tid)];
      const float4 c = *reinterpret_cast<const float4*>(cs_dims + 16 * kk + 2 * t4 + 8 * (r >> 1));
      const float px = interleaved ? x.y : y.x, py = interleaved ? x.x : y.y;
      qf[kk][r] = ptx::pack2<T>(x.x * c.x + px * c.y, x.y * c.z + py * c.w);
    }
  }
}

// Head dim 256 (the query in shared memory): rows [64 wg, 64 wg + 64) of the CTA's query tile,
// R(m - s) q scaled and rounded once, into q_op (blocked_swizzle layout: wgmma's A operand),
// from the raw query in global memory; rows from rows_here on zero. The work items are the
// key pass's (prefill/key_pass.cuh): a chunk of 8 rotate-half first members with the chunk
// of their partners, a chunk of 4 interleaved pairs, or a chunk past the rotary dims (scaled by
// pass_scale alone; every chunk with rope false). Query i = row / G of the CTA takes the angle of
// the coarse table's row i / 16 - a0 combined with the offset table's row i % 16 (row 0 of both
// where row_step is 0: queries rotated at their own positions), each a [row][D / 2] table.
template <class T, int D>
__device__ __forceinline__ void wgmma_query_tile(const PrefillParams& p, T* q_op,
                                                 const float2* coarse, const float2* fine, int wg,
                                                 int wg_tid, int q_row0, int i_first,
                                                 int rows_here, int G, int kv_head, bool rope,
                                                 int rot_half, bool interleaved, int row_step,
                                                 float q_scale, float pass_scale) {
  constexpr int kChunks = D / 8, kStride = D / 2;
  const int half_chunks = rope && !interleaved ? rot_half / 8 : 0;
  const int items = kChunks - half_chunks;
  const int a0 = row_step ? (64 * wg / G) >> 4 : 0;
  const T* q = static_cast<const T*>(p.q);
  for (int w_item = wg_tid; w_item < 64 * items; w_item += 128) {
    const int r = 64 * wg + w_item / items, u = w_item % items;
    const bool pairs_half = u < half_chunks;
    const int c = pairs_half ? u : u + half_chunks;  // the x chunk
    const int y_at = rot_half + 8 * u;               // its partners' first dim (pairs_half)
    const bool rotary = rope && (pairs_half || 8 * c < 2 * rot_half);
    uint4 xv = make_uint4(0, 0, 0, 0), yv = xv;
    if (r < rows_here) {
      const T* src = q + (static_cast<std::int64_t>(q_row0 + i_first + r / G) * p.num_qo_heads +
                          kv_head * G + r % G) *
                             D;
      xv = __ldg(reinterpret_cast<const uint4*>(src + 8 * c));
      if (pairs_half) yv = __ldg(reinterpret_cast<const uint4*>(src + y_at));
      const int i = r / G;
      const float2* cr = coarse + (row_step ? (i >> 4) - a0 : 0) * kStride;
      const float2* fr = fine + (row_step ? i & 15 : 0) * kStride;
      std::uint32_t* xw = reinterpret_cast<std::uint32_t*>(&xv);
      std::uint32_t* yw = reinterpret_cast<std::uint32_t*>(&yv);
      const float f = rotary ? q_scale : pass_scale;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float2 x = ptx::unpack2<T>(xw[w]);
        x.x *= f, x.y *= f;
        if (pairs_half) {  // pairs 8u + 2w, + 1: dims (8u + 2w, rot_half + 8u + 2w), (+1, +1)
          const int j = 8 * u + 2 * w;
          float2 y = ptx::unpack2<T>(yw[w]);
          y.x *= f, y.y *= f;
          rotate_pair(x.x, y.x, combine_angles(cr[j], fr[j]));
          rotate_pair(x.y, y.y, combine_angles(cr[j + 1], fr[j + 1]));
          yw[w] = ptx::pack2<T>(y.x, y.y);
        } else if (rotary) {  // interleaved pair 4c + w: dims 8c + 2w, + 1
          const int j = 4 * c + w;
          rotate_pair(x.x, x.y, combine_angles(cr[j], fr[j]));
        }
        xw[w] = ptx::pack2<T>(x.x, x.y);
      }
    }
    *reinterpret_cast<uint4*>(q_op + blocked_swizzle<D, kPrefillRows>(r, c)) = xv;
    if (pairs_half) *reinterpret_cast<uint4*>(q_op + blocked_swizzle<D, kPrefillRows>(r, y_at >> 3)) = yv;
  }
}

}  // namespace lazyattn::cuda::detail
