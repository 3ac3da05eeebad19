// Build-wide macros: version, the host/device function qualifier, and the restrict spelling.
#pragma once

#define LAZYATTN_VERSION_MAJOR 0
#define LAZYATTN_VERSION_MINOR 1
#define LAZYATTN_VERSION_PATCH 0

// Shared math is written once and compiled by both g++ and nvcc. Without nvcc the qualifier is a
// plain `inline`, so every `.hpp` stays a host-only header.
#if defined(__CUDACC__)
#define LAZYATTN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LAZYATTN_HOST_DEVICE inline
#endif

#if defined(__CUDACC__) || defined(__GNUC__) || defined(__clang__)
#define LAZYATTN_RESTRICT __restrict__
#else
#define LAZYATTN_RESTRICT
#endif
