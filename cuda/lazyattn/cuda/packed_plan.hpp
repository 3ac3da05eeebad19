// PackedPlan: a host Plan and its split-KV schedule as one image for a single host-to-device copy,
// with each array's offset and room, and the by-value scalars the kernels take (host-safe header;
// DevicePlan in device_plan.cuh uploads or binds it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

// The schedule as the kernels read it; pointers into device memory.
struct DecodeScheduleView {
  std::int32_t tile_keys = 64;
  std::int32_t num_tiles = 0;
  std::int32_t num_work = 0;
  std::int32_t num_partials = 0;
  std::int32_t max_splits = 1;
  const TileInfo* tiles = nullptr;
  const std::int32_t* work_request = nullptr;
  const std::int32_t* work_tile_begin = nullptr;
  const std::int32_t* work_tile_end = nullptr;
  const std::int32_t* work_split = nullptr;
  const std::int32_t* request_num_splits = nullptr;
  const std::int32_t* request_partial_offset = nullptr;
  std::int32_t rows_per_qtile = 0;  // prefill only
  std::int32_t num_qtiles = 0;
  const std::int32_t* qtile_request = nullptr;
  const std::int32_t* qtile_row_begin = nullptr;
};

// Room for growth in a packed plan: the arrays that grow with the tails (tiles, pages) get this
// many more entries than the plan needs, so the plans of later decode steps can be packed at the
// same offsets (a CUDA graph holds the device pointers).
struct PlanHeadroom {
  std::int64_t tiles = 0;
  std::int64_t pages = 0;
};

// A plan and its schedule as one host image, with each array's offset and room. The scalars the
// kernels take by value sit in the views; the views' pointers are offsets until bound to a base.
struct PackedPlan {
  static constexpr int kArrays = 21;  // 12 of the plan, 9 of the schedule
  std::vector<std::byte> bytes;
  std::size_t offset[kArrays] = {};
  std::size_t room[kArrays] = {};  // bytes reserved for array i (its size, plus headroom)
  PlanView plan;                   // pointers as offsets from the base
  DecodeScheduleView schedule;
  bool has_raw_segments = false;
  bool single_segment_requests = false;

  // The views with their pointers into a device copy of `bytes` at `base`.
  PlanView plan_at(const void* base) const { return relocate(plan, base); }
  DecodeScheduleView schedule_at(const void* base) const { return relocate(schedule, base); }

  // Whether `other`'s arrays lie at the same offsets and its by-value scalars match this one's,
  // so kernels captured with this layout read `other` correctly once its bytes are copied over.
  // Returns the first difference, or nullptr.
  const char* layout_difference(const PackedPlan& o) const {
    for (int i = 0; i < kArrays; ++i) {
      if (offset[i] != o.offset[i]) return "an array's offset";
    }
    if (bytes.size() != o.bytes.size()) return "the packed size";
    if (plan.num_requests != o.plan.num_requests) return "num_requests";
    if (plan.num_segments != o.plan.num_segments) return "num_segments";
    if (plan.num_queries != o.plan.num_queries) return "num_queries";
    if (plan.page_size != o.plan.page_size) return "page_size";
    if (schedule.tile_keys != o.schedule.tile_keys) return "tile_keys";
    if (schedule.num_work != o.schedule.num_work) return "the work items (grid size)";
    if (schedule.num_partials != o.schedule.num_partials) return "num_partials";
    if (schedule.max_splits != o.schedule.max_splits) return "max_splits";
    if (schedule.rows_per_qtile != o.schedule.rows_per_qtile) return "rows_per_qtile";
    if (schedule.num_qtiles != o.schedule.num_qtiles) return "the query tiles (grid size)";
    if (has_raw_segments != o.has_raw_segments) return "the kernel build (raw-form segments)";
    if (single_segment_requests != o.single_segment_requests)
      return "the kernel build (one-segment requests)";
    return nullptr;
  }

 private:
  template <class V>
  static V relocate(V v, const void* base) {
    auto* b = static_cast<const std::byte*>(base);
    if constexpr (std::is_same_v<V, PlanView>) {
      move(v.request_segment_indptr, b);
      move(v.request_query_indptr, b);
      move(v.request_tail_segment, b);
      move(v.request_kv_length, b);
      move(v.request_query_position, b);
      move(v.request_rope_length, b);
      move(v.segment_page_indptr, b);
      move(v.segment_length, b);
      move(v.segment_start, b);
      move(v.segment_form, b);
      move(v.segment_kind, b);
      move(v.page_ids, b);
    } else {
      move(v.tiles, b);
      move(v.work_request, b);
      move(v.work_tile_begin, b);
      move(v.work_tile_end, b);
      move(v.work_split, b);
      move(v.request_num_splits, b);
      move(v.request_partial_offset, b);
      move(v.qtile_request, b);
      move(v.qtile_row_begin, b);
    }
    return v;
  }
  template <class T>
  static void move(const T*& p, const std::byte* base) {
    p = reinterpret_cast<const T*>(base + reinterpret_cast<std::uintptr_t>(p));
  }
};

// The schedule must be the one made for this plan: its tile records copy each segment's form,
// start and pages, and the kernels trust them (a schedule of another plan, e.g. the same layout
// relabelled to another storage form, would run the wrong rotation silently).
inline void check_schedule(const Plan& plan, const DecodeSchedule& sched) {
  const char* w = "pack_plan";
  LAZYATTN_CHECK(sched.tiles.size() == static_cast<std::size_t>(sched.num_tiles), w,
                 ": schedule of ", sched.num_tiles, " tiles holds ", sched.tiles.size(),
                 " tile records, expected one per tile");
  for (std::size_t t = 0; t < sched.tiles.size(); ++t) {
    const TileInfo& ti = sched.tiles[t];
    const std::int32_t seg = ti.segment;
    LAZYATTN_CHECK(seg >= 0 && seg < plan.num_segments(), w, ": schedule tile ", t, " segment ",
                   seg, ", expected < the plan's ", plan.num_segments(), " segments");
    const auto at = static_cast<std::size_t>(seg);
    LAZYATTN_CHECK(
        ti.form == tile_form(plan.segment_form[at]) && ti.seg_start == tile_start(plan, seg) &&
            ti.page_base == plan.segment_page_indptr[at] &&
            ti.key0 + ti.rows <= plan.segment_length[at],
        w, ": schedule tile ", t, " (segment ", seg, ": form ", ti.form, ", start ", ti.seg_start,
        ", keys ", ti.key0, "..", ti.key0 + ti.rows, ") does not match the plan's segment (form ",
        static_cast<int>(plan.segment_form[at]), ", start ", plan.segment_start[at], ", length ",
        plan.segment_length[at], "), expected the schedule made from this plan");
  }
}

// Packs a plan and its schedule. With `like`, every array goes at like's offset (throws naming
// what does not fit or differs, see PackedPlan::layout_difference); otherwise the tile and page
// arrays get `headroom` more entries than they need.
inline PackedPlan pack_plan(const Plan& plan, const DecodeSchedule& sched,
                            const PackedPlan* like = nullptr, PlanHeadroom headroom = {}) {
  check_schedule(plan, sched);
  const char* w = "pack_plan";
  LAZYATTN_CHECK(headroom.tiles >= 0 && headroom.pages >= 0 && headroom.tiles < (1 << 30) &&
                     headroom.pages < (1 << 30),
                 w, ": headroom of ", headroom.tiles, " tiles and ", headroom.pages,
                 " pages, expected each in [0, 2^30)");
  PackedPlan pp;
  pp.has_raw_segments =
      std::any_of(plan.segment_form.begin(), plan.segment_form.end(),
                  [](std::uint8_t f) { return f == static_cast<std::uint8_t>(StorageForm::kRaw); });
  pp.single_segment_requests = true;
  for (std::size_t b = 0; b + 1 < plan.request_segment_indptr.size(); ++b)
    if (plan.request_segment_indptr[b + 1] - plan.request_segment_indptr[b] > 1)
      pp.single_segment_requests = false;

  // Array i at its offset: like's, or the next 16-byte boundary with its room.
  std::size_t end = 0;
  int index = 0;
  struct Part {
    const void* src;
    std::size_t bytes;
    std::size_t offset;
  };
  std::vector<Part> parts;
  auto add = [&](const auto& v, std::int64_t extra) -> std::uintptr_t {
    using T = typename std::decay_t<decltype(v)>::value_type;
    const std::size_t bytes = v.size() * sizeof(T);
    const std::size_t room = bytes + static_cast<std::size_t>(extra) * sizeof(T);
    std::size_t off;
    if (like) {
      off = like->offset[index];
      LAZYATTN_CHECK(bytes <= like->room[index], w, ": array ", index, " of ", bytes,
                     " bytes exceeds the ", like->room[index],
                     " bytes the captured plan left for it, expected a plan that fits (more "
                     "headroom when the captured plan was made)");
      pp.room[index] = like->room[index];
    } else {
      off = (end + 15) & ~std::size_t{15};
      pp.room[index] = room;
    }
    pp.offset[index] = off;
    end = std::max(end, off + pp.room[index]);
    parts.push_back(Part{v.data(), bytes, off});
    ++index;
    return off;
  };
  auto as = [](std::uintptr_t off, auto* tag) { return reinterpret_cast<decltype(tag)>(off); };
  PlanView& v = pp.plan;
  v.num_requests = plan.num_requests();
  v.num_segments = plan.num_segments();
  v.num_queries = plan.num_queries();
  v.page_size = plan.page_size;
  v.request_segment_indptr = as(add(plan.request_segment_indptr, 0), v.request_segment_indptr);
  v.request_query_indptr = as(add(plan.request_query_indptr, 0), v.request_query_indptr);
  v.request_tail_segment = as(add(plan.request_tail_segment, 0), v.request_tail_segment);
  v.request_kv_length = as(add(plan.request_kv_length, 0), v.request_kv_length);
  v.request_query_position = as(add(plan.request_query_position, 0), v.request_query_position);
  v.request_rope_length = as(add(plan.request_rope_length, 0), v.request_rope_length);
  v.segment_page_indptr = as(add(plan.segment_page_indptr, 0), v.segment_page_indptr);
  v.segment_length = as(add(plan.segment_length, 0), v.segment_length);
  v.segment_start = as(add(plan.segment_start, 0), v.segment_start);
  v.segment_form = as(add(plan.segment_form, 0), v.segment_form);
  v.segment_kind = as(add(plan.segment_kind, 0), v.segment_kind);
  v.page_ids = as(add(plan.page_ids, headroom.pages), v.page_ids);
  DecodeScheduleView& s = pp.schedule;
  s.tile_keys = sched.tile_keys;
  s.num_tiles = sched.num_tiles;
  s.num_work = sched.num_work();
  s.num_partials = sched.num_partials;
  s.max_splits = sched.max_splits;
  s.tiles = as(add(sched.tiles, headroom.tiles), s.tiles);
  s.work_request = as(add(sched.work_request, 0), s.work_request);
  s.work_tile_begin = as(add(sched.work_tile_begin, 0), s.work_tile_begin);
  s.work_tile_end = as(add(sched.work_tile_end, 0), s.work_tile_end);
  s.work_split = as(add(sched.work_split, 0), s.work_split);
  s.request_num_splits = as(add(sched.request_num_splits, 0), s.request_num_splits);
  s.request_partial_offset = as(add(sched.request_partial_offset, 0), s.request_partial_offset);
  s.rows_per_qtile = sched.rows_per_qtile;
  s.num_qtiles = static_cast<std::int32_t>(sched.qtile_request.size());
  s.qtile_request = as(add(sched.qtile_request, 0), s.qtile_request);
  s.qtile_row_begin = as(add(sched.qtile_row_begin, 0), s.qtile_row_begin);
  LAZYATTN_CHECK(index == PackedPlan::kArrays, w, ": packed ", index, " arrays, expected ",
                 PackedPlan::kArrays);
  pp.bytes.assign(like ? like->bytes.size() : (end + 15) & ~std::size_t{15}, std::byte{0});
  for (const Part& p : parts) {
    if (p.bytes) std::memcpy(pp.bytes.data() + p.offset, p.src, p.bytes);
  }
  if (like) {
    const char* diff = like->layout_difference(pp);
    LAZYATTN_CHECK(diff == nullptr, w, ": the plan differs from the captured one in ", diff,
                   ", expected the same layout (same requests, segments and grid)");
  }
  return pp;
}

}  // namespace lazyattn::cuda
