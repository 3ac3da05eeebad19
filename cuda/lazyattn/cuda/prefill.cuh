// Paged prefill with deferred RoPE: a request's new tail tokens attend fully to every document
// segment and causally to the tail (tail prefill, chunked prefill, document encoding).
//
//   prefill/params.cuh       the kernels' parameters; one CTA's query rows and key tiles
//   prefill/io.cuh           the query tile load and the output rows, shared by both kernels
//   prefill/rotate.cuh       the mma.sync kernel's query and raw-key rotation in shared memory
//   prefill/mma_sync.cuh     the FlashAttention-2-style kernel (every head dim, form, layout)
//   prefill/wgmma_query.cuh  the Hopper kernel's shared memory and query fragments
//   prefill/wgmma_ws.cuh     the Hopper kernel (warp-specialised, wgmma; head dims 64 and 128)
//   prefill/merge.cuh        the merge of key-range splits
//   prefill/launch.cuh       arguments, kernel choice, splits, checks and launch: cuda::prefill
#pragma once

#include "lazyattn/cuda/prefill/launch.cuh"
