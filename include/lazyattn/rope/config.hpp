// RopeConfig: the RoPE fields of a transformers model config, under their Hugging Face names.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lazyattn/rope/types.hpp"

namespace lazyattn {

// `rope_scaling` (older configs) or `rope_parameters` (newer ones). Unset optionals take the
// defaults transformers gives them; each schedule reads only its own fields.
struct RopeScaling {
  RopeType rope_type = RopeType::kDefault;
  // Required by linear, dynamic and llama3. yarn and longrope fall back to
  // max_position_embeddings / original_max_position_embeddings when it is unset, as transformers
  // does (frequencies.hpp); an optional so that "unset" and 1.0 stay different.
  std::optional<double> factor;
  std::optional<double> low_freq_factor;                         // llama3
  std::optional<double> high_freq_factor;                        // llama3
  std::optional<std::int64_t> original_max_position_embeddings;  // llama3, yarn, longrope
  std::optional<double> beta_fast;                               // yarn (32; 0 also means 32)
  std::optional<double> beta_slow;                               // yarn (1; 0 also means 1)
  std::optional<double> mscale;                                  // yarn (DeepSeek)
  std::optional<double> mscale_all_dim;                          // yarn (DeepSeek)
  std::optional<bool> truncate;                                  // yarn (true)
  std::optional<double> attention_factor;                        // yarn, longrope
  std::vector<double> short_factor;                              // longrope [rotary_dim / 2]
  std::vector<double> long_factor;                               // longrope [rotary_dim / 2]
};

struct RopeConfig {
  int head_dim = 128;                  // `head_dim`, else hidden_size / num_attention_heads
  double rope_theta = 10000.0;         // the base
  double partial_rotary_factor = 1.0;  // rotary_dim = int(head_dim * partial_rotary_factor)
  // 0 = not given. Needed by dynamic, and by llama3, yarn and longrope when they fall back to it
  // for original_max_position_embeddings or for the factor.
  std::int64_t max_position_embeddings = 0;
  // Top-level `original_max_position_embeddings` (Phi-3 puts it there). transformers 5 copies it
  // over rope_scaling's own for llama3, yarn and longrope, so it wins when both are given.
  std::optional<std::int64_t> original_max_position_embeddings;
  PairLayout pair_layout = PairLayout::kHalf;  // GPT-J, DeepSeek-V2/V3 use kInterleaved
  RopeScaling rope_scaling;
};

}  // namespace lazyattn
