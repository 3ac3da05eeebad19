// Runtime head dims turned into compile-time constants, and kernel attributes set before launch.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/support.hpp"

namespace lazyattn::cuda {

namespace detail {

// The driver function `name` (the CUDA 12.0 form) through the runtime's driver entry points, so
// nothing links to libcuda; null where the driver does not have it.
template <class Fn>
Fn driver_entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}

// The current context's unique id (cuCtxGetId, through the runtime's driver entry points, so no
// link to libcuda), or 0 when there is none yet. A context made after cudaDeviceReset gets a new
// id, so attributes set in the old one are not mistaken for set.
inline unsigned long long current_context_id() {
  using GetCurrent = CUresult (*)(CUcontext*);
  using GetId = CUresult (*)(CUcontext, unsigned long long*);
  struct Fns {
    GetCurrent get_current = nullptr;
    GetId get_id = nullptr;
  };
  static const Fns fns{driver_entry_point<GetCurrent>("cuCtxGetCurrent"),
                       driver_entry_point<GetId>("cuCtxGetId")};
  CUcontext ctx = nullptr;
  unsigned long long id = 0;
  if (!fns.get_current || !fns.get_id || fns.get_current(&ctx) != CUDA_SUCCESS || !ctx ||
      fns.get_id(ctx, &id) != CUDA_SUCCESS)
    return 0;
  return id;
}

}  // namespace detail

// Raises a kernel's dynamic shared memory limit and asks for the largest shared-memory carveout,
// so that two CTAs fit per multiprocessor where their footprint allows (the default carveout may
// leave room for one). Done once per kernel, context and size: each cudaFuncSetAttribute is a
// driver call that, on every launch, costs host time the small decode steps feel.
template <class Kernel>
void prepare_kernel(Kernel kernel, int smem_bytes) {
  struct Done {
    const void* fn;
    unsigned long long context;
    int smem_bytes;  // the limit set: launches with up to this much need nothing more
  };
  thread_local std::vector<Done> done;  // per thread: no lock on the launch path
  const void* fn = reinterpret_cast<const void*>(kernel);
  const unsigned long long context = detail::current_context_id();
  Done* entry = nullptr;
  if (context != 0)
    for (Done& d : done)
      if (d.fn == fn && d.context == context) entry = &d;
  if (entry && entry->smem_bytes >= smem_bytes) return;
  LAZYATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  LAZYATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
  if (entry) entry->smem_bytes = smem_bytes;
  else if (context != 0) done.push_back({fn, context, smem_bytes});
}

// Launches kernel(p) under programmatic dependent launch: its CTAs may start while the grid
// before it in the stream drains, so it must ptx::grid_dependency_wait before it reads what that
// grid writes (or writes what it reads).
template <class Kernel, class Params>
void launch_overlapping(Kernel kernel, dim3 grid, dim3 block, int smem_bytes, cudaStream_t stream,
                        const Params& p) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  LAZYATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

// Calls f(std::integral_constant<int, D>{}) for a head dim of kSupportedHeadDims, or throws
// naming it.
template <std::size_t I = 0, class F>
void dispatch_head_dim(int head_dim, const char* where, F&& f) {
  if constexpr (I == kSupportedHeadDims.size()) {
    ::lazyattn::detail::throw_error(where, ": head_dim ", head_dim, ", expected one of ",
                                    supported_head_dims());
  } else if (head_dim == kSupportedHeadDims[I]) {
    f(std::integral_constant<int, kSupportedHeadDims[I]>{});
  } else {
    dispatch_head_dim<I + 1>(head_dim, where, std::forward<F>(f));
  }
}

}  // namespace lazyattn::cuda
