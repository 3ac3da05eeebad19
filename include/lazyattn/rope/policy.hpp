// RopePolicy: a validated RoPE configuration that hands out frequencies per request and says which
// storage forms it can serve.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "lazyattn/error.hpp"
#include "lazyattn/rope/config.hpp"
#include "lazyattn/rope/frequencies.hpp"

namespace lazyattn {

class RopePolicy {
 public:
  explicit RopePolicy(RopeConfig config)
      : config_(std::move(config)),
        base_(std::make_shared<const RopeFrequencies>(compute_rope_frequencies(config_, 0))) {}

  const RopeConfig& config() const { return config_; }
  int head_dim() const { return base_->head_dim; }
  int rotary_dim() const { return base_->rotary_dim; }
  PairLayout pair_layout() const { return base_->pair_layout; }
  RopeType rope_type() const { return config_.rope_scaling.rope_type; }

  // dynamic NTK grows its base with the request length; longrope switches from short_factor to
  // long_factor past the original context. Both need the request, so nothing may be baked in.
  bool depends_on_length() const {
    return rope_type() == RopeType::kDynamic || rope_type() == RopeType::kLongrope;
  }

  // Frequencies for a request whose positions are all below seq_len.
  RopeFrequencies frequencies(std::int64_t seq_len) const {
    if (!depends_on_length()) return *base_;
    return compute_rope_frequencies(config_, seq_len);
  }
  // Frequencies that do not depend on a request (documents encoded standalone, local form).
  const RopeFrequencies& base_frequencies() const { return *base_; }

  // Throws when keys in `form` cannot be served: a local-form key has a rotation baked in, which a
  // length-dependent schedule would have to change per request.
  void check_form(StorageForm form, const char* where) const {
    LAZYATTN_CHECK(form == StorageForm::kRaw || !depends_on_length(), where,
                   ": storage form ", to_string(form), " with rope_type ", to_string(rope_type()),
                   ", expected raw: this schedule depends on the request length");
  }

 private:
  RopeConfig config_;
  std::shared_ptr<const RopeFrequencies> base_;
};

}  // namespace lazyattn
