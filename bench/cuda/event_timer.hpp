// Timing for the GPU benchmarks, the same way bench/peers/sdpa_peers.py times its peers: the GPU
// time of `inner` back-to-back calls between two CUDA events, divided by `inner`. Back to back,
// the host's dispatch of one call overlaps the GPU's work on the previous one; one call alone
// between two events would count the host's launch latency (several microseconds per kernel) as
// GPU time, which dominates the small decode shapes.
#pragma once

#include <cuda_runtime.h>

#include "lazyattn/cuda/common.cuh"

namespace lazyattn::bench {

inline constexpr int kBackToBack = 8;  // sdpa_peers.median_ms's `inner`

class EventTimer {
 public:
  EventTimer() {
    LAZYATTN_CUDA_CHECK(cudaEventCreate(&start_));
    LAZYATTN_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Seconds per call of call(i), i = 0 .. inner - 1, launched back to back on `stream`.
  template <class F>
  double seconds_per_call(F&& call, cudaStream_t stream = nullptr, int inner = kBackToBack) {
    LAZYATTN_CUDA_CHECK(cudaEventRecord(start_, stream));
    for (int i = 0; i < inner; ++i) call(i);
    LAZYATTN_CUDA_CHECK(cudaEventRecord(stop_, stream));
    LAZYATTN_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LAZYATTN_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3 / inner;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

}  // namespace lazyattn::bench
