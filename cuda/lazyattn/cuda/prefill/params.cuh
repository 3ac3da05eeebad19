// The prefill kernels' parameters and the work of one CTA: which query rows (a 128-row query
// tile of one request, GQA-packed) and which of the request's key tiles (its share of them under
// a key-range split; the tail tiles none of its rows sees dropped).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/packed_plan.hpp"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/cuda/support.hpp"

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
  // The Hopper kernel's tile scratch, [tile][kv head][64][head_dim] 16-bit elements each, written
  // by a pass before it: tile_k holds every K tile rotated to its position in the request
  // (prefill/key_pass.cuh), or over fp8 pools every K tile dequantized (and positioned where
  // keys_positioned) and tile_v every V tile dequantized (prefill/fp8_tiles.cuh); null where the
  // kernel reads pages.
  void* tile_k = nullptr;
  void* tile_v = nullptr;
  // 1: over an fp8 pool, the pass positioned every K tile in tile_k, so the one-segment build
  // over it takes one segment at 0 (as KvTiles::kPositionedK over 16-bit pools).
  std::int32_t keys_positioned = 0;
  // fp8 pools: this layer's K and V scales, [num_kv_heads]; null for 16-bit pools.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // The Hopper kernel over 16-bit pages (kv_tma = 1): maps of this layer's K and V pages
  // (detail::encode_page_map) and, for raw-form tiles, of tile_k (detail::encode_scratch_map),
  // read by the TMA for every whole 64-key tile; 0: cp.async for all.
  std::int32_t kv_tma = 0;
  CUtensorMap k_map{};
  CUtensorMap v_map{};
  CUtensorMap tile_k_map{};
  // Boxes of 64 / page_size consecutive pages (encode_page_map's run form), where
  // detail::loader_run_maps: a tile whose pages follow one another in the pool comes in one box
  // per 64 columns.
  CUtensorMap k_run_map{};
  CUtensorMap v_run_map{};
};

namespace detail {

// Where the Hopper kernel's loading warpgroup reads a K/V tile: from the pool's pages; every
// tile's K and V from tile_k and tile_v (fp8 pools, dequantized by their pass, K positioned where
// PrefillParams::keys_positioned); or every tile's K from tile_k, rotated there to its position
// in the request by the key pass, and V from the pages (kPositionedK: launch.cuh's
// positioned_keys says where; prefill/key_pass.cuh says why). (1 was raw tiles' K alone from a
// scratch, in local form: the values stay, and with them the kernels' names.)
enum class KvTiles : int { kPages = 0, kScratch = 2, kPositionedK = 3 };

// Whether the Hopper kernel's loader reads a tile whose pages follow one another in the pool as
// one TMA box per 64 columns (PrefillParams::k_run_map / v_run_map): the paged builds at head dim
// 128, where it measured 7-11% faster than a box per page (local form and RoPE off, page size
// 16). In the raw form it measured 1-4% slower, and at head dim 64 the A/B did not settle it, so
// those builds issue a box per page, one thread each. The launch makes the run maps where this
// holds (docs/performance.md, "Runs of pages").
constexpr bool loader_run_maps(KvTiles kv, int head_dim) {
  return kv == KvTiles::kPages && head_dim == 128;
}

inline constexpr int kPrefillRows = kPrefillRowsPerQtile;  // = kPrefillTileRows (support.hpp)

// What the Hopper kernel's softmax needs of a key tile (its keys, whether it is the tail's), the
// part of a TileInfo it rolls from tile to tile: rolling whole records costs more instructions
// per tile in the RoPE build than in RoPE off.
struct TileKeys {
  int key0, rows, is_tail;
  __device__ static TileKeys of(const TileInfo& t) { return TileKeys{t.key0, t.rows, t.is_tail}; }
};

// The end of the key tiles a query tile reads: the request's, less the tail tiles wholly past its
// last visible tail key. Those exist only when the tail is the request's last segment; then its
// tiles close the request's run at keys 0, 64, 128, ... (make_prefill_schedule), so their count
// follows from the last record alone: one load (dropping them one record at a time is a chain of
// dependent loads before every CTA's first tile, up to 63 at encode 4096).
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

}  // namespace detail
}  // namespace lazyattn::cuda
