// The Hopper tensor memory accelerator (TMA) for K/V tiles: a 2D tensor map over a whole K or V
// pool (rows of head_dim elements, 128-byte swizzle, boxes of up to 64 rows by 64 elements), and
// the PTX the kernels use with it: mbarrier init / expect-tx / parity wait and the bulk tensor copy.
//
// EXPERIMENTAL (LAZYATTN_EXPERIMENTAL_TMA): the decode kernel's TMA loader (DecodeArgs::tma)
// passes the decode tests on the H200 but reads slower than the cp.async ring (docs/performance.md).
//
// Shared-memory layout of a tile loaded through these maps: [head_dim / 64][rows][64] elements,
// each 128-byte row's 16-byte chunks permuted by chunk ^ (row % 8) (the hardware's 128-byte
// swizzle, which keys on address bits 4-6 ^ 7-9: the tile must sit at a 1024-byte boundary).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/dtype.hpp"

namespace lazyattn::cuda {

namespace ptx {

__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
// Makes barrier initialisation visible to the async proxy (the TMA unit) and the other threads.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses
// (a TMA copy into the same bytes).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions the phase must see complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
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
// Box (c0, c1) of `map` (c0 along the contiguous dimension) into shared memory at `dst`; the
// bytes count against barrier `bar`'s transactions.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map,
                                            std::int32_t c0, std::int32_t c1, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map))
               : "memory");
}

}  // namespace ptx

namespace detail {

inline constexpr int kTmaBoxCols = 64;  // 128 bytes of 16-bit elements: the swizzle span

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LAZYATTN_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &found));
    LAZYATTN_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                   "cuda: the driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 and sm_90)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace detail

// A tensor map over `rows` rows of `head_dim` 16-bit elements starting at `base` (a whole K or V
// pool: row ((layer * num_pages + page) * num_kv_heads + head) * page_size + slot), loading boxes
// of `box_rows` rows by 64 elements with the 128-byte swizzle.
inline CUtensorMap make_kv_tensor_map(const void* base, DType dtype, std::int64_t rows,
                                      int head_dim, int box_rows) {
  const char* w = "cuda::make_kv_tensor_map";
  LAZYATTN_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16, w, ": dtype ",
                 to_string(dtype), ", expected bfloat16 or float16");
  LAZYATTN_CHECK(head_dim % detail::kTmaBoxCols == 0, w, ": head_dim ", head_dim,
                 ", expected a multiple of ", detail::kTmaBoxCols);
  LAZYATTN_CHECK(rows >= 1 && rows <= 0x7fffffff, w, ": ", rows,
                 " rows, expected in [1, 2^31 - 1] (TMA coordinates are 32-bit)");
  LAZYATTN_CHECK(box_rows >= 1 && box_rows <= 256, w, ": box_rows ", box_rows,
                 ", expected in [1, 256]");
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(base) % 16 == 0, w,
                 ": the pool base is not 16-byte aligned");
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(head_dim) * 2};  // bytes, dimension 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(detail::kTmaBoxCols),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = detail::tensor_map_encoder()(
      &map,
      dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      2, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LAZYATTN_CHECK(r == CUDA_SUCCESS, w, ": cuTensorMapEncodeTiled failed with CUresult ",
                 static_cast<int>(r), " (", rows, " rows of ", head_dim, ", box ", box_rows, " x ",
                 detail::kTmaBoxCols, ")");
  return map;
}

}  // namespace lazyattn::cuda
