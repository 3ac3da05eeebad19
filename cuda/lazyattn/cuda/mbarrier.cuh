// mbarriers in shared memory: the warp-specialised prefill's full/empty ring barriers (the loading
// warpgroup's cp.async copies announced with cp.async.mbarrier.arrive.noinc, the computing warps
// waiting on phase parity).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lazyattn::cuda::ptx {

__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes barrier initialisation visible to the other threads and the async proxy.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival on `bar`.
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed (counted in the
// barrier's initial count: noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace lazyattn::cuda::ptx
