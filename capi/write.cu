// lazyattn's C ABI: page writes (lazyattn_write) into the caller's K/V pools.
#include "internal.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/page_write.cuh"

using namespace lazyattn;
using namespace lazyattn::capi;

extern "C" lazyattn_status lazyattn_write(lazyattn_pool pool, lazyattn_rope rope, int32_t layer,
                                          void* k_pool, void* v_pool, const void* k, const void* v,
                                          int64_t num_tokens, const void* dst, int32_t flags,
                                          void* stream) {
  const char* w = "lazyattn_write";
  return guarded(w, [&] {
    lazyattn_pool_t& p = *pools().check(pool, w, "lazyattn_pool");
    const KvStoreConfig& c = p.config;
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
    const std::size_t es = static_cast<std::size_t>(size_of(c.dtype));
    check_device_pointer(k_pool, p.device, 16, w, "k_pool");
    check_device_pointer(v_pool, p.device, 16, w, "v_pool");
    check_device_pointer(k, p.device, es, w, "k");
    check_device_pointer(v, p.device, es, w, "v");
    check_device_pointer(dst, p.device, 8, w, "dst");
    cuda::DevicePool dev(c, k_pool, v_pool);
    const auto n = static_cast<std::int32_t>(num_tokens);
    const auto* page = static_cast<const std::int32_t*>(dst);
    const auto* slot = page + n;
    auto s = static_cast<cudaStream_t>(stream);
    if (rotate) {
      const auto* pos = reinterpret_cast<const std::int64_t*>(static_cast<const std::byte*>(dst) +
                                                              (2 * num_tokens * 4 + 7) / 8 * 8);
      cuda::write_tokens(dev, layer, k, v, n, page, slot, pos, rope->device_rope, s);
    } else {
      cuda::copy_tokens(dev, layer, k, v, n, page, slot, s);
    }
  });
}
