// DevicePlan: a host Plan and its decode schedule packed into one device buffer with one async
// copy (from pinned memory, so it neither blocks the host nor breaks stream capture).
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/packer.hpp"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

// The schedule as the kernels read it; pointers into device memory.
struct DecodeScheduleView {
  std::int32_t tile_keys = 64;
  std::int32_t num_tiles = 0;
  std::int32_t num_work = 0;
  std::int32_t num_partials = 0;
  std::int32_t max_splits = 1;
  const std::int32_t* tile_segment = nullptr;
  const std::int32_t* tile_key_begin = nullptr;
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

class DevicePlan {
 public:
  DevicePlan() = default;
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;
  ~DevicePlan() {
    if (ready_) cudaEventDestroy(ready_);
    if (staging_) cudaFreeHost(staging_);
  }

  // Packs and uploads; the buffers are reused across calls when large enough. The host Plan may
  // be destroyed once this returns. Only waits if the previous upload's copy is still running.
  void upload(const Plan& plan, const DecodeSchedule& sched, cudaStream_t stream = nullptr) {
    check_schedule(plan, sched);
    detail::Packer pk;
    has_raw_segments_ = std::any_of(plan.segment_form.begin(), plan.segment_form.end(),
                                    [](std::uint8_t f) { return f == static_cast<std::uint8_t>(StorageForm::kRaw); });
    single_segment_requests_ = true;
    for (std::size_t b = 0; b + 1 < plan.request_segment_indptr.size(); ++b)
      if (plan.request_segment_indptr[b + 1] - plan.request_segment_indptr[b] > 1)
        single_segment_requests_ = false;
    view_.num_requests = plan.num_requests();
    view_.num_segments = plan.num_segments();
    view_.num_queries = plan.num_queries();
    view_.page_size = plan.page_size;
    std::size_t o_rsi = pk.add(plan.request_segment_indptr);
    std::size_t o_rqi = pk.add(plan.request_query_indptr);
    std::size_t o_rts = pk.add(plan.request_tail_segment);
    std::size_t o_rkl = pk.add(plan.request_kv_length);
    std::size_t o_rqp = pk.add(plan.request_query_position);
    std::size_t o_rrl = pk.add(plan.request_rope_length);
    std::size_t o_spi = pk.add(plan.segment_page_indptr);
    std::size_t o_sl = pk.add(plan.segment_length);
    std::size_t o_ss = pk.add(plan.segment_start);
    std::size_t o_sf = pk.add(plan.segment_form);
    std::size_t o_sk = pk.add(plan.segment_kind);
    std::size_t o_pid = pk.add(plan.page_ids);
    std::size_t o_ts = pk.add(sched.tile_segment);
    std::size_t o_tkb = pk.add(sched.tile_key_begin);
    std::size_t o_ti = pk.add(sched.tiles);
    std::size_t o_wr = pk.add(sched.work_request);
    std::size_t o_wtb = pk.add(sched.work_tile_begin);
    std::size_t o_wte = pk.add(sched.work_tile_end);
    std::size_t o_ws = pk.add(sched.work_split);
    std::size_t o_rns = pk.add(sched.request_num_splits);
    std::size_t o_rpo = pk.add(sched.request_partial_offset);
    std::size_t o_qtr = pk.add(sched.qtile_request);
    std::size_t o_qtb = pk.add(sched.qtile_row_begin);

    if (ready_) LAZYATTN_CUDA_CHECK(cudaEventSynchronize(ready_));  // staging free again
    else LAZYATTN_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    if (pk.size() > staging_bytes_) {
      if (staging_) LAZYATTN_CUDA_CHECK(cudaFreeHost(staging_));
      staging_ = nullptr;
      LAZYATTN_CUDA_CHECK(cudaMallocHost(&staging_, pk.size()));
      staging_bytes_ = pk.size();
    }
    pk.write(static_cast<std::byte*>(staging_));
    buffer_.reserve(pk.size());
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(buffer_.data(), staging_, pk.size(), cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaEventRecord(ready_, stream));

    std::byte* d = buffer_.data();
    auto at = [d](std::size_t off) { return d + off; };
    view_.request_segment_indptr = reinterpret_cast<const std::int32_t*>(at(o_rsi));
    view_.request_query_indptr = reinterpret_cast<const std::int32_t*>(at(o_rqi));
    view_.request_tail_segment = reinterpret_cast<const std::int32_t*>(at(o_rts));
    view_.request_kv_length = reinterpret_cast<const std::int64_t*>(at(o_rkl));
    view_.request_query_position = reinterpret_cast<const std::int64_t*>(at(o_rqp));
    view_.request_rope_length = reinterpret_cast<const std::int64_t*>(at(o_rrl));
    view_.segment_page_indptr = reinterpret_cast<const std::int32_t*>(at(o_spi));
    view_.segment_length = reinterpret_cast<const std::int32_t*>(at(o_sl));
    view_.segment_start = reinterpret_cast<const std::int64_t*>(at(o_ss));
    view_.segment_form = reinterpret_cast<const std::uint8_t*>(at(o_sf));
    view_.segment_kind = reinterpret_cast<const std::uint8_t*>(at(o_sk));
    view_.page_ids = reinterpret_cast<const std::int32_t*>(at(o_pid));
    sched_.tile_keys = sched.tile_keys;
    sched_.num_tiles = sched.num_tiles;
    sched_.num_work = sched.num_work();
    sched_.num_partials = sched.num_partials;
    sched_.max_splits = sched.max_splits;
    sched_.tile_segment = reinterpret_cast<const std::int32_t*>(at(o_ts));
    sched_.tile_key_begin = reinterpret_cast<const std::int32_t*>(at(o_tkb));
    sched_.tiles = reinterpret_cast<const TileInfo*>(at(o_ti));
    sched_.work_request = reinterpret_cast<const std::int32_t*>(at(o_wr));
    sched_.work_tile_begin = reinterpret_cast<const std::int32_t*>(at(o_wtb));
    sched_.work_tile_end = reinterpret_cast<const std::int32_t*>(at(o_wte));
    sched_.work_split = reinterpret_cast<const std::int32_t*>(at(o_ws));
    sched_.request_num_splits = reinterpret_cast<const std::int32_t*>(at(o_rns));
    sched_.request_partial_offset = reinterpret_cast<const std::int32_t*>(at(o_rpo));
    sched_.rows_per_qtile = sched.rows_per_qtile;
    sched_.num_qtiles = static_cast<std::int32_t>(sched.qtile_request.size());
    sched_.qtile_request = reinterpret_cast<const std::int32_t*>(at(o_qtr));
    sched_.qtile_row_begin = reinterpret_cast<const std::int32_t*>(at(o_qtb));
  }

  const PlanView& view() const { return view_; }
  // Whether the uploaded plan has a raw-form segment (kernels that handle local form only ask).
  bool has_raw_segments() const { return has_raw_segments_; }
  // Whether every request has at most one segment (document encodings, chunks of a tail
  // without documents): the warp-specialised prefill then builds each query once.
  bool single_segment_requests() const { return single_segment_requests_; }
  const DecodeScheduleView& schedule() const { return sched_; }

  // The schedule must be the one made for this plan: its tile records copy each segment's form,
  // start and pages, and the kernels trust them (a schedule of another plan, e.g. the same
  // layout relabelled to another storage form, would run the wrong rotation silently).
  static void check_schedule(const Plan& plan, const DecodeSchedule& sched) {
    const char* w = "DevicePlan::upload";
    LAZYATTN_CHECK(sched.tiles.size() == sched.tile_segment.size() &&
                       sched.tiles.size() == static_cast<std::size_t>(sched.num_tiles),
                   w, ": schedule of ", sched.num_tiles, " tiles holds ", sched.tiles.size(),
                   " tile records, expected one per tile");
    for (std::size_t t = 0; t < sched.tiles.size(); ++t) {
      const TileInfo& ti = sched.tiles[t];
      const std::int32_t seg = ti.segment;
      LAZYATTN_CHECK(seg >= 0 && seg < plan.num_segments(), w, ": schedule tile ", t, " segment ",
                     seg, ", expected < the plan's ", plan.num_segments(), " segments");
      const auto at = static_cast<std::size_t>(seg);
      LAZYATTN_CHECK(ti.form == plan.segment_form[at] && ti.seg_start == plan.segment_start[at] &&
                         ti.page_base == plan.segment_page_indptr[at] &&
                         ti.key0 + ti.rows <= plan.segment_length[at],
                     w, ": schedule tile ", t, " (segment ", seg, ": form ", ti.form, ", start ",
                     ti.seg_start, ", keys ", ti.key0, "..", ti.key0 + ti.rows,
                     ") does not match the plan's segment (form ",
                     static_cast<int>(plan.segment_form[at]), ", start ", plan.segment_start[at],
                     ", length ", plan.segment_length[at],
                     "), expected the schedule made from this plan");
    }
  }

 private:
  PlanView view_;
  bool has_raw_segments_ = false;
  bool single_segment_requests_ = false;
  DecodeScheduleView sched_;
  DeviceBuffer<std::byte> buffer_;
  void* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace lazyattn::cuda
