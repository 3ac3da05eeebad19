// AttentionParams: the head counts, head dim and logit settings every attention entry point takes.
#pragma once

#include <cmath>
#include <cstdint>

#include "lazyattn/error.hpp"

namespace lazyattn {

struct AttentionParams {
  // The largest softmax_scale and logits_soft_cap taken: far inside float32 (3.4e38) for any
  // logit they multiply.
  static constexpr double kMaxLogitScale = 1e30;

  int num_qo_heads = 32;
  int num_kv_heads = 8;  // query head h reads KV head h / (num_qo_heads / num_kv_heads) (GQA)
  int head_dim = 128;
  double softmax_scale = 0.0;    // 0 means 1 / sqrt(head_dim)
  double logits_soft_cap = 0.0;  // > 0: logits = cap * tanh(logits / cap) (Gemma 2); 0: off

  int group_size() const { return num_qo_heads / num_kv_heads; }
  double scale() const {
    return softmax_scale > 0.0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  }

  void check(const char* where) const {
    LAZYATTN_CHECK(num_kv_heads >= 1, where, ": num_kv_heads ", num_kv_heads, ", expected >= 1");
    LAZYATTN_CHECK(num_qo_heads >= num_kv_heads && num_qo_heads % num_kv_heads == 0, where,
                   ": num_qo_heads ", num_qo_heads, ", expected a multiple of num_kv_heads ",
                   num_kv_heads);
    LAZYATTN_CHECK(head_dim >= 2 && head_dim % 2 == 0, where, ": head_dim ", head_dim,
                   ", expected an even number >= 2");
    // The kernels and the Eigen reference compute logits in float32: a scale or cap past what it
    // holds would turn into inf, then NaN or an all-zero output.
    LAZYATTN_CHECK(softmax_scale >= 0.0 && softmax_scale <= kMaxLogitScale, where,
                   ": softmax_scale ", softmax_scale, ", expected in [0, ", kMaxLogitScale,
                   "] (0: 1/sqrt(head_dim); logits are scaled in float32)");
    LAZYATTN_CHECK(logits_soft_cap >= 0.0 && logits_soft_cap <= kMaxLogitScale, where,
                   ": logits_soft_cap ", logits_soft_cap, ", expected in [0, ", kMaxLogitScale,
                   "] (0: off; the cap is applied in float32)");
  }
};

}  // namespace lazyattn
