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
}  // namespace detail

inline std::vector<std::string> model_config_names() {
  return {"micro", "tiny", "tiny-d64", "llama-3.2-1b", "llama-3.1-8b"};
}

// The configuration called `name`; throws naming the known ones otherwise.
inline ModelConfig model_config(std::string_view name) {
  ModelConfig c;
  c.name = std::string(name);
  if (name == "micro") {  // the smallest that exercises GQA; for tests that run many requests
    c.vocab_size = 64;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_layers = 1;
    c.num_qo_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 16;
    c.rope = detail::llama3_rope(16, 8.0);
  } else if (name == "tiny") {
    c.vocab_size = 512;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.num_layers = 2;
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.rope = detail::llama3_rope(32, 8.0);
  } else if (name == "tiny-d64") {  // tiny at head dim 64, the smallest the CUDA kernels take
    c.vocab_size = 512;
    c.hidden_size = 512;
    c.intermediate_size = 1024;
    c.num_layers = 2;
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rope = detail::llama3_rope(64, 8.0);
  } else if (name == "llama-3.2-1b") {
    c.vocab_size = 128256;
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_layers = 16;
    c.num_qo_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 64;
    c.tie_word_embeddings = true;
    c.rope = detail::llama3_rope(64, 32.0);
  } else if (name == "llama-3.1-8b") {
    c.vocab_size = 128256;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_qo_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope = detail::llama3_rope(128, 8.0);
  } else {
    std::string known;
    for (const std::string& n : model_config_names()) known += (known.empty() ? "" : ", ") + n;
    LAZYATTN_CHECK(false, "rag::model_config: unknown config '", name, "', expected one of ",
                   known);
  }
  return c;
}

}  // namespace lazyattn::rag
