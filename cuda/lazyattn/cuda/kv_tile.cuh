// Streaming 64-key K/V tiles of paged segments into shared memory (cp.async, XOR-swizzled rows;
// or whole tiles by the TMA), with every address-producing load (tile record, page ids) fetched a
// tile ahead of its use. Shared by the decode and prefill kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/mbarrier.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/cuda/tma.cuh"

namespace lazyattn::cuda::detail {

inline constexpr int kTileKeys = 64;

// Element (row, chunk) of a [rows][D] 16-bit tile, 16-byte chunks XOR-swizzled by row: the eight
// rows one ldmatrix reads for a chunk land in eight different bank groups. Rows of fewer than
// eight chunks (an fp8 tile of head dim 64 seen as 16-bit: four) swizzle over the chunks they have.
template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  constexpr int kMask = (D / 8 < 8 ? D / 8 : 8) - 1;
  return row * D + ((chunk ^ (row & kMask)) << 3);
}

// Element (row, chunk) of a [kRows][D] 16-bit tile kept as D/64 column blocks of [kRows][64],
// each 128-byte row's chunks permuted by chunk ^ (row % 8): the layout the TMA's 128-byte swizzle
// writes and wgmma's descriptors read (lazyattn/cuda/wgmma.cuh). Blocks at 1024-byte boundaries.
template <int D, int kRows>
__device__ __forceinline__ int blocked_swizzle(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// Pulls the records of tiles [begin, end) into L2, one 128-byte line per thread of `threads`
// (`tid` among them): later fetches hit L2 instead of queueing behind the K/V stream in HBM.
__device__ __forceinline__ void prefetch_tile_records(const TileInfo* tiles, int begin, int end,
                                                      int tid, int threads) {
  const char* first = reinterpret_cast<const char*>(tiles + begin);
  const char* last = reinterpret_cast<const char*>(tiles + end);
  for (const char* a = first + tid * 128; a < last; a += threads * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

// A ring of S stages, each a K tile then a V tile of [kTileKeys][D] elements. One object per
// thread; its rolling registers hold the record and page ids of the next tiles to issue.
// kBlocked: tiles in blocked_swizzle layout (wgmma) instead of swizzle's.
// kTma (blocked layout, D of 64 or 128 16-bit columns): where the launch made tensor maps of the
// pools (with_tma), a whole tile (64 rows) comes by the TMA, one box per page and 64 columns
// issued by threads 0 .. boxes - 1 (page ids: one per box, not one per row), the rest by the
// gather; each stage's copies are announced on its mbarrier (full_bars + 8 stage, kThreads
// arrivals: every thread's cp.async.mbarrier.arrive.noinc, thread 0 adding a TMA tile's bytes)
// instead of cp.async commit groups: wait(stage, parity) replaces cp_async_wait.
template <class T, int D, int kThreads, int S, bool kBlocked = false, bool kTma = false>
struct TileStream {
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kRowsPerThread = kTileKeys / kRowsPerPass;
  static constexpr int kTileElems = kTileKeys * D;
  static constexpr int kStageBytes = 2 * kTileElems * static_cast<int>(sizeof(T));
  static_assert(kThreads % kChunks == 0 && kTileKeys % kRowsPerPass == 0, "tile loader shape");
  static_assert(!kTma || (kBlocked && (D == 64 || D == 128)),
                "TMA tiles: the blocked layout, 64 or 128 columns");
  static constexpr int kColBlocks = D / 64;  // TMA boxes per page and tensor

  const TileInfo* tiles;
  const std::int32_t* page_ids;
  const T* k;  // this KV head's base in the layer's K pool
  const T* v;
  std::int64_t page_stride;
  int page_log2;
  int tile_end;
  int chunk;  // the 16-byte chunk of a row this thread copies
  int row0;   // the first row it copies; then every kRowsPerPass rows
  T* stages;

  TileInfo issue_info;  // the next tile to issue
  TileInfo ahead_info;  // the one after it
  int issue_pages[kRowsPerThread];
  // kTma: the maps (null: gather every tile), the KV head, this thread's index, the stages'
  // mbarriers, and the page of this thread's box of the next tile to issue (threads < boxes).
  const CUtensorMap* k_map = nullptr;
  const CUtensorMap* v_map = nullptr;
  // Maps whose boxes span 64 / page_size pages that follow one another in the pool (null: none).
  const CUtensorMap* k_run_map = nullptr;
  const CUtensorMap* v_run_map = nullptr;
  int kv_head = 0;
  int tid = 0;
  std::uint32_t full_bars = 0;
  int issue_box_page = 0;

  // The stream of KV head `kv_head`'s tiles as thread `tid` loads them, from a kernel's
  // parameters (DecodeParams, PrefillParams: the schedule's tiles, the plan's page ids, the pool).
  // kPack pool elements make one T: 2 for fp8 pools read as 16-bit tiles of D = head dim / 2
  // (the pool's strides count its own elements).
  template <int kPack = 1, class Params>
  __device__ static TileStream for_head(const Params& p, int kv_head, int tile_end, int tid,
                                        T* stages) {
    return TileStream{p.sched.tiles,
                      p.plan.page_ids,
                      static_cast<const T*>(p.k_pool) + kv_head * p.head_stride / kPack,
                      static_cast<const T*>(p.v_pool) + kv_head * p.head_stride / kPack,
                      p.page_stride / kPack,
                      p.page_size_log2,
                      tile_end,
                      tid % kChunks,
                      tid / kChunks,
                      stages};
  }

  // kTma: reads whole tiles of `p`'s tensor maps (p.kv_tma) and signals stage s on the mbarrier
  // at full_bars + 8 s, which init_barriers() prepares.
  template <class Params>
  __device__ void with_tma(const Params& p, int head, int thread, std::uint32_t bars) {
    if (p.kv_tma) {
      k_map = &p.k_map;
      v_map = &p.v_map;
      if (p.kv_tma_runs) {
        k_run_map = &p.k_run_map;
        v_run_map = &p.v_run_map;
      }
    }
    kv_head = head;
    tid = thread;
    full_bars = bars;
  }
  // Thread 0 initialises the stages' mbarriers; the caller's __syncthreads() then publishes them.
  __device__ void init_barriers() const {
    if (tid == 0) {
      for (int s = 0; s < S; ++s) ptx::mbarrier_init(full_bars + 8u * s, kThreads);
      ptx::fence_barrier_init();
    }
  }
  // Waits for the copies of the tile in `stage`, its fill number `fill` (0, 1, ...).
  __device__ void wait(int stage, int fill) const {
    ptx::mbarrier_wait(full_bars + 8u * stage, static_cast<std::uint32_t>(fill & 1));
  }

  __device__ T* k_stage(int stage) const { return stages + stage * 2 * kTileElems; }
  __device__ T* v_stage(int stage) const { return k_stage(stage) + kTileElems; }

  __device__ TileInfo info(int tile) const {
    TileInfo ti;
    if (tile < tile_end) ti = tiles[tile];
    return ti;
  }

  __device__ void fetch_pages(const TileInfo& ti, int (&pg)[kRowsPerThread]) const {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      int r = min(row0 + i * kRowsPerPass, max(ti.rows - 1, 0));
      pg[i] = ti.rows > 0 ? page_ids[ti.page_base + ((ti.key0 + r) >> page_log2)] : 0;
    }
  }

  // A tile the TMA reads whole (kTma): 64 rows, maps made, pages of at least 8 keys.
  __device__ bool by_tma(const TileInfo& ti) const {
    return kTma && k_map != nullptr && ti.rows == kTileKeys;
  }
  // Boxes of a whole tile: (64 / box rows) pages' worth times kColBlocks.
  __device__ int box_rows_log2() const { return page_log2 < 6 ? page_log2 : 6; }
  // What issuing `ti` needs of the page table: this thread's box's page (TMA tile) or its rows'
  // (fetch_pages; always without kTma).
  __device__ void fetch(const TileInfo& ti, int (&pg)[kRowsPerThread], int& box_page) const {
    if constexpr (kTma) {
      if (by_tma(ti)) {
        const int boxes = (kTileKeys >> box_rows_log2()) * kColBlocks;
        box_page =
            tid < boxes ? page_ids[ti.page_base + (ti.key0 >> page_log2) + tid / kColBlocks] : 0;
        return;
      }
    }
    fetch_pages(ti, pg);
  }

  // Copies one tile of `src` (this head's K or V base) into `dst`. Rows past the tile's keys are
  // zero-filled, never read (stale pages may hold NaN patterns).
  __device__ void issue_one(const T* src, const TileInfo& ti, const int (&pg)[kRowsPerThread],
                            T* dst) const {
    const int mask = (1 << page_log2) - 1;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      int r = row0 + i * kRowsPerPass;
      bool valid = r < ti.rows;
      int slot = (ti.key0 + min(r, max(ti.rows - 1, 0))) & mask;
      std::int64_t off = static_cast<std::int64_t>(pg[i]) * page_stride +
                         static_cast<std::int64_t>(slot) * D + chunk * 8;
      const int at = kBlocked ? blocked_swizzle<D, kTileKeys>(r, chunk) : swizzle<D>(r, chunk);
      ptx::cp_async_16(ptx::smem_addr(dst + at), src + off, valid);
    }
  }

  __device__ void issue(const TileInfo& ti, const int (&pg)[kRowsPerThread], int stage) const {
    issue_one(k, ti, pg, k_stage(stage));
    issue_one(v, ti, pg, v_stage(stage));
  }

  // Issues `ti` into `stage` by the TMA (box_page: this thread's box's) or the gather (issue();
  // always without kTma). kTma: the stage's arrival follows (arrive(), after any copies the
  // caller adds to it).
  __device__ void issue_tile(const TileInfo& ti, const int (&pg)[kRowsPerThread], int box_page,
                            int stage) const {
    if constexpr (kTma) {
      if (by_tma(ti)) {
        issue_boxes(ti, box_page, stage);
        return;
      }
    }
    issue(ti, pg, stage);
  }
  // A whole tile's boxes (kTma), issued by warp 0; thread 0 expects their bytes on the stage.
  __device__ void issue_boxes(const TileInfo& ti, int box_page, int stage) const {
    const std::uint32_t bar = full_bars + 8u * stage;
    const int rows_log2 = box_rows_log2();
    const int boxes = (kTileKeys >> rows_log2) * kColBlocks;
    if (tid == 0) ptx::mbarrier_expect_tx(bar, kStageBytes);
    if (tid >= 32) return;  // warp 0 issues
    // The tile's pages follow one another in the pool (a document's, as the store allocates
    // them): one box of 64 rows per 64 columns, from the run maps.
    if (k_run_map != nullptr && rows_log2 < 6) {
      const int page0 = __shfl_sync(0xffffffffu, box_page, 0);
      if (__all_sync(0xffffffffu, tid >= boxes || box_page == page0 + tid / kColBlocks)) {
        if (tid < kColBlocks) {
          const int at = tid * (kTileKeys * 64);
          ptx::tma_load_4d(ptx::smem_addr(k_stage(stage) + at), k_run_map, bar, 64 * tid, 0,
                           kv_head, page0);
          ptx::tma_load_4d(ptx::smem_addr(v_stage(stage) + at), v_run_map, bar, 64 * tid, 0,
                           kv_head, page0);
        }
        return;
      }
    }
    if (tid < boxes) {
      const int col_block = tid % kColBlocks, page_in = tid / kColBlocks;
      const int at = col_block * (kTileKeys * 64) + (page_in << rows_log2) * 64;
      const int slot0 = ti.key0 & ((1 << page_log2) - 1);  // 0 unless a page holds several tiles
      ptx::tma_load_4d(ptx::smem_addr(k_stage(stage) + at), k_map, bar, 64 * col_block, slot0,
                       kv_head, box_page);
      ptx::tma_load_4d(ptx::smem_addr(v_stage(stage) + at), v_map, bar, 64 * col_block, slot0,
                       kv_head, box_page);
    }
  }
  // This thread's arrival on `stage`'s mbarrier, once its cp.async copies so far have landed.
  __device__ void arrive(int stage) const {
    ptx::cp_async_mbarrier_arrive_noinc(full_bars + 8u * stage);
  }

  // The records of tiles [begin, tile_end) into L2 (prefetch_tile_records).
  __device__ void prefetch_records(int begin, int tid) const {
    prefetch_tile_records(tiles, begin, tile_end, tid, kThreads);
  }

  // Issues tiles begin .. begin + S - 2 (one commit group each, empty past the end) and fetches
  // what the first step() issues. The records and page ids of the first tiles are fetched first,
  // then before_issue() runs (the decode's wait for the grid it follows, under programmatic
  // dependent launch: the index loads overlap that grid's tail, the K/V reads come after it).
  // kTma: the first stage's arrival comes after before_issue's copies too (the caller's records).
  template <class BeforeIssue>
  __device__ void start(int begin, BeforeIssue&& before_issue) {
    TileInfo ti[S - 1];
    int pg[S - 1][kRowsPerThread];
    int bp[S - 1];
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      ti[s] = info(begin + s);
      fetch(ti[s], pg[s], bp[s]);
    }
    before_issue();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (begin + s < tile_end) {
        issue_tile(ti[s], pg[s], bp[s], s);
        if constexpr (kTma) arrive(s);
      }
      if constexpr (!kTma) ptx::cp_async_commit();
    }
    issue_info = info(begin + S - 1);
    fetch(issue_info, issue_pages, issue_box_page);
    ahead_info = info(begin + S);
  }

  // At iteration `it` (tile `tile` = begin + it, already waited for): issues tile + S - 1 into the
  // stage tile `tile - 1` used, commits, and fetches ahead.
  __device__ void step(int tile, int it) {
    if (tile + S - 1 < tile_end) {
      issue_tile(issue_info, issue_pages, issue_box_page, (it + S - 1) % S);
      if constexpr (kTma) arrive((it + S - 1) % S);
    }
    if constexpr (!kTma) ptx::cp_async_commit();
    issue_info = ahead_info;
    fetch(issue_info, issue_pages, issue_box_page);
    ahead_info = info(tile + S + 1);
  }

  // step() for a caller that keeps the records itself (the raw-capable decode's ring in shared
  // memory): `issuing` is tile + S - 1's record, `following` tile + S's; also() adds copies to
  // this tile's commit group. (step() keeps its own three lines: routed through this, the
  // decode's RoPE-off build compiled to different PTX, 3 more registers.)
  // (kTma: also()'s copies land before the stage's arrival; it adds none past the last tile.)
  template <class Also>
  __device__ void step_with(int tile, int it, const TileInfo& issuing, const TileInfo& following,
                            Also&& also) {
    if constexpr (kTma) {
      if (tile + S - 1 < tile_end) {
        issue_tile(issuing, issue_pages, issue_box_page, (it + S - 1) % S);
        also();
        arrive((it + S - 1) % S);
      }
    } else {
      if (tile + S - 1 < tile_end) issue(issuing, issue_pages, (it + S - 1) % S);
      also();
      ptx::cp_async_commit();
    }
    fetch(following, issue_pages, issue_box_page);
  }

  // info() without a branch (callers have tile_end > 0): past the end, the last tile's record
  // with rows = 0 (no keys).
  __device__ TileInfo info_nb(int tile) const {
    TileInfo t = tiles[min(tile, tile_end - 1)];
    t.rows = tile < tile_end ? t.rows : 0;
    return t;
  }
};

}  // namespace lazyattn::cuda::detail
