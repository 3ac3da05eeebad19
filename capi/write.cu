// lazyattn's C ABI: page writes (lazyattn_write, and lazyattn_write_fp8 into fp8 pools) into the
// caller's K/V pools.
#include "internal.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/page_write.cuh"

using namespace lazyattn;
using namespace lazyattn::capi;

namespace {

// Both entry points: `fp8` says which one was called (its pool must be, or must not be, fp8);
// scales and saturated are the fp8 pool's device state (null otherwise).
lazyattn_status write(const char* w, bool fp8, lazyattn_pool pool, lazyattn_rope rope,
                      int32_t layer, void* k_pool, void* v_pool, const float* scales,
                      unsigned long long* saturated, int32_t input_dtype, const void* k,
                      const void* v, int64_t num_tokens, const void* dst, int32_t flags,
                      void* stream) {
  return guarded(w, [&] {
    lazyattn_pool_t& p = *pools().check(pool, w, "lazyattn_pool");
    const KvStoreConfig& c = p.config;
    const bool fp8_pool = c.dtype == DType::kFloat8E4M3;
    LAZYATTN_CHECK(fp8 == fp8_pool, w, ": a ", to_string(c.dtype), " pool, expected ",
                   fp8 ? "a float8_e4m3 pool (others: lazyattn_write)"
                       : "a 16-bit pool (float8_e4m3 pools: lazyattn_write_fp8)");
    LAZYATTN_CHECK(!fp8 || input_dtype == LAZYATTN_DTYPE_BFLOAT16 ||
                       input_dtype == LAZYATTN_DTYPE_FLOAT16,
                   w, ": input_dtype ", input_dtype, ", expected 1 (float16) or 2 (bfloat16)");
    const DType input = fp8 ? static_cast<DType>(input_dtype) : c.dtype;
    LAZYATTN_CHECK(layer >= 0 && layer < c.num_layers, w, ": layer ", layer, ", expected in [0, ",
                   c.num_layers, ")");
    LAZYATTN_CHECK((flags & ~LAZYATTN_WRITE_ROTATE) == 0, w, ": flags ", flags,
                   ", expected 0 or LAZYATTN_WRITE_ROTATE (1)");
    LAZYATTN_CHECK(num_tokens >= 0 && num_tokens < (std::int64_t{1} << 31), w, ": num_tokens ",
                   num_tokens, ", expected in [0, 2^31)");
    const bool rotate = (flags & LAZYATTN_WRITE_ROTATE) != 0;
    if (rotate) {
      ropes().check(rope, w, "lazyattn_rope");
      LAZYATTN_CHECK(rope->device == p.device, w, ": the rope was created on device ", rope->device,
                     ", expected the pool's device ", p.device);
    }
    if (num_tokens == 0) return;
    DeviceScope scope(p.device);
    const std::size_t es = static_cast<std::size_t>(size_of(input));
    check_device_pointer(k_pool, p.device, 16, w, "k_pool");
    check_device_pointer(v_pool, p.device, 16, w, "v_pool");
    check_device_pointer(k, p.device, es, w, "k");
    check_device_pointer(v, p.device, es, w, "v");
    check_device_pointer(dst, p.device, 8, w, "dst");
    if (fp8) {
      check_device_pointer(scales, p.device, sizeof(float), w, "scales");
      check_device_pointer(saturated, p.device, 8, w, "saturated");
    }
    const std::size_t n_scales = static_cast<std::size_t>(c.num_layers) * c.num_kv_heads;
    cuda::DevicePool dev(c, k_pool, v_pool, scales, fp8 ? scales + n_scales : nullptr, saturated);
    const auto n = static_cast<std::int32_t>(num_tokens);
    const auto* page = static_cast<const std::int32_t*>(dst);
    const auto* slot = page + n;
    auto s = static_cast<cudaStream_t>(stream);
    if (rotate) {
      const auto* pos = reinterpret_cast<const std::int64_t*>(static_cast<const std::byte*>(dst) +
                                                              (2 * num_tokens * 4 + 7) / 8 * 8);
      cuda::write_tokens(dev, layer, input, k, v, n, page, slot, pos, rope->device_rope, s);
    } else {
      cuda::copy_tokens(dev, layer, input, k, v, n, page, slot, s);
    }
  });
}

}  // namespace

extern "C" lazyattn_status lazyattn_write(lazyattn_pool pool, lazyattn_rope rope, int32_t layer,
                                          void* k_pool, void* v_pool, const void* k, const void* v,
                                          int64_t num_tokens, const void* dst, int32_t flags,
                                          void* stream) {
  return write("lazyattn_write", false, pool, rope, layer, k_pool, v_pool, nullptr, nullptr, 0, k,
               v, num_tokens, dst, flags, stream);
}

extern "C" lazyattn_status lazyattn_write_fp8(lazyattn_pool pool, lazyattn_rope rope,
                                              int32_t layer, void* k_pool, void* v_pool,
                                              const float* scales, uint64_t* saturated,
                                              int32_t input_dtype, const void* k, const void* v,
                                              int64_t num_tokens, const void* dst, int32_t flags,
                                              void* stream) {
  static_assert(sizeof(uint64_t) == sizeof(unsigned long long));
  return write("lazyattn_write_fp8", true, pool, rope, layer, k_pool, v_pool, scales,
               reinterpret_cast<unsigned long long*>(saturated), input_dtype, k, v, num_tokens,
               dst, flags, stream);
}
