// Attention variants: small functors that turn a raw dot product into a logit, shared by the CPU
// reference and the kernels, and the concept that checks them.
#pragma once

#include <cmath>
#include <concepts>

#include "lazyattn/attention/params.hpp"
#include "lazyattn/config.hpp"

namespace lazyattn {

// A variant maps q.k (after RoPE) to the logit that enters the softmax.
template <class V>
concept LogitsVariant = requires(const V v, float x) {
  { v.logit(x) } -> std::convertible_to<float>;
};

struct StandardAttention {
  float scale = 1.0f;
  LAZYATTN_HOST_DEVICE float logit(float dot) const { return dot * scale; }
};

// Gemma-2 style soft cap: cap * tanh(dot * scale / cap).
struct SoftCapAttention {
  float scale = 1.0f;
  float cap = 50.0f;
  LAZYATTN_HOST_DEVICE float logit(float dot) const { return cap * tanhf(dot * scale / cap); }
};

static_assert(LogitsVariant<StandardAttention>);
static_assert(LogitsVariant<SoftCapAttention>);

}  // namespace lazyattn
