// The Hopper prefill's ring of K/V stages (prefill/wgmma_ws.cuh): the mbarriers the loading
// warpgroup (prefill/wgmma_loader.cuh) and the computing ones hand the stages over with, 8-byte
// words in shared memory from `bars` on.
//  - full[stage]: the loader's copies of the stage landed (128 arrivals, one per loading thread,
//    or the TMA's bytes); empty[stage]: the computing warps are done with it.
//  - kSplitKV (head dim 256, two stages; WgmmaPrefillShape): full and empty are K's, and V has
//    its own, full_v and empty_v, so a tile's K is refilled once S has read its slot and its V
//    once P V has (FlashAttention-3's two pipelines; docs/06-cuda.md).
// Iteration `it` of a CTA's tiles uses stage it % S in phase (it / S) & 1.
#pragma once

#include <cstdint>

#include "lazyattn/cuda/mbarrier.cuh"

namespace lazyattn::cuda::detail {

template <int S, bool kSplitKV>
struct WgmmaRing {
  static constexpr int kBarriers = kSplitKV ? 4 * S : 2 * S;
  std::uint32_t bars;  // shared-memory address of full[0]

  __device__ __forceinline__ std::uint32_t full(int stage) const { return at(stage); }
  __device__ __forceinline__ std::uint32_t empty(int stage) const { return at(S + stage); }
  __device__ __forceinline__ std::uint32_t full_v(int stage) const { return at(2 * S + stage); }
  __device__ __forceinline__ std::uint32_t empty_v(int stage) const { return at(3 * S + stage); }
  __device__ __forceinline__ static std::uint32_t phase(int it) {
    return static_cast<std::uint32_t>((it / S) & 1);
  }
  // The phase of the round before iteration it's (it >= S): the slot's release the loader waits
  // for before reusing it.
  __device__ __forceinline__ static std::uint32_t prior_phase(int it) {
    return static_cast<std::uint32_t>((it / S - 1) & 1);
  }

  // One thread, before the CTA's first barrier: `empty_arrivals` free a stage (kSplitKV: K's
  // slot); V's slot takes one arrival per computing warp.
  __device__ __forceinline__ void init(std::uint32_t empty_arrivals) const {
    for (int st = 0; st < S; ++st) {
      ptx::mbarrier_init(full(st), 128);  // the loading threads' cp.async arrivals
      ptx::mbarrier_init(empty(st), empty_arrivals);
      if constexpr (kSplitKV) {
        ptx::mbarrier_init(full_v(st), 128);
        ptx::mbarrier_init(empty_v(st), 8);
      }
    }
    ptx::fence_barrier_init();
  }

 private:
  __device__ __forceinline__ std::uint32_t at(int i) const {
    return bars + 8u * static_cast<unsigned>(i);
  }
};

}  // namespace lazyattn::cuda::detail
