// The decode kernel's parameters and its CTA's shape: four warps over one 64-key tile at a time,
// the GQA group's query heads as the 16 rows of the MMA's A operand, a ring of K/V stages.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/packed_plan.hpp"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/support.hpp"

namespace lazyattn::cuda {

// Plain kernel parameters (passed by value as a __grid_constant__).
struct DecodeParams {
  const void* q = nullptr;  // [num_requests, num_qo_heads, head_dim], un-rotated
  void* o = nullptr;        // [num_requests, num_qo_heads, head_dim]
  float* maybe_lse = nullptr;  // [num_requests, num_qo_heads], natural log; may be null
  // 1: q arrives rotated at its own position m (R(m) q, as models rotate it), so the rotations
  // count from 0: R(m - s) q = R(-s) R(m) q.
  std::int32_t query_rotated = 0;
  const void* k_pool = nullptr;  // layer base of the K pool [num_pages, kv_heads, page_size, D]
  const void* v_pool = nullptr;
  std::int64_t page_stride = 0;  // elements
  std::int64_t head_stride = 0;
  PlanView plan;
  DecodeScheduleView sched;
  RopeView rope;
  float* partial_o = nullptr;    // [num_partials, num_qo_heads, head_dim]
  float* partial_lse = nullptr;  // [num_partials, num_qo_heads], log2 units
  int* split_counters = nullptr;  // [num_requests, num_kv_heads], zero between launches
  float sm_scale_log2 = 0.0f;    // softmax scale * log2(e)
  std::int32_t num_qo_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t group_size = 0;
  std::int32_t page_size_log2 = 0;
  // fp8 pools: this layer's K and V scales, [num_kv_heads] (a stored code times its head's scale
  // is the value); null for 16-bit pools.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// The parameters of the builds that read whole tiles by the TMA (detail::decode_tma): the tensor
// maps beside the rest (apart, so that the other builds' parameters stay as they were: with the
// maps' 64-byte alignment in them, their PTX read the parameters differently).
struct DecodeTmaParams : DecodeParams {
  // 1 where the launch made maps of this layer's K and V pages (detail::encode_page_map, fp8
  // codes as 16-bit pairs); 0: every tile gathered with cp.async (pages under 8 keys, drivers
  // without tensor maps).
  std::int32_t kv_tma = 0;
  // 1: also maps whose boxes span 64 / page_size pages that follow one another in the pool
  // (encode_page_map's run form, pages under 64 keys), for tiles whose pages are consecutive.
  std::int32_t kv_tma_runs = 0;
  CUtensorMap k_map{};
  CUtensorMap v_map{};
  CUtensorMap k_run_map{};
  CUtensorMap v_run_map{};
};

namespace detail {

// Four consecutive outputs (dst need be aligned only as T: o is the caller's tensor).
template <class T>
__device__ __forceinline__ void store4(T* dst, float4 v) {
  dst[0] = ptx::from_f32<T>(v.x);
  dst[1] = ptx::from_f32<T>(v.y);
  dst[2] = ptx::from_f32<T>(v.z);
  dst[3] = ptx::from_f32<T>(v.w);
}

inline constexpr int kDecodeWarps = 4;
inline constexpr int kDecodeThreads = 32 * kDecodeWarps;
inline constexpr int kDecodeTileKeys = kTileKeys;  // 16 keys per warp
inline constexpr int kRows = kMaxDecodeGroup;  // query rows of the mma A operand

inline constexpr int kRecordRing = 8;  // slots of the raw-capable build's record ring

// The builds that read whole tiles by the TMA: fp8 pools at head dims 128 and 256, whose tiles of
// code pairs (D / 2 16-bit columns) are one or two 128-byte-swizzled boxes wide. The loader
// (TileStream's kTma) takes 16-bit tiles of 64 or 128 columns too, but on an H100 the 16-bit
// builds ran 1-3% slower with it (memory-bound there; docs/performance.md, "Whole tiles by the
// TMA"), so they keep the gather until an H200, where the raw build is issue-bound, says
// otherwise; at head dim 64 an fp8 row is 32 columns, under a box.
__host__ __device__ constexpr bool decode_tma(bool fp8, int head_dim) {
  return fp8 && (head_dim == 128 || head_dim == 256);
}
// The parameter struct of a build.
template <bool kFp8, int D>
using DecodeKernelParams = std::conditional_t<decode_tma(kFp8, D), DecodeTmaParams, DecodeParams>;

template <int D>
struct DecodeShape {
  static constexpr int kStages = D <= 128 ? 3 : 2;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kKSteps = D / 16;
  static constexpr int kTileElems = kDecodeTileKeys * D;
  static constexpr bool kQInRegisters = D <= 128;
  // Raw form: cos/sin of this thread's two keys' in-tile offsets, per pair it holds (D / 8
  // each), in registers up to D = 128; at 256 read from the offset table (L1/L2) at each use.
  static constexpr bool kKeyCsInRegisters = D <= 128;  // (reading them at each use is slower)
  // Shared memory (bytes): K/V stages (reused to merge the warps), two buffers of the rotated
  // 16-bit query and two of the cos/sin of a query rotation (the next ones built ahead).
  static constexpr int kStageBytes = 2 * kTileElems * 2;
  static constexpr int kMergeBytes = kDecodeWarps * kRows * (D + 4) * 4;
  static constexpr int kPipeBytes = kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes
                                                                       : kMergeBytes;
  static constexpr int kQRotOffset = kPipeBytes;              // [2][kRows][D] 16-bit
  static constexpr int kCsQueryOffset = kQRotOffset + 2 * kRows * D * 2;  // [2][D / 2] float2
  // The raw-capable build's ring of tile records (decode/kernel.cuh), 16-byte aligned.
  static constexpr int kRecordOffset = kCsQueryOffset + 2 * (D / 2) * 8;
  // The stages' mbarriers (the TMA builds), then room to start the stages at a 1024-byte
  // boundary (the 128-byte swizzle's period, which the TMA's writes follow from the address).
  static constexpr int kBarOffset = kRecordOffset + kRecordRing * static_cast<int>(sizeof(TileInfo));
  static constexpr int kAlign = 1024;
  static constexpr int kSmemBytes = kBarOffset + kStages * 8 + kAlign;
  // Two CTAs per multiprocessor (228 KiB, 1 KiB reserved per CTA) up to D = 128.
  static_assert(D > 128 || kSmemBytes <= 113 * 1024, "decode: shared memory too large for 2 CTAs/SM");
};

}  // namespace detail
}  // namespace lazyattn::cuda
