// Paged, split-KV, GQA-packed decode with deferred RoPE on tensor cores: one query per request
// over its documents and tail, each read from the position-free store and rotated in the kernel.
//
//   decode/params.cuh   the kernel's parameters and shape
//   decode/scores.cuh   S = Q K^T of a warp's keys, raw-form keys rotated in registers
//   decode/merge.cuh    the warps' merge, the output rows, the split-KV merge
//   decode/kernel.cuh   the kernel: the rotated query (built a tile ahead, two buffers) and the
//                       tile loop as a sequence of those steps
//   decode/launch.cuh   arguments, scratch, checks and launch: cuda::decode
#pragma once

#include "lazyattn/cuda/decode/launch.cuh"
