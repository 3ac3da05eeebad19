// RopeFrequencies: one resolved set of RoPE frequencies, and the schedules that produce it from a
// RopeConfig, each following transformers' definition (modeling_rope_utils.py), in float64.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <vector>

#include "lazyattn/error.hpp"
#include "lazyattn/rope/angle.hpp"
#include "lazyattn/rope/config.hpp"

namespace lazyattn {

// Everything a kernel needs to rotate one head vector. Plain data.
struct RopeFrequencies {
  int head_dim = 0;
  int rotary_dim = 0;  // even, <= head_dim; dimensions [rotary_dim, head_dim) pass through
  PairLayout pair_layout = PairLayout::kHalf;
  // Multiplies cos and sin in transformers, for q and k alike: the rotary part of every logit is
  // scaled by attention_factor^2. lazyattn applies it once, on the query side (query_scale()).
  double attention_factor = 1.0;
  std::vector<double> inv_freq;      // [rotary_dim / 2] radians per position
  std::vector<std::uint64_t> turns;  // [rotary_dim / 2] Q0.64 turns per position (angle.hpp)

  int num_pairs() const { return rotary_dim / 2; }
  // Factor for the query's rotary dimensions that carries YaRN/LongRoPE's attention factor.
  double query_scale() const { return attention_factor * attention_factor; }
};

namespace detail {

inline void check_rope_config(const RopeConfig& c) {
  LAZYATTN_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "RopeConfig: head_dim ", c.head_dim,
                 ", expected a positive even number");
  LAZYATTN_CHECK(c.rope_theta > 1.0 && std::isfinite(c.rope_theta), "RopeConfig: rope_theta ",
                 c.rope_theta, ", expected a finite number > 1");
  LAZYATTN_CHECK(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0,
                 "RopeConfig: partial_rotary_factor ", c.partial_rotary_factor,
                 ", expected a value in (0, 1]");
  int rotary_dim = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  LAZYATTN_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, "RopeConfig: rotary_dim ", rotary_dim,
                 " (head_dim ", c.head_dim, " x partial_rotary_factor ", c.partial_rotary_factor,
                 "), expected an even number >= 2");
  const RopeScaling& s = c.rope_scaling;
  auto t = to_string(s.rope_type);
  if (s.rope_type != RopeType::kDefault && s.rope_type != RopeType::kLongrope) {
    LAZYATTN_CHECK(s.factor >= 1.0 && std::isfinite(s.factor), "RopeConfig: rope_scaling.factor ",
                   s.factor, " for rope_type ", t, ", expected a finite number >= 1");
  }
  if (s.rope_type == RopeType::kDynamic || s.rope_type == RopeType::kLongrope ||
      (s.rope_type == RopeType::kYarn && !s.original_max_position_embeddings)) {
    LAZYATTN_CHECK(c.max_position_embeddings > 0, "RopeConfig: max_position_embeddings ",
                   c.max_position_embeddings, " for rope_type ", t, ", expected > 0");
  }
  if (s.rope_type == RopeType::kLlama3) {
    LAZYATTN_CHECK(s.low_freq_factor && s.high_freq_factor && s.original_max_position_embeddings,
                   "RopeConfig: rope_type llama3 needs low_freq_factor, high_freq_factor and "
                   "original_max_position_embeddings in rope_scaling");
    LAZYATTN_CHECK(*s.high_freq_factor > *s.low_freq_factor, "RopeConfig: high_freq_factor ",
                   *s.high_freq_factor, ", expected > low_freq_factor ", *s.low_freq_factor);
    LAZYATTN_CHECK(*s.original_max_position_embeddings > 0,
                   "RopeConfig: original_max_position_embeddings ",
                   *s.original_max_position_embeddings, ", expected > 0");
  }
  if (s.rope_type == RopeType::kLongrope) {
    auto half = static_cast<std::size_t>(rotary_dim / 2);
    LAZYATTN_CHECK(s.short_factor.size() == half, "RopeConfig: longrope short_factor has ",
                   s.short_factor.size(), " entries, expected rotary_dim / 2 = ", half);
    LAZYATTN_CHECK(s.long_factor.size() == half, "RopeConfig: longrope long_factor has ",
                   s.long_factor.size(), " entries, expected rotary_dim / 2 = ", half);
  }
}

inline int rotary_dim_of(const RopeConfig& c) {
  return static_cast<int>(c.head_dim * c.partial_rotary_factor);
}

// base^(2i/dim) for i in [0, dim/2): transformers' `base ** (arange(0, dim, 2) / dim)`.
inline std::vector<double> position_freqs(double base, int dim) {
  std::vector<double> out(static_cast<std::size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) out[i] = std::pow(base, (2.0 * i) / dim);
  return out;
}

inline double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// The original context length longrope compares a request against.
inline std::int64_t longrope_original_max(const RopeConfig& c) {
  if (c.original_max_position_embeddings) return *c.original_max_position_embeddings;
  if (c.rope_scaling.original_max_position_embeddings)
    return *c.rope_scaling.original_max_position_embeddings;
  return c.max_position_embeddings;
}

}  // namespace detail

// The frequencies a config gives a request whose largest position is seq_len - 1. Only dynamic and
// longrope read seq_len (they switch on the request length); pass 0 for "no request".
inline RopeFrequencies compute_rope_frequencies(const RopeConfig& c, std::int64_t seq_len = 0) {
  detail::check_rope_config(c);
  const RopeScaling& s = c.rope_scaling;
  RopeFrequencies f;
  f.head_dim = c.head_dim;
  f.rotary_dim = detail::rotary_dim_of(c);
  f.pair_layout = c.pair_layout;
  const int dim = f.rotary_dim;
  const int half = dim / 2;
  double base = c.rope_theta;
  f.inv_freq.resize(static_cast<std::size_t>(half));

  switch (s.rope_type) {
    case RopeType::kDefault:
    case RopeType::kLinear: {
      auto pf = detail::position_freqs(base, dim);
      double div = s.rope_type == RopeType::kLinear ? s.factor : 1.0;
      for (int i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / pf[i] / div;
      break;
    }
    case RopeType::kDynamic: {
      // NTK-aware base growth once the request outgrows the trained context.
      double max_pos = static_cast<double>(c.max_position_embeddings);
      double len = std::max(static_cast<double>(seq_len), max_pos);
      base = base * std::pow((s.factor * len / max_pos) - (s.factor - 1.0),
                             static_cast<double>(dim) / (dim - 2));
      auto pf = detail::position_freqs(base, dim);
      for (int i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / pf[i];
      break;
    }
    case RopeType::kYarn: {
      double factor = s.factor;
      std::int64_t original_max = s.original_max_position_embeddings
                                      ? *s.original_max_position_embeddings
                                      : c.max_position_embeddings;
      // DeepSeek-V3 style configs carry the pretrained length separately; transformers then takes
      // the attention-factor's scale from the ratio of the two lengths.
      double scale_for_mscale = factor;
      if (s.original_max_position_embeddings && c.max_position_embeddings > 0) {
        scale_for_mscale = static_cast<double>(c.max_position_embeddings) /
                           static_cast<double>(*s.original_max_position_embeddings);
      }
      if (s.attention_factor) {
        f.attention_factor = *s.attention_factor;
      } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0.0 && *s.mscale_all_dim != 0.0) {
        f.attention_factor = detail::yarn_get_mscale(scale_for_mscale, *s.mscale) /
                             detail::yarn_get_mscale(scale_for_mscale, *s.mscale_all_dim);
      } else {
        f.attention_factor = detail::yarn_get_mscale(scale_for_mscale, 1.0);
      }
      double beta_fast = s.beta_fast.value_or(32.0);
      double beta_slow = s.beta_slow.value_or(1.0);
      bool truncate = s.truncate.value_or(true);
      auto correction_dim = [&](double num_rotations) {
        return (dim * std::log(static_cast<double>(original_max) /
                               (num_rotations * 2.0 * std::numbers::pi))) /
               (2.0 * std::log(base));
      };
      double low = correction_dim(beta_fast);
      double high = correction_dim(beta_slow);
      if (truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;  // avoid a zero-width ramp
      auto pf = detail::position_freqs(base, dim);
      for (int i = 0; i < half; ++i) {
        double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        double extrapolation_factor = 1.0 - ramp;
        double extrapolation = 1.0 / pf[i];
        double interpolation = 1.0 / (factor * pf[i]);
        f.inv_freq[i] = interpolation * (1.0 - extrapolation_factor) +
                        extrapolation * extrapolation_factor;
      }
      break;
    }
    case RopeType::kLlama3: {
      double factor = s.factor;
      double low_ff = *s.low_freq_factor;
      double high_ff = *s.high_freq_factor;
      double old_len = static_cast<double>(*s.original_max_position_embeddings);
      double low_freq_wavelen = old_len / low_ff;
      double high_freq_wavelen = old_len / high_ff;
      auto pf = detail::position_freqs(base, dim);
      for (int i = 0; i < half; ++i) {
        double inv = 1.0 / pf[i];
        double wavelen = 2.0 * std::numbers::pi / inv;
        double scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
        bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        if (medium) {
          double smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff);
          scaled = (1.0 - smooth) * scaled / factor + smooth * scaled;
        }
        f.inv_freq[i] = scaled;
      }
      break;
    }
    case RopeType::kLongrope: {
      std::int64_t original_max = detail::longrope_original_max(c);
      LAZYATTN_CHECK(original_max > 0, "RopeConfig: longrope original_max_position_embeddings ",
                     original_max, ", expected > 0");
      double factor = s.factor;
      if (c.original_max_position_embeddings && c.max_position_embeddings > 0) {
        factor = static_cast<double>(c.max_position_embeddings) /
                 static_cast<double>(*c.original_max_position_embeddings);
      }
      if (s.attention_factor) {
        f.attention_factor = *s.attention_factor;
      } else {
        f.attention_factor =
            factor <= 1.0
                ? 1.0
                : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max)));
      }
      const auto& ext = seq_len > original_max ? s.long_factor : s.short_factor;
      auto pf = detail::position_freqs(base, dim);
      for (int i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / (ext[i] * pf[i]);
      break;
    }
  }
  f.turns.resize(f.inv_freq.size());
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    f.turns[i] = rope::turns_per_position(f.inv_freq[i]);
  }
  return f;
}

}  // namespace lazyattn
