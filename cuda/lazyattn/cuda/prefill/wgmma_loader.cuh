// The Hopper prefill's loading warpgroup (prefill/wgmma_ws.cuh): it streams one CTA's K/V tiles
// through the ring of stages, whole tiles by the TMA (tma.cuh; head dims 64 and 128) and the
// rest with cp.async (page-table gather), in the blocked 128-byte-swizzle layout wgmma's
// descriptors read, signals each stage on its mbarrier (full) and reuses a stage once both
// computing warpgroups have released it (empty).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/mbarrier.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/key_pass.cuh"
#include "lazyattn/cuda/prefill/wgmma_ring.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/tma.cuh"
#include "lazyattn/cuda/wgmma.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

// Tiles [tile_begin, tile_end) of KV head kv_head into `stages` ([S][K, V][kTileKeys][D], the
// blocked layout), by loading thread ltid of 128 (lane ltid % 32), handed over on `ring`'s
// mbarriers (prefill/wgmma_ring.cuh; kSplitKV: K's and V's apart).
//  - kKv (KvTiles): kPositionedK, every tile's K from the key pass's scratch
//    (prefill/key_pass.cuh); kScratch, every tile's K and V from the fp8 pass's
//    (prefill/fp8_tiles.cuh); either read after its pass's grid has completed (the launch may
//    overlap it).
//  - The hand-over: until the computing warps' prologue has read them, stages 2 and 3 hold its
//    raw query and tables (kStagesShared), so the warpgroup passes the prologue's CTA barriers
//    with them before its third tile: the one after the tables' inputs (kTablesBarrier: the
//    builds over segments with RoPE), the one after the raw query landed, and the one that
//    lets it write stages 2 and 3.
// loader_run_maps (params.cuh) of a build.
template <KvTiles kKv, int D>
inline constexpr bool kLoaderRunMaps = loader_run_maps(kKv, D);

template <class T, int D, int S, KvTiles kKv, bool kStagesShared, bool kTablesBarrier,
          bool kSplitKV = false>
__device__ __forceinline__ void wgmma_load_kv(const PrefillParams& p, T* stages,
                                              WgmmaRing<S, kSplitKV> ring, int ltid, int lane,
                                              int tile_begin, int tile_end, int kv_head) {
  static_assert(!kSplitKV || D == 256, "K and V apart: the head-dim-256 builds (cp.async only)");
  const int lwarp = ltid >> 5;
  // Which of a tile's halves a copy loop issues: both (one stage's barriers), or K, or V.
  using Both = std::integral_constant<int, 0>;
  using OnlyK = std::integral_constant<int, 1>;
  using OnlyV = std::integral_constant<int, 2>;
  // A tile's copies by `rows` (a loop taking Both, OnlyK or OnlyV), signalled on the stage's
  // barriers; kSplitKV: K's, then V's once its slot is back (its release after P V).
  auto copy_tile = [&](auto&& rows, int it, int stage) {
    if constexpr (kSplitKV) {
      rows(OnlyK{});
      ptx::cp_async_mbarrier_arrive_noinc(ring.full(stage));
      if (it >= S) ptx::mbarrier_wait(ring.empty_v(stage), ring.prior_phase(it));
      rows(OnlyV{});
      ptx::cp_async_mbarrier_arrive_noinc(ring.full_v(stage));
    } else {
      rows(Both{});
      ptx::cp_async_mbarrier_arrive_noinc(ring.full(stage));
    }
  };
  // The warpgroup copies kPass rows at a time (8 at head dims 128 and 256, 16 at 64: a multiple
  // of the swizzle's 8-row period), kRowThreads threads to a row. At 256 each thread copies
  // kSub = 2 chunks of a row, chunk and chunk + 16 (two column blocks on, the same phase).
  constexpr int kRowThreads = D / 8 < 16 ? D / 8 : 16;
  constexpr int kSub = D / 8 / kRowThreads;
  constexpr int kPass = 128 / kRowThreads;
  static_assert(kPass % 8 == 0, "the loader's rows keep their swizzle phase");
  constexpr int kSubElems = kRowThreads * 8;                  // a sub-chunk's step in a row
  constexpr int kSubAt = kRowThreads / 8 * (kTileKeys * 64);  // and in the blocked tile
  const int chunk = lane % kRowThreads;  // the 16-byte chunk of a row this thread copies
  const int row_in = (32 / kRowThreads) * lwarp + lane / kRowThreads;  // first row; every kPass
  const int at_row_in = blocked_swizzle<D, kTileKeys>(row_in, chunk);
  const int slot_mask = (1 << p.page_size_log2) - 1;
  prefetch_tile_records(p.sched.tiles, tile_begin, tile_end, ltid, 128);
  // Scratch tiles: the launch may overlap the pass before it (programmatic dependent launch), so
  // the scratch it writes is read after that grid has completed. Everything else this kernel
  // reads was written before the pass began.
  if constexpr (kKv != KvTiles::kPages) ptx::grid_dependency_wait();
  // The hand-over: this warpgroup also passes the computing warps' prologue barriers (the
  // tables' inputs stored; the raw query landed), CTA barriers, then the one that lets it
  // write stages 2 and 3. With the first two over the computing warps alone (named
  // barriers), or over the whole CTA with this warpgroup arriving (bar.arrive),
  // compute-sanitizer racecheck reported the prologue's reads against these writes as WAR
  // hazards; so it did in the hand-over probe (tests/cuda/test_handover.cu), a race-free
  // program, whenever its readers passed a named barrier before the CTA barrier.
  auto hand_over = [&] {
    if constexpr (kTablesBarrier) __syncthreads();
    if (tile_begin < tile_end) __syncthreads();
    __syncthreads();
    // Stages 2 and 3 were the prologue's (generic proxy); the TMA writes them next (async).
    if constexpr (kKv != KvTiles::kScratch && D != 256) ptx::fence_proxy_async_smem();
  };
  for (int tile = tile_begin, it = 0; tile < tile_end; ++tile, ++it) {
    const int stage = it % S;
    if (kStagesShared && it == 2) hand_over();
    if (it >= S) ptx::mbarrier_wait(ring.empty(stage), ring.prior_phase(it));
    const TileInfo ti = p.sched.tiles[tile];
    T* ks = stages + stage * 2 * kTileKeys * D;
    T* vs = ks + kTileKeys * D;
    if constexpr (kKv == KvTiles::kScratch) {
      // Contiguous rows of the scratch, no page table: row row_in + kPass i, chunk `chunk`.
      const std::int64_t at0 = scratch_tile(p, tile, kv_head, D) + row_in * D + chunk * 8;
      const T* k_rows = static_cast<const T*>(p.tile_k) + at0;
      const T* v_rows = static_cast<const T*>(p.tile_v) + at0;
      const int left = ti.rows - row_in;
      auto copy_rows = [&](auto part) {
        constexpr int kPart = decltype(part)::value;
#pragma unroll
        for (int i = 0; i < kTileKeys / kPass; ++i) {
          const bool valid = kPass * i < left;  // past the tile's rows: 0 bytes read, zeros
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            const int at = at_row_in + blocked_swizzle<D, kTileKeys>(kPass * i, 0) + sub * kSubAt;
            const int from = kPass * i * D + sub * kSubElems;
            if constexpr (kPart != 2) ptx::cp_async_16(ptx::smem_addr(ks + at), k_rows + from, valid);
            if constexpr (kPart != 1) ptx::cp_async_16(ptx::smem_addr(vs + at), v_rows + from, valid);
          }
        }
      };
      copy_tile(copy_rows, it, stage);
      continue;
    }
    // A whole tile (p.kv_tma): warp 0's lanes issue its boxes to the TMA, one per page, KV
    // head and 64 columns of K and of V (box rows: a page, at most 64); positioned K
    // (kPositionedK) comes from the key pass's scratch instead, in D / 64 boxes of its 64
    // rows. Thread 0 expects the tile's bytes on the stage's mbarrier; the other threads arrive.
    // A tile with fewer rows keeps the cp.async gather below, whose zero-filled rows past the
    // tile keep stale or unwritten rows of V (NaN x 0) out of P V. Head dims 64 and 128: at 256
    // (two stages) the TMA measured 10-15% slower than the gather (H100, every prefill shape).
    if constexpr (kKv != KvTiles::kScratch && D != 256) {
      if (p.kv_tma && ti.rows == kTileKeys) {
        constexpr std::uint32_t kTileBytes = 2 * kTileKeys * D * sizeof(T);  // K and V
        if (ltid == 0) ptx::mbarrier_arrive_expect_tx(ring.full(stage), kTileBytes);
        else ptx::mbarrier_arrive(ring.full(stage));
        constexpr bool k_scratch = kKv == KvTiles::kPositionedK;
        const int rows_log2 = p.page_size_log2 < 6 ? p.page_size_log2 : 6;
        if constexpr (kLoaderRunMaps<kKv, D>) {
          // Warp 0: lane j < npages reads the tile's page id j. Pages that follow one another
          // in the pool (a document's, as the store allocates them) come in one box per 64
          // columns of the run maps (64 / page_size pages); otherwise lane j issues page box j:
          // page j / (D / 64), columns 64 (j % (D / 64)) on.
          if (lwarp == 0) {
            const int npages = kTileKeys >> rows_log2;
            const int my_page =
                lane < npages
                    ? p.plan.page_ids[ti.page_base + (ti.key0 >> p.page_size_log2) + lane]
                    : 0;
            const int page0 = __shfl_sync(0xffffffffu, my_page, 0);
            if (npages > 1 &&
                __all_sync(0xffffffffu, lane >= npages || my_page == page0 + lane)) {
              if (lane < D / 64) {  // a run (page_size < 64, so slot 0)
                const int at = lane * (kTileKeys * 64);
                ptx::tma_load_4d(ptx::smem_addr(ks + at), &p.k_run_map, ring.full(stage),
                                 64 * lane, 0, kv_head, page0);
                ptx::tma_load_4d(ptx::smem_addr(vs + at), &p.v_run_map, ring.full(stage),
                                 64 * lane, 0, kv_head, page0);
              }
            } else {
              const int page = __shfl_sync(0xffffffffu, my_page, lane / (D / 64));
              if (lane < npages * (D / 64)) {
                const int col_block = lane % (D / 64);
                const int at =
                    col_block * (kTileKeys * 64) + ((lane / (D / 64)) << rows_log2) * 64;
                const int slot0 = ti.key0 & slot_mask;  // 0 unless a page holds several tiles
                ptx::tma_load_4d(ptx::smem_addr(ks + at), &p.k_map, ring.full(stage),
                                 64 * col_block, slot0, kv_head, page);
                ptx::tma_load_4d(ptx::smem_addr(vs + at), &p.v_map, ring.full(stage),
                                 64 * col_block, slot0, kv_head, page);
              }
            }
          }
        } else {
          // Page box j (thread j): the tile's page j / (D / 64), columns 64 (j % (D / 64)) on;
          // at most (64 / 8) x (128 / 64) = 16 (page_size >= 8, encode_page_map).
          if (ltid < ((kTileKeys * D / 64) >> rows_log2)) {
            const int page_in = ltid / (D / 64), col_block = ltid % (D / 64);
            const int page =
                p.plan.page_ids[ti.page_base + (ti.key0 >> p.page_size_log2) + page_in];
            const int at = col_block * (kTileKeys * 64) + (page_in << rows_log2) * 64;
            const int slot0 = ti.key0 & slot_mask;  // 0 unless a page holds several tiles
            if constexpr (!k_scratch)
              ptx::tma_load_4d(ptx::smem_addr(ks + at), &p.k_map, ring.full(stage),
                               64 * col_block, slot0, kv_head, page);
            ptx::tma_load_4d(ptx::smem_addr(vs + at), &p.v_map, ring.full(stage), 64 * col_block,
                             slot0, kv_head, page);
          }
        }
        if constexpr (k_scratch) {
          if (ltid >= 32 && ltid < 32 + D / 64) {  // warp 1: the scratch's K boxes
            const int col_block = ltid - 32;
            ptx::tma_load_2d(ptx::smem_addr(ks + col_block * (kTileKeys * 64)), &p.tile_k_map,
                             ring.full(stage), 64 * col_block,
                             static_cast<int>(scratch_tile(p, tile, kv_head, D) / D));
          }
        }
        continue;
      }
    }
    // TileStream::issue's gather without its page id per row (8 registers the loader does
    // not have): the tile's pages (key0 is a multiple of 64, so at most 64 / page_size of
    // them), lane j reading page j, the rows taking theirs by shuffle. Written here, not as
    // a TileStream member or a helper: both compiled with 3x the loader's spills.
    // The KV head's pages (here, not before the loop: live across it, they spilled in the
    // loader's 24 registers once the TMA branch above was in).
    const T* k_head = static_cast<const T*>(p.k_pool) + kv_head * p.head_stride;
    const T* v_head = static_cast<const T*>(p.v_pool) + kv_head * p.head_stride;
    const int first = ti.page_base + (ti.key0 >> p.page_size_log2);
    const int npages = ((ti.rows - 1) >> p.page_size_log2) + 1;
    const int my_page = lane < npages ? p.plan.page_ids[first + lane] : 0;
    // Row r = row_in + kPass i, addressed from this tile's key_r = key0 + row_in: with r or
    // row_in + kPass i in the loop, ptxas hoisted the seven row numbers out of it and, with 24
    // registers, spilled lane, at_row_in and a flag (three local loads per tile, RoPE builds).
    const int key_r = ti.key0 + row_in;
    const int left = ti.rows - row_in;  // rows of the tile from row_in on
    const int page0 = ti.key0 >> p.page_size_log2;
    // Positioned K (kPositionedK) comes from the scratch the key pass rotated it into
    // (contiguous rows): k_rows is its row row_in, chunk `chunk`.
    [[maybe_unused]] const T* k_rows =
        kKv == KvTiles::kPositionedK
            ? static_cast<const T*>(p.tile_k) + scratch_tile(p, tile, kv_head, D) +
                  row_in * D + chunk * 8
            : nullptr;
    auto gather_rows = [&](auto part) {
      constexpr int kPart = decltype(part)::value;
#pragma unroll
      for (int i = 0; i < kTileKeys / kPass; ++i) {
        const int key = key_r + kPass * i;
        const bool valid = kPass * i < left;
        // Past the tile's rows the copy reads 0 bytes (valid false); its address stays in the
        // pool: one of the tile's pages, or page 0 from a lane past npages.
        const int page = __shfl_sync(0xffffffffu, my_page, (key >> p.page_size_log2) - page0);
        const std::int64_t off = static_cast<std::int64_t>(page) * p.page_stride +
                                 static_cast<std::int64_t>(key & slot_mask) * D + chunk * 8;
        // Row r's swizzle phase (r % 8) is row_in's, so its offset is row_in's plus kPass i
        // rows, a constant. Computed per row, ptxas kept eight offsets live across the loop and
        // spilled them (11 local loads per tile in the RoPE build).
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub) {
          const int at = at_row_in + blocked_swizzle<D, kTileKeys>(kPass * i, 0) + sub * kSubAt;
          const std::int64_t off_s = off + sub * kSubElems;
          if constexpr (kPart != 2) {
            if constexpr (kKv == KvTiles::kPositionedK) {
              ptx::cp_async_16(ptx::smem_addr(ks + at), k_rows + kPass * i * D + sub * kSubElems,
                               valid);
            } else {
              ptx::cp_async_16(ptx::smem_addr(ks + at), k_head + off_s, valid);
            }
          }
          if constexpr (kPart != 1) ptx::cp_async_16(ptx::smem_addr(vs + at), v_head + off_s, valid);
        }
      }
    };
    copy_tile(gather_rows, it, stage);
  }
  if (kStagesShared && tile_end - tile_begin <= 2) hand_over();  // the loop did not reach 2
  ptx::cp_async_wait<0>();
}

}  // namespace lazyattn::cuda::detail
