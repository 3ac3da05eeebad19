// The eager baseline (Block-Attention style): copy documents' K into private pages rotated at the
// logical positions of one request, V alongside; and queries rotated at their positions. With
// these, the RoPE-off decode computes what deferred RoPE computes, at the price of the copies.
// Over fp8 pools the copy re-quantizes K after its rotation with the same scale (V's codes are
// copied as they are), as Block-Attention over fp8 pages would.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/page_write.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

// Host description of a re-encode: segments of stored pages copied into destination pages.
struct ReencodeJob {
  std::vector<std::int32_t> src_pages;
  std::vector<std::int32_t> dst_pages;
  std::vector<std::int32_t> seg_src_begin;  // [S] into src_pages
  std::vector<std::int32_t> seg_dst_begin;  // [S] into dst_pages
  std::vector<std::int32_t> seg_length;     // [S] tokens
  std::vector<std::int64_t> seg_start;      // [S] rotation start (logical start, 0: absolute)
  std::vector<std::uint8_t> seg_form;       // [S] StorageForm of the source

  void add(std::span<const std::int32_t> src, std::span<const std::int32_t> dst,
           std::int32_t length, std::int64_t start, StorageForm form) {
    seg_src_begin.push_back(static_cast<std::int32_t>(src_pages.size()));
    seg_dst_begin.push_back(static_cast<std::int32_t>(dst_pages.size()));
    src_pages.insert(src_pages.end(), src.begin(), src.end());
    dst_pages.insert(dst_pages.end(), dst.begin(), dst.end());
    seg_length.push_back(length);
    seg_start.push_back(rotation_start(form, start));
    seg_form.push_back(static_cast<std::uint8_t>(form));
  }
  std::int32_t num_segments() const { return static_cast<std::int32_t>(seg_length.size()); }
};

namespace detail {

inline constexpr int kReencodeTokens = 16;  // tokens per block; cos/sin shared by the heads

struct ReencodeParams {
  const std::int32_t* src_pages;
  const std::int32_t* dst_pages;
  const std::int32_t* seg_src_begin;
  const std::int32_t* seg_dst_begin;
  const std::int32_t* seg_length;
  const std::int64_t* seg_start;
  const std::uint8_t* seg_form;
  void* k_pool;
  void* v_pool;
  RopeView rope;
  std::int64_t page_stride;
  std::int64_t head_stride;
  std::int32_t num_kv_heads;
  std::int32_t head_dim;
  std::int32_t page_size_log2;
  // fp8 pools: this layer's K scales [num_kv_heads] and the pool's saturation counter (a rotated
  // pair's element can pass 448 x scale where the stored one did not).
  const float* k_scale = nullptr;
  unsigned long long* saturated = nullptr;
};

// A pool element as a float: fp8, its code times `scale`; else the value.
template <class T>
__device__ __forceinline__ float from_pool(T x, float scale) {
  if constexpr (std::is_same_v<T, __nv_fp8_storage_t>) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3))) * scale;
  } else {
    return ptx::to_f32(x);
  }
}

template <class T>
__global__ void reencode_kernel(const __grid_constant__ ReencodeParams p) {
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_storage_t>;
  extern __shared__ float2 cs[];  // [kReencodeTokens][rotary_dim / 2]
  const int seg = blockIdx.y;
  const int tok0 = blockIdx.x * kReencodeTokens;
  const int len = p.seg_length[seg];
  if (tok0 >= len) return;
  const int ntok = min(kReencodeTokens, len - tok0);
  const int r = p.rope.rotary_dim, half = r / 2;
  const bool local = p.seg_form[seg] != static_cast<std::uint8_t>(StorageForm::kRaw);
  // Local-form keys already carry R(i): they need R(start); raw keys need R(start + i).
  for (int i = threadIdx.x; i < ntok * half; i += blockDim.x) {
    int t = i / half, j = i % half;
    std::int64_t pos = p.seg_start[seg] + (local ? 0 : tok0 + t);
    cs[i] = rope_cos_sin(pos, p.rope.turns[j]);
  }
  __syncthreads();
  const int D = p.head_dim, H = p.num_kv_heads, mask = (1 << p.page_size_log2) - 1;
  T* kp = static_cast<T*>(p.k_pool);
  T* vp = static_cast<T*>(p.v_pool);
  for (int i = threadIdx.x; i < ntok * H * D; i += blockDim.x) {
    int t = i / (H * D), h = (i / D) % H, d = i % D;
    int tok = tok0 + t;
    std::int64_t src = p.src_pages[p.seg_src_begin[seg] + (tok >> p.page_size_log2)] * p.page_stride +
                       h * p.head_stride + static_cast<std::int64_t>(tok & mask) * D;
    std::int64_t dst = p.dst_pages[p.seg_dst_begin[seg] + (tok >> p.page_size_log2)] * p.page_stride +
                       h * p.head_stride + static_cast<std::int64_t>(tok & mask) * D;
    vp[dst + d] = vp[src + d];
    if (d >= r) {
      kp[dst + d] = kp[src + d];
      continue;
    }
    const RotaryPair rp = rotary_pair(d, half, p.rope.interleaved);
    const float2 c = cs[t * half + rp.j];
    const float ks = kFp8 ? p.k_scale[h] : 1.0f;
    const float x = from_pool(kp[src + d], ks), y = from_pool(kp[src + rp.partner], ks);
    kp[dst + d] = to_pool<T>(rotate_element(x, y, c, rp.first), ks, p.saturated);
  }
}

// q_out[b, h] = query_scale-weighted R(position of request b's query row) q[b, h].
struct RotateQueriesParams {
  const void* q;
  void* q_out;
  const std::int64_t* request_query_position;
  const std::int32_t* request_query_indptr;
  RopeView rope;
  std::int32_t num_qo_heads;
  std::int32_t head_dim;
};

template <class T>
__global__ void rotate_queries_kernel(const __grid_constant__ RotateQueriesParams p) {
  extern __shared__ float2 qcs[];  // [rotary_dim / 2]
  const int b = blockIdx.x;
  const int half = p.rope.rotary_dim / 2;
  const std::int64_t row0 = p.request_query_indptr[b];
  const int rows = p.request_query_indptr[b + 1] - row0;
  const int D = p.head_dim, r = p.rope.rotary_dim;
  // Length-dependent schedules: request b's own frequency set.
  const std::uint64_t* turns = p.rope.turns + (p.rope.per_request ? b : 0) * half;
  for (int q = 0; q < rows; ++q) {
    std::int64_t pos = p.request_query_position[b] + q;
    __syncthreads();
    for (int j = threadIdx.x; j < half; j += blockDim.x) qcs[j] = rope_cos_sin(pos, turns[j]);
    __syncthreads();
    const T* src = static_cast<const T*>(p.q) + (row0 + q) * p.num_qo_heads * D;
    T* dst = static_cast<T*>(p.q_out) + (row0 + q) * p.num_qo_heads * D;
    for (int i = threadIdx.x; i < p.num_qo_heads * D; i += blockDim.x) {
      int d = i % D, base = i - d;
      if (d >= r) {
        dst[i] = src[i];
        continue;
      }
      const RotaryPair rp = rotary_pair(d, half, p.rope.interleaved);
      const float x = ptx::to_f32(src[base + d]), y = ptx::to_f32(src[base + rp.partner]);
      dst[i] = ptx::from_f32<T>(rotate_element(x, y, qcs[rp.j], rp.first) * p.rope.query_scale);
    }
  }
}

}  // namespace detail

// A ReencodeJob in device memory.
class DeviceReencode {
 public:
  void upload(const ReencodeJob& job, cudaStream_t stream = nullptr) {
    num_segments_ = job.num_segments();
    max_length_ = 0;
    for (auto l : job.seg_length) max_length_ = std::max(max_length_, l);
    auto put = [&](DeviceBuffer<std::int32_t>& b, const std::vector<std::int32_t>& v) {
      b.reserve(std::max<std::size_t>(v.size(), 1));
      b.upload(v, stream);
    };
    put(src_pages_, job.src_pages);
    put(dst_pages_, job.dst_pages);
    put(src_begin_, job.seg_src_begin);
    put(dst_begin_, job.seg_dst_begin);
    put(length_, job.seg_length);
    start_.reserve(std::max<std::size_t>(job.seg_start.size(), 1));
    start_.upload(job.seg_start, stream);
    form_.reserve(std::max<std::size_t>(job.seg_form.size(), 1));
    form_.upload(job.seg_form, stream);
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors may go away
  }

  // Runs the copy for one layer. fp8 pools: K re-quantized after its rotation with its KV head's
  // scale, values past e4m3's range saturated and counted (DevicePool::fp8_saturated).
  void run(DevicePool& pool, int layer, const DeviceRope& rope, cudaStream_t stream = nullptr) const {
    const char* w = "cuda::DeviceReencode::run";
    rope.policy().check_form(StorageForm::kLocal, w);
    const bool fp8 = pool.dtype() == DType::kFloat8E4M3;
    LAZYATTN_CHECK(!fp8 || pool.saturation_counter(), w,
                   ": a float8_e4m3 pool without a saturation counter, expected one (DevicePool "
                   "over external pools: its `saturated`)");
    if (num_segments_ == 0 || max_length_ == 0) return;
    const PoolGeometry& geo = pool.geometry();
    int log2_page = 0;
    while ((1 << log2_page) < geo.page_size) ++log2_page;
    detail::ReencodeParams p{src_pages_.data(), dst_pages_.data(), src_begin_.data(),
                             dst_begin_.data(), length_.data(),    start_.data(),
                             form_.data(),      pool.k_layer(layer), pool.v_layer(layer),
                             rope.view(),       geo.page_stride(), geo.head_stride(),
                             geo.num_kv_heads,  geo.head_dim,      log2_page};
    dim3 grid((max_length_ + detail::kReencodeTokens - 1) / detail::kReencodeTokens,
              static_cast<unsigned>(num_segments_));
    std::size_t smem = detail::kReencodeTokens * (rope.view().rotary_dim / 2) * sizeof(float2);
    if (fp8) {
      p.k_scale = pool.k_scales(layer);
      p.saturated = pool.saturation_counter();
      detail::reencode_kernel<__nv_fp8_storage_t><<<grid, 256, smem, stream>>>(p);
      LAZYATTN_CUDA_CHECK_LAUNCH();
      return;
    }
    dispatch_dtype(pool.dtype(), [&](auto tag) {
      using T = device_type_t<decltype(tag)>;
      detail::reencode_kernel<T><<<grid, 256, smem, stream>>>(p);
      LAZYATTN_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  std::int32_t num_segments_ = 0;
  std::int32_t max_length_ = 0;
  DeviceBuffer<std::int32_t> src_pages_, dst_pages_, src_begin_, dst_begin_, length_;
  DeviceBuffer<std::int64_t> start_;
  DeviceBuffer<std::uint8_t> form_;
};

// Rotates each request's query rows at their positions (plan on the device) and applies the
// attention factor: the queries the RoPE-off decode expects next to re-encoded keys.
inline void rotate_queries(DType dtype, const void* q, void* q_out, const PlanView& plan,
                           int num_qo_heads, int head_dim, const DeviceRope& rope,
                           cudaStream_t stream = nullptr) {
  detail::RotateQueriesParams p{q,           q_out,        plan.request_query_position,
                                plan.request_query_indptr, rope.view(), num_qo_heads, head_dim};
  std::size_t smem = (rope.view().rotary_dim / 2) * sizeof(float2);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = device_type_t<decltype(tag)>;
    detail::rotate_queries_kernel<T><<<plan.num_requests, 256, smem, stream>>>(p);
    LAZYATTN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace lazyattn::cuda
