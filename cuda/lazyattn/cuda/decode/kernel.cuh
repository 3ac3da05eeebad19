// The decode kernel: paged, split-KV, GQA-packed decode with deferred RoPE on tensor cores
// (mma.sync m16n8k16).
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
//               rotated in fp32 registers by its offset in the tile (decode/scores.cuh).
// The query for a new delta is built a tile ahead into the second of two buffers, so a tile that
// changes the rotation waits at no extra barrier (below: "the rotated query").
// Plans without raw-form segments run a build without the raw-form code (kRawTiles = false):
// with it, the local-form loop runs at 255 registers and slower. kRope = false is the RoPE-off
// baseline (keys pre-rotated at logical positions, queries pre-rotated by the caller).
//
// fp8 pools (kFp8): tiles of e4m3 codes stream as 16-bit tiles of half the columns; at head dims
// 128 and 256 whole tiles come by the TMA (decode_tma: TileStream's kTma, stages on mbarriers,
// the blocked 128-byte-swizzled layout), the rest by the gather. They are dequantized in
// registers, exactly, to halves:
// the query, P and both MMAs run in half whatever T is. A K fragment register from ldmatrix
// holds four consecutive dims 4 t4 .. 4 t4 + 3 of one key, which is not the MMA's B layout
// (dims 2 t4, 2 t4 + 1 and 2 t4 + 8, 2 t4 + 9); the dot product does not care which dim pairs
// with which, so the query's A fragments take the same order (query_frag_fp8). V goes through
// ldmatrix.trans, which leaves a thread two keys of two adjacent dims; a byte permute splits them
// into the even dims' B register and the odd dims', so each MMA covers every other dim of a
// 16-dim block (merge_warps_and_store maps the columns back). K's scale, one per KV head,
// multiplies the scores; V's the output. Raw-form fp8 keys are rotated after the dequantization,
// in the same registers, in packed half math (decode/scores.cuh, scores_raw_fp8).
//
// Per CTA, in order: the first tiles' copies go out; the first query is built under them; then
// per tile: wait for it, issue the next loads, switch the query if the tile's rotation differs,
// S = Q K^T, the online softmax, O += P V, and the look-ahead (the next query, later angles);
// at the end the warps' states merge into the output rows or this split's partial state, and
// the last split of a request merges them all.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "lazyattn/cuda/decode/merge.cuh"
#include "lazyattn/cuda/decode/params.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/decode/scores.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/softmax.cuh"
#include "lazyattn/kv/types.hpp"

namespace lazyattn::cuda::detail {

template <class T, int D, bool kRope, bool kRawTiles = true, bool kFp8 = false,
          bool kPackedRot = false>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    decode_kernel(const __grid_constant__ DecodeKernelParams<kFp8, D> p) {
  static_assert(!kPackedRot || (kRawTiles && !kFp8), "packed rotation: the 16-bit raw build");
  using Shape = DecodeShape<D>;
  // The 16-bit type of the rotated query, P and the MMAs; the tiles' columns in that type.
  using TQ = std::conditional_t<kFp8, __half, T>;
  constexpr int kTileCols = kFp8 ? D / 2 : D;
  // The TMA builds read whole tiles into the blocked 128-byte-swizzled layout (decode_tma).
  constexpr bool kTma = decode_tma(kFp8, D);
  // Dynamic shared memory; the TMA builds use it from its first 1024-byte boundary, the period
  // of the swizzle the TMA writes by address (the merge's flag is static, before it). (The array
  // keeps the name, and so the symbol and alignment, it shares with the prefill kernels'
  // declarations in this namespace: renamed, their PTX changed.)
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* const sm =
      kTma ? smem + ((Shape::kAlign - ptx::smem_addr(smem) % Shape::kAlign) % Shape::kAlign)
           : smem;
  TQ* stage_base = reinterpret_cast<TQ*>(sm);
  TQ* q_rot_buf = reinterpret_cast<TQ*>(sm + Shape::kQRotOffset);             // [2][row][D]
  float2* cs_query = reinterpret_cast<float2*>(sm + Shape::kCsQueryOffset);  // [2][pair]

  ptx::launch_dependents();  // the next grid's CTAs may take SMs as this grid's leave
  const int work = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int mi = lane >> 3;  // which 8x8 matrix of an ldmatrix.x4 this lane addresses
  // This thread's share of a query rotation: a rotary pair's angles (qid < D / 2) and a 16-dim
  // chunk of a query row (fqid < G D / 16). The raw-capable build, which rotates the query at
  // every raw tile, moves them off warp 0 and apart: with G = 4 at head dim 128 the angles fall to
  // warps 1 and 2 and the query rows to warp 3, so no warp carries both while the others wait at
  // the next barrier (and the work spreads over the schedulers, which take a CTA's warps by
  // index).
  const int qid = kRawTiles ? (tid + 3 * 32) % kDecodeThreads : tid;
  const int fqid = kRawTiles ? (tid + 32) % kDecodeThreads : tid;

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
  auto stream =
      TileStream<TQ, kTileCols, kDecodeThreads, S, kTma, kTma>::template for_head<kFp8 ? 2 : 1>(
          p, kv_head, tile_end, tid, stage_base);
  if constexpr (kTma) {
    stream.with_tma(p, kv_head, tid, ptx::smem_addr(sm + Shape::kBarOffset));
    stream.init_barriers();
    __syncthreads();
  }
  // The records of the tile computed in this iteration and the next one (with the ring, only
  // for the first query). The raw-capable build without the ring keeps one more (`after`), so
  // that the look-ahead angles at the end of an iteration read a record two tiles ahead loaded
  // an iteration before, not in that iteration.
  TileInfo cur, next, after;
  // The local build loads the first records, and the frequency of the one rotary pair whose
  // angles this thread computes (pair tid: D / 2 <= 128 pairs), before the grid-dependency wait,
  // so that the first query's angles wait on no load after the tiles go out; it holds that
  // frequency throughout. (The raw-capable build, at 255 registers, spilled holding it.)
  constexpr bool kEarly = kRope && !kRawTiles;
  static_assert(D / 2 <= kDecodeThreads, "decode: one rotary pair per thread");
  std::uint64_t my_turns = 0;
  auto turns_of = [&](int j) -> std::uint64_t {
    if constexpr (kEarly) return my_turns;  // j == qid
    else return turns[j];
  };
  // The raw-capable build's loop reads the records from a ring in shared memory instead
  // (kRecordRing slots, tile t in slot t % 8): record t is cp.async'd in the commit group of
  // tile t - kAhead's step, so that at tile t's wait records up to t + S are in place (what the
  // stream's step needs). No record then stays live across iterations (about 40 registers in
  // this build), and none is waited on from L2: ptxas moved the stream's look-ahead load into a
  // uniform register right after issuing it, and that wait was 18% of the raw loop's stall
  // samples (Nsight Compute, batch 16 x 16384).
  constexpr bool kRing = kRawTiles && S == 3;  // at D = 256 (two stages) it spilled
  constexpr int kAhead = 2 * S - 1;
  static_assert(kAhead < kRecordRing, "decode: record ring too small");
  TileInfo* ring = reinterpret_cast<TileInfo*>(sm + Shape::kRecordOffset);
  auto ring_copy = [&](int t) {  // threads 0 and 1, a 16-byte half each
    if (tid < 2 && t < tile_end)
      ptx::cp_async_16(ptx::smem_addr(ring + t % kRecordRing) + 16 * tid,
                       reinterpret_cast<const char*>(p.sched.tiles + t) + 16 * tid);
  };
  auto ring_read = [&](int t) {  // past the end: no keys (as TileStream::info)
    TileInfo r;
    if (t < tile_end) r = ring[t % kRecordRing];
    return r;
  };
  auto load_records = [&] {
    cur = stream.info(tile_begin);
    next = stream.info(tile_begin + 1);
    if constexpr (kRawTiles && !kRing) after = stream.info(tile_begin + 2);
  };
  // The first tiles go out before anything else: their latency hides the query setup.
  // Under programmatic dependent launch (DecodeArgs::pdl) everything before the grid-dependency
  // wait reads only the plan, schedule and RoPE tables; q, K/V, the workspace and the outputs
  // are touched after the grid this one follows has completed.
  auto before_wait = [&] {
    if constexpr (kRing) {  // into the first commit group
      for (int t = tile_begin; t < tile_begin + kAhead; ++t) ring_copy(t);
    }
    if constexpr (kEarly) {
      load_records();
      if (qid < rot_half) my_turns = turns[qid];
    }
  };
  stream.prefetch_records(tile_begin, tid);
  stream.start(tile_begin, [&] {
    before_wait();
    ptx::grid_dependency_wait();
  });
  if constexpr (!kEarly) load_records();
  // fp8: the scales of this KV head (read after the grid-dependency wait, as the pools are).
  const float k_scale = kFp8 ? p.k_scale[kv_head] : 1.0f;
  const float v_scale = kFp8 ? p.v_scale[kv_head] : 1.0f;

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
  const float2* offset_table =
      p.rope.offset_cs + static_cast<std::int64_t>(rope_set) * p.rope.offset_rows * rot_half;
  // Packed for a rotation in packed 16-bit math (decode/scores.cuh): fp8 codes always (in half),
  // 16-bit keys where the launch asks for it (kPackedRot, opt-in); else fp32 per pair.
  using AnglesPacked = std::conditional_t<
      kFp8, __half2, std::conditional_t<kPackedRot, typename Packed2<T>::type, void>>;
  const RawKeyAngles<D, kRope && kRawTiles, AnglesPacked, kFp8> key_cs(offset_table, warp, g, t4,
                                                                       rotary, interleaved);

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
  const int fq_row = fqid / (D / 16), fq_u = fqid % (D / 16);
  const bool fq_owner = fqid < kPairChunks && fq_row < G;  // holds a real query chunk
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
    for (int j = qid; j < rot_half; j += kDecodeThreads) {
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
        xow[w] = ptx::pack2<TQ>(x.x, x.y);
        yow[w] = ptx::pack2<TQ>(y.x, y.y);
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
        xow[w] = ptx::pack2<TQ>(x.x, x.y);
        yow[w] = ptx::pack2<TQ>(y.x, y.y);
      }
    }
    TQ* dst = q_rot_at(buf);
    *reinterpret_cast<uint4*>(dst + swizzle<D>(fq_row, fq_a >> 3)) = xo;
    *reinterpret_cast<uint4*>(dst + swizzle<D>(fq_row, fq_b >> 3)) = yo;
  };
  // Element by element (any layout, RoPE off too), into buffer buf: two barriers.
  auto build_general = [&](int buf, std::int64_t delta) {
    if (kRope) {
      for (int j = qid; j < rot_half; j += kDecodeThreads)
        cs_query[j] = rope_cos_sin(delta, turns_of(j));
      cs_tag0 = kNoDelta;  // unscaled: not for build_fast
    }
    __syncthreads();
    TQ* dst = q_rot_at(buf);
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
      dst[swizzle<D>(row, d >> 3) + (d & 7)] = ptx::from_f32<TQ>(v * p.sm_scale_log2);
    }
    __syncthreads();
  };
  // fp8: k-step kk's A fragments in the K fragments' dim order: a[0], a[2] take dims
  // 16 kk + 4 t4 + {0, 1} and {2, 3} of row g (a[1], a[3] of row g + 8). Four 4-byte loads, not
  // two 8-byte ones: a pair loaded together sits in two adjacent registers, (a[0], a[2]), and
  // ptxas copied all four into a fresh quad (a[0] .. a[3]) before every MMA (64 moves per warp
  // and tile in the local build, Nsight Compute on an H100).
  auto query_frag_fp8 = [&](std::uint32_t (&a)[4], const TQ* src, int kk) {
    const int chunk = 2 * kk + (t4 >> 1), within = (4 * t4) & 7;
    const std::uint32_t* r0 =
        reinterpret_cast<const std::uint32_t*>(src + swizzle<D>(g, chunk) + within);
    const std::uint32_t* r1 =
        reinterpret_cast<const std::uint32_t*>(src + swizzle<D>(g + 8, chunk) + within);
    a[0] = r0[0];
    a[1] = r1[0];
    a[2] = r0[1];
    a[3] = r1[1];
  };
  // The query of buffer buf into the A fragments (registers up to D = 128).
  auto load_query = [&](int buf) {
    if constexpr (kQRegs) {
      const TQ* src = q_rot_at(buf);
#pragma unroll
      for (int kk = 0; kk < Shape::kKSteps; ++kk) {
        if constexpr (kFp8) {
          query_frag_fp8(qa[kk], src, kk);
        } else {
          int row = (mi & 1) * 8 + (lane & 7);
          ptx::ldmatrix_x4(qa[kk], ptx::smem_addr(src + swizzle<D>(row, 2 * kk + (mi >> 1))));
        }
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
      if (fqid < kPairChunks) {
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
    if constexpr (kTma) stream.wait(it % S, it / S);
    else ptx::cp_async_wait<S - 2>();
    __syncthreads();
    TileInfo ti;
    if constexpr (kRing) {
      stream.step_with(tile, it, ring_read(tile + S - 1), ring_read(tile + S),
                       [&] { ring_copy(tile + kAhead); });
      ti = ring_read(tile);
    } else {
      stream.step(tile, it);
      ti = cur;
      cur = next;
      if constexpr (kRawTiles) {
        next = after;
        after = stream.info(tile + 3);
      } else {
        next = stream.info(tile + 2);
      }
    }

    const bool raw = kRope && kRawTiles && ti.form == kRawForm;
    // ---- the query for this tile's rotation (built during the last tile, normally) ------------
    if (kRope) {
      const std::int64_t delta = tile_delta(ti);
      if (delta != q_delta) use_query(delta, tile & 1);
    }

    const TQ* ks = stream.k_stage(it % S);
    const TQ* vs = stream.v_stage(it % S);
    // Element (row, 16-byte chunk) of a K or V tile in the loader's layout.
    auto kv_offset = [](int row, int chunk) {
      if constexpr (kTma) return blocked_swizzle<kTileCols, kDecodeTileKeys>(row, chunk);
      else return swizzle<kTileCols>(row, chunk);
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
      } else if constexpr (kFp8) {
        query_frag_fp8(a, q_rot_at(qbuf), kk);
      } else {
        int row = (mi & 1) * 8 + (lane & 7);
        ptx::ldmatrix_x4(a, ptx::smem_addr(q_rot_at(qbuf) + swizzle<D>(row, 2 * kk + (mi >> 1))));
      }
    };
    if constexpr (kFp8) {
      // One ldmatrix.x4 per two k-steps: matrix mi is keys 8 (mi & 1) .. + 7 of this warp's 16,
      // k-step 2 k2 + (mi >> 1) (a 16-byte chunk of 16 codes).
      const int row = warp * 16 + (mi & 1) * 8 + (lane & 7);
      if (raw) {
        if constexpr (kRope && kRawTiles) {  // k-steps ca (matrices 0, 1) and cb (2, 3)
          auto load_k2 = [&](std::uint32_t (&kr)[4], int ca, int cb) {
            ptx::ldmatrix_x4(kr, ptx::smem_addr(ks + kv_offset(row, (mi >> 1) ? cb : ca)));
          };
          scores_raw_fp8<D>(sc, key_cs, load_k2, q_frag, rotary, interleaved);
        }
      } else {  // k-steps 2 k2 (matrices 0, 1) and 2 k2 + 1 (2, 3)
        scores_fp8<D>(sc, [&](std::uint32_t (&kr)[4], int k2) {
          ptx::ldmatrix_x4(kr, ptx::smem_addr(ks + kv_offset(row, 2 * k2 + (mi >> 1))));
        }, q_frag);
      }
      // K's scale multiplies the scores inside the softmax (online_softmax_row's score_scale).
    } else if (!raw) {
      scores_rotated<TQ, D>(sc, load_k, q_frag);
    } else if constexpr (kRope && kRawTiles) {
      scores_raw<T, D, kPackedRot>(sc, key_cs, load_k, q_frag, rotary, interleaved);
    }

    // ---- online softmax over this warp's keys (scores are already in log2 units) -------------
    // Only a segment's last tile has rows past its keys (a uniform branch).
    if (ti.rows < kDecodeTileKeys) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int key = warp * 16 + nt * 8 + 2 * t4 + (e & 1);
          if (key >= ti.rows) sc[nt][e] = -INFINITY;
        }
      }
    }
    float scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      scale[h] = online_softmax_row<2, kFp8>(
          [&](int n, int e) -> float& { return sc[n][2 * h + e]; }, row_max[h], row_sum[h],
          k_scale);
    if (warp_needs_rescale(scale[0], scale[1])) {  // rare after the first tiles
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][0] *= scale[0];
        acc[n][1] *= scale[0];
        acc[n][2] *= scale[1];
        acc[n][3] *= scale[1];
      }
    }

    // ---- O += P V ------------------------------------------------------------------------------
    std::uint32_t pa[4] = {ptx::pack2<TQ>(sc[0][0], sc[0][1]), ptx::pack2<TQ>(sc[0][2], sc[0][3]),
                           ptx::pack2<TQ>(sc[1][0], sc[1][1]), ptx::pack2<TQ>(sc[1][2], sc[1][3])};
    const int v_row = warp * 16 + (mi & 1) * 8 + (lane & 7);
    if constexpr (kFp8) {
      // Chunks c, c + 1 (16 dims each); matrix 2 j + h is keys 8 h .. 8 h + 7 of chunk c + j,
      // and holds for this thread keys 2 t4, 2 t4 + 1 (+ 8 h) of dims 2 g, 2 g + 1 (bytes
      // [key 2 t4: dim 2 g, 2 g + 1][key 2 t4 + 1: ...]). The even dims' B fragment takes bytes
      // 0 and 2 of both matrices, the odd dims' bytes 1 and 3: acc[2 c'] then holds dims
      // 16 c' + 2 n, acc[2 c' + 1] dims 16 c' + 2 n + 1.
#pragma unroll
      for (int c = 0; c < D / 16; c += 2) {
        std::uint32_t vr[4];
        ptx::ldmatrix_x4_trans(vr, ptx::smem_addr(vs + kv_offset(v_row, c + (mi >> 1))));
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const std::uint32_t even = __byte_perm(vr[2 * j], vr[2 * j + 1], 0x6420);
          const std::uint32_t odd = __byte_perm(vr[2 * j], vr[2 * j + 1], 0x7531);
          ptx::mma_16816<TQ>(acc[2 * (c + j)], pa, ptx::e4m3x2_to_half2(even),
                             ptx::e4m3x2_to_half2(even >> 16));
          ptx::mma_16816<TQ>(acc[2 * (c + j) + 1], pa, ptx::e4m3x2_to_half2(odd),
                             ptx::e4m3x2_to_half2(odd >> 16));
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < D / 8; c += 2) {
        std::uint32_t vb[4];
        ptx::ldmatrix_x4_trans(vb, ptx::smem_addr(vs + kv_offset(v_row, c + (mi >> 1))));
        ptx::mma_16816<TQ>(acc[c], pa, vb[0], vb[1]);
        ptx::mma_16816<TQ>(acc[c + 1], pa, vb[2], vb[3]);
      }
    }

    // ---- ahead: the next tile's query, the angles of the one after --------------------------
    // Written now, read after the next iteration's first barrier. The next tile's query goes
    // into the other buffer (nobody reads it: the current query's fragments come from qbuf),
    // from angles computed a tile ago; the angles for the tile after that go into the angle
    // buffer this tile's query was built from (read before this iteration's first barrier, or
    // before use_query's last one).
    if (fast_query && tile + 1 < tile_end) {
      const std::int64_t d1 = tile_delta(kRing ? ring_read(tile + 1) : cur);
      if constexpr (!kRawTiles) {
        // Local build: only the next tile's record (loaded an iteration ago), its angles
        // computed here when its segment differs (waiting on the tile after next's record,
        // loaded this iteration, would be the local build's largest stall). Angle
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
          const std::int64_t d2 = tile_delta(kRing ? ring_read(tile + 2) : next);
          if (d2 != d1 && cs_tag(tile & 1) != d2) precompute_angles(tile & 1, d2);
        }
      }
    }
  }

  const int num_splits = p.sched.request_num_splits[b];
  merge_warps_and_store<T, D, kFp8>(p, sm, acc, row_max, row_sum, num_splits,
                                    p.sched.request_partial_offset[b] + split, kv_head, q_row0,
                                    v_scale);
  if (num_splits == 1) return;
  merge_splits<T, D>(p, sm, b, num_splits, kv_head, q_row0);
}

}  // namespace lazyattn::cuda::detail
