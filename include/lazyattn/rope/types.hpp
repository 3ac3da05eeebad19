// RoPE vocabulary: how dimensions pair up (PairLayout) and the frequency schedules (RopeType), with
// the names Hugging Face transformers uses for them.
#pragma once

#include <cstdint>
#include <string_view>

#include "lazyattn/config.hpp"
#include "lazyattn/error.hpp"

namespace lazyattn {

// Which dimensions of a head form the 2-d planes RoPE rotates.
//   kHalf        (i, i + rotary_dim/2)  -- GPT-NeoX, Llama, Qwen, Mistral ("rotate_half")
//   kInterleaved (2i, 2i + 1)           -- GPT-J ("rotate_every_two")
enum class PairLayout : std::uint8_t { kHalf, kInterleaved };

// `rope_scaling.rope_type` (or `rope_parameters.rope_type`) in a transformers config.
enum class RopeType : std::uint8_t { kDefault, kLinear, kDynamic, kYarn, kLlama3, kLongrope };

// How a document's keys are held in the store (docs/02-math.md).
//   kRaw   K before RoPE; the kernel rotates each key at its logical position.
//   kLocal K rotated at document-local positions 0..len-1; the kernel rotates the query once per
//          segment by (m - s), s being the segment's logical start.
//   kAbsolute K rotated at its logical positions in the request, as a model's own forward caches
//          it (transformers and vLLM rotate k before attention): tails only, since a document's
//          positions differ per request. It is local form measured from position 0 instead of
//          from the segment's start, so the kernel rotates the query by m - 0.
enum class StorageForm : std::uint8_t { kRaw, kLocal, kAbsolute };

// The position a stored key's rotation is measured from in a segment starting at
// `segment_start`: local-form key i holds R(i) k = R(n - s) k, an absolute-form key R(n) k.
// (Raw keys hold no rotation; their kernels use the logical position itself.)
// Also device code's (the Hopper prefill's table of the segments' query rotations).
constexpr LAZYATTN_HOST_DEVICE std::int64_t rotation_start(StorageForm form,
                                                     std::int64_t segment_start) {
  return form == StorageForm::kAbsolute ? 0 : segment_start;
}

constexpr std::string_view to_string(PairLayout v) {
  return v == PairLayout::kHalf ? "half" : "interleaved";
}

constexpr std::string_view to_string(StorageForm v) {
  return v == StorageForm::kRaw ? "raw" : v == StorageForm::kLocal ? "local" : "absolute";
}

constexpr std::string_view to_string(RopeType v) {
  switch (v) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kLongrope: return "longrope";
  }
  return "unknown";
}

// Parses a transformers rope_type name. Accepts the legacy `type` spellings too ("su" and
// "longrope" are the same schedule in transformers).
inline RopeType parse_rope_type(std::string_view name) {
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "yarn") return RopeType::kYarn;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "longrope" || name == "su") return RopeType::kLongrope;
  detail::throw_error("parse_rope_type: rope_type \"", detail::printable(name),
                      "\", expected one of default, linear, dynamic, yarn, llama3, longrope");
}

}  // namespace lazyattn
