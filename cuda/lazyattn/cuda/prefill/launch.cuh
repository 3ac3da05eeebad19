// The prefill's host side: arguments, the kernel choice (the Hopper kernel where it applies, the
// mma.sync kernel otherwise), key-range splits and their scratch, checks, and the launch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/launch_common.cuh"
#include "lazyattn/cuda/support.hpp"
#include "lazyattn/cuda/tma.cuh"
#include "lazyattn/cuda/prefill/fp8_tiles.cuh"
#include "lazyattn/cuda/prefill/merge.cuh"
#include "lazyattn/cuda/prefill/mma_sync.cuh"
#include "lazyattn/cuda/prefill/params.cuh"
#include "lazyattn/cuda/prefill/key_pass.cuh"
#include "lazyattn/cuda/prefill/wgmma_ws.cuh"

namespace lazyattn::cuda {

// Partial outputs of split-KV prefill, and the Hopper kernel's tile scratch (raw-form keys
// rotated, or fp8 K/V dequantized); grows on demand (size it once before graph capture).
struct PrefillWorkspace {
  DeviceBuffer<float> partial_o;
  DeviceBuffer<float> partial_lse;
  DeviceBuffer<std::uint16_t> tiles;
};

// Scratch in memory the caller owns. Split-KV, with room for `max_splits` splits: partial_o
// [max_splits][num_queries * num_qo_heads][head_dim] and partial_lse [max_splits][num_queries *
// num_qo_heads] floats; max_splits 0 (or 1): no splits. tiles: room for prefill_tile_elems
// 16-bit elements, 16-byte aligned (the Hopper kernel over raw-form keys, which without it take
// the mma.sync kernel, or over an fp8 pool, which without it is refused).
struct PrefillScratch {
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  int max_splits = 0;
  void* tiles = nullptr;
  std::int64_t tiles_elems = 0;
};

// The prefill kernels: the FlashAttention-2-style mma.sync kernel (every head dim, form and
// rotary layout, any architecture from sm_80) and the Hopper kernel (warpgroup MMA, a loading
// warpgroup and two computing ones: head dims 64, 128 and 256, every form and rotary layout).
// Value 2 was a Hopper kernel without the loading warpgroup, retired as slower.
enum class PrefillKernel : std::uint8_t { kAuto = 0, kMmaSync = 1, kWgmmaWs = 3 };

inline const char* to_string(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kAuto: return "auto";
    case PrefillKernel::kMmaSync: return "mma_sync";
    case PrefillKernel::kWgmmaWs: return "wgmma_ws";
  }
  return "?";
}

struct PrefillArgs {
  DType dtype = DType::kBFloat16;
  const void* q = nullptr;     // [num_queries, num_qo_heads, head_dim], dtype
  void* o = nullptr;           // [num_queries, num_qo_heads, head_dim], dtype
  float* maybe_lse = nullptr;  // [num_queries, num_qo_heads]
  int layer = 0;
  AttentionParams params;
  bool rope = true;  // false: the RoPE-off baseline (queries and keys pre-rotated)
  // true: each query row is already rotated at its own position (a model's q); the kernels
  // apply R(-s_j) per local segment and R(-n) per raw key instead of R(m_i - s_j), R(m_i - n).
  bool query_rotated = false;
  // true: q and the keys carry the schedule's attention factor on their rotary dims already (a
  // model's own rotation: YaRN, LongRoPE), so the query is not scaled by it again.
  bool inputs_scaled = false;
  // Key-range splits per query tile: 0 picks (enough CTAs to fill the GPU when the query tiles
  // alone do not), 1 none, N forces N. Splits need a workspace.
  int kv_splits = 0;
  // Which kernel: kAuto takes the Hopper kernel (kWgmmaWs) where it applies (head dim 64, 128 or
  // 256; a plan with raw-form segments also needs the rotated-K scratch, which a PrefillWorkspace
  // provides) and the mma.sync kernel otherwise; kWgmmaWs insists (and throws, naming what does
  // not fit), kMmaSync forces the FlashAttention-2-style kernel.
  PrefillKernel kernel = PrefillKernel::kAuto;
};

namespace detail {
// Whether `rope` rotates every one of head_dim's dims in the rotate-half layout: the Hopper
// kernel's builds with compile-time tables; interleaved pairs and partial rotary take the builds
// that read the layout at run time (kAnyRotary).
inline bool rotate_half_every_dim(const DeviceRope& rope, int head_dim) {
  return rope.view().rotary_dim == head_dim && rope.view().interleaved == 0;
}
// Whether a pass before the Hopper kernel positions every K tile of `plan` with `args` and
// `rope`, so that the kernel runs its one-segment build at segment start 0: RoPE on, and raw-form
// segments, or a request of more than one segment over an fp8 pool (its dequantizing pass reads
// and writes every tile anyway: prefill/fp8_tiles.cuh) or, over a 16-bit pool (the key pass,
// KvTiles::kPositionedK), at head dims 64 and 256 or at 128 in any rotary layout but rotate-half
// over every dim. (Local-form requests of one segment run at RoPE off's speed without it; over
// segments at head dim 128 in the rotate-half layout the query's rebuild in registers costs what
// the key pass does and needs no scratch: docs/performance.md.)
inline bool positioned_keys(const PrefillArgs& args, const DevicePlan& plan, const DeviceRope& rope,
                            DType kv_dtype) {
  if (!args.rope) return false;
  if (plan.has_raw_segments()) return true;
  if (plan.single_segment_requests()) return false;
  const int d = args.params.head_dim;
  return kv_dtype == DType::kFloat8E4M3 || d != 128 || !rotate_half_every_dim(rope, d);
}
// Whether the Hopper kernel cannot run without its tile scratch: over an fp8 pool (dequantized
// there), or over raw-form keys with RoPE (positioned there). Local-form plans that would take
// positioned K run without it, slower.
inline bool tiles_required(const PrefillArgs& args, const DevicePlan& plan, DType kv_dtype) {
  return kv_dtype == DType::kFloat8E4M3 || (args.rope && plan.has_raw_segments());
}
}  // namespace detail

// 16-bit elements of tile scratch the Hopper kernel takes for `plan` with `args` and `rope` over
// a pool of `kv_dtype`: [64][head_dim] per key tile of the schedule and KV head, for K where the
// key pass positions it (detail::positioned_keys), for K and V (K's tiles, then V's) over an fp8
// pool (dequantized by its pass); else 0. Local-form plans run without it too, slower (each
// segment's query rebuilt in the kernel); raw-form and fp8 ones need it.
inline std::int64_t prefill_tile_elems(const PrefillArgs& args, const DevicePlan& plan,
                                       const DeviceRope& rope, DType kv_dtype) {
  const bool fp8 = kv_dtype == DType::kFloat8E4M3;
  if (!fp8 && !detail::positioned_keys(args, plan, rope, kv_dtype)) return 0;
  std::int64_t n = plan.schedule().num_tiles;
  for (std::int64_t f : {std::int64_t{args.params.num_kv_heads}, std::int64_t{detail::kTileKeys},
                         std::int64_t{args.params.head_dim}, std::int64_t{fp8 ? 2 : 1}})
    LAZYATTN_CHECK(f >= 0 && !__builtin_mul_overflow(n, f, &n), "cuda::prefill_tile_elems: ",
                   plan.schedule().num_tiles, " tiles x ", args.params.num_kv_heads,
                   " KV heads x 64 x head_dim ", args.params.head_dim, fp8 ? " x 2 (K, V)" : "",
                   " overflows int64");
  return n;
}

// Why the wgmma kernel cannot take this prefill over a pool of `kv_dtype`, or nullptr when it
// can. tile_room: the 16-bit elements of tile scratch at hand (a workspace grows to what it
// needs: -1).
inline const char* wgmma_prefill_mismatch(const PrefillArgs& args, const DevicePlan& plan,
                                          const DeviceRope& rope, DType kv_dtype,
                                          std::int64_t tile_room = -1) {
  if (!detail::wgmma_prefill_head_dim(args.params.head_dim)) return "head_dim is not 64, 128 or 256";
  if (detail::tiles_required(args, plan, kv_dtype) && tile_room >= 0 &&
      tile_room < prefill_tile_elems(args, plan, rope, kv_dtype))
    return kv_dtype == DType::kFloat8E4M3
               ? "the pool is float8_e4m3 and there is no tile scratch to dequantize it into "
                 "(PrefillScratch::tiles of prefill_tile_elems, or a PrefillWorkspace)"
               : "the plan has raw-form segments and no tile scratch to rotate them into "
                 "(PrefillScratch::tiles of prefill_tile_elems, or a PrefillWorkspace)";
  return nullptr;
}

// The prefill's schedule for `plan`: the key tiles of every request and its 128-row query tiles
// of (query, head-of-group) pairs.
inline DecodeSchedule prefill_schedule(const Plan& plan, const AttentionParams& params) {
  const char* w = "cuda::prefill_schedule";
  params.check(w);
  LAZYATTN_CHECK(supports_prefill_group(params.group_size()), w, ": GQA group size ",
                 params.group_size(), ", expected a divisor of ", kPrefillTileRows);
  return make_prefill_schedule(plan, params.num_kv_heads, params.group_size(), kPrefillTileRows);
}

// Uploads `plan` for cuda::prefill with `args` (prefill_schedule).
inline void upload_for_prefill(DevicePlan& device_plan, const Plan& plan, const PrefillArgs& args,
                               cudaStream_t stream = nullptr) {
  device_plan.upload(plan, prefill_schedule(plan, args.params), stream);
}
// The same, with the plan checked in `store` at every launch (DevicePlan::check_current).
inline void upload_for_prefill(DevicePlan& device_plan, const KvBookkeeping& store,
                               const Plan& plan, const PrefillArgs& args,
                               cudaStream_t stream = nullptr) {
  device_plan.upload(store, plan, prefill_schedule(plan, args.params), stream);
}

// The kernel prefill() launches for these arguments over a pool of `kv_dtype` (kAuto resolved;
// throws where kWgmmaWs is asked for and does not apply, and for an fp8 pool the Hopper kernel
// cannot take: the mma.sync kernel does not read fp8 pools).
inline PrefillKernel resolve_prefill_kernel(const PrefillArgs& args, const DevicePlan& plan,
                                            const DeviceRope& rope, DType kv_dtype,
                                            std::int64_t tile_room = -1) {
  const char* mismatch = wgmma_prefill_mismatch(args, plan, rope, kv_dtype, tile_room);
  if (kv_dtype == DType::kFloat8E4M3) {
    LAZYATTN_CHECK(args.kernel != PrefillKernel::kMmaSync,
                   "cuda::prefill: kernel = mma_sync over a float8_e4m3 pool, expected auto or "
                   "wgmma_ws (only the Hopper kernel reads fp8 pools)");
    LAZYATTN_CHECK(!mismatch, "cuda::prefill: a float8_e4m3 pool needs the Hopper kernel, but ",
                   mismatch ? mismatch : "", " (head_dim ", args.params.head_dim, ")");
  }
  switch (args.kernel) {
    case PrefillKernel::kMmaSync:
      return PrefillKernel::kMmaSync;
    case PrefillKernel::kWgmmaWs:
      LAZYATTN_CHECK(!mismatch, "cuda::prefill: kernel = ", to_string(args.kernel), ", but ",
                     mismatch ? mismatch : "", " (head_dim ", args.params.head_dim,
                     ", rotary_dim ", rope.view().rotary_dim,
                     rope.view().interleaved ? " interleaved" : "", ")");
      return args.kernel;
    case PrefillKernel::kAuto:
      return mismatch ? PrefillKernel::kMmaSync : PrefillKernel::kWgmmaWs;
  }
  ::lazyattn::detail::throw_error("cuda::prefill: kernel ", static_cast<int>(args.kernel),
                      ", expected auto (0), mma_sync (1) or wgmma_ws (3)");
}

// The key-range splits per query tile that kv_splits = 0 picks: enough CTAs for one full wave,
// each split at least 4 key tiles, at most 16 (the GPU's SM count is read each call).
inline int prefill_auto_splits(const PrefillArgs& args, const DevicePlan& plan,
                               const DeviceRope& rope, DType kv_dtype) {
  const PrefillKernel chosen = resolve_prefill_kernel(args, plan, rope, kv_dtype);
  const bool wgmma = chosen == PrefillKernel::kWgmmaWs;
  const DecodeScheduleView& sv = plan.schedule();
  const std::int64_t ctas =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(sv.num_qtiles) * args.params.num_kv_heads);
  const std::int64_t capacity =
      std::int64_t{device_sm_count()} * (args.params.head_dim <= 128 && !wgmma ? 2 : 1);
  const std::int64_t tiles = sv.num_tiles / std::max(1, plan.view().num_requests);
  return static_cast<int>(std::clamp<std::int64_t>(std::min(capacity / ctas, tiles / 4), 1, 16));
}

// Launches the prefill for one layer over a plan uploaded with upload_for_prefill. The K/V of
// the new tail tokens must already be in their pages (write_tokens). No host synchronisation.
// Query tiles too few to fill the GPU split their key range (args.kv_splits; automatic splits
// take at most the scratch's max_splits).
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, const PrefillScratch& scratch,
                    cudaStream_t stream = nullptr) {
  const char* w = "cuda::prefill";
  detail::check_attention_args(w, args, pool, plan, rope, /*prefill=*/true);
  const AttentionParams& ap = args.params;
  LAZYATTN_CHECK(args.kv_splits >= 0 && args.kv_splits <= 64, w, ": kv_splits ", args.kv_splits,
                 ", expected 0 (automatic) to 64");
  LAZYATTN_CHECK(args.kv_splits <= 1 || args.kv_splits <= scratch.max_splits, w,
                 ": kv_splits ", args.kv_splits, " needs scratch for as many splits, got room for ",
                 scratch.max_splits);
  LAZYATTN_CHECK(scratch.max_splits <= 1 || (scratch.partial_o && scratch.partial_lse), w,
                 ": scratch for ", scratch.max_splits, " splits has a null buffer");
  const PlanView& pv = plan.view();
  const DecodeScheduleView& sv = plan.schedule();
  LAZYATTN_CHECK(sv.rows_per_qtile == detail::kPrefillRows, w, ": schedule rows_per_qtile ",
                 sv.rows_per_qtile, ", expected ", detail::kPrefillRows,
                 " (upload the plan with upload_for_prefill)");
  if (args.rope)
    LAZYATTN_CHECK(rope.view().offset_rows >= 16, w, ": rope offset table of ",
                   rope.view().offset_rows, " rows, expected >= 16 (DeviceRope's offset_rows)");
  if (sv.num_qtiles == 0) return;

  LAZYATTN_CHECK(scratch.tiles_elems >= 0 && (scratch.tiles_elems == 0 || scratch.tiles), w,
                 ": scratch's tiles of ", scratch.tiles_elems,
                 " elements, expected >= 0 and a pointer where > 0");
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(scratch.tiles) % 16 == 0, w,
                 ": scratch's tiles must be 16-byte aligned, its address is ",
                 reinterpret_cast<std::uintptr_t>(scratch.tiles) % 16, " mod 16");

  PrefillParams p;
  detail::fill_attention_params(p, args, pool, plan, rope);
  const DType kv_dtype = pool.dtype();
  const bool fp8 = kv_dtype == DType::kFloat8E4M3;
  if (fp8) {
    p.k_scale = pool.k_scales(args.layer);
    p.v_scale = pool.v_scales(args.layer);
  }
  const PrefillKernel chosen =
      resolve_prefill_kernel(args, plan, rope, kv_dtype, scratch.tiles_elems);
  const bool wgmma = chosen == PrefillKernel::kWgmmaWs;
  // The Hopper kernel's tile scratch (every K tile positioned, or fp8 K/V dequantized), or 0;
  // local-form plans take positioned K where the caller's scratch has room.
  std::int64_t tile_elems = wgmma ? prefill_tile_elems(args, plan, rope, kv_dtype) : 0;
  if (tile_elems > scratch.tiles_elems) tile_elems = 0;  // (a local-form plan)
  const bool positioned = tile_elems > 0 && detail::positioned_keys(args, plan, rope, kv_dtype);
  p.keys_positioned = fp8 && positioned ? 1 : 0;  // (16-bit pools: the kPositionedK builds)
  // The Hopper kernel reads whole tiles of 16-bit pages, and positioned K tiles of the key
  // pass's scratch, with the TMA at head dims 64 and 128 (fp8 pools read their scratch; head
  // dim 256, page sizes under 8 and drivers without tensor maps gather with cp.async).
  if (wgmma && !fp8 && ap.head_dim != 256) {
    const PoolGeometry& geo = pool.geometry();
    auto maps = [&](bool run) {
      return detail::encode_kv_page_maps(run ? &p.k_run_map : &p.k_map,
                                         run ? &p.v_run_map : &p.v_map, p.k_pool, p.v_pool,
                                         geo.head_dim, geo.page_size, geo.num_kv_heads,
                                         geo.num_pages, run);
    };
    // Run maps for the paged builds that read them (the positioned builds at the same head dim
    // get them too: which build runs is chosen below).
    bool ok = maps(false) &&
              (!detail::loader_run_maps(detail::KvTiles::kPages, ap.head_dim) || maps(true));
    if (ok && tile_elems > 0)  // positioned K tiles (not fp8: excluded above)
      ok = detail::encode_scratch_map(&p.tile_k_map, scratch.tiles, ap.head_dim,
                                      tile_elems / ap.head_dim);
    p.kv_tma = ok ? 1 : 0;
  }
  int splits = args.kv_splits;
  if (splits == 0)
    splits = scratch.max_splits > 1
                 ? std::min(prefill_auto_splits(args, plan, rope, kv_dtype), scratch.max_splits)
                 : 1;
  const std::int64_t out_rows = static_cast<std::int64_t>(pv.num_queries) * ap.num_qo_heads;
  if (splits > 1) {
    p.kv_splits = splits;
    p.partial_o = scratch.partial_o;
    p.partial_lse = scratch.partial_lse;
  }

  dispatch_dtype(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(ap.head_dim, w, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        using Shape = detail::PrefillShape<D>;
        auto launch = [&](auto kernel) {
          prepare_kernel(kernel, Shape::kSmemBytes);
          dim3 grid(static_cast<unsigned>(sv.num_qtiles), static_cast<unsigned>(ap.num_kv_heads),
                    static_cast<unsigned>(splits));
          kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
          LAZYATTN_CUDA_CHECK_LAUNCH();
        };
        bool launched = false;
        if constexpr (detail::wgmma_prefill_head_dim(D)) {
          // The attention kernel overlaps the pass's end (programmatic dependent launch: its
          // prologue runs while the pass drains; its loader waits for the pass).
          const bool after_pass = tile_elems > 0;
          if (after_pass) {
            p.tile_k = scratch.tiles;
            if (fp8) p.tile_v = static_cast<std::uint16_t*>(scratch.tiles) + tile_elems / 2;
            auto launch_pass = [&](auto kernel) {
              // No shared memory; the largest carveout (prepare_kernel) as the attention kernel
              // overlapping it asks for, so an SM need not change its split between the two.
              prepare_kernel(kernel, 0);
              dim3 grid(static_cast<unsigned>(sv.num_tiles),
                        static_cast<unsigned>(detail::kTileKeys / detail::kKeyPassRows<D>));
              kernel<<<grid, detail::kKeyPassThreads, 0, stream>>>(p);
              LAZYATTN_CUDA_CHECK_LAUNCH();
            };
            // fp8: every tile dequantized, K positioned too where keys_positioned
            // (prefill/fp8_tiles.cuh); 16-bit: every K tile positioned (prefill/key_pass.cuh).
            if (!fp8) launch_pass(detail::rotate_key_tiles_kernel<T, D>);
            else if (p.keys_positioned) launch_pass(detail::dequantize_tiles_kernel<T, D, true>);
            else launch_pass(detail::dequantize_tiles_kernel<T, D, false>);
          }
          if (wgmma) {
            constexpr int smem = detail::WgmmaPrefillShape<D>::kSmemBytes;
            auto launch_wgmma = [&](auto kernel) {
              prepare_kernel(kernel, smem);
              dim3 grid(static_cast<unsigned>(sv.num_qtiles * ap.num_kv_heads), 1,
                        static_cast<unsigned>(splits));
              if (after_pass) {
                launch_overlapping(kernel, grid, dim3(detail::kWgmmaWsThreads), smem, stream, p);
              } else {
                kernel<<<grid, detail::kWgmmaWsThreads, smem, stream>>>(p);
                LAZYATTN_CUDA_CHECK_LAUNCH();
              }
            };
            // Builds: over pages (local and absolute form), one segment per request or more,
            // rotate-half over all dims or any layout, and RoPE off; the one-segment builds over
            // keys a pass positioned (positioned_keys; fp8 tiles, keys_positioned) or over one
            // segment per request (fp8 tiles). At head dim 256 the query side reads the layout at
            // run time in every build (wgmma_query_tile).
            const bool any = D != 256 && !detail::rotate_half_every_dim(rope, D);
            using detail::prefill_wgmma_kernel;
            using detail::KvTiles;
            auto launch_one_segment = [&](auto kv) {
              constexpr KvTiles kKv = decltype(kv)::value;
              if (any) {
                if constexpr (D != 256)
                  launch_wgmma(prefill_wgmma_kernel<T, D, true, true, kKv, true>);
              } else {
                launch_wgmma(prefill_wgmma_kernel<T, D, true, true, kKv>);
              }
            };
            if (fp8) {
              using Scratch = std::integral_constant<KvTiles, KvTiles::kScratch>;
              if (!args.rope)
                launch_wgmma(prefill_wgmma_kernel<T, D, false, false, Scratch::value>);
              else launch_one_segment(Scratch{});
            } else if (positioned) {  // every key at its position: one segment at 0
              launch_one_segment(std::integral_constant<KvTiles, KvTiles::kPositionedK>{});
            } else if (!args.rope) {
              launch_wgmma(prefill_wgmma_kernel<T, D, false, false, KvTiles::kPages>);
            } else {
              auto launch_pages = [&](auto any_layout) {
                constexpr bool kAny = decltype(any_layout)::value;
                constexpr KvTiles kPages = KvTiles::kPages;
                if (plan.single_segment_requests())  // (local form: raw plans are positioned)
                  launch_wgmma(prefill_wgmma_kernel<T, D, true, true, kPages, kAny>);
                else launch_wgmma(prefill_wgmma_kernel<T, D, true, false, kPages, kAny>);
              };
              if (!any) launch_pages(std::false_type{});
              else if constexpr (D != 256) launch_pages(std::true_type{});
            }
            launched = true;
          }
        }
        if (!launched) {
          if (args.rope) launch(detail::prefill_kernel<T, D, true>);
          else launch(detail::prefill_kernel<T, D, false>);
        }
        if (splits > 1) {
          constexpr int kMergeThreads = 256;
          const std::int64_t blocks = (out_rows * 32 + kMergeThreads - 1) / kMergeThreads;
          detail::prefill_merge_kernel<T, D><<<static_cast<unsigned>(blocks), kMergeThreads, 0,
                                               stream>>>(p.partial_o, p.partial_lse,
                                                         static_cast<T*>(args.o), args.maybe_lse,
                                                         out_rows, splits);
          LAZYATTN_CUDA_CHECK_LAUNCH();
        }
      });
    }
  });
}

// With a workspace that grows to the splits (automatic ones or args.kv_splits); null: no
// key-range splits (kv_splits must be 0 or 1). Before a graph capture, run once uncaptured so
// that the workspace has grown.
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, PrefillWorkspace* ws, cudaStream_t stream = nullptr) {
  PrefillScratch scratch;
  PrefillArgs a = args;  // the split count fixed here, so the launch does not choose it again
  const DType kv_dtype = pool.dtype();
  if (ws && args.kv_splits != 1 && plan.schedule().num_qtiles > 0) {
    args.params.check("cuda::prefill");
    const int splits =
        args.kv_splits > 0 ? args.kv_splits : prefill_auto_splits(args, plan, rope, kv_dtype);
    a.kv_splits = splits;
    if (splits > 1) {
      const std::int64_t out_rows =
          static_cast<std::int64_t>(plan.view().num_queries) * args.params.num_qo_heads;
      ws->partial_o.reserve(static_cast<std::size_t>(splits * out_rows * args.params.head_dim));
      ws->partial_lse.reserve(static_cast<std::size_t>(splits * out_rows));
      scratch.partial_o = ws->partial_o.data();
      scratch.partial_lse = ws->partial_lse.data();
      scratch.max_splits = splits;
    }
  }
  if (ws && plan.schedule().num_qtiles > 0 && args.kernel != PrefillKernel::kMmaSync &&
      !wgmma_prefill_mismatch(args, plan, rope, kv_dtype)) {
    const std::int64_t elems = prefill_tile_elems(args, plan, rope, kv_dtype);
    if (elems > 0) {
      ws->tiles.reserve(static_cast<std::size_t>(elems));
      scratch.tiles = ws->tiles.data();
      scratch.tiles_elems = elems;
    }
  }
  LAZYATTN_CHECK(ws || args.kv_splits <= 1, "cuda::prefill: kv_splits ", args.kv_splits,
                 " needs a PrefillWorkspace, got none");
  prefill(a, pool, plan, rope, scratch, stream);
}

// Without a workspace: no key-range splits (kv_splits must be 0 or 1), plans with raw-form
// segments take the mma.sync kernel (kAuto) for want of tile scratch, and fp8 pools are refused.
inline void prefill(const PrefillArgs& args, const DevicePool& pool, const DevicePlan& plan,
                    const DeviceRope& rope, cudaStream_t stream = nullptr) {
  prefill(args, pool, plan, rope, static_cast<PrefillWorkspace*>(nullptr), stream);
}

}  // namespace lazyattn::cuda

