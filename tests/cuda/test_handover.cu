// [cuda][hopper] The warp-specialised prefill's hand-over in miniature (prefill.cuh, kWgmmaWs): a
// loading warpgroup overwrites, with cp.async, shared memory that the computing warps read
// before a CTA barrier, and announces its copies on an mbarrier; the computing warps then read
// the new contents. Each side's reads are checked. Variants: with and without setmaxnreg, the
// copies announced by cp.async.mbarrier.arrive.noinc or retired by cp.async.wait_group before a
// plain arrive; and, as the kernel was or is (setmaxnreg, noinc), the computing warps passing,
// before their reads, a named barrier of their own (bar.sync 4, 256 threads), or an mbarrier
// wait on earlier copies, or both, or named barriers the loader joins with bar.arrive, or CTA
// barriers (the kernel's form since 22186ca).
// Every variant is race-free. compute-sanitizer racecheck (H200, CUDA 13) reports one WAR
// hazard on each variant whose readers pass a named barrier first, and none on the others
// (bench/results/2026-11-30-h200-prefill-trim on branch results-archive): it loses the CTA barrier's order
// after a named barrier. Those three carry [racecheck_reports]; scripts/gpu-check leaves them
// out of its racecheck run, which must stay clean.
#include "support/catch.hpp"

#include <cstdint>
#include <vector>

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/ptx.cuh"
#include "lazyattn/cuda/mbarrier.cuh"

namespace {

namespace ptx = lazyattn::cuda::ptx;

constexpr int kCompute = 256, kLoad = 128, kElems = 256;  // 16-byte elements (4 KiB)

// What the computing warps pass before their reads (bits): their own named barrier, twice (as the
// prologue's tables and raw query), and an mbarrier announcing copies into another buffer (as the
// kernel's first K/V stage).
// kPreNamedAll: the same two barriers over the whole CTA, the loader arriving (bar.arrive)
// before its CTA barrier.
// kPreCta: CTA barriers instead (bar.sync 0, every thread).
enum : int { kPreNamed = 1, kPreMbarrier = 2, kPreNamedAll = 4, kPreCta = 8 };

// out[t] = the element thread t read before the barrier (another thread's), out[kCompute + t] the
// one it read after the loader's copies landed, out[2 kCompute + t] (kPreMbarrier) the early copy
// it read.
template <bool kSetMaxNReg, bool kNoInc, int kPre = 0>
__global__ void __launch_bounds__(kCompute + kLoad, 1) handover_probe(const uint4* src, uint4* out) {
  __shared__ __align__(16) uint4 buf[kElems];
  __shared__ __align__(16) uint4 early[kLoad];
  __shared__ __align__(8) std::uint64_t full, early_full;
  const int tid = threadIdx.x;
  const std::uint32_t bar = ptx::smem_addr(&full);
  const std::uint32_t early_bar = ptx::smem_addr(&early_full);
  if (tid == 0) {
    ptx::mbarrier_init(bar, kLoad);
    ptx::mbarrier_init(early_bar, kLoad);
    ptx::fence_barrier_init();
  }
  if (tid < kCompute) buf[tid] = make_uint4(tid, 1u, 2u, 3u);
  __syncthreads();  // buf holds the computing warps' values
  if (tid >= kCompute) {
    if constexpr (kSetMaxNReg) ptx::setmaxnreg_dec<24>();
    const int l = tid - kCompute;
    if constexpr ((kPre & kPreMbarrier) != 0) {
      ptx::cp_async_16(ptx::smem_addr(&early[l]), &src[(l * 3) % kElems]);
      ptx::cp_async_mbarrier_arrive_noinc(early_bar);
    }
    if constexpr ((kPre & kPreNamedAll) != 0) {
      ptx::named_barrier_arrive<7, kCompute + kLoad>();
      ptx::named_barrier_arrive<4, kCompute + kLoad>();
    }
    if constexpr ((kPre & kPreCta) != 0) {
      __syncthreads();
      __syncthreads();
    }
    __syncthreads();  // the computing warps have read buf
    for (int i = l; i < kElems; i += kLoad) ptx::cp_async_16(ptx::smem_addr(&buf[i]), &src[i]);
    if constexpr (kNoInc) {
      ptx::cp_async_mbarrier_arrive_noinc(bar);
    } else {
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      ptx::mbarrier_arrive(bar);
    }
    ptx::cp_async_wait<0>();
    return;
  }
  if constexpr (kSetMaxNReg) ptx::setmaxnreg_inc<240>();
  if constexpr ((kPre & kPreNamed) != 0) {
    ptx::named_barrier_sync<4, kCompute>();
    ptx::named_barrier_sync<4, kCompute>();
  }
  if constexpr ((kPre & kPreNamedAll) != 0) {
    ptx::named_barrier_sync<7, kCompute + kLoad>();
    ptx::named_barrier_sync<4, kCompute + kLoad>();
  }
  if constexpr ((kPre & kPreCta) != 0) {
    __syncthreads();
    __syncthreads();
  }
  if constexpr ((kPre & kPreMbarrier) != 0) {
    ptx::mbarrier_wait(early_bar, 0);
    out[2 * kCompute + tid] = early[tid % kLoad];
  }
  const uint4 before = buf[(tid * 7 + 3) % kElems];
  __syncthreads();  // the loader may overwrite buf
  ptx::mbarrier_wait(bar, 0);
  const uint4 after = buf[(tid * 5 + 1) % kElems];
  out[tid] = before;
  out[kCompute + tid] = after;
}

template <bool kSetMaxNReg, bool kNoInc, int kPre = 0>
void check_handover() {
  std::vector<uint4> src(kElems);
  for (int i = 0; i < kElems; ++i)
    src[i] = make_uint4(1000u + i, 2000u + i, 3000u + i, 4000u + i);
  lazyattn::cuda::DeviceBuffer<uint4> dsrc(src.size()), dout(3 * kCompute);
  LAZYATTN_CUDA_CHECK(cudaMemcpy(dsrc.data(), src.data(), dsrc.bytes(), cudaMemcpyHostToDevice));
  LAZYATTN_CUDA_CHECK(cudaMemset(dout.data(), 0xff, dout.bytes()));
  handover_probe<kSetMaxNReg, kNoInc, kPre><<<1, kCompute + kLoad>>>(dsrc.data(), dout.data());
  LAZYATTN_CUDA_CHECK(cudaGetLastError());
  LAZYATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint4> out(dout.size());
  LAZYATTN_CUDA_CHECK(cudaMemcpy(out.data(), dout.data(), dout.bytes(), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int t = 0; t < kCompute; ++t) {
    const unsigned e = static_cast<unsigned>((t * 7 + 3) % kElems);
    const uint4 b = out[t], a = out[kCompute + t], want = src[(t * 5 + 1) % kElems];
    if (b.x != e || b.y != 1u || b.z != 2u || b.w != 3u) ++bad;
    if (a.x != want.x || a.y != want.y || a.z != want.z || a.w != want.w) ++bad;
    if constexpr ((kPre & kPreMbarrier) != 0) {
      const uint4 c = out[2 * kCompute + t], w = src[((t % kLoad) * 3) % kElems];
      if (c.x != w.x || c.y != w.y || c.z != w.z || c.w != w.w) ++bad;
    }
  }
  INFO("setmaxnreg " << kSetMaxNReg << ", noinc " << kNoInc << ", pre " << kPre << ": " << bad
                     << " reads wrong");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("the loader hand-over: cp.async.mbarrier.arrive.noinc after setmaxnreg",
          "[cuda][hopper][handover]") {
  check_handover<true, true>();
}

TEST_CASE("the loader hand-over: cp.async.mbarrier.arrive.noinc", "[cuda][hopper][handover]") {
  check_handover<false, true>();
}

TEST_CASE("the loader hand-over: cp.async.wait_group then mbarrier.arrive after setmaxnreg",
          "[cuda][hopper][handover]") {
  check_handover<true, false>();
}

TEST_CASE("the loader hand-over: cp.async.wait_group then mbarrier.arrive",
          "[cuda][hopper][handover]") {
  check_handover<false, false>();
}

TEST_CASE("the loader hand-over: noinc after setmaxnreg and readers past a named barrier first",
          "[cuda][hopper][handover][racecheck_reports]") {
  check_handover<true, true, kPreNamed>();
}

TEST_CASE("the loader hand-over: noinc after setmaxnreg and readers past an mbarrier wait first",
          "[cuda][hopper][handover]") {
  check_handover<true, true, kPreMbarrier>();
}

TEST_CASE("the loader hand-over: noinc after setmaxnreg and readers past both first",
          "[cuda][hopper][handover][racecheck_reports]") {
  check_handover<true, true, kPreNamed | kPreMbarrier>();
}

TEST_CASE("the loader hand-over: noinc after setmaxnreg and readers past CTA-wide named barriers",
          "[cuda][hopper][handover][racecheck_reports]") {
  check_handover<true, true, kPreNamedAll | kPreMbarrier>();
}

TEST_CASE("the loader hand-over: noinc after setmaxnreg and readers past CTA barriers first",
          "[cuda][hopper][handover]") {
  check_handover<true, true, kPreCta | kPreMbarrier>();
}
