// DevicePool: the KV store's page pool in device memory, same geometry and page ids as the host
// store, so a host Plan's page tables index it unchanged. Upload and download of pages.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/kv/store.hpp"

namespace lazyattn::cuda {

class DevicePool {
 public:
  // Allocates K and V pools shaped like the store's:
  // [num_layers, num_pages, num_kv_heads, page_size, head_dim], element type config.dtype.
  explicit DevicePool(const KvStoreConfig& config)
      : config_(config),
        geometry_{config.num_layers, config.num_kv_heads, config.head_dim, config.page_size,
                  config.num_pages},
        k_(static_cast<std::size_t>(geometry_.elements()) * size_of(config.dtype)),
        v_(static_cast<std::size_t>(geometry_.elements()) * size_of(config.dtype)) {}

  const KvStoreConfig& config() const { return config_; }
  const PoolGeometry& geometry() const { return geometry_; }
  DType dtype() const { return config_.dtype; }
  std::size_t element_size() const { return static_cast<std::size_t>(size_of(config_.dtype)); }

  // Base of layer `layer` of the K or V pool (bytes; cast to the element type).
  void* k_layer(int layer) { return k_.data() + layer_offset_bytes(layer); }
  void* v_layer(int layer) { return v_.data() + layer_offset_bytes(layer); }
  const void* k_layer(int layer) const { return k_.data() + layer_offset_bytes(layer); }
  const void* v_layer(int layer) const { return v_.data() + layer_offset_bytes(layer); }

  // Copies pages (every layer and head) from the host store's pool to the same page ids here.
  void upload_pages(const KvStore& store, std::span<const std::int32_t> pages,
                    cudaStream_t stream = nullptr) {
    check_store(store, "DevicePool::upload_pages");
    copy_pages(pages, stream, [&](std::size_t off, std::size_t bytes) {
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(k_.data() + off, store.k_bytes() + off, bytes,
                                          cudaMemcpyHostToDevice, stream));
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(v_.data() + off, store.v_bytes() + off, bytes,
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
    copy_pages(pages, stream, [&](std::size_t off, std::size_t bytes) {
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(store.k_bytes() + off, k_.data() + off, bytes,
                                          cudaMemcpyDeviceToHost, stream));
      LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(store.v_bytes() + off, v_.data() + off, bytes,
                                          cudaMemcpyDeviceToHost, stream));
    });
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  std::size_t layer_offset_bytes(int layer) const {
    LAZYATTN_CHECK(layer >= 0 && layer < config_.num_layers, "DevicePool: layer ", layer,
                   ", expected in [0, ", config_.num_layers, ")");
    return static_cast<std::size_t>(geometry_.layer_stride()) * layer * element_size();
  }

  void check_store(const KvStore& store, const char* where) const {
    const KvStoreConfig& c = store.config();
    LAZYATTN_CHECK(c.num_layers == config_.num_layers && c.num_kv_heads == config_.num_kv_heads &&
                       c.head_dim == config_.head_dim && c.page_size == config_.page_size &&
                       c.num_pages == config_.num_pages && c.dtype == config_.dtype,
                   where, ": the store's geometry differs from the device pool's");
  }

  template <class Copy>
  void copy_pages(std::span<const std::int32_t> pages, cudaStream_t, Copy&& copy) const {
    std::size_t page_bytes = static_cast<std::size_t>(geometry_.page_stride()) * element_size();
    for (std::int32_t p : pages) {
      LAZYATTN_CHECK(p >= 0 && p < config_.num_pages, "DevicePool: page id ", p,
                     ", expected in [0, ", config_.num_pages, ")");
      for (int l = 0; l < config_.num_layers; ++l) {
        std::size_t off = static_cast<std::size_t>(geometry_.offset(l, p, 0, 0)) * element_size();
        copy(off, page_bytes);
      }
    }
  }

  KvStoreConfig config_;
  PoolGeometry geometry_;
  DeviceBuffer<std::byte> k_;
  DeviceBuffer<std::byte> v_;
};

}  // namespace lazyattn::cuda
