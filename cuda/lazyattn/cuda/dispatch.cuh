// Runtime head dims turned into compile-time constants, and kernel attributes set before launch.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "lazyattn/cuda/common.cuh"

namespace lazyattn::cuda {

inline const char* supported_head_dims() { return "64, 128, 256"; }

// Raises a kernel's dynamic shared memory limit and asks for the largest shared-memory carveout,
// so that two CTAs fit per multiprocessor where their footprint allows (the default carveout may
// leave room for one). Once per kernel and device is enough; repeating it is harmless.
template <class Kernel>
void prepare_kernel(Kernel kernel, int smem_bytes) {
  LAZYATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  LAZYATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
}

// Calls f(std::integral_constant<int, D>{}) for a supported head dim, or throws naming it.
template <class F>
void dispatch_head_dim(int head_dim, const char* where, F&& f) {
  switch (head_dim) {
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    case 256: f(std::integral_constant<int, 256>{}); return;
    default: break;
  }
  ::lazyattn::detail::throw_error(where, ": head_dim ", head_dim, ", expected one of ",
                      supported_head_dims());
}

}  // namespace lazyattn::cuda
