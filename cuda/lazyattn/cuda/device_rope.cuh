// DeviceRope: RoPE frequencies on the device (Q0.64 turns per position) plus the cos/sin table of
// in-tile offsets that key-side (raw form) rotation combines with one exact angle per tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/kv/plan.hpp"
#include "lazyattn/rope/policy.hpp"

namespace lazyattn::cuda {

// What kernels read. A "set" is one resolved frequency set; length-dependent schedules (dynamic,
// longrope) get one per request, the rest share set 0.
struct RopeView {
  const std::uint64_t* turns = nullptr;  // [num_sets, rotary_dim / 2]
  const float2* offset_cs = nullptr;     // [num_sets, offset_rows, rotary_dim / 2]: cos/sin(t w_j)
  std::int32_t per_request = 0;          // 1: set index = request, 0: set 0 for all
  std::int32_t rotary_dim = 0;
  std::int32_t offset_rows = 0;
  std::int32_t interleaved = 0;  // PairLayout::kInterleaved
  float query_scale = 1.0f;      // attention_factor^2 on the query's rotary dims
};

class DeviceRope {
 public:
  // offset_rows: how many in-tile offsets the cos/sin table covers (the kernels' tile size).
  explicit DeviceRope(const RopePolicy& policy, int offset_rows = 64)
      : policy_(policy), offset_rows_(offset_rows) {
    const RopeFrequencies& f = policy.base_frequencies();
    view_.rotary_dim = f.rotary_dim;
    view_.offset_rows = offset_rows;
    view_.interleaved = f.pair_layout == PairLayout::kInterleaved ? 1 : 0;
    view_.query_scale = static_cast<float>(f.query_scale());
    if (!policy.depends_on_length()) upload_sets({f}, nullptr);
  }

  // For length-dependent schedules: one frequency set per request of the plan (host work and an
  // async copy). A no-op for the others.
  // Also refuses a plan with local-form segments under such a schedule: their keys carry a
  // rotation the per-request frequencies would not match.
  void prepare(const Plan& plan, cudaStream_t stream = nullptr) {
    if (!policy_.depends_on_length()) return;
    upload_sets(request_sets(plan), stream);
    prepared_requests_ = plan.num_requests();
  }

  // Throws unless the frequency sets cover a plan of `num_requests` requests (length-dependent
  // schedules need prepare() with that plan first).
  void check_prepared(std::int32_t num_requests, const char* where) const {
    LAZYATTN_CHECK(!policy_.depends_on_length() || prepared_requests_ >= num_requests, where,
                   ": rope_type ", to_string(policy_.rope_type()), " has frequency sets for ",
                   prepared_requests_, " requests, expected ", num_requests,
                   " (call DeviceRope::prepare with the plan)");
  }

  const RopeView& view() const { return view_; }
  const RopePolicy& policy() const { return policy_; }
  int offset_rows() const { return offset_rows_; }

  // The frequency sets of a plan's requests as the kernels read them (length-dependent schedules:
  // one per request), for a caller that ships them inside its own device buffer: turns
  // [num_requests][rotary_dim / 2], offset cos/sin [num_requests][offset_rows][rotary_dim / 2].
  void plan_sets(const Plan& plan, std::vector<std::uint64_t>& turns,
                 std::vector<float2>& cs) const {
    LAZYATTN_CHECK(policy_.depends_on_length(), "cuda::DeviceRope::plan_sets: rope_type ",
                   to_string(policy_.rope_type()), " shares one set; plan_sets is for the "
                   "length-dependent schedules");
    build_sets(request_sets(plan), turns, cs);
  }
  // Reads a plan's request sets (plan_sets' arrays) from device memory the caller owns, until
  // the next call of this or prepare().
  void use_plan_sets(const void* turns, const void* cs, std::int32_t num_requests) {
    view_.turns = static_cast<const std::uint64_t*>(turns);
    view_.offset_cs = static_cast<const float2*>(cs);
    view_.per_request = 1;
    prepared_requests_ = num_requests;
  }

 private:
  std::vector<RopeFrequencies> request_sets(const Plan& plan) const {
    for (std::int32_t s = 0; s < plan.num_segments(); ++s) {
      if (plan.segment_length[s] > 0)
        policy_.check_form(static_cast<StorageForm>(plan.segment_form[s]),
                           "cuda::DeviceRope::prepare");
    }
    std::vector<RopeFrequencies> sets;
    sets.reserve(static_cast<std::size_t>(plan.num_requests()));
    for (std::int32_t b = 0; b < plan.num_requests(); ++b)
      sets.push_back(policy_.frequencies(plan.request_rope_length[b]));
    return sets;
  }

  void build_sets(const std::vector<RopeFrequencies>& sets, std::vector<std::uint64_t>& turns,
                  std::vector<float2>& table) const {
    const int half = view_.rotary_dim / 2;
    turns.assign(sets.size() * half, 0);
    table.assign(sets.size() * static_cast<std::size_t>(offset_rows_) * half, float2{});
    for (std::size_t s = 0; s < sets.size(); ++s) {
      for (int j = 0; j < half; ++j) {
        turns[s * half + j] = sets[s].turns[j];
        for (int t = 0; t < offset_rows_; ++t) {
          rope::CosSin cs = rope::cos_sin(t, sets[s].turns[j]);
          table[(s * offset_rows_ + t) * half + j] =
              make_float2(static_cast<float>(cs.cos), static_cast<float>(cs.sin));
        }
      }
    }
  }

  void upload_sets(const std::vector<RopeFrequencies>& sets, cudaStream_t stream) {
    build_sets(sets, host_turns_, host_cs_);
    turns_.reserve(host_turns_.size());
    cs_.reserve(host_cs_.size());
    // Synchronous copies from pageable memory: frequency sets change only with a new plan.
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(turns_.data(), host_turns_.data(),
                                        host_turns_.size() * sizeof(std::uint64_t),
                                        cudaMemcpyHostToDevice, stream));
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(cs_.data(), host_cs_.data(),
                                        host_cs_.size() * sizeof(float2), cudaMemcpyHostToDevice,
                                        stream));
    view_.turns = turns_.data();
    view_.offset_cs = cs_.data();
    view_.per_request = policy_.depends_on_length() ? 1 : 0;
  }

  RopePolicy policy_;
  int offset_rows_;
  std::int32_t prepared_requests_ = 0;
  RopeView view_;
  std::vector<std::uint64_t> host_turns_;
  std::vector<float2> host_cs_;
  DeviceBuffer<std::uint64_t> turns_;
  DeviceBuffer<float2> cs_;
};

}  // namespace lazyattn::cuda
