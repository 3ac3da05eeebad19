// RopeFrequencies: one resolved set of RoPE frequencies, and the schedules that produce it from a
// RopeConfig, each following transformers' definition (modeling_rope_utils.py), in float64.
//
// Checked against transformers 5.x (rope_parameters era) and the 4.4x-4.5x code it replaced. What
// transformers does, and lazyattn follows, where it is not the obvious reading of the papers:
//  - Every schedule's exponent is 2i / rotary_dim with rotary_dim = int(head_dim * partial), i.e.
//    partial rotary shrinks the denominator too; the pairs past rotary_dim pass through unchanged.
//  - original_max_position_embeddings for llama3, yarn and longrope: the top-level config field if
//    present (Phi-3's), else rope_scaling's, else max_position_embeddings. transformers 5 fills it
//    in that order when it standardizes rope_parameters.
//  - The attention factor (yarn, longrope) multiplies cos and sin, so q and k are both scaled and
//    the rotary part of every logit grows by its square. It does not depend on the request length.
//  - dynamic: the base grows with L = max(seq_len, max_position_embeddings), where seq_len is the
//    largest position + 1. It reads max_position_embeddings, never
//    original_max_position_embeddings. transformers recomputes only when L exceeds the longest
//    length it has seen and resets once a shorter-than-max request comes, so a request between
//    max_position_embeddings and an earlier, longer one keeps the longer one's frequencies there.
//    lazyattn is stateless: frequencies are a function of this request's length, which equals
//    transformers on a fresh module and during monotone decoding.
//  - yarn: the factor given in the config is used for both the interpolation and the attention
//    factor. Only an unset (null) factor falls back to max_position_embeddings / original. (Some
//    4.x releases replaced the factor by that ratio whenever rope_scaling carried
//    original_max_position_embeddings, which turned Qwen2.5's factor 4 into 1; transformers 5 uses
//    the explicit factor and only warns about the mismatch.)
//    The correction range uses original_max_position_embeddings; it is floored/ceiled unless
//    `truncate` is false (gpt-oss), then clamped to [0, rotary_dim - 1] (rotary_dim, not
//    rotary_dim / 2), and widened by 0.001 when empty. beta_fast / beta_slow of 0 mean the defaults
//    32 / 1 (transformers reads them with `or`). mscale and mscale_all_dim are used only when both
//    are non-zero: attention factor = get_mscale(factor, mscale) / get_mscale(factor,
//    mscale_all_dim). DeepSeek's extra softmax-scale correction (mscale_all_dim squared) lives in
//    its attention module, not in the rotary embedding, and is not part of attention_factor.
//  - longrope: long_factor applies when seq_len > original_max_position_embeddings, else
//    short_factor. The factor defaults to max_position_embeddings / original (Phi-3 gives none);
//    attention factor sqrt(1 + ln(factor) / ln(original)), or 1 when factor <= 1.
//  - llama3: wavelengths 2 pi / w longer than original / low_freq_factor divide w by factor,
//  shorter
//    than original / high_freq_factor keep it, and those in between (both bounds inclusive) blend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>
#include <optional>
#include <utility>
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

inline int rotary_dim_of(const RopeConfig& c) {
  return static_cast<int>(c.head_dim * c.partial_rotary_factor);
}

// The pretraining length llama3, yarn and longrope measure against (see the header comment).
inline std::int64_t original_max_of(const RopeConfig& c) {
  if (c.original_max_position_embeddings) return *c.original_max_position_embeddings;
  if (c.rope_scaling.original_max_position_embeddings) {
    return *c.rope_scaling.original_max_position_embeddings;
  }
  return c.max_position_embeddings;
}

// yarn's and longrope's factor: the configured one, else the ratio of the two context lengths.
inline double scaling_factor_of(const RopeConfig& c) {
  if (c.rope_scaling.factor) return *c.rope_scaling.factor;
  return static_cast<double>(c.max_position_embeddings) / static_cast<double>(original_max_of(c));
}

inline bool finite_positive(double v) { return std::isfinite(v) && v > 0.0; }

// The largest attention factor taken: its square multiplies the logits in float32 kernels, and
// real schedules give 1 to about 2.
inline constexpr double kMaxAttentionFactor = 1e4;

inline void check_rope_config(const RopeConfig& c) {
  LAZYATTN_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "RopeConfig: head_dim ", c.head_dim,
                 ", expected a positive even number");
  LAZYATTN_CHECK(c.rope_theta > 1.0 && std::isfinite(c.rope_theta), "RopeConfig: rope_theta ",
                 c.rope_theta, ", expected a finite number > 1");
  LAZYATTN_CHECK(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0,
                 "RopeConfig: partial_rotary_factor ", c.partial_rotary_factor,
                 ", expected a value in (0, 1]");
  int rotary_dim = rotary_dim_of(c);
  LAZYATTN_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, "RopeConfig: rotary_dim ", rotary_dim,
                 " (head_dim ", c.head_dim, " x partial_rotary_factor ", c.partial_rotary_factor,
                 "), expected an even number >= 2");
  LAZYATTN_CHECK(c.max_position_embeddings >= 0, "RopeConfig: max_position_embeddings ",
                 c.max_position_embeddings, ", expected >= 0 (0 = not given)");
  // Enums set from integers by hand: an unknown value would fall through every switch.
  LAZYATTN_CHECK(c.pair_layout == PairLayout::kHalf || c.pair_layout == PairLayout::kInterleaved,
                 "RopeConfig: pair_layout ", static_cast<int>(c.pair_layout),
                 ", expected 0 (half) or 1 (interleaved)");
  LAZYATTN_CHECK(static_cast<int>(c.rope_scaling.rope_type) <= static_cast<int>(RopeType::kLongrope),
                 "RopeConfig: rope_type ", static_cast<int>(c.rope_scaling.rope_type),
                 ", expected 0 (default) to 5 (longrope)");
  if (c.original_max_position_embeddings) {
    LAZYATTN_CHECK(*c.original_max_position_embeddings > 0,
                   "RopeConfig: original_max_position_embeddings ",
                   *c.original_max_position_embeddings, ", expected > 0");
  }
  const RopeScaling& s = c.rope_scaling;
  const RopeType type = s.rope_type;
  auto t = to_string(type);
  if (s.original_max_position_embeddings) {
    LAZYATTN_CHECK(*s.original_max_position_embeddings > 0,
                   "RopeConfig: rope_scaling.original_max_position_embeddings ",
                   *s.original_max_position_embeddings, ", expected > 0");
  }
  if (s.factor) {
    // Linear, dynamic, llama3 and yarn would shrink the context below 1x; transformers only warns.
    double min = type == RopeType::kLongrope ? 0.0 : 1.0;
    LAZYATTN_CHECK(std::isfinite(*s.factor) && *s.factor >= min && *s.factor > 0.0,
                   "RopeConfig: rope_scaling.factor ", *s.factor, " for rope_type ", t,
                   type == RopeType::kLongrope ? ", expected a finite number > 0"
                                               : ", expected a finite number >= 1");
  } else if (type == RopeType::kLinear || type == RopeType::kDynamic || type == RopeType::kLlama3) {
    detail::throw_error("RopeConfig: rope_type ", t, " needs rope_scaling.factor");
  }
  if (s.attention_factor) {
    LAZYATTN_CHECK(finite_positive(*s.attention_factor) &&
                       *s.attention_factor <= kMaxAttentionFactor,
                   "RopeConfig: rope_scaling.attention_factor ", *s.attention_factor,
                   ", expected in (0, ", kMaxAttentionFactor,
                   "] (its square scales the logits in float32)");
  }
  const bool uses_original =
      type == RopeType::kLlama3 || type == RopeType::kYarn || type == RopeType::kLongrope;
  if (uses_original) {
    LAZYATTN_CHECK(original_max_of(c) > 0, "RopeConfig: rope_type ", t,
                   " needs original_max_position_embeddings (top level or in rope_scaling) or "
                   "max_position_embeddings; got neither");
  }
  if ((type == RopeType::kYarn || type == RopeType::kLongrope) && !s.factor) {
    LAZYATTN_CHECK(c.max_position_embeddings > 0, "RopeConfig: rope_type ", t,
                   " without rope_scaling.factor takes max_position_embeddings / "
                   "original_max_position_embeddings, but max_position_embeddings is ",
                   c.max_position_embeddings);
  }
  switch (type) {
    case RopeType::kDefault:
    case RopeType::kLinear: break;
    case RopeType::kDynamic:
      LAZYATTN_CHECK(c.max_position_embeddings > 0, "RopeConfig: max_position_embeddings ",
                     c.max_position_embeddings, " for rope_type dynamic, expected > 0");
      LAZYATTN_CHECK(rotary_dim >= 4, "RopeConfig: rotary_dim ", rotary_dim,
                     " for rope_type dynamic, expected >= 4 (the base grows by a power "
                     "rotary_dim / (rotary_dim - 2))");
      break;
    case RopeType::kYarn: {
      double factor = scaling_factor_of(c);
      LAZYATTN_CHECK(
          std::isfinite(factor) && factor >= 1.0, "RopeConfig: yarn factor ", factor,
          " (max_position_embeddings / original_max_position_embeddings), expected >= 1");
      for (auto [name, v] :
           {std::pair{"beta_fast", s.beta_fast}, std::pair{"beta_slow", s.beta_slow}}) {
        if (v) {
          LAZYATTN_CHECK(std::isfinite(*v) && *v >= 0.0, "RopeConfig: rope_scaling.", name, " ", *v,
                         ", expected a finite number > 0 (0 = the default)");
        }
      }
      double beta_fast = s.beta_fast && *s.beta_fast != 0.0 ? *s.beta_fast : 32.0;
      double beta_slow = s.beta_slow && *s.beta_slow != 0.0 ? *s.beta_slow : 1.0;
      LAZYATTN_CHECK(beta_fast >= beta_slow, "RopeConfig: rope_scaling.beta_fast ", beta_fast,
                     " < beta_slow ", beta_slow, ", expected beta_fast >= beta_slow");
      for (auto [name, v] :
           {std::pair{"mscale", s.mscale}, std::pair{"mscale_all_dim", s.mscale_all_dim}}) {
        if (v) {
          LAZYATTN_CHECK(std::isfinite(*v), "RopeConfig: rope_scaling.", name, " ", *v,
                         ", expected a finite number");
        }
      }
      break;
    }
    case RopeType::kLlama3: {
      LAZYATTN_CHECK(s.low_freq_factor,
                     "RopeConfig: rope_type llama3 needs rope_scaling.low_freq_factor");
      LAZYATTN_CHECK(s.high_freq_factor,
                     "RopeConfig: rope_type llama3 needs rope_scaling.high_freq_factor");
      LAZYATTN_CHECK(finite_positive(*s.low_freq_factor), "RopeConfig: low_freq_factor ",
                     *s.low_freq_factor, ", expected a finite number > 0");
      LAZYATTN_CHECK(std::isfinite(*s.high_freq_factor) && *s.high_freq_factor > *s.low_freq_factor,
                     "RopeConfig: high_freq_factor ", *s.high_freq_factor,
                     ", expected a finite number > low_freq_factor ", *s.low_freq_factor);
      break;
    }
    case RopeType::kLongrope: {
      auto half = static_cast<std::size_t>(rotary_dim / 2);
      for (auto [name, v] :
           {std::pair{"short_factor", &s.short_factor}, std::pair{"long_factor", &s.long_factor}}) {
        LAZYATTN_CHECK(v->size() == half, "RopeConfig: longrope ", name, " has ", v->size(),
                       " entries, expected rotary_dim / 2 = ", half);
        for (std::size_t i = 0; i < v->size(); ++i) {
          LAZYATTN_CHECK(finite_positive((*v)[i]), "RopeConfig: longrope ", name, "[", i, "] ",
                         (*v)[i], ", expected a finite number > 0");
        }
      }
      double factor = scaling_factor_of(c);
      LAZYATTN_CHECK(std::isfinite(factor) && factor > 0.0, "RopeConfig: longrope factor ", factor,
                     ", expected a finite number > 0");
      if (!s.attention_factor && factor > 1.0) {
        LAZYATTN_CHECK(original_max_of(c) >= 2,
                       "RopeConfig: longrope original_max_position_embeddings ", original_max_of(c),
                       ", expected >= 2 (the attention factor divides by its log)");
      }
      break;
    }
  }
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

inline void yarn_frequencies(const RopeConfig& c, RopeFrequencies& f) {
  const RopeScaling& s = c.rope_scaling;
  const int dim = f.rotary_dim;
  const double base = c.rope_theta;
  const double factor = scaling_factor_of(c);
  const auto original_max = static_cast<double>(original_max_of(c));
  if (s.attention_factor) {
    f.attention_factor = *s.attention_factor;
  } else if (s.mscale && s.mscale_all_dim && *s.mscale != 0.0 && *s.mscale_all_dim != 0.0) {
    f.attention_factor =
        yarn_get_mscale(factor, *s.mscale) / yarn_get_mscale(factor, *s.mscale_all_dim);
  } else {
    f.attention_factor = yarn_get_mscale(factor, 1.0);
  }
  const double beta_fast = s.beta_fast && *s.beta_fast != 0.0 ? *s.beta_fast : 32.0;
  const double beta_slow = s.beta_slow && *s.beta_slow != 0.0 ? *s.beta_slow : 1.0;
  // The pair index whose wavelength fits `num_rotations` times into the original context.
  auto correction_dim = [&](double num_rotations) {
    return (dim * std::log(original_max / (num_rotations * 2.0 * std::numbers::pi))) /
           (2.0 * std::log(base));
  };
  double low = correction_dim(beta_fast);
  double high = correction_dim(beta_slow);
  if (s.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  auto pf = position_freqs(base, dim);
  for (int i = 0; i < dim / 2; ++i) {
    // ramp 0: pure extrapolation (high frequencies kept), ramp 1: pure interpolation (/ factor).
    double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    double extrapolation = 1.0 / pf[i];
    double interpolation = 1.0 / (factor * pf[i]);
    f.inv_freq[i] = interpolation * ramp + extrapolation * (1.0 - ramp);
  }
}

inline void llama3_frequencies(const RopeConfig& c, RopeFrequencies& f) {
  const RopeScaling& s = c.rope_scaling;
  const double factor = *s.factor;
  const double low_ff = *s.low_freq_factor;
  const double high_ff = *s.high_freq_factor;
  const auto old_len = static_cast<double>(original_max_of(c));
  const double low_freq_wavelen = old_len / low_ff;
  const double high_freq_wavelen = old_len / high_ff;
  auto pf = position_freqs(c.rope_theta, f.rotary_dim);
  for (int i = 0; i < f.num_pairs(); ++i) {
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
}

inline void longrope_frequencies(const RopeConfig& c, std::int64_t seq_len, RopeFrequencies& f) {
  const RopeScaling& s = c.rope_scaling;
  const std::int64_t original_max = original_max_of(c);
  const double factor = scaling_factor_of(c);
  if (s.attention_factor) {
    f.attention_factor = *s.attention_factor;
  } else {
    f.attention_factor =
        factor <= 1.0
            ? 1.0
            : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max)));
  }
  const auto& ext = seq_len > original_max ? s.long_factor : s.short_factor;
  auto pf = position_freqs(c.rope_theta, f.rotary_dim);
  for (int i = 0; i < f.num_pairs(); ++i) f.inv_freq[i] = 1.0 / (ext[i] * pf[i]);
}

}  // namespace detail

// The frequencies a config gives a request whose largest position is seq_len - 1 (transformers'
// seq_len = max(position_ids) + 1). Only dynamic and longrope read seq_len; pass 0 for "no
// request", which gives what a freshly built transformers module holds.
inline RopeFrequencies compute_rope_frequencies(const RopeConfig& c, std::int64_t seq_len = 0) {
  detail::check_rope_config(c);
  const RopeScaling& s = c.rope_scaling;
  RopeFrequencies f;
  f.head_dim = c.head_dim;
  f.rotary_dim = detail::rotary_dim_of(c);
  f.pair_layout = c.pair_layout;
  const int dim = f.rotary_dim;
  const int half = dim / 2;
  f.inv_freq.resize(static_cast<std::size_t>(half));

  switch (s.rope_type) {
    case RopeType::kDefault:
    case RopeType::kLinear: {
      auto pf = detail::position_freqs(c.rope_theta, dim);
      double div = s.rope_type == RopeType::kLinear ? *s.factor : 1.0;
      for (int i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / pf[i] / div;
      break;
    }
    case RopeType::kDynamic: {
      // NTK-aware base growth once the request outgrows the trained context.
      double factor = *s.factor;
      auto max_pos = static_cast<double>(c.max_position_embeddings);
      double len = std::max(static_cast<double>(seq_len), max_pos);
      double base = c.rope_theta * std::pow((factor * len / max_pos) - (factor - 1.0),
                                            static_cast<double>(dim) / (dim - 2));
      auto pf = detail::position_freqs(base, dim);
      for (int i = 0; i < half; ++i) f.inv_freq[i] = 1.0 / pf[i];
      break;
    }
    case RopeType::kYarn: detail::yarn_frequencies(c, f); break;
    case RopeType::kLlama3: detail::llama3_frequencies(c, f); break;
    case RopeType::kLongrope: detail::longrope_frequencies(c, seq_len, f); break;
  }
  // What the arithmetic can hold, whatever the schedule derived: finite positive frequencies
  // (a tiny longrope factor, say, gives an infinite one) and an attention factor whose square,
  // the query's scale, stays far inside float32 (it multiplies the logits in the kernels).
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    LAZYATTN_CHECK(std::isfinite(f.inv_freq[i]) && f.inv_freq[i] > 0.0, "RopeConfig: rope_type ",
                   to_string(s.rope_type), " gives pair ", i, " the frequency ", f.inv_freq[i],
                   " (request length ", seq_len,
                   "), expected a finite number > 0: check the config's factors");
  }
  LAZYATTN_CHECK(std::isfinite(f.attention_factor) && f.attention_factor > 0.0 &&
                     f.attention_factor <= detail::kMaxAttentionFactor,
                 "RopeConfig: rope_type ", to_string(s.rope_type), " gives attention factor ",
                 f.attention_factor, ", expected in (0, ", detail::kMaxAttentionFactor,
                 "] (its square scales the logits in float32)");
  f.turns.resize(f.inv_freq.size());
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    f.turns[i] = rope::turns_per_position(f.inv_freq[i]);
  }
  return f;
}

}  // namespace lazyattn
