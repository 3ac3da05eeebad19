// Hopper warpgroup MMA (wgmma) building blocks: shared-memory matrix descriptors for the layouts
// the TMA's 128-byte swizzle writes, the fence / commit / wait protocol, and m64n64k16 with A from
// shared memory or from registers, and m64n128k16. Used by the Hopper prefill
// (prefill/wgmma_ws.cuh); tests/cuda/test_wgmma.cu ([cuda][hopper]) checks each form against a
// CPU product.
//
// Layouts (16-bit elements, tiles at 1024-byte boundaries):
//   K-major operand (A [M][K] or B [N][K], K contiguous), as the TMA writes a [rows][D] tile in
//   D/64 column blocks of [rows][64] with the 128-byte swizzle (chunk ^ row % 8): 8-row x 128-byte
//   atoms; descriptor SBO = 1024 (8 rows), LBO unused; k-step kk of 16 elements starts at
//   block (kk / 4) + 32 bytes x (kk % 4).
//   MN-major B (B [K][N], N contiguous: V [keys][D] for P V), the same storage: atoms of 8 K-rows x
//   64 N-elements; descriptor SBO = 1024 (the next 8 K-rows), LBO = the column block's size (the
//   next 64 N-elements); k-step kk starts 16 rows (2048 bytes) further.
// Accumulator of m64nNk16: warp w of the warpgroup holds rows 16w..16w+15; thread (g = lane / 4,
// t = lane % 4) holds, for each 8-column block j, d[4j], d[4j+1] at (16w + g, 8j + 2t, +1) and
// d[4j+2], d[4j+3] at (16w + g + 8, 8j + 2t, +1): mma.sync's C layout, N/8 times.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace lazyattn::cuda::ptx {

// A wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets (all
// in 16-byte units, 14 bits), base offset 0 (tiles at 1024-byte boundaries), and the swizzle mode
// (1: 128-byte).
__device__ __forceinline__ std::uint64_t wgmma_desc(std::uint32_t smem_addr, std::uint32_t lbo_bytes,
                                                   std::uint32_t sbo_bytes,
                                                   std::uint64_t swizzle = 1) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((smem_addr & 0x3ffffu) >> 4);
  d |= static_cast<std::uint64_t>((lbo_bytes & 0x3ffffu) >> 4) << 16;
  d |= static_cast<std::uint64_t>((sbo_bytes & 0x3ffffu) >> 4) << 32;
  d |= swizzle << 62;
  return d;
}

// Before the first wgmma that reads registers or accumulators written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders generic-proxy shared-memory writes (st.shared) before wgmma's async-proxy reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operand lists of the two shapes: "{%0, ..., %N-1}" and its "+f" bindings.
#define LAZYATTN_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LAZYATTN_WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define LAZYATTN_WGMMA_OUT32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define LAZYATTN_WGMMA_OUT64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// One wgmma with A from shared memory: D = %0.. (W accumulators: 32 or 64), then desc_a %N,
// desc_b %N+1, accumulate %N+2, trans-b %N+3 (an immediate).
#define LAZYATTN_WGMMA_SS(SHAPE, TYPE, W, A, B, ACC, TB)                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ACC ", 0;\n"                            \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " "                \
               LAZYATTN_WGMMA_D##W ", %" A ", %" B ", p, 1, 1, 0, %" TB ";\n}\n"             \
               : LAZYATTN_WGMMA_OUT##W                                                       \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB ? 1 : 0))
// The same with A from registers: a[0..3] at %N..%N+3, desc_b %N+4, accumulate %N+5, trans-b
// %N+6 (registers A has no transpose).
#define LAZYATTN_WGMMA_RS(SHAPE, TYPE, W, A0, A1, A2, A3, B, ACC, TB)                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ACC ", 0;\n"                            \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " "                \
               LAZYATTN_WGMMA_D##W ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B             \
               ", p, 1, 1, %" TB ";\n}\n"                                                    \
               : LAZYATTN_WGMMA_OUT##W                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate),  \
                 "n"(kTransB ? 1 : 0))
// FORM for T's element type: the type is part of the opcode string, so bf16 and f16 each get
// their own asm statement.
#define LAZYATTN_WGMMA_TYPED(FORM, SHAPE, ...)                                                \
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs"); \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) FORM(SHAPE, "bf16", __VA_ARGS__);            \
  else FORM(SHAPE, "f16", __VA_ARGS__)

// D[64 x 64] (+)= A[64 x 16] B[16 x 64] for one warpgroup, fp32 accumulators (d: this thread's
// 32, in the accumulator layout above). A and B from shared memory descriptors; kTransB: B is
// MN-major (its N elements contiguous), else K-major. accumulate = 0 overwrites D.
template <class T, bool kTransB>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], std::uint64_t desc_a,
                                                   std::uint64_t desc_b, int accumulate) {
  LAZYATTN_WGMMA_TYPED(LAZYATTN_WGMMA_SS, "m64n64k16", 32, "32", "33", "34", "35");
}

// The same with A from registers (the mma.sync A layout of each warp's 16 rows).
template <class T, bool kTransB>
__device__ __forceinline__ void wgmma_rs_m64n64k16(float (&d)[32], const std::uint32_t (&a)[4],
                                                   std::uint64_t desc_b, int accumulate) {
  LAZYATTN_WGMMA_TYPED(LAZYATTN_WGMMA_RS, "m64n64k16", 32, "32", "33", "34", "35", "36", "37",
                       "38");
}

// N = 128 (64 accumulators per thread), A from shared memory.
template <class T, bool kTransB>
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], std::uint64_t desc_a,
                                                    std::uint64_t desc_b, int accumulate) {
  LAZYATTN_WGMMA_TYPED(LAZYATTN_WGMMA_SS, "m64n128k16", 64, "64", "65", "66", "67");
}

// N = 128, A from registers.
template <class T, bool kTransB>
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const std::uint32_t (&a)[4],
                                                    std::uint64_t desc_b, int accumulate) {
  LAZYATTN_WGMMA_TYPED(LAZYATTN_WGMMA_RS, "m64n128k16", 64, "64", "65", "66", "67", "68", "69",
                       "70");
}

#undef LAZYATTN_WGMMA_TYPED
#undef LAZYATTN_WGMMA_RS
#undef LAZYATTN_WGMMA_SS
#undef LAZYATTN_WGMMA_OUT64
#undef LAZYATTN_WGMMA_OUT32
#undef LAZYATTN_WGMMA_D64
#undef LAZYATTN_WGMMA_D32

// Keeps the compiler from moving reads or writes of registers an in-flight wgmma owns across
// the issue and the wait (empty asm statements, ordered with the wgmma ones).
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

}  // namespace lazyattn::cuda::ptx
