// lazyattn's C ABI: the prefill launch (lazyattn_prefill), and the automatic key-range splits the
// plans size their workspace for.
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

std::int64_t prefill_rotated_k_elems(const lazyattn_plan_t& plan) {
  cuda::DevicePlan dp;
  cuda::PrefillArgs args = host_prefill_args(plan, dp);
  const cuda::DeviceRope& rope = plan.plan_rope ? *plan.plan_rope : plan.rope->device_rope;
  if (cuda::wgmma_prefill_mismatch(args, dp, rope)) return 0;
  return cuda::prefill_rotated_k_elems(args, dp);
}

int prefill_max_auto_splits(const lazyattn_plan_t& plan) {
  cuda::DevicePlan dp;
  cuda::PrefillArgs args = host_prefill_args(plan, dp);
  const cuda::DeviceRope& rope = plan.plan_rope ? *plan.plan_rope : plan.rope->device_rope;
  if (plan.schedule.qtile_request.empty()) return 1;
  args.rope = true;
  const int with_rope = cuda::prefill_auto_splits(args, dp, rope);
  args.rope = false;
  return std::max(with_rope, cuda::prefill_auto_splits(args, dp, rope));
}
}  // namespace lazyattn::capi

extern "C" lazyattn_status lazyattn_prefill(lazyattn_plan plan, int32_t layer, const void* k_pool,
                                            const void* v_pool, const void* plan_device,
                                            void* workspace, int32_t num_qo_heads,
                                            double softmax_scale, int32_t flags, const void* q,
                                            void* o, float* maybe_lse, void* stream) {
  const char* w = "lazyattn_prefill";
  return guarded(w, [&] {
    Launch L;
    set_up(L, plan, LAZYATTN_PLAN_PREFILL, layer, k_pool, v_pool, plan_device, workspace,
           num_qo_heads, flags, q, o, maybe_lse, w);
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
        scratch.rotated_k = L.workspace + L.plan->ws_k;
        scratch.rotated_k_elems = L.plan->ws_k_elems;
      }
    }
    cuda::prefill(args, pool, L.device_plan, *L.rope, scratch, static_cast<cudaStream_t>(stream));
  });
}
