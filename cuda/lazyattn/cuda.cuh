// Umbrella header for lazyattn's CUDA side: device pool and plans, page writes, decode and
// prefill, what the kernels support, baselines.
#pragma once

#include "lazyattn/cuda/common.cuh"
#include "lazyattn/cuda/decode.cuh"
#include "lazyattn/cuda/device_plan.cuh"
#include "lazyattn/cuda/device_pool.cuh"
#include "lazyattn/cuda/device_rope.cuh"
#include "lazyattn/cuda/dispatch.cuh"
#include "lazyattn/cuda/kv_tile.cuh"
#include "lazyattn/cuda/packed_plan.hpp"
#include "lazyattn/cuda/page_write.cuh"
#include "lazyattn/cuda/prefill.cuh"
#include "lazyattn/cuda/reencode.cuh"
#include "lazyattn/cuda/rope.cuh"
#include "lazyattn/cuda/schedule.hpp"
#include "lazyattn/cuda/support.hpp"
