// Writing K/V tokens into pool pages on the device, in raw form (copied) or local form (K rotated
// at a given position, normally the token's index within its document or tail). fp8 pools take
// bfloat16 or float16 tokens and store e4m3(x / scale) of K (after its rotation) and V, with the
// scale of the layer and KV head; a value past e4m3's range is stored as +-448 and counted
// (DevicePool::fp8_saturated).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/store.hpp"
#include "lazyattn/rope/rotate.hpp"

namespace lazyattn::cuda {

// Where each token goes: page id and slot, and (local form) the position K is rotated at.
struct TokenDestinations {
  std::vector<std::int32_t> page;
  std::vector<std::int32_t> slot;
  std::vector<std::int64_t> rotate_position;  // empty: raw form, K copied unrotated
};

// Destinations of tokens [first, first + count) of a page list, rotated (local form) at their
// index within the list plus `position_offset`, or not rotated (raw form).
inline TokenDestinations token_destinations(std::span<const std::int32_t> pages, int page_size,
                                            std::int64_t first, std::int64_t count,
                                            StorageForm form, std::int64_t position_offset = 0) {
  LAZYATTN_CHECK(first >= 0 && count >= 0 &&
                     first + count <= static_cast<std::int64_t>(pages.size()) * page_size,
                 "token_destinations: tokens [", first, ", ", first + count, ") run past ",
                 pages.size(), " pages of ", page_size);
  TokenDestinations d;
  d.page.resize(static_cast<std::size_t>(count));
  d.slot.resize(static_cast<std::size_t>(count));
  if (form == StorageForm::kLocal) d.rotate_position.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t tok = first + i;
    d.page[i] = pages[static_cast<std::size_t>(tok / page_size)];
    d.slot[i] = static_cast<std::int32_t>(tok % page_size);
    if (form == StorageForm::kLocal) d.rotate_position[i] = tok + position_offset;
  }
  return d;
}

namespace detail {

struct PageWriteParams {
  const void* k_in;  // [num_tokens, num_kv_heads, head_dim]
  const void* v_in;
  void* k_pool;  // layer base
  void* v_pool;
  const std::int32_t* page;
  const std::int32_t* slot;
  const std::int64_t* maybe_rotate_position;
  RopeView rope;
  std::int64_t page_stride;
  std::int64_t head_stride;
  std::int32_t num_tokens;
  std::int32_t num_kv_heads;
  std::int32_t head_dim;
  // fp8 pools: this layer's scales [num_kv_heads] and the pool's saturation counter.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  unsigned long long* saturated = nullptr;
};

// x as a pool element: fp8 e4m3(x / scale), saturating and counted; else rounded to T.
template <class T>
__device__ __forceinline__ T to_pool(float x, float scale, unsigned long long* saturated) {
  if constexpr (std::is_same_v<T, __nv_fp8_storage_t>) {
    const float q = x / scale;
    if (!(fabsf(q) < 464.0f)) atomicAdd(saturated, 1ull);  // KvStore::insert refuses these
    return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
  } else {
    return ptx::from_f32<T>(x);
  }
}

// One block per token; threads over (head, pair) for K and (head, dim) for V. TIn: the tokens'
// type; T: the pool's (the same, or fp8 storage).
template <class TIn, class T>
__global__ void page_write_kernel(const __grid_constant__ PageWriteParams p) {
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_storage_t>;
  const int tok = blockIdx.x;
  const int D = p.head_dim, H = p.num_kv_heads;
  const std::int64_t dst_tok = p.page[tok] * p.page_stride + static_cast<std::int64_t>(p.slot[tok]) * D;
  const TIn* k_in = static_cast<const TIn*>(p.k_in) + static_cast<std::int64_t>(tok) * H * D;
  const TIn* v_in = static_cast<const TIn*>(p.v_in) + static_cast<std::int64_t>(tok) * H * D;
  T* k_out = static_cast<T*>(p.k_pool) + dst_tok;
  T* v_out = static_cast<T*>(p.v_pool) + dst_tok;
  const int r = p.rope.rotary_dim;
  for (int i = threadIdx.x; i < H * D; i += blockDim.x) {
    int h = i / D, d = i % D;
    const float ks = kFp8 ? p.k_scale[h] : 1.0f, vs = kFp8 ? p.v_scale[h] : 1.0f;
    T* v_at = v_out + h * p.head_stride + d;
    T* k_at = k_out + h * p.head_stride + d;
    if constexpr (kFp8) *v_at = to_pool<T>(ptx::to_f32(v_in[i]), vs, p.saturated);
    else *v_at = v_in[i];
    if (!p.maybe_rotate_position || d >= r) {
      if constexpr (kFp8) *k_at = to_pool<T>(ptx::to_f32(k_in[i]), ks, p.saturated);
      else *k_at = k_in[i];
      continue;
    }
    // This thread writes dimension d; its pair partner and pair index follow the layout.
    const RotaryPair rp = rotary_pair(d, r / 2, p.rope.interleaved);
    float2 cs = rope_cos_sin(p.maybe_rotate_position[tok], p.rope.turns[rp.j]);
    float x = ptx::to_f32(k_in[h * D + d]);
    float y = ptx::to_f32(k_in[h * D + rp.partner]);
    float out = rotate_element(x, y, cs, rp.first);
    *k_at = to_pool<T>(out, ks, p.saturated);
  }
}

// `input`: the tokens' element type, the pool's, or (fp8 pools) bfloat16 or float16.
inline void launch_page_write(DevicePool& pool, DType input, int layer, PageWriteParams p,
                              cudaStream_t stream, const char* where) {
  const bool fp8 = pool.dtype() == DType::kFloat8E4M3;
  LAZYATTN_CHECK(fp8 ? (input == DType::kBFloat16 || input == DType::kFloat16)
                     : input == pool.dtype(),
                 where, ": tokens of dtype ", to_string(input), " into a ",
                 to_string(pool.dtype()), " pool, expected ",
                 fp8 ? "bfloat16 or float16 (quantized on the way in)" : "the pool's");
  if (fp8) {
    p.k_scale = pool.k_scales(layer);
    p.v_scale = pool.v_scales(layer);
    p.saturated = pool.saturation_counter();
    LAZYATTN_CHECK(p.saturated, where, ": a float8_e4m3 pool without a saturation counter, "
                   "expected one (DevicePool over external pools: its `saturated`)");
  }
  dispatch_dtype(input, [&](auto tag) {
    using TIn = device_type_t<decltype(tag)>;
    if constexpr (!std::is_same_v<TIn, float>) {  // (checked above: no float32 into fp8)
      if (fp8) page_write_kernel<TIn, __nv_fp8_storage_t><<<p.num_tokens, 256, 0, stream>>>(p);
      else page_write_kernel<TIn, TIn><<<p.num_tokens, 256, 0, stream>>>(p);
    } else {
      page_write_kernel<TIn, TIn><<<p.num_tokens, 256, 0, stream>>>(p);
    }
    LAZYATTN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace detail

// Writes tokens (K, V: [num_tokens, num_kv_heads, head_dim] device arrays of dtype `input`: the
// pool's, or bfloat16 or float16 for an fp8 pool) into one layer of the pool. dst_page/dst_slot/
// maybe_rotate_position are device arrays (upload a TokenDestinations); a null rotate array means
// raw form. The rope frequencies must not depend on the request length when rotating (local form).
inline void write_tokens(DevicePool& pool, int layer, DType input, const void* k, const void* v,
                         std::int32_t num_tokens, const std::int32_t* dst_page,
                         const std::int32_t* dst_slot, const std::int64_t* maybe_rotate_position,
                         const DeviceRope& rope, cudaStream_t stream = nullptr) {
  const char* w = "cuda::write_tokens";
  LAZYATTN_CHECK(num_tokens >= 0, w, ": num_tokens ", num_tokens, ", expected >= 0");
  if (num_tokens == 0) return;
  if (maybe_rotate_position) {
    rope.policy().check_form(StorageForm::kLocal, w);
    LAZYATTN_CHECK(rope.policy().head_dim() == pool.geometry().head_dim, w, ": rope head_dim ",
                   rope.policy().head_dim(), ", expected the pool's ", pool.geometry().head_dim);
  }
  detail::PageWriteParams p{k,        v,         pool.k_layer(layer), pool.v_layer(layer),
                            dst_page, dst_slot,  maybe_rotate_position, rope.view(),
                            pool.geometry().page_stride(), pool.geometry().head_stride(),
                            num_tokens, pool.geometry().num_kv_heads, pool.geometry().head_dim};
  detail::launch_page_write(pool, input, layer, p, stream, w);
}
// The same with tokens of the pool's own element type.
inline void write_tokens(DevicePool& pool, int layer, const void* k, const void* v,
                         std::int32_t num_tokens, const std::int32_t* dst_page,
                         const std::int32_t* dst_slot, const std::int64_t* maybe_rotate_position,
                         const DeviceRope& rope, cudaStream_t stream = nullptr) {
  write_tokens(pool, layer, pool.dtype(), k, v, num_tokens, dst_page, dst_slot,
               maybe_rotate_position, rope, stream);
}

// Writes tokens as given, without RoPE: raw form, or K a model already rotated (a document
// encoded at 0..len-1 in local form, a tail in absolute form). `input` as for write_tokens.
inline void copy_tokens(DevicePool& pool, int layer, DType input, const void* k, const void* v,
                        std::int32_t num_tokens, const std::int32_t* dst_page,
                        const std::int32_t* dst_slot, cudaStream_t stream = nullptr) {
  LAZYATTN_CHECK(num_tokens >= 0, "cuda::copy_tokens: num_tokens ", num_tokens,
                 ", expected >= 0");
  if (num_tokens == 0) return;
  detail::PageWriteParams p{k,        v,         pool.k_layer(layer), pool.v_layer(layer),
                            dst_page, dst_slot,  nullptr, RopeView{},
                            pool.geometry().page_stride(), pool.geometry().head_stride(),
                            num_tokens, pool.geometry().num_kv_heads, pool.geometry().head_dim};
  detail::launch_page_write(pool, input, layer, p, stream, "cuda::copy_tokens");
}
inline void copy_tokens(DevicePool& pool, int layer, const void* k, const void* v,
                        std::int32_t num_tokens, const std::int32_t* dst_page,
                        const std::int32_t* dst_slot, cudaStream_t stream = nullptr) {
  copy_tokens(pool, layer, pool.dtype(), k, v, num_tokens, dst_page, dst_slot, stream);
}

}  // namespace lazyattn::cuda
