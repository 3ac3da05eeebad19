// What cuda::decode and cuda::prefill share on the host: the argument checks against the pool,
// the plan and the RoPE tables, and the kernel parameters both kernels' structs hold under the
// same names.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/support.hpp"

namespace lazyattn::cuda::detail {

// Throws (naming `where`) unless args fit the kernels, the pool, the plan (uploaded for this
// pool's page size, still current in its store where it was uploaded with one) and, with RoPE
// on, the prepared tables.
template <class Args>
void check_attention_args(const char* where, const Args& args, const DevicePool& pool,
                          const DevicePlan& plan, const DeviceRope& rope, bool prefill) {
  const AttentionParams& ap = args.params;
  ap.check(where);
  plan.check_current(where);  // uploaded with its store: none of its pages reused since
  const PoolGeometry& geo = pool.geometry();
  LAZYATTN_CHECK(ap.num_kv_heads == geo.num_kv_heads, where, ": num_kv_heads ", ap.num_kv_heads,
                 ", expected the pool's ", geo.num_kv_heads);
  LAZYATTN_CHECK(ap.head_dim == geo.head_dim, where, ": head_dim ", ap.head_dim,
                 ", expected the pool's ", geo.head_dim);
  if (pool.dtype() == DType::kFloat8E4M3) {
    LAZYATTN_CHECK(args.dtype == DType::kBFloat16 || args.dtype == DType::kFloat16, where,
                   ": dtype ", to_string(args.dtype), " over a float8_e4m3 pool, expected "
                   "bfloat16 or float16 queries and outputs");
  } else {
    LAZYATTN_CHECK(args.dtype == pool.dtype(), where, ": dtype ", to_string(args.dtype),
                   ", expected the pool's ", to_string(pool.dtype()));
  }
  check_supported(where, args.dtype, ap, prefill);
  LAZYATTN_CHECK(args.q && args.o, where, ": q and o must be device pointers, got null");
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0, where,
                 ": q must be 16-byte aligned (it is read in 16-byte vectors), its address is ",
                 reinterpret_cast<std::uintptr_t>(args.q) % 16, " mod 16");
  LAZYATTN_CHECK(plan.view().page_size == geo.page_size, where, ": plan page_size ",
                 plan.view().page_size, ", expected the pool's ", geo.page_size);
  if (args.rope) {
    const RopeView& rv = rope.view();
    rope.check_prepared(plan.view().num_requests, where);
    LAZYATTN_CHECK(rope.policy().head_dim() == ap.head_dim, where, ": rope head_dim ",
                   rope.policy().head_dim(), ", expected ", ap.head_dim);
    check_supported_rotary(where, rv.rotary_dim, rv.interleaved != 0);
  }
}

// The fields DecodeParams and PrefillParams share, from checked args.
template <class Params, class Args>
void fill_attention_params(Params& p, const Args& args, const DevicePool& pool,
                           const DevicePlan& plan, const DeviceRope& rope) {
  const AttentionParams& ap = args.params;
  const PoolGeometry& geo = pool.geometry();
  p.q = args.q;
  p.o = args.o;
  p.maybe_lse = args.maybe_lse;
  p.query_rotated = args.query_rotated ? 1 : 0;
  p.k_pool = pool.k_layer(args.layer);
  p.v_pool = pool.v_layer(args.layer);
  p.page_stride = geo.page_stride();
  p.head_stride = geo.head_stride();
  p.plan = plan.view();
  p.sched = plan.schedule();
  p.rope = rope.view();
  if (args.inputs_scaled) p.rope.query_scale = 1.0f;
  p.sm_scale_log2 = static_cast<float>(ap.scale() * 1.4426950408889634);
  p.num_qo_heads = ap.num_qo_heads;
  p.group_size = ap.group_size();
  int log2_page = 0;
  while ((1 << log2_page) < geo.page_size) ++log2_page;
  p.page_size_log2 = log2_page;
}

}  // namespace lazyattn::cuda::detail
