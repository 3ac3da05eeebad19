// Streaming 64-key K/V tiles of paged segments into shared memory (cp.async, XOR-swizzled rows),
// with every address-producing load (tile record, page ids) fetched a tile ahead of its use.
// Shared by the decode and prefill kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/cuda/tma.cuh"

namespace lazyattn::cuda::detail {

inline constexpr int kTileKeys = 64;

// Element (row, chunk) of a [rows][D] 16-bit tile, 16-byte chunks XOR-swizzled by row: the eight
// rows one ldmatrix reads for a chunk land in eight different bank groups.
template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
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
template <class T, int D, int kThreads, int S, bool kBlocked = false>
struct TileStream {
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kRowsPerThread = kTileKeys / kRowsPerPass;
  static constexpr int kTileElems = kTileKeys * D;
  static constexpr int kStageBytes = 2 * kTileElems * static_cast<int>(sizeof(T));
  static_assert(kThreads % kChunks == 0 && kTileKeys % kRowsPerPass == 0, "tile loader shape");

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

  // The stream of KV head `kv_head`'s tiles as thread `tid` loads them, from a kernel's
  // parameters (DecodeParams, PrefillParams: the schedule's tiles, the plan's page ids, the pool).
  template <class Params>
  __device__ static TileStream for_head(const Params& p, int kv_head, int tile_end, int tid,
                                        T* stages) {
    return TileStream{p.sched.tiles,
                      p.plan.page_ids,
                      static_cast<const T*>(p.k_pool) + kv_head * p.head_stride,
                      static_cast<const T*>(p.v_pool) + kv_head * p.head_stride,
                      p.page_stride,
                      p.page_size_log2,
                      tile_end,
                      tid % kChunks,
                      tid / kChunks,
                      stages};
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

  // The records of tiles [begin, tile_end) into L2 (prefetch_tile_records).
  __device__ void prefetch_records(int begin, int tid) const {
    prefetch_tile_records(tiles, begin, tile_end, tid, kThreads);
  }

  // Issues tiles begin .. begin + S - 2 (one commit group each, empty past the end) and fetches
  // what the first step() issues. The records and page ids of the first tiles are fetched first,
  // then before_issue() runs (the decode's wait for the grid it follows, under programmatic
  // dependent launch: the index loads overlap that grid's tail, the K/V reads come after it).
  template <class BeforeIssue>
  __device__ void start(int begin, BeforeIssue&& before_issue) {
    TileInfo ti[S - 1];
    int pg[S - 1][kRowsPerThread];
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      ti[s] = info(begin + s);
      fetch_pages(ti[s], pg[s]);
    }
    before_issue();
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (begin + s < tile_end) issue(ti[s], pg[s], s);
      ptx::cp_async_commit();
    }
    issue_info = info(begin + S - 1);
    fetch_pages(issue_info, issue_pages);
    ahead_info = info(begin + S);
  }

  // At iteration `it` (tile `tile` = begin + it, already waited for): issues tile + S - 1 into the
  // stage tile `tile - 1` used, commits, and fetches ahead.
  __device__ void step(int tile, int it) {
    if (tile + S - 1 < tile_end) issue(issue_info, issue_pages, (it + S - 1) % S);
    ptx::cp_async_commit();
    issue_info = ahead_info;
    fetch_pages(issue_info, issue_pages);
    ahead_info = info(tile + S + 1);
  }

  // Split lead (the wgmma prefill, whose iteration j reads K(j) and V(j - 1)): at iteration j,
  // K(j + 2) and V(j + 1), one commit group, so a stage's V slot is refilled one iteration after
  // its K slot. Every issue is predicated (tiles past the end zero-fill their free slots): no
  // branch, so a warpgroup can pass the CTA barrier between its wgmma issue and wait.
  // start_split issues K(begin) (group 1, which the caller's raw query joins) and K(begin + 1),
  // V(begin) (group 2).
  TileInfo v_info;  // the tile whose V the next step_split issues (its pages in v_pages)
  int v_pages[kRowsPerThread];
  // info() and fetch_pages() without branches (callers have tile_end > 0): past the end, the
  // last tile's record with rows = 0, so its issues copy nothing.
  __device__ TileInfo info_nb(int tile) const {
    TileInfo t = tiles[min(tile, tile_end - 1)];
    t.rows = tile < tile_end ? t.rows : 0;
    return t;
  }
  __device__ void fetch_pages_nb(const TileInfo& ti, int (&pg)[kRowsPerThread]) const {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      int r = min(row0 + i * kRowsPerPass, max(ti.rows - 1, 0));
      pg[i] = page_ids[ti.page_base + ((ti.key0 + r) >> page_log2)];
    }
  }
  __device__ void start_split(int begin) {
    const TileInfo t0 = info_nb(begin);
    int p0[kRowsPerThread];
    fetch_pages_nb(t0, p0);
    issue_one(k, t0, p0, k_stage(0));
    ptx::cp_async_commit();
    v_info = info_nb(begin + 1);
    fetch_pages_nb(v_info, v_pages);
    issue_one(k, v_info, v_pages, k_stage(1 % S));
    issue_one(v, t0, p0, v_stage(0));
    ptx::cp_async_commit();
    issue_info = info_nb(begin + 2);
    fetch_pages_nb(issue_info, issue_pages);
    ahead_info = info_nb(begin + 3);
  }
  // At iteration `it` (tile `tile` = begin + it): K(tile + 2) into stage (it + 2) % S, V(tile +
  // 1) into stage (it + 1) % S; then v_info is tile + 2's record.
  __device__ void step_split(int tile, int it) {
    issue_one(k, issue_info, issue_pages, k_stage((it + 2) % S));
    issue_one(v, v_info, v_pages, v_stage((it + 1) % S));
    ptx::cp_async_commit();
    v_info = issue_info;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) v_pages[i] = issue_pages[i];
    issue_info = ahead_info;
    fetch_pages_nb(issue_info, issue_pages);
    ahead_info = info_nb(tile + 4);
  }
};


// EXPERIMENTAL (LAZYATTN_EXPERIMENTAL_TMA; tested on the H200, slower than cp.async): the same
// ring of S stages loaded by the TMA unit. Each stage's K and V tiles are [D / 64][kTileKeys][64] (blocked_swizzle), at 1024-byte
// boundaries; one mbarrier per stage counts the stage's bytes. Warp 0 issues: lane i owns box i
// of a tile (keys i * box_rows ...), fetches its page id a tile ahead, and issues its K and V
// boxes; lane 0 announces the tile's bytes first. Boxes past a tile's keys are not issued, so
// rows past `rows` hold stale data: the consumer masks K there and zeroes V (zero_stale_v).
template <class T, int D, int S>
struct TmaTileStream {
  static constexpr int kHalves = D / kTmaBoxCols;
  static constexpr int kTileElems = kTileKeys * D;
  static_assert(D % kTmaBoxCols == 0, "TMA tiles need head_dim a multiple of 64");
  static_assert(sizeof(T) == 2, "TMA tiles are 16-bit");

  const TileInfo* tiles;
  const std::int32_t* page_ids;
  const CUtensorMap* k_map;
  const CUtensorMap* v_map;
  std::int64_t head_row0;  // row of (this layer, page 0, this KV head, slot 0)
  int page_rows;           // rows from one page to the next (num_kv_heads * page_size)
  int page_log2;
  int box_rows;            // min(page_size, kTileKeys)
  int tile_end;
  T* stages;
  std::uint32_t bars;  // shared address of S mbarriers, 8 bytes apart

  TileInfo issue_info;  // the next tile to issue (its page fetched)
  TileInfo ahead_info;  // the one after it
  int issue_page;

  __device__ T* k_stage(int stage) const { return stages + stage * 2 * kTileElems; }
  __device__ T* v_stage(int stage) const { return k_stage(stage) + kTileElems; }
  __device__ std::uint32_t bar(int stage) const { return bars + 8u * static_cast<unsigned>(stage); }

  __device__ TileInfo info(int tile) const {
    TileInfo ti;
    if (tile < tile_end) ti = tiles[tile];
    return ti;
  }

  // Barriers for every stage (thread 0), visible to the TMA unit and to every thread after the
  // caller's __syncthreads().
  __device__ void init_barriers(int tid) const {
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) ptx::mbarrier_init(bar(s), 1);
      ptx::fence_barrier_init();
    }
  }

  __device__ int fetch_page(const TileInfo& ti, int lane) const {
    const int boxes = kTileKeys / box_rows;
    const int r = min(lane * box_rows, max(ti.rows - 1, 0));
    return lane < boxes && ti.rows > 0 ? page_ids[ti.page_base + ((ti.key0 + r) >> page_log2)] : 0;
  }

  // The records of tiles [begin, tile_end) into L2 (prefetch_tile_records).
  __device__ void prefetch_records(int begin, int tid, int threads) const {
    prefetch_tile_records(tiles, begin, tile_end, tid, threads);
  }

  // Warp 0 only.
  __device__ void issue(const TileInfo& ti, int page, int stage, int lane) const {
    const int valid = (ti.rows + box_rows - 1) / box_rows;
    const std::uint32_t b = bar(stage);
    if (lane == 0) {
      ptx::mbarrier_arrive_expect_tx(
          b, static_cast<std::uint32_t>(valid * box_rows * kTmaBoxCols * kHalves * 2 *
                                        static_cast<int>(sizeof(T))));
    }
    __syncwarp();
    if (lane < valid) {
      const int slot = (ti.key0 + lane * box_rows) & ((1 << page_log2) - 1);
      const auto row = static_cast<std::int32_t>(head_row0 +
                                                 static_cast<std::int64_t>(page) * page_rows + slot);
      const int dst_row = lane * box_rows;
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        const int off = h * kTileKeys * kTmaBoxCols + dst_row * kTmaBoxCols;
        ptx::tma_load_2d(ptx::smem_addr(k_stage(stage) + off), k_map, h * kTmaBoxCols, row, b);
        ptx::tma_load_2d(ptx::smem_addr(v_stage(stage) + off), v_map, h * kTmaBoxCols, row, b);
      }
    }
  }

  // Issues tiles begin .. begin + S - 2 and fetches what the first step() issues (warp 0).
  __device__ void start(int begin, int lane) {
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      TileInfo ti = info(begin + s);
      if (begin + s < tile_end) issue(ti, fetch_page(ti, lane), s, lane);
    }
    issue_info = info(begin + S - 1);
    issue_page = fetch_page(issue_info, lane);
    ahead_info = info(begin + S);
  }

  // At iteration `it` (tile `tile`, waited for, after the block barrier): issues tile + S - 1
  // into the stage tile - 1 used (warp 0).
  __device__ void step(int tile, int it, int lane) {
    if (tile + S - 1 < tile_end) issue(issue_info, issue_page, (it + S - 1) % S, lane);
    issue_info = ahead_info;
    issue_page = fetch_page(issue_info, lane);
    ahead_info = info(tile + S + 1);
  }

  // All threads: waits for iteration `it`'s tile.
  __device__ void wait(int it) const {
    ptx::mbarrier_wait(bar(it % S), static_cast<std::uint32_t>((it / S) & 1));
  }

  // One warp: zeroes its 16 V rows [row0, row0 + 16) that lie past the tile's `rows` keys (P is
  // zero there, but 0 * NaN from stale bytes would not be), then orders those writes before the
  // TMA unit next writes the stage.
  __device__ void zero_stale_v(int stage, int rows, int row0, int lane) const {
    const int first = max(rows, row0), last = row0 + 16;
    if (first >= last) return;
    T* vs = v_stage(stage);
    const int chunks = (last - first) * kHalves * (kTmaBoxCols / 8);  // 16-byte chunks
    for (int c = lane; c < chunks; c += 32) {
      const int row = first + c / (kHalves * 8), rest = c % (kHalves * 8);
      const int h = rest / 8, k = rest % 8;
      *reinterpret_cast<uint4*>(vs + h * kTileKeys * kTmaBoxCols + row * kTmaBoxCols + k * 8) =
          make_uint4(0, 0, 0, 0);
    }
    __syncwarp();
    ptx::fence_proxy_async_shared();
  }
};

}  // namespace lazyattn::cuda::detail
