// Streaming 64-key K/V tiles of paged segments into shared memory (cp.async, XOR-swizzled rows),
// with every address-producing load (tile record, page ids) fetched a tile ahead of its use.
// Shared by the decode and prefill kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/schedule.hpp"

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

  // step() for a caller that keeps the records itself (the raw-capable decode's ring in shared
  // memory): `issuing` is tile + S - 1's record, `following` tile + S's; also() adds copies to
  // this tile's commit group. (step() keeps its own three lines: routed through this, the
  // decode's RoPE-off build compiled to different PTX, 3 more registers.)
  template <class Also>
  __device__ void step_with(int tile, int it, const TileInfo& issuing, const TileInfo& following,
                            Also&& also) {
    if (tile + S - 1 < tile_end) issue(issuing, issue_pages, (it + S - 1) % S);
    also();
    ptx::cp_async_commit();
    fetch_pages(following, issue_pages);
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
