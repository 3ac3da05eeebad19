// CUDA plumbing shared by every kernel header: checked calls, element-type mapping, device buffers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazyattn/dtype.hpp"
#include "lazyattn/error.hpp"

// Throws lazyattn::Error naming the call, file and line when a CUDA runtime call fails.
#define LAZYATTN_CUDA_CHECK(expr)                                                              \
  do {                                                                                         \
    cudaError_t lazyattn_err_ = (expr);                                                        \
    if (lazyattn_err_ != cudaSuccess)                                                          \
      ::lazyattn::detail::throw_error(__FILE__, ":", __LINE__, ": ", #expr, " failed: ",       \
                                      cudaGetErrorName(lazyattn_err_), " (",                   \
                                      cudaGetErrorString(lazyattn_err_), ")");                 \
  } while (0)

// After a launch: a bad configuration shows up here, not at the next synchronising call.
#define LAZYATTN_CUDA_CHECK_LAUNCH() LAZYATTN_CUDA_CHECK(cudaGetLastError())

namespace lazyattn::cuda {

// The CUDA type with the same bits as a lazyattn storage element.
template <class T>
struct device_type {
  using type = T;
};
template <>
struct device_type<bfloat16> {
  using type = __nv_bfloat16;
};
template <>
struct device_type<float16> {
  using type = __half;
};
template <class T>
using device_type_t = typename device_type<T>::type;

static_assert(sizeof(__nv_bfloat16) == sizeof(bfloat16) && sizeof(__half) == sizeof(float16));

// Owning device allocation (cudaMalloc; never managed memory), movable, freed on destruction.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) LAZYATTN_CUDA_CHECK(cudaMalloc(&data_, count_ * sizeof(T)));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  // Grows (never shrinks) to at least `count` elements; contents are not kept.
  void reserve(std::size_t count) {
    if (count > count_) *this = DeviceBuffer(count);
  }

  void upload(std::span<const T> host, cudaStream_t stream = nullptr) {
    LAZYATTN_CHECK(host.size() <= count_, "DeviceBuffer::upload: ", host.size(),
                   " elements into a buffer of ", count_);
    LAZYATTN_CUDA_CHECK(cudaMemcpyAsync(data_, host.data(), host.size() * sizeof(T),
                                        cudaMemcpyHostToDevice, stream));
  }
  std::vector<T> download(cudaStream_t stream = nullptr) const {
    std::vector<T> host(count_);
    LAZYATTN_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream));
    LAZYATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
  }

 private:
  void release() {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

inline int device_sm_count() {
  int device = 0, sms = 0;
  LAZYATTN_CUDA_CHECK(cudaGetDevice(&device));
  LAZYATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace lazyattn::cuda
