// lazyattn's C ABI: the decode launches (lazyattn_decode, lazyattn_decode_fp8), and the decode kernels' occupancy the
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

namespace {

// Both entry points (fp8: lazyattn_decode_fp8, with the q dtype and the pool's device scales).
lazyattn_status decode(const char* w, bool fp8, lazyattn_plan plan, int32_t layer,
                       const void* k_pool, const void* v_pool, const float* scales,
                       const void* plan_device, void* workspace, int32_t num_qo_heads,
                       double softmax_scale, int32_t flags, int32_t q_dtype, const void* q, void* o,
                       float* maybe_lse, void* stream) {
  return guarded(w, [&] {
    Launch L;
    set_up(L, plan, LAZYATTN_PLAN_DECODE, layer, k_pool, v_pool, plan_device, workspace,
           num_qo_heads, flags, q, o, maybe_lse, w, fp8, q_dtype, scales);
    DeviceScope scope(L.pool->device);
    const cuda::DevicePool pool = launch_pool(L, k_pool, v_pool);
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

}  // namespace

extern "C" lazyattn_status lazyattn_decode(lazyattn_plan plan, int32_t layer, const void* k_pool,
                                           const void* v_pool, const void* plan_device,
                                           void* workspace, int32_t num_qo_heads,
                                           double softmax_scale, int32_t flags, const void* q,
                                           void* o, float* maybe_lse, void* stream) {
  return decode("lazyattn_decode", false, plan, layer, k_pool, v_pool, nullptr, plan_device,
                workspace, num_qo_heads, softmax_scale, flags, 0, q, o, maybe_lse, stream);
}

extern "C" lazyattn_status lazyattn_decode_fp8(lazyattn_plan plan, int32_t layer,
                                               const void* k_pool, const void* v_pool,
                                               const float* scales, const void* plan_device,
                                               void* workspace, int32_t num_qo_heads,
                                               double softmax_scale, int32_t flags,
                                               int32_t q_dtype, const void* q, void* o,
                                               float* maybe_lse, void* stream) {
  return decode("lazyattn_decode_fp8", true, plan, layer, k_pool, v_pool, scales, plan_device,
                workspace, num_qo_heads, softmax_scale, flags, q_dtype, q, o, maybe_lse, stream);
}
