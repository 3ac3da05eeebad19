// lazyattn's C ABI: the decode launch (lazyattn_decode), and the decode kernels' occupancy the
// plans' split heuristic reads.
#include "launch.cuh"
#include "lazyattn/cuda/decode.cuh"

using namespace lazyattn;
using namespace lazyattn::capi;

namespace lazyattn::capi {
int decode_ctas_per_sm(DType dtype, int head_dim) {
  return cuda::decode_ctas_per_sm(dtype, head_dim);
}
}  // namespace lazyattn::capi

extern "C" lazyattn_status lazyattn_decode(lazyattn_plan plan, int32_t layer, const void* k_pool,
                                           const void* v_pool, const void* plan_device,
                                           void* workspace, int32_t num_qo_heads,
                                           double softmax_scale, int32_t flags, const void* q,
                                           void* o, float* maybe_lse, void* stream) {
  const char* w = "lazyattn_decode";
  return guarded(w, [&] {
    Launch L;
    set_up(L, plan, LAZYATTN_PLAN_DECODE, layer, k_pool, v_pool, plan_device, workspace,
           num_qo_heads, flags, q, o, maybe_lse, w);
    DeviceScope scope(L.pool->device);
    const cuda::DevicePool pool(L.pool->config, const_cast<void*>(k_pool),
                                const_cast<void*>(v_pool));
    auto args = launch_args<cuda::DecodeArgs>(L, layer, softmax_scale, q, o, maybe_lse);
    cuda::DecodeScratch scratch;
    if (L.plan->ws_bytes > 0) {
      scratch.split_counters = reinterpret_cast<int*>(L.workspace + L.plan->ws_counters);
      scratch.partial_lse = reinterpret_cast<float*>(L.workspace + L.plan->ws_lse);
      scratch.partial_o = reinterpret_cast<float*>(L.workspace + L.plan->ws_o);
    }
    cuda::decode(args, pool, L.device_plan, *L.rope, scratch, static_cast<cudaStream_t>(stream));
  });
}
