// lazyattn's C ABI: the prefill launches (lazyattn_prefill, lazyattn_prefill_fp8), and the
// automatic key-range splits the plans size their workspace for.
#include <algorithm>

#include "launch.cuh"
#include "lazyattn/cuda/prefill.cuh"

using namespace lazyattn;
using namespace lazyattn::capi;

namespace lazyattn::capi {
namespace {
// The plan's host-side view (nothing is read through the pointers) and the prefill arguments
// its launches share.
cuda::PrefillArgs host_prefill_args(const lazyattn_plan_t& plan, cuda::DevicePlan& dp) {
  dp.bind(plan.packed, nullptr);
  cuda::PrefillArgs args;
  args.dtype = plan.pool->config.dtype;
  args.params = AttentionParams{plan.num_qo_heads, plan.pool->config.num_kv_heads,
                                plan.pool->config.head_dim, 0.0, 0.0};
  return args;
}
}  // namespace

std::int64_t prefill_tile_elems(const lazyattn_plan_t& plan) {
  cuda::DevicePlan dp;
  cuda::PrefillArgs args = host_prefill_args(plan, dp);
  const cuda::DeviceRope& rope = plan.plan_rope ? *plan.plan_rope : plan.rope->device_rope;
  const DType kv = plan.pool->config.dtype;
  if (cuda::wgmma_prefill_mismatch(args, dp, rope, kv)) return 0;
  return cuda::prefill_tile_elems(args, dp, rope, kv);
}

int prefill_max_auto_splits(const lazyattn_plan_t& plan) {
  cuda::DevicePlan dp;
  cuda::PrefillArgs args = host_prefill_args(plan, dp);
  const cuda::DeviceRope& rope = plan.plan_rope ? *plan.plan_rope : plan.rope->device_rope;
  if (plan.schedule.qtile_request.empty()) return 1;
  const DType kv = plan.pool->config.dtype;
  args.rope = true;
  const int with_rope = cuda::prefill_auto_splits(args, dp, rope, kv);
  args.rope = false;
  return std::max(with_rope, cuda::prefill_auto_splits(args, dp, rope, kv));
}
}  // namespace lazyattn::capi

namespace {

// Both entry points (fp8: lazyattn_prefill_fp8, with the q dtype and the pool's device scales).
lazyattn_status prefill(const char* w, bool fp8, lazyattn_plan plan, int32_t layer,
                        const void* k_pool, const void* v_pool, const float* scales,
                        const void* plan_device, void* workspace, int32_t num_qo_heads,
                        double softmax_scale, int32_t flags, int32_t q_dtype, const void* q,
                        void* o, float* maybe_lse, void* stream) {
  return guarded(w, [&] {
    Launch L;
    set_up(L, plan, LAZYATTN_PLAN_PREFILL, layer, k_pool, v_pool, plan_device, workspace,
           num_qo_heads, flags, q, o, maybe_lse, w, fp8, q_dtype, scales);
    DeviceScope scope(L.pool->device);
    const cuda::DevicePool pool = launch_pool(L, k_pool, v_pool);
    auto args = launch_args<cuda::PrefillArgs>(L, layer, softmax_scale, q, o, maybe_lse);
    args.kv_splits = L.plan->kv_splits;
    cuda::PrefillScratch scratch;
    if (L.plan->ws_bytes > 0) {
      scratch.partial_lse = reinterpret_cast<float*>(L.workspace + L.plan->ws_lse);
      scratch.partial_o = reinterpret_cast<float*>(L.workspace + L.plan->ws_o);
      scratch.max_splits = L.plan->kv_splits_room;
      if (L.plan->ws_k_elems > 0) {
        scratch.tiles = L.workspace + L.plan->ws_k;
        scratch.tiles_elems = L.plan->ws_k_elems;
      }
    }
    cuda::prefill(args, pool, L.device_plan, *L.rope, scratch, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace

extern "C" lazyattn_status lazyattn_prefill(lazyattn_plan plan, int32_t layer, const void* k_pool,
                                            const void* v_pool, const void* plan_device,
                                            void* workspace, int32_t num_qo_heads,
                                            double softmax_scale, int32_t flags, const void* q,
                                            void* o, float* maybe_lse, void* stream) {
  return prefill("lazyattn_prefill", false, plan, layer, k_pool, v_pool, nullptr, plan_device,
                 workspace, num_qo_heads, softmax_scale, flags, 0, q, o, maybe_lse, stream);
}

extern "C" lazyattn_status lazyattn_prefill_fp8(lazyattn_plan plan, int32_t layer,
                                                const void* k_pool, const void* v_pool,
                                                const float* scales, const void* plan_device,
                                                void* workspace, int32_t num_qo_heads,
                                                double softmax_scale, int32_t flags,
                                                int32_t q_dtype, const void* q, void* o,
                                                float* maybe_lse, void* stream) {
  return prefill("lazyattn_prefill_fp8", true, plan, layer, k_pool, v_pool, scales, plan_device,
                 workspace, num_qo_heads, softmax_scale, flags, q_dtype, q, o, maybe_lse, stream);
}
