// Keeps the experimental packed-rows decode (LAZYATTN_DECODE_PACKED_ROWS, off by default)
// compiling for sm_90a in CI, which builds the default kernels only: its three head-dim-128 bf16
// kernels (RoPE off, local form, raw-capable), instantiated by taking their addresses.
#ifndef LAZYATTN_DECODE_PACKED_ROWS
#define LAZYATTN_DECODE_PACKED_ROWS
#endif
#include <lazyattn/cuda/decode.cuh>

namespace lazyattn::cuda::detail {

extern void (*const decode_packed_rows_kernels[3])(DecodeParams);  // external: kept
void (*const decode_packed_rows_kernels[3])(DecodeParams) = {
    decode_kernel<__nv_bfloat16, 128, false, false, false, true>,
    decode_kernel<__nv_bfloat16, 128, true, false, false, true>,
    decode_kernel<__nv_bfloat16, 128, true, false, true, true>,
};

}  // namespace lazyattn::cuda::detail
