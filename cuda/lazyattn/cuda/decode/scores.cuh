// The decode's scores: S = Q K^T of one warp's 16 keys of a tile, for keys stored rotated (local
// form, or RoPE off) and for raw-form keys, which are rotated in fp32 registers by their offset in
// the tile on the way from shared memory to the MMA:
//   <R(m) q, R(n0 + r) k> = <R(m - n0) q, R(r) k>,  r = n - n0 < 64,
// where the query was rotated by m - n0 for the tile. R(r) is the same for every tile, so each
// thread keeps the cos/sin of its two keys' offsets (RawKeyAngles) and the loop has no angle work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "lazyattn/cuda/decode/params.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/rope.cuh"

namespace lazyattn::cuda::detail {

// Two rotary pairs' cos and sin, packed (P: __half2 or __nv_bfloat162), for the rotation of two
// pairs in packed 16-bit math (rotate2).
template <class P>
struct PackedAngles {
  P c, s;
};
template <class T>
struct Packed2;
template <>
struct Packed2<__half> {
  using type = __half2;
  static __device__ __forceinline__ type make(float lo, float hi) {
    return __floats2half2_rn(lo, hi);
  }
};
template <>
struct Packed2<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type make(float lo, float hi) {
    return __floats2bfloat162_rn(lo, hi);
  }
};

// (x, y) of two pairs, packed in two registers of P, <- (x c - y s, x s + y c): four HMUL2/HFMA2
// where unpacking to fp32 takes fourteen instructions. Each product and fma rounds to P.
template <class P>
__device__ __forceinline__ void rotate2(std::uint32_t& x, std::uint32_t& y,
                                        const PackedAngles<P>& a) {
  P hx, hy;
  memcpy(&hx, &x, 4);
  memcpy(&hy, &y, 4);
  const P nx = __hfma2(hx, a.c, __hneg2(__hmul2(hy, a.s)));
  const P ny = __hfma2(hx, a.s, __hmul2(hy, a.c));
  memcpy(&x, &nx, 4);
  memcpy(&y, &ny, 4);
}
// Two interleaved pairs, one per register ((x0, y0) and (x1, y1)), the same way: gathered into
// (x0, x1) and (y0, y1) by byte permutes and put back after.
template <class P>
__device__ __forceinline__ void rotate2_interleaved(std::uint32_t& r0, std::uint32_t& r1,
                                                    const PackedAngles<P>& a) {
  std::uint32_t x = __byte_perm(r0, r1, 0x5410), y = __byte_perm(r0, r1, 0x7632);
  rotate2(x, y, a);
  r0 = __byte_perm(x, y, 0x5410);
  r1 = __byte_perm(x, y, 0x7632);
}

// cos/sin of this thread's two keys' offsets in a tile, per rotary pair its B fragments hold:
// keys r = 16 warp + g and r + 8. Entry e of a key (a float2, Packed = void):
//   rotate-half: k-step kk = e / 4 of the first half, dims j = 16 kk + 2 t4 + {0, 1, 8, 9}
//                (pairs j, partners j + rotary/2);
//   interleaved: k-step kk = e / 2, pairs 8 kk + t4 + {0, 4}.
// Packed (__half2 or __nv_bfloat162): entry E packs float entries 2 E and 2 E + 1 as
// PackedAngles, for rotate2 (two pairs of one register each, rotate-half) or rotate2_interleaved
// (a k-step's two registers). kFp8 (the fp8 decode, packed in half: a k-step's register holds
// dims 16 kk + 4 t4 .. + 3 of a key, see kernel.cuh): entry E is pairs j0, j0 + 1,
//   rotate-half: E = 2 kk + h of the first half's k-steps, j0 = 16 kk + 4 t4 + 2 h;
//   interleaved: E = kk, j0 = 8 kk + 2 t4 (dims 2 j0 .. 2 j0 + 3).
// In registers up to D = 128 (loaded once, before the first tile, their latency hidden under the
// first tiles'; packed: half the registers); at 256 read from the offset table (L1/L2) at each
// use.
template <int D, bool kLoad, class Packed = void, bool kFp8 = false>
struct RawKeyAngles {
  static constexpr bool kPacked = !std::is_void_v<Packed>;
  static_assert(!kFp8 || std::is_same_v<Packed, __half2>, "fp8: angles packed in half");
  using P = std::conditional_t<kPacked, Packed, __half2>;
  using Entry = std::conditional_t<kPacked, PackedAngles<P>, float2>;
  static constexpr bool kInRegisters = DecodeShape<D>::kKeyCsInRegisters;
  static constexpr int kEntries = kPacked ? D / 16 : D / 8;
  const float2* offset_table;  // [offset][pair] of this request's schedule
  int row, t4, rot_steps, half_steps, rot_half;
  bool interleaved;
  Entry reg[kInRegisters ? 2 : 1][kInRegisters ? kEntries : 1] = {};

  __device__ __forceinline__ RawKeyAngles(const float2* table, int warp, int g, int t4_,
                                          int rotary, bool interleaved_)
      : offset_table(table), row(warp * 16 + g), t4(t4_), rot_steps(rotary / 16),
        half_steps(rotary / 32), rot_half(rotary / 2), interleaved(interleaved_) {
    if constexpr (kLoad && kInRegisters) {
#pragma unroll
      for (int key = 0; key < 2; ++key)
#pragma unroll
        for (int e = 0; e < kEntries; ++e) reg[key][e] = load(key, e);
    }
  }
  // Float entry e of key `key` (the 16-bit fragments' layout).
  __device__ __forceinline__ float2 pair_angle(int key, int e) const {
    const int r = row + 8 * key;
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
  }
  __device__ __forceinline__ Entry load(int key, int e) const {
    if constexpr (!kPacked) {
      return pair_angle(key, e);
    } else {
      float2 a, b;
      if constexpr (kFp8) {
        const int j0 = interleaved ? 8 * e + 2 * t4 : 16 * (e >> 1) + 4 * t4 + 2 * (e & 1);
        const bool valid = interleaved ? e < rot_steps : (e >> 1) < half_steps;
        const float2* at = offset_table + (row + 8 * key) * rot_half + j0;
        a = valid ? __ldg(at) : make_float2(1.0f, 0.0f);
        b = valid ? __ldg(at + 1) : make_float2(1.0f, 0.0f);
      } else {
        a = pair_angle(key, 2 * e);
        b = pair_angle(key, 2 * e + 1);
      }
      using M = Packed2<std::conditional_t<std::is_same_v<P, __half2>, __half, __nv_bfloat16>>;
      return Entry{M::make(a.x, b.x), M::make(a.y, b.y)};
    }
  }
  // key and e compile-time in unrolled loops
  __device__ __forceinline__ Entry operator()(int key, int e) const {
    if constexpr (kInRegisters) return reg[key][e];
    else return load(key, e);
  }
};

// S of keys stored rotated: fragment(a, kk) gives k-step kk of the query, load_k(kb, kk) of the
// keys.
template <class T, int D, class LoadK, class Fragment>
__device__ __forceinline__ void scores_rotated(float (&sc)[2][4], LoadK&& load_k,
                                               Fragment&& fragment) {
#pragma unroll
  for (int kk = 0; kk < DecodeShape<D>::kKSteps; ++kk) {
    std::uint32_t kb[4], a[4];
    load_k(kb, kk);
    fragment(a, kk);
    ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
    ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
  }
}

// S of fp8 keys stored rotated (decode/kernel.cuh): load_k2(kr, k2) brings k-steps 2 k2 and
// 2 k2 + 1 of the warp's keys as e4m3 codes in one ldmatrix.x4 (a register: dims 4 t4 ..
// 4 t4 + 3 of one key, the order fragment(a, kk) gives the query in), converted to half pairs
// for the MMA.
template <int D, class LoadK2, class Fragment>
__device__ __forceinline__ void scores_fp8(float (&sc)[2][4], LoadK2&& load_k2,
                                           Fragment&& fragment) {
#pragma unroll
  for (int k2 = 0; k2 < DecodeShape<D>::kKSteps / 2; ++k2) {
    std::uint32_t kr[4];
    load_k2(kr, k2);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      std::uint32_t a[4];
      fragment(a, 2 * k2 + j);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const std::uint32_t r = kr[nt + 2 * j];
        ptx::mma_16816<__half>(sc[nt], a, ptx::e4m3x2_to_half2(r), ptx::e4m3x2_to_half2(r >> 16));
      }
    }
  }
}

// Rotates the pairs (x_reg's halves, y_reg's halves) by c0, c1: dims j, j + 1 of a rotate-half
// first half and their partners.
template <class T>
__device__ __forceinline__ void rotate_half_regs(std::uint32_t& x_reg, std::uint32_t& y_reg,
                                                 float2 c0, float2 c1) {
  float2 xv = ptx::unpack2<T>(x_reg), yv = ptx::unpack2<T>(y_reg);
  rotate_pair(xv.x, yv.x, c0);
  rotate_pair(xv.y, yv.y, c1);
  x_reg = ptx::pack2<T>(xv.x, xv.y);
  y_reg = ptx::pack2<T>(yv.x, yv.y);
}
// Rotates the interleaved pair in one register.
template <class T>
__device__ __forceinline__ void rotate_interleaved_reg(std::uint32_t& reg, float2 c) {
  float2 v = ptx::unpack2<T>(reg);
  rotate_pair(v.x, v.y, c);
  reg = ptx::pack2<T>(v.x, v.y);
}

// S of raw-form keys, each rotated by its offset in the tile (`angles`) between ldmatrix and
// mma: the interleaved layout in place; rotate-half with every dim rotary, k-step kk's partners
// in kk + kKSteps / 2; partial rotary dims, partners half_steps further (not a compile-time
// step: the raw-capable build reads the query fragments from shared memory, so `fragment` takes
// it). kPacked: two pairs per rotation in packed 16-bit math (rotate2; key_cs packed as T2), else
// each pair in fp32.
template <class T, int D, bool kPacked = false, class Angles, class LoadK, class Fragment>
__device__ __forceinline__ void scores_raw(float (&sc)[2][4], Angles&& key_cs,
                                           LoadK&& load_k, Fragment&& fragment, int rotary,
                                           bool interleaved) {
  constexpr int kKSteps = DecodeShape<D>::kKSteps;
  const int rot_steps = rotary / 16;  // k-steps that hold rotary dims
  const int half_steps = rot_steps / 2;
  // Rotate-half: pairs of float entries e, e + 1 (e even) of `key`, firsts in x, partners in y.
  auto half_pairs = [&](std::uint32_t& x, std::uint32_t& y, int key, int e) {
    if constexpr (kPacked) rotate2(x, y, key_cs(key, e / 2));
    else rotate_half_regs<T>(x, y, key_cs(key, e), key_cs(key, e + 1));
  };
  // Interleaved: float entries e, e + 1 (e even) of `key`, one pair in each register.
  auto interleaved_pairs = [&](std::uint32_t& r0, std::uint32_t& r1, int key, int e) {
    if constexpr (kPacked) {
      rotate2_interleaved(r0, r1, key_cs(key, e / 2));
    } else {
      rotate_interleaved_reg<T>(r0, key_cs(key, e));
      rotate_interleaved_reg<T>(r1, key_cs(key, e + 1));
    }
  };
  if (interleaved) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      std::uint32_t kb[4], a[4];
      load_k(kb, kk);
      if (kk < rot_steps) {
        interleaved_pairs(kb[0], kb[1], 0, 2 * kk);
        interleaved_pairs(kb[2], kb[3], 1, 2 * kk);
      }
      fragment(a, kk);
      ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
      ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
    }
  } else if (rotary == D) {
    constexpr int kH = kKSteps / 2;
#pragma unroll
    for (int kk = 0; kk < kH; ++kk) {
      std::uint32_t kb[4], kp[4], a[4], ap[4];
      load_k(kb, kk);
      load_k(kp, kk + kH);
      half_pairs(kb[0], kp[0], 0, 4 * kk);
      half_pairs(kb[1], kp[1], 0, 4 * kk + 2);
      half_pairs(kb[2], kp[2], 1, 4 * kk);
      half_pairs(kb[3], kp[3], 1, 4 * kk + 2);
      fragment(a, kk);
      fragment(ap, kk + kH);
      ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
      ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
      ptx::mma_16816<T>(sc[0], ap, kp[0], kp[1]);
      ptx::mma_16816<T>(sc[1], ap, kp[2], kp[3]);
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      if (kk >= half_steps && kk < rot_steps) continue;  // done with its partner
      std::uint32_t kb[4], a[4];
      load_k(kb, kk);
      if (kk < half_steps) {
        std::uint32_t kp[4], ap[4];
        load_k(kp, kk + half_steps);
        const int e = 4 * (kk < kKSteps / 2 ? kk : 0);  // kk < half_steps <= kKSteps / 2
        half_pairs(kb[0], kp[0], 0, e);
        half_pairs(kb[1], kp[1], 0, e + 2);
        half_pairs(kb[2], kp[2], 1, e);
        half_pairs(kb[3], kp[3], 1, e + 2);
        fragment(ap, kk + half_steps);
        ptx::mma_16816<T>(sc[0], ap, kp[0], kp[1]);
        ptx::mma_16816<T>(sc[1], ap, kp[2], kp[3]);
      }
      fragment(a, kk);
      ptx::mma_16816<T>(sc[0], a, kb[0], kb[1]);
      ptx::mma_16816<T>(sc[1], a, kb[2], kb[3]);
    }
  }
}

// S of raw-form keys of an fp8 pool: the codes of k-step kk (16 dims) of key r come as one
// register per key, dims 16 kk + 4 t4 .. + 3 (load_k2(kr, ca, cb): kr[nt] k-step ca of key
// 16 warp + 8 nt + g, kr[2 + nt] k-step cb), dequantized exactly to two half2 B registers
// (dims 4 t4, 4 t4 + 1 and 4 t4 + 2, 4 t4 + 3, the order the query's fragments take) and rotated
// there by the key's offset in the tile in packed half math, two pairs per four instructions
// (RawKeyAngles<D, load, __half2, true>). A rotate-half partner lies rotary / 32 k-steps further at the same place in
// its register (rotary is a multiple of 32), so one ldmatrix.x4 brings a k-step and its
// partners; interleaved pairs, one per register, go through rotate2_interleaved as the 16-bit
// kernel's do. The K scale multiplies the scores afterwards (rotation is
// linear).
template <int D, class Angles, class LoadK2, class Fragment>
__device__ __forceinline__ void scores_raw_fp8(float (&sc)[2][4], Angles&& key_cs,
                                               LoadK2&& load_k2, Fragment&& fragment, int rotary,
                                               bool interleaved) {
  constexpr int kKSteps = DecodeShape<D>::kKSteps;
  const int rot_steps = rotary / 16;  // k-steps that hold rotary dims
  const int half_steps = rot_steps / 2;
  auto dequant = [](std::uint32_t codes, std::uint32_t& lo, std::uint32_t& hi) {
    lo = ptx::e4m3x2_to_half2(codes);
    hi = ptx::e4m3x2_to_half2(codes >> 16);
  };
  if (interleaved) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; kk += 2) {
      std::uint32_t kr[4];
      load_k2(kr, kk, kk + 1);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        std::uint32_t a[4];
        fragment(a, kk + j);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          std::uint32_t lo, hi;  // pairs j0 and j0 + 1, one per register
          dequant(kr[2 * j + nt], lo, hi);
          if (kk + j < rot_steps) rotate2_interleaved(lo, hi, key_cs(nt, kk + j));
          ptx::mma_16816<__half>(sc[nt], a, lo, hi);
        }
      }
    }
  } else {
    // k-step kk with its partners' k-step pk: both rotated, two MMAs per key group.
    auto rotated_pair = [&](int kk, int pk) {
      std::uint32_t kr[4], a[4], ap[4];
      load_k2(kr, kk, pk);
      fragment(a, kk);
      fragment(ap, pk);
      const int e = 2 * (kk < kKSteps / 2 ? kk : 0);  // kk < pk <= kKSteps / 2 + kk
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        std::uint32_t xl, xh, yl, yh;
        dequant(kr[nt], xl, xh);
        dequant(kr[2 + nt], yl, yh);
        rotate2(xl, yl, key_cs(nt, e));
        rotate2(xh, yh, key_cs(nt, e + 1));
        ptx::mma_16816<__half>(sc[nt], a, xl, xh);
        ptx::mma_16816<__half>(sc[nt], ap, yl, yh);
      }
    };
    if (rotary == D) {
#pragma unroll
      for (int kk = 0; kk < kKSteps / 2; ++kk) rotated_pair(kk, kk + kKSteps / 2);
    } else {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        if (kk < half_steps) {
          rotated_pair(kk, kk + half_steps);
        } else if (kk >= rot_steps) {  // past the rotary dims (the others: done with a partner)
          std::uint32_t kr[4], a[4];
          load_k2(kr, kk, kk);
          fragment(a, kk);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            std::uint32_t lo, hi;
            dequant(kr[nt], lo, hi);
            ptx::mma_16816<__half>(sc[nt], a, lo, hi);
          }
        }
      }
    }
  }
}

}  // namespace lazyattn::cuda::detail
