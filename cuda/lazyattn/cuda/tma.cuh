// The Tensor Memory Accelerator (sm_90): tensor maps of a layer's K or V pages and of the Hopper
// prefill's tile scratch, made on the host, and the bulk tensor copies that fill a shared-memory
// tile from them, announced on an mbarrier by the bytes they write.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/dispatch.cuh"

namespace lazyattn::cuda {

namespace detail {

// A map of `rank` dimensions of 16-bit elements from `base` (dims and boxes innermost first,
// strides in bytes of dims 1 on), boxes written to shared memory in the 128-byte swizzle
// (blocked_swizzle's layout), through cuTensorMapEncodeTiled (driver_entry_point). False where the
// driver has no such function or refuses the geometry.
inline bool encode_16bit_map(CUtensorMap* map, const void* base, cuuint32_t rank,
                             const cuuint64_t* dims, const cuuint64_t* strides,
                             const cuuint32_t* box) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = driver_entry_point<Encode>("cuTensorMapEncodeTiled");
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  return encode && rank <= 4 &&
         encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, rank, const_cast<void*>(base), dims, strides,
                box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
             CUDA_SUCCESS;
}

// The rows of one box of a page map: a whole page up to a 64-key tile's worth.
inline int page_box_rows(int page_size) { return page_size < 64 ? page_size : 64; }

// A map of one layer's K (or V) pages of 16-bit elements, [num_pages][num_kv_heads][page_size]
// [head_dim] from `layer_base`, read in boxes of 64 columns x page_box_rows(page_size) rows of one
// page and KV head, written to shared memory in the 128-byte swizzle (blocked_swizzle's layout).
// Coordinates, innermost first: (column, slot, kv head, page). False where the driver cannot make
// it (no entry point, or a geometry the TMA does not take); the caller then copies with cp.async.
// run = true: a run map, whose boxes span 64 / page_size pages that follow one another in the
// pool (page_size < 64), written as one 64-row tile.
inline bool encode_page_map(CUtensorMap* map, const void* layer_base, int head_dim, int page_size,
                            int num_kv_heads, std::int64_t num_pages, bool run = false) {
  if (head_dim % 64 != 0 || page_size < 8 || num_pages < 1 ||
      reinterpret_cast<std::uintptr_t>(layer_base) % 16 != 0)
    return false;
  constexpr cuuint64_t kElem = 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim),
                              static_cast<cuuint64_t>(page_size),
                              static_cast<cuuint64_t>(num_kv_heads),
                              static_cast<cuuint64_t>(num_pages)};
  const cuuint64_t row = kElem * static_cast<cuuint64_t>(head_dim);
  const cuuint64_t strides[3] = {row, row * static_cast<cuuint64_t>(page_size),
                                 row * static_cast<cuuint64_t>(page_size) *
                                     static_cast<cuuint64_t>(num_kv_heads)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(page_box_rows(page_size)), 1,
                             static_cast<cuuint32_t>(run ? 64 / page_box_rows(page_size) : 1)};
  return encode_16bit_map(map, layer_base, 4, dims, strides, box);
}

// A layer's K and V maps (or run maps) of encode_page_map: false where either cannot be made.
inline bool encode_kv_page_maps(CUtensorMap* k_map, CUtensorMap* v_map, const void* k_base,
                                const void* v_base, int head_dim, int page_size, int num_kv_heads,
                                std::int64_t num_pages, bool run = false) {
  return encode_page_map(k_map, k_base, head_dim, page_size, num_kv_heads, num_pages, run) &&
         encode_page_map(v_map, v_base, head_dim, page_size, num_kv_heads, num_pages, run);
}

// A map of the tile scratch (PrefillParams::tile_k: `rows` rows of head_dim 16-bit elements from
// `base`), read in boxes of 64 columns x 64 rows (one tile of one KV head) into the same
// swizzled layout. Coordinates: (column, row). False where it cannot be made (rows past int32).
inline bool encode_scratch_map(CUtensorMap* map, const void* base, int head_dim,
                               std::int64_t rows) {
  if (head_dim % 64 != 0 || rows < 64 || rows > 0x7fffffff ||
      reinterpret_cast<std::uintptr_t>(base) % 16 != 0)
    return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {2 * static_cast<cuuint64_t>(head_dim)};
  const cuuint32_t box[2] = {64, 64};
  return encode_16bit_map(map, base, 2, dims, strides, box);
}

}  // namespace detail

namespace ptx {

// One arrival on `bar` that also expects `bytes` more of asynchronous writes (the TMA's
// complete_tx) before its phase completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// `bytes` more of asynchronous writes expected on `bar` in its current phase, without an arrival
// (the thread arrives separately: the decode's cp.async.mbarrier.arrive.noinc).
__device__ __forceinline__ void mbarrier_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Box (c0, c1, c2, c3) of the tensor map at `map` (a __grid_constant__ parameter's address) into
// shared memory at `dst`, its bytes counted on mbarrier `bar`.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const CUtensorMap* map,
                                            std::uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Box (c0, c1) of a two-dimensional tensor map, as tma_load_4d.
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map,
                                            std::uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

}  // namespace ptx
}  // namespace lazyattn::cuda
