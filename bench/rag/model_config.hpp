// Llama-shaped decoder configurations by name: `micro` and `tiny` run on the CPU (tests, CI),
// `tiny-d64` on both (the CPU/GPU comparison), `llama-3.2-1b` and `llama-3.1-8b` on the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/rope/config.hpp"
#include "lazyattn/rope/policy.hpp"

namespace lazyattn::rag {

struct ModelConfig {
  std::string name;
  int vocab_size = 512;
  int hidden_size = 256;
  int intermediate_size = 512;
  int num_layers = 2;
  int num_qo_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 32;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  RopeConfig rope;

  AttentionParams attention() const {
    return AttentionParams{
        .num_qo_heads = num_qo_heads, .num_kv_heads = num_kv_heads, .head_dim = head_dim};
  }
  int q_width() const { return num_qo_heads * head_dim; }
  int kv_width() const { return num_kv_heads * head_dim; }
  // Parameters of the whole model (embedding, layers, final norm, LM head unless tied).
  std::int64_t parameters() const {
    const std::int64_t h = hidden_size, layer = h * (q_width() + 2 * kv_width()) +
                                                std::int64_t{q_width()} * h +
                                                3 * h * intermediate_size + 2 * h;
    return std::int64_t{vocab_size} * h * (tie_word_embeddings ? 1 : 2) + num_layers * layer + h;
  }
};

namespace detail {
// Llama 3's RoPE: theta 500000 and the llama3 frequency schedule.
inline RopeConfig llama3_rope(int head_dim, double factor) {
  RopeConfig r;
  r.head_dim = head_dim;
  r.rope_theta = 500000.0;
  r.max_position_embeddings = 131072;
  r.rope_scaling.rope_type = RopeType::kLlama3;
  r.rope_scaling.factor = factor;
  r.rope_scaling.low_freq_factor = 1.0;
  r.rope_scaling.high_freq_factor = 4.0;
  r.rope_scaling.original_max_position_embeddings = 8192;
  return r;
}

// One row per configuration: shape, Llama 3 RoPE factor, tied embeddings.
struct ModelRow {
  const char* name;
  int vocab, hidden, intermediate, layers, qo_heads, kv_heads, head_dim;
  double rope_factor;
  bool tied;
};
inline constexpr ModelRow kModelRows[] = {
    // the smallest that exercises GQA; for tests that run many requests
    {"micro", 64, 32, 64, 1, 2, 1, 16, 8.0, false},
    {"tiny", 512, 256, 512, 2, 8, 2, 32, 8.0, false},
    // tiny at head dim 64, the smallest the CUDA kernels take
    {"tiny-d64", 512, 512, 1024, 2, 8, 2, 64, 8.0, false},
    {"llama-3.2-1b", 128256, 2048, 8192, 16, 32, 8, 64, 32.0, true},
    {"llama-3.1-8b", 128256, 4096, 14336, 32, 32, 8, 128, 8.0, false},
};
}  // namespace detail

inline std::vector<std::string> model_config_names() {
  std::vector<std::string> names;
  for (const detail::ModelRow& m : detail::kModelRows) names.emplace_back(m.name);
  return names;
}

// The configuration called `name`; throws naming the known ones otherwise.
inline ModelConfig model_config(std::string_view name) {
  for (const detail::ModelRow& m : detail::kModelRows) {
    if (name != m.name) continue;
    ModelConfig c;
    c.name = m.name;
    c.vocab_size = m.vocab;
    c.hidden_size = m.hidden;
    c.intermediate_size = m.intermediate;
    c.num_layers = m.layers;
    c.num_qo_heads = m.qo_heads;
    c.num_kv_heads = m.kv_heads;
    c.head_dim = m.head_dim;
    c.tie_word_embeddings = m.tied;
    c.rope = detail::llama3_rope(m.head_dim, m.rope_factor);
    return c;
  }
  std::string known;
  for (const std::string& n : model_config_names()) known += (known.empty() ? "" : ", ") + n;
  ::lazyattn::detail::throw_error("rag::model_config: unknown config '", name,
                                  "', expected one of ", known);
}

}  // namespace lazyattn::rag
