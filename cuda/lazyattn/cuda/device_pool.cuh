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
    upload_scales();
  }

  // Over K and V pools the caller owns (a framework's tensors, say), shaped and typed as above,
  // 16-byte aligned, and outliving this object. Nothing is allocated.
  DevicePool(const KvStoreConfig& config, void* k, void* v)
      : config_(checked(config)),
        geometry_{config.num_layers, config.num_kv_heads, config.head_dim, config.page_size,
                  config.num_pages},
        k_base_(static_cast<std::byte*>(k)),
        v_base_(static_cast<std::byte*>(v)) {
    LAZYATTN_CHECK(k && v, "DevicePool: external K/V pools must not be null");
    LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(k) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(v) % 16 == 0,
                   "DevicePool: external K/V pools must be 16-byte aligned (tiles are read in "
                   "16-byte vectors)");
    upload_scales();
  }

  const KvStoreConfig& config() const { return config_; }
  const PoolGeometry& geometry() const { return geometry_; }
  DType dtype() const { return config_.dtype; }
  std::size_t element_size() const { return static_cast<std::size_t>(size_of(config_.dtype)); }

  // An fp8 pool's K and V scales of layer `layer`, [num_kv_heads] floats on the device (the
  // config's, or 1); null for other pools.
  const float* k_scales(int layer) const { return scales_at(k_scales_, layer); }
  const float* v_scales(int layer) const { return scales_at(v_scales_, layer); }

  // fp8 pools: how many values the page writes (cuda::write_tokens, copy_tokens) stored as
  // +-448 because |x / scale| was past e4m3's range (KvStore::insert refuses those); waits for
  // the device. 0 for other pools.
  std::int64_t fp8_saturated() const {
    if (!saturated_.size()) return 0;
    return static_cast<std::int64_t>(saturated_.download()[0]);
  }
  unsigned long long* saturation_counter() { return saturated_.data(); }

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

  // fp8 pools: the scales on the device, [num_layers][num_kv_heads] (1 where the config has none).
  void upload_scales() {
    if (config_.dtype != DType::kFloat8E4M3) return;
    saturated_ = DeviceBuffer<unsigned long long>(1);
    LAZYATTN_CUDA_CHECK(cudaMemset(saturated_.data(), 0, saturated_.bytes()));
    const std::size_t n = static_cast<std::size_t>(config_.num_layers) * config_.num_kv_heads;
    for (auto [host, dev] : {std::pair{&config_.k_scale, &k_scales_},
                             std::pair{&config_.v_scale, &v_scales_}}) {
      std::vector<float> values = host->empty() ? std::vector<float>(n, 1.0f) : *host;
      *dev = DeviceBuffer<float>(n);
      LAZYATTN_CUDA_CHECK(
          cudaMemcpy(dev->data(), values.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
  }
  const float* scales_at(const DeviceBuffer<float>& s, int layer) const {
    LAZYATTN_CHECK(layer >= 0 && layer < config_.num_layers, "DevicePool: layer ", layer,
                   ", expected in [0, ", config_.num_layers, ")");
    return s.size() ? s.data() + static_cast<std::size_t>(layer) * config_.num_kv_heads : nullptr;
  }

  KvStoreConfig config_;
  PoolGeometry geometry_;
  DeviceBuffer<float> k_scales_;  // fp8 pools only
  DeviceBuffer<float> v_scales_;
  DeviceBuffer<unsigned long long> saturated_;
  DeviceBuffer<std::byte> k_;  // empty over external pools
  DeviceBuffer<std::byte> v_;
  std::byte* k_base_ = nullptr;
  std::byte* v_base_ = nullptr;
};

}  // namespace lazyattn::cuda
