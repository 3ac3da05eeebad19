// The decode's host side: arguments, the split-KV scratch, checks and the launch (cuda::decode),
// and the occupancy the schedule plans with (decode_ctas_per_sm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/decode/kernel.cuh"
#include "lazyattn/cuda/decode/params.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/launch_common.cuh"
#include "lazyattn/cuda/support.hpp"
#include "lazyattn/cuda/tma.cuh"

namespace lazyattn::cuda {

// The split-KV scratch as the kernel reads it, in memory the caller owns: partial_o
// [num_partials, num_qo_heads, head_dim] and partial_lse [num_partials, num_qo_heads] floats,
// split_counters [num_requests, num_kv_heads] ints, zero before the first launch (each launch
// leaves them at zero). Unused (may be null) when the schedule splits no request.
struct DecodeScratch {
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  int* split_counters = nullptr;
};

// Scratch the split-KV path writes partial states into; grows on demand, reused across calls.
struct DecodeWorkspace {
  DeviceBuffer<float> partial_o;
  DeviceBuffer<float> partial_lse;
  DeviceBuffer<int> split_counters;  // kept at zero by the kernel between launches

  void reserve(std::size_t partials, std::size_t counters, cudaStream_t stream) {
    partial_o.reserve(partials);
    if (counters > split_counters.size()) {
      split_counters = DeviceBuffer<int>(counters);
      LAZYATTN_CUDA_CHECK(cudaMemsetAsync(split_counters.data(), 0, split_counters.bytes(), stream));
    }
  }
};

struct DecodeArgs {
  DType dtype = DType::kBFloat16;
  const void* q = nullptr;  // [num_requests, num_qo_heads, head_dim], dtype
  void* o = nullptr;        // [num_requests, num_qo_heads, head_dim], dtype
  float* maybe_lse = nullptr;  // [num_requests, num_qo_heads]
  int layer = 0;
  AttentionParams params;
  bool rope = true;  // false: the RoPE-off baseline (keys and queries pre-rotated by the caller)
  // true: q is already rotated at its own position (a model's q); the kernel applies R(-s_j) per
  // local segment and R(-n) per raw key instead of R(m - s_j), R(m - n).
  bool query_rotated = false;
  // true: q and the keys carry the schedule's attention factor on their rotary dims already (as a
  // model's own rotation leaves them: YaRN, LongRoPE), so the query is not scaled by it again.
  bool inputs_scaled = false;
  // Opt-in: raw-form keys of a 16-bit pool rotated in packed 16-bit math (two pairs per four
  // HMUL2/HFMA2, angles rounded to the keys' type) instead of fp32. On an H200 it was 4-6% faster
  // at batch >= 16 and 3-12% slower at batch 1, and its rounding is 1.28x coarser
  // (docs/06-cuda.md). Built for bfloat16 pools at head dims 64 and 128 only (others are refused
  // by name). No effect on fp8 pools (always packed) or on plans without raw-form segments.
  bool packed_raw_rotation = false;
  // Programmatic dependent launch (on by default): the kernel may start while the previous kernel
  // in the stream is still running, and reads the plan, its schedule and the RoPE tables before
  // that kernel has finished (so that kernel must not write them; DevicePlan::upload's and
  // DeviceRope's copies are fine: a copy between two kernels orders them as usual); q, the K/V
  // pools, the workspace and the outputs are touched only after it has completed. false: a
  // plain launch.
  bool pdl = true;
};

// Launches the decode for one layer: every request of the plan has one query, the split-KV
// scratch is the caller's (sized for the plan's schedule). No host synchronisation; capturable
// into a CUDA graph.
inline void decode(const DecodeArgs& args, const DevicePool& pool, const DevicePlan& plan,
                   const DeviceRope& rope, const DecodeScratch& scratch,
                   cudaStream_t stream = nullptr) {
  const char* w = "cuda::decode";
  detail::check_attention_args(w, args, pool, plan, rope, /*prefill=*/false);
  const AttentionParams& ap = args.params;
  const PlanView& pv = plan.view();
  LAZYATTN_CHECK(pv.num_queries == pv.num_requests, w, ": ", pv.num_queries, " queries for ",
                 pv.num_requests, " requests, expected one query per request");
  LAZYATTN_CHECK(plan.schedule().tile_keys == detail::kDecodeTileKeys, w, ": schedule tile_keys ",
                 plan.schedule().tile_keys, ", expected ", detail::kDecodeTileKeys,
                 " (upload the plan with upload_for_decode)");
  LAZYATTN_CHECK(plan.schedule().rows_per_qtile == 0, w,
                 ": the plan was uploaded with a prefill schedule (rows_per_qtile ",
                 plan.schedule().rows_per_qtile, "), expected a decode one (upload_for_decode)");
  if (args.rope)
    LAZYATTN_CHECK(rope.view().offset_rows >= detail::kDecodeTileKeys, w,
                   ": rope offset table of ", rope.view().offset_rows, " rows, expected >= ",
                   detail::kDecodeTileKeys,
                   " (raw-form keys are rotated by their offsets in a tile; DeviceRope's default)");
  const DecodeScheduleView& sv = plan.schedule();
  if (sv.num_work == 0) return;
  // The fused merge stages [splits, group] lse values in the pipeline's shared memory (the
  // smallest pipeline, head dim 64, holds 48 KiB).
  LAZYATTN_CHECK(static_cast<std::int64_t>(sv.max_splits) * ap.group_size() * 4 + 128 <=
                     detail::DecodeShape<64>::kPipeBytes,
                 w, ": ", sv.max_splits, " splits of a GQA group of ", ap.group_size(),
                 " exceed the merge's shared memory, expected fewer splits");
  LAZYATTN_CHECK(sv.num_partials == 0 ||
                     (scratch.partial_o && scratch.partial_lse && scratch.split_counters),
                 w, ": the schedule splits requests into ", sv.num_partials,
                 " partial states, but the split-KV scratch is null");

  DecodeParams p;
  detail::fill_attention_params(p, args, pool, plan, rope);
  p.partial_o = scratch.partial_o;
  p.partial_lse = scratch.partial_lse;
  p.split_counters = scratch.split_counters;
  p.num_kv_heads = ap.num_kv_heads;
  const bool fp8 = pool.dtype() == DType::kFloat8E4M3;
  // (Built for bfloat16 pools at head dims 64 and 128 alone: each build is compile time.)
  LAZYATTN_CHECK(!args.packed_raw_rotation || fp8 || !args.rope || !plan.has_raw_segments() ||
                     (args.dtype == DType::kBFloat16 && ap.head_dim <= 128),
                 w, ": packed_raw_rotation over a ", to_string(args.dtype), " pool at head_dim ",
                 ap.head_dim,
                 ", expected bfloat16 at head dim 64 or 128 (the packed builds)");
  if (fp8) {
    const bool raw = args.rope && plan.has_raw_segments();
    // Raw-form keys (decode/scores.cuh, scores_raw_fp8): built for bfloat16 queries alone (each
    // build is compile time; float16 queries over raw fp8 keys have no build yet).
    LAZYATTN_CHECK(!raw || args.dtype == DType::kBFloat16, w,
                   ": raw-form segments over a float8_e4m3 pool with ", to_string(args.dtype),
                   " queries, expected bfloat16 (the raw-form fp8 decode's only build)");
    p.k_scale = pool.k_scales(args.layer);
    p.v_scale = pool.v_scales(args.layer);
  }

  // The builds that read whole tiles by the TMA (detail::decode_tma: fp8 pools, whose code pairs
  // the maps see as 16-bit columns) take maps of this layer's pages; pages under 8 keys, and
  // drivers without tensor maps, gather every tile with cp.async (kv_tma = 0).
  DecodeTmaParams pt;
  if (detail::decode_tma(fp8, ap.head_dim)) {
    static_cast<DecodeParams&>(pt) = p;
    const PoolGeometry& geo = pool.geometry();
    const int tile_cols = ap.head_dim / 2;
    auto maps = [&](bool run) {
      return detail::encode_kv_page_maps(run ? &pt.k_run_map : &pt.k_map,
                                         run ? &pt.v_run_map : &pt.v_map, p.k_pool, p.v_pool,
                                         tile_cols, geo.page_size, geo.num_kv_heads,
                                         geo.num_pages, run);
    };
    pt.kv_tma = maps(false) ? 1 : 0;
    pt.kv_tma_runs = pt.kv_tma && geo.page_size < 64 && maps(true) ? 1 : 0;
  }

  dispatch_dtype(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(ap.head_dim, w, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        // A build's parameters: DecodeTmaParams (pt) for the TMA builds, else p.
        auto launch_with = [&](auto kernel, int smem_bytes, const auto& params) {
          prepare_kernel(kernel, smem_bytes);
          dim3 grid(static_cast<unsigned>(sv.num_work), static_cast<unsigned>(ap.num_kv_heads));
          if (args.pdl) {
            launch_overlapping(kernel, grid, dim3(detail::kDecodeThreads), smem_bytes, stream,
                               params);
          } else {
            kernel<<<grid, detail::kDecodeThreads, smem_bytes, stream>>>(params);
          }
          LAZYATTN_CUDA_CHECK_LAUNCH();
        };
        auto launch = [&](auto kernel, int smem_bytes) {
          if constexpr (std::is_same_v<decltype(kernel), void (*)(DecodeTmaParams)>)
            launch_with(kernel, smem_bytes, pt);
          else
            launch_with(kernel, smem_bytes, p);
        };
        constexpr int kSmem = detail::DecodeShape<D>::kSmemBytes;
        if (fp8) {
          if (!args.rope) {
            launch(detail::decode_kernel<T, D, false, false, true>, kSmem);
          } else if (plan.has_raw_segments()) {
            if constexpr (std::is_same_v<T, __nv_bfloat16>)
              launch(detail::decode_kernel<T, D, true, true, true>, kSmem);
          } else {
            launch(detail::decode_kernel<T, D, true, false, true>, kSmem);
          }
          return;
        }
        if (!args.rope) {
          launch(detail::decode_kernel<T, D, false, false>, kSmem);
        } else if (plan.has_raw_segments() && args.packed_raw_rotation) {
          if constexpr (std::is_same_v<T, __nv_bfloat16> && D <= 128)
            launch(detail::decode_kernel<T, D, true, true, false, true>, kSmem);
        } else if (plan.has_raw_segments()) {
          launch(detail::decode_kernel<T, D, true, true>, kSmem);
        } else {
          launch(detail::decode_kernel<T, D, true, false>, kSmem);
        }
      });
    }
  });
}

// As above with scratch from a workspace that grows to the plan's schedule (before a graph
// capture, run once uncaptured so that it has grown).
inline void decode(const DecodeArgs& args, const DevicePool& pool, const DevicePlan& plan,
                   const DeviceRope& rope, DecodeWorkspace& ws, cudaStream_t stream = nullptr) {
  const DecodeScheduleView& sv = plan.schedule();
  const AttentionParams& ap = args.params;
  if (sv.num_partials > 0 && sv.num_work > 0) {
    ap.check("cuda::decode");
    ws.reserve(static_cast<std::size_t>(sv.num_partials) * ap.num_qo_heads * ap.head_dim,
               static_cast<std::size_t>(plan.view().num_requests) * ap.num_kv_heads, stream);
    ws.partial_lse.reserve(static_cast<std::size_t>(sv.num_partials) * ap.num_qo_heads);
  }
  decode(args, pool, plan, rope,
         DecodeScratch{ws.partial_o.data(), ws.partial_lse.data(), ws.split_counters.data()},
         stream);
}

// How many decode CTAs fit on one multiprocessor for this element type and head dim (the
// schedule's ctas_per_sm): asks the occupancy calculator about the RoPE kernel.
inline int decode_ctas_per_sm(DType dtype, int head_dim) {
  int blocks = 0;
  dispatch_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(head_dim, "cuda::decode_ctas_per_sm", [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        auto kernel = detail::decode_kernel<T, D, true>;
        prepare_kernel(kernel, detail::DecodeShape<D>::kSmemBytes);
        LAZYATTN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &blocks, kernel, detail::kDecodeThreads, detail::DecodeShape<D>::kSmemBytes));
      });
    }
  });
  LAZYATTN_CHECK(blocks >= 1, "cuda::decode_ctas_per_sm: ", to_string(dtype), " head_dim ",
                 head_dim, " has no resident CTA, expected bfloat16 or float16");
  return blocks;
}

// The decode's schedule for `plan` on the current GPU: the split-KV work list sized by its SM
// count and the decode kernel's occupancy for this element type and head dim. `opt` carries
// forced or kept splits; its num_sms and ctas_per_sm are this GPU's.
inline DecodeSchedule decode_schedule(const Plan& plan, const AttentionParams& params, DType dtype,
                                      ScheduleOptions opt = {}) {
  const char* w = "cuda::decode_schedule";
  params.check(w);
  check_supported(w, dtype, params, /*prefill=*/false);
  opt.tile_keys = detail::kDecodeTileKeys;
  opt.num_sms = device_sm_count();
  opt.ctas_per_sm = decode_ctas_per_sm(dtype, params.head_dim);
  return make_decode_schedule(plan, params.num_kv_heads, opt);
}

// Uploads `plan` for cuda::decode with `args`: the plan with the schedule made for this GPU and
// kernel (decode_schedule).
inline void upload_for_decode(DevicePlan& device_plan, const Plan& plan, const DecodeArgs& args,
                              cudaStream_t stream = nullptr) {
  device_plan.upload(plan, decode_schedule(plan, args.params, args.dtype), stream);
}
// The same, with the plan checked in `store` at every launch (DevicePlan::check_current).
inline void upload_for_decode(DevicePlan& device_plan, const KvBookkeeping& store, const Plan& plan,
                              const DecodeArgs& args, cudaStream_t stream = nullptr) {
  device_plan.upload(store, plan, decode_schedule(plan, args.params, args.dtype), stream);
}

}  // namespace lazyattn::cuda
