// [cuda] The host's fp8 E4M3 conversions (dtype.hpp) against the device's (cuda_fp8.h: cvt with
// round to nearest even and satfinite), so that a page quantized on the host reads on the device
// as the device would have written it: every code decoded, and encoded from every float whose
// low 11 mantissa bits are all zero or all one (every exponent, 4096 mantissas each, both
// signs), every tie and its neighbours, and the specials.
#include "support/catch.hpp"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/dtype.hpp"

namespace {

__global__ void encode_e4m3(const float* x, std::uint8_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
}

__global__ void decode_e4m3(float* out) {
  const int c = threadIdx.x;  // 256 threads, one per code
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
  out[c] = __half2float(__half(h));
}

}  // namespace

TEST_CASE("fp8 e4m3: the host's conversions are the device's", "[cuda][fp8]") {
  using lazyattn::cuda::DeviceBuffer;
  SECTION("decode: every code") {
    DeviceBuffer<float> out(256);
    decode_e4m3<<<1, 256>>>(out.data());
    LAZYATTN_CUDA_CHECK_LAUNCH();
    const std::vector<float> dev = out.download();
    for (int c = 0; c < 256; ++c) {
      INFO("code " << c);
      const float host = lazyattn::to_float(lazyattn::float8_e4m3{static_cast<std::uint8_t>(c)});
      if (std::isnan(dev[c])) CHECK(std::isnan(host));
      else CHECK(std::bit_cast<std::uint32_t>(host) == std::bit_cast<std::uint32_t>(dev[c]));
    }
  }
  SECTION("encode: floats of every exponent, the ties, the specials") {
    std::vector<float> xs;
    for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {  // sign, exponent, top 12 mantissa bits
      const float x = std::bit_cast<float>(hi << 11 | ((hi & 1u) ? 0x7ffu : 0u));
      if (!std::isnan(x)) xs.push_back(x);
    }
    for (int c = 0; c < 0x7e; ++c) {  // each tie between consecutive codes and its neighbours
      const float lo = lazyattn::to_float(lazyattn::float8_e4m3{static_cast<std::uint8_t>(c)});
      const float up = lazyattn::to_float(lazyattn::float8_e4m3{static_cast<std::uint8_t>(c + 1)});
      const float mid = 0.5f * (lo + up);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
        xs.push_back(x);
        xs.push_back(-x);
      }
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (float x : {0.0f, -0.0f, 448.0f, 464.0f, 465.0f, 480.0f, 1e30f, inf, -inf, 0x1p-10f,
                    std::nextafter(0x1p-10f, 1.0f)})
      xs.push_back(x);
    const int n = static_cast<int>(xs.size());
    DeviceBuffer<float> x_dev(xs.size());
    DeviceBuffer<std::uint8_t> out(xs.size());
    x_dev.upload(xs);
    encode_e4m3<<<(n + 255) / 256, 256>>>(x_dev.data(), out.data(), n);
    LAZYATTN_CUDA_CHECK_LAUNCH();
    const std::vector<std::uint8_t> dev = out.download();
    int mismatches = 0;
    for (int i = 0; i < n; ++i) {
      const int host = lazyattn::from_float<lazyattn::float8_e4m3>(xs[i]).bits;
      if (host != dev[i] && ++mismatches <= 5)
        FAIL_CHECK("x " << xs[i] << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(xs[i])
                        << "): host 0x" << host << ", device 0x" << int{dev[i]});
    }
    CHECK(mismatches == 0);
    INFO(n << " floats");
    // NaN stays NaN on both sides.
    CHECK((lazyattn::from_float<lazyattn::float8_e4m3>(std::numeric_limits<float>::quiet_NaN())
               .bits & 0x7f) == 0x7f);
  }
}
