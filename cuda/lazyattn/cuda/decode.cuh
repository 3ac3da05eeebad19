// Paged, split-KV, GQA-packed decode with deferred RoPE on tensor cores (mma.sync m16n8k16).
//
// One CTA handles one work item of the schedule (a run of 64-key tiles of one request) for one KV
// head. The group's query heads are the rows of a 16-row A operand, so every K/V byte is read
// from memory once per KV head, not once per query head. Four warps split each tile's 64 keys
// (16 each), keep their own online-softmax state, and merge through shared memory at the end.
// K/V tiles stream through a cp.async pipeline (page-table gather, 16-byte copies, XOR swizzle
// for conflict-free ldmatrix).
//
// Deferred rotation: each tile needs the query rotated by some delta, rounded to 16 bits once:
//   local form  delta = m - s, s the segment's logical start: a new query once per segment;
//   raw form    delta = m - n0, n0 the logical position of the tile's first key, and each key
//               rotated in fp32 registers by its offset r = n - n0 < 64 in the tile:
//               <R(m) q, R(n0 + r) k> = <R(m - n0) q, R(r) k>. R(r) is the same for every tile,
//               so each thread keeps the cos/sin of its two keys' offsets in registers (from
//               DeviceRope's offset table, loaded before the first tile): four multiply-adds
//               per (key, pair), no angle work in the loop.
// The queries for a new delta are built a tile ahead into the second of two buffers (the angles
// two tiles ahead), so a tile that changes the rotation waits at no extra barrier (D <= 128, any
// rotary layout; at D = 256 the query is built in place behind two barriers).
// Plans without raw-form segments run a build of the kernel without the raw-form code
// (kRawTiles = false): with it the local-form loop ran 10-12% slower at 255 registers (H200).
// The experimental TMA loader has only the build with it.
// kRope = false skips both (keys pre-rotated at logical positions, queries pre-rotated by the
// caller): the RoPE-off baseline.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/tma.cuh"
#include "lazyattn/kv/plan.hpp"

namespace lazyattn::cuda {

// Plain kernel parameters (passed by value as a __grid_constant__).
struct DecodeParams {
  const void* q = nullptr;  // [num_requests, num_qo_heads, head_dim], un-rotated
  void* o = nullptr;        // [num_requests, num_qo_heads, head_dim]
  float* maybe_lse = nullptr;  // [num_requests, num_qo_heads], natural log; may be null
  // 1: q arrives rotated at its own position m (R(m) q, as models rotate it), so the rotations
  // count from 0: R(m - s) q = R(-s) R(m) q.
  std::int32_t query_rotated = 0;
  const void* k_pool = nullptr;  // layer base of the K pool [num_pages, kv_heads, page_size, D]
  const void* v_pool = nullptr;
  std::int64_t page_stride = 0;  // elements
  std::int64_t head_stride = 0;
  PlanView plan;
  DecodeScheduleView sched;
  RopeView rope;
  float* partial_o = nullptr;    // [num_partials, num_qo_heads, head_dim]
  float* partial_lse = nullptr;  // [num_partials, num_qo_heads], log2 units
  int* split_counters = nullptr;  // [num_requests, num_kv_heads], zero between launches
  float sm_scale_log2 = 0.0f;    // softmax scale * log2(e)
  std::int32_t num_qo_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t group_size = 0;
  std::int32_t page_size_log2 = 0;
  // The TMA loader (experimental, DecodeArgs::tma): maps over the whole K and V pools, the first
  // row of this layer, rows from one page to the next, and rows per box (min(page_size, 64)).
  std::int64_t tma_layer_row0 = 0;
  std::int32_t tma_page_rows = 0;
  std::int32_t tma_box_rows = 0;
  CUtensorMap k_map{};
  CUtensorMap v_map{};
#ifdef LAZYATTN_DECODE_TIMELINE
  // Diagnostic build only: per CTA, %globaltimer (ns) at kTimelineEvents points, and its SM.
  unsigned long long* timeline = nullptr;
#endif
};

#ifdef LAZYATTN_DECODE_TIMELINE
// The events the diagnostic timeline records per CTA (bench_decode, LAZYATTN_BENCH_TIMELINE).
enum TimelineEvent : int {
  kTlEntry = 0,     // the CTA starts
  kTlFirstTile,     // the first tile is in shared memory (after the loop's first barrier)
  kTlLoopEnd,       // every tile computed, the warps' states merged in shared memory
  kTlPartial,       // the CTA's output (or partial state) written
  kTlExit,          // the CTA leaves (the last CTA of a head after the split merge)
  kTlSm,            // %smid
  kTimelineEvents = 8
};
#endif

namespace detail {

#ifdef LAZYATTN_DECODE_TIMELINE
__device__ __forceinline__ void timeline_mark(const DecodeParams& p, int event) {
  if (p.timeline == nullptr || threadIdx.x != 0) return;
  unsigned long long t = ptx::globaltimer();
  if (event == kTlSm) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    t = sm;
  }
  p.timeline[(static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kTimelineEvents +
             event] = t;
}
#define LAZYATTN_TL(event) timeline_mark(p, event)
#else
#define LAZYATTN_TL(event) ((void)0)
#endif

// Four consecutive outputs (dst need be aligned only as T: o is the caller's tensor).
template <class T>
__device__ __forceinline__ void store4(T* dst, float4 v) {
  dst[0] = ptx::from_f32<T>(v.x);
  dst[1] = ptx::from_f32<T>(v.y);
  dst[2] = ptx::from_f32<T>(v.z);
  dst[3] = ptx::from_f32<T>(v.w);
}

inline constexpr int kDecodeWarps = 4;
inline constexpr int kDecodeThreads = 32 * kDecodeWarps;
inline constexpr int kDecodeTileKeys = kTileKeys;  // 16 keys per warp
inline constexpr int kRows = 16;            // query rows of the mma A operand

template <int D>
struct DecodeShape {
  static constexpr int kStages = D <= 128 ? 3 : 2;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kKSteps = D / 16;
  static constexpr int kTileElems = kDecodeTileKeys * D;
  static constexpr bool kQInRegisters = D <= 128;
  // Raw form: cos/sin of this thread's two keys' in-tile offsets, per pair it holds (D / 8
  // each), in registers up to D = 128; at 256 read from the offset table (L1/L2) at each use.
  static constexpr bool kKeyCsInRegisters = D <= 128;  // read at each use instead: 26% slower
  // Shared memory (bytes): K/V stages (reused to merge the warps), two buffers of the rotated
  // 16-bit query and two of the cos/sin of a query rotation (the next ones built ahead).
  static constexpr int kStageBytes = 2 * kTileElems * 2;
  static constexpr int kMergeBytes = kDecodeWarps * kRows * (D + 4) * 4;
  static constexpr int kPipeBytes = kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes
                                                                       : kMergeBytes;
  static constexpr int kQRotOffset = kPipeBytes;              // [2][kRows][D] 16-bit
  static constexpr int kCsQueryOffset = kQRotOffset + 2 * kRows * D * 2;  // [2][D / 2] float2
  static constexpr int kSmemBytes = kCsQueryOffset + 2 * (D / 2) * 8;
  // The TMA loader adds one mbarrier per stage and the merge's "last CTA" flag (the cp.async
  // kernel keeps that flag in static shared memory).
  static constexpr int kBarOffset = kSmemBytes;
  static constexpr int kSmemBytesTma = kSmemBytes + 32;
  static_assert(kStages * 8 + 4 <= 32 && kSmemBytes % 8 == 0, "decode: TMA barrier space");
  static_assert(D > 128 || kSmemBytesTma <= 113 * 1024, "decode: TMA shared memory too large");
  // Two CTAs per multiprocessor (228 KiB, 1 KiB reserved per CTA) up to D = 128.
  static_assert(D > 128 || kSmemBytes <= 113 * 1024, "decode: shared memory too large for 2 CTAs/SM");
};

// kRawTiles = false: a plan without raw-form segments (no key rotation code: the local-form
// loop keeps its registers).
template <class T, int D, bool kRope, bool kTma = false, bool kRawTiles = true>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  using Shape = DecodeShape<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  if constexpr (kTma) {
    // The TMA's 128-byte swizzle keys on address bits: stages must start at 1024-byte
    // boundaries. The TMA kernel has no static shared memory, so the dynamic block starts at
    // the (aligned) base of the CTA's window; stop loudly if that ever changes.
    if ((ptx::smem_addr(smem) & 1023u) != 0) __trap();
  }
  T* stage_base = reinterpret_cast<T*>(smem);
  T* q_rot_buf = reinterpret_cast<T*>(smem + Shape::kQRotOffset);               // [2][row][D]
  float2* cs_query = reinterpret_cast<float2*>(smem + Shape::kCsQueryOffset);  // [2][pair]

  LAZYATTN_TL(kTlEntry);
  LAZYATTN_TL(kTlSm);
  ptx::launch_dependents();  // the next grid's CTAs may take SMs as this grid's leave
  const int work = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int mi = lane >> 3;  // which 8x8 matrix of an ldmatrix.x4 this lane addresses

  const int b = p.sched.work_request[work];
  const int tile_begin = p.sched.work_tile_begin[work];
  const int tile_end = p.sched.work_tile_end[work];
  const int split = p.sched.work_split[work];
  const int G = p.group_size;
  // The position the query's rotation counts from: its own (un-rotated q) or 0 (q = R(m) q).
  const std::int64_t m_pos = p.query_rotated ? 0 : p.plan.request_query_position[b];
  const int q_row0 = p.plan.request_query_indptr[b];
  const int rope_set = p.rope.per_request ? b : 0;
  const int rotary = p.rope.rotary_dim;
  const int rot_half = rotary / 2;
  const bool interleaved = p.rope.interleaved != 0;
  const std::uint64_t* turns = p.rope.turns + static_cast<std::int64_t>(rope_set) * rot_half;

  // ---- K/V tiles: addresses come from TileInfo records and page ids fetched ahead ------------
  // Every global load that a cp.async address depends on is made one iteration before its use,
  // so no dependent load chain (tile -> page id -> address) stalls the issue.
  constexpr int S = Shape::kStages;
  auto make_stream = [&] {
    if constexpr (kTma) {
      return TmaTileStream<T, D, S>{
          p.sched.tiles,
          p.plan.page_ids,
          &p.k_map,
          &p.v_map,
          p.tma_layer_row0 + static_cast<std::int64_t>(kv_head) * (1 << p.page_size_log2),
          p.tma_page_rows,
          p.page_size_log2,
          p.tma_box_rows,
          tile_end,
          stage_base,
          ptx::smem_addr(smem + Shape::kBarOffset)};
    } else {
      return TileStream<T, D, kDecodeThreads, S>::for_head(p, kv_head, tile_end, tid, stage_base);
    }
  };
  auto stream = make_stream();
  // The records of the tile computed in this iteration and the next one. The raw-capable build
  // keeps one more (`after`), so that the look-ahead angles at the end of an iteration read a
  // record two tiles ahead loaded an iteration before, not in that iteration: raw form 4-5%
  // faster at 1 x 10272, 0.2-0.8% at batch >= 16 (H200). The local build waits on that load as
  // it did (Nsight Compute, 64 x 4096: its largest stall), but taking the rotation from the
  // loader's own copy of the record instead made it 0.5-1.9% slower at 1 x 10272 and 16 x 16384
  // (1% faster at 128 x 8192; bench/results/2026-11-30-h200-decode-raw-study).
  TileInfo cur, next, after;
  // The local build loads the first records, and the frequency of the one rotary pair whose
  // angles this thread computes (pair tid: D / 2 <= 128 pairs), before the grid-dependency wait,
  // so that the first query's angles wait on no load after the tiles go out; it holds that
  // frequency throughout. (The raw-capable build, at 255 registers, spilled holding it.)
  constexpr bool kEarly = kRope && !kRawTiles;
  static_assert(D / 2 <= kDecodeThreads, "decode: one rotary pair per thread");
  std::uint64_t my_turns = 0;
  auto turns_of = [&](int j) -> std::uint64_t {
    if constexpr (kEarly) return my_turns;  // j == tid
    else return turns[j];
  };
  auto load_records = [&] {
    cur = stream.info(tile_begin);
    next = stream.info(tile_begin + 1);
    if constexpr (kRawTiles) after = stream.info(tile_begin + 2);
  };
  // The first tiles go out before anything else: their latency hides the query setup.
  // Under programmatic dependent launch (DecodeArgs::pdl) everything before the grid-dependency
  // wait reads only the plan, schedule and RoPE tables; q, K/V, the workspace and the outputs
  // are touched after the grid this one follows has completed.
  auto before_wait = [&] {
    if constexpr (kEarly) {
      load_records();
      if (tid < rot_half) my_turns = turns[tid];
    }
  };
  if constexpr (kTma) {
    stream.init_barriers(tid);
    stream.prefetch_records(tile_begin, tid, kDecodeThreads);
    before_wait();
    ptx::grid_dependency_wait();
    __syncthreads();  // barriers initialised before anyone waits on or arms them
    if (warp == 0) stream.start(tile_begin, lane);
  } else {
    stream.prefetch_records(tile_begin, tid);
    stream.start(tile_begin, [&] {
      before_wait();
      ptx::grid_dependency_wait();
    });
  }
  if constexpr (!kEarly) load_records();

  // The group's queries (16-bit, un-rotated) in global memory; rows >= G read as zero.
  const T* q_src = static_cast<const T*>(p.q) +
                   (static_cast<std::int64_t>(q_row0) * p.num_qo_heads + kv_head * G) * D;

  // ---- per-warp state ------------------------------------------------------------------------
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's share; reduced across the quad at the end
  // The query's A fragments stay in registers across tiles (up to D = 128) where the rotation
  // rarely changes; the raw-capable build, whose query changes every raw tile, reads them from
  // shared memory at each k-step instead and leaves those registers to the key rotation.
  constexpr bool kQRegs = Shape::kQInRegisters && !kRawTiles;
  std::uint32_t qa[kQRegs ? Shape::kKSteps : 1][4];
  const std::uint8_t kRawForm = static_cast<std::uint8_t>(StorageForm::kRaw);
  const float q_scale = (kRope ? p.rope.query_scale : 1.0f) * p.sm_scale_log2;

  // ---- raw form: cos/sin of this thread's keys' offsets in a tile -----------------------------
  // Its B fragments hold keys r = 16 warp + g and r + 8 of every tile. Entry e of a key: in the
  // rotate-half layout k-step kk = e / 4 of the first half, dims j = 16 kk + 2 t4 + {0, 1, 8, 9}
  // (pairs j, partners j + rotary/2); interleaved, k-step kk = e / 2, pairs 8 kk + t4 + {0, 4}.
  const int rot_steps = rotary / 16;  // k-steps that hold rotary dims
  const int half_steps = rot_steps / 2;
  constexpr int kKeyCs = D / 8;
  const float2* offset_table =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;
  auto key_cs_load = [&](int key, int e) -> float2 {
    const int r = warp * 16 + g + 8 * key;
    int pair;
    bool valid;
    if (interleaved) {
      pair = 8 * (e >> 1) + t4 + 4 * (e & 1);
      valid = (e >> 1) < rot_steps;
    } else {
      pair = 16 * (e >> 2) + 2 * t4 + (e & 1) + 8 * ((e >> 1) & 1);
      valid = (e >> 2) < half_steps;
    }
    return valid ? __ldg(offset_table + r * rot_half + pair) : make_float2(1.0f, 0.0f);
  };
  // Loaded once, before the first tile (a kernel built with kRawTiles serves plans with raw
  // segments only); the loads' latency hides under the first tiles'.
  float2 key_cs_reg[Shape::kKeyCsInRegisters ? 2 : 1][Shape::kKeyCsInRegisters ? kKeyCs : 1] = {};
  if constexpr (kRope && kRawTiles && Shape::kKeyCsInRegisters) {
#pragma unroll
    for (int key = 0; key < 2; ++key)
#pragma unroll
      for (int e = 0; e < kKeyCs; ++e) key_cs_reg[key][e] = key_cs_load(key, e);
  }
  auto key_cs = [&](int key, int e) -> float2 {  // key and e compile-time in unrolled loops
    if constexpr (Shape::kKeyCsInRegisters) return key_cs_reg[key][e];
    else return key_cs_load(key, e);
  };

  // ---- the rotated query ----------------------------------------------------------------------
  // Each tile needs the query rotated by tile_delta (m - s local, m - n0 raw). Two buffers: the
  // current query and the next one, built a tile ahead where the layout allows (fast_query: D <=
  // 128 and rotary dims a multiple of 16, either pair layout; each thread holds 16 dims of one
  // row in registers, as two 8-dim chunks: 8 rotate-half firsts and their partners, or 16
  // consecutive dims holding 8 interleaved pairs, or 16 dims past the rotary ones), from cos/sin
  // computed two tiles ahead into one of two angle buffers (tagged with the rotation they hold).
  // Otherwise the query is built element by element behind two barriers when the rotation
  // changes.
  auto tile_delta = [&](const TileInfo& t) -> std::int64_t {
    if (!kRope) return 0;
    return t.form == kRawForm ? m_pos - (t.seg_start + t.key0) : m_pos - t.seg_start;
  };
  constexpr int kPairChunks = kRows * (D / 16);  // (row, 16 dims) units, one per thread
  constexpr int kPer = (kPairChunks + kDecodeThreads - 1) / kDecodeThreads;
  const bool fast_query = kRope && kPer == 1 && rotary % 16 == 0;
  const int fq_row = tid / (D / 16), fq_u = tid % (D / 16);
  const bool fq_owner = tid < kPairChunks && fq_row < G;  // holds a real query chunk
  // This thread's two chunks (dims fq_a.. and fq_b..) and what they hold.
  enum : int { kFqHalf, kFqInterleaved, kFqPass };
  const int fq_kind = 16 * fq_u >= rotary ? kFqPass : interleaved ? kFqInterleaved : kFqHalf;
  const int fq_a = fq_kind == kFqHalf ? 8 * fq_u : 16 * fq_u;
  const int fq_b = fq_kind == kFqHalf ? fq_a + rot_half : fq_a + 8;
  uint4 q_x = make_uint4(0, 0, 0, 0), q_y = q_x;           // its raw query chunk (fast path)
  constexpr std::int64_t kNoDelta = INT64_MIN;
  // The rotation each angle buffer holds (two scalars: an indexed array would live in memory).
  std::int64_t cs_tag0 = kNoDelta, cs_tag1 = kNoDelta;
  auto cs_tag = [&](int cb) { return cb ? cs_tag1 : cs_tag0; };
  auto set_cs_tag = [&](int cb, std::int64_t delta) {
    if (cb) cs_tag1 = delta;
    else cs_tag0 = delta;
  };
  int qbuf = 0;                       // the buffer holding the current query
  std::int64_t q_delta = kNoDelta;    // its rotation
  std::int64_t ahead_delta = kNoDelta;  // the rotation built into the other buffer, if any
  auto q_rot_at = [&](int buf) { return q_rot_buf + buf * (kRows * D); };
  // cos/sin of a rotation, scaled by the query scale, into angle buffer cb (fast path).
  auto precompute_angles = [&](int cb, std::int64_t delta) {
    for (int j = tid; j < rot_half; j += kDecodeThreads) {
      const float2 c = rope_cos_sin(delta, turns_of(j));
      cs_query[cb * (D / 2) + j] = make_float2(c.x * q_scale, c.y * q_scale);
    }
    set_cs_tag(cb, delta);
  };
  // This thread's chunks of the query rotated by angle buffer cb into buffer buf (fast path;
  // the angles carry the query scale, dims past the rotary ones take sm_scale_log2 alone).
  auto build_fast = [&](int buf, int cb) {
    if (!fq_owner) return;
    const float2* cs = cs_query + cb * (D / 2);
    const std::uint32_t* xw = reinterpret_cast<const std::uint32_t*>(&q_x);
    const std::uint32_t* yw = reinterpret_cast<const std::uint32_t*>(&q_y);
    uint4 xo, yo;
    std::uint32_t* xow = reinterpret_cast<std::uint32_t*>(&xo);
    std::uint32_t* yow = reinterpret_cast<std::uint32_t*>(&yo);
    if (fq_kind == kFqHalf) {  // pairs (fq_a + 2w + i, fq_b + 2w + i); Llama's, the common case
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float2 x = ptx::unpack2<T>(xw[w]), y = ptx::unpack2<T>(yw[w]);
        const float4 c = *reinterpret_cast<const float4*>(cs + fq_a + 2 * w);
        rotate_pair(x.x, y.x, make_float2(c.x, c.y));
        rotate_pair(x.y, y.y, make_float2(c.z, c.w));
        xow[w] = ptx::pack2<T>(x.x, x.y);
        yow[w] = ptx::pack2<T>(y.x, y.y);
      }
    } else {  // interleaved pairs (2j, 2j + 1) inside each word, or dims past the rotary ones
      const bool pass = fq_kind == kFqPass;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float2 x = ptx::unpack2<T>(xw[w]), y = ptx::unpack2<T>(yw[w]);
        const float2 pass_scale = make_float2(p.sm_scale_log2, 0.0f);  // x s, y s
        const float2 cx = pass ? pass_scale : cs[fq_a / 2 + w];
        const float2 cy = pass ? pass_scale : cs[fq_b / 2 + w];
        rotate_pair(x.x, x.y, cx);
        rotate_pair(y.x, y.y, cy);
        xow[w] = ptx::pack2<T>(x.x, x.y);
        yow[w] = ptx::pack2<T>(y.x, y.y);
      }
    }
    T* dst = q_rot_at(buf);
    *reinterpret_cast<uint4*>(dst + swizzle<D>(fq_row, fq_a >> 3)) = xo;
    *reinterpret_cast<uint4*>(dst + swizzle<D>(fq_row, fq_b >> 3)) = yo;
  };
  // Element by element (any layout, RoPE off too), into buffer buf: two barriers.
  auto build_general = [&](int buf, std::int64_t delta) {
    if (kRope) {
      for (int j = tid; j < rot_half; j += kDecodeThreads)
        cs_query[j] = rope_cos_sin(delta, turns_of(j));
      cs_tag0 = kNoDelta;  // unscaled: not for build_fast
    }
    __syncthreads();
    T* dst = q_rot_at(buf);
    for (int i = tid; i < kRows * D; i += kDecodeThreads) {
      int row = i / D, d = i % D;
      float v = 0.0f;
      if (row < G) {
        const T* qr = q_src + row * D;
        if (!kRope || d >= rotary) {
          v = ptx::to_f32(qr[d]);
        } else {
          const RotaryPair rp = rotary_pair(d, rot_half, interleaved);
          const float x = ptx::to_f32(qr[d]), y = ptx::to_f32(qr[rp.partner]);
          v = rotate_element(x, y, cs_query[rp.j], rp.first) * p.rope.query_scale;
        }
      }
      dst[swizzle<D>(row, d >> 3) + (d & 7)] = ptx::from_f32<T>(v * p.sm_scale_log2);
    }
    __syncthreads();
  };
  // The query of buffer buf into the A fragments (registers up to D = 128).
  auto load_query = [&](int buf) {
    if constexpr (kQRegs) {
      const T* src = q_rot_at(buf);
#pragma unroll
      for (int kk = 0; kk < Shape::kKSteps; ++kk) {
        int row = (mi & 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(qa[kk], ptx::smem_addr(src + swizzle<D>(row, 2 * kk + (mi >> 1))));
      }
    }
  };
  // Switches to the query rotated by `delta`: the one built ahead, or built now (uniform
  // branch: every thread sees the same tiles).
  auto use_query = [&](std::int64_t delta, int cb) {
    const int nb = qbuf ^ 1;
    if (ahead_delta != delta) {
      if (fast_query) {
        if (cs_tag(cb) != delta) {
          precompute_angles(cb, delta);
          __syncthreads();
        }
        build_fast(nb, cb);
        __syncthreads();
      } else {
        build_general(nb, delta);
      }
    }
    qbuf = nb;
    q_delta = delta;
    ahead_delta = kNoDelta;
    load_query(qbuf);
  };

  // The first query is built while the first tiles are in flight: its loads of the query and
  // the frequencies, and its barriers, stay off the first tile's critical path. Rows >= G of
  // both buffers are zero from here on (the fast build writes real rows only).
  if (tile_begin < tile_end) {
    const std::int64_t d0 = tile_delta(cur);
    if (fast_query) {
      if (tid < kPairChunks) {
        if (fq_row < G) {
          q_x = *reinterpret_cast<const uint4*>(q_src + fq_row * D + fq_a);
          q_y = *reinterpret_cast<const uint4*>(q_src + fq_row * D + fq_b);
        } else {
#pragma unroll
          for (int buf = 0; buf < 2; ++buf) {
            *reinterpret_cast<uint4*>(q_rot_at(buf) + swizzle<D>(fq_row, fq_a >> 3)) = q_x;
            *reinterpret_cast<uint4*>(q_rot_at(buf) + swizzle<D>(fq_row, fq_b >> 3)) = q_x;
          }
        }
      }
      // The second tile's angles too, if it rotates differently (built ahead in the loop).
      if (tile_begin + 1 < tile_end && tile_delta(next) != d0)
        precompute_angles((tile_begin + 1) & 1, tile_delta(next));
    }
    qbuf = 1;  // use_query builds into buffer 0
    use_query(d0, tile_begin & 1);
  }

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int it = tile - tile_begin;
    if constexpr (kTma) {
      stream.wait(it);
      __syncthreads();  // every warp is done with stage (it - 1) % S: warp 0 may refill it
      if (warp == 0) stream.step(tile, it, lane);
    } else {
      ptx::cp_async_wait<S - 2>();
      __syncthreads();  // tile `it` is in shared memory; stage (it - 1) % S is free again
      stream.step(tile, it);  // its loads complete while this tile is computed
    }
#ifdef LAZYATTN_DECODE_TIMELINE
    if (it == 0) LAZYATTN_TL(kTlFirstTile);
#endif
    const TileInfo ti = cur;
    cur = next;
    if constexpr (kRawTiles) {
      next = after;
      after = stream.info(tile + 3);
    } else {
      next = stream.info(tile + 2);
    }
    if constexpr (kTma) {
      if (ti.rows < kDecodeTileKeys) stream.zero_stale_v(it % S, ti.rows, warp * 16, lane);
    }

    const bool raw = kRope && kRawTiles && ti.form == kRawForm;
    // ---- the query for this tile's rotation (built during the last tile, normally) ------------
    if (kRope) {
      const std::int64_t delta = tile_delta(ti);
      if (delta != q_delta) use_query(delta, tile & 1);
    }

    const T* ks = stream.k_stage(it % S);
    const T* vs = stream.v_stage(it % S);
    // Element (row, 16-byte chunk) of a K or V tile in the loader's layout.
    auto kv_offset = [](int row, int chunk) {
      if constexpr (kTma) return blocked_swizzle<D, kDecodeTileKeys>(row, chunk);
      else return swizzle<D>(row, chunk);
    };

    // ---- S = Q K^T for this warp's 16 keys ----------------------------------------------------
    float sc[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
    const int k_row = warp * 16 + (mi >> 1) * 8 + (lane & 7);  // key row this lane addresses
    auto load_k = [&](std::uint32_t (&kb)[4], int kk) {
      ptx::ldmatrix_x4(kb, ptx::smem_addr(ks + kv_offset(k_row, 2 * kk + (mi & 1))));
    };
    // kk must be a compile-time constant (unrolled loop) when the query sits in registers.
    auto q_frag = [&](std::uint32_t (&a)[4], int kk) {
      if constexpr (kQRegs) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = qa[kk][r];
      } else {
        int row = (mi & 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(a, ptx::smem_addr(q_rot_at(qbuf) + swizzle<D>(row, 2 * kk + (mi >> 1))));
      }
    };
    if (!raw) {
#pragma unroll
      for (int kk = 0; kk < Shape::kKSteps; ++kk) {
        std::uint32_t kb[4], a[4];
        load_k(kb, kk);
        q_frag(a, kk);
        ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
        ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
      }
    } else if constexpr (kRope && kRawTiles) {
      // Keys rotated by their in-tile offsets: registers (x: dims j, j+1) with partners
      // (y: the same dims of the other half), or (interleaved) the register's two halves.
      auto rot_half_regs = [&](std::uint32_t& x_reg, std::uint32_t& y_reg, float2 c0, float2 c1) {
        float2 xv = ptx::unpack2<T>(x_reg), yv = ptx::unpack2<T>(y_reg);
        rotate_pair(xv.x, yv.x, c0);
        rotate_pair(xv.y, yv.y, c1);
        x_reg = ptx::pack2<T>(xv.x, xv.y);
        y_reg = ptx::pack2<T>(yv.x, yv.y);
      };
      auto rot_inter_reg = [&](std::uint32_t& reg, float2 c) {
        float2 v = ptx::unpack2<T>(reg);
        rotate_pair(v.x, v.y, c);
        reg = ptx::pack2<T>(v.x, v.y);
      };
      if (interleaved) {
#pragma unroll
        for (int kk = 0; kk < Shape::kKSteps; ++kk) {
          std::uint32_t kb[4], a[4];
          load_k(kb, kk);
          if (kk < rot_steps) {
            rot_inter_reg(kb[0], key_cs(0, 2 * kk));
            rot_inter_reg(kb[1], key_cs(0, 2 * kk + 1));
            rot_inter_reg(kb[2], key_cs(1, 2 * kk));
            rot_inter_reg(kb[3], key_cs(1, 2 * kk + 1));
          }
          q_frag(a, kk);
          ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
          ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
        }
      } else if (rotary == D) {
        // Every dim rotary: k-step kk's partners are in kk + kKSteps / 2.
        constexpr int kH = Shape::kKSteps / 2;
#pragma unroll
        for (int kk = 0; kk < kH; ++kk) {
          std::uint32_t kb[4], kp[4], a[4], ap[4];
          load_k(kb, kk);
          load_k(kp, kk + kH);
          rot_half_regs(kb[0], kp[0], key_cs(0, 4 * kk), key_cs(0, 4 * kk + 1));
          rot_half_regs(kb[1], kp[1], key_cs(0, 4 * kk + 2), key_cs(0, 4 * kk + 3));
          rot_half_regs(kb[2], kp[2], key_cs(1, 4 * kk), key_cs(1, 4 * kk + 1));
          rot_half_regs(kb[3], kp[3], key_cs(1, 4 * kk + 2), key_cs(1, 4 * kk + 3));
          q_frag(a, kk);
          q_frag(ap, kk + kH);
          ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
          ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
          ptx::mma_16816<T>(sc[0], ap, kp[0], kp[1]);
          ptx::mma_16816<T>(sc[1], ap, kp[2], kp[3]);
        }
      } else {
        // Partial rotary dims: partners half_steps further (not a compile-time step; the
        // raw-capable build reads the query fragments from shared memory, so q_frag takes it).
        static_assert(!kQRegs, "raw tiles read the query fragments from shared memory");
#pragma unroll
        for (int kk = 0; kk < Shape::kKSteps; ++kk) {
          if (kk >= half_steps && kk < rot_steps) continue;  // done with its partner
          std::uint32_t kb[4], a[4];
          load_k(kb, kk);
          if (kk < half_steps) {
            std::uint32_t kp[4], ap[4];
            load_k(kp, kk + half_steps);
            const int e = 4 * (kk < Shape::kKSteps / 2 ? kk : 0);  // kk < half_steps <= kKSteps/2
            rot_half_regs(kb[0], kp[0], key_cs(0, e), key_cs(0, e + 1));
            rot_half_regs(kb[1], kp[1], key_cs(0, e + 2), key_cs(0, e + 3));
            rot_half_regs(kb[2], kp[2], key_cs(1, e), key_cs(1, e + 1));
            rot_half_regs(kb[3], kp[3], key_cs(1, e + 2), key_cs(1, e + 3));
            q_frag(ap, kk + half_steps);
            ptx::mma_16816<T>(sc[0], ap, kp[0], kp[1]);
            ptx::mma_16816<T>(sc[1], ap, kp[2], kp[3]);
          }
          q_frag(a, kk);
          ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
          ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
        }
      }
    }

    // ---- online softmax over this warp's keys (scores are already in log2 units) -------------
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key = warp * 16 + nt * 8 + 2 * t4 + (e & 1);
        if (key >= ti.rows) sc[nt][e] = -INFINITY;
      }
    }
    float scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // h = 0: row g, h = 1: row g + 8
      float mx = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      float m_new = fmaxf(row_max[h], mx);
      // A row that has seen only masked keys keeps m = -inf; subtract 0 then so exp2 gives 0, not
      // NaN from (-inf) - (-inf).
      float m_use = m_new == -INFINITY ? 0.0f : m_new;
      scale[h] = exp2f(row_max[h] - m_use);
      row_max[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        sc[nt][2 * h] = exp2f(sc[nt][2 * h] - m_use);
        sc[nt][2 * h + 1] = exp2f(sc[nt][2 * h + 1] - m_use);
        sum += sc[nt][2 * h] + sc[nt][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * scale[h] + sum;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= scale[0];
      acc[n][1] *= scale[0];
      acc[n][2] *= scale[1];
      acc[n][3] *= scale[1];
    }

    // ---- O += P V ------------------------------------------------------------------------------
    std::uint32_t pa[4] = {ptx::pack2<T>(sc[0][0], sc[0][1]), ptx::pack2<T>(sc[0][2], sc[0][3]),
                           ptx::pack2<T>(sc[1][0], sc[1][1]), ptx::pack2<T>(sc[1][2], sc[1][3])};
    const int v_row = warp * 16 + (mi & 1) * 8 + (lane & 7);
#pragma unroll
    for (int c = 0; c < D / 8; c += 2) {
      std::uint32_t vb[4];
      ptx::ldmatrix_x4_trans(vb, ptx::smem_addr(vs + kv_offset(v_row, c + (mi >> 1))));
      ptx::mma_16816<T>(acc[c], pa, vb[0], vb[1]);
      ptx::mma_16816<T>(acc[c + 1], pa, vb[2], vb[3]);
    }

    // ---- ahead: the next tile's query, the angles of the one after --------------------------
    // Written now, read after the next iteration's first barrier. The next tile's query goes
    // into the other buffer (nobody reads it: the current query's fragments come from qbuf),
    // from angles computed a tile ago; the angles for the tile after that go into the angle
    // buffer this tile's query was built from (read before this iteration's first barrier, or
    // before use_query's last one).
    if (fast_query && tile + 1 < tile_end) {
      const std::int64_t d1 = tile_delta(cur);
      if constexpr (!kRawTiles) {
        // Local build: only the next tile's record (loaded an iteration ago), its angles
        // computed here when its segment differs (the tile after next's record, loaded this
        // iteration, was the local form's largest stall: Nsight Compute, 64 x 4096). Angle
        // buffer (tile + 1) & 1 last served tile - 1's query, built before this iteration's
        // first barrier; query buffer qbuf ^ 1 was last read before it too.
        if (d1 != q_delta) {
          if (cs_tag((tile + 1) & 1) != d1) {
            precompute_angles((tile + 1) & 1, d1);
            __syncthreads();  // uniform: every thread sees the same tiles
          }
          build_fast(qbuf ^ 1, (tile + 1) & 1);
          ahead_delta = d1;
        }
      } else {
        if (d1 != q_delta && cs_tag((tile + 1) & 1) == d1) {
          build_fast(qbuf ^ 1, (tile + 1) & 1);
          ahead_delta = d1;
        }
        if (tile + 2 < tile_end) {
          const std::int64_t d2 = tile_delta(next);
          if (d2 != d1 && cs_tag(tile & 1) != d2) precompute_angles(tile & 1, d2);
        }
      }
    }
  }

  // ---- merge the four warps' states through shared memory ----------------------------------
  ptx::cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory is free for reuse
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  float* merge = reinterpret_cast<float*>(smem);  // [warp][row][D + 4]: acc, max, sum, pad
  constexpr int kRowStride = D + 4;  // acc, max, sum, pad: rows at 16-byte boundaries
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    int col = n * 8 + 2 * t4;
    float* r0 = merge + (warp * kRows + g) * kRowStride;
    float* r1 = merge + (warp * kRows + g + 8) * kRowStride;
    r0[col] = acc[n][0];
    r0[col + 1] = acc[n][1];
    r1[col] = acc[n][2];
    r1[col + 1] = acc[n][3];
  }
  if (t4 == 0) {
    merge[(warp * kRows + g) * kRowStride + D] = row_max[0];
    merge[(warp * kRows + g) * kRowStride + D + 1] = row_sum[0];
    merge[(warp * kRows + g + 8) * kRowStride + D] = row_max[1];
    merge[(warp * kRows + g + 8) * kRowStride + D + 1] = row_sum[1];
  }
  __syncthreads();
  LAZYATTN_TL(kTlLoopEnd);

  const int num_splits = p.sched.request_num_splits[b];
  const int partial = p.sched.request_partial_offset[b] + split;
  const float kLn2 = 0.6931471805599453f;
  // Four dims of one row per thread (16-byte shared loads and partial stores).
  for (int i = tid; i < G * D / 4; i += kDecodeThreads) {
    const int row = (4 * i) / D, d = (4 * i) % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w)
      m_all = fmaxf(m_all, merge[(w * kRows + row) * kRowStride + D]);
    float l_all = 0.0f;
    float4 o_all = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (m_all != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float* r = merge + (w * kRows + row) * kRowStride;
        const float wgt = exp2f(r[D] - m_all);  // a warp that saw no key has r[D] = -inf: weight 0
        const float4 a = *reinterpret_cast<const float4*>(r + d);
        l_all += r[D + 1] * wgt;
        o_all.x += a.x * wgt;
        o_all.y += a.y * wgt;
        o_all.z += a.z * wgt;
        o_all.w += a.w * wgt;
      }
    }
    const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
    const float4 out = make_float4(o_all.x * inv, o_all.y * inv, o_all.z * inv, o_all.w * inv);
    const float lse2 = l_all > 0.0f ? m_all + log2f(l_all) : -INFINITY;
    const int head = kv_head * G + row;
    if (num_splits == 1) {
      store4(static_cast<T*>(p.o) + (static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head) * D + d,
             out);
      if (d == 0 && p.maybe_lse)
        p.maybe_lse[static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head] = lse2 * kLn2;
    } else {
      const std::int64_t base = static_cast<std::int64_t>(partial) * p.num_qo_heads + head;
      *reinterpret_cast<float4*>(p.partial_o + base * D + d) = out;
      if (d == 0) p.partial_lse[base] = lse2;
    }
  }
  LAZYATTN_TL(kTlPartial);
  if (num_splits == 1) {
    LAZYATTN_TL(kTlExit);
    return;
  }

  // ---- split-KV: the last CTA of (request, KV head) to finish merges every split's state -----
  // Writers publish their partials (fence) before counting in; the last one fences again before
  // reading, and reads through L2 (__ldcg): other multiprocessors wrote those lines.
  __threadfence();
  __syncthreads();
  int* is_last = nullptr;
  if constexpr (kTma) {
    is_last = reinterpret_cast<int*>(smem + Shape::kBarOffset + 8 * S);
  } else {
    __shared__ int is_last_static;
    is_last = &is_last_static;
  }
  if (tid == 0) {
    int* counter = p.split_counters + static_cast<std::int64_t>(b) * p.num_kv_heads + kv_head;
    int done = atomicAdd(counter, 1);
    *is_last = done == num_splits - 1;
    if (*is_last) *counter = 0;  // ready for the next launch (CUDA graph replays too)
  }
  __syncthreads();
  if (!*is_last) {
    LAZYATTN_TL(kTlExit);
    return;
  }
  __threadfence();
  const std::int64_t first = p.sched.request_partial_offset[b];
  // Each split's weight 2^(lse - max) / sum per row, one warp per row (lanes over splits,
  // shuffles), into shared memory; then the outputs four dims per thread (16-byte loads) with up
  // to kMergeBatch splits' loads in flight, the first batch issued before the weights pass so
  // that the two L2 round trips overlap. (One 4-byte load per split, eight in flight, and a
  // serial per-row reduction took about 15 us of a 55 us step at 33 splits on the H200: the
  // tail after every other CTA had finished.)
  constexpr int kMergeBatch = 16;
  float* w_s = reinterpret_cast<float*>(smem);  // [num_splits][G], in the free pipeline space
  float* row_m = w_s + num_splits * G;
  float* row_l = row_m + kRows;
  const std::int64_t split_stride = static_cast<std::int64_t>(p.num_qo_heads) * D;
  auto load_batch = [&](int i, int sp0, float4 (&v)[kMergeBatch]) {
    const float* src = p.partial_o + (first * p.num_qo_heads + kv_head * G) * D + 4 * i;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u)
      v[u] = sp0 + u < num_splits
                 ? __ldcg(reinterpret_cast<const float4*>(src + (sp0 + u) * split_stride))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  float4 v[kMergeBatch];
  if (tid < G * D / 4) load_batch(tid, 0, v);
  for (int row = warp; row < G; row += kDecodeWarps) {
    const float* lse = p.partial_lse + first * p.num_qo_heads + kv_head * G + row;
    float mx = -INFINITY;
    for (int sp = lane; sp < num_splits; sp += 32) {
      const float l = __ldcg(lse + sp * p.num_qo_heads);
      w_s[sp * G + row] = l;  // this lane's entries: read back below by the same lane
      mx = fmaxf(mx, l);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    if (mx != -INFINITY)
      for (int sp = lane; sp < num_splits; sp += 32) sum += exp2f(w_s[sp * G + row] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    // Every split empty: weights 0, output 0, lse -inf, no NaN.
    for (int sp = lane; sp < num_splits; sp += 32)
      w_s[sp * G + row] = sum > 0.0f ? exp2f(w_s[sp * G + row] - mx) / sum : 0.0f;
    if (lane == 0) {
      row_m[row] = mx;
      row_l[row] = sum;
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D / 4; i += kDecodeThreads) {
    const int row = (4 * i) / D, d = (4 * i) % D;
    const int head = kv_head * G + row;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int sp0 = 0; sp0 < num_splits; sp0 += kMergeBatch) {
      if (i != tid || sp0 != 0) load_batch(i, sp0, v);  // the first batch is in v already
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u) {
        const float w = sp0 + u < num_splits ? w_s[(sp0 + u) * G + row] : 0.0f;
        acc.x += w * v[u].x;
        acc.y += w * v[u].y;
        acc.z += w * v[u].z;
        acc.w += w * v[u].w;
      }
    }
    store4(static_cast<T*>(p.o) + (static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head) * D + d,
           acc);
    if (d == 0 && p.maybe_lse) {
      const float m_all = row_m[row], l_all = row_l[row];
      p.maybe_lse[static_cast<std::int64_t>(q_row0) * p.num_qo_heads + head] =
          l_all > 0.0f ? (m_all + log2f(l_all)) * kLn2 : -INFINITY;
    }
  }
  __syncthreads();
  LAZYATTN_TL(kTlExit);
}

}  // namespace detail

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
  // EXPERIMENTAL: load K/V tiles with the TMA unit (bulk tensor copies, one mbarrier per stage)
  // instead of 16-byte cp.async. Needs a build with LAZYATTN_EXPERIMENTAL_TMA defined; passes the
  // decode tests on the H200 but reads 5-10% slower at batch >= 16 (docs/performance.md).
  bool tma = false;
  // Programmatic dependent launch (on by default): the kernel may start while the previous kernel
  // in the stream is still running, and reads the plan, its schedule and the RoPE tables before
  // that kernel has finished (so that kernel must not write them; DevicePlan::upload's and
  // DeviceRope's copies are fine: a copy between two kernels orders them as usual); q, the K/V
  // pools, the workspace and the outputs are touched only after it has completed. false: a
  // plain launch.
  bool pdl = true;
#ifdef LAZYATTN_DECODE_TIMELINE
  unsigned long long* timeline = nullptr;  // diagnostic: [num_work * kv_heads][kTimelineEvents]
#endif
};

// Launches the decode for one layer: every request of the plan has one query, the split-KV
// scratch is the caller's (sized for the plan's schedule). No host synchronisation; capturable
// into a CUDA graph.
inline void decode(const DecodeArgs& args, const DevicePool& pool, const DevicePlan& plan,
                   const DeviceRope& rope, const DecodeScratch& scratch,
                   cudaStream_t stream = nullptr) {
  const char* w = "cuda::decode";
  const AttentionParams& ap = args.params;
  ap.check(w);
  const PoolGeometry& geo = pool.geometry();
  LAZYATTN_CHECK(ap.num_kv_heads == geo.num_kv_heads, w, ": num_kv_heads ", ap.num_kv_heads,
                 ", expected the pool's ", geo.num_kv_heads);
  LAZYATTN_CHECK(ap.head_dim == geo.head_dim, w, ": head_dim ", ap.head_dim,
                 ", expected the pool's ", geo.head_dim);
  LAZYATTN_CHECK(args.dtype == pool.dtype(), w, ": dtype ", to_string(args.dtype),
                 ", expected the pool's ", to_string(pool.dtype()));
  LAZYATTN_CHECK(args.dtype != DType::kFloat32, w,
                 ": dtype float32, expected bfloat16 or float16 (tensor-core kernels)");
  LAZYATTN_CHECK(ap.group_size() <= detail::kRows, w, ": GQA group size ", ap.group_size(),
                 " (", ap.num_qo_heads, " / ", ap.num_kv_heads, "), expected <= ", detail::kRows);
  LAZYATTN_CHECK(ap.logits_soft_cap == 0.0, w, ": logits_soft_cap ", ap.logits_soft_cap,
                 ", expected 0 (soft cap is not implemented in the CUDA kernels)");
  LAZYATTN_CHECK(args.q && args.o, w, ": q and o must be device pointers, got null");
  LAZYATTN_CHECK(reinterpret_cast<std::uintptr_t>(args.q) % 16 == 0, w,
                 ": q must be 16-byte aligned (it is read in 16-byte vectors), its address is ",
                 reinterpret_cast<std::uintptr_t>(args.q) % 16, " mod 16");
  const PlanView& pv = plan.view();
  LAZYATTN_CHECK(pv.num_queries == pv.num_requests, w, ": ", pv.num_queries, " queries for ",
                 pv.num_requests, " requests, expected one query per request");
  LAZYATTN_CHECK(pv.page_size == geo.page_size, w, ": plan page_size ", pv.page_size,
                 ", expected the pool's ", geo.page_size);
  LAZYATTN_CHECK(plan.schedule().tile_keys == detail::kDecodeTileKeys, w, ": schedule tile_keys ",
                 plan.schedule().tile_keys, ", expected ", detail::kDecodeTileKeys);
  const RopeView& rv = rope.view();
  if (args.rope) {
    rope.check_prepared(pv.num_requests, w);
    LAZYATTN_CHECK(rope.policy().head_dim() == ap.head_dim, w, ": rope head_dim ",
                   rope.policy().head_dim(), ", expected ", ap.head_dim);
    LAZYATTN_CHECK(rv.rotary_dim % (rv.interleaved ? 16 : 32) == 0, w, ": rotary_dim ",
                   rv.rotary_dim, ", expected a multiple of ", rv.interleaved ? 16 : 32,
                   " for the CUDA kernels");
    LAZYATTN_CHECK(rv.offset_rows >= detail::kDecodeTileKeys, w, ": rope offset table of ",
                   rv.offset_rows, " rows, expected >= ", detail::kDecodeTileKeys,
                   " (raw-form keys are rotated by their offsets in a tile; DeviceRope's default)");
  }
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
  p.q = args.q;
  p.o = args.o;
  p.maybe_lse = args.maybe_lse;
  p.query_rotated = args.query_rotated ? 1 : 0;
  p.k_pool = pool.k_layer(args.layer);
  p.v_pool = pool.v_layer(args.layer);
  p.page_stride = geo.page_stride();
  p.head_stride = geo.head_stride();
  p.plan = pv;
  p.sched = sv;
  p.rope = rv;
  if (args.inputs_scaled) p.rope.query_scale = 1.0f;
  p.partial_o = scratch.partial_o;
  p.partial_lse = scratch.partial_lse;
  p.split_counters = scratch.split_counters;
  p.sm_scale_log2 = static_cast<float>(ap.scale() * 1.4426950408889634);
  p.num_qo_heads = ap.num_qo_heads;
  p.num_kv_heads = ap.num_kv_heads;
  p.group_size = ap.group_size();
  int log2_page = 0;
  while ((1 << log2_page) < geo.page_size) ++log2_page;
  p.page_size_log2 = log2_page;
#ifdef LAZYATTN_DECODE_TIMELINE
  p.timeline = args.timeline;
#endif
#ifdef LAZYATTN_EXPERIMENTAL_TMA
  if (args.tma) {
    LAZYATTN_CHECK(geo.page_size >= 16, w, ": page_size ", geo.page_size,
                   " with tma = true, expected >= 16 (boxes of whole pages at 2 KiB boundaries)");
    const DevicePool::TensorMaps& maps = pool.tensor_maps();
    p.k_map = maps.k;
    p.v_map = maps.v;
    p.tma_layer_row0 = static_cast<std::int64_t>(args.layer) * geo.num_pages * geo.num_kv_heads *
                       geo.page_size;
    p.tma_page_rows = geo.num_kv_heads * geo.page_size;
    p.tma_box_rows = maps.box_rows;
  }
#else
  LAZYATTN_CHECK(!args.tma, w, ": tma = true, but this build has no TMA loader (define "
                 "LAZYATTN_EXPERIMENTAL_TMA)");
#endif

  dispatch_dtype(args.dtype, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (!std::is_same_v<E, float>) {
      using T = device_type_t<E>;
      dispatch_head_dim(ap.head_dim, w, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        auto launch = [&](auto kernel, int smem_bytes) {
          prepare_kernel(kernel, smem_bytes);
          dim3 grid(static_cast<unsigned>(sv.num_work), static_cast<unsigned>(ap.num_kv_heads));
          if (args.pdl) {
            cudaLaunchConfig_t cfg{};
            cfg.gridDim = grid;
            cfg.blockDim = dim3(detail::kDecodeThreads);
            cfg.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
            cfg.stream = stream;
            cudaLaunchAttribute attr{};
            attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr.val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            LAZYATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
          } else {
            kernel<<<grid, detail::kDecodeThreads, smem_bytes, stream>>>(p);
          }
          LAZYATTN_CUDA_CHECK_LAUNCH();
        };
        constexpr int kSmem = detail::DecodeShape<D>::kSmemBytes;
#ifdef LAZYATTN_EXPERIMENTAL_TMA
        if (args.tma) {
          constexpr int kSmemTma = detail::DecodeShape<D>::kSmemBytesTma;
          if (args.rope) launch(detail::decode_kernel<T, D, true, true>, kSmemTma);
          else launch(detail::decode_kernel<T, D, false, true>, kSmemTma);
          return;
        }
#endif
        if (!args.rope) launch(detail::decode_kernel<T, D, false, false, false>, kSmem);
        else if (plan.has_raw_segments()) launch(detail::decode_kernel<T, D, true, false, true>, kSmem);
        else launch(detail::decode_kernel<T, D, true, false, false>, kSmem);
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

}  // namespace lazyattn::cuda
