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
  double factor = 1.0;                                        // linear, dynamic, yarn, llama3
  std::optional<double> low_freq_factor;                      // llama3
  std::optional<double> high_freq_factor;                     // llama3
  std::optional<std::int64_t> original_max_position_embeddings;  // llama3, yarn, longrope
  std::optional<double> beta_fast;                            // yarn (32)
  std::optional<double> beta_slow;                            // yarn (1)
  std::optional<double> mscale;                               // yarn (DeepSeek)
  std::optional<double> mscale_all_dim;                       // yarn (DeepSeek)
  std::optional<bool> truncate;                               // yarn (true)
  std::optional<double> attention_factor;                     // yarn, longrope
  std::vector<double> short_factor;                           // longrope [rotary_dim / 2]
  std::vector<double> long_factor;                            // longrope [rotary_dim / 2]
};

struct RopeConfig {
  int head_dim = 128;                     // `head_dim`, else hidden_size / num_attention_heads
  double rope_theta = 10000.0;            // the base
  double partial_rotary_factor = 1.0;     // rotary_dim = int(head_dim * partial_rotary_factor)
  std::int64_t max_position_embeddings = 0;  // needed by dynamic, yarn and longrope
  // Top-level `original_max_position_embeddings` (Phi-3 puts it there for longrope).
  std::optional<std::int64_t> original_max_position_embeddings;
  PairLayout pair_layout = PairLayout::kHalf;  // GPT-J models use kInterleaved
  RopeScaling rope_scaling;
};

}  // namespace lazyattn
