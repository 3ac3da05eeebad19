// DevicePool: the KV store's page pool in device memory, same geometry and page ids as the host
// store, so a host Plan's page tables index it unchanged. Upload and download of pages.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/kv/store.hpp"

namespace lazyattn::cuda {
namespace detail {

// Fills n elements with a hash of (seed, index) mapped to [-1, 1): deterministic, never zero
// everywhere, and cheap enough to fill gigabytes for benchmarks.
template <class T>
__global__ void fill_uniform_kernel(T* data, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + seed) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    float u = static_cast<float>(x >> 40) * 0x1p-23f - 1.0f;
    if constexpr (std::is_same_v<T, float>) data[i] = u;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) data[i] = __float2bfloat16_rn(u);
    else if constexpr (std::is_same_v<T, __nv_fp8_storage_t>)
      data[i] = __nv_cvt_float_to_fp8(u, __NV_SATFINITE, __NV_E4M3);
    else data[i] = __float2half_rn(u);
  }
}

}  // namespace detail

// Fills a device array of `count` elements of `dtype` with hashed uniform values in [-1, 1)
// (fp8: their e4m3 codes).
inline void fill_uniform(void* data, DType dtype, std::int64_t count, std::uint64_t seed,
                         cudaStream_t stream = nullptr) {
  if (dtype == DType::kFloat8E4M3) {
    detail::fill_uniform_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_fp8_storage_t*>(data),
                                                          count, seed);
    LAZYATTN_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_dtype(dtype, [&](auto tag) {
    using T = device_type_t<decltype(tag)>;
    detail::fill_uniform_kernel<T><<<1024, 256, 0, stream>>>(static_cast<T*>(data), count, seed);
    LAZYATTN_CUDA_CHECK_LAUNCH();
  });
}

class DevicePool {
 public:
  // Allocates K and V pools shaped like the store's:
  // [num_layers, num_pages, num_kv_heads, page_size, head_dim], element type config.dtype.
  explicit DevicePool(const KvStoreConfig& config)
      : config_(checked(config)),
        geometry_{config.num_layers, config.num_kv_heads, config.head_dim, config.page_size,
                  config.num_pages},
        k_(static_cast<std::size_t>(geometry_.elements()) * size_of(config.dtype)),
        v_(static_cast<std::size_t>(geometry_.elements()) * size_of(config.dtype)),
        k_base_(k_.data()),
        v_base_(v_.data()) {
    if (config_.dtype == DType::kFloat8E4M3) own_fp8_state();
  }

  // Over K and V pools the caller owns (a framework's tensors, say), shaped and typed as above,
  // 16-byte aligned, and outliving this object. Nothing is allocated or copied, so this is cheap
  // enough to build per launch (and inside a CUDA graph capture). An fp8 pool also needs the
  // caller's device copies of its scales, k_scales and v_scales ([num_layers][num_kv_heads]
  // floats, the config's values, or 1 where it has none), and, to be written (write_tokens,
  // copy_tokens), a saturation counter (one unsigned long long, zero to start), all outliving
  // this object.
  DevicePool(const KvStoreConfig& config, void* k, void* v, const float* k_scales = nullptr,
             const float* v_scales = nullptr, unsigned long long* saturated = nullptr)
      : config_(checked(config)),
        geometry_{config.num_layers, config.num_kv_heads, config.head_dim, config.page_size,
                  config.num_pages},
        k_base_(static_cast<std::byte*>(k)),
        v_base_(static_cast<std::byte*>(v)),
        k_scales_(k_scales),
        v_scales_(v_scales),
        saturated_(saturated) {
    LAZYATTN_CHECK(k && v, "DevicePool: external K/V pools must not be null");
    LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(k) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(v) % 16 == 0,
                   "DevicePool: external K/V pools must be 16-byte aligned (tiles are read in "
                   "16-byte vectors)");
    const bool fp8 = config_.dtype == DType::kFloat8E4M3;
    LAZYATTN_CHECK(fp8 ? (k_scales && v_scales) : !(k_scales || v_scales || saturated),
                   "DevicePool: an external ", to_string(config_.dtype), " pool ",
                   fp8 ? "needs its scales on the device, got null"
                       : "takes no scales or saturation counter (those are for float8_e4m3)");
  }

  const KvStoreConfig& config() const { return config_; }
  const PoolGeometry& geometry() const { return geometry_; }
  DType dtype() const { return config_.dtype; }
  std::size_t element_size() const { return static_cast<std::size_t>(size_of(config_.dtype)); }

  // An fp8 pool's K and V scales of layer `layer`, [num_kv_heads] floats on the device (the
  // config's, or 1); null for other pools.
  const float* k_scales(int layer) const { return scales_at(k_scales_, layer); }
  const float* v_scales(int layer) const { return scales_at(v_scales_, layer); }
  // An fp8 config's K (k = true) or V scales, [num_layers][num_kv_heads], 1 where it has none:
  // what a caller's external fp8 pool must carry on the device.
  static std::vector<float> scales_or_ones(const KvStoreConfig& c, bool k) {
    const std::vector<float>& s = k ? c.k_scale : c.v_scale;
    return s.empty() ? std::vector<float>(static_cast<std::size_t>(c.num_layers) * c.num_kv_heads,
                                          1.0f)
                     : s;
  }

  // fp8 pools: how many values the page writes (cuda::write_tokens, copy_tokens) stored as
  // +-448 because |x / scale| was past e4m3's range (KvStore::insert refuses those); waits for
  // the device. 0 for other pools.
  std::int64_t fp8_saturated() const {
    if (!saturated_) return 0;
    unsigned long long n = 0;
    LAZYATTN_CUDA_CHECK(cudaMemcpy(&n, saturated_, sizeof n, cudaMemcpyDeviceToHost));
    return static_cast<std::int64_t>(n);
  }
  unsigned long long* saturation_counter() { return saturated_; }

  // Base of layer `layer` of the K or V pool (bytes; cast to the element type).
  void* k_layer(int layer) { return k_base_ + layer_offset_bytes(layer); }
  void* v_layer(int layer) { return v_base_ + layer_offset_bytes(layer); }
  const void* k_layer(int layer) const { return k_base_ + layer_offset_bytes(layer); }
  const void* v_layer(int layer) const { return v_base_ + layer_offset_bytes(layer); }

  // Fills every page of both pools with hashed uniform values (benchmarks: no host traffic).
  void fill_uniform(std::uint64_t seed, cudaStream_t stream = nullptr) {
    std::int64_t n = geometry_.elements();
    cuda::fill_uniform(k_base_, config_.dtype, n, seed, stream);
    cuda::fill_uniform(v_base_, config_.dtype, n, seed ^ 0x5bd1e995ull, stream);
  }

  // Copies pages (every layer and head) from the host store's pool to the same page ids here.
  void upload_pages(const KvStore& store, std::span<const std::int32_t> pages,
                    cudaStream_t stream = nullptr) {
    check_store(store, "DevicePool::upload_pages");
    copy_pages(store, pages, [&](std::size_t host_off, std::size_t dev_off, std::size_t bytes) {
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(k_base_ + dev_off, store.k_bytes() + host_off, bytes,
                                          cudaMemcpyHostToDevice, stream));
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(v_base_ + dev_off, store.v_bytes() + host_off, bytes,
                                          cudaMemcpyHostToDevice, stream));
    });
  }
  void upload_document(const KvStore& store, DocHandle doc, cudaStream_t stream = nullptr) {
    auto info = store.info(doc);
    upload_pages(store, info.pages, stream);
  }
  void upload_tail(const KvStore& store, TailHandle tail, cudaStream_t stream = nullptr) {
    auto info = store.info(tail);
    upload_pages(store, info.pages, stream);
  }

  // Copies pages back into the host store's pool (tests: check what kernels wrote).
  void download_pages(KvStore& store, std::span<const std::int32_t> pages,
                      cudaStream_t stream = nullptr) const {
    check_store(store, "DevicePool::download_pages");
    copy_pages(store, pages, [&](std::size_t host_off, std::size_t dev_off, std::size_t bytes) {
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(store.k_bytes() + host_off, k_base_ + dev_off, bytes,
                                          cudaMemcpyDeviceToHost, stream));
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(store.v_bytes() + host_off, v_base_ + dev_off, bytes,
                                          cudaMemcpyDeviceToHost, stream));
    });
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  // The same rules as KvStore's constructor, so a pool never exists with a geometry the kernels
  // cannot index (page sizes must be powers of two, sizes must not overflow).
  static const KvStoreConfig& checked(const KvStoreConfig& c) {
    const char* w = "DevicePool";
    LAZYATTN_CHECK(c.num_layers >= 1 && c.num_kv_heads >= 1, w, ": num_layers ", c.num_layers,
                   " and num_kv_heads ", c.num_kv_heads, ", expected >= 1");
    LAZYATTN_CHECK(c.head_dim >= 2 && c.head_dim % 2 == 0 && c.head_dim <= 1024, w, ": head_dim ",
                   c.head_dim, ", expected an even number in [2, 1024]");
    LAZYATTN_CHECK(c.page_size >= 1 && c.page_size <= 1024 && (c.page_size & (c.page_size - 1)) == 0,
                   w, ": page_size ", c.page_size, ", expected a power of two in [1, 1024]");
    LAZYATTN_CHECK(c.num_pages >= 1 && c.num_pages <= 0x7fffffff, w, ": num_pages ", c.num_pages,
                   ", expected in [1, 2^31 - 1]");
    LAZYATTN_CHECK(c.dtype == DType::kFloat32 || c.dtype == DType::kFloat16 ||
                       c.dtype == DType::kBFloat16 || c.dtype == DType::kFloat8E4M3,
                   w, ": dtype value ", static_cast<int>(c.dtype), ", expected a DType");
    const std::size_t heads = static_cast<std::size_t>(c.num_layers) * c.num_kv_heads;
    for (const std::vector<float>* s : {&c.k_scale, &c.v_scale}) {
      LAZYATTN_CHECK(s->empty() || (c.dtype == DType::kFloat8E4M3 && s->size() == heads), w,
                     ": ", s == &c.k_scale ? "k_scale" : "v_scale", " has ", s->size(),
                     " entries, expected none or (fp8 pools) num_layers x num_kv_heads = ", heads);
      for (float x : *s)
        LAZYATTN_CHECK(std::isfinite(x) && x > 0.0f, w, ": a scale is ", x,
                       ", expected finite and positive");
    }
    const double bytes = 2.0 * c.num_layers * c.num_pages * c.num_kv_heads * c.page_size *
                         c.head_dim * size_of(c.dtype);
    LAZYATTN_CHECK(bytes < 9.0e18, w, ": ", bytes, " bytes of K and V, expected less than 2^63");
    return c;
  }

  std::size_t layer_offset_bytes(int layer) const {
    LAZYATTN_CHECK(layer >= 0 && layer < config_.num_layers, "DevicePool: layer ", layer,
                   ", expected in [0, ", config_.num_layers, ")");
    return static_cast<std::size_t>(geometry_.layer_stride()) * layer * element_size();
  }

  void check_store(const KvStore& store, const char* where) const {
    const KvStoreConfig& c = store.config();
    LAZYATTN_CHECK(c.num_layers == config_.num_layers && c.num_kv_heads == config_.num_kv_heads &&
                       c.head_dim == config_.head_dim && c.page_size == config_.page_size &&
                       c.num_pages <= config_.num_pages && c.dtype == config_.dtype &&
                       c.k_scale == config_.k_scale && c.v_scale == config_.v_scale,
                   where, ": the store's geometry, element type or fp8 scales differ from the "
                   "device pool's (a device pool may have more pages than the store, nothing "
                   "else may differ)");
  }

  // Calls copy(host offset, device offset, bytes) per page and layer. The offsets differ when the
  // device pool has more pages than the store: each layer's block is as long as its page count.
  template <class Copy>
  void copy_pages(const KvStore& store, std::span<const std::int32_t> pages, Copy&& copy) const {
    const PoolGeometry& host = store.geometry();
    std::size_t page_bytes = static_cast<std::size_t>(geometry_.page_stride()) * element_size();
    for (std::int32_t p : pages) {
      LAZYATTN_CHECK(p >= 0 && p < host.num_pages, "DevicePool: page id ", p,
                     ", expected in [0, ", host.num_pages, ")");
      for (int l = 0; l < config_.num_layers; ++l) {
        copy(static_cast<std::size_t>(host.offset(l, p, 0, 0)) * element_size(),
             static_cast<std::size_t>(geometry_.offset(l, p, 0, 0)) * element_size(), page_bytes);
      }
    }
  }

  // An fp8 pool of its own: its scales on the device (1 where the config has none) and a zeroed
  // saturation counter.
  void own_fp8_state() {
    const std::vector<float> k = scales_or_ones(config_, true), v = scales_or_ones(config_, false);
    own_scales_ = DeviceBuffer<float>(k.size() + v.size());
    LAZYATTN_CUDA_CHECK(cudaMemcpy(own_scales_.data(), k.data(), k.size() * sizeof(float),
                                   cudaMemcpyHostToDevice));
    LAZYATTN_CUDA_CHECK(cudaMemcpy(own_scales_.data() + k.size(), v.data(),
                                   v.size() * sizeof(float), cudaMemcpyHostToDevice));
    own_saturated_ = DeviceBuffer<unsigned long long>(1);
    LAZYATTN_CUDA_CHECK(cudaMemset(own_saturated_.data(), 0, own_saturated_.bytes()));
    k_scales_ = own_scales_.data();
    v_scales_ = own_scales_.data() + k.size();
    saturated_ = own_saturated_.data();
  }
  const float* scales_at(const float* s, int layer) const {
    LAZYATTN_CHECK(layer >= 0 && layer < config_.num_layers, "DevicePool: layer ", layer,
                   ", expected in [0, ", config_.num_layers, ")");
    return s ? s + static_cast<std::size_t>(layer) * config_.num_kv_heads : nullptr;
  }

  KvStoreConfig config_;
  PoolGeometry geometry_;
  DeviceBuffer<std::byte> k_;  // empty over external pools
  DeviceBuffer<std::byte> v_;
  std::byte* k_base_ = nullptr;
  std::byte* v_base_ = nullptr;
  // fp8 pools only: the scales and saturation counter on the device (own_* or the caller's).
  DeviceBuffer<float> own_scales_;
  DeviceBuffer<unsigned long long> own_saturated_;
  const float* k_scales_ = nullptr;
  const float* v_scales_ = nullptr;
  unsigned long long* saturated_ = nullptr;
};

}  // namespace lazyattn::cuda
