// What lazyattn_prefill and lazyattn_decode check and assemble before their kernels: the plan,
// pool and rope behind the handles, the caller's pointers, the plan's device image and the rope
// its launches read.
#pragma once

#include "internal.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"

namespace lazyattn::capi {

struct Launch {
  lazyattn_plan_t* plan = nullptr;
  lazyattn_pool_t* pool = nullptr;
  cuda::DevicePlan device_plan;
  const cuda::DeviceRope* rope = nullptr;
  bool apply_rope = false;
  bool query_rotated = false;
  bool inputs_scaled = false;
  std::byte* workspace = nullptr;
  DType io_dtype = DType::kBFloat16;  // q's and o's: the pool's, or an fp8 pool's caller's
  const float* scales = nullptr;      // an fp8 pool's, on the device: K's then V's
};

inline void set_up(Launch& L, lazyattn_plan plan, std::int32_t kind, std::int32_t layer,
                   const void* k_pool, const void* v_pool, const void* plan_device, void* workspace,
                   std::int32_t num_qo_heads, std::int32_t flags, const void* q, const void* o,
                   const float* maybe_lse, const char* w, bool fp8 = false,
                   std::int32_t q_dtype = 0, const float* scales = nullptr) {
  L.plan = plans().check(plan, w, "lazyattn_plan");
  L.pool = pools().check(L.plan->pool, w, "the plan's lazyattn_pool");
  ropes().check(L.plan->rope, w, "the plan's lazyattn_rope");
  lazyattn_plan_t& pl = *L.plan;
  const KvStoreConfig& c = L.pool->config;
  LAZYATTN_CHECK(pl.kind == kind, w, ": the plan is a ",
                 pl.kind == LAZYATTN_PLAN_DECODE ? "decode" : "prefill", " plan, expected a ",
                 kind == LAZYATTN_PLAN_DECODE ? "decode" : "prefill", " plan");
  LAZYATTN_CHECK(layer >= 0 && layer < c.num_layers, w, ": layer ", layer, ", expected in [0, ",
                 c.num_layers, ")");
  LAZYATTN_CHECK(
      (flags & ~(LAZYATTN_APPLY_ROPE | LAZYATTN_QUERY_ROTATED | LAZYATTN_INPUTS_SCALED)) == 0, w,
      ": flags ", flags,
      ", expected LAZYATTN_APPLY_ROPE (1) | LAZYATTN_QUERY_ROTATED (2) | LAZYATTN_INPUTS_SCALED "
      "(4)");
  LAZYATTN_CHECK(num_qo_heads == pl.num_qo_heads, w, ": num_qo_heads ", num_qo_heads,
                 ", expected the plan's ", pl.num_qo_heads);
  // fp8 pools: through lazyattn_prefill_fp8 / lazyattn_decode_fp8, with 16-bit q and o.
  const bool fp8_pool = c.dtype == DType::kFloat8E4M3;
  const char* entry = kind == LAZYATTN_PLAN_DECODE ? "decode" : "prefill";
  LAZYATTN_CHECK(fp8 == fp8_pool, w, ": a ", to_string(c.dtype), " pool, expected ",
                 fp8 ? "a float8_e4m3 pool (others: lazyattn_"
                     : "a 16-bit pool (float8_e4m3 pools: lazyattn_",
                 entry, fp8 ? ")" : "_fp8)");
  LAZYATTN_CHECK(!fp8 || q_dtype == LAZYATTN_DTYPE_BFLOAT16 || q_dtype == LAZYATTN_DTYPE_FLOAT16,
                 w, ": q_dtype ", q_dtype, ", expected 1 (float16) or 2 (bfloat16)");
  L.io_dtype = fp8 ? static_cast<DType>(q_dtype) : c.dtype;
  L.apply_rope = (flags & LAZYATTN_APPLY_ROPE) != 0;
  L.query_rotated = (flags & LAZYATTN_QUERY_ROTATED) != 0;
  L.inputs_scaled = (flags & LAZYATTN_INPUTS_SCALED) != 0;
  LAZYATTN_CHECK(L.apply_rope || !L.query_rotated, w,
                 ": LAZYATTN_QUERY_ROTATED without LAZYATTN_APPLY_ROPE, expected RoPE on (the "
                 "RoPE-off baseline takes pre-rotated queries and keys already)");
  check_plan_current(pl, w);
  const std::size_t es = static_cast<std::size_t>(size_of(L.io_dtype));
  const int dev = L.pool->device;
  if (fp8) {
    check_device_pointer(scales, dev, sizeof(float), w, "scales");
    L.scales = scales;
  }
  check_device_pointer(k_pool, dev, 16, w, "k_pool");
  check_device_pointer(v_pool, dev, 16, w, "v_pool");
  check_device_pointer(plan_device, dev, 16, w, "plan_device");
  if (pl.ws_bytes > 0) check_device_pointer(workspace, dev, 256, w, "workspace");
  check_device_pointer(q, dev, 16, w, "q");
  check_device_pointer(o, dev, es, w, "o");
  if (maybe_lse) check_device_pointer(maybe_lse, dev, sizeof(float), w, "lse");
  L.device_plan.bind(pl.packed, plan_device);
  L.rope = &pl.rope->device_rope;
  if (pl.plan_rope) {
    auto* base = static_cast<const std::byte*>(plan_device);
    pl.plan_rope->use_plan_sets(base + pl.rope_turns_offset, base + pl.rope_cs_offset,
                                pl.plan.num_requests());
    L.rope = pl.plan_rope.get();
  }
  L.workspace = static_cast<std::byte*>(workspace);
}

// The fields cuda::DecodeArgs and cuda::PrefillArgs share, from the launch's checked inputs.
template <class Args>
Args launch_args(const Launch& L, std::int32_t layer, double softmax_scale, const void* q, void* o,
                 float* maybe_lse) {
  const KvStoreConfig& c = L.pool->config;
  Args a;
  a.dtype = L.io_dtype;
  a.q = q;
  a.o = o;
  a.maybe_lse = maybe_lse;
  a.layer = layer;
  a.params = AttentionParams{L.plan->num_qo_heads, c.num_kv_heads, c.head_dim, softmax_scale, 0.0};
  a.rope = L.apply_rope;
  a.query_rotated = L.query_rotated;
  a.inputs_scaled = L.inputs_scaled;
  return a;
}

// The launch's pool over the caller's K/V (and an fp8 pool's scales: K's, then V's).
inline cuda::DevicePool launch_pool(const Launch& L, const void* k_pool, const void* v_pool) {
  const KvStoreConfig& c = L.pool->config;
  const float* v_scales =
      L.scales ? L.scales + static_cast<std::size_t>(c.num_layers) * c.num_kv_heads : nullptr;
  // (no saturation counter: the launches write no pages)
  return cuda::DevicePool(c, const_cast<void*>(k_pool), const_cast<void*>(v_pool), L.scales,
                          v_scales);
}

}  // namespace lazyattn::capi
