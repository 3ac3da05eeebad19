// What the CUDA attention kernels take, in one place: the launchers check their arguments
// against it, and the C ABI and the benchmarks ask it before they build anything for a model.
// Host-only (no CUDA headers), so any translation unit can ask.
#pragma once

#include <array>
#include <string>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/dtype.hpp"

namespace lazyattn::cuda {

// Head dims the kernels are compiled for (dispatch_head_dim turns them into template arguments).
inline constexpr std::array<int, 3> kSupportedHeadDims{64, 128, 256};
// The decode packs a GQA group's query heads into the 16 rows of one MMA A operand.
inline constexpr int kMaxDecodeGroup = 16;
// The prefill's query tiles hold 128 (query, head) rows: a group must divide them.
inline constexpr int kPrefillTileRows = 128;

constexpr bool supports_head_dim(int head_dim) {
  for (int d : kSupportedHeadDims)
    if (d == head_dim) return true;
  return false;
}

// "64, 128, 256", for messages.
inline std::string supported_head_dims() {
  std::string s;
  for (int d : kSupportedHeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

// Rotary dims come in whole 16-byte chunks of pairs: multiples of 32 in the rotate-half layout
// (16 firsts and their 16 partners), of 16 interleaved.
constexpr int rotary_dim_multiple(bool interleaved) { return interleaved ? 16 : 32; }

constexpr bool supports_decode_group(int group_size) {
  return group_size >= 1 && group_size <= kMaxDecodeGroup;
}
// A divisor of the tile (so a power of two: a query's rows never straddle two tiles).
constexpr bool supports_prefill_group(int group_size) {
  return group_size >= 1 && kPrefillTileRows % group_size == 0;
}

// Throws lazyattn::Error naming the first argument the kernels do not take: the element type
// (16-bit), the head dim, the GQA group (decode or prefill), the soft cap, the rotary dims
// (rope: rotary_dim and its layout).
inline void check_supported(const char* where, DType dtype, const AttentionParams& ap,
                            bool prefill) {
  LAZYATTN_CHECK(dtype != DType::kFloat32, where,
                 ": dtype float32, expected bfloat16 or float16 (tensor-core kernels)");
  LAZYATTN_CHECK(supports_head_dim(ap.head_dim), where, ": head_dim ", ap.head_dim,
                 ", expected one of ", supported_head_dims());
  const int g = ap.group_size();
  if (prefill)
    LAZYATTN_CHECK(supports_prefill_group(g), where, ": GQA group size ", g, " (",
                   ap.num_qo_heads, " / ", ap.num_kv_heads, "), expected a divisor of ",
                   kPrefillTileRows);
  else
    LAZYATTN_CHECK(supports_decode_group(g), where, ": GQA group size ", g, " (", ap.num_qo_heads,
                   " / ", ap.num_kv_heads, "), expected <= ", kMaxDecodeGroup);
  LAZYATTN_CHECK(ap.logits_soft_cap == 0.0, where, ": logits_soft_cap ", ap.logits_soft_cap,
                 ", expected 0 (soft cap is not implemented in the CUDA kernels)");
}
inline void check_supported_rotary(const char* where, int rotary_dim, bool interleaved) {
  LAZYATTN_CHECK(rotary_dim % rotary_dim_multiple(interleaved) == 0, where, ": rotary_dim ",
                 rotary_dim, ", expected a multiple of ", rotary_dim_multiple(interleaved),
                 " for the CUDA kernels");
}

}  // namespace lazyattn::cuda
