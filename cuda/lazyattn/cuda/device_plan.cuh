// DevicePlan: a PackedPlan on the device, uploaded into its own buffer with one async copy from
// pinned memory (so it neither blocks the host nor breaks stream capture), or bound to a buffer
// the caller owns and fills (a framework's tensor).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/packed_plan.hpp"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

class DevicePlan {
 public:
  DevicePlan() = default;
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;
  ~DevicePlan() {
    if (ready_) cudaEventDestroy(ready_);
    if (staging_) cudaFreeHost(staging_);
  }

  // Packs and uploads into the plan's own buffer; the buffers are reused across calls when large
  // enough. The host Plan may be destroyed once this returns. Only waits if the previous upload's
  // copy is still running.
  void upload(const Plan& plan, const DecodeSchedule& sched, cudaStream_t stream = nullptr) {
    const PackedPlan packed = pack_plan(plan, sched);
    const std::size_t size = packed.bytes.size();
    if (ready_)
      LAZYATTN_CUDA_CHECK(cudaEventSynchronize(ready_));  // staging free again
    else
      LAZYATTN_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    if (size > staging_bytes_) {
      if (staging_) LAZYATTN_CUDA_CHECK(cudaFreeHost(staging_));
      staging_ = nullptr;
      staging_bytes_ = 0;
      LAZYATTN_CUDA_CHECK(cudaMallocHost(&staging_, size));
      staging_bytes_ = size;
    }
    std::memcpy(staging_, packed.bytes.data(), size);
    buffer_.reserve(size);
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(buffer_.data(), staging_, size, cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaEventRecord(ready_, stream));
    bind(packed, buffer_.data());
  }

  // As above, and remembers `store` (which must outlive this DevicePlan's use) and what the plan
  // read of it: the launchers then refuse the plan once a document it reads was evicted or
  // erased, or a tail it reads released, since it was made (check_current), so a planned launch
  // never reads pages that were reused.
  void upload(const KvBookkeeping& store, const Plan& plan, const DecodeSchedule& sched,
              cudaStream_t stream = nullptr) {
    check_plan_current(store, plan, "DevicePlan::upload");
    Plan identity;
    identity.store_id = plan.store_id;
    identity.store_removals = plan.store_removals;
    identity.sources = plan.sources;
    upload(plan, sched, stream);
    identity_ = std::move(identity);
    store_ = &store;
  }

  // Throws (naming `where`) when the plan was uploaded with its store and is no longer current
  // in it; a plan uploaded without one is not checked.
  void check_current(const char* where) const {
    if (store_) check_plan_current(*store_, identity_, where);
  }

  // Reads the plan from `device`, a copy of packed.bytes the caller made (and keeps alive).
  void bind(const PackedPlan& packed, const void* device) {
    store_ = nullptr;  // (upload with a store sets it again)
    view_ = packed.plan_at(device);
    sched_ = packed.schedule_at(device);
    has_raw_segments_ = packed.has_raw_segments;
    single_segment_requests_ = packed.single_segment_requests;
  }

  const PlanView& view() const { return view_; }
  // Whether the uploaded plan has a raw-form segment (kernels that handle local form only ask).
  bool has_raw_segments() const { return has_raw_segments_; }
  // Whether every request has at most one segment (document encodings, chunks of a tail
  // without documents): the warp-specialised prefill then builds each query once.
  bool single_segment_requests() const { return single_segment_requests_; }
  const DecodeScheduleView& schedule() const { return sched_; }

 private:
  PlanView view_;
  bool has_raw_segments_ = false;
  bool single_segment_requests_ = false;
  DecodeScheduleView sched_;
  const KvBookkeeping* store_ = nullptr;  // upload(store, ...): the store the plan is checked in
  Plan identity_;                         // its store_id, store_removals and sources
  DeviceBuffer<std::byte> buffer_;
  void* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace lazyattn::cuda
