// The Hopper prefill (sm_90a): warpgroup MMA, FlashAttention-3's warp specialisation and
// ping-pong, for head dims 64, 128 and 256, 16-bit, every storage form and rotary layout or RoPE
// off (kRope = false: pre-rotated queries and keys); other head dims run on the mma.sync kernel
// (prefill/mma_sync.cuh). One CTA takes 128 query rows (GQA-packed) of one request and one KV
// head. docs/06-cuda.md ("The Hopper kernel") describes it in full, with the measurements
// behind each choice. In short:
//  - Warpgroup 2 loads the K/V tiles through a ring of stages (prefill/wgmma_loader.cuh; at
//    head dim 256, two stages, K and V of a 16-bit stage land and go back apart);
//    positioned K (raw-form plans; local ones over segments at head dims 64 and 256) and fp8
//    tiles come ready from a pass before the kernel (prefill/key_pass.cuh, fp8_tiles.cuh).
//  - The query is wgmma's A operand from registers, rotated once per CTA to R(m) q in fp32
//    (wgmma_query.cuh); a segment starting at s takes R(-s) of it, built between two segments'
//    runs of tiles, so the loop over a run has no RoPE code. kOneSeg rotates straight to
//    R(m - s) once; over keys the key pass positioned (kPositionedK) that is R(m), one segment
//    at 0. Head dim 256 (kQSmem) keeps the query in shared memory, rebuilt per segment from
//    global memory.
//  - S(j) and P(j-1) V(j-1) go back to back (tile j's softmax under P V); the computing
//    warpgroups take turns issuing.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/mbarrier.cuh"
#include "lazyattn/cuda/prefill/io.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/key_pass.cuh"
#include "lazyattn/cuda/prefill/wgmma_loader.cuh"
#include "lazyattn/cuda/prefill/wgmma_query.cuh"
#include "lazyattn/cuda/prefill/wgmma_ring.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/softmax.cuh"
#include "lazyattn/cuda/wgmma.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

// kD: the head dim (64, 128 or 256). kAnyRotary: interleaved pairs or rotary dims fewer than kD
// (read at run time); false: the rotate-half layout over all dims, with compile-time tables (its
// own build: with both paths in one, the local form's tile loop ran 7-12% slower).
template <class T, int kD, bool kRope, bool kOneSeg = false, KvTiles kKv = KvTiles::kPages,
          bool kAnyRotary = false>
__global__ void __launch_bounds__(kWgmmaWsThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(!kOneSeg || kRope, "the one-segment form rotates its query once");
  static_assert(!kAnyRotary || kRope, "other layouts: a RoPE build");
  static_assert(kKv != KvTiles::kPositionedK || (kRope && kOneSeg), "kPositionedK");
  using Shape = WgmmaPrefillShape<kD>;
  static_assert(!kAnyRotary || !Shape::kQInSmem, "head dim 256 reads the layout in every build");
  constexpr int D = Shape::D;
  constexpr int kThreads = kWgmmaPrefillThreads;
  constexpr bool kQSmem = Shape::kQInSmem;  // head dim 256
  constexpr int S = Shape::kRing;
  // Head dim 256: K and V of a stage land and go back apart (WgmmaPrefillShape<256>). K's slot
  // goes back as soon as S has read it (kEarlyK; every computing thread arrives, since a branch
  // on the lane while P V is in flight would make ptxas wait for P V), except over fp8 scratch
  // tiles, where returning it with V's, after P V, measured 2-3% faster (docs/performance.md,
  // "Head dim 256: K and V apart").
  constexpr bool kSplitKV = Shape::kSplitKV;
  constexpr bool kEarlyK = kSplitKV && kKv != KvTiles::kScratch;
  constexpr int KSteps = D / 16;
  constexpr int kHalf = D / 2;  // the tables' row stride in pairs (rotary_dim <= D)
  // The loading warpgroup's registers: 24; 40 where it takes positioned K by the TMA (as raw
  // tiles' once, which spilled at 24) and 32 where it checks for runs of pages. The computing
  // warpgroups share the rest of 3 x 168, rounded down to a multiple of 8 (240 or 232).
  constexpr int kLoadRegs =
      kKv == KvTiles::kPositionedK && kD != 256 ? 40 : kLoaderRunMaps<kKv, kD> ? 32 : 24;
  constexpr int kComputeRegs = (3 * 168 - kLoadRegs) / 2 / 8 * 8;
  extern __shared__ __align__(1024) unsigned char smem[];
  if ((ptx::smem_addr(smem) & 1023u) != 0) __trap();  // the swizzle keys on address bits
  T* q_raw = reinterpret_cast<T*>(smem + Shape::kQRaw);
  float2* q_pre = reinterpret_cast<float2*>(smem + Shape::kQPre);
  uint4* q_frag = reinterpret_cast<uint4*>(smem + Shape::kQFrag);
  float2* cs_seg = reinterpret_cast<float2*>(smem + Shape::kCsSeg);  // [wg][pair]
  // [segment - seg0][dim] (the other rotary layouts, kSegTable): R(-s) of every segment of the
  // CTA's tiles, in q_frag's space (only the one-segment builds use q_frag), when they are at
  // most kSegTableRows; else [wg][dim], each warpgroup's current segment.
  float2* seg_table = reinterpret_cast<float2*>(smem + Shape::kQFrag);
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
  // Rotary pairs (kRope) and layout: read at run time in the builds that take any layout.
  constexpr bool kRunTimeLayout = kAnyRotary || kQSmem;
  const int rot_half = kRunTimeLayout ? p.rope.rotary_dim / 2 : kHalf;
  const bool interleaved = kRunTimeLayout && p.rope.interleaved != 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * rot_half;
  const float2* offset_cs =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;

  int tile_begin, tile_end;
  cta_tile_range(p, b, max_visible_tail, tile_begin, tile_end);

  // ---- barriers; then warpgroup 2 loads the K/V ring and leaves ------------------------------
  const WgmmaRing<S, kSplitKV> ring{ptx::smem_addr(smem + Shape::kBars)};
  // A stage (kSplitKV: K's slot) goes back on one arrival per computing warp; kEarlyK, one per
  // computing thread.
  if (tid == 0) ring.init(kEarlyK ? kThreads : 8);
  __syncthreads();
  if (tid >= kThreads) {
    ptx::setmaxnreg_dec<kLoadRegs>();
    wgmma_load_kv<T, D, S, kKv, !kQSmem, kRope && !kOneSeg, kSplitKV>(
        p, reinterpret_cast<T*>(smem + Shape::kStages), ring, tid - kThreads, lane,
        tile_begin, tile_end, kv_head);
    return;
  }
  ptx::setmaxnreg_inc<kComputeRegs>();

  // ---- the raw query tile (blocked layout), zero past the request --------------------------
  if constexpr (!kQSmem)
    load_query_tile<T, D, kThreads>(
        p, q_raw, tid, q_row0, i_first, rows_here, G, kv_head,
        [](int r, int chunk) { return blocked_swizzle<D, kPrefillRows>(r, chunk); });

  // K/V ring of S stages (the loading warpgroup fills them; here only the stages' addresses and
  // the tile records): tile j's iteration reads K(j) and V(j - 1) (P(j - 1) V(j - 1) runs under
  // tile j's softmax). Until the prologue has read them, the raw query lies in stage 3, the
  // cos/sin tables in stage 2's V slot.
  static_assert(kQSmem || S == 4, "the prologue's staging assumes four stages");
  using Stream = TileStream<T, D, kThreads, S, true>;
  Stream stream = Stream::for_head(p, kv_head, tile_end, tid,
                                   reinterpret_cast<T*>(smem + Shape::kStages));
  ptx::cp_async_commit();  // the raw query's copies (the loading warpgroup streams K/V)

  // cos/sin of -s (segment start s) for every rotary pair, into this warpgroup's buffer (its
  // first rot_half threads; the caller syncs the warpgroup before anyone reads).
  const int wg_tid = tid % 128;
  auto wg_barrier = [&] {
    if (wg == 0) ptx::named_barrier_sync<1, 128>();
    else ptx::named_barrier_sync<2, 128>();
  };
  // The other layouts (kAnyRotary) keep a segment's R(-s) per dim, not per pair: dim d's
  // (cos, sin) signed as rotate_element takes it (a pair's first dim (cos, -sin), its second
  // (cos, sin)), (1, 0) past the rotary dims, so the rebuild does the same for every layout
  // (wgmma_segment_query_any). Pair j's two entries of row `row`:
  auto store_pair_dims = [&](float2* row, int j, float2 c) {
    row[interleaved ? 2 * j : j] = make_float2(c.x, -c.y);
    row[interleaved ? 2 * j + 1 : j + rot_half] = c;
  };
  // Rows [0, rows) of a per-dim table: (1, 0) past the rotary dims (they never change). Only
  // the kAnyRotary builds keep such tables; elsewhere pass would be the constant 0.
  auto store_pass_dims = [&](float2* table, int rows) {
    if constexpr (kAnyRotary) {
      const int pass = D - 2 * rot_half;
      for (int i = tid; i < rows * pass; i += kThreads)
        table[(i / pass) * D + 2 * rot_half + i % pass] = make_float2(1.0f, 0.0f);
    }
  };
  // The CTA's segments are consecutive (one request's), seg0 the first tile's. In the builds
  // of the other rotary layouts (kSegTable), when the CTA's tiles span at most kSegTableRows
  // segments, the prologue computes every segment's R(-s) once for both warpgroups (seg_table)
  // and a rebuild between two runs only rotates the query; otherwise each rebuild computes its
  // segment's into the warpgroup's row between two warpgroup barriers (rows 0 and 1 of the same
  // space). Where each build stands and why (A/B) is in docs/06-cuda.md.
  constexpr bool kSegTable = kAnyRotary && !kOneSeg;
  constexpr int kSegTableRows = (D / 16) * kThreads * 16 / (D * 8);  // 32 rows of D dims
  [[maybe_unused]] int seg0 = 0;
  [[maybe_unused]] bool use_table = false;
  // The warpgroup's row where the table does not hold the CTA's segments.
  auto own_cs_row = [&] { return kAnyRotary ? seg_table + wg * D : cs_seg + wg * kHalf; };
  auto compute_seg = [&](std::int64_t seg_start) {
    if (wg_tid < rot_half) {
      const float2 c = rope_cos_sin(-seg_start, s_turns[wg_tid]);
      if constexpr (kAnyRotary) store_pair_dims(own_cs_row(), wg_tid, c);
      else cs_seg[wg * kHalf + wg_tid] = c;
    }
  };
  // Every dim rotary in the rotate-half layout: the query side's tuned path (pairs d, d + D / 2
  // in k-steps kk, kk + D / 32); interleaved pairs and partial rotary dims take the general one.
  constexpr bool full_half = !kAnyRotary;
  // The offset table's 16 rows (row 0, the identity, for every row of a pre-rotated query).
  auto load_offsets = [&] {
    for (int i = tid; i < 16 * kHalf; i += kThreads) {
      if constexpr (!kRunTimeLayout) cs_off[i] = offset_cs[row_step ? i : i % kHalf];
      else if (i % kHalf < rot_half)
        cs_off[i] = offset_cs[(row_step ? i / kHalf : 0) * rot_half + i % kHalf];
    }
  };
  // Tile records rolled two tiles ahead (each read two tiles before it is needed) as TileKeys;
  // the whole record only for the next run's first tile, ti_run.
  auto load_keys = [&](int t) {  // past the end: no keys (as TileStream::info_nb)
    const TileInfo* r = p.sched.tiles + min(t, tile_end - 1);
    return TileKeys{r->key0, t < tile_end ? r->rows : 0, r->is_tail};
  };
  const TileInfo first = stream.info(tile_begin);
  TileInfo ti_run = stream.info(tile_begin + 1);
  TileKeys r_cur = TileKeys::of(first), r_next = TileKeys::of(ti_run), r_n2;
  // The query's segment start: 0 where every key is positioned (kPositionedK, or fp8 tiles the
  // pass positioned).
  std::int64_t q_seg_start =
      kKv == KvTiles::kPositionedK || (kKv == KvTiles::kScratch && p.keys_positioned != 0)
          ? 0
          : first.seg_start;
  const float q_scale = kRope ? p.sm_scale_log2 * p.rope.query_scale : p.sm_scale_log2;
  if constexpr (kQSmem) {
    if (kRope) {
      load_offsets();
      for (int j = tid; j < rot_half; j += kThreads) s_turns[j] = turns[j];
    }
    ptx::named_barrier_sync<3, kThreads>();  // the tables stored (the computing warps alone)
  } else if constexpr (kOneSeg) {
    // Tables for R(m - s), the scale folded into the coarse one, each thread's angle steps read
    // from global memory: no barrier before the raw query's (run's first), which orders these
    // writes before every read (the loader passes one barrier fewer in its hand_over).
    // (Offset row 0 is the identity: every row of a pre-rotated query takes it.)
    load_offsets();
    const int coarse_rows = (kPrefillRows / G + 15) / 16;
    const std::int64_t base = m_first - q_seg_start;
    for (int i = tid; i < coarse_rows * kHalf; i += kThreads) {
      if (i % kHalf >= rot_half) continue;
      const float2 c = rope_cos_sin(base + 16 * row_step * (i / kHalf), turns[i % kHalf]);
      cs_q[i] = make_float2(c.x * q_scale, c.y * q_scale);
    }
  } else if (kRope) {
    load_offsets();
    for (int j = tid; j < rot_half; j += kThreads) s_turns[j] = turns[j];
    __syncthreads();  // warp-specialised: the loader too (its hand_over)
    const int coarse_rows = (kPrefillRows / G + 15) / 16;
    for (int i = tid; i < coarse_rows * kHalf; i += kThreads)
      if (i % kHalf < rot_half)
        cs_q[i] = rope_cos_sin(m_first + 16 * row_step * (i / kHalf), s_turns[i % kHalf]);
    // Read after the prologue's barrier (run's first). A segment's start as its tiles carry it
    // (schedule.hpp's tile_start).
    int nseg = 1;
    if constexpr (kSegTable) {
      seg0 = first.segment;
      if (tile_begin < tile_end) nseg = p.sched.tiles[tile_end - 1].segment - seg0 + 1;
      use_table = nseg <= kSegTableRows;
    }
    if (use_table) {
      for (int i = tid; i < nseg * kHalf; i += kThreads) {
        if (i % kHalf >= rot_half) continue;
        const int seg = seg0 + i / kHalf;
        const std::int64_t start = rotation_start(
            static_cast<StorageForm>(p.plan.segment_form[seg]), p.plan.segment_start[seg]);
        const float2 c = rope_cos_sin(-start, s_turns[i % kHalf]);
        store_pair_dims(seg_table + (i / kHalf) * D, i % kHalf, c);
      }
      store_pass_dims(seg_table, nseg);
    } else {
      if constexpr (kAnyRotary) store_pass_dims(seg_table, 2);
      compute_seg(q_seg_start);
    }
  }

  // Head dim 256: this warpgroup's 64 rows of R(m - s) q (q scaled for RoPE off) from global
  // memory, by the coarse table R(m_first - s + 16 a), 4 rows; no wgmma of them in flight.
  [[maybe_unused]] T* const q_op = reinterpret_cast<T*>(smem + Shape::kQRaw);
  [[maybe_unused]] auto build_query_tile = [&](std::int64_t seg_start) {
    float2* coarse = cs_q + wg * 4 * kHalf;
    if (kRope) {
      const int a0 = row_step ? (64 * wg / G) >> 4 : 0;
      wg_barrier();  // the last build's reads of the coarse table are done
      for (int i = wg_tid; i < 4 * kHalf; i += 128)
        if (i % kHalf < rot_half)
          coarse[i] = rope_cos_sin(m_first - seg_start + 16 * row_step * (a0 + i / kHalf),
                                   s_turns[i % kHalf]);
      wg_barrier();
    }
    wgmma_query_tile<T, D>(p, q_op, coarse, cs_off, wg, wg_tid, q_row0, i_first, rows_here, G,
                           kv_head, kRope, rot_half, interleaved, row_step, q_scale,
                           kRope ? p.sm_scale_log2 : q_scale);
    ptx::fence_proxy_async_smem();  // the generic-proxy stores, before wgmma reads them
    wg_barrier();
  };

  // This thread's query elements, as wgmma's A fragments (mma.sync's A layout), held in
  // registers throughout: k-step kk, [0] (row_a, c..c+1), [1] (row_a + 8, c..), [2] (row_a,
  // c+8..), [3] (row_a + 8, c+8..), c = 16 kk + 2 t4. Pair (col, col + D / 2) of fragment (kk, r),
  // kk < D / 32, is q_pre entry 2 (4 kk + r) (dims col, col + 1) and 2 (4 kk + r) + 1 (dims
  // col + D / 2, col + D / 2 + 1).
  std::uint32_t qf[kQSmem ? 1 : KSteps][4];
  // Prologue (the raw query landed): R(m) q * scale into q_pre (kRope, out of line), or
  // q * scale into qf; kOneSeg: R(m - s) q * scale into qf, through this thread's q_frag entries
  // (out of line; its own entries, so no barrier).
  auto prepare_query = [&] {
    if constexpr (kQSmem) {
      build_query_tile(q_seg_start);
    } else if constexpr (kOneSeg) {
      if constexpr (kAnyRotary)  // the query scale is in the coarse table (rotary dims only)
        wgmma_rotate_query_any<T, D>(q_raw, QueryToFrag<T>{q_frag, tid}, cs_q, cs_off, row_a, G,
                                     t4, p.rope.rotary_dim, interleaved, 1.0f, p.sm_scale_log2);
      else wgmma_rotate_query_frag<T, D>(q_raw, q_frag, cs_q, cs_off, row_a, G, t4, tid);
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        const uint4 f = q_frag[kk * kThreads + tid];
        qf[kk][0] = f.x, qf[kk][1] = f.y, qf[kk][2] = f.z, qf[kk][3] = f.w;
      }
    } else if constexpr (kRope) {
      if constexpr (full_half)
        wgmma_rotate_query<T, D>(q_raw, q_pre, cs_q, cs_off, row_a, G, t4, tid, q_scale);
      else
        wgmma_rotate_query_any<T, D>(q_raw, QueryToPre{q_pre, tid}, cs_q, cs_off, row_a, G, t4,
                                     p.rope.rotary_dim, interleaved, q_scale, p.sm_scale_log2);
    } else {
      wgmma_scaled_query<T, D>(qf, q_raw, row_a, t4, q_scale);
    }
  };
  // qf = R(-s) (R(m) q) for the segment whose cos/sin are at cs (kRope only). Reads this
  // thread's own q_pre entries: no barrier with the prologue.
  auto build_query = [&](const float2* cs) {
    if constexpr (kQSmem) return;  // no fragments (build_query_tile); the body must compile
    else if constexpr (full_half) wgmma_segment_query<T, D>(qf, q_pre, cs, t4, tid);
    else wgmma_segment_query_any<T, D>(qf, q_pre, cs, t4, tid, p.rope.rotary_dim, interleaved);
  };
  // S = Q K^T for this warpgroup's 64 rows against the tile in ring stage `stage` (issued, not
  // waited for).
  auto issue_qk = [&](float (&s)[32], int stage) {
    const std::uint32_t k_addr = ptx::smem_addr(stream.k_stage(stage));
    ptx::fence_operands(s);
    ptx::wgmma_fence();
    if constexpr (kQSmem) {  // the warpgroup's 64 rows start 64 x 128 bytes into each block
      const std::uint32_t q_addr = ptx::smem_addr(q_op) + wg * 64 * 128;
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        const std::uint32_t kstep = (kk / 4) * (kTileKeys * 128) + (kk % 4) * 32;
        const std::uint32_t qstep = (kk / 4) * (kPrefillRows * 128) + (kk % 4) * 32;
        ptx::wgmma_ss_m64n64k16<T, false>(s, ptx::wgmma_desc(q_addr + qstep, 16, 1024),
                                          ptx::wgmma_desc(k_addr + kstep, 16, 1024), kk > 0);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < KSteps; ++kk) {
        const std::uint32_t kstep = (kk / 4) * (kTileKeys * 128) + (kk % 4) * 32;
        ptx::wgmma_rs_m64n64k16<T, false>(s, qf[kk], ptx::wgmma_desc(k_addr + kstep, 16, 1024),
                                          kk > 0);
      }
    }
    ptx::wgmma_commit();
  };

  // m64nD accumulator: D / 8 column blocks x 4, as blocks of the N = 128 (N = 64 at head dim 64)
  // wgmmas that write it; o_at(i) is entry i of the whole (i compile-time).
  constexpr int kON = D >= 128 ? 64 : 32;
  constexpr int kOB = D / 2 / kON;
  float o[kOB][kON];
  auto o_at = [&](int i) -> float& { return o[i / kON][i % kON]; };
  auto fence_o = [&] {
#pragma unroll
    for (int b = 0; b < kOB; ++b) ptx::fence_operands(o[b]);
  };
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o_at(i) = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float s[32];
  std::uint32_t pa[4][4];  // P of the previous tile, wgmma's A operand for O += P V

  // O += P V for the tile in ring stage `stage` (issued, not waited for).
  auto issue_pv = [&](int stage) {
    const std::uint32_t v_addr = ptx::smem_addr(stream.v_stage(stage));
    fence_o();
    ptx::wgmma_fence();
#pragma unroll
    for (int kv = 0; kv < 4; ++kv) {
#pragma unroll
      for (int b = 0; b < kOB; ++b) {  // block b: V's 64-column blocks 2b, 2b + 1
        const std::uint64_t dv = ptx::wgmma_desc(
            v_addr + kv * 16 * 128 + b * 2 * kTileKeys * 128, kTileKeys * 128, 1024);
        if constexpr (D >= 128) ptx::wgmma_rs_m64n128k16<T, true>(o[b], pa[kv], dv, 1);
        else ptx::wgmma_rs_m64n64k16<T, true>(o[b], pa[kv], dv, 1);
      }
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
  auto softmax = [&](const TileKeys& ti, float (&scale)[2], auto masked) {
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
    for (int h = 0; h < 2; ++h)
      scale[h] = online_softmax_row<8>(
          [&](int n, int e) -> float& { return s[4 * n + 2 * h + e]; }, row_max[h], row_sum[h]);
  };
  // O *= scale where a row of the warp took a new max (no wgmma owns O, so the branch makes
  // ptxas wait for none), then P into pa. The build over fp8 scratch tiles at head dim 128
  // rescales every tile: the branch made it 2-5% slower there (docs/performance.md,
  // "Conditional rescale in the online softmax").
  constexpr bool kSkipRescale = !(kKv == KvTiles::kScratch && D == 128);
  auto rescale_and_pack = [&](const float (&scale)[2]) {
    if (!kSkipRescale || warp_needs_rescale(scale[0], scale[1])) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_at(4 * n + e) *= scale[e >> 1];
    }
#pragma unroll
    for (int kv = 0; kv < 4; ++kv)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kv][r] = ptx::pack2<T>(s[8 * kv + 2 * r], s[8 * kv + 2 * r + 1]);
  };
  // Between two tiles of different segments (no wgmma in flight): the query for the segment
  // starting at `seg_start`. Only here, outside the loop over a segment's tiles, which then has
  // no RoPE code at all (RoPE code in it slows every tile).
  // The cos/sin of the first segment's query (kRope, not kOneSeg).
  auto first_cs = [&] { return use_table ? seg_table : own_cs_row(); };
  auto rebuild_query = [&](std::int64_t seg_start, int segment) {
    if constexpr (kQSmem) {
      build_query_tile(seg_start);
    } else {
      const float2* cs = seg_table + (segment - seg0) * D;
      if (!kSegTable || !use_table) {
        wg_barrier();  // the last build's reads of the buffer are done (warpgroup 0 passes no
                       // CTA barrier between the prologue's build and the first run)
        compute_seg(seg_start);
        wg_barrier();
        cs = own_cs_row();
      }
      build_query(cs);
    }
    q_seg_start = seg_start;
  };

  // ---- the tile loop, ping-pong between the warpgroups ----------------------------------------
  // Iteration it's stage landed (the loading warpgroup's cp.async writes, seen by this thread's
  // wgmmas through the async proxy).
  auto wait_full = [&](int it) {
    ptx::mbarrier_wait(ring.full(it % S), ring.phase(it));
    ptx::fence_proxy_async_smem();
  };
  // kSplitKV: wait_full is K(it)'s; V(it)'s apart (before P V over it, an iteration later).
  auto wait_full_v = [&](int it) {
    if constexpr (kSplitKV) {
      ptx::mbarrier_wait(ring.full_v(it % S), ring.phase(it));
      ptx::fence_proxy_async_smem();
    }
  };
  // Turns: warpgroup w issues after bar.sync 5 + w and hands over with
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
    if constexpr (!kQSmem) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // everyone's raw query landed (the loader passes it in its hand_over)
    }
    // K(tile_begin) is waited for before the query's rotation, not after: the RoPE builds are
    // faster so, though the computing warps wait here.
    wait_full(0);
    r_n2 = load_keys(tile_begin + 2);
    prepare_query();  // reads the raw query (stage 3) and the cos/sin tables (stage 2's V slot)
    if constexpr (!kQSmem) {
      __syncthreads();  // with the loader: it may refill stages 2 and 3
      if (kRope && !kOneSeg) build_query(first_cs());
    }
    if constexpr (kLate) pass_turn(late);  // warpgroup 0 goes first
    take_turn(late);
    issue_qk(s, 0);
    pass_turn(late);
    ptx::wgmma_wait<0>();
    ptx::fence_operands(s);
    // kSplitKV: K(tile_begin) is read.
    if constexpr (kEarlyK) ptx::mbarrier_arrive(ring.empty(0));
    else if (kSplitKV && lane == 0) ptx::mbarrier_arrive(ring.empty(0));
    float scale[2];
    softmax(r_cur, scale, std::true_type{});
    rescale_and_pack(scale);

    // Runs of tiles of one segment; between two runs (no wgmma in flight), the next segment's
    // query. The loop over a run has no RoPE code and counts to a bound known at its start (a
    // per-tile segment test in the loop is slower per tile).
    int tile = tile_begin + 1, it = 1;
    while (tile < tile_end) {
      int run_end = tile_end;
      if (kRope && !kOneSeg) {
        const TileInfo& rec = ti_run;  // tile's
        const int seg_length = p.plan.segment_length[rec.segment];  // lands during the rebuild
        if (rec.seg_start != q_seg_start) rebuild_query(rec.seg_start, rec.segment);
        run_end = min(tile_end, tile + (seg_length - rec.key0 + kTileKeys - 1) / kTileKeys);
        ti_run = stream.info_nb(run_end);  // lands under this run
      }
      // One tile of the run; `masked` as softmax's.
      auto tile_step = [&](auto masked) {
        wait_full(it);
        wait_full_v(it - 1);
        r_cur = r_next;
        r_next = r_n2;
        r_n2 = load_keys(tile + 2);
        // S(tile) and P(tile - 1) V(tile - 1) back to back; the softmax of S runs under P V.
        take_turn(late);
        issue_qk(s, it % S);
        issue_pv((it - 1) % S);
        pass_turn(late);
        ptx::wgmma_wait<1>();
        ptx::fence_operands(s);
        // kEarlyK: K(tile) is read; its slot takes K(tile + 2) under this softmax and P V.
        if constexpr (kEarlyK) ptx::mbarrier_arrive(ring.empty(it % S));
        softmax(r_cur, scale, masked);
        ptx::wgmma_wait<0>();
        fence_o();
        // Stage it - 1 (K read by S(tile - 1), V by P V just now) is free for this warp;
        // kSplitKV: its V slot (and, not kEarlyK, K(tile)'s slot).
        if (lane == 0) {
          if constexpr (kSplitKV && !kEarlyK) ptx::mbarrier_arrive(ring.empty(it % S));
          ptx::mbarrier_arrive(kSplitKV ? ring.empty_v((it - 1) % S) : ring.empty((it - 1) % S));
        }
        rescale_and_pack(scale);
      };
      // The body without the mask where every row sees the whole tile (faster than one masked
      // body for every tile).
      for (; tile < run_end; ++tile, ++it) {
        // r_next is this tile's (tile_step shifts it into r_cur). The test is the same for the
        // whole CTA (its first row sees the fewest tail keys), so both warpgroups take the same
        // body, and nothing is in flight at this branch.
        const bool whole = r_next.rows == kTileKeys &&
                           (!r_next.is_tail || r_next.key0 + kTileKeys - 1 <= first_visible);
        if (whole) tile_step(std::false_type{});
        else tile_step(std::true_type{});
      }
    }
    wait_full_v(tile_end - 1 - tile_begin);
    issue_pv((tile_end - 1 - tile_begin) % S);  // the last tile's P V
    ptx::wgmma_wait<0>();
    fence_o();
    if constexpr (!kLate) take_turn(late);  // warpgroup 1's last hand-over
  };
  if (tile_begin < tile_end) {
    if (wg == 0) run(std::false_type{});
    else run(std::true_type{});
  } else if constexpr (!kQSmem) {
    __syncthreads();  // no prologue: the loader has nothing to do
  }
  ptx::cp_async_wait<0>();

  // ---- outputs -----------------------------------------------------------------------------------
#pragma unroll
  for (int h = 0; h < 2; ++h)
    store_output_row<T, D>(
        p, [&](int n, int e) { return o_at(4 * n + 2 * h + e); }, row_max[h], row_sum[h],
        row_a + 8 * h, rows_here, row_begin, q_row0, kv_head, G, t4);
}

}  // namespace lazyattn::cuda::detail
