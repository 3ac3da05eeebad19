// Split-KV work schedule for the decode kernel, built on the host from a Plan (host-safe header).
//
// Each request's keys are cut into tiles of `tile_keys` keys that never cross a segment (a tile
// belongs to one segment, so one query rotation and one storage form serve the whole tile; any
// power-of-two page size works, a tile may start inside a page when pages exceed the tile). A
// work item is a run of consecutive tiles of one request for one KV head; a request split into S
// items leaves S partial (output, log-sum-exp) states that the last of its CTAs to finish merges.
// The split count is chosen so the grid fills every multiprocessor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lazyattn/cuda/support.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

// What the kernel needs of a tile, in one 32-byte record it fetches a tile ahead: where the tile's
// pages start in the plan's page_ids (its segment's first), its first key within the segment, the
// keys present, the segment's storage form and logical start.
struct TileInfo {
  std::int32_t page_base = 0;
  std::int32_t key0 = 0;
  std::int32_t rows = 0;
  std::int32_t form = 0;
  std::int64_t seg_start = 0;
  std::int32_t segment = 0;  // global segment index
  std::int32_t is_tail = 0;  // 1: the request's tail (causal for prefill queries)
};
static_assert(sizeof(TileInfo) == 32, "TileInfo is loaded as two 16-byte vectors");

// A tile's form and start as the kernels read them: they know raw and local form only. An
// absolute-form tail is local form whose rotation is measured from position 0 (rotation_start),
// so its tiles carry form local and start 0; raw tiles carry the logical start.
inline std::int32_t tile_form(std::uint8_t segment_form) {
  return segment_form == static_cast<std::uint8_t>(StorageForm::kRaw)
             ? static_cast<std::int32_t>(StorageForm::kRaw)
             : static_cast<std::int32_t>(StorageForm::kLocal);
}
inline std::int64_t tile_start(const Plan& plan, std::int32_t seg) {
  const auto at = static_cast<std::size_t>(seg);
  return rotation_start(static_cast<StorageForm>(plan.segment_form[at]), plan.segment_start[at]);
}

struct DecodeSchedule {
  int tile_keys = 64;
  std::int32_t num_tiles = 0;
  std::int32_t num_partials = 0;  // partial states over all split requests
  std::int32_t max_splits = 1;
  std::vector<TileInfo> tiles;  // [num_tiles] in request order, each request's in key order
  // Per work item (one CTA per item and KV head): request, tile range, split index.
  std::vector<std::int32_t> work_request;
  std::vector<std::int32_t> work_tile_begin;
  std::vector<std::int32_t> work_tile_end;
  std::vector<std::int32_t> work_split;
  // Per request: number of splits and where its partial states start (-1 when unsplit).
  std::vector<std::int32_t> request_num_splits;
  std::vector<std::int32_t> request_partial_offset;
  // Prefill only: query tiles (a request's (query, group head) rows in runs of rows_per_qtile),
  // each with its request and first row. Empty for decode.
  int rows_per_qtile = 0;
  std::vector<std::int32_t> qtile_request;
  std::vector<std::int32_t> qtile_row_begin;

  std::int32_t num_work() const { return static_cast<std::int32_t>(work_request.size()); }
};

// The cost model's constants, in units of one tile's streaming time: a CTA's start-up and
// epilogue, and the merge of split states.
inline constexpr double kCtaOverheadTiles = 2.0;
inline constexpr double kMergeCostTiles = 1.0;

struct ScheduleOptions {
  int tile_keys = 64;
  int num_sms = 132;
  int ctas_per_sm = 2;
  int min_tiles_per_split = 2;  // below ~128 keys, merging costs more than the parallelism saves
  int forced_splits = 0;        // > 0: exactly this many splits per request (clamped to its tiles)
  // Non-empty: request b gets exactly request_splits[b] splits (a later step's plan keeping the
  // grid of a captured one); it must not exceed the request's tiles.
  std::vector<std::int32_t> request_splits;
};

inline DecodeSchedule make_decode_schedule(const Plan& plan, int num_kv_heads,
                                           const ScheduleOptions& opt = {}) {
  const char* w = "make_decode_schedule";
  LAZYATTN_CHECK(opt.tile_keys >= 16 && opt.tile_keys % 16 == 0, w, ": tile_keys ", opt.tile_keys,
                 ", expected a positive multiple of 16");
  LAZYATTN_CHECK(num_kv_heads >= 1, w, ": num_kv_heads ", num_kv_heads, ", expected >= 1");
  LAZYATTN_CHECK(opt.forced_splits >= 0, w, ": forced_splits ", opt.forced_splits,
                 ", expected >= 0");
  LAZYATTN_CHECK(opt.request_splits.empty() ||
                     opt.request_splits.size() == static_cast<std::size_t>(plan.num_requests()),
                 w, ": ", opt.request_splits.size(), " request_splits for ", plan.num_requests(),
                 " requests, expected one per request");
  DecodeSchedule s;
  s.tile_keys = opt.tile_keys;
  const std::int32_t B = plan.num_requests();
  std::vector<std::int64_t> request_tiles(static_cast<std::size_t>(B), 0);
  std::vector<std::int32_t> request_tile_begin(static_cast<std::size_t>(B) + 1, 0);
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t seg = plan.request_segment_indptr[b]; seg < plan.request_segment_indptr[b + 1];
         ++seg) {
      for (std::int32_t k = 0; k < plan.segment_length[seg]; k += opt.tile_keys) {
        TileInfo ti;
        ti.page_base = plan.segment_page_indptr[seg];
        ti.key0 = k;
        ti.rows = std::min(opt.tile_keys, plan.segment_length[seg] - k);
        ti.form = tile_form(plan.segment_form[seg]);
        ti.seg_start = tile_start(plan, seg);
        ti.segment = seg;
        ti.is_tail = plan.segment_kind[seg] == static_cast<std::uint8_t>(SegmentKind::kTail);
        s.tiles.push_back(ti);
      }
    }
    LAZYATTN_CHECK(s.tiles.size() < (std::size_t{1} << 31), w,
                   ": more than 2^31 - 1 tiles in one plan");
    request_tile_begin[b + 1] = static_cast<std::int32_t>(s.tiles.size());
    request_tiles[b] = request_tile_begin[b + 1] - request_tile_begin[b];
  }
  s.num_tiles = static_cast<std::int32_t>(s.tiles.size());

  // Tiles per split: pick the chunk that minimises a simple cost, waves x (tiles per CTA + a fixed
  // cost per CTA), where a wave is one CTA on every slot (SMs x CTAs per SM). Fewer waves save the
  // per-CTA start-up and the last wave's idle slots; shorter chunks cut the per-wave time.
  std::int64_t chunk = 0;
  if (opt.forced_splits == 0 && opt.request_splits.empty()) {
    const std::int64_t slots = static_cast<std::int64_t>(opt.num_sms) * opt.ctas_per_sm;
    std::int64_t max_tiles = 1;
    for (std::int64_t t : request_tiles) max_tiles = std::max(max_tiles, t);
    double best = 0.0;
    for (std::int64_t c = std::min<std::int64_t>(opt.min_tiles_per_split, max_tiles);
         c <= max_tiles; ++c) {
      std::int64_t ctas = 0, longest = 0;
      bool split = false;
      for (std::int64_t t : request_tiles) {
        std::int64_t n = std::max<std::int64_t>(1, (t + c - 1) / c);
        ctas += n * num_kv_heads;
        longest = std::max(longest, (t + n - 1) / n);
        split = split || n > 1;
      }
      std::int64_t waves = (ctas + slots - 1) / slots;
      double cost = static_cast<double>(waves) * (static_cast<double>(longest) + kCtaOverheadTiles) +
                    (split ? kMergeCostTiles : 0.0);
      if (chunk == 0 || cost < best) {
        best = cost;
        chunk = c;
      }
    }
  }
  s.request_num_splits.resize(static_cast<std::size_t>(B));
  s.request_partial_offset.resize(static_cast<std::size_t>(B));
  for (std::int32_t b = 0; b < B; ++b) {
    std::int64_t tiles = request_tiles[b];
    std::int64_t splits = opt.forced_splits > 0 ? std::min<std::int64_t>(opt.forced_splits, tiles)
                                                : chunk > 0 ? (tiles + chunk - 1) / chunk
                                                            : 1;
    if (!opt.request_splits.empty()) {
      splits = opt.request_splits[b];
      LAZYATTN_CHECK(splits >= 1 && splits <= std::max<std::int64_t>(tiles, 1), w, ": request ",
                     b, " request_splits ", splits, ", expected in [1, its ", tiles, " tiles]");
    }
    splits = std::max<std::int64_t>(splits, 1);
    s.request_num_splits[b] = static_cast<std::int32_t>(splits);
    s.request_partial_offset[b] = splits > 1 ? s.num_partials : -1;
    if (splits > 1) s.num_partials += static_cast<std::int32_t>(splits);
    s.max_splits = std::max<std::int32_t>(s.max_splits, static_cast<std::int32_t>(splits));
    // Even split of the request's tiles: the first (tiles % splits) items get one more.
    std::int64_t base = tiles / splits, extra = tiles % splits, t = request_tile_begin[b];
    for (std::int64_t i = 0; i < splits; ++i) {
      std::int64_t n = base + (i < extra ? 1 : 0);
      s.work_request.push_back(b);
      s.work_tile_begin.push_back(static_cast<std::int32_t>(t));
      s.work_tile_end.push_back(static_cast<std::int32_t>(t + n));
      s.work_split.push_back(static_cast<std::int32_t>(i));
      t += n;
    }
  }
  return s;
}

// Query rows ((query, head-of-group) pairs) per prefill CTA, the rows_per_qtile cuda::prefill takes.
inline constexpr int kPrefillRowsPerQtile = kPrefillTileRows;

// The prefill schedule: the same key tiles, one work item per request spanning all of them (no
// split), and the query tiles. Rows of a request are its (query, head-of-group) pairs, query-major:
// row = query * group_size + head, so one K/V tile serves every query head of the group.
inline DecodeSchedule make_prefill_schedule(const Plan& plan, int num_kv_heads, int group_size,
                                            int rows_per_qtile = kPrefillRowsPerQtile) {
  const char* w = "make_prefill_schedule";
  LAZYATTN_CHECK(group_size >= 1 && rows_per_qtile % group_size == 0, w, ": group_size ",
                 group_size, ", expected a divisor of rows_per_qtile ", rows_per_qtile);
  ScheduleOptions opt;
  opt.forced_splits = 1;
  DecodeSchedule s = make_decode_schedule(plan, num_kv_heads, opt);
  s.rows_per_qtile = rows_per_qtile;
  for (std::int32_t b = 0; b < plan.num_requests(); ++b) {
    std::int64_t rows = static_cast<std::int64_t>(plan.request_query_indptr[b + 1] -
                                                  plan.request_query_indptr[b]) *
                        group_size;
    for (std::int64_t r = 0; r < rows; r += rows_per_qtile) {
      s.qtile_request.push_back(b);
      s.qtile_row_begin.push_back(static_cast<std::int32_t>(r));
    }
  }
  LAZYATTN_CHECK(s.qtile_request.size() < (std::size_t{1} << 31), w,
                 ": more than 2^31 - 1 query tiles");
  return s;
}

}  // namespace lazyattn::cuda
