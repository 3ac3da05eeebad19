// Thin wrappers over the PTX the kernels use: cp.async, ldmatrix/stmatrix, mma.sync m16n8k16,
// packing.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
//   A 16x16 row-major: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
//   B 16x8 column:     b0 (k 2t..2t+1, n g) b1 (k 2t+8.., n g)
//   C 16x8 fp32:       c0,c1 (g, 2t..2t+1) c2,c3 (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace lazyattn::cuda::ptx {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy, bypassing L1. With valid = false the destination is zero-filled
// and the source is not read (it must still be a legal address expression, not dereferenced).
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid = true) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Programmatic dependent launch (sm_90). grid_dependency_wait: returns once the grid this one
// follows in the stream has completed and its writes are visible (at once when the launch did not
// allow overlap). launch_dependents: the next grid in the stream may start launching.
__device__ __forceinline__ void grid_dependency_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
// The global nanosecond timer (%globaltimer), for diagnostics and tests.
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Barrier kId (1..15; 0 is __syncthreads') over kCount threads, a multiple of 32. Immediate
// operands: with a register id, ptxas reserves all 16 barriers for the kernel.
template <int kId, int kCount>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(kId >= 1 && kId < 16 && kCount % 32 == 0, "named barrier");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
// Arrives at barrier kId (kCount threads in all, some of them waiting in bar.sync) without
// waiting: the producer side of a named-barrier handshake.
template <int kId, int kCount>
__device__ __forceinline__ void named_barrier_arrive() {
  static_assert(kId >= 1 && kId < 16 && kCount % 32 == 0, "named barrier");
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
// Hopper: sets this warpgroup's registers per thread to N (every warp of the warpgroup executes
// it). A kernel built for 384 threads at 168 registers gives a loading warpgroup 24 and two
// computing warpgroups 240 (24 + 2 * 240 = 3 * 168); ptxas allocates the code after each
// instruction within its N.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The inverse of ldmatrix_x4: the same four 8x8 matrices, the same per-lane row addresses.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t addr, const std::uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// D += A * B with fp32 accumulation; T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two fp8 e4m3 codes (bits 0-7 and 8-15 of x) as two halves in one register, the low byte's in
// the low half. Exact: every e4m3 value is a normal half. sm_89 and later.
__device__ __forceinline__ std::uint32_t e4m3x2_to_half2(std::uint32_t x) {
  std::uint32_t r;
  const unsigned short pair = static_cast<unsigned short>(x);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(pair));
  return r;
}

// 2^x in one MUFU.EX2 (ex2.approx.ftz: relative error about 2^-22, denormals flushed); -inf -> 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded (nearest even) into one 32-bit register of two 16-bit elements, lo first.
template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
}

template <class T>
__device__ __forceinline__ float2 unpack2(std::uint32_t r) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // A bf16 is the top half of its float: one shift and one mask (the intrinsic's byte
    // permute and shift take three instructions for the pair).
    return make_float2(__uint_as_float(r << 16), __uint_as_float(r & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<__half2*>(&r));
  }
}

template <class T>
__device__ __forceinline__ float to_f32(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

template <class T>
__device__ __forceinline__ T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

}  // namespace lazyattn::cuda::ptx
